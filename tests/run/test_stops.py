"""Runs stopped from outside (Ctrl-C, SIGTERM, kill -9) or moved, then resumed: nothing is lost.

Each run is `python train.py` in a child process (HELD_TRAIN below), held at a chosen moment
so that the signal arrives exactly there, not after a guessed sleep. Whatever the moment,
`--resume` must end with the same metrics records as a run that was never stopped.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nano_respo.run.metrics import TIMING_KEYS, read_metrics

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("model_cache")

# train.py with a reward that varies on a random-init model (so every step moves the weights),
# held at one moment `kind:iteration`: it prints HOLDING there and waits. A stop signal that
# cannot wait raises out of the wait; one that asks the loop to finish prints REQUESTED and
# lets the run go on (record-twice: holds on for a second signal).
HELD_TRAIN = r'''
import json, runpy, signal, sys, time
import torch
from nano_respo import tasks
from nano_respo import checkpoint
from nano_respo.run import metrics, session

def parity_task(*args, **kwargs):
    task = tasks.make_task(*args, **kwargs)
    task.reward = lambda text, answer: float(sum(map(ord, text)) % 2)
    return task
session.make_task = parity_task

kind, at = sys.argv.pop(1).split(":")
at = int(at)

def hold():
    print("HOLDING", flush=True)
    stop = getattr(signal.getsignal(signal.SIGINT), "__self__", None)  # the trainer's StopRequest
    while not getattr(stop, "requested", False):
        time.sleep(0.01)
    print("REQUESTED", flush=True)
    while kind == "record-twice":
        time.sleep(0.01)

def first_call(function):
    calls = []
    def held(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            hold()
        return function(*args, **kwargs)
    return held

real_write, real_save, real_write_text = metrics.MetricsLog.write, torch.save, checkpoint.write_text_atomic

def write(self, record):  # the first train record of iteration `at`: whole, or half then hold
    if record["kind"] == "train" and record["iteration"] == at and record["minibatch"] == 0:
        if kind == "half-record":
            self.file.write(json.dumps(record)[:60])
            self.file.flush()
        hold()
    real_write(self, record)

def save(obj, path, *args, **kwargs):  # model and tokenizer files written, the trainer state not yet
    if isinstance(obj, dict) and obj.get("iteration") == at:
        hold()
    real_save(obj, path, *args, **kwargs)

def write_text(path, text):  # checkpoint renamed into place, `latest` not switched yet
    if path.name == "latest" and text.endswith(f"{at:06d}"):
        hold()
    real_write_text(path, text)

if kind == "first-eval":
    session.evaluate_heldout = first_call(session.evaluate_heldout)
elif kind == "initial-model":
    session.initial_model = first_call(session.initial_model)
elif kind in ("record", "record-twice", "half-record"):
    metrics.MetricsLog.write = write
elif kind == "save-state":
    torch.save = save
elif kind == "latest":
    checkpoint.write_text_atomic = write_text
runpy.run_path("train.py", run_name="__main__")
'''

ITERATIONS = 4
FLAGS = ["--model", "tiny-qwen3", "--task", "addition", "--sft-steps", "0", "--prompts-per-iteration", "4",
         "--group-size", "4", "--reuse", "2", "--epochs", "1", "--max-new-tokens", "6", "--eval-problems", "8",
         "--eval-samples", "2", "--eval-every", "10", "--save-every", "1", "--no-plots"]


def start(out_dir: Path, moment: str = "none:0", *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HELD_TRAIN, moment, *FLAGS, "--out-dir", str(out_dir),
                             "--name", "run", "--iterations", str(ITERATIONS), *extra],
                            cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def wait_for(child: subprocess.Popen, marker: str) -> str:
    """What the child printed up to `marker`."""
    seen = ""
    for line in child.stdout:
        if line.strip() == marker:
            return seen
        seen += line
    raise AssertionError(f"the run ended before {marker}: {child.wait()}, {child.stderr.read()[-2000:]}")


def finish(child: subprocess.Popen) -> tuple[int, str, str]:
    out, err = child.communicate(timeout=120)
    return child.returncode, out, err


def run(out_dir: Path, *extra: str) -> None:
    code, out, err = finish(start(out_dir, "none:0", *extra))
    assert code == 0, err[-3000:]


def records(run_dir: Path) -> list[dict]:
    """Every record, less the wall-clock figures (the only ones a resume may change)."""
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in read_metrics(run_dir)]


@pytest.fixture(scope="module")
def straight(tmp_path_factory, model_cache):
    """The records of the same run never stopped."""
    out_dir = tmp_path_factory.mktemp("straight")
    run(out_dir)
    found = records(out_dir / "run")
    assert len([r for r in found if r["kind"] == "train"]) == ITERATIONS * 2
    return found


def test_ctrl_c_during_the_first_evaluation_stops_in_one_line_and_resume_completes(tmp_path, straight):
    child = start(tmp_path, "first-eval:0")
    wait_for(child, "HOLDING")
    child.send_signal(signal.SIGINT)
    code, _, err = finish(child)
    assert code == 130
    assert err.strip() == "Ctrl-C: stopped at once; no checkpoint yet, so `--resume` starts the run over"
    run(tmp_path, "--resume")
    assert records(tmp_path / "run") == straight


def test_a_second_ctrl_c_in_the_loop_stops_in_one_line_and_resume_completes(tmp_path, straight):
    child = start(tmp_path, "record-twice:1")
    wait_for(child, "HOLDING")
    child.send_signal(signal.SIGINT)  # the first asks to finish the iteration
    wait_for(child, "REQUESTED")
    child.send_signal(signal.SIGINT)
    code, _, err = finish(child)
    assert code == 130
    assert err.strip().splitlines()[-1] == "Ctrl-C again: stopped at once; `--resume` continues from iter-000001"
    assert "Traceback" not in err
    run(tmp_path, "--resume")
    assert records(tmp_path / "run") == straight


def test_sigterm_stops_at_once_before_the_loop_and_saves_in_it_never_saying_ctrl_c(tmp_path, straight):
    child = start(tmp_path, "initial-model:0")  # loading the model: nothing written yet
    wait_for(child, "HOLDING")
    child.send_signal(signal.SIGTERM)
    code, _, err = finish(child)
    assert code == 128 + signal.SIGTERM
    assert err.strip() == "SIGTERM: stopped at once; nothing was written yet, so the same command starts the run"
    assert not (tmp_path / "run").exists()
    child = start(tmp_path, "record:1")
    wait_for(child, "HOLDING")
    child.send_signal(signal.SIGTERM)  # in the loop: finish iteration 1, save, stop
    said = wait_for(child, "REQUESTED")
    code, out, err = finish(child)
    assert code == 128 + signal.SIGTERM, err[-3000:]  # saved, yet not finished: a scheduler can tell
    assert "SIGTERM: finishing this iteration, then saving a checkpoint (SIGTERM again" in said
    assert "Ctrl-C" not in said + out + err
    assert (tmp_path / "run" / "latest").read_text() == "checkpoints/iter-000002"
    # The end's figures are the last evaluation's (the start: --eval-every 10), and say so.
    start_eval = read_metrics(tmp_path / "run")[0]
    assert (f"end held-out pass@1 {start_eval['heldout_pass@1']:.3f} (greedy accuracy "
            f"{start_eval['heldout_acc']:.3f}) (evaluated at iteration 0), after 2 iterations, 4 optimizer steps"
            in out.splitlines())
    assert err.strip().splitlines()[-1] == "SIGTERM: stopped after iteration 2 of 4; `--resume` continues from iter-000002"
    code, out, err = finish(start(tmp_path, "none:0", "--resume"))
    assert code == 0, err[-3000:]
    assert "resume: continuing from iteration 2 of 4 (iter-000002, optimizer step 4)" in out.splitlines()
    assert records(tmp_path / "run") == straight


# Reads the run's output up to HOLDING, says so, and exits: `| tee log` ended by the Ctrl-C that stops the run.
# The progress bar, on the same pipe, ends no line: HOLDING ends one of its lines.
READER_THAT_EXITS = r'''
import sys
for line in sys.stdin:
    if line.rstrip().endswith("HOLDING"):
        print("HOLDING", flush=True)
        break
'''


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP])
def test_a_stop_through_a_pipe_whose_reader_exited_still_saves_and_resumes_without_duplicated_rows(
        tmp_path, straight, signum):
    reader = subprocess.Popen([sys.executable, "-c", READER_THAT_EXITS], text=True, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    child = subprocess.Popen([sys.executable, "-c", HELD_TRAIN, "record:1", *FLAGS, "--out-dir", str(tmp_path),
                              "--name", "run", "--iterations", str(ITERATIONS)],
                             cwd=REPO, stdout=reader.stdin, stderr=subprocess.STDOUT,  # python train.py 2>&1 | tee
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    reader.stdin.close()  # the reader alone holds the pipe's read end: its exit breaks the pipe
    assert reader.stdout.readline().strip() == "HOLDING"
    assert reader.wait(timeout=60) == 0
    child.send_signal(signum)  # every message from here on meets the dead pipe (and raises SIGPIPE)
    assert child.wait(timeout=300) == 128 + signum
    assert (tmp_path / "run" / "latest").read_text() == "checkpoints/iter-000002"
    run(tmp_path, "--resume")
    assert records(tmp_path / "run") == straight


def test_kill_9_at_chosen_moments_then_resume_gives_the_uninterrupted_records(tmp_path, straight):
    run_dir = tmp_path / "run"
    moments = [
        ("first-eval:0", lambda: not (run_dir / "latest").exists()),  # before any checkpoint
        ("record:1", lambda: (run_dir / "latest").read_text() == "checkpoints/iter-000001"),
        ("save-state:2", lambda: (run_dir / "checkpoints" / ".tmp-iter-000002").is_dir()),  # mid-save
        ("latest:3", lambda: (run_dir / "checkpoints" / "iter-000003").is_dir()  # renamed, not yet latest
         and (run_dir / "latest").read_text() == "checkpoints/iter-000002"),
        ("half-record:3", lambda: not (run_dir / "metrics.jsonl").read_text().endswith("\n")),  # a cut-off line
    ]
    for number, (moment, state) in enumerate(moments):
        child = start(tmp_path, moment, *(["--resume"] if number else []))
        wait_for(child, "HOLDING")
        child.kill()
        child.communicate()
        assert state(), moment
    run(tmp_path, "--resume")
    assert records(run_dir) == straight
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["iter-000003", "iter-000004"]


def test_a_moved_and_renamed_run_resumes_under_another_spelling_of_its_path_keeping_n_checkpoints(tmp_path, straight):
    run(tmp_path / "small-disk", "--iterations", "2")
    (tmp_path / "large-disk").mkdir()
    shutil.move(tmp_path / "small-disk" / "run", tmp_path / "large-disk" / "renamed")
    spelled = f"{tmp_path}/large-disk/../large-disk//"
    code, out, err = finish(start(Path(spelled), "none:0", "--resume", "--name", "renamed", "--keep-checkpoints", "1"))
    assert code == 0, err[-3000:]
    resumed = records(tmp_path / "large-disk" / "renamed")
    end_of_short_run = {"kind": "eval", "iteration": 2}  # its final evaluation, which a 4-iteration run skips
    assert [r for r in resumed if {k: r[k] for k in end_of_short_run} != end_of_short_run] == straight
    config = json.loads((tmp_path / "large-disk" / "renamed" / "config.json").read_text())
    assert config["name"] == "renamed"
    assert [p.name for p in (tmp_path / "large-disk" / "renamed" / "checkpoints").iterdir()] == ["iter-000004"]
