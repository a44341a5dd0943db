"""The prose figures of issue 32's two readings, as (what, compute) pairs that experiments/figures.py makes Figures of:
Study 2 read again (experiments/reread.py's records) and the digit_conflict study (experiments/conflict.py's)."""

from __future__ import annotations

import functools
import json

from experiments import reread
from experiments.common import ROOT

REREAD = ROOT / "experiments/results/gate2-reread"
COMMITTED_GATE2 = ROOT / "experiments/results/gate2-amended"


def span(values, digits: int, unit: str = "", signed: bool = False) -> str:
    form = f"{{:{'+' if signed else ''}.{digits}f}}"
    low, high = form.format(min(values)), form.format(max(values))
    if low == high:
        return low + unit
    return f"{low} to {high}{unit}" if signed else f"{low}-{high}{unit}"


def percent(values, digits: int = 0) -> str:
    return span([100 * v for v in values], digits, "%")


@functools.cache
def reruns() -> tuple[dict, ...]:
    return tuple(reread.load(REREAD))


def fallback(record: dict) -> bool:
    return (record["gate"]["reuse"], record["gate"]["lag"]) != (8, 0)


def per_rerun(read, fallbacks: bool | None = None) -> list[float]:
    """read(positives of the steps the gate read) for each rerun: all, R = 8 only (False), the fallbacks (True)."""
    return [read(reread.gate_positives(r)) for r in reruns() if fallbacks is None or fallback(r) == fallbacks]


def longer_than_all() -> str:
    records = [json.loads(p.read_text()) for p in sorted(COMMITTED_GATE2.glob("*.json"))]
    longer = [r for r in records if r["pooled"]["len_low_w_pos"] > r["pooled"]["len_pos"]]
    return f"{len(longer)} of {len(records)}"


def rerun_share(fallbacks: bool) -> str:
    return percent([r["rerun_pooled"]["low_w_pos_frac"] for r in reruns() if fallback(r) == fallbacks], 1)


FIGURES = {
    "digit_sum_gate2_longer_than_all": (
        "committed gate 2 records whose low-w positives are longer than all positives (pooled over seeds)",
        longer_than_all),
    "reread_records": ("gate 2 cells rerun here from their recorded commands (both CPU settings)",
                       lambda: len(reruns())),
    "reread_minutes": ("minutes the reruns took, both settings, warm starts included (one process per setting)",
                       lambda: f"{sum(r['seconds'] for r in reruns()) / 60:.0f}"),
    "reread_share_r8": ("reruns at R = 8: share of positives below w = 0.8, range", lambda: rerun_share(False)),
    "reread_share_fallbacks": ("reruns at the fallbacks (R = 16; R = 8 with lag 8): the same share, range",
                               lambda: rerun_share(True)),
    "reread_corr_log_w": ("within target (each target's mean taken out), correlation of length with log w over "
                          "the positives the gate read, range over reruns",
                          lambda: span(per_rerun(lambda ps: reread.within_target(ps)["corr_log_w"]), 2, signed=True)),
    "reread_corr_drift": ("the same with the per-token drift log w / length",
                          lambda: span(per_rerun(lambda ps: reread.within_target(ps)["corr_drift"]), 2, signed=True)),
    "reread_lost_low": ("what the sequence clip takes from the low tail, sum of 1 - w per positive, range over reruns",
                        lambda: span(per_rerun(lambda ps: reread.lost_mass(ps)["low"]), 3)),
    "reread_lost_high": ("what it takes from the high tail, the share of positives above w = 1.2 (each loses its "
                         "whole coefficient), range", lambda: span(per_rerun(lambda ps: reread.lost_mass(ps)["high"]), 3)),
    "reread_high_takes_more": ("reruns where the clip takes more from the high tail than from the low one",
                               lambda: (lambda v: f"{sum(v)} of {len(v)}")(
                                   per_rerun(lambda ps: reread.lost_mass(ps)["high"] > reread.lost_mass(ps)["low"]))),
    "reread_long_low": ("positives of the long targets (t >= 27) below w = 0.8, range over reruns",
                        lambda: percent(per_rerun(lambda ps: reread.lost_mass(ps)["long_low"]))),
    "reread_long_high": ("positives of the long targets above w = 1.2, range over reruns",
                         lambda: percent(per_rerun(lambda ps: reread.lost_mass(ps)["long_high"]))),
}
