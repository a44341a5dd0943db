"""The rules of the drift study (research/DRIFT.md) as code: its design, the manipulation check, the pairing
check, the contrasts with their exact sign-flip tests and Holm, the verdicts, and the tables and figure read from
its records. Imported by research/drift.py and research/figures.py; imports neither.

    python -m research.drift --summarise
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np

from research import decision
from research.digit_runs import (LENGTH_BINS, SETTINGS, batch_success, curves, family_sums, load, lr_star,
                                    positives_in, retained, tails)

# --- the design (DRIFT.md) ---------------------------------------------------------------------------
LAG, EARLY, FINAL = 4, 8, 4  # the sampler's lag; the early batches after it; the final batches
DENSE_METHODS = ("seq_clip", "seq_clip_lowpos1", "respo", "respo_pos_clip_neg", "grpo", "gspo", "vespo")
EXTRA_METHODS = ("respo_wtilt",)  # outside the decision, run last
MOE_METHODS = ("seq_clip", "seq_clip_lowpos1", "respo", "grpo")
LONG_METHODS = ("seq_clip", "respo", "grpo")
DENSE_SEEDS, MOE_SEEDS, LONG_SEEDS = tuple(range(24)), tuple(range(12)), tuple(range(12))
LONG_BATCHES = LAG + 24
BASELINE = "seq_clip"
CONTRASTS = {"C1": ("seq_clip_lowpos1", "seq_clip"), "C2": ("respo", "seq_clip"), "C3": ("respo_pos_clip_neg", "seq_clip"),
             "C4": ("respo", "grpo"), "C5": ("respo", "gspo"), "C6": ("respo", "vespo")}
MOE_CONTRASTS = {k: CONTRASTS[k] for k in ("C1", "C2", "C4")}
LONG_CONTRASTS = {"L1": ("respo", "seq_clip"), "L2": ("respo", "grpo")}
# Post hoc, chosen after the records were read (issue #46): is the published kernel the weakest ReSPO the study ran?
# Tested and Holm-corrected like the others, but between the two of them only, and deciding nothing.
POST_HOC_CONTRASTS = {"P1": ("respo_pos_clip_neg", "respo"), "P2": ("respo_wtilt", "respo")}
# Coefficients read on the seq_clip runs' positives (sequence-level, functions of log w).
READINGS = ("seq_clip", "seq_clip_lowpos1", "respo", "respo_pos_clip_neg", "vespo", "respo_wtilt", "is")
LOW_SHARE, CLIP_KEEPS, POPULATED = 0.20, 0.7, 50  # the manipulation check
BOOTSTRAPS = 10_000
MARGIN = decision.MARGIN


# --- what a run gives -------------------------------------------------------------------------------

def early(record: dict, family: str | None = None) -> float:
    """Per-sample success over rollout batches L+1 to L+8 (None: both families), the primary statistic."""
    return batch_success(record, slice(LAG + 1, LAG + 1 + EARLY), family)


def final(record: dict) -> float:
    """Per-sample success over the last FINAL rollout batches, both families."""
    return batch_success(record, slice(-FINAL, None))


def heldout(record: dict) -> float:
    return record["heldout"]["heldout_pass@1"]


METRICS = {"early": early, "early ones": lambda r: early(r, "ones"), "held-out ones": heldout, "final": final}


def cell_runs(records, setting: str, stage: str) -> dict[str, dict[int, dict]]:
    """{method (or "anchor"): {seed: record}} of one stage's records on one setting."""
    runs: dict[str, dict[int, dict]] = {}
    for r in records.get((setting, stage), []):
        runs.setdefault("anchor" if r["file"].startswith("anchor-") else r["method"], {})[r["seed"]] = r
    return runs


# --- the checks --------------------------------------------------------------------------------------

def pairing_holds(runs, methods) -> bool:
    """Batches 0..L are sampled by the warm start for every method: identical rollout counts on every seed."""
    seeds = set.intersection(*(set(runs.get(m, {})) for m in methods))
    return all(len({json.dumps(runs[m][s]["rollouts"][:LAG + 1], sort_keys=True) for m in methods}) == 1
               for s in seeds)


def length_sums(record: dict) -> tuple[float, float, float, float]:
    """(positives, their total length, positives below 0.8, their total length), every step of batches 1 on."""
    n = length = low = low_length = 0.0
    for name, cell in record["cells"].items():
        size = int(name.split()[1])
        n, length = n + cell["n"], length + size * cell["n"]
        low, low_length = low + cell["low"], low_length + size * cell["low"]
    return n, length, low, low_length


def length_gap(sums: list[tuple[float, float, float, float]]) -> float:
    """Pooled mean length of the positives below 0.8 minus that of all positives."""
    n, length, low, low_length = (sum(s[i] for s in sums) for i in range(4))
    return low_length / low - length / n if low and n else math.nan


def manipulation(seq_clip_runs: list[dict]) -> dict:
    """DRIFT.md's three rules on one setting's seq_clip runs: the low share, the length enrichment (with a
    bootstrap interval over seeds that decides nothing) and the clip's retained signal per populated bin."""
    sums = [length_sums(r) for r in seq_clip_runs]
    rng = random.Random(0)
    boot = sorted(length_gap([rng.choice(sums) for _ in sums]) for _ in range(BOOTSTRAPS))
    gap = length_gap(sums)
    share = tails(seq_clip_runs, None)["low_share"]
    bins = {b: retained(seq_clip_runs, "seq_clip", b) for b in LENGTH_BINS if positives_in(seq_clip_runs, b) >= POPULATED}
    checks = {f"w < 0.8 share >= {LOW_SHARE:.0%}": share >= LOW_SHARE, "low tail longer than all": gap > 0,
              f"clip keeps <= {CLIP_KEEPS} in every populated bin": bool(bins) and max(bins.values()) <= CLIP_KEEPS}
    deep = sum(family_sums(r, None).get("deep", 0) for r in seq_clip_runs) / max(1, tails(seq_clip_runs, None)["n"])
    # What the clip takes from the positives, per positive and unweighted by A, split by tail: the third rule reads
    # all positives, so this split says how much of the loss is the low tail's (the paper's mechanism).
    lost = tails(seq_clip_runs, None)
    return {"low_share": share, "gap": gap, "gap_interval": (boot[int(0.05 * BOOTSTRAPS)], boot[int(0.95 * BOOTSTRAPS) - 1]),
            "bins": bins, "deep_share": deep, "lost_low": lost["lost_low"], "lost_high": lost["lost_high"],
            "checks": checks, "passed": all(checks.values())}


# --- the statistics ------------------------------------------------------------------------------------

def sign_flip_p(differences: list[float]) -> float:
    """Exact two-sided p of the paired sign-flip test (statistic the mean): the share of all 2^n sign assignments
    whose |sum| reaches the observed |sum| (less 1e-12 for rounding), counted exactly by meeting in the middle.

    Every assignment is a signed sum of the first half plus one of the second: for each of the first half's 2^(n/2)
    sums, a binary search in the second half's sorted sums counts the partners that put the total at or beyond
    the observed |sum| on either side, so no assignment is left out and none is counted twice.
    """
    d = np.asarray(differences, dtype=np.float64)
    n, observed = len(d), abs(d.sum())
    reach = observed - 1e-12
    if not np.isfinite(d).all():  # an inf or a nan: every assignment's sum, in blocks (inf - inf is nan)
        bits, count = np.arange(n, dtype=np.int64), 0
        for start in range(0, 1 << n, 1 << 16):
            codes = np.arange(start, min(start + (1 << 16), 1 << n), dtype=np.int64)
            signs = 1.0 - 2.0 * ((codes[:, None] >> bits) & 1)  # [block, n]: bit k set -> d_k flipped
            count += int((np.abs(signs @ d) >= reach).sum())
        return count / (1 << n)
    if not reach > 0:  # an observed sum of ~0: every assignment reaches it
        return 1.0
    first, second = (signed_sums(half) for half in (d[:n // 2], d[n // 2:]))
    second.sort()
    # Partners s of a first-half sum f: f + s <= -reach (s <= -reach - f, the `low` smallest) or f + s >= reach
    # (s >= reach - f, all but the `below` smallest); the two sides are disjoint, as reach > 0.
    low = np.searchsorted(second, -reach - first, side="right")
    below = np.maximum(np.searchsorted(second, reach - first, side="left"), low)
    return int((low + len(second) - below).sum()) / (1 << n)


def signed_sums(values: np.ndarray) -> np.ndarray:
    """Every one of the 2^len(values) sums +-v_1 +- ... +- v_k."""
    sums = np.zeros(1)
    for v in values:
        sums = np.concatenate((sums + v, sums - v))
    return sums


def paired(runs, a: str, b: str, metric: str) -> list[float]:
    """Per seed, metric(a) - metric(b), on the seeds both ran."""
    read = METRICS[metric]
    return [read(runs[a][s]) - read(runs[b][s]) for s in sorted(set(runs.get(a, {})) & set(runs.get(b, {})))]


def contrasts(runs, spec: dict[str, tuple[str, str]], metric: str = "early", secondary=("early ones", "held-out ones",
                                                                                          "final")) -> dict:
    """Per contrast: its d's, mean, 90% interval, exact p; Holm over `spec`; each secondary metric's mean and interval."""
    out = {}
    for name, (a, b) in spec.items():
        d = paired(runs, a, b, metric)
        out[name] = {"a": a, "b": b, "d": d, "mean": decision.mean(d), "interval": decision.interval90(d),
                     "p": sign_flip_p(d),
                     "secondary": {m: (decision.mean(x), decision.interval90(x))
                                   for m in secondary if (x := paired(runs, a, b, m))}}
    for name, rejected in decision.holm({n: c["p"] for n, c in out.items()}).items():
        c = out[name]
        c["holm"] = rejected
        c["reads"] = ("higher" if rejected and c["mean"] > 0 else "lower" if rejected else
                      "tie" if decision.equivalent(c["d"], MARGIN) else "not resolved")
    return out


def seeds_ahead(d: list[float]) -> int:
    """On how many seeds the contrast's first method is ahead (d > 0)."""
    return sum(x > 0 for x in d)


def dose_p(runs) -> float:
    """One-sided permutation p that C1's d rises with the seed's lost low-tail mass under seq_clip."""
    seeds = sorted(set(runs.get("seq_clip_lowpos1", {})) & set(runs.get(BASELINE, {})))
    lost = [tails([runs[BASELINE][s]], None)["lost_low"] for s in seeds]
    return decision.rising_p(lost, paired(runs, "seq_clip_lowpos1", BASELINE, "early"))


def keeps_half(c: dict) -> tuple[float, float]:
    """The 90% interval of D = C3's d - C2's d / 2, per seed."""
    return decision.interval90([c3 - c2 / 2 for c2, c3 in zip(c["C2"]["d"], c["C3"]["d"])])


def below_margin(c: dict) -> bool:
    """The 90% interval's upper end below +MARGIN: no gain of MARGIN is consistent with the seeds."""
    return c["interval"][1] < MARGIN


def verdicts(c: dict) -> dict[str, str]:
    """M, R, U on one setting whose manipulation check passed (R without its C3 part, U against the baselines
    present, when the cell has fewer methods: the MoE's)."""
    m = ("supported" if c["C1"]["reads"] == "higher" else "refuted at this scale" if below_margin(c["C1"])
         else "not resolved")
    half = "C3" not in c or keeps_half(c)[1] >= 0
    r = ("supported" if m == "supported" and c["C2"]["reads"] == "higher" and half
         else "refuted at this scale" if below_margin(c["C2"]) else "not resolved")
    baselines = [n for n in ("C4", "C5", "C6") if n in c]
    u = ("supported" if all(c[n]["reads"] == "higher" for n in baselines)
         else "refuted at this scale" if any(below_margin(c[n]) for n in baselines) else "not resolved")
    return {"M": m, "R": r, "U": u}


def across(per_setting: dict[str, dict[str, str]], claim: str) -> str:
    values = {s: v[claim] for s, v in per_setting.items()}
    if len(values) == len(SETTINGS) and len(set(values.values())) == 1:
        return next(iter(values.values()))
    return "not resolved (" + ", ".join(f"{s}: {v}" for s, v in values.items()) + ")"


# --- reading a cell ------------------------------------------------------------------------------------

def decide(runs, methods, spec) -> dict:
    """One cell on one setting: its pairing and manipulation checks, and when both pass, contrasts and verdicts."""
    out = {"seeds": len(set.intersection(*(set(runs.get(m, {})) for m in methods))),
           "pairing": pairing_holds(runs, methods), "check": manipulation(list(runs[BASELINE].values()))}
    if not out["pairing"]:
        out["verdicts"] = {k: "stopped: the pairing check fails (a bug)" for k in ("M", "R", "U")}
    elif not out["check"]["passed"]:
        out["verdicts"] = {k: "mechanism absent" for k in ("M", "R", "U")}
    else:
        out["contrasts"] = contrasts(runs, spec)
        out["verdicts"] = verdicts(out["contrasts"])
        if "C1" in spec:
            out["dose_p"] = dose_p(runs)
        if "C3" in spec:
            out["keeps_half"] = keeps_half(out["contrasts"])
        if all(runs.get(m) for pair in POST_HOC_CONTRASTS.values() for m in pair):
            out["post_hoc"] = contrasts(runs, POST_HOC_CONTRASTS)
    return out


def complete(runs, methods, seeds) -> bool:
    return all(set(seeds) <= set(runs.get(m, {})) for m in methods)


def span(values, digits=3) -> str:
    values = [v for v in values if not math.isnan(v)]
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}" if values else "-"


def check_table(readings: dict[str, dict]) -> str:
    bins = " | ".join(f"R_seq_clip {a}-{b}" for a, b in LENGTH_BINS)
    lines = [f"| cell, setting | w < 0.8 | length gap (90% bootstrap) | log w < -1 | {bins} | clip's loss per positive: "
             "low tail (1 - w, w < 0.8) | high tail (w > 1.2, coefficient 0) | check |",
             "|---|---|---|---|" + "---|" * len(LENGTH_BINS) + "---|---|---|"]
    for label, x in readings.items():
        c = x["check"]
        failed = ", ".join(k for k, ok in c["checks"].items() if not ok)
        cells = " | ".join(f"{c['bins'][b]:.3f}" if b in c["bins"] else "-" for b in LENGTH_BINS)
        lines.append(f"| {label} | {c['low_share']:.1%} | {c['gap']:+.2f} ({c['gap_interval'][0]:+.2f}, "
                     f"{c['gap_interval'][1]:+.2f}) | {c['deep_share']:.1%} | {cells} | {c['lost_low']:.3f} | "
                     f"{c['lost_high']:.3f} | "
                     f"{'PASS' if c['passed'] else 'FAIL: ' + failed} |")
    return "\n".join(lines)


def means_table(runs, methods) -> str:
    lines = ["| method | seeds | " + " | ".join(METRICS) + " | positives w < 0.8 |", "|---|---|" + "---|" * (len(METRICS) + 1)]
    for method in (*methods, "anchor"):
        rs = list(runs.get(method, {}).values())
        if rs:
            lines.append(f"| {method} | {len(rs)} | " + " | ".join(f"{decision.mean(METRICS[m](r) for r in rs):.3f}"
                                                                   for m in METRICS)
                         + f" | {tails(rs, None)['low_share']:.1%} |")
    return "\n".join(lines)


def contrast_table(c: dict, metric: str = "early reward") -> str:
    secondary = next(iter(c.values()))["secondary"]
    lines = [f"| contrast | {metric}: mean (90% interval) | seeds a > b | p (exact) | Holm | reads | "
             + " | ".join(f"{m}: mean (90%)" for m in secondary) + " |", "|---|---|---|---|---|---|" + "---|" * len(secondary)]
    for name, x in c.items():
        lines.append(f"| {name} `{x['a']}` - `{x['b']}` | {x['mean']:+.3f} ({x['interval'][0]:+.3f}, {x['interval'][1]:+.3f})"
                     f" | {seeds_ahead(x['d'])} of {len(x['d'])} | {x['p']:.4f} | {'rejects' if x['holm'] else '-'} | {x['reads']} | "
                     + " | ".join(f"{mu:+.3f} ({lo:+.3f}, {hi:+.3f})" for mu, (lo, hi) in x["secondary"].values()) + " |")
    return "\n".join(lines)


def retained_table(runs, methods) -> str:
    bins = " | ".join(f"{a}-{b} tokens" for a, b in LENGTH_BINS)
    lines = [f"| coefficient | read on | {bins} |", "|---|---|" + "---|" * len(LENGTH_BINS)]
    clip = list(runs[BASELINE].values())
    lines.append("| positives (x steps) | seq_clip's runs | " + " | ".join(f"{positives_in(clip, b):.0f}" for b in LENGTH_BINS) + " |")
    for m in READINGS:
        lines.append(f"| `{m}` | seq_clip's runs | " + " | ".join(f"{retained(clip, m, b):.3f}" for b in LENGTH_BINS) + " |")
    for m in methods:
        own = list(runs.get(m, {}).values())
        if own:
            lines.append(f"| `{m}` | its own runs | " + " | ".join(f"{retained(own, 'own', b):.3f}" for b in LENGTH_BINS) + " |")
    return "\n".join(lines)


def read_all(records) -> dict:
    """Every cell on every setting, read by the rules: {cell: {setting: decide(...)}} plus lr*."""
    lr, _ = lr_star(records.get(("default", "lr"), []), "respo")
    cells = {}
    for cell, stage, methods, spec, seeds in (("dense", "evaluate", DENSE_METHODS, CONTRASTS, DENSE_SEEDS),
                                              ("dense, 2 x 2", "evaluate-2x2", DENSE_METHODS, CONTRASTS, DENSE_SEEDS),
                                              ("MoE", "moe", MOE_METHODS, MOE_CONTRASTS, MOE_SEEDS)):
        for setting in SETTINGS:
            runs = cell_runs(records, setting, stage)
            if all(runs.get(m) for m in methods):
                cells.setdefault(cell, {})[setting] = {"runs": runs, **decide(runs, methods, spec)}
    for setting in SETTINGS:
        runs = cell_runs(records, setting, "long")
        if all(runs.get(m) for m in LONG_METHODS):
            cells.setdefault("longer", {})[setting] = {
                "runs": runs, "check": manipulation(list(runs[BASELINE].values())),
                "final": contrasts(runs, LONG_CONTRASTS, "final", ("held-out ones", "early")),
                "held-out": contrasts(runs, LONG_CONTRASTS, "held-out ones", ("final",))}
    return {"lr": lr, "cells": cells}


def decided_cell(cells: dict) -> str | None:
    """The dense cell the decision is taken on: the one-epoch cell, or the 2 x 2 fallback when its check failed."""
    if "dense" not in cells or len(cells["dense"]) < len(SETTINGS):
        return None
    if all(x["check"]["passed"] for x in cells["dense"].values()):
        return "dense"
    return "dense, 2 x 2" if len(cells.get("dense, 2 x 2", {})) == len(SETTINGS) else None


def contrast_colour(c: dict) -> str:
    """A contrast's colour in the evidence figure: red when Holm rejects, whichever side of 0 it lies on."""
    return "tab:red" if c["holm"] else "0.4"


def evidence_figure(dense: dict[str, dict], path: Path) -> None:
    """Per setting (rows): the retained signal by length of every method on its own runs, the manipulation check's
    0.7 line with it (left), and each contrast's mean early-reward difference with its 90% interval (right)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(dense), 2, figsize=(12, 3.6 * len(dense)), squeeze=False)
    for row, (setting, x) in enumerate(dense.items()):
        left, right = axes[row]
        labels = [f"{a}-{b}" for a, b in LENGTH_BINS]
        for m in DENSE_METHODS:
            own = list(x["runs"][m].values())
            values = [retained(own, "own", b) if positives_in(own, b) >= POPULATED else math.nan for b in LENGTH_BINS]
            left.plot(labels, values, marker="o", lw=2 if m in (BASELINE, "respo") else 1, label=m)
        left.axhline(CLIP_KEEPS, color="k", ls=":", lw=1, label=f"the check: clip keeps <= {CLIP_KEEPS}")
        left.axhline(1, color="0.6", lw=0.8)
        left.set(title=f"{setting}: retained signal of the positives, each method on its own runs",
                 xlabel="response length (tokens)", ylabel="sum phi A / sum A")
        if "contrasts" in x:
            names = list(x["contrasts"])
            for i, n in enumerate(names):
                c = x["contrasts"][n]
                right.errorbar(c["mean"], i, xerr=[[c["mean"] - c["interval"][0]], [c["interval"][1] - c["mean"]]],
                               fmt="o", color=contrast_colour(c), capsize=3)
            right.set_yticks(range(len(names)), [f"{n} {x['contrasts'][n]['a']} - {x['contrasts'][n]['b']}" for n in names],
                             fontsize=7)
            right.axvline(0, color="k", lw=0.8)
            right.axvspan(-MARGIN, MARGIN, color="0.9", label=f"tie margin +-{MARGIN}")
            right.invert_yaxis()
            right.set(title=f"{setting}: early reward difference, mean and 90% interval (red: Holm rejects, either sign)",
                      xlabel="per-seed difference in early success")
            right.legend(fontsize=7)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def summarise(out: Path, figures: Path | None = None) -> str:
    """Every table and verdict in markdown (what summary.md holds); the figure drawn into `figures` when given."""
    records = load(out)
    parts = ["## Gate 1 (dense: descriptive; MoE: decides)"]
    for setting in SETTINGS:
        for stage in ("gate1", "moe-gate1"):
            for r in records.get((setting, stage), []):
                parts.append(f"- {setting}, {stage}: {r['gate']} (success on ones t >= 20 {r['success_long']:.3f}, "
                             f"pass@8 {r['pass@8_long']:.3f})")
    for setting in SETTINGS:
        lr, table = lr_star(records.get((setting, "lr"), []), "respo")
        parts += [f"## lr* on {setting} ({'decides' if setting == 'default' else 'reported'})", table,
                  f"lr* = {lr:g}" if lr else "lr* not chosen yet"]
    read = read_all(records)
    for cell, per_setting in read["cells"].items():
        if cell == "longer":
            continue
        parts += [f"## The {cell} cell: manipulation check",
                  check_table({s: x for s, x in per_setting.items()})]
        for setting, x in per_setting.items():
            parts += [f"### {cell}, {setting}: {x['seeds']} paired seeds; pairing check "
                      f"{'holds' if x['pairing'] else 'FAILS'}", means_table(x["runs"], tuple(m for m in x["runs"] if m != "anchor"))]
            if "contrasts" in x:
                parts.append(contrast_table(x["contrasts"]))
                extra = []
                if "dose_p" in x:
                    extra.append(f"dose-response (C1's d rising with the lost low-tail mass): one-sided p = {x['dose_p']:.4f}"
                                 " (pre-registered as reported, deciding nothing: a correlation over seeds)")
                if "keeps_half" in x:
                    extra.append(f"C3 - C2/2, 90% interval ({x['keeps_half'][0]:+.3f}, {x['keeps_half'][1]:+.3f})")
                if "post_hoc" in x:
                    extra += ["**Post hoc** (chosen after the records were read, issue #46; Holm over these two only; "
                              "deciding nothing):", contrast_table(x["post_hoc"])]
                parts += extra + ["retained signal by length (R = sum phi A / sum A over positives)",
                                  retained_table(x["runs"], tuple(m for m in x["runs"] if m != "anchor"))]
            parts.append(f"verdicts ({cell}, {setting}): " + ", ".join(f"{k} {v}" for k, v in x["verdicts"].items()))
        if len(per_setting) == len(SETTINGS):
            parts.append(f"**{cell}, across both settings**: " + "; ".join(
                f"{k} {across({s: x['verdicts'] for s, x in per_setting.items()}, k)}" for k in ("M", "R", "U")))
    for setting, x in read["cells"].get("longer", {}).items():
        parts += [f"## The longer cell ({LONG_BATCHES} batches), {setting}", check_table({setting: x}),
                  contrast_table(x["final"], "final reward"), contrast_table(x["held-out"], "held-out ones pass@1")]
    decided = decided_cell(read["cells"])
    parts.append(f"## The decision is taken on: {decided or 'not yet (the dense cell is incomplete)'}")
    if figures is not None and "dense" in read["cells"]:
        curves({s: {m: list(x["runs"].get(m, {}).values()) for m in (*DENSE_METHODS, *EXTRA_METHODS, "anchor")}
                for s, x in read["cells"]["dense"].items()},
               f"digit_conflict, R = 4 (one-epoch mini-batches) with lag {LAG}, lr*: mean and 95% band over seeds",
               "95%", figures / "drift-curves.png")
        evidence_figure(read["cells"]["dense"], figures / "drift-evidence.png")
    return "\n\n".join(parts)
