"""The command lines as a newcomer meets them: choices on a typo, grouped help, examples, bare eval.py."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from nano_respo import kernel, trainer
from nano_respo.run import cli  # noqa: E402
from nano_respo.run.cli import TRAIN_GROUPS, build_parser, parse_config  # noqa: E402
from nano_respo.run.evaluate_cli import EvalConfig, run_eval  # noqa: E402
from nano_respo.config import TrainConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flag, choices", [
    ("--method", tuple(kernel.METHOD_TABLE)),
    ("--agg", kernel.AGG_MODES),
    ("--adv-scale", kernel.SCALES),
    ("--dtype", cli.WEIGHT_DTYPES),
    ("--device", ("auto", "cpu", "cuda", "cuda:N")),
])
def test_a_typo_exits_and_lists_every_choice(flag, choices, capsys):
    with pytest.raises(SystemExit) as stop:
        parse_config(TrainConfig, [flag, "respoo"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: invalid choice: 'respoo'" in err
    for choice in choices:
        assert choice in err


def test_every_choice_is_accepted():
    for method in kernel.METHOD_TABLE:
        assert parse_config(TrainConfig, ["--method", method]).loss.method == method
    for agg in kernel.AGG_MODES:
        assert parse_config(TrainConfig, ["--agg", agg]).loss.agg == agg
    for device in ("auto", "cpu", "cuda", "cuda:3"):
        assert parse_config(TrainConfig, ["--device", device]).device == device


def help_of(cls, **kwargs) -> str:
    return build_parser(cls, **kwargs).format_help()


@pytest.mark.parametrize("cls", [TrainConfig, EvalConfig])
def test_help_has_no_unexpanded_placeholder(cls):
    text = help_of(cls, every_flag=True)
    constants = {name for module in (kernel, trainer, cli) for name in vars(module)
                 if re.fullmatch(r"[A-Z][A-Z0-9_]{2,}", name)}
    assert constants >= {"METHODS", "METHOD_TABLE", "AGG_MODES", "SCALES"}
    found = {word for word in re.findall(r"[A-Z][A-Z0-9_]{2,}", text) if word in constants}
    assert not found, f"help names code constants instead of their values: {found}"
    assert "None" not in text  # every 'None = ...' reads 'default: ...'


def test_train_flags_are_grouped_everyday_ones_first():
    names = [name for _, group in TRAIN_GROUPS.values() for name in group]
    assert len(names) == len(set(names)), "a field is listed in two groups"
    assert set(names) == set(cli.flat_fields(TrainConfig)), "a field is in no group"
    for text in (help_of(TrainConfig), help_of(TrainConfig, every_flag=True)):
        headings = [line[:-1] for line in text.splitlines() if line and not line[0].isspace() and line.endswith(":")]
        assert headings == ["options", *TRAIN_GROUPS, "examples"]
    text = help_of(TrainConfig, every_flag=True)
    position = {flag: text.index(f"\n  {flag} ") for flag in ("--model", "--task", "--iterations", "--reuse",
                                                               "--method", "--alpha-pos", "--device")}
    assert position["--model"] < position["--task"] < position["--iterations"] < position["--method"]
    assert position["--reuse"] < position["--alpha-pos"] < position["--device"]


def test_the_train_help_shows_the_first_flags_and_help_all_every_flag(capsys):
    """--help fits a screen with what a default run and a real Qwen3 on a GPU are set with; --help-all lists every
    flag in the same groups; a flag left out of --help parses all the same."""
    flags = {name: "--" + name.replace("_", "-") for name in cli.flat_fields(TrainConfig)}
    assert cli.TRAIN_FIRST <= set(flags)
    short = help_of(TrainConfig)
    assert len(short.splitlines()) <= 80, "--help fits 80 lines"
    shown = {name for name, flag in flags.items() if re.search(rf"\n  {flag}[ ,\n]", short)}
    assert shown == cli.TRAIN_FIRST
    assert "--help-all" in short and "--sft-steps" in cli.TRAIN_EXAMPLES  # an example may use a flag --help omits
    with pytest.raises(SystemExit) as stop:
        parse_config(TrainConfig, ["--help-all"])
    assert stop.value.code == 0
    full = capsys.readouterr().out
    assert full == help_of(TrainConfig, every_flag=True)
    assert all(re.search(rf"\n  {flag}[ ,\n]", full) for flag in flags.values())
    cfg = parse_config(TrainConfig, ["--sft-steps", "0", "--alpha-neg", "2", "--no-lean-sampler"])
    assert (cfg.sft_steps, cfg.loss.alpha_neg, cfg.lean_sampler) == (0, 2.0, False)


def test_method_choices_are_read_when_the_parser_is_built(monkeypatch):
    """A row registered in kernel.METHOD_TABLE by name after import (a study's own) is a choice of --method."""
    monkeypatch.setitem(kernel.METHOD_TABLE, "study_row", kernel.METHOD_TABLE["respo"])
    parser = build_parser(TrainConfig)
    assert "study_row" in parser.format_help()
    assert parser.parse_args(["--method", "study_row"]).method == "study_row"


def test_a_long_word_in_a_flags_help_is_never_cut():
    text = help_of(TrainConfig)
    assert "<task>-<model>-<method>-reuse<reuse>[-lag<lag>]-seed<seed>" in text


def test_every_example_in_the_train_help_parses():
    lines = [line.split("#")[0].split() for line in cli.TRAIN_EXAMPLES.splitlines() if "train.py" in line]
    assert len(lines) >= 5
    for words in lines:
        args = words[words.index("train.py") + 1:]
        assert isinstance(parse_config(TrainConfig, args), TrainConfig)


def test_eval_without_a_model_lists_the_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="no runs under runs/ yet"):
        run_eval(EvalConfig())
    for name in ("b-run", "a-run"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "latest").write_text("checkpoints/iter-000001")
    (tmp_path / "runs" / "not-a-run").mkdir()
    with pytest.raises(ValueError, match=r"--model runs/a-run` .*runs under runs/: a-run, b-run$"):
        run_eval(EvalConfig())


# train.py as `python train.py --learn-rate 1` runs it, then which heavy modules had loaded when it answered.
TRAIN_PY_THEN_MODULES = r'''
import runpy, sys
try:
    runpy.run_path("train.py", run_name="__main__")
finally:
    loaded = [name for name in ("transformers", "nano_respo.trainer", "nano_respo.run.session", "torch")
              if name in sys.modules]
    print("loaded:", " ".join(loaded), file=sys.__stdout__)
'''


def test_a_mistyped_flag_is_answered_before_transformers_and_the_trainer_load():
    done = subprocess.run([sys.executable, "-c", TRAIN_PY_THEN_MODULES, "--learn-rate", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2
    assert done.stderr.strip().endswith("error: unrecognized arguments: --learn-rate 1; did you mean --lr?")
    # torch stays: the configs' checks (LossConfig, the reuse split) are kernel.py's, which imports it.
    assert done.stdout.strip() == "loaded: torch"


def test_bare_eval_py_is_refused_with_status_2_in_one_line(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "eval.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "--model" in done.stderr



@pytest.mark.parametrize("cls, flag, value", [(TrainConfig, "--iteration", "2"), (TrainConfig, "--lambda", "1"),
                                               (EvalConfig, "--sample", "8")])
def test_an_abbreviated_flag_is_refused_not_guessed(cls, flag, value, capsys):
    with pytest.raises(SystemExit) as stop:
        parse_config(cls, [flag, value])
    assert stop.value.code == 2
    assert f"unrecognized arguments: {flag} {value}" in capsys.readouterr().err


@pytest.mark.parametrize("cls, argv, said", [
    (TrainConfig, ["--learning-rate", "1e-3"], "unrecognized arguments: --learning-rate 1e-3; did you mean --lr?"),
    (TrainConfig, ["--lerning-rate", "1e-3"], "unrecognized arguments: --lerning-rate 1e-3; did you mean --lr?"),
    (TrainConfig, ["--learning_rate=1e-3"], "unrecognized arguments: --learning_rate=1e-3; did you mean --lr?"),
    (TrainConfig, ["--num-generations", "4"],
     "unrecognized arguments: --num-generations 4; did you mean --group-size?"),
    (TrainConfig, ["--iteration", "2"], "unrecognized arguments: --iteration 2; did you mean --iterations?"),
    (TrainConfig, ["--lambda", "1"], "unrecognized arguments: --lambda 1; did you mean --lambda-neg or --lambda-pos?"),
    (TrainConfig, ["--no-plot"], "unrecognized arguments: --no-plot; did you mean --no-plots?"),
    (TrainConfig, ["--lerning-rate", "1", "--iteration", "2"],
     "unrecognized arguments: --lerning-rate 1 --iteration 2; did you mean --lr for --lerning-rate, --iterations for "
     "--iteration?"),
    (TrainConfig, ["--zzz", "3"], "unrecognized arguments: --zzz 3\n"),
    (EvalConfig, ["--sample", "8"], "unrecognized arguments: --sample 8; did you mean --samples?"),
])
def test_an_unknown_flag_names_the_flag_it_most_likely_meant(cls, argv, said, capsys):
    with pytest.raises(SystemExit) as stop:
        parse_config(cls, argv)
    assert stop.value.code == 2
    assert capsys.readouterr().err.endswith(f"error: {said}" + ("" if said.endswith("\n") else "\n"))


def test_every_other_trainers_name_answers_with_a_flag_of_train_py():
    assert set(cli.KNOWN_AS.values()) <= set(cli.flat_fields(TrainConfig))
    assert not set(cli.KNOWN_AS) & set(cli.flat_fields(TrainConfig))


@pytest.mark.parametrize("argv, said", [
    (["--reuse", "3"], "reuse: 32 prompts do not split into 3 mini-batches of whole groups (reuse / epochs); give "
                       "--reuse 2 or --reuse 4 (mini-batches that divide 32), or --epochs 3 (3 passes over 1 "
                       "mini-batch)"),
    (["--reuse", "12", "--epochs", "2"], "reuse: 32 prompts do not split into 6 mini-batches of whole groups (reuse "
                                         "/ epochs); give --reuse 8 or --reuse 16 (mini-batches that divide 32), or "
                                         "--epochs 3 (3 passes over 4 mini-batches)"),
    (["--reuse", "64"], "reuse: 32 prompts do not split into 64 mini-batches of whole groups (reuse / epochs); give "
                        "--reuse 32 (mini-batches that divide 32), or --epochs 2 (2 passes over 32 mini-batches)"),
])
def test_a_reuse_that_does_not_split_the_prompts_names_the_settings_that_do(argv, said, capsys):
    with pytest.raises(SystemExit):
        parse_config(TrainConfig, argv)
    assert capsys.readouterr().err.endswith(f"error: {said}\n")
    for way_out in re.findall(r"--reuse \d+|--epochs \d+", said.split("; ")[1]):
        flag, value = way_out.split()
        assert isinstance(parse_config(TrainConfig, [*argv, flag, value]), TrainConfig), way_out


def test_eval_falls_back_to_the_training_defaults_it_names():
    from nano_respo.run import evaluate_cli

    train_fields = set(cli.flat_fields(TrainConfig))
    assert set(evaluate_cli.FROM_TRAINING) <= set(cli.flat_fields(EvalConfig))
    assert set(evaluate_cli.FROM_TRAINING.values()) <= train_fields
    defaults = TrainConfig()
    for name in evaluate_cli.FROM_TRAINING.values():
        assert evaluate_cli.TRAIN_DEFAULTS[name] == getattr(defaults, name)
