"""The prose figures of one cell of each study rerun on a second machine (research/results/reruns/<machine>/),
as (what, compute) pairs that research/figures.py makes Figures of.

Each folder holds what the study's own command wrote when rerun there from an empty cache with --out pointed at
the folder (commands.md beside it says which): digit_conflict's gate 1 and gate A cells on both CPU settings,
one cell of the reverse grid with its --check, one gate 2 cell read again (research/reread.py, its per-response
rows dropped), one cell of the off-policy study. Every figure compares the rerun with the committed records.
"""

from __future__ import annotations

import functools
import json

from research.common import ROOT
from research.mechanism_figures import percent, span

RERUNS = ROOT / "research/results/reruns/amd-epyc-avx2"
OFFPOLICY_CELL = "tiny-qwen3/reuse/respo_wtilt-seed0.json"  # under offpolicy/<setting>/


@functools.cache
def conflict():
    from research import conflict_report
    return conflict_report.load(RERUNS / "conflict")


def gate_a_cells(records=None) -> list[dict]:
    from research import conflict_report as report
    records = conflict() if records is None else records
    return [g for lag in report.gate_a_lags(records) for s in report.SETTINGS
            if (g := report.gate_a(records, s, lag)) is not None]


def committed_conflict():
    from research.mechanism_figures import conflict_records
    return conflict_records()


def drift_right_way(records) -> str:
    cells = gate_a_cells(records)
    return f"{sum(g['checks']['drift gap >= 0.01'] for g in cells)} of {len(cells)}"


def machine() -> str:
    """The CPU each setting's warm start was trained on, as the gate A records name it."""
    cpus = sorted({r["warm_start"][0]["cpu"] for runs in conflict().values() for r in runs if "warm_start" in r
                   and isinstance(r["warm_start"], list)})
    return " and ".join(cpus)


def reverse_inside() -> str:
    """check.md's rows: the metrics whose rerun value lies inside the committed records' 95% interval."""
    rows = [line.split("|")[1:-1] for line in (RERUNS / "reverse/check.md").read_text().splitlines()
            if line.startswith("| respo_wtilt |")]
    inside = [row[2].strip() for row in rows if row[5].strip() == "yes"]
    outside = [row[2].strip() for row in rows if row[5].strip() != "yes"]
    return f"{len(inside)} of {len(rows)} ({', '.join(inside)}; outside: {', '.join(outside) or 'none'})"


def gate2_equal() -> str:
    rerun = json.loads((RERUNS / "gate2-reread/unvectorised-reuse8.json").read_text())
    committed = json.loads((ROOT / "research/results/gate2-amended/unvectorised-reuse8.json").read_text())
    same = rerun["rerun_pooled"] == committed["pooled"]
    return "every pooled figure equal to the last digit" if same else "pooled figures differ"


PROVENANCE = ("seconds",)  # what a rerun may change: its own timing


def same_record(rerun: dict, committed: dict) -> bool:
    strip = lambda r: {k: v for k, v in r.items() if k not in PROVENANCE}  # noqa: E731
    return strip(rerun) == strip(committed)


def offpolicy_exact() -> str:
    """Per setting, the rerun of the recorded command against the committed record of the same cell."""
    parts = []
    for path in sorted((RERUNS / "offpolicy").glob(f"*/{OFFPOLICY_CELL}")):
        setting = path.parts[-4]
        committed = json.loads((ROOT / "research/results/offpolicy" / setting / OFFPOLICY_CELL).read_text())
        same = same_record(json.loads(path.read_text()), committed)
        parts.append(f"{setting}: {'identical to the committed record but for its timing' if same else 'different'}")
    return "; ".join(parts)


def lost_checks() -> str:
    """Per gate A cell of the rerun: the checks it failed."""
    from research import conflict_report as report
    records, parts = conflict(), []
    for lag in report.gate_a_lags(records):
        for setting in report.SETTINGS:
            if (g := report.gate_a(records, setting, lag)) is not None:
                failed = [name for name, ok in g["checks"].items() if not ok]
                parts.append(f"{setting} lag {lag}: {', '.join(failed)}")
    return "; ".join(parts)


def figures() -> dict:
    from research import conflict_report as report
    return {
        "rerun_machine": ("the CPU the reruns' warm starts were trained on, per setting", machine),
        "rerun_reverse_inside": ("reverse grid, one cell (respo_wtilt, R = 8, seed 0) rerun: metrics whose value lies "
                                 "inside the committed avx2 records' 95% interval (research/run.py --check)",
                                 reverse_inside),
        "rerun_gate2_equal": ("digit_sum gate 2, the unvectorised R = 8 cell rerun by research/reread.py: its pooled "
                              "figures against the committed record's", gate2_equal),
        "rerun_conflict_gate1": ("digit_conflict gate 1 at the 4% share rerun: success on ones t >= 20, range over "
                                 "settings", lambda: span([r["success_long"] for s in report.SETTINGS
                                                           for r in conflict()[(s, "gate1")]], 3)),
        "rerun_conflict_gate1_pass8": ("the same: pass@8", lambda: span([r["pass@8_long"] for s in report.SETTINGS
                                                                        for r in conflict()[(s, "gate1")]], 3)),
        "rerun_conflict_outcome": ("digit_conflict gate A rerun (lags 4 and 8, both settings): the rule's outcome",
                                   lambda: report.gate_a_outcome(conflict())[1]),
        "rerun_conflict_ones_low": ("the rerun's gate A cells: share of the ones positives below w = 0.8, range",
                                    lambda: percent([g["ones"]["low_share"] for g in gate_a_cells()])),
        "rerun_conflict_ratio": ("the rerun's ones share over sum share, range (the gate needs 3)",
                                 lambda: span([g["ones"]["low_share"] / g["sum"]["low_share"]
                                               for g in gate_a_cells()], 1)),
        "rerun_conflict_drift_right_way": ("rerun gate A cells whose ones positives drift at least 0.01 per token "
                                           "below the sum positives' (the gate's first check)",
                                           lambda: drift_right_way(conflict())),
        "conflict_drift_right_way": ("the same count on the committed gate A cells",
                                     lambda: drift_right_way(committed_conflict())),
        "rerun_conflict_failed_checks": ("the checks each rerun gate A cell failed", lost_checks),
        "rerun_offpolicy_exact": ("off-policy study, reuse, respo_wtilt, seed 0, rerun from its recorded command per setting",
                                  offpolicy_exact),
    }


FIGURES = figures()
