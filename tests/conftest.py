"""Fixtures shared by the test modules."""

import os

import pytest


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
