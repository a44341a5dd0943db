"""The toy's study runner (research/toy/run.py): its CLI, its records, its tables."""

import json
import math

import pytest

from nano_respo.kernel import LossConfig
from research.cli import parse_config
from research.lab.report import mean_ci, paired_table
from research.toy.run import KNOBS, TOY_AGG, RunConfig, run_jobs
from research.toy.run import main as toy_main


def test_toy_run_names_itself_as_a_module(capsys):
    with pytest.raises(SystemExit):
        toy_main(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m research.toy.run")
    assert "examples:" in out


def test_an_abbreviated_flag_is_refused_not_guessed(capsys):
    with pytest.raises(SystemExit) as stop:
        parse_config(RunConfig, ["--seed", "3"])
    assert stop.value.code == 2
    assert "unrecognized arguments: --seed 3" in capsys.readouterr().err


def test_mean_ci_and_paired_differences():
    mean, half = mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.303 * 1.0 / math.sqrt(3), rel=1e-4)
    records = [dict(method=m, reuse=4, seed=s, lr=0.01, early_auc=v, full_auc=v, final_reward=v, heldout_reward=v)
               for m, vals in (("respo", (0.5, 0.7)), ("grpo", (0.4, 0.4))) for s, v in zip((0, 1), vals)]
    table = paired_table(records)
    assert "| grpo | 4 | 2 | 0.200 ± " in table


def test_runner_cli_validates_and_resumes(tmp_path):
    with pytest.raises(ValueError, match="methods"):
        RunConfig(methods=["ppo2"])
    with pytest.raises(ValueError, match="lrs"):
        RunConfig(lrs=["respo:0.1"])
    cfg = parse_config(RunConfig, ["--env", "bandit", "--methods", "respo", "grpo", "--reuse", "4", "--seeds", "0",
                                   "--iterations", "3", "--lrs", "grpo=0.05", "--alpha-neg", "2.5", "--out", str(tmp_path)])
    jobs = cfg.jobs()
    assert [(j.method, j.lr) for j in jobs] == [("respo", 0.01), ("grpo", 0.05)]
    assert jobs[0].loss["alpha_neg"] == 2.5 and jobs[1].loss == {"agg": TOY_AGG}
    first = run_jobs(jobs, str(tmp_path))
    again = run_jobs(jobs, str(tmp_path))
    assert [r["key"] for r in first] == [r["key"] for r in again]
    lines = (tmp_path / "runs.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["method"] == "respo"


def test_each_respo_kernel_records_every_knob_of_its_own():
    """respo (published) and respo_wtilt (the reconstruction the committed records ran) each name their kernel."""
    cfg = parse_config(RunConfig, ["--methods", "respo", "respo_wtilt", "grpo", "--reuse", "4", "--seeds", "0",
                                   "--beta-pos", "0.3", "--wtilt-alpha-neg", "2"])
    respo, wtilt, grpo = cfg.jobs()
    assert respo.loss == {"agg": TOY_AGG} | {k: 0.3 if k == "beta_pos" else getattr(LossConfig(), k)
                                          for k in KNOBS["respo"]}
    assert wtilt.loss == {"agg": TOY_AGG, "wtilt_alpha_pos": 0.0, "wtilt_lambda_pos": 0.1, "wtilt_alpha_neg": 2.0,
                          "wtilt_lambda_neg": 2.0}
    assert grpo.loss == {"agg": TOY_AGG}
    paper = parse_config(RunConfig, ["--methods", "respo", "grpo", "--seeds", "0", "--agg", "token-mean"]).jobs()
    assert all(job.loss["agg"] == "token-mean" for job in paper)  # a run off the toy's aggregation says so
