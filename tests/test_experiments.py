"""experiments/run.py: the grid it launches and the train.py command of each cell."""

import importlib.util
import sys
from pathlib import Path

import pytest

from nano_respo.cli import parse_config
from nano_respo.trainer import TrainConfig

SPEC = importlib.util.spec_from_file_location("experiments_run", Path(__file__).parents[1] / "experiments" / "run.py")
experiments = sys.modules["experiments_run"] = importlib.util.module_from_spec(SPEC)  # dataclasses look it up
SPEC.loader.exec_module(experiments)


def config(*argv):
    return parse_config(experiments.ExperimentConfig, ["--models", "tiny-qwen3", *argv])


def test_the_on_policy_cell_runs_once_and_every_stale_or_reused_cell_for_every_method():
    cfg = config("--methods", "respo", "grpo", "--reuse", "1", "4", "--lags", "0", "2", "--seeds", "0")
    cells = set(experiments.grid(cfg))
    assert ("tiny-qwen3", "respo", 1, 0, 0) in cells and ("tiny-qwen3", "grpo", 1, 0, 0) not in cells
    assert {("tiny-qwen3", m, r, lag, 0) for m in ("respo", "grpo") for r, lag in ((1, 2), (4, 0), (4, 2))} <= cells
    assert len(cells) == 7


def test_each_cell_is_a_valid_train_py_command_with_its_lag_and_learning_rate():
    cfg = config("--methods", "respo", "seq_clip", "--reuse", "8", "--lags", "2", "--lrs", "respo=0.001")
    for method, lr in (("respo", 0.001), ("seq_clip", TrainConfig().lr)):
        command = experiments.train_command(cfg, "tiny-qwen3", method, 8, 2, 3, resume=False)
        run = parse_config(TrainConfig, command[2:])
        assert (run.loss.method, run.reuse, run.lag, run.lr, run.seed) == (method, 8, 2, lr, 3)
        assert run.name == f"{method}-reuse8-lag2-seed3"


def test_learning_rates_must_name_a_method_of_the_grid():
    with pytest.raises(ValueError, match="^lrs:"):
        experiments.ExperimentConfig(methods=["respo"], lrs=["grpo=0.01"])
