"""A command line generated from a flat config dataclass: one flag per field.

The help text of each flag is the one-line docstring written under the field, so the
config class is the single place where a knob is named, typed, defaulted and explained.
This file adds only what a reader of `--help` needs beyond that: the allowed values of
the fields that have a fixed set (read when the parser is built, so a typo lists them all,
rows registered in kernel.METHOD_TABLE later included), the groups and order in which the
flags are shown, which of them `--help` shows first (the rest, and the groups' texts, in
`--help-all`; every flag parses either way), and a few example command lines. A field that
is itself a config (TrainConfig.loss: LossConfig) contributes its fields as flags of their
own, so the command line stays flat. Flags are never abbreviated (`--iteration 2` is an
error, not --iterations); an unknown flag's error names the nearest flags, and answers the
names other trainers use (KNOWN_AS: --learning-rate) with this one's (--lr).

Why not tyro (what CleanRL uses): it can flatten LossConfig's --loss.method into --method
(tyro.conf.OmitArgPrefixes), but it groups flags only by nested dataclass, so a flat
TrainConfig is one group; it lists choices for Literal and Enum annotations, fixed when
the class is defined, where --method's are the rows of a table that may grow; and it
reports a bad value in a multi-line box. This file keeps the groups, a short --help, the
choices and the one-line errors in about 300 lines without a dependency.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import inspect
import sys
import textwrap
import types
import typing

from ..config import ANNEALS
from ..kernel import AGG_MODES, METHOD_TABLE, SCALES, WEIGHT_AGAINST
from ..models import PROMPT_FORMATS, WEIGHT_DTYPES, check_device
from ..protocol import PROTOCOLS


def choices() -> dict[str, tuple]:
    """Allowed values by field name, for every config this module parses, read when a parser is built: a method
    registered in kernel.METHOD_TABLE after import (a study's own row) is a choice of --method too."""
    return {"method": tuple(METHOD_TABLE), "methods": tuple(METHOD_TABLE), "agg": AGG_MODES, "adv_scale": SCALES,
            "dtype": WEIGHT_DTYPES, "sft_anneal": ANNEALS, "weight_against": WEIGHT_AGAINST,
            "prompt_format": PROMPT_FORMATS}


DEVICES = "{auto,cpu,cuda,cuda:N}"
METAVARS = {int: "INT", float: "FLOAT", str: "STR"}  # what a flag takes, shorter than its name in capitals
# What users of other RL trainers (TRL's GRPOConfig, CleanRL's PPO) call a flag of train.py: an unknown flag of
# one of these names, or a near spelling of one, is answered with this project's flag. Suggested, never accepted.
KNOWN_AS = {
    "learning_rate": "lr",
    "num_generations": "group_size",
    "max_completion_length": "max_new_tokens",
    "update_epochs": "epochs",
    "epsilon": "eps_low",
    "epsilon_high": "eps_high",
}

# Flag groups of train.py, in the order --help shows them; a field listed in no group is
# shown last under "other" (tests/step/test_cli.py checks that none is).
TRAIN_GROUPS = {
    "run and model": (
        "Which model to train and where the run goes (runs/<name>/: metrics.jsonl, plots.png, "
        "checkpoints). The tiny models start from a supervised warm start (shipped for the defaults, else trained and cached).",
        ["model", "name", "out_dir", "resume", "seed", "save_every", "keep_checkpoints", "plots",
         "sft_steps", "sft_anneal", "sft_batch", "sft_lr", "sft_label_smoothing", "sft_task_size", "sft_full_share",
         "sft_seed", "sft_from_scratch"]),
    "task": (
        "What the model must answer and how the held-out split is scored.",
        ["task", "task_size", "heldout_file", "prompt_format", "eval_every", "eval_problems", "eval_samples"]),
    "the RL loop": (
        "One iteration: sample group_size completions for each of prompts_per_iteration prompts, "
        "reward them, then take `reuse` optimizer steps on that batch (epochs x mini-batches).",
        ["iterations", "reuse", "epochs", "lag", "sampler_dtype", "group_size", "prompts_per_iteration", "lr",
         "lr_warmup_ratio", "max_new_tokens", "temperature", "adv_scale", "max_grad_norm", "weight_decay",
         "router_aux_coef"]),
    "the kernel": (
        "The policy loss (docs/math.md): every method is a coefficient phi(w) on A * grad log pi, "
        "w = pi(y|x) / mu(y|x) the sequence weight against the policy that sampled y.",
        ["method", "alpha_pos", "beta_pos", "lambda_pos", "alpha_neg", "beta_neg", "lambda_neg", "agg", "eps_low",
         "eps_high", "length_norm", "norm_len", "diag_eps", "dual_clip_c", "sapo_tau_pos",
         "sapo_tau_neg", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg",
         "log_w_max", "weight_against", "correction", "correction_min", "correction_max", "opsm_delta"]),
    "systems": (
        "Devices, precision, memory and parallelism; none of these changes the math.",
        ["device", "dtype", "threads", "autocast", "gradient_checkpointing", "micro_batch",
         "rollout_batch", "logprob_chunk_mb", "packed_forward", "shared_prompts", "lean_sampler",
         "fsdp"]),
}

TRAIN_EXAMPLES = """\
examples:
  python train.py                                   # ReSPO at reuse 4 on the offline tiny Qwen3 (about 1 min)
  python train.py --method grpo --reuse 8            # a clipped baseline at the paper's reuse N = 8 (about 1.5 min)
  python train.py --model tiny-qwen3-moe            # 8 experts, top-2 (about 1 min)
  python train.py --beta-pos 0.3 --lambda-pos 1.43 --name respo-b0.3  # other branches: a run of their own
  python train.py --model Qwen/Qwen3-0.6B --task data.jsonl --sft-steps 0 --device cuda --autocast
  torchrun --nproc_per_node 4 train.py --fsdp --model Qwen/Qwen3-0.6B --dtype bfloat16

Times on 2 busy CPU cores from the shipped warm starts. Metrics: docs/training.md; math: docs/math.md."""

EVAL_EXAMPLES = """\
examples:
  python eval.py --model runs/<name>                # a run's latest checkpoint, on the task it trained on
  python eval.py --model runs/<name>/checkpoints/iter-000040 --samples 8 --k 8
  python eval.py --model Qwen/Qwen3-0.6B --task test.jsonl --max-new-tokens 1024 --device cuda"""

# What `python train.py --help` shows, in TRAIN_GROUPS' order: what a default run and a real Qwen3 on a GPU
# are set with first. Every other flag parses all the same and is listed by --help-all.
TRAIN_FIRST = {
    "model", "name", "resume",
    "task",
    "iterations", "reuse", "group_size", "prompts_per_iteration", "lr", "max_new_tokens",
    "method", "beta_pos",
    "device", "dtype", "autocast", "gradient_checkpointing", "micro_batch", "logprob_chunk_mb", "fsdp",
}

# Named flag sets per config class (--protocol NAME): each sets the defaults of its flags, a flag given beside it wins.
PRESETS = {"TrainConfig": PROTOCOLS}

# Layout of --help per config class: (groups, examples, the flags --help shows; None: all of them).
# Classes not named here get one flag list in field order and no examples.
LAYOUTS = {
    "TrainConfig": (TRAIN_GROUPS, TRAIN_EXAMPLES, TRAIN_FIRST),
    "EvalConfig": (None, EVAL_EXAMPLES, None),
}


def field_docs(cls) -> dict[str, str]:
    """The string literal under each field of a dataclass (and of its bases)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                docs[node.target.id] = after.value.value.strip()
    return docs


def _flag_type(hint):
    """(element type, is_list) of a field's annotation, with Optional[...] unwrapped."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in args if a is not type(None))
        args = typing.get_args(hint)
    if typing.get_origin(hint) in (list, tuple):
        return args[0], True
    return hint, False


def device_name(value: str) -> str:
    """argparse type of --device, checked by models.check_device."""
    try:
        return check_device(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from auto, cpu, cuda, cuda:N)") from None


WIDTH = 88  # of the whole help, the descriptions' and the flags' alike, in a terminal or a pipe


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the examples' line breaks; shows a default only where there is one (None is explained in the help)."""

    def __init__(self, prog):
        super().__init__(prog, width=WIDTH)

    def _get_help_string(self, action):
        if action.default is None:
            return action.help
        return super()._get_help_string(action)

    def _split_lines(self, text, width):
        # A word is never cut (the default run name <task>-<model>-... is one word): a longer one overhangs.
        return textwrap.wrap(" ".join(text.split()), width, break_long_words=False, break_on_hyphens=False)


class HelpAll(argparse.Action):
    """--help-all: every flag, grouped, then exit (as --help does with the everyday ones)."""

    def __init__(self, option_strings, dest, full_help, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.full_help = full_help

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(self.full_help())
        parser.exit()


def wrap(text: str, width: int = WIDTH) -> str:
    return textwrap.fill(" ".join(text.split()), width)


def build_parser(cls, description: str | None = None, prog: str | None = None,
                 epilog: str | None = None, every_flag: bool = False) -> argparse.ArgumentParser:
    """The parser of cls; its help lists the flags LAYOUTS names first (every_flag: all of them), each flag parses."""
    groups, examples, first = LAYOUTS.get(cls.__name__, (None, None, None))
    parser = argparse.ArgumentParser(prog=prog, description=wrap(description or cls.__doc__ or ""),
                                     epilog=epilog or examples, formatter_class=HelpFormatter,
                                     usage="%(prog)s [options]", allow_abbrev=False)
    fields = flat_fields(cls)
    shown = set(fields) if every_flag or first is None else first
    if len(shown) < len(fields):
        parser.add_argument("--help-all", action=HelpAll, help=f"show all {len(fields)} flags, grouped, and exit",
                            full_help=lambda: build_parser(cls, description, prog, epilog, True).format_help())
    presets = PRESETS.get(cls.__name__)
    if presets:
        parser.add_argument("--protocol", choices=tuple(presets), default=None,
                            help="paper: the authors' training protocol (nano_respo/protocol.py); flags beside it win")
    layout = [(None, None, list(fields))]
    if groups:
        listed = {name for _, names in groups.values() for name in names}
        layout = [(title, text, [n for n in names if n in fields]) for title, (text, names) in groups.items()]
        layout.append(("other", None, [n for n in fields if n not in listed]))
    allowed = choices()
    for title, text, names in layout:
        target = parser
        if title and shown & set(names):  # the groups' texts in the full listing only, so --help stays short
            target = parser.add_argument_group(title, wrap(text, WIDTH - 2) if text and shown == set(fields) else None)
        for name in names:
            add_flag(target, *fields[name], allowed.get(name), hidden=name not in shown)
    return parser


def flat_fields(cls) -> dict[str, tuple]:
    """name -> (field, type hint, docstring) of every flag, a composed config's fields in its place."""
    hints, docs, fields = typing.get_type_hints(cls), field_docs(cls), {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            fields.update(flat_fields(hints[f.name]))
        else:
            fields[f.name] = (f, hints[f.name], docs.get(f.name, ""))
    return fields


def add_flag(target, f: dataclasses.Field, hint, doc: str, allowed: tuple | None = None,
             hidden: bool = False) -> None:
    """The flag of one field; a hidden one parses but is left out of the help."""
    flag = "--" + f.name.replace("_", "-")
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    kind, is_list = _flag_type(hint)
    help_text = doc.replace("%", "%%")  # argparse formats help with %
    if default is None:
        help_text = help_text.replace("None = ", "default: ")  # the field's docstring says what None means
    if hidden:
        help_text = argparse.SUPPRESS
    if kind is bool:
        target.add_argument(flag, dest=f.name, default=default, help=help_text,
                            action=argparse.BooleanOptionalAction)
    elif f.name == "device":
        target.add_argument(flag, dest=f.name, default=default, help=help_text, type=device_name,
                            metavar=DEVICES)
    else:
        target.add_argument(flag, dest=f.name, default=default, help=help_text, type=kind,
                            nargs="+" if is_list else None, choices=allowed,
                            metavar=None if allowed else METAVARS.get(kind))


def parse_config(cls, argv=None, description: str | None = None, prog: str | None = None,
                 epilog: str | None = None):
    """Parse argv into cls; a config that rejects a value exits with its one-line message."""
    parser = build_parser(cls, description, prog, epilog)
    namespace, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.error(unrecognized(cls, unknown))
    if getattr(namespace, "protocol", None):  # parsed again over the preset's defaults, so given flags win
        parser.set_defaults(**PRESETS[cls.__name__][namespace.protocol])
        namespace = parser.parse_args(argv)
    values = {k: v for k, v in vars(namespace).items() if k != "protocol"}
    try:
        return from_flat(cls, values)
    except ValueError as error:
        parser.error(str(error))


def unrecognized(cls, words: list[str]) -> str:
    """argparse's message for arguments no flag takes, with the flag each unknown one most likely meant: the
    nearest spellings (all that come equally near), a name of another trainer (KNOWN_AS) answered with ours."""
    flags = {}  # a name as typed, underscores for dashes -> the flag it names
    for name, (_, hint, _) in flat_fields(cls).items():
        flags[name] = "--" + name.replace("_", "-")
        if _flag_type(hint)[0] is bool:
            flags[f"no_{name}"] = "--no-" + name.replace("_", "-")
    flags |= {alias: flags[name] for alias, name in KNOWN_AS.items() if name in flags}
    meant = {}
    for word in (w.split("=", 1)[0] for w in words if w.startswith("--")):
        typed = word.removeprefix("--").replace("-", "_")
        nearness = {name: difflib.SequenceMatcher(None, typed, name).ratio() for name in flags}
        best = max(nearness.values())
        if best >= 0.6:  # difflib.get_close_matches' cutoff
            meant[word] = " or ".join(sorted({flags[name] for name, near in nearness.items() if near == best}))
    message = f"unrecognized arguments: {' '.join(words)}"
    if len(meant) == 1:
        return f"{message}; did you mean {next(iter(meant.values()))}?"
    if meant:
        return f"{message}; did you mean {', '.join(f'{flag} for {word}' for word, flag in meant.items())}?"
    return message


def from_flat(cls, values: dict):
    """cls from one flat dict of field values, a composed config built from the names it declares."""
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: from_flat(hints[f.name], values) if dataclasses.is_dataclass(hints[f.name])
                  else values[f.name] for f in dataclasses.fields(cls) if f.name in values
                  or dataclasses.is_dataclass(hints[f.name])})


def flat(config) -> dict:
    """The inverse of from_flat: one dict of every field, a composed config's fields at the top."""
    values = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        values.update(flat(value) if dataclasses.is_dataclass(value) else {f.name: value})
    return values
