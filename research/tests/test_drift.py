"""research/drift.py and drift_rules.py (research/DRIFT.md): the runs each stage makes, one tiny run read end
to end, and every pre-registered rule on records made up to exercise it."""

import itertools
import os
import math
import random

import numpy as np
import pytest

from research import decision, digit_runs, drift, drift_rules as rules
from train import TrainConfig
from research.cli import parse_config
from tests.conftest import parity_reward  # noqa: F401  (the parity_runs fixture's reward)


def test_each_stage_runs_its_cells_as_preregistered():
    cfg = drift.DriftConfig()
    lr = drift.stage_runs("lr", None, cfg)
    assert len(lr) == 6 and {(c.reuse, c.lag, c.loss.method) for _, c in lr} == {(1, 0, "respo")}
    dense = drift.stage_runs("evaluate", 3e-4, cfg)
    assert len(dense) == 24 * 8 and "anchor-seed23" in [n for n, _ in dense]
    for name, c in dense:
        assert (c.model, c.task, c.sft.full_share, c.max_new_tokens, c.prompts_per_iteration) == \
            ("tiny-qwen3", "digit_conflict", 0.04, 32, 32)
        assert (c.iterations, c.lr, c.loss.agg) == (13, 3e-4, "token-mean")
        assert (c.reuse, c.epochs, c.lag) == ((1, 1, 0) if name.startswith("anchor") else (4, 1, 4))
    assert {c.epochs for _, c in drift.stage_runs("evaluate-2x2", 3e-4, cfg)} == {2}  # the fallback: Study 3's 2 x 2
    assert {c.model for _, c in drift.stage_runs("moe", 3e-4, cfg)} == {"tiny-qwen3-moe"}
    long = drift.stage_runs("long", 3e-4, parse_config(drift.DriftConfig, ["--long-seeds", "8"]))
    assert len(long) == 8 * 3 and {c.iterations for _, c in long} == {28}
    assert [n for n, _ in drift.stage_runs("wtilt", 3e-4, cfg)][:2] == ["respo_wtilt-seed0", "respo_wtilt-seed1"]
    with pytest.raises(SystemExit):
        parse_config(drift.DriftConfig, ["--stage", "gate-a"])


def test_a_tiny_run_is_read_into_per_length_sums_with_its_own_coefficient(model_cache, parity_runs):
    """A grpo run (token level: its coefficient is not a function of log w) read as the study reads one."""
    cfg = parse_config(TrainConfig, ["--task", "digit_conflict", "--task-size", "14", "--max-new-tokens", "30",
                                     "--sft-steps", "8", "--iterations", "6", "--prompts-per-iteration", "4",
                                     "--group-size", "4", "--reuse", "4", "--lag", "1", "--method", "grpo",
                                     "--lr", "3e-3", "--eval-problems", "4", "--seed", "3"])
    record = digit_runs.run_record(cfg, "research.drift", [], rules.READINGS, own=True)
    cells = record["cells"]
    assert cells and all({"n", "adv", "low", "deep", "phi_adv_own", "phi_adv_respo"} <= set(c) for c in cells.values())
    own = rules.retained([record], "own", (2, 32))
    assert 0 < own < 2 and own != rules.retained([record], "seq_clip", (2, 32))
    assert len(record["rollouts"]) == 6 and record["agg"] == "token-mean" and record["epochs"] == 1


def test_the_exact_sign_flip_test_counts_every_assignment():
    d = [0.3, -0.1, 0.25, 0.05, -0.2, 0.15, 0.1, -0.05, 0.2, 0.12]
    brute = sum(abs(sum(s * x for s, x in zip(signs, d))) >= abs(sum(d)) - 1e-12
                for signs in itertools.product((1, -1), repeat=len(d))) / 2 ** len(d)
    assert rules.sign_flip_p(d) == brute == decision.sign_flip_p(d)
    assert rules.sign_flip_p([0.01] * 24) == pytest.approx(2 / 2 ** 24)  # only all-plus and all-minus reach it


def every_assignment_p(differences: list[float]) -> float:
    """The sign-flip p by brute force, as rules.sign_flip_p computed it before it met in the middle: each of the
    2^n assignments' sums, compared with the observed |sum| less 1e-12."""
    d = np.asarray(differences, dtype=np.float64)
    signs = 1.0 - 2.0 * ((np.arange(1 << len(d), dtype=np.int64)[:, None] >> np.arange(len(d), dtype=np.int64)) & 1)
    return int((np.abs(signs @ d) >= abs(d.sum()) - 1e-12).sum()) / (1 << len(d))


def test_the_sign_flip_count_by_halves_is_the_brute_force_count():
    """Exactly the brute force's p on vectors with ties, zeros, equal magnitudes and sums of ~0 (p = 1)."""
    rng = random.Random(0)
    pools = ([0.0, 0.01, -0.01, 0.02, -0.02, 0.05, -0.05, 0.1, -0.1, 0.25, -0.25, 1 / 3, -1 / 3], [0, 1, -1, 2, -2, 3],
             [0.1, -0.1], [0.3, 0.1, 0.2, -0.6], [0.0])
    vectors = [[], [0.0] * 5, [0.1, -0.1], [0.1, 0.2, 0.3, -0.6], [0.05] * 14, [0.05, -0.05] * 7]
    for trial in range(1200):
        n = 1 + trial % 14
        magnitude = rng.choice([0.01, 0.03, 0.125, 0.1])
        vectors.append([rng.choice(rng.choice(pools)) for _ in range(n)] if trial % 4 == 0 else
                       [rng.gauss(0, 0.1) for _ in range(n)] if trial % 4 == 1 else
                       [round(rng.gauss(0, 0.1), 2) for _ in range(n)] if trial % 4 == 2 else
                       [magnitude * rng.choice([1, -1, 0]) for _ in range(n)])
    mismatched = [(d, rules.sign_flip_p(d), every_assignment_p(d)) for d in vectors
                  if rules.sign_flip_p(d) != every_assignment_p(d)]
    assert not mismatched, mismatched[:3]
    assert sum(every_assignment_p(d) == 1.0 for d in vectors) > 100  # the ~0 sums are among them


def record_with(low_share, low_length, length, keeps, seed=0, n=100):
    """A made-up seq_clip run: n positives of `length` tokens, a share below 0.8 of `low_length` tokens."""
    low = round(low_share * n)
    cells = {f"sum {length}": {"n": n - low, "adv": n - low, "low": 0, "deep": 0, "phi_adv_seq_clip": (n - low) * keeps},
             f"ones {low_length}": {"n": low, "adv": low, "low": low, "deep": low / 2, "phi_adv_seq_clip": low * keeps}}
    return {"seed": seed, "cells": {k: {**v, "lost_low": 0.0, "high": 0, "drift": 0.0} for k, v in cells.items()}}


def test_the_manipulation_check_reads_its_three_rules():
    good = [record_with(0.3, 20, 5, 0.5, seed=s) for s in range(6)]
    check = rules.manipulation(good)
    assert check["passed"] and check["low_share"] == pytest.approx(0.3)
    assert check["gap"] == pytest.approx(20 - (0.3 * 20 + 0.7 * 5)) and check["gap_interval"][0] <= check["gap"]
    assert not rules.manipulation([record_with(0.1, 20, 5, 0.5, seed=s) for s in range(6)])["passed"]  # share
    short = rules.manipulation([record_with(0.3, 3, 5, 0.5, seed=s) for s in range(6)])
    assert [k for k, ok in short["checks"].items() if not ok] == ["low tail longer than all"]
    kept = rules.manipulation([record_with(0.3, 20, 5, 0.8, seed=s) for s in range(6)])
    assert [k for k, ok in kept["checks"].items() if not ok] == ["clip keeps <= 0.7 in every populated bin"]


def test_the_pairing_check_compares_the_batches_the_warm_start_sampled():
    counts = [{"ones 12": [1, 8]}] * 5
    runs = {m: {0: {"rollouts": counts + [{"ones 12": [i, 8]}]}} for i, m in enumerate(rules.DENSE_METHODS)}
    assert rules.pairing_holds(runs, rules.DENSE_METHODS)
    runs["respo"][0] = {"rollouts": [{"ones 12": [2, 8]}] + counts[1:]}
    assert not rules.pairing_holds(runs, rules.DENSE_METHODS)


def contrast(mean, interval, reads, d=()):
    return {"mean": mean, "interval": interval, "reads": reads, "d": list(d)}


WIN = contrast(0.05, (0.03, 0.07), "higher", [0.05] * 4)
TIE = contrast(0.0, (-0.02, 0.02), "tie", [0.0] * 4)
OPEN = contrast(0.02, (-0.01, 0.06), "not resolved", [0.02] * 4)


@pytest.mark.parametrize("c, expected", [
    ({"C1": WIN, "C2": WIN, "C3": contrast(0.04, (0.02, 0.06), "higher", [0.04] * 4), "C4": WIN, "C5": WIN, "C6": WIN},
     {"M": "supported", "R": "supported", "U": "supported"}),
    ({"C1": WIN, "C2": WIN, "C3": contrast(0.0, (-0.02, 0.02), "tie", [-0.01] * 4), "C4": WIN, "C5": TIE, "C6": WIN},
     {"M": "supported", "R": "not resolved", "U": "refuted at this scale"}),  # C3 keeps less than half; GSPO tied
    ({"C1": TIE, "C2": WIN, "C3": WIN, "C4": OPEN, "C5": OPEN, "C6": OPEN},
     {"M": "refuted at this scale", "R": "not resolved", "U": "not resolved"}),  # R needs M
    ({"C1": OPEN, "C2": TIE, "C4": WIN}, {"M": "not resolved", "R": "refuted at this scale", "U": "supported"}),  # MoE
])
def test_the_verdicts_follow_the_preregistered_rules(c, expected):
    assert rules.verdicts(c) == expected
    assert rules.across({"default": expected, "unvectorised": expected}, "M") == expected["M"]
    assert rules.across({"default": expected, "unvectorised": {"M": "x"}}, "M").startswith("not resolved (")


def test_a_contrast_reads_higher_lower_tie_or_not_resolved(monkeypatch):
    seeds = range(10)
    runs = {m: {s: {"m": m, "s": s} for s in seeds} for m in ("seq_clip", "a", "b", "c", "d")}
    value = {"seq_clip": 0.0, "a": 0.1, "b": -0.1, "c": 0.0, "d": 0.03}
    monkeypatch.setitem(rules.METRICS, "early", lambda r: value[r["m"]] + 0.001 * (r["s"] % 3 - 1) * (r["m"] != "seq_clip"))
    out = rules.contrasts(runs, {"A": ("a", "seq_clip"), "B": ("b", "seq_clip"), "C": ("c", "seq_clip"),
                                 "D": ("d", "seq_clip")}, secondary=())
    assert [out[k]["reads"] for k in "ABCD"] == ["higher", "lower", "tie", "higher"]
    assert all(math.isclose(out[k]["p"], 2 / 1024) for k in "ABD")


def test_the_evidence_figure_colours_every_contrast_holm_rejects_whatever_its_sign():
    """A rejected contrast below 0 (ReSPO Holm-significantly behind a baseline) is drawn like a rejected one above."""
    rejected_above, rejected_below, kept = ({"holm": h, "mean": m} for h, m in ((True, 0.05), (True, -0.03), (False, -0.03)))
    assert rules.contrast_colour(rejected_below) == rules.contrast_colour(rejected_above) == "tab:red"
    assert rules.contrast_colour(kept) != "tab:red"


def test_the_post_hoc_contrasts_are_read_apart_from_the_decision(monkeypatch):
    """P1, P2 compare other ReSPOs with the published kernel, on their own family of two (none of C1-C6), and count
    the seeds each way."""
    assert set(rules.POST_HOC_CONTRASTS) & set(rules.CONTRASTS) == set()
    assert {b for _, b in rules.POST_HOC_CONTRASTS.values()} == {"respo"}
    value = {"respo": 0.0, "respo_pos_clip_neg": 0.05, "respo_wtilt": 0.1}
    runs = {m: {s: {"m": m, "s": s} for s in range(10)} for m in value}
    monkeypatch.setitem(rules.METRICS, "early", lambda r: value[r["m"]] + 0.001 * (r["s"] % 3 - 1) * (r["m"] != "respo"))
    out = rules.contrasts(runs, rules.POST_HOC_CONTRASTS, secondary=())
    assert [out[k]["reads"] for k in ("P1", "P2")] == ["higher", "higher"]
    assert [rules.seeds_ahead(out[k]["d"]) for k in ("P1", "P2")] == [10, 10]


def test_only_reruns_one_named_record(tmp_path, monkeypatch):
    """--only picks one run of a stage by its record's name, and refuses a name the stage does not have."""
    ran = []
    monkeypatch.setattr(drift, "run_all", lambda folder, runs, make, label: ran.extend(n for n, _ in runs))
    cfg = parse_config(drift.DriftConfig, ["--stage", "evaluate", "--lr", "3e-4", "--only", "respo-seed3",
                                           "--out", str(tmp_path)])
    drift.run_stage(cfg, "evaluate", cfg.lr, [])
    assert ran == ["respo-seed3"]
    with pytest.raises(SystemExit, match="no run of --stage evaluate"):
        drift.run_stage(parse_config(drift.DriftConfig, ["--stage", "evaluate", "--lr", "3e-4", "--only", "respo-seed99"]),
                        "evaluate", 3e-4, [])
    with pytest.raises(SystemExit):
        parse_config(drift.DriftConfig, ["--only", "respo-seed3"])  # no stage, no lr


def test_the_moe_stages_train_and_find_their_warm_start_in_a_cache_of_their_own(tmp_path, monkeypatch):
    monkeypatch.setenv("NANO_RESPO_CACHE", str(tmp_path / "cache"))
    seen = {}
    monkeypatch.setattr(drift, "run_stage_here", lambda cfg, stage, lr, argv: seen.update({stage: os.environ["NANO_RESPO_CACHE"]}))
    for stage in ("gate1", "moe-gate1", "moe", "long"):
        drift.run_stage(drift.DriftConfig(), stage, 3e-4, [])
    assert seen == {"gate1": str(tmp_path / "cache"), "moe-gate1": str(tmp_path / "cache-moe"),
                    "moe": str(tmp_path / "cache-moe"), "long": str(tmp_path / "cache")}
    assert os.environ["NANO_RESPO_CACHE"] == str(tmp_path / "cache")


def test_the_committed_summary_is_what_the_records_give():
    """research/results/drift/summary.md is `python -m research.drift --summarise` on the committed records."""
    out = drift.ROOT / "research/results/drift"
    assert (out / "summary.md").read_text().strip() == rules.summarise(out).strip()
