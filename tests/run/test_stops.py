"""Runs stopped from outside (Ctrl-C, SIGTERM, SIGHUP, kill -9) or moved, then resumed: nothing is lost.

Each run is `python train.py` in a child process (HELD_TRAIN below), held at a chosen moment
so that the signal arrives exactly there, not after a guessed sleep. Whatever the moment,
`--resume` must end with the same metrics records as a run that was never stopped (less the
wall-clock figures, conftest.TIMING_KEYS): nothing lost, nothing repeated.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import without_timings
from nano_respo.runs import read_metrics

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("model_cache")

# train.py with a reward that varies on a random-init model (so every step moves the weights),
# held at one moment `kind:iteration`: it prints HOLDING there and waits. A stop signal that
# cannot wait raises out of the wait; one that asks the loop to finish prints REQUESTED and
# lets the run go on (record-twice: holds on for a second signal).
HELD_TRAIN = r'''
import json, signal, sys, time
import torch
import train
from nano_respo import checkpoint, runs

make_task = train.make_task

def parity_task(*args, **kwargs):
    task = make_task(*args, **kwargs)
    task.reward = lambda text, answer: float(sum(map(ord, text)) % 2)
    return task
train.make_task = parity_task

kind, at = sys.argv.pop(1).split(":")
at = int(at)

def hold():
    print("HOLDING", flush=True)
    stop = getattr(signal.getsignal(signal.SIGINT), "__self__", None)  # train's runs.Stop
    while not getattr(stop, "signum", None):
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

real_write, real_save, real_write_text = runs.MetricsLog.write, torch.save, checkpoint.write_text_atomic

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
    train.evaluate_heldout = first_call(train.evaluate_heldout)
elif kind == "initial-model":
    train.initial_model = first_call(train.initial_model)
elif kind in ("record", "record-twice", "half-record"):
    runs.MetricsLog.write = write
elif kind == "save-state":
    torch.save = save
elif kind == "latest":
    checkpoint.write_text_atomic = write_text
train.run_command(train.main)  # as `python train.py` runs it
'''

ITERATIONS = 4
FLAGS = ["--model", "tiny-qwen3", "--task", "addition", "--sft-steps", "0", "--prompts-per-iteration", "4",
         "--group-size", "4", "--reuse", "2", "--epochs", "1", "--max-new-tokens", "6", "--eval-problems", "8",
         "--eval-samples", "2", "--eval-every", "10", "--save-every", "1", "--no-plots"]


def start(out_dir: Path, moment: str = "none:0", *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HELD_TRAIN, moment, *FLAGS, "--out-dir", str(out_dir),
                             "--name", "run", "--iterations", str(ITERATIONS), *extra],
                            cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO), "TQDM_DISABLE": "1"})


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
    return without_timings(read_metrics(run_dir))


@pytest.fixture(scope="module")
def straight(tmp_path_factory, model_cache):
    """The records of the same run never stopped."""
    out_dir = tmp_path_factory.mktemp("straight")
    run(out_dir)
    found = records(out_dir / "run")
    assert len([r for r in found if r["kind"] == "train"]) == ITERATIONS * 2
    return found


def last_line(err: str) -> str:
    """What a stopped run says last (stderr), after checking it printed no traceback."""
    assert "Traceback" not in err, err[-3000:]
    return err.strip().splitlines()[-1]


def test_ctrl_c_during_the_first_evaluation_stops_at_once_and_resume_completes(tmp_path, straight):
    """Before the first save: nothing to finish, so the first Ctrl-C stops at once; --resume starts it over."""
    child = start(tmp_path, "first-eval:0")
    wait_for(child, "HOLDING")
    child.send_signal(signal.SIGINT)
    code, _, err = finish(child)
    assert code == 130
    assert last_line(err) == "Ctrl-C: stopped at once; no checkpoint yet, so `--resume` starts the run over"
    assert not (tmp_path / "run" / "latest").exists()
    code, out, err = finish(start(tmp_path, "none:0", "--resume"))
    assert code == 0, err[-3000:]
    assert f"resume: {tmp_path / 'run'} has no intact checkpoint yet; starting the run over from iteration 0" in out
    assert records(tmp_path / "run") == straight


def test_a_second_ctrl_c_in_the_loop_stops_at_once_and_resume_completes(tmp_path, straight):
    child = start(tmp_path, "record-twice:1")
    wait_for(child, "HOLDING")
    child.send_signal(signal.SIGINT)  # the first asks to finish the iteration
    wait_for(child, "REQUESTED")
    child.send_signal(signal.SIGINT)
    code, _, err = finish(child)
    assert code == 130
    assert "Ctrl-C: finishing this iteration, then saving (again to stop at once)" in err
    assert last_line(err) == "Ctrl-C: stopped at once; `--resume` continues from iter-000001"
    run(tmp_path, "--resume")
    assert records(tmp_path / "run") == straight


def test_sigterm_stops_at_once_before_the_loop_and_saves_in_it_never_saying_ctrl_c(tmp_path, straight):
    child = start(tmp_path, "initial-model:0")  # loading the model: nothing written yet
    wait_for(child, "HOLDING")
    child.send_signal(signal.SIGTERM)
    code, _, err = finish(child)
    assert code == 128 + signal.SIGTERM
    assert last_line(err) == "SIGTERM: stopped at once; nothing was written yet, so the same command starts the run"
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and not (tmp_path / "run" / "checkpoints").exists()
    child = start(tmp_path, "record:1")  # run again, the same command
    wait_for(child, "HOLDING")
    # A second run into the live run's directory is refused in one line, and leaves the live one alone.
    second = subprocess.run([sys.executable, "train.py", *FLAGS, "--out-dir", str(tmp_path), "--name", "run"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert second.returncode == 2 and second.stdout == ""
    assert second.stderr == (f"error: run lock: {tmp_path / 'run'} is in use by another run; wait for it or pass "
                             f"another --name\n")
    child.send_signal(signal.SIGTERM)  # in the loop: finish iteration 1, save, stop
    wait_for(child, "REQUESTED")
    code, out, err = finish(child)
    assert code == 128 + signal.SIGTERM, err[-3000:]  # saved, yet not finished: a scheduler can tell
    assert "SIGTERM: finishing this iteration, then saving (again to stop at once)" in err
    assert "Ctrl-C" not in out + err
    assert (tmp_path / "run" / "latest").read_text() == "checkpoints/iter-000002"
    # The end's figures are the last evaluation's (the start: --eval-every 10), and say so.
    start_eval = read_metrics(tmp_path / "run")[0]
    assert (f"end held-out pass@1 {start_eval['heldout_pass@1']:.3f} (greedy accuracy "
            f"{start_eval['heldout_acc']:.3f}) (evaluated at iteration 0), after 2 iterations, 4 optimizer steps"
            in out.splitlines())
    assert last_line(err) == "SIGTERM: stopped after iteration 2 of 4; `--resume` continues"
    code, out, err = finish(start(tmp_path, "none:0", "--resume"))
    assert code == 0, err[-3000:]
    assert "resume: continuing from iteration 2 of 4 (iter-000002, step 4)" in out.splitlines()
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
    child.send_signal(signum)  # every message from here on meets the dead pipe (EPIPE: Python ignores SIGPIPE)
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
