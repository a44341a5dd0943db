"""A newcomer's first commands: the default run, then every example of train.py's `--help` and of eval.py's
docstring, in one runs/ folder.

Each example runs shortened (TINY: one iteration, no warm start, a handful of problems) after
the default run, so an example that would collide with it, or need flags it does not show,
fails here. Examples that need a GPU, the hub or torchrun (a real Qwen3, --fsdp, --device
cuda) cannot run on this machine: for those only the arguments are parsed (as train.main parses
them), which still checks every flag and value. Then what goes wrong must be said first and in one
line: a bad argument before a run-directory collision, a missing local model path without
asking the hub.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import eval as eval_module  # noqa: E402,A004 (eval.py)
from conftest import parse_train  # noqa: E402
from nano_respo.cli import parse_config  # noqa: E402
from train import EXAMPLES as TRAIN_EXAMPLES, TrainConfig, train  # noqa: E402
from eval import EvalConfig  # noqa: E402

EVAL_EXAMPLES = eval_module.__doc__  # its examples: the module docstring's command lines
ROOT = Path(__file__).resolve().parents[2]
# 16 prompts split into the 8 or 16 mini-batches of the examples' --reuse.
TINY = ["--iterations", "1", "--sft-steps", "0", "--prompts-per-iteration", "16", "--group-size", "2",
        "--eval-problems", "4", "--eval-samples", "2", "--max-new-tokens", "8", "--no-plots"]
EVAL_TINY = ["--eval-problems", "4", "--max-new-tokens", "8"]

pytestmark = pytest.mark.usefixtures("model_cache")


def examples(text: str, script: str) -> list[list[str]]:
    """The arguments of each example line of a --help epilog that runs `script`."""
    lines = [line.split("#")[0].split() for line in text.splitlines() if script in line]
    return [words[words.index(script) + 1:] for words in lines]


def needs_gpu_or_hub(line: str) -> bool:
    return "Qwen/" in line or "cuda" in line or "torchrun" in line or "--fsdp" in line


def test_every_help_example_works_after_a_default_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    lines = [line for line in TRAIN_EXAMPLES.splitlines() if "train.py" in line]
    assert examples(TRAIN_EXAMPLES, "train.py")[0] == [], "the first example is the default run"
    run_dirs = []
    for line, args in zip(lines, examples(TRAIN_EXAMPLES, "train.py")):
        if needs_gpu_or_hub(line):  # not runnable here: every flag and value is still checked
            assert isinstance(parse_train(args), TrainConfig), line
            continue
        run_dirs.append(train(parse_train(TINY + args)))
        assert (run_dirs[-1] / "metrics.jsonl").is_file(), line
    fresh = [d for d, args in zip(run_dirs, examples(TRAIN_EXAMPLES, "train.py")) if "--resume" not in args]
    assert len(set(fresh)) == len(fresh) >= 3, "two examples wrote into one run directory"
    default = Path("runs") / TrainConfig().run_name
    assert run_dirs[0].resolve() == default.resolve() and "tiny-qwen3" in default.name
    capsys.readouterr()

    # Each docstring line: the command, then two or more spaces, then what it does.
    eval_lines = [re.split(r" {2,}", line.strip())[0] for line in EVAL_EXAMPLES.splitlines() if "python eval.py" in line]
    assert len(eval_lines) >= 2
    for line, args in zip(eval_lines, examples("\n".join(eval_lines), "eval.py")):
        args = [a.replace("<name>", default.name).replace("iter-000040", "iter-000001") for a in args]
        assert isinstance(parse_config(EvalConfig, EVAL_TINY + args), EvalConfig), line
        if needs_gpu_or_hub(line):
            continue
        result = eval_module.main(EVAL_TINY + args)  # as `python eval.py ...` runs it
        if "--summary" in args:
            assert result["updates"] == 1 * 4, line  # the default run's one iteration at reuse 4
        else:
            assert result["problems"] == 4 and 0 <= result["heldout_pass@1"] <= 1, line

    # Argument errors come before the collision with the run that is there: each names its flag.
    for bad, flag in ((["--model", "runs/nope"], "model"), (["--task", "missing.jsonl"], "task"),
                      (["--autocast", "--device", "cpu"], "autocast")):
        try:
            train(parse_train(TINY + ["--name", default.name, *bad]))
        except SystemExit:  # train.main's parser: the config refused the value, in one line on stderr
            message = capsys.readouterr().err.strip().splitlines()[-1]
        except ValueError as error:  # refused when the run opens, before its directory is looked at
            message = str(error)
        else:
            pytest.fail(f"{bad} was accepted")
        assert "already holds a run" not in message and flag in message, message
    with pytest.raises(ValueError, match="already holds a run"):  # and the collision itself is still caught
        train(parse_train(TINY))


@pytest.mark.parametrize("model, message", [
    ("runs/nope", "'runs/nope' does not exist"),
    ("./nope/model", "'./nope/model' does not exist (nope is missing)"),
    ("runs/nope/checkpoints/iter-000001", "'runs/nope/checkpoints/iter-000001' does not exist (runs/nope is missing)"),
])
def test_a_missing_local_model_fails_at_once_in_one_line_naming_it(tmp_path, model, message):
    (tmp_path / "runs").mkdir()  # after a first run: runs/ exists, runs/nope does not
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(ROOT / "eval.py"), "--model", model], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: model: {message}"
    assert time.monotonic() - start < 60  # imports only: no hub request was made
