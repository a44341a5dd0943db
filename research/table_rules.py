"""The rules of the table study (research/TABLE.md) as code: its design, the lr rule, the pairing check, the
manipulation check per method, the paper's 21 comparisons with exact sign-flip tests and Holm, the verdicts, the
tail's source (H), the shared-prefix computation behind its mechanism (M), and the tables read from its records.
Imported by research/table.py; imports no runner. What it shares with the reuse study (the task, the scale, the
paper's numbers, the per-run metrics) it imports from research/reuse_rules.py rather than copying.

    python -m research.table --summarise
"""

from __future__ import annotations

import math
from pathlib import Path

from research import decision
from research.digit_runs import SETTINGS, load
from research.drift_rules import heldout, sign_flip_p
from research.reuse_rules import (DIAGNOSTIC_UPDATES, NS, PAPER, PAPER_DIAGNOSTIC, UPDATES, cell, coefficient_mass,
                                  collapsed, collapsed_as_choose_final, early, late, mean_interval, paper_table,
                                  shares, whole_seeds)

# --- the design (TABLE.md) ---------------------------------------------------------------------------------------
BASELINES = ("grpo", "gspo", "vespo")
PAPER_METHODS = BASELINES + ("respo",)
# The 2 x 2 of branches at the sequence level: (positive branch, negative branch) -> method.
FACTORIAL = {("clip", "clip"): "seq_clip", ("respo", "clip"): "respo_pos_clip_neg",
             ("clip", "respo"): "clip_pos_respo_neg", ("respo", "respo"): "respo"}
METHODS = PAPER_METHODS + ("seq_clip", "respo_pos_clip_neg", "clip_pos_respo_neg")
SEEDS = tuple(range(300, 316))  # fresh: no committed record anywhere in the repository holds them (TABLE.md)
SMALLEST_CUT = 10  # the declared cut: the largest whole number of seeds >= 10 both settings hold; below 10 no
# exact sign-flip p can pass Holm's first step over 21 (2 / 2**9 = 0.0039 > 0.05 / 21 = 0.0024)
LR_GRID = (1e-4, 2e-4, 3e-4, 4e-4, 6e-4, 8e-4)
SELECTION_SEEDS = (920, 921)
LR_METHOD = "respo"  # on-policy (N = 1) every kernel takes the same step: respo stands for all
DECIDING_SETTING = "default"  # the lr stage runs here, and decides for both settings
MARGIN = decision.MARGIN  # the training score's tie margin, 0.03
TAIL_MARGIN = 0.02  # H's refutation threshold and tie margin on the deep-tail share and mass
LEVEL = 0.05  # the check's level: the pooled share of positives with log W < -1 at N = 32
CHECK_P = 0.05
M_P = 0.05
NO_DRIFT = "no drift to compare"
SCALE = ("Said once: ours are the tiny Qwen3 (0.3M parameters) on digit_conflict, 4 prompts per mini-batch, "
         "256 updates per run at the rule's lr, mean (90% interval) over paired seeds per CPU setting; the paper's "
         "are Qwen3-1.7B and Qwen3-30B-A3B, 32 prompts per mini-batch, 1,024 updates at lr 1e-6, "
         "one run per cell.")
METRICS = {"late": late, "early": early, "held-out": heldout}


# --- one run's tail ----------------------------------------------------------------------------------------------

def deep_share(records: list[dict], updates: int = DIAGNOSTIC_UPDATES) -> float:
    """Pooled over runs and their updates 1 .. updates: positives with log W < -1 over all positives."""
    return shares(records, updates)["log_w_below_-1"]


def deep_mass(records: list[dict], updates: int = DIAGNOSTIC_UPDATES) -> float:
    """Pooled over runs and their updates 1 .. updates: the deep-tail positives' summed coefficient over all the
    positives' summed coefficient (each response's coefficient its mean over its tokens, as the loss applied it)."""
    deep = sum(sum(r["phi_deep_pos"][:updates]) for r in records)
    total = sum(sum(r["phi_pos"][:updates]) for r in records)
    return deep / total if total > 0 else math.nan


def shared_prefixes(tokens, mask, advantages, log_w, group_size: int) -> list[tuple[float, bool]]:
    """M's computation on one mini-batch of whole groups (rows in contiguous groups of group_size, one prompt each):
    for each positive (A > 0, non-empty) with at least one negative (A < 0, non-empty) in its group, the longest
    common prefix, in completion tokens, with any negative of its group whose W < 1 (log W < 0) at this step, as a
    fraction of the positive's length (0 when no negative of the group has W < 1); with whether the positive is in
    the deep tail (log W < -1). tokens, mask: per row the completion's tokens and mask (lists or tensors)."""
    tokens = [list(map(int, row)) for row in tokens]
    mask = [list(map(bool, row)) for row in mask]
    advantages, log_w = [float(a) for a in advantages], [float(x) for x in log_w]
    lengths = [sum(row) for row in mask]
    out = []
    for start in range(0, len(advantages), group_size):
        rows = range(start, min(start + group_size, len(advantages)))
        negatives = [j for j in rows if advantages[j] < 0 and lengths[j] > 0]
        if not negatives:
            continue
        pushed = [j for j in negatives if log_w[j] < 0.0]
        for i in rows:
            if advantages[i] <= 0 or lengths[i] == 0:
                continue
            best = 0
            for j in pushed:
                k = 0
                while k < len(tokens[i]) and mask[i][k] and mask[j][k] and tokens[i][k] == tokens[j][k]:
                    k += 1
                best = max(best, k)
            out.append((best / lengths[i], log_w[i] < -1.0))
    return out


def prefix_summary(fractions: list[tuple[float, bool]]) -> dict[str, float]:
    """One step's M summary: count and summed fraction of the deep-tail positives and of the others."""
    deep = [f for f, d in fractions if d]
    other = [f for f, d in fractions if not d]
    return {"deep_n": len(deep), "deep_sum": sum(deep), "other_n": len(other), "other_sum": sum(other)}


def prefix_gap(record: dict, updates: int = DIAGNOSTIC_UPDATES) -> float | None:
    """One run's M statistic over updates 1 .. updates, each rollout batch's first update left out (on-policy:
    W = 1 up to rounding, so which negatives have "W < 1" is rounding's choice, and no positive is in the deep
    tail): the deep-tail positives' mean shared-prefix fraction minus the other positives'; None when the run has
    no deep-tail positive (or no other) there (dropped, and counted)."""
    p, n = record["prefix"], record["n"]
    keep = [i for i in range(min(updates, len(p["deep_n"]))) if i % n]  # update i + 1; i % n == 0: a batch's first
    deep_n, other_n = sum(p["deep_n"][i] for i in keep), sum(p["other_n"][i] for i in keep)
    if not deep_n or not other_n:
        return None
    return sum(p["deep_sum"][i] for i in keep) / deep_n - sum(p["other_sum"][i] for i in keep) / other_n


# --- the lr rule -------------------------------------------------------------------------------------------------

def choose_lr(records: list[dict]) -> tuple[float | None, str]:
    """TABLE.md's lr: the largest lr of LR_GRID at which neither selection run collapsed, nor any run of a smaller
    lr (reuse_rules.collapsed: the late score, mean over updates 225-256, below half the score of update 1, or any
    skipped step). None until all LR_GRID x SELECTION_SEEDS records exist, or when the smallest lr collapsed a run.
    (lr or None, the table)."""
    by_lr = {lr: [r for r in records if r["lr"] == lr] for lr in LR_GRID}
    whole = all(sorted(r["seed"] for r in rs) == list(SELECTION_SEEDS) for rs in by_lr.values())
    stable = []
    for lr in sorted(LR_GRID):  # up to the first lr that collapses a run
        if any(map(collapsed, by_lr[lr])):
            break
        stable.append(lr)
    chosen = stable[-1] if whole and stable else None
    table = ["| lr | late score per seed | score of update 1 per seed | collapsed (the rule) | "
             "collapsed by choose_final's last-5 reading (reported) |", "|---|---|---|---|---|"]
    for lr, rs in by_lr.items():
        rs = sorted(rs, key=lambda r: r["seed"])
        lates = ", ".join(f"{late(r):.3f}" for r in rs) or "-"
        firsts = ", ".join(f"{r['score'][0]:.3f}" for r in rs) or "-"
        table.append(f"| {lr:g} | {lates} | {firsts} | {sum(map(collapsed, rs))} of {len(rs)} | "
                     f"{sum(map(collapsed_as_choose_final, rs))} of {len(rs)} |")
    if not whole:
        table.append(f"\n(the lr stage holds {len(records)} of {len(LR_GRID) * len(SELECTION_SEEDS)} records: "
                     "the rule waits for all)")
    return chosen, "\n".join(table)


# --- a setting's cell: pairing and the manipulation check ------------------------------------------------------

def run_name(method: str, n: int, seed: int) -> str:
    return f"{method}-N{n}-seed{seed}"


def missing(runs, seeds) -> list[str]:
    """The records of the design on these seeds that a setting does not hold yet."""
    return [run_name(m, n, s) for s in seeds for n in NS for m in METHODS if s not in runs.get(m, {}).get(n, {})]


def pairing_holds(runs, seeds) -> bool:
    """At each N and seed, every method saw the same first rollout batch (same warm start, prompts and draws)."""
    return all(len({repr(runs[m][n][s]["rollouts"][0]) for m in METHODS}) == 1 for n in NS for s in seeds)


def manipulation(runs, method: str, seeds) -> dict:
    """TABLE.md's check of one method: (a) level, its pooled deep-tail share at N = 32 at least LEVEL; (b) rise,
    the per-seed increase of that share from N = 8 to N = 32 has a mean above 0 and an exact two-sided sign-flip p
    below CHECK_P. Nothing is required between N = 16 and 32 (the structural plateau the audit found)."""
    per_n = {n: deep_share([runs[method][n][s] for s in seeds]) for n in NS}
    rise = [deep_share([runs[method][NS[-1]][s]]) - deep_share([runs[method][NS[0]][s]]) for s in seeds]
    p = sign_flip_p(rise) if rise else math.nan
    level, rises = per_n[NS[-1]] >= LEVEL, decision.mean(rise) > 0 and p < CHECK_P
    return {"per_n": per_n, "rise": rise, "p": p, "level": level, "rises": rises, "passed": level and rises}


# --- the paper's comparisons -------------------------------------------------------------------------------------

def paired(runs, a: str, b: str, n: int, seeds, metric: str = "late") -> list[float]:
    read = METRICS[metric]
    return [read(runs[a][n][s]) - read(runs[b][n][s]) for s in seeds]


def tested(d: list[float]) -> dict:
    return {"d": d, "mean": decision.mean(d), "interval": decision.interval90(d), "p": sign_flip_p(d)}


def holm_reads(family: dict[str, dict], margin: float) -> None:
    """Holm over the family; each member reads higher / lower (Holm rejects, by the mean's sign), tie (its 90%
    interval inside +-margin) or not resolved."""
    for name, rejected in decision.holm({k: c["p"] for k, c in family.items()}).items():
        c = family[name]
        c["holm"] = rejected
        c["reads"] = ("higher" if rejected and c["mean"] > 0 else "lower" if rejected else
                      "tie" if decision.equivalent(c["d"], margin) else "not resolved")


def contrasts(runs, seeds, checks: dict[str, dict]) -> dict[str, dict]:
    """The 21 of one setting: C(N, b) = respo - b on late and early, T(b) = (d at 32 - d at 8) / 2 of late; Holm
    over all 21 (the family is fixed whatever the checks say); a contrast whose baseline's check or respo's failed
    reads NO_DRIFT instead of its test's reading."""
    out = {}
    for b in BASELINES:
        for n in NS:
            for metric in ("late", "early"):
                out[f"C({n}, {b}) {metric}"] = {**tested(paired(runs, "respo", b, n, seeds, metric)), "b": b,
                                                "held-out": paired(runs, "respo", b, n, seeds, "held-out")}
        low, high = paired(runs, "respo", b, NS[0], seeds), paired(runs, "respo", b, NS[-1], seeds)
        out[f"T({b})"] = {**tested([(y - x) / 2 for x, y in zip(low, high)]), "b": b, "held-out": None}
    holm_reads(out, MARGIN)
    for c in out.values():
        c["test_reads"] = c["reads"]
        if not (checks["respo"]["passed"] and checks[c["b"]]["passed"]):
            c["reads"] = NO_DRIFT
    return out


def claim(cs: dict[str, dict], below: float) -> str:
    """A verdict over the baselines whose contrasts are read: supported when each reads higher, refuted at this
    scale when any 90% interval's upper end is below `below`; the baselines left out are named."""
    read = {b: c for b, c in cs.items() if c["reads"] != NO_DRIFT}
    if not read:
        return NO_DRIFT
    supported = all(c["reads"] == "higher" for c in read.values())
    refuted = any(c["interval"][1] < below for c in read.values())
    text = ("supported, and refuted at this scale as a gain of the margin" if supported and refuted else
            "supported" if supported else "refuted at this scale" if refuted else "not resolved")
    left = [b for b in cs if b not in read]
    return text + (f" (against {', '.join(read)}; {', '.join(left)}: {NO_DRIFT})" if left else "")


def verdicts(c: dict[str, dict]) -> dict[str, str]:
    """E(N), L(N) (refuted below +MARGIN) and G (refuted below 0) on one setting, by TABLE.md's rules."""
    out = {f"{name}({n})": claim({b: c[f"C({n}, {b}) {metric}"] for b in BASELINES}, MARGIN)
           for name, metric in (("E", "early"), ("L", "late")) for n in NS}
    out["G"] = claim({b: c[f"T({b})"] for b in BASELINES}, 0.0)
    return out


# --- the tail's source (H) and its mechanism (M) -----------------------------------------------------------------

TAIL_READINGS = {"share": deep_share, "mass": deep_mass}
# Each branch's effect at N = 32: (method with ReSPO's branch, the same method with the clip's branch there).
NEGATIVE_EFFECT = {"Dneg_respo": ("respo", "respo_pos_clip_neg"), "Dneg_clip": ("clip_pos_respo_neg", "seq_clip")}
POSITIVE_EFFECT = {"Dpos_respo": ("respo", "clip_pos_respo_neg"), "Dpos_clip": ("respo_pos_clip_neg", "seq_clip")}
M_ARMS = ("respo", "clip_pos_respo_neg")  # where the published negative branch runs: M predicts a gap there
M_CONTROL = "respo_pos_clip_neg"


def tail_difference(runs, a: str, b: str, seeds, reading: str, n: int = NS[-1]) -> list[float]:
    read = TAIL_READINGS[reading]
    return [read([runs[a][n][s]]) - read([runs[b][n][s]]) for s in seeds]


def tail_source(runs, seeds) -> dict:
    """H's family of 4 at N = 32 (the negative branch's effect on the deep share and mass at each positive branch),
    Holm over them, tie within +-TAIL_MARGIN; and the positive branch's effect, descriptive (share, mass, late)."""
    family = {f"{name} {reading}": tested(tail_difference(runs, a, b, seeds, reading))
              for name, (a, b) in NEGATIVE_EFFECT.items() for reading in TAIL_READINGS}
    holm_reads(family, TAIL_MARGIN)
    descriptive = {}
    for name, (a, b) in POSITIVE_EFFECT.items():
        for reading in TAIL_READINGS:
            descriptive[f"{name} {reading}"] = tail_difference(runs, a, b, seeds, reading)
        descriptive[f"{name} late"] = paired(runs, a, b, NS[-1], seeds, "late")
    return {"family": family, "descriptive": descriptive}


def h_reading(h: dict) -> str:
    """One setting's reading of H: supported-here (all four Dneg, share and mass, read higher) and refuted-here (any
    of the four has its 90% interval ending below +TAIL_MARGIN)."""
    four = list(h["family"].values())
    supported = all(x["reads"] == "higher" for x in four)
    refuted = any(x["interval"][1] < TAIL_MARGIN for x in four)
    return ("supported as a difference, refuted as an effect of +0.02" if supported and refuted else
            "supported" if supported else "refuted" if refuted else "not resolved")


def mechanism(runs, seeds) -> dict[str, dict]:
    """M at N = 32 per arm (and the control): per seed, prefix_gap over updates 1-128; seeds with no deep-tail
    positive dropped and counted; mean, 90% interval and exact sign-flip p on the rest. Not Holm-corrected."""
    out = {}
    for m in M_ARMS + (M_CONTROL,):
        gaps = {s: prefix_gap(runs[m][NS[-1]][s]) for s in seeds}
        d = [g for g in gaps.values() if g is not None]
        out[m] = {"d": d, "dropped": sum(g is None for g in gaps.values()),
                  "mean": decision.mean(d) if d else math.nan,
                  "interval": decision.interval90(d) if len(d) > 1 else (math.nan, math.nan),
                  "p": sign_flip_p(d) if d else math.nan}
    return out


def m_reading(m: dict[str, dict]) -> str:
    """One setting's reading of M: refuted when respo's 90% interval ends at or below 0; supported-here when the
    gap of each arm carrying the published negative branch has a mean above 0 with p below M_P."""
    if len(m["respo"]["d"]) < 2:
        return "not read (fewer than 2 seeds with a deep-tail positive)"
    if m["respo"]["interval"][1] <= 0:
        return "refuted"
    if all(m[a]["d"] and m[a]["mean"] > 0 and m[a]["p"] < M_P for a in M_ARMS):
        return "supported"
    return "not resolved"


# --- reading the records -------------------------------------------------------------------------------------

def read_setting(records: list[dict], seeds_needed: int = len(SEEDS)) -> dict:
    """One setting's cell on the first seeds_needed of SEEDS. Until each of them is whole (every method at every N)
    nothing is read but what is missing: no check, no score. Then the pairing check; the manipulation check per
    method; and, where the pairing holds, the 21 contrasts and verdicts, H and M."""
    runs = cell(records)
    seeds = list(SEEDS[:seeds_needed])
    out = {"runs": runs, "seeds": seeds, "needed": seeds_needed, "records": len(records), "all": records,
           "whole": whole_seeds(runs, METHODS), "missing": missing(runs, seeds)}
    out["complete"] = not out["missing"]
    if not out["complete"]:
        return out
    out["pairing"] = pairing_holds(runs, seeds)
    out["checks"] = {m: manipulation(runs, m, seeds) for m in METHODS}
    if out["pairing"]:
        out["contrasts"] = contrasts(runs, seeds, out["checks"])
        out["verdicts"] = verdicts(out["contrasts"])
        out["tail"] = tail_source(runs, seeds)
        out["h"] = h_reading(out["tail"])
        out["mechanism"] = mechanism(runs, seeds)
        out["m"] = m_reading(out["mechanism"])
    return out


def reading(x: dict, key: str, claim_name: str | None = None) -> str:
    if not x["records"]:
        return "not run"
    if not x["complete"]:
        return f"not read ({len(x['missing'])} records missing)"
    if not x["pairing"]:
        return "pairing failed"
    return x["verdicts"][claim_name] if key == "verdicts" else x[key]


def across(settings: dict[str, dict], key: str, claim_name: str | None = None) -> str:
    """A verdict stated only when both settings give it; otherwise each setting's reading."""
    values = {s: reading(x, key, claim_name) for s, x in settings.items()}
    if len(values) == len(SETTINGS) and len(set(values.values())) == 1:
        return next(iter(values.values()))
    return "not resolved (" + ", ".join(f"{s}: {v}" for s, v in values.items()) + ")"


def h_across(settings: dict[str, dict]) -> str:
    """H over both settings: supported when the four Dneg (share and mass) read higher on both; refuted when any of
    them has its interval ending below +0.02 on a setting; both said when both hold."""
    values = {s: reading(x, "h") for s, x in settings.items()}
    ready = all(v in ("supported", "refuted", "not resolved", "supported as a difference, refuted as an effect of "
                      "+0.02") for v in values.values())
    detail = " (" + ", ".join(f"{s}: {v}" for s, v in values.items()) + ")"
    if not ready:
        return "not read" + detail
    refuted = any("refuted" in v for v in values.values())
    supported = all(v.startswith("supported") for v in values.values())
    return ("supported as a difference, refuted as an effect of +0.02" if supported and refuted else
            "supported" if supported else "refuted" if refuted else "not resolved") + detail


def m_across(settings: dict[str, dict]) -> str:
    """M over both settings: refuted when refuted on either; supported when supported on both."""
    values = {s: reading(x, "m") for s, x in settings.items()}
    detail = " (" + ", ".join(f"{s}: {v}" for s, v in values.items()) + ")"
    if any(v == "refuted" for v in values.values()):
        return "refuted" + detail
    if all(v == "supported" for v in values.values()):
        return "supported" + detail
    return "not resolved" + detail


# --- tables ----------------------------------------------------------------------------------------------------------

def interval_text(x: dict) -> str:
    return f"{x['interval'][0]:+.3f} to {x['interval'][1]:+.3f}"


def check_verdict(c: dict) -> str:
    fails = [part for part, ok in (("level", c["level"]), ("rise", c["rises"])) if not ok]
    return "yes" if c["passed"] else "no (" + " and ".join(fails) + ")"


def check_table(settings: dict[str, dict]) -> str:
    lines = ["| setting | method | share log W < -1, N = 8 | N = 16 | N = 32 (level >= 0.05) | rise 8 -> 32: mean, "
             "seeds up | p | passes |", "|---|---|---|---|---|---|---|---|"]
    for s, r in settings.items():
        for m, c in r.get("checks", {}).items():
            lines.append(f"| {s} | `{m}` | " + " | ".join(f"{c['per_n'][n]:.1%}" for n in NS) +
                         f" | {decision.mean(c['rise']):+.3f}, {sum(x > 0 for x in c['rise'])} of {len(c['rise'])} | "
                         f"{c['p']:.4f} | {check_verdict(c)} |")
    return "\n".join(lines)


ORDER = {"lower": 0, "tie": 1, "not resolved": 2, NO_DRIFT: 3, "higher": 4}


def contrast_table(c: dict[str, dict]) -> str:
    """Losses first: every contrast where ReSPO is behind or tied before those where it is ahead."""
    lines = ["| contrast (respo - baseline) | mean | 90% interval | seeds ahead | p | Holm | reads | held-out (90% "
             "interval) |", "|---|---|---|---|---|---|---|---|"]
    for name, x in sorted(c.items(), key=lambda kv: (ORDER[kv[1]["reads"]], kv[1]["mean"])):
        h = x["held-out"]
        lines.append(f"| {name} | {x['mean']:+.3f} | {interval_text(x)} | {sum(v > 0 for v in x['d'])} of "
                     f"{len(x['d'])} | {x['p']:.4f} | {'rejects' if x['holm'] else '-'} | {x['reads']} | "
                     + (f"{decision.mean(h):+.3f} ({decision.interval90(h)[0]:+.3f} to "
                        f"{decision.interval90(h)[1]:+.3f})" if h else "-") + " |")
    return "\n".join(lines)


def tail_table(settings: dict[str, dict]) -> str:
    lines = ["| setting | difference at N = 32 | mean | 90% interval | p | Holm (of 4) | reads |",
             "|---|---|---|---|---|---|---|"]
    for s, r in settings.items():
        for name, x in r["tail"]["family"].items():
            lines.append(f"| {s} | {name} | {x['mean']:+.3f} | {interval_text(x)} | {x['p']:.4f} | "
                         f"{'rejects' if x['holm'] else '-'} | {x['reads']} |")
    return "\n".join(lines)


def positive_branch_table(settings: dict[str, dict]) -> str:
    lines = ["| setting | difference at N = 32 (descriptive, untested) | mean (90% interval) |", "|---|---|---|"]
    for s, r in settings.items():
        for name, d in r["tail"]["descriptive"].items():
            lines.append(f"| {s} | {name} | {mean_interval(d)} |")
    return "\n".join(lines)


def mechanism_table(settings: dict[str, dict]) -> str:
    lines = ["| setting | method (N = 32) | deep minus other: mean shared-prefix fraction | 90% interval | p | "
             "seeds read (dropped: no deep-tail positive) |", "|---|---|---|---|---|---|"]
    for s, r in settings.items():
        for m, x in r["mechanism"].items():
            role = " (control)" if m == M_CONTROL else ""
            lines.append(f"| {s} | `{m}`{role} | {x['mean']:+.3f} | {interval_text(x)} | {x['p']:.4f} | "
                         f"{len(x['d'])} ({x['dropped']}) |")
    return "\n".join(lines)


def means_table(settings: dict[str, dict], metric: str) -> str:
    lines = ["| setting | N | " + " | ".join(METHODS) + " |", "|---|---|" + "---|" * len(METHODS)]
    for s, r in settings.items():
        for n in NS:
            lines.append(f"| {s} | {n} | " + " | ".join(
                mean_interval([METRICS[metric](r["runs"][m][n][x]) for x in r["seeds"]]) for m in METHODS) + " |")
    return "\n".join(lines)


def diagnostic_table(settings: dict[str, dict]) -> str:
    """Per method and N, updates 1-128: the deep-tail share, its pooled coefficient mass, the paper-style mass
    (mean over updates of each update's share, reuse_rules.coefficient_mass) and the share below w = 0.8."""
    lines = ["| setting | N | method | share log W < -1 | their share of the positive coefficient mass (pooled) | "
             "the same, mean over updates | share w < 0.8 |", "|---|---|---|---|---|---|---|",
             f"| paper (Qwen3-1.7B, updates 1-512) | 32 | respo | {PAPER_DIAGNOSTIC['deep_share']:.1%} | - | "
             f"{PAPER_DIAGNOSTIC['respo_mass']:.1%} | - |",
             f"| paper | 32 | vespo | {PAPER_DIAGNOSTIC['deep_share']:.1%} | - | "
             f"{PAPER_DIAGNOSTIC['vespo_mass']:.1%} | - |"]
    for s, r in settings.items():
        for n in NS:
            for m in METHODS:
                runs = [r["runs"][m][n][x] for x in r["seeds"]]
                lines.append(f"| {s} | {n} | {m} | {deep_share(runs):.1%} | {deep_mass(runs):.1%} | "
                             f"{coefficient_mass(runs):.1%} | {shares(runs)['below_0.8']:.1%} |")
    return "\n".join(lines)


def stamps(records: list[dict]) -> str:
    """The first and the last `finished` stamp of these records (what precedes what is read from them)."""
    done = sorted(r["finished"] for r in records)
    return f"from {done[0]} to {done[-1]}" if done else "-"


def status_lines(settings: dict[str, dict]) -> list[str]:
    lines = []
    for s, r in settings.items():
        if not r["records"]:
            lines.append(f"- {s}: no evaluate record yet")
            continue
        state = (f"complete on seeds {SEEDS[0]}-{SEEDS[r['needed'] - 1]}" +
                 ("" if r["needed"] == len(SEEDS) else " (a declared cut)") if r["complete"] else
                 f"in progress: {len(r['missing'])} of {r['needed'] * len(NS) * len(METHODS)} records missing "
                 f"(first: {', '.join(r['missing'][:4])}); nothing of it is read")
        lines.append(f"- {s}: {r['records']} records, {len(r['whole'])} whole seeds; {state}")
        commits = ", ".join(sorted({str(x.get("commit")) for x in r["all"]}))
        lines.append(f"  finished {stamps(r['all'])}; commits {commits}")
    both = min(len(r["whole"]) for r in settings.values())
    if both >= SMALLEST_CUT and any(not r["complete"] for r in settings.values()):
        lines.append(f"- both settings hold {both} whole seeds: if compute has ended, the declared cut reads them "
                     f"(`--summarise --seeds {both}`)")
    return lines


def summarise(out_dir: Path, seeds: int | None = None) -> str:
    """Everything in TABLE.md's order from the records under out_dir: the pairing check, the lr stage, the
    manipulation check per method, the verdicts and contrasts losses first, H, M, then the tables beside the paper's.
    seeds: the first `seeds` of SEEDS (None: all 16; fewer is the declared cut, at least SMALLEST_CUT). A setting
    whose seeds are not all whole shows only what is missing."""
    seeds = len(SEEDS) if seeds is None else seeds
    if not SMALLEST_CUT <= seeds <= len(SEEDS):
        raise ValueError(f"seeds: between {SMALLEST_CUT} and {len(SEEDS)} (TABLE.md's cut), got {seeds}")
    records = load(Path(out_dir))
    settings = {s: read_setting(records.get((s, "evaluate"), []), seeds) for s in SETTINGS}
    text = ["## The records", "\n".join(status_lines(settings))]
    text += ["## The pairing check (identical first rollout batch per seed and N across the 7 methods)",
             "\n".join(f"- {s}: " + ("holds" if r.get("pairing") else "FAILS: no contrast is read"
                                     if "pairing" in r else "not read") for s, r in settings.items())]
    lr, table = choose_lr(records.get((DECIDING_SETTING, "lr"), []))
    text += [f"## The lr stage ({DECIDING_SETTING} setting, on-policy, seeds {SELECTION_SEEDS[0]} and "
             f"{SELECTION_SEEDS[1]}; it decides for both settings)", table,
             f"the rule's lr: {lr:g}" if lr else "the rule's lr: none yet",
             f"lr records finished {stamps(records.get((DECIDING_SETTING, 'lr'), []))}"]
    read = {s: r for s, r in settings.items() if r["complete"]}
    if not read:
        return "\n\n".join(text + ["No setting's cell is whole: no check, score or contrast is read."])
    text += ["## First, the manipulation check per method (updates 1-128, pooled over seeds)", check_table(read)]
    compared = {s: r for s, r in read.items() if r["pairing"]}
    if not compared:
        return "\n\n".join(text)
    claims = [f"{c}({n})" for c in ("E", "L") for n in NS] + ["G"]
    stated = {c: across(settings, "verdicts", c) for c in claims}
    losses_first = sorted(stated.items(), key=lambda kv: 0 if kv[1].startswith("refuted") else
                          2 if kv[1] == "supported" else 1)
    text += ["## Verdicts (stated only when both settings give them; losses first)",
             "\n".join(f"- {c}: {v}" for c, v in losses_first)]
    for s, r in compared.items():
        text += [f"## The 21 contrasts, {s} (Holm over 21; losses first)", contrast_table(r["contrasts"])]
    text += ["## H: the deep tail is carried by the published negative branch (N = 32; Holm over 4 per setting)",
             f"H: {h_across(settings)}", tail_table(compared),
             "The positive branch's effect, descriptive (a rescue: Dpos_respo > 0 on late with the share unchanged "
             "or lower)", positive_branch_table(compared)]
    text += ["## M, testing a conjecture: deep-tail positives share more of their prefix with negatives pushed at "
             "W < 1 (N = 32, updates 1-128)", f"M: {m_across(settings)}", mechanism_table(compared)]
    for metric in ("late", "early", "held-out"):
        text += [f"## {metric} per method and N, mean (90% interval)", means_table(compared, metric)]
    text += [f"## Beside the paper (its {len(PAPER)} published rows above ours)", SCALE, paper_table(compared),
             "## The positive-branch diagnostic beside the paper's",
             diagnostic_table(compared)]
    return "\n\n".join(text)

