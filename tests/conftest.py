"""Fixtures shared by the test tiers (tests/derivations, step, run, course), and the session's one background job.

Retraining the shipped warm starts (tests/run/test_shipped_warm_starts.py) takes a few minutes of one core per
model. Started when the session knows a collected test will read them, those processes run beside the tests
before that one instead of alone while the main process waits.
"""

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import settings

from nano_respo.shipped import manifests

ROOT = Path(__file__).resolve().parents[1]
SHIP = "tools/ship_warm_starts.py"  # what every shipped manifest's command runs (tests/step/test_shipped.py)

# Property tests: a quick profile by default (the derivation tier in under a minute), the full one in CI
# (HYPOTHESIS_PROFILE=ci, set by .ci/run).
settings.register_profile("quick", max_examples=25, deadline=None)
settings.register_profile("ci", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory):
    """Tiny models and short warm starts are created once per module in a private cache, never in the user's."""
    previous = os.environ.get("NANO_RESPO_CACHE")
    os.environ["NANO_RESPO_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if previous is None:
        os.environ.pop("NANO_RESPO_CACHE")
    else:
        os.environ["NANO_RESPO_CACHE"] = previous


@pytest.fixture(scope="session")
def shared_warm_starts(tmp_path_factory):
    """One cache for the whole session for the tests that need a warm start: the default ones load from the
    package (nano_respo/warm_starts/), any other is trained by the first test that needs it and loaded by the
    rest; the user's cache is never read or written."""
    return tmp_path_factory.mktemp("warm-starts")


@pytest.fixture
def warm_start_cache(shared_warm_starts, monkeypatch):
    """NANO_RESPO_CACHE at the session's shared warm-start cache for one test."""
    monkeypatch.setenv("NANO_RESPO_CACHE", str(shared_warm_starts))
    return shared_warm_starts


@pytest.fixture
def float64():
    """Derivations are checked in float64, so tolerances measure the math, not rounding."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def parity_reward(text: str, answer: str) -> float:
    """Varies between the samples of a random-init model, so advantages are nonzero."""
    return float(sum(map(ord, text)) % 2)


@pytest.fixture
def parity_runs(monkeypatch):
    """train() runs whose task scores by parity_reward (a random-init model then learns something)."""
    import train
    make_task = train.make_task

    def make_parity_task(*args, **kwargs):
        task = make_task(*args, **kwargs)
        task.reward = parity_reward
        return task
    monkeypatch.setattr(train, "make_task", make_parity_task)


# The only keys of metrics.jsonl that differ between a resumed run and an uninterrupted one: wall-clock figures.
TIMING_KEYS = {"gen_tokens_per_s", "train_tokens_per_s", "iteration_s"}


def without_timings(records: list[dict]) -> list[dict]:
    """Records less their wall-clock figures (TIMING_KEYS); "time" records keep their kind, iteration and step."""
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


def parse_train(argv: list[str]):
    """argv parsed into a TrainConfig exactly as `python train.py` parses it: train.main, with the run left out."""
    import train
    from unittest import mock

    with mock.patch.object(train, "train", lambda cfg: cfg):
        return train.main(argv)


RETRAINING = pytest.StashKey[tuple]()  # (folder, [(process, log path)])


def pytest_collection_finish(session):
    if session.config.option.collectonly or not any(item.path.name == "test_shipped_warm_starts.py"
                                                    for item in session.items):
        return
    out = Path(tempfile.mkdtemp(prefix="nano-respo-retrained-"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    runs = []
    for path, manifest in manifests():  # each with the arguments that made it, into `out`
        _, _, *arguments = shlex.split(manifest["command"])  # python tools/ship_warm_starts.py --models <model>
        log = out / f"{path.name}.log"
        with open(log, "w") as stream:  # a file, not a pipe: nobody reads it until the test does
            runs.append((subprocess.Popen([sys.executable, SHIP, *arguments, "--out", str(out)], env=env, cwd=ROOT,
                                          stdout=stream, stderr=subprocess.STDOUT), log))
    session.config.stash[RETRAINING] = (out, runs)


def pytest_sessionfinish(session):
    out, runs = session.config.stash.get(RETRAINING, (None, []))
    for process, _ in runs:
        if process.poll() is None:  # the session ended before the test that waits for it
            process.kill()
            process.wait()
    if out is not None:
        shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def retrained(request):
    """The folder every shipped warm start was retrained into by the command in its manifest, once all finished."""
    out, runs = request.config.stash[RETRAINING]
    for process, log in runs:
        assert process.wait() == 0, log.read_text()[-3000:]
    return out
