"""The reference's test fixtures (tests/conftest.py), for the research wing's checks."""

from tests.conftest import float64, model_cache, parity_runs, shared_warm_starts, warm_start_cache  # noqa: F401
