"""research/conflict.py, conflict_report.py, digit_runs.py and decision.py: the runs each stage makes, what a
run's steps keep, and every pre-registered rule (research/MECHANISM.md) on records made up to exercise it."""

import itertools
import math
from pathlib import Path

import pytest

from research import conflict, conflict_report as report, decision, digit_runs
from research.cli import parse_config


def config(*argv):
    return parse_config(conflict.ConflictConfig, list(argv))


def test_each_stage_runs_its_cells_as_preregistered():
    lr = config("--stage", "lr").seeds
    assert lr == [900, 901] and len(conflict.stage_runs(config("--stage", "lr"))) == 6
    gate = conflict.stage_runs(config("--stage", "gate-a", "--lr", "3e-4"))
    assert [(c.loss.method, c.reuse, c.lag, c.sampler_dtype) for _, c in gate[:2]] == \
        [("seq_clip", 4, 4, "float32"), ("seq_clip", 1, 0, "bfloat16")]
    for name, c in gate + conflict.stage_runs(config("--stage", "lr")):  # as the study ran: 2 x 2, its aggregation
        assert (c.task, c.sft.task_size, c.sft.steps, c.max_new_tokens) == ("digit_conflict", 11, 1000, 32)
        assert (c.prompts_per_iteration, c.group_size, c.iterations) == (32, 8, 13)
        assert c.epochs == min(2, c.reuse) and c.loss.agg == "seq-mean-token-sum-norm"
        assert c.loss.method in ("seq_clip", "respo_wtilt")
    fallback = conflict.stage_runs(config("--stage", "gate-a", "--lr", "3e-4", "--lag", "8"))
    assert {c.iterations for _, c in fallback} == {17}
    assert [n for n, _ in fallback][:2] == ["seq_clip-lr0.0003-reuse4-lag8-seed900",
                                            "seq_clip-lr0.0003-reuse1-bfloat16-17batches-seed900"]
    with pytest.raises(ValueError, match="^lr: pass lr"):
        conflict.ConflictConfig(stage="gate-a")
    with pytest.raises(ValueError, match="^stage: choose one of gate1, lr, gate-a"):  # gate A failed: no evaluation
        conflict.ConflictConfig(stage="evaluate")


def rows(entries):
    """ROW_KEYS columns from (iteration, step, family, length, advantage, log_w) tuples."""
    keys = ("iteration", "step", "family", "length", "advantage", "log_w")
    columns = {k: [e[i] for e in entries] for i, k in enumerate(keys)}
    return {**columns, "target": [12] * len(entries), "response": [""] * len(entries), "reward": [1.0] * len(entries)}


def test_a_runs_steps_keep_the_sums_of_its_positives_from_batch_1_on():
    w_low, w_high = math.log(0.5), math.log(1.5)
    made = rows([(0, 1, "ones", 10, 1.0, w_low),  # batch 0: left out
                 (1, 2, "ones", 10, 0.5, 0.0),  # batch 1's first step: left out only when on-policy
                 (1, 3, "ones", 10, 1.0, w_low), (1, 3, "ones", 10, -1.0, w_low),  # a negative: left out
                 (2, 4, "sum", 4, 1.0, w_high), (2, 4, "ones", 0, 1.0, w_low)])  # an empty response: left out
    stale = digit_runs.read_rows(made, on_policy_first_step=False, readings=report.READ_METHODS)
    assert set(stale) == {"ones 10", "sum 4"}
    ones = stale["ones 10"]
    assert ones["n"] == 2 and ones["adv"] == 1.5 and ones["low"] == 1 and ones["lost_low"] == pytest.approx(0.5)
    assert ones["drift"] == pytest.approx(w_low / 10)
    assert ones["phi_adv_seq_clip"] == pytest.approx(0.5 * 1.0 + 1.0 * 0.5)  # w for both
    assert ones["phi_adv_seq_clip_lowpos1"] == pytest.approx(0.5 + 1.0)  # 1 for the starved one
    assert stale["sum 4"]["high"] == 1 and stale["sum 4"]["phi_adv_seq_clip"] == 0  # the clip's high tail
    assert stale["sum 4"]["phi_adv_is"] == pytest.approx(1.5)
    on_policy = digit_runs.read_rows(made, on_policy_first_step=True, readings=report.READ_METHODS)
    assert on_policy["ones 10"]["n"] == 1


def test_early_pass1_reads_the_batches_after_the_lag_per_family():
    record = {"iterations": 13, "rollouts": [{"ones 12": [8, 8], "sum 6": [0, 8]}] * 5
              + [{"ones 12": [2, 8], "ones 20": [0, 8], "sum 6": [4, 8]}] * 8}
    assert digit_runs.early(record, "ones") == pytest.approx(2 / 16)
    assert digit_runs.early(record, "sum") == pytest.approx(0.5)
    assert digit_runs.early(record) == pytest.approx(6 / 24)  # both families


def gate1_records(outcomes):
    return {(s, "gate1"): [{"config": {"sft_full_share": q}, "gate": o[i]} for q, o in outcomes.items()]
            for i, s in enumerate(report.SETTINGS)}


@pytest.mark.parametrize("outcomes, expected", [
    ({0.02: ("PASS", "PASS")}, (0.02, "passes")),
    ({0.02: ("FAIL low", "PASS"), 0.04: ("PASS", "PASS")}, (0.04, "passes")),
    ({0.02: ("FAIL high", "FAIL high"), 0.01: ("FAIL low", "FAIL low")}, (None, "0.02 was run")),
    ({0.02: ("FAIL low", "FAIL high")}, (None, "opposite sides")),
    ({0.02: ("FAIL low", "FAIL low")}, (None, "run the rung 0.04")),
])
def test_gate1s_rung_search_follows_the_rule(outcomes, expected):
    share, text = report.gate1_search(gate1_records(outcomes))
    assert share == expected[0] and expected[1] in text


def gate_a_record(drift, low, n=100, control=False, lag=4, family_shares=None):
    """A run whose step sums give each family this mean drift and low-w share."""
    cells = {f"{family} 10": {"n": n, "adv": n, "low": low[family] * n, "lost_low": 0.0, "high": 0.0,
                              "drift": drift[family] * n} for family in ("ones", "sum")}
    return {"sampler_dtype": "bfloat16" if control else "float32", "lag": 0 if control else lag,
            "iterations": lag + 9, "seed": 900, "cells": cells}


def test_gate_a_needs_all_three_figures_and_its_control():
    good = {"ones": -0.02, "sum": 0.0}
    low = {"ones": 0.2, "sum": 0.05}
    control = gate_a_record({"ones": 0.0, "sum": 0.001}, {"ones": 0.0, "sum": 0.0}, control=True)

    def outcome(cell, control_run):
        records = {(s, "gate-a"): [cell, {**cell, "seed": 901}, control_run, {**control_run, "seed": 901}]
                   for s in report.SETTINGS}
        return report.gate_a(records, "default", 4)

    assert outcome(gate_a_record(good, low), control)["passed"]
    failed = outcome(gate_a_record({"ones": -0.005, "sum": 0.0}, low), control)["checks"]
    assert [k for k, ok in failed.items() if not ok] == ["drift gap >= 0.01"]
    assert not outcome(gate_a_record(good, {"ones": 0.14, "sum": 0.0}), control)["passed"]
    assert not outcome(gate_a_record(good, {"ones": 0.2, "sum": 0.07}), control)["passed"]  # under 3x
    spread = gate_a_record({"ones": -0.003, "sum": 0.0}, low, control=True)
    assert not outcome(gate_a_record(good, low), spread)["checks"]["control gap < 0.002"]
    assert report.gate_a({}, "default", 4) is None


def test_the_sign_flip_test_is_exact_and_holm_steps_down():
    d = [0.1, 0.2, 0.05, 0.3]
    assert decision.sign_flip_p(d) == pytest.approx(2 / 16)  # only all-plus and all-minus reach the mean
    brute = sum(abs(sum(s * x for s, x in zip(signs, [1, -2, 3]))) >= 2 - 1e-12
                for signs in itertools.product((1, -1), repeat=3)) / 8
    assert decision.sign_flip_p([1, -2, 3]) == brute
    assert decision.sign_flip_p([0.01] * 12) == pytest.approx(2 / 4096)
    assert decision.holm({"a": 0.01, "b": 0.02, "c": 0.04}) == {"a": True, "b": True, "c": True}
    assert decision.holm({"a": 0.01, "b": 0.03, "c": 0.04}) == {"a": True, "b": False, "c": False}


def test_equivalence_is_a_90_percent_interval_inside_the_margin_and_rising_is_one_sided():
    tight = [0.01, -0.01] * 6
    low, high = decision.interval90(tight)
    assert low < 0 < high and decision.equivalent(tight) and not decision.equivalent([0.05, 0.0] * 6)
    x = list(range(12))
    assert decision.rising_p(x, [v + 0.1 * (v % 2) for v in x]) < 0.01
    assert decision.rising_p(x, [-v for v in x]) > 0.99


def contrast(mean, interval, holm=True, **extra):
    return {"mean": mean, "interval": interval, "holm": holm, **extra}


@pytest.mark.parametrize("c1, c2, c3, expected", [
    (dict(sum_equivalent=True, dose_p=0.01), (0.05, (0.03, 0.07)), (0.04, (0.02, 0.06), (-0.01, 0.02)),
     {"M": "shown", "R": "supported"}),
    (dict(sum_equivalent=True, dose_p=0.20), (0.05, (0.03, 0.07)), (0.04, (0.02, 0.06), (-0.01, 0.02)),
     {"M": "not resolved", "R": "not resolved"}),  # a gain that does not rise with the lost mass
    (dict(sum_equivalent=True, dose_p=0.01), (0.05, (0.03, 0.07)), (0.01, (-0.01, 0.03), (-0.05, -0.01)),
     {"M": "shown", "R": "not resolved"}),  # the ablation keeps less than half of ReSPO's gain
    (dict(sum_equivalent=True, dose_p=0.6, mean=0.0, interval=(-0.02, 0.02), holm=False),
     (0.0, (-0.02, 0.02)), (0.0, (-0.02, 0.02), (-0.01, 0.01)), {"M": "refuted at this scale",
                                                                  "R": "refuted at this scale"}),
])
def test_the_verdicts_follow_the_preregistered_rules(c1, c2, c3, expected):
    c = {"C1": {**contrast(0.05, (0.03, 0.07)), **c1},
         "C2": contrast(c2[0], c2[1], holm=c2[1][0] > 0),
         "C3": {**contrast(c3[0], c3[1], holm=c3[1][0] > 0), "keeps_half_interval": c3[2]}}
    assert report.verdicts(c) == expected
    assert report.across({"default": expected, "unvectorised": expected}, "M") == expected["M"]
    assert report.across({"default": expected, "unvectorised": {"M": "other"}}, "M").startswith("not resolved (")


def test_the_pairing_check_compares_the_batches_the_warm_start_sampled():
    counts = [{"ones 12": [1, 8]}] * 5
    runs = {m: {0: {"rollouts": counts + [{"ones 12": [i, 8]}]}} for i, m in enumerate(report.METHODS)}
    assert report.pairing_holds(runs, lag=4)  # the batches after the lag may differ
    runs["respo_wtilt"][0] = {"rollouts": [{"ones 12": [2, 8]}] + counts[1:] + [{"ones 12": [0, 8]}]}
    assert not report.pairing_holds(runs, lag=4)


def test_the_committed_summary_is_what_summarise_prints(tmp_path):
    """research/results/conflict/summary.md copies `conflict.py --summarise`; the figures are drawn beside it."""
    root = Path(__file__).resolve().parents[2]
    printed = report.summarise(root / "research/results/conflict", tmp_path)
    assert (root / "research/results/conflict/summary.md").read_text().rstrip("\n") == printed
    assert (tmp_path / "conflict-gate-a-curves.png").stat().st_size > 10_000
