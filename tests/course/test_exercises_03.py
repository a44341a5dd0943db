"""deeper/starvation_controls' exercise checks accept the right answer and reject wrong ones, with a hint that holds no answer."""

import math
from pathlib import Path

import torch

from test_exercises import checks  # notebooks/checks.py, loaded with the course module it imports

ROOT = Path(__file__).resolve().parents[2]

SELECTION = ROOT / "research" / "toy" / "results" / "selection"
METHODS = ("seq_clip", "grpo", "gspo", "cispo", "vespo", "respo_wtilt")  # as the selection records name them


def graded(check, answer, *args, capsys):
    """(accepted, printed line) of one call of a check."""
    accepted = check(answer, *args)
    return accepted, capsys.readouterr().out


def test_collapse_truth_is_read_from_the_records_and_is_a_proper_subset():
    truth = checks.collapsed_methods(SELECTION)
    assert truth and truth < set(METHODS)  # some collapse, not all: the exercise has something to find


def test_collapse_check_accepts_the_records_answer_and_rejects_each_wrong_one(capsys):
    truth = checks.collapsed_methods(SELECTION)
    ok, out = graded(checks.check_collapse_prediction, set(truth), SELECTION, capsys=capsys)
    assert ok and out.startswith("✓ right")
    ok, _ = graded(checks.check_collapse_prediction, sorted(truth), SELECTION, capsys=capsys)
    assert ok  # a list of the same names is the same answer
    survivor = next(m for m in METHODS if m not in truth)
    wrong = {"empty": set(), "every method": set(METHODS), "one missing": set(sorted(truth)[1:]),
             "one survivor added": set(truth) | {survivor}, "the survivors": set(METHODS) - truth,
             "not a collection": None, "a string": "seq_clip"}
    for name, answer in wrong.items():
        ok, out = graded(checks.check_collapse_prediction, answer, SELECTION, capsys=capsys)
        assert not ok, f"the check accepted a wrong answer: {name}"
        assert "✗ not yet" in out and "Hint:" in out
        hint = out.split("Hint:", 1)[1]
        assert not all(m in hint for m in truth), f"the hint names the answer: {hint}"


def test_collapse_truth_follows_the_records(tmp_path):
    """A records file where only GRPO is stuck on every seed gives {grpo}: the truth is read, not stored."""
    import json

    lines = []
    for method in METHODS:
        for seed in range(3):
            stuck = method == "grpo" or (method == "respo_wtilt" and seed == 0)
            lines.append({"method": method, "lr": 0.03, "reuse": 16, "seed": seed, "final_reward": 0.0 if stuck else 0.5,
                          "loss": checks.RECONSTRUCTION_DEFAULT_KERNEL if method == "respo_wtilt" else {}})
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in lines))
    assert checks.collapsed_methods(path) == {"grpo"}


def test_starved_check_grades_against_the_count_it_computes(capsys):
    log_w = torch.full((40,), 0.0)
    log_w[:10] = math.log(0.5)                      # 10 positives below 0.8
    log_w[30:] = math.log(0.5)                      # negatives below 0.8 do not count
    positive = torch.arange(40) < 30
    for right in (10, 11, 9.0, 12):
        ok, out = graded(checks.check_starved_prediction, right, log_w, positive, capsys=capsys)
        assert ok and out.startswith("✓ right"), right
    for wrong in (0, 3, 20, 30, 40, -10, None, "10", True, float("nan")):
        ok, out = graded(checks.check_starved_prediction, wrong, log_w, positive, capsys=capsys)
        assert not ok, f"the check accepted a wrong answer: {wrong!r}"
        assert "✗ not yet" in out and "Hint:" in out and "10" not in out.split("Hint:", 1)[1]
