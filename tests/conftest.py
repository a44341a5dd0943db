"""Fixtures shared by the test modules."""

import os

import pytest
import torch


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory):
    """Tiny models and warm starts are created once per module in a private cache, never in the user's."""
    previous = os.environ.get("NANO_RESPO_CACHE")
    os.environ["NANO_RESPO_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if previous is None:
        os.environ.pop("NANO_RESPO_CACHE")
    else:
        os.environ["NANO_RESPO_CACHE"] = previous


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
