"""The paper's summaries (early, late, the positive-branch diagnostic) of a committed run, by eval.py --summary."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from nano_respo.runs import read_metrics
from nano_respo.summary import paper_summary, run_summary

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RUN = ROOT / "research/results/default-run/default"  # the committed default run: 40 iterations x reuse 4


def test_early_late_and_the_diagnostic_of_the_committed_default_run():
    summary = run_summary(str(DEFAULT_RUN))
    train = [r for r in read_metrics(DEFAULT_RUN) if r["kind"] == "train"]
    assert summary["updates"] == 160 == len(train)
    assert summary["early"] == max(r["reward"] for r in train if r["step"] <= 40)
    assert summary["late"] == pytest.approx(sum(r["reward"] for r in train if r["step"] > 140) / 20)
    first_half = [r["deep_low_w_pos_frac"] for r in train if r["step"] <= 80]
    assert summary["deep_low_w_pos_frac_first_half"] == pytest.approx(sum(first_half) / len(first_half))
    assert 0 <= summary["deep_low_w_pos_phi_mass_first_half"] <= 1


def test_the_paper_windows_at_1024_updates_and_a_run_cut_short():
    records = [{"kind": "train", "step": s, "reward": s / 1024, "deep_low_w_pos_frac": None if s % 2 else 0.2,
                "deep_low_w_pos_phi_mass": 0.4} for s in range(1, 1025)]
    summary = paper_summary(records)
    assert summary["early"] == 256 / 1024  # the maximum through update 256
    assert summary["late"] == pytest.approx(sum(range(897, 1025)) / 128 / 1024)  # the mean of the last eighth
    assert summary["deep_low_w_pos_frac_first_half"] == pytest.approx(0.2)  # null (no positives) skipped
    cut = paper_summary(records[:500], total_updates=1024)
    assert cut["early"] == summary["early"] and math.isnan(cut["late"])


def test_eval_py_prints_the_summary_without_loading_a_model():
    done = subprocess.run([sys.executable, "eval.py", "--summary", "--model", str(DEFAULT_RUN)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert printed["early"] == run_summary(str(DEFAULT_RUN))["early"]
