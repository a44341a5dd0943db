"""The prose figures of the reuse study (research/REUSE.md), as (what, compute) pairs that research/figures.py makes
Figures of. Every value is read from the records under research/results/reuse/ by the study's own rules
(research/reuse_rules.py); a setting without whole seeds reads "not run"."""

from __future__ import annotations

import functools

from research import decision
from research.common import ROOT
from research.digit_runs import SETTINGS, load
from research.reuse_rules import (NS, SEEDS, across, choose_lr, collapsed, collapsed_as_choose_final,
                                  drift_by_method_table, read_setting, shares, stopped_table)

RECORDS = ROOT / "research/results/reuse"
RERUN = ROOT / "research/results/reuse-rerun"  # one record per setting, rerun by its command with --only
NOT_RUN = "not run"
CLAIMS = [f"{c}({n})" for c in ("E", "L") for n in NS] + ["G", "B"]


@functools.cache
def records() -> dict:
    return load(RECORDS)


@functools.cache
def setting(name: str) -> dict:
    return read_setting(records().get((name, "evaluate"), []))


def chosen_lr() -> str:
    lr, _ = choose_lr(records().get(("default", "lr"), []))
    return f"{lr:g}" if lr else NOT_RUN


def lr_means() -> str:
    runs = records().get(("default", "lr"), [])
    by_lr = {}
    for r in runs:
        by_lr.setdefault(r["lr"], []).append(r["summary"]["late"])
    return ", ".join(f"{lr:g}: {decision.mean(v):.3f}" for lr, v in sorted(by_lr.items())) or NOT_RUN


def collapse_readings() -> str:
    """Per setting, the lr stage's runs collapsed as the code reads the rule and as choose_final's window reads it."""
    out = []
    for s in SETTINGS:
        runs = records().get((s, "lr"), [])
        if runs:
            marked = [{f"{r['lr']:g} seed {r['seed']}" for r in runs if rule(r)}
                      for rule in (collapsed, collapsed_as_choose_final)]
            extra = sorted(marked[1] - marked[0])
            out.append(f"{s}: {len(marked[0])} and {len(marked[1])} of {len(runs)}"
                       + (f" (also {', '.join(extra)})" if extra else ", the same runs"))
    return "; ".join(out) or NOT_RUN


def whole_seeds() -> str:
    return ", ".join(f"{s} {len(setting(s)['seeds'])}" for s in SETTINGS) + f" of {len(SEEDS)}"


def check(name: str) -> str:
    x = setting(name)
    if "check" not in x:
        return NOT_RUN
    c = x["check"]
    deep = ", ".join(f"{c['per_n'][n]['log_w_below_-1']:.2%}" for n in NS)
    low = ", ".join(f"{c['per_n'][n]['below_0.8']:.1%}" for n in NS)
    outcome = ("passes" if c["passed"] else "fails") if x["check_final"] else "interim"
    return (f"{outcome} ({len(x['check_seeds'])} grpo seeds; at N = 8, 16, 32 the share with log W < -1 {deep}, "
            f"below w = 0.8 {low}; rise p {c['p']:.4f})")


def verdict(claim: str) -> str:
    return across({s: setting(s) for s in SETTINGS}, claim)


def seconds() -> str:
    out = []
    for s in SETTINGS:
        runs = records().get((s, "evaluate"), [])
        if runs:
            out.append(f"{s} {decision.mean([r['seconds'] for r in runs]):.0f} s over {len(runs)} runs")
    return ", ".join(out) or NOT_RUN


def grpo_share(n: int, key: str) -> str:
    """The share of grpo's positives in a tail at N over updates 1-128, on the check's seeds, as a span over settings."""
    values = [shares([setting(s)["runs"]["grpo"][n][x] for x in setting(s)["check_seeds"]])[key]
              for s in SETTINGS if setting(s)["check_seeds"]]
    return " to ".join(dict.fromkeys(f"{v:.1%}" for v in sorted(values))) or NOT_RUN


def check_seeds_ahead(name: str) -> str:
    """On how many of the check's seeds the log W < -1 share rose from N = 8 to N = 32."""
    x = setting(name)
    return f"{sum(v > 0 for v in x['check']['rise'])} of {len(x['check']['rise'])}" if "check" in x else NOT_RUN


def grpo_table() -> str:
    """grpo's scores and drift per N beside the paper's rows (REUSE.md's descriptive table where the check failed),
    as a markdown table on lines of its own."""
    failed = {s: setting(s) for s in SETTINGS if setting(s).get("check_final") and not setting(s)["check"]["passed"]}
    return "\n\n" + stopped_table(failed) + "\n\n" if failed else NOT_RUN  # blank lines: a table block


def other_runs() -> str:
    """Per setting, runs of the other five methods finished before and after its last grpo run, the check's last
    record (amendment 1's order; the runs before it were made while the check was still open)."""
    out = []
    for s in SETTINGS:
        runs = records().get((s, "evaluate"), [])
        grpo = [r["finished"] for r in runs if r["method"] == "grpo"]
        other = [r["finished"] for r in runs if r["method"] != "grpo"]
        if grpo:
            before = sum(f <= max(grpo) for f in other)
            out.append(f"{s} {before} before, {len(other) - before} after")
    return "; ".join(out) or NOT_RUN


def before_runs_finished() -> str:
    """Per setting, when the last of the other methods' runs counted as before its last grpo run finished."""
    out = []
    for s in SETTINGS:
        runs = records().get((s, "evaluate"), [])
        last = max((r["finished"] for r in runs if r["method"] == "grpo"), default=None)
        before = [r["finished"] for r in runs if r["method"] != "grpo" and last and r["finished"] <= last]
        if before:
            out.append(f"{s} {max(before)}")
    return ", ".join(out) or NOT_RUN


def grpo_finished() -> str:
    """Per setting, when its last grpo run (the check's last record) finished, by the record's stamp."""
    out = []
    for s in SETTINGS:
        stamps = [r["finished"] for r in records().get((s, "evaluate"), []) if r["method"] == "grpo"]
        if stamps:
            out.append(f"{s} {max(stamps)}")
    return ", ".join(out) or NOT_RUN


def deep_16_to_32(name: str) -> str:
    """The check's pooled log W < -1 share of grpo's positives from N = 16 to N = 32 on a setting, and the change."""
    x = setting(name)
    if "check" not in x:
        return NOT_RUN
    a, b = (x["check"]["per_n"][n]["log_w_below_-1"] for n in NS[1:])
    return f"{a:.2%} to {b:.2%}, {100 * (b - a):+.2f} points"


def drift_by_method() -> str:
    """Post hoc: the share of positives with log W < -1 per method and N over every committed run, both settings,
    as a markdown table on lines of its own."""
    runs = {s: records().get((s, "evaluate"), []) for s in SETTINGS}
    return "\n\n" + drift_by_method_table(runs) + "\n\n" if any(runs.values()) else NOT_RUN


def rerun_matches() -> str:
    """Whether each rerun record's per-update scores and held-out pass@1 equal the committed record's."""
    reruns = load(RERUN)
    if not reruns:
        return NOT_RUN
    out = []
    for (s, stage), rs in sorted(reruns.items()):
        originals = {r["file"]: r for r in records().get((s, stage), [])}
        for r in rs:
            same = r["file"] in originals and all(r[k] == originals[r["file"]][k] for k in ("score", "heldout"))
            out.append(f"{s} {r['file']}: {'bit for bit' if same else 'DIFFERS'} ({r['seconds']} s)")
    return ", ".join(out)


FIGURES = {
    "reuse_lr": ("the reuse study's learning rate, by REUSE.md's rule on the default setting's lr stage", chosen_lr),
    "reuse_lr_late": ("the lr stage's mean late score per lr (default setting, seeds 900-901, N = 1)", lr_means),
    "reuse_whole_seeds": ("whole seeds of the reuse cell per setting (every method at every N)", whole_seeds),
    "reuse_seconds": ("mean seconds of one reuse-cell run (256 updates, 8,192 responses) per setting", seconds),
    "reuse_check_default": ("the reuse study's manipulation check on the default setting (grpo, updates 1-128)",
                            lambda: check("default")),
    "reuse_check_unvectorised": ("the same check on the unvectorised setting", lambda: check("unvectorised")),
    **{f"reuse_grpo_{tag}_n{n}": (f"share of grpo's positives {what} at N = {n}, updates 1-128, over settings",
                                  functools.partial(grpo_share, n, key))
       for n in NS for tag, what, key in (("deep", "with log W < -1", "log_w_below_-1"),
                                          ("low", "below w = 0.8", "below_0.8"))},
    "reuse_check_rise_default": ("seeds on which the log W < -1 share rose from N = 8 to 32, default setting",
                                 lambda: check_seeds_ahead("default")),
    "reuse_check_rise_unvectorised": ("the same, unvectorised", lambda: check_seeds_ahead("unvectorised")),
    "reuse_grpo_table": ("grpo per N beside the paper's GRPO rows, on each setting whose check failed", grpo_table),
    "reuse_other_runs": ("runs of the other five methods finished before and after the setting's last grpo run",
                         other_runs),
    "reuse_lr_collapse": ("lr-stage runs collapsed, by the late score (the code) and by choose_final's last 5 batches",
                          collapse_readings),
    "reuse_other_runs_before_finished": ("the last of the other methods' runs counted as before the setting's last grpo "
                                         "run finished at (the record's stamp)", before_runs_finished),
    "reuse_grpo_finished": ("the setting's last grpo run finished at (the record's stamp)", grpo_finished),
    "reuse_check_deep_16_32_unvectorised": ("the check's log W < -1 share from N = 16 to 32, unvectorised",
                                            lambda: deep_16_to_32("unvectorised")),
    "reuse_drift_by_method": ("post hoc: the share of positives with log W < -1 per method and N, updates 1-128, "
                              "every committed run pooled as the check pools, seeds in brackets", drift_by_method),
    "reuse_rerun": ("one reuse record per setting rerun from its command: equal to the committed one?", rerun_matches),
    **{f"reuse_verdict_{c.replace('(', '').replace(')', '')}": (f"the reuse study's verdict {c} over both settings",
                                                                functools.partial(verdict, c)) for c in CLAIMS},
}
