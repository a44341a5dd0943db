"""The paper's summaries of a run, from its metrics.jsonl (docs/training.md, "The paper's summaries").

The training score of an update is its rollout batch's mean reward (already in [0, 1] here; the paper
maps its {-1, 1} reward to (score + 1) / 2). Over a run of S updates:
    early   the score's maximum over updates 1 .. S/4      (the paper: update 256 of 1,024)
    late    the score's mean over updates 7S/8 + 1 .. S    (the paper: the last eighth, 896-1,024)
and the paper's positive-branch diagnostic over updates 1 .. S/2 (the paper: the first 512 at N = 32), the
mean per update of the share of positives with log W < -1 (deep_low_w_pos_frac) and of the share of the
positives' coefficient mass they receive (deep_low_w_pos_phi_mass). S is the run's planned
iterations x reuse (config.json), so a run cut short gives no late score rather than a wrong one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .runs import read_metrics

DIAGNOSTIC = ("deep_low_w_pos_frac", "deep_low_w_pos_phi_mass")


def mean(values: list[float]) -> float:
    kept = [v for v in values if v is not None and math.isfinite(v)]  # NaN is logged as null: an empty set
    return sum(kept) / len(kept) if kept else float("nan")


def paper_summary(records: list[dict], total_updates: int | None = None) -> dict:
    """early, late and the positive-branch diagnostic of one run's records (see the module's docstring)."""
    train = [r for r in records if r.get("kind") == "train" and not r.get("skipped")]
    if not train:
        raise ValueError("metrics: no training records to summarise")
    total = total_updates or max(r["step"] for r in train)
    early = [r["reward"] for r in train if r["step"] <= total // 4]
    late = [r["reward"] for r in train if r["step"] > total - total // 8]
    first_half = [r for r in train if r["step"] <= total // 2]
    return {"updates": total, "updates_logged": max(r["step"] for r in train),
            "early": max(early) if early else float("nan"), "late": mean(late),
            **{f"{key}_first_half": mean([r.get(key) for r in first_half]) for key in DIAGNOSTIC}}


def run_summary(run_dir: str) -> dict:
    """paper_summary of runs/<name>, its planned updates read from its config.json."""
    path = Path(run_dir).expanduser()
    if not (path / "metrics.jsonl").is_file():
        raise ValueError(f"model: {run_dir!r} holds no metrics.jsonl; --summary reads a run directory")
    config_file = path / "config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    total = config["iterations"] * config["reuse"] if "iterations" in config and "reuse" in config else None
    return {"run": str(run_dir), **paper_summary(read_metrics(path), total)}
