"""A command line made from a config dataclass: one flag per field, its help the docstring under the field.

    cfg = parse_config(TrainConfig, first=FIRST_FLAGS, presets=PROTOCOLS)

A field that is itself a dataclass (TrainConfig.loss: the kernel's LossConfig) gives its fields as flags of
their own, so the command line stays flat (--method, not --loss.method); a prefix in the field's metadata names
them (TrainConfig.sft: the warm start's WarmStartConfig, whose `steps` is --sft-steps). `--help` lists the `first` flags,
`--help-all` every one; all of them parse either way. A mistyped flag is answered in one line with the
nearest flag (and the names other trainers use, KNOWN_AS, with ours); a value the config refuses (its
__post_init__ raises ValueError) likewise, before anything heavy loads.

Why plain argparse and not tyro (CleanRL's choice): tyro nests a composed config's flags (--loss.method) and
reports a bad value in a multi-line box; --method's choices are the rows of kernel.METHOD_TABLE, which a study
may extend after import, where tyro reads choices from a Literal fixed when the class is defined. What this
module adds to argparse (docstrings as help, flattening, choices, the near-miss line) is about 130 lines.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import inspect
import math
import sys
import textwrap
import typing

# What users of other RL trainers (TRL's GRPOConfig, CleanRL's PPO) call a flag: suggested, never accepted.
KNOWN_AS = {"learning_rate": "lr", "num_generations": "group_size", "max_completion_length": "max_new_tokens",
            "update_epochs": "epochs", "epsilon": "eps_low", "epsilon_high": "eps_high"}
WIDTH = 96


def field_docs(cls) -> dict[str, str]:
    """The string literal written under each field of a dataclass."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    return {node.target.id: " ".join(after.value.value.split()) for node, after in zip(body, body[1:])
            if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)}


def flat_fields(cls, prefix: str = "") -> dict[str, tuple]:
    """name -> (field, type, docstring, the dataclass that declares it), a composed config's fields in its place,
    each name after the composing field's metadata["prefix"] if it has one (TrainConfig.sft: --sft-steps)."""
    hints, docs, out = typing.get_type_hints(cls), field_docs(cls), {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out.update(flat_fields(hints[f.name], prefix + f.metadata.get("prefix", "")))
        else:
            out[prefix + f.name] = (f, hints[f.name], docs.get(f.name, ""), cls)
    return out


def element_type(hint):
    """int of `int | None`, and so on."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def build_parser(cls, first=None, presets=None, choices=None, epilog=None, every_flag=False):
    """The parser of cls; its help shows the `first` flags (all with every_flag), grouped by declaring class."""
    fields = flat_fields(cls)
    shown = set(fields) if every_flag or first is None else set(first)
    parser = argparse.ArgumentParser(description=cls.__doc__, epilog=epilog, allow_abbrev=False,
                                     usage="%(prog)s [options]", formatter_class=lambda prog: HelpFormatter(prog))
    if len(shown) < len(fields):
        full = lambda: build_parser(cls, first, presets, choices, epilog, True).format_help()  # noqa: E731
        parser.add_argument("--help-all", action=HelpAll, full_help=full,
                            help=f"all {len(fields)} flags, grouped, with their whole help")
    if presets:
        parser.add_argument("--protocol", choices=tuple(presets), default=None,
                            help="named defaults, flags beside it win (nano_respo/protocol.py)")
    groups = {}
    for name, (f, hint, doc, owner) in fields.items():
        if name not in shown:
            doc = argparse.SUPPRESS
        elif not every_flag:  # --help: the docstring's first clause, so the list stays one screen
            doc = doc.split("; ")[0].rstrip(".")
        elif every_flag and owner not in groups:
            groups[owner] = parser.add_argument_group(owner.__doc__.splitlines()[0].rstrip("."))
        target = groups.get(owner, parser)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        kind, flag = element_type(hint), "--" + name.replace("_", "-")
        if kind is bool:
            target.add_argument(flag, dest=name, default=default, help=doc, action=argparse.BooleanOptionalAction)
        else:
            allowed = (choices or {}).get(name)
            target.add_argument(flag, dest=name, default=default, help=doc, type=kind, choices=allowed,
                                metavar=None if allowed else kind.__name__.upper())
    return parser


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each flag with its default; the examples keep their lines."""

    def __init__(self, prog):
        super().__init__(prog, width=WIDTH, max_help_position=34)

    def _get_help_string(self, action):  # a None default is explained by the field's docstring
        shown = action.default not in (None, argparse.SUPPRESS) and action.default is not False
        return f"{action.help} [{action.default}]".replace("%", "%%") if shown else (action.help or "").replace("%", "%%")


class HelpAll(argparse.Action):
    def __init__(self, option_strings, dest, full_help, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.full_help = full_help

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(self.full_help())
        parser.exit()


def parse_config(cls, argv=None, first=None, presets=None, choices=None, epilog=None):
    """argv parsed into cls; an unknown flag or a value cls refuses exits with status 2 and one line."""
    parser = build_parser(cls, first, presets, choices, epilog)
    namespace, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.error(unrecognized(cls, unknown))
    if getattr(namespace, "protocol", None):  # parsed again over the preset's defaults, so given flags win
        parser.set_defaults(**presets[namespace.protocol])
        namespace = parser.parse_args(argv)
    try:
        return from_flat(cls, {k: v for k, v in vars(namespace).items() if k != "protocol"})
    except ValueError as error:
        parser.error(str(error))


def unrecognized(cls, words: list[str]) -> str:
    """argparse's message, with the flag each unknown one most likely meant."""
    flags = {}
    for name, (_, hint, _, _) in flat_fields(cls).items():
        flags[name] = "--" + name.replace("_", "-")
        if element_type(hint) is bool:
            flags["no_" + name] = "--no-" + name.replace("_", "-")
    flags |= {alias: flags[name] for alias, name in KNOWN_AS.items() if name in flags}
    meant, unknown = [], [w.split("=", 1)[0] for w in words if w.startswith("--")]
    for word in unknown:
        close = difflib.get_close_matches(word.removeprefix("--").replace("-", "_"), flags, n=1)
        if close:
            meant.append(f"{flags[close[0]]} for {word}" if len(unknown) > 1 else flags[close[0]])
    return f"unrecognized arguments: {' '.join(words)}" + (f"; did you mean {', '.join(meant)}?" if meant else "")


def from_flat(cls, values: dict, prefix: str = ""):
    """cls from one flat dict of field values (flat_fields' names; those not given keep their defaults)."""
    hints, given = typing.get_type_hints(cls), {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]) and not dataclasses.is_dataclass(values.get(prefix + f.name)):
            given[f.name] = from_flat(hints[f.name], values, prefix + f.metadata.get("prefix", ""))
        elif prefix + f.name in values:  # a value, or a composed config given whole (loss=LossConfig(...))
            given[f.name] = values[prefix + f.name]
    return cls(**given)


def flat(config, prefix: str = "") -> dict:
    """The inverse of from_flat: one dict of every field, a composed config's fields at the top."""
    values = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        values.update(flat(value, prefix + f.metadata.get("prefix", "")) if dataclasses.is_dataclass(value)
                      else {prefix + f.name: value})
    return values


def check_values(config, at_least_one=(), positive=(), in_range=None, choices=None, prefix: str = "") -> None:
    """A config's __post_init__ checks: a ValueError naming the first field (as its flag's name, after `prefix`) out
    of bounds: ints at least 1, finite floats above 0, values in [low, high) (None passes these), one of choices."""
    in_range, choices = in_range or {}, choices or {}
    for name, value in vars(config).items():
        if value is None or not (name in at_least_one or name in positive or name in in_range or name in choices):
            continue
        flag = prefix + name
        if name in at_least_one and value < 1:
            raise ValueError(f"{flag}: must be >= 1, got {value}")
        if name in positive and not (math.isfinite(value) and value > 0):
            raise ValueError(f"{flag}: must be > 0, got {value}")
        low, high = in_range.get(name, (-math.inf, math.inf))
        if name in in_range and not low <= value < high:
            raise ValueError(f"{flag}: must " + (f"be >= {low}" if high == math.inf else f"lie in [{low}, {high})")
                             + f", got {value}")
        if name in choices and value not in choices[name]:
            raise ValueError(f"{flag}: choose one of {', '.join(choices[name])}, got {value!r}")
