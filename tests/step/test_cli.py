"""The command lines as a newcomer meets them (nano_respo/cli.py, train.main, eval.main).

A mistyped flag names the flag it most likely meant; a value the config refuses is refused in one line, with
status 2, before transformers loads; --help lists train.FIRST_FLAGS, --help-all every flag under the dataclass
that declares it, and every one of them parses into its field.
"""

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import train  # noqa: E402
from conftest import parse_train  # noqa: E402
from eval import FROM_TRAINING, EvalConfig, run_eval  # noqa: E402
from nano_respo import cli, kernel, models  # noqa: E402
from nano_respo.cli import parse_config  # noqa: E402
from train import FIRST_FLAGS, TrainConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FLAGS = {name: "--" + name.replace("_", "-") for name in cli.flat_fields(TrainConfig)}


def refusal(argv, capsys, parse=parse_train) -> str:
    """What a refused command line says: status 2, argparse's usage line, then the message in one line."""
    with pytest.raises(SystemExit) as stop:
        parse(argv)
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("usage:"), lines
    return lines[1].split(" error: ", 1)[1]


@pytest.mark.parametrize("flag, choices", [
    ("--method", tuple(kernel.METHOD_TABLE)),  # argparse's choices, read from the table when the parser is built
    ("--agg", kernel.AGG_MODES),
    ("--weight-against", kernel.WEIGHT_AGAINST),
    ("--correction", kernel.CORRECTIONS),  # the config's own checks, in the same one line
    ("--adv-scale", kernel.SCALES),
    ("--dtype", models.WEIGHT_DTYPES),
    ("--sampler-dtype", models.WEIGHT_DTYPES),
    ("--prompt-format", models.PROMPT_FORMATS),
    ("--device", ("auto", "cpu", "cuda", "cuda:N")),
])
def test_a_typo_in_a_value_exits_2_in_one_line_listing_every_choice(flag, choices, capsys):
    said = refusal([flag, "respoo"], capsys)
    assert "'respoo'" in said
    for choice in choices:
        assert choice in said


def test_every_choice_is_accepted():
    for method in kernel.METHOD_TABLE:
        assert parse_train(["--method", method]).loss.method == method
    for agg in kernel.AGG_MODES:
        assert parse_train(["--agg", agg]).loss.agg == agg
    for device in ("auto", "cpu", "cuda", "cuda:3"):
        assert parse_train(["--device", device]).device == device
    for prompt_format in models.PROMPT_FORMATS:
        assert parse_train(["--prompt-format", prompt_format]).prompt_format == prompt_format


@pytest.mark.parametrize("argv, said", [
    (["--lr", "-1"], "lr: must be > 0, got -1.0"),
    (["--lr", "nan"], "lr: must be > 0, got nan"),
    (["--group-size", "1"], "group_size: must be >= 2, got 1"),
    (["--beta-pos", "2"], "beta_pos: must lie in [0, 1], got 2.0"),
    (["--iterations", "0"], "iterations: must be >= 1, got 0"),
    (["--iterations", "two"], "argument --iterations: invalid int value: 'two'"),
])
def test_a_value_the_config_refuses_is_refused_in_one_line(argv, said, capsys):
    assert refusal(argv, capsys).startswith(said)


def test_help_lists_the_first_flags_and_help_all_every_flag_under_the_class_that_declares_it(capsys):
    with pytest.raises(SystemExit) as stop:
        parse_train(["--help"])
    assert stop.value.code == 0
    short = capsys.readouterr().out
    assert {name for name, flag in FLAGS.items() if re.search(rf"\n  {flag}[ ,\n]", short)} == set(FIRST_FLAGS)
    assert f"--help-all                      all {len(FLAGS)} flags" in short
    assert "--sft-steps" not in short and "--protocol" in short
    with pytest.raises(SystemExit) as stop:
        parse_train(["--help-all"])
    assert stop.value.code == 0
    full = capsys.readouterr().out
    heading, under = None, {}
    for line in full.splitlines():  # a heading is an unindented line ending in ':'; its flags follow it
        if line.endswith(":") and not line[0].isspace():
            heading = line[:-1]
        for flag in re.findall(r"^  (--[a-z0-9-]+)", line):
            under[flag] = heading
    for name, (_, _, _, owner) in cli.flat_fields(TrainConfig).items():
        assert under.get(FLAGS[name]) == owner.__doc__.splitlines()[0].rstrip("."), name
    from nano_respo.routes import RouteConfig
    from nano_respo.sft import WarmStartConfig
    assert {cls for *_, cls in cli.flat_fields(TrainConfig).values()} == {TrainConfig, kernel.LossConfig,
                                                                         WarmStartConfig, RouteConfig}


# Flags whose value needs another beside it.
ALONGSIDE = {"sft_full_share": ["--sft-task-size", "4"]}
OTHER_VALUE = {"model": "tiny-qwen3-moe", "task": "addition", "name": "mine", "device": "cpu", "dtype": "bfloat16",
               "sampler_dtype": "bfloat16", "adv_scale": "std", "prompt_format": "plain", "sft_anneal": "converged",
               "out_dir": "elsewhere", "heldout_file": "held.jsonl", "method": "grpo", "agg": "seq-mean-token-sum",
               "weight_against": "pi_old", "correction": "token-truncate"}


@pytest.mark.parametrize("name", list(FLAGS))
def test_every_flag_of_help_all_parses_into_its_field(name):
    f, hint, _, _ = cli.flat_fields(TrainConfig)[name]
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    kind = cli.element_type(hint)
    if kind is bool:
        assert cli.flat(parse_train([FLAGS[name]]))[name] is True
        assert cli.flat(parse_train(["--no-" + FLAGS[name][2:]]))[name] is False
        return
    value = OTHER_VALUE.get(name) or (2 * default if default else kind(2) if kind is int else 0.5)
    cfg = parse_train([FLAGS[name], str(value), *ALONGSIDE.get(name, [])])
    assert cli.flat(cfg)[name] == value != default


def test_method_choices_are_read_when_the_parser_is_built(monkeypatch):
    """A row registered in kernel.METHOD_TABLE by name after import (a study's own) is a choice of --method."""
    monkeypatch.setitem(kernel.METHOD_TABLE, "study_row", kernel.METHOD_TABLE["respo"])
    assert parse_train(["--method", "study_row"]).loss.method == "study_row"


@pytest.mark.parametrize("cls", [TrainConfig, EvalConfig])
def test_help_has_no_unexpanded_placeholder(cls):
    text = cli.build_parser(cls, every_flag=True).format_help()
    constants = {name for module in (kernel, train, cli) for name in vars(module)
                 if re.fullmatch(r"[A-Z][A-Z0-9_]{2,}", name)}
    assert constants >= {"METHOD_TABLE", "AGG_MODES", "SCALES", "FIRST_FLAGS"}
    found = {word for word in re.findall(r"[A-Z][A-Z0-9_]{2,}", text) if word in constants}
    assert not found, f"help names code constants instead of their values: {found}"


def test_a_long_word_in_a_flags_help_is_never_cut(capsys):
    with pytest.raises(SystemExit):
        parse_train(["--help-all"])
    assert "<task>-<model>-<method>-reuse<reuse>[-lag<lag>]-seed<seed>" in capsys.readouterr().out


def test_every_example_in_the_train_help_parses():
    lines = [line.split("#")[0].split() for line in train.EXAMPLES.splitlines() if "train.py" in line]
    assert len(lines) >= 5
    for words in lines:
        assert isinstance(parse_train(words[words.index("train.py") + 1:]), TrainConfig), words


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


# train.py as `python train.py ...` runs it, once per command line given, each with the modules loaded after it.
TRAIN_PY_THEN_MODULES = r'''
import contextlib, io, json, runpy, sys
answers = []
for argv in json.loads(sys.argv[1]):
    sys.argv[1:] = argv
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            runpy.run_path("train.py", run_name="__main__")
        except SystemExit as stop:
            code = stop.code
    answers.append([code, err.getvalue(), "transformers" in sys.modules])
print(json.dumps(answers))
'''


def test_bad_command_lines_are_refused_in_one_line_before_transformers_loads():
    import json

    argvs = [["--learn-rate", "1"], ["--method", "respoo"], ["--device", "gpu"], ["--reuse", "3"],
             ["--model", "./runs/nope"]]  # a path: a hub id (runs/nope in a clone without runs/) is the hub's to refuse
    done = subprocess.run([sys.executable, "-c", TRAIN_PY_THEN_MODULES, json.dumps(argvs)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    for argv, (code, err, transformers_loaded) in zip(argvs, answers):
        assert code == 2, (argv, err)
        assert err.strip().splitlines()[-1].startswith("train.py: error: "), (argv, err)
        assert len(err.strip().splitlines()) == 2, (argv, err)  # usage, then the one line
        assert not transformers_loaded, argv
    assert answers[0][1].strip().endswith("error: unrecognized arguments: --learn-rate 1; did you mean --lr?")
    assert answers[4][1].strip().endswith("error: model: './runs/nope' does not exist (runs is missing)")


def test_bare_eval_py_is_refused_with_status_2_in_one_line(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "eval.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "--model" in done.stderr


@pytest.mark.parametrize("parse, flag, value", [(parse_train, "--iteration", "2"), (parse_train, "--lambda", "1"),
                                                (lambda argv: parse_config(EvalConfig, argv), "--sample", "8")])
def test_an_abbreviated_flag_is_refused_not_guessed(parse, flag, value, capsys):
    assert refusal([flag, value], capsys, parse).startswith(f"unrecognized arguments: {flag} {value}")


@pytest.mark.parametrize("argv, said", [
    (["--learning-rate", "1e-3"], "unrecognized arguments: --learning-rate 1e-3; did you mean --lr?"),
    (["--lerning-rate", "1e-3"], "unrecognized arguments: --lerning-rate 1e-3; did you mean --lr?"),
    (["--learning_rate=1e-3"], "unrecognized arguments: --learning_rate=1e-3; did you mean --lr?"),
    (["--num-generations", "4"], "unrecognized arguments: --num-generations 4; did you mean --group-size?"),
    (["--iteration", "2"], "unrecognized arguments: --iteration 2; did you mean --iterations?"),
    (["--no-plot"], "unrecognized arguments: --no-plot; did you mean --no-plots?"),
    (["--lerning-rate", "1", "--iteration", "2"],
     "unrecognized arguments: --lerning-rate 1 --iteration 2; did you mean --lr for --lerning-rate, --iterations for "
     "--iteration?"),
    (["--zzz", "3"], "unrecognized arguments: --zzz 3"),
])
def test_an_unknown_flag_names_the_flag_it_most_likely_meant(argv, said, capsys):
    assert refusal(argv, capsys) == said


def test_an_unknown_eval_flag_names_the_flag_it_most_likely_meant(capsys):
    said = refusal(["--sample", "8"], capsys, lambda argv: parse_config(EvalConfig, argv))
    assert said == "unrecognized arguments: --sample 8; did you mean --samples?"


def test_every_other_trainers_name_answers_with_a_flag_of_train_py(capsys):
    assert set(cli.KNOWN_AS.values()) <= set(FLAGS)
    assert not set(cli.KNOWN_AS) & set(FLAGS)  # suggested, never accepted
    for alias, name in cli.KNOWN_AS.items():
        said = refusal(["--" + alias.replace("_", "-"), "1"], capsys)
        assert said.endswith(f"; did you mean {FLAGS[name]}?"), alias


@pytest.mark.parametrize("argv", [["--reuse", "3"], ["--reuse", "12", "--epochs", "2"], ["--reuse", "64"],
                                  ["--reuse", "5", "--prompts-per-iteration", "12"]])
def test_a_reuse_that_does_not_split_the_prompts_names_a_reuse_that_does(argv, capsys):
    said = refusal(argv, capsys)
    assert re.fullmatch(r"reuse: \d+ prompts do not split into \d+ mini-batches of whole groups; give --reuse \d+ "
                        r"or another --prompts-per-iteration", said), said
    way_out = re.search(r"--reuse \d+", said)[0].split()
    assert isinstance(parse_train([*argv, *way_out]), TrainConfig), way_out


def test_eval_falls_back_to_the_training_defaults_it_names():
    assert set(FROM_TRAINING) <= set(cli.flat_fields(EvalConfig))
    assert set(FROM_TRAINING.values()) <= set(FLAGS)
