"""The prose figures of issue 32's two readings, as (what, compute) pairs that research/figures.py makes Figures of:
Study 2 read again (research/reread.py's records) and the digit_conflict study (research/conflict.py's)."""

from __future__ import annotations

import functools
import json

from research import reread
from research.common import ROOT

REREAD = ROOT / "research/results/gate2-reread"
COMMITTED_GATE2 = ROOT / "research/results/gate2-amended"


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


def low_longer_pooled(positives: list[dict]) -> bool:
    """Pooled per positive (every seed and target): the positives below w = 0.8 are longer than all positives."""
    low = [p["length"] for p in positives if p["log_w"] < reread.LOW]
    return reread.mean(low) > reread.mean(p["length"] for p in positives)


def count(flags: list[bool]) -> str:
    return f"{sum(flags)} of {len(flags)}"


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
    "reread_excess_low": ("within target, tokens by which the positives below w = 0.8 are longer than their target's "
                          "mean positive, range over reruns",
                          lambda: span(per_rerun(lambda ps: reread.within_target(ps)["excess_low"]), 1, signed=True)),
    "reread_low_longer_pooled": ("reruns whose positives below w = 0.8, pooled per positive over seeds and targets, "
                                 "are longer than all positives", lambda: count(per_rerun(low_longer_pooled))),
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


# --- the digit_conflict study (research/conflict.py, conflict_report.py) ------------------------------

CONFLICT = ROOT / "research/results/conflict"


@functools.cache
def conflict_records():
    from research import conflict_report
    return conflict_report.load(CONFLICT)


def gate_a_cells() -> list[dict]:
    """Gate A's figures for every (setting, lag) it ran."""
    from research import conflict_report as report
    records = conflict_records()
    return [g for lag in report.gate_a_lags(records) for s in report.SETTINGS
            if (g := report.gate_a(records, s, lag)) is not None]


def gate1_passing(key: str) -> list[float]:
    from research import conflict_report as report
    share, _ = report.gate1_search(conflict_records())
    return [r[key] for s in report.SETTINGS for r in conflict_records()[(s, "gate1")]
            if r["config"]["sft_full_share"] == share]


def on_policy_success(family: str, batches: slice) -> list[float]:
    """On-policy respo at lr* (the lr stage's runs): per run, the family's success over these rollout batches."""
    from research import conflict_report as report
    lr, _ = report.lr_star(conflict_records())
    runs = [r for s in report.SETTINGS for r in conflict_records()[(s, "lr")] if r["lr"] == lr]
    return [sum(report.family_curve(r, family)[batches]) / len(report.family_curve(r, family)[batches]) for r in runs]


def control_gap() -> str:
    """The control's largest drift gap |ones - sum| over the gate A cells."""
    return f"{max(abs(g['control_ones']['drift'] - g['control_sum']['drift']) for g in gate_a_cells()):.4f}"


def gate_a_run_cells() -> list[list[dict]]:
    """The runs behind each gate A cell, one list per (lag, setting), the control runs left out."""
    from research import conflict_report as report
    records = conflict_records()
    return [report.gate_a_runs(records, s, lag, False) for lag in report.gate_a_lags(records) for s in report.SETTINGS]


def populated_bins(cell: list[dict]) -> list[tuple]:
    """The length bins holding 50+ positives (both families) in a gate A cell: the ones its retained shares read."""
    from research import conflict_report as report
    return [b for b in report.LENGTH_BINS
            if sum(report.family_sums(r, f, b).get("n", 0) for r in cell for f in ("sum", "ones")) >= 50]


def sum_high_shares() -> list[float]:
    from research import conflict_report as report
    return [report.high_share(cell, "sum") for cell in gate_a_run_cells()]


def ones_falls() -> str:
    """On-policy runs whose ones success over the last 4 batches is below that of their first 2."""
    end, start = on_policy_success("ones", slice(-4, None)), on_policy_success("ones", slice(0, 2))
    return f"{sum(e < s for e, s in zip(end, start))} of {len(end)}"


def conflict_minutes() -> str:
    return f"{sum(r.get('seconds', 0) for rs in conflict_records().values() for r in rs) / 60:.0f}"


def gate_a_retained(method: str) -> list[float]:
    """method's retained share of the positives' signal in each populated length bin of every gate A cell."""
    from research import conflict_report as report
    return [report.retained(cell, method, b) for cell in gate_a_run_cells() for b in populated_bins(cell)]


def sum_lower_per_sequence() -> str:
    """Gate A cells where the sum positives' mean sequence log w is below the ones positives' (summary.md's table)."""
    from research import conflict_report as report
    return count([report.mean_log_w(c, "sum") < report.mean_log_w(c, "ones") for c in gate_a_run_cells()])


def epochs_of(record: dict) -> int:
    """Passes over each rollout batch in a gate A run: every response is read once per epoch's step."""
    from research import conflict
    cfg = conflict.ConflictConfig(stage="gate-a", lr=record["lr"], lag=record["lag"])
    return conflict.train_config(cfg, record["method"], record["reuse"], record["lag"], record["seed"],
                                 record["lr"]).epochs


def ones_distinct() -> list[float]:
    """Distinct ones positives behind each gate A cell: positives x steps over the steps each response is read at."""
    from research import conflict_report as report
    return [sum(report.family_sums(r, "ones").get("n", 0) / epochs_of(r) for r in cell) for cell in gate_a_run_cells()]


def least_kept_bin() -> str:
    """The length bin (of those with 50+ positives) where the sequence clip keeps the least, and in how many cells."""
    from collections import Counter

    from research import conflict_report as report
    least = [min(populated_bins(cell), key=lambda b: report.retained(cell, "seq_clip", b))
             for cell in gate_a_run_cells()]
    (low, high), k = Counter(least).most_common(1)[0]
    return f"{low}-{high} tokens in {k} of {len(least)} cells"


def conflict_figures() -> dict:
    from research import conflict_report as report
    return {
        "conflict_gate1_share": ("digit_conflict: the share of warm-start draws from the whole task at which gate 1 "
                                 "passed on both settings", lambda: f"{report.gate1_search(conflict_records())[0]:.0%}"),
        "conflict_gate1_success": ("success on the trained ones targets t >= 20 there, range over settings",
                                   lambda: span(gate1_passing("success_long"), 3)),
        "conflict_gate1_pass8": ("pass@8 there, range over settings", lambda: span(gate1_passing("pass@8_long"), 3)),
        "conflict_lr_star": ("lr* of the on-policy selection (respo_wtilt at R = 1) on the default kernels",
                             lambda: f"{report.lr_star(conflict_records())[0]:g}"),
        "conflict_lr_star_unvectorised": ("what the unvectorised selection would choose",
                                          lambda: f"{report.lr_star(conflict_records(), 'unvectorised')[0]:g}"),
        "conflict_gate_a_outcome": ("gate A's outcome by the pre-registered rule",
                                    lambda: report.gate_a_outcome(conflict_records())[1]),
        "conflict_gate_a_ones_low": ("gate A cells (both lags and settings): share of the ones positives below w = 0.8",
                                     lambda: percent([g["ones"]["low_share"] for g in gate_a_cells()])),
        "conflict_gate_a_sum_low": ("the same for the sum positives",
                                    lambda: percent([g["sum"]["low_share"] for g in gate_a_cells()])),
        "conflict_gate_a_ratio": ("ones share over sum share, range over the gate A cells (the gate needs 3)",
                                  lambda: span([g["ones"]["low_share"] / g["sum"]["low_share"]
                                                for g in gate_a_cells()], 1)),
        "conflict_gate_a_drift_ones": ("mean per-token drift log w / |y| of the ones positives, range",
                                       lambda: span([g["ones"]["drift"] for g in gate_a_cells()], 3, signed=True)),
        "conflict_gate_a_drift_sum": ("the same for the sum positives",
                                      lambda: span([g["sum"]["drift"] for g in gate_a_cells()], 3, signed=True)),
        "conflict_gate_a_control_gap": ("the control's drift gap |ones - sum| (bf16 sampler, R = 1), largest over "
                                        "settings and lengths", control_gap),
        "conflict_gate_a_ones_positives": ("ones positives behind each gate A cell's figures (positives x steps, two "
                                           "seeds pooled), range",
                                           lambda: span([g["ones"]["n"] for g in gate_a_cells()], 0)),
        "conflict_gate_a_ones_distinct": ("distinct ones positives behind each gate A cell (each response is read "
                                          "at one step per epoch), range", lambda: span(ones_distinct(), 0)),
        "conflict_gate_a_epochs": ("epochs over each rollout batch in the gate A runs (the steps a response is "
                                   "read at)",
                                   lambda: "/".join(sorted({str(epochs_of(r)) for cell in gate_a_run_cells()
                                                            for r in cell}))),
        "conflict_gate_a_sum_lower": ("gate A cells where the sum positives' mean log w (per sequence) is below the "
                                      "ones positives'", sum_lower_per_sequence),
        "conflict_gate_a_sum_high": ("gate A cells: share of the sum positives above w = 1.2 (the clip gives them 0)",
                                     lambda: percent(sum_high_shares())),
        "conflict_retained_seq_clip": ("share of the positives' signal the sequence clip keeps, per length bin with "
                                       "50+ positives of every gate A cell, range",
                                       lambda: span(gate_a_retained("seq_clip"), 2)),
        "conflict_retained_least_bin": ("the length bin (50+ positives) where the sequence clip keeps the least, "
                                        "and in how many gate A cells", least_kept_bin),
        "conflict_retained_lowpos1": ("the same for seq_clip_lowpos1",
                                      lambda: span(gate_a_retained("seq_clip_lowpos1"), 2)),
        "conflict_retained_respo_wtilt": ("the same for the reconstruction respo_wtilt",
                                          lambda: span(gate_a_retained("respo_wtilt"), 2)),
        "conflict_onpolicy_sum_start": ("on-policy respo_wtilt at lr*: sum success in batch 0, range over runs",
                                        lambda: span(on_policy_success("sum", slice(0, 1)), 2)),
        "conflict_onpolicy_sum_end": ("its sum success over the last 4 batches, range over runs",
                                      lambda: span(on_policy_success("sum", slice(-4, None)), 2)),
        "conflict_onpolicy_ones_start": ("its ones success in batch 0, range over runs",
                                         lambda: span(on_policy_success("ones", slice(0, 1)), 3)),
        "conflict_onpolicy_ones_end": ("its ones success over the last 4 batches, range over runs",
                                       lambda: span(on_policy_success("ones", slice(-4, None)), 3)),
        "conflict_onpolicy_ones_falls": ("on-policy runs at lr* whose ones success over the last 4 batches is below "
                                         "that of their first 2", ones_falls),
        "conflict_minutes": ("minutes of every digit_conflict record's runs, warm starts included, both settings",
                             conflict_minutes),
    }


FIGURES |= conflict_figures()
