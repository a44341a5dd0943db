"""Fixtures shared by the test tiers (tests/derivations, step, run, course)."""

import os

import pytest
import torch
from hypothesis import settings

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
    from nano_respo.run import session
    make_task = session.make_task

    def make_parity_task(*args, **kwargs):
        task = make_task(*args, **kwargs)
        task.reward = parity_reward
        return task
    monkeypatch.setattr(session, "make_task", make_parity_task)
