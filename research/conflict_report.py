"""The tables, verdicts and figures of the digit_conflict study, read from its records (research/MECHANISM.md).

    python -m research.conflict --summarise

Every rule here is the pre-registration's: gate 1's rung search, lr*, gate A and its control, the pairing check,
the three contrasts with Holm and equivalence, the dose-response test, and the verdicts per CPU setting and
across both. research/figures.py reads its prose figures from the same functions.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from research import decision
from research.digit_runs import (EARLY_BATCHES, LENGTH_BINS, SELECTION_SEEDS, SETTINGS, curves, early,
                                    family_curve, family_sums, load, retained, tails)
from research.digit_runs import lr_star as lr_star_of

# Study 3's design (MECHANISM.md). "respo" there was the reconstruction, now respo_wtilt; its records name it so.
LAG = 4  # the evaluation cell's, unless gate A moves it
EVALUATION_SEEDS, ON_POLICY_CHECK_SEEDS = tuple(range(12)), (0, 1)
METHODS = ("seq_clip", "seq_clip_lowpos1", "respo_wtilt", "respo_wtilt_pos_clip_neg")
# Coefficients read on every run's positives: the four methods, and plain IS, which is what the sequence clip
# gives positives without its upper clip (the high tail's price).
READ_METHODS = (*METHODS, "is")
RUNGS = (0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32)
FIRST_RUNG = 0.02
CONTRASTS = {"C1": "seq_clip_lowpos1", "C2": "respo_wtilt", "C3": "respo_wtilt_pos_clip_neg"}
BASELINE = "seq_clip"
DRIFT_GAP, LOW_SHARE, LOW_RATIO, CONTROL_GAP = 0.01, 0.15, 3.0, 0.002  # gate A


# --- gate 1 --------------------------------------------------------------------------------------

def gate1_rungs(records) -> dict[float, dict[str, str]]:
    """{share: {setting: PASS / FAIL low / FAIL high}}."""
    rungs = defaultdict(dict)
    for setting in SETTINGS:
        for r in records.get((setting, "gate1"), []):
            rungs[r["config"]["sft_full_share"]][setting] = r["gate"]
    return dict(rungs)


def rung_outcome(outcomes: dict[str, str]) -> str:
    """A rung's outcome over both settings: pass, low, high, split (opposite sides) or incomplete."""
    if set(outcomes) != set(SETTINGS):
        return "incomplete"
    values = set(outcomes.values())
    if values == {"PASS"}:
        return "pass"
    if "FAIL low" in values and "FAIL high" in values:
        return "split"
    return "low" if "FAIL low" in values else "high"


def gate1_search(records) -> tuple[float | None, str]:
    """(the passing share or None, what the search says now), walking the rungs from FIRST_RUNG by the rule."""
    rungs, share, seen = gate1_rungs(records), FIRST_RUNG, set()
    while True:
        if share not in rungs or rung_outcome(rungs[share]) == "incomplete":
            return None, f"run the rung {share:g} on {', '.join(s for s in SETTINGS if s not in rungs.get(share, {}))}"
        outcome = rung_outcome(rungs[share])
        seen.add(share)
        if outcome == "pass":
            return share, f"gate 1 passes at a share of {share:g} on both settings"
        if outcome == "split":
            return None, f"no rung passes: at {share:g} the settings fail on opposite sides"
        step = 1 if outcome == "low" else -1
        index = RUNGS.index(share) + step
        if not 0 <= index < len(RUNGS):
            return None, f"no rung passes: {share:g} fails {outcome} at the end of the rungs"
        if RUNGS[index] in seen:
            return None, f"no rung passes: {share:g} fails {outcome} and {RUNGS[index]:g} was run"
        share = RUNGS[index]


def gate1_table(records) -> str:
    lines = ["| share q | CPU setting | success, ones t >= 20 | pass@8 there | gate | success, sum (min-max over "
             "targets) | warm start |", "|---|---|---|---|---|---|---|"]
    for setting in SETTINGS:
        for r in sorted(records.get((setting, "gate1"), []), key=lambda r: r["config"]["sft_full_share"]):
            sums = [sum(v["success_per_seed"]) / len(v["success_per_seed"]) for k, v in r["per_target"].items()
                    if k.startswith("sum ")]
            warm = r["warm_start"]
            lines.append(f"| {r['config']['sft_full_share']:g} | {setting} | {r['success_long']:.3f} | "
                         f"{r['pass@8_long']:.3f} | {r['gate']} | {min(sums):.2f}-{max(sums):.2f} | "
                         f"{warm['steps']} steps, {warm['seconds']} s |")
    return "\n".join(lines)


# --- lr* -----------------------------------------------------------------------------------------

def lr_star(records, setting: str = "default") -> tuple[float | None, str]:
    return lr_star_of(records.get((setting, "lr"), []), "respo_wtilt")


# --- per-run reading of the step sums ----------------------------------------------------------------

# --- gate A --------------------------------------------------------------------------------------

def gate_a_runs(records, setting: str, lag: int, control: bool) -> list[dict]:
    return [r for r in records.get((setting, "gate-a"), [])
            if (r["sampler_dtype"] == "bfloat16") == control and (control or r["lag"] == lag)
            and r["iterations"] == lag + 1 + EARLY_BATCHES and r["seed"] in SELECTION_SEEDS]


def gate_a(records, setting: str, lag: int) -> dict | None:
    """Gate A's four figures and outcome on one setting at one lag; None until its runs exist."""
    cell, control = gate_a_runs(records, setting, lag, False), gate_a_runs(records, setting, lag, True)
    if len(cell) < len(SELECTION_SEEDS) or len(control) < len(SELECTION_SEEDS):
        return None
    ones, sums = tails(cell, "ones"), tails(cell, "sum")
    c_ones, c_sums = tails(control, "ones"), tails(control, "sum")
    checks = {"drift gap >= 0.01": sums["drift"] - ones["drift"] >= DRIFT_GAP,
              "ones below 0.8 >= 15%": ones["low_share"] >= LOW_SHARE,
              "3x the sum share": ones["low_share"] >= LOW_RATIO * sums["low_share"],
              "control gap < 0.002": abs(c_sums["drift"] - c_ones["drift"]) < CONTROL_GAP}
    return {"ones": ones, "sum": sums, "control_ones": c_ones, "control_sum": c_sums, "checks": checks,
            "passed": all(checks.values())}


def gate_a_lags(records) -> list[int]:
    return sorted({r["lag"] for s in SETTINGS for r in records.get((s, "gate-a"), []) if r["lag"]})


def gate_a_outcome(records) -> tuple[int | None, str]:
    """(the lag gate A passed at on both settings, or None; the sentence the rule gives)."""
    for lag in (4, 8):
        results = {s: gate_a(records, s, lag) for s in SETTINGS}
        if any(v is None for v in results.values()):
            return None, f"gate A at lag {lag} not run on every setting"
        if all(v["passed"] for v in results.values()):
            return lag, f"gate A passes at lag {lag} on both settings"
    return None, "the mechanism cannot be produced on this model (gate A fails at lags 4 and 8)"


def gate_a_table(records) -> str:
    lines = ["| CPU setting | lag | drift per token, ones / sum | ones w < 0.8 | sum w < 0.8 | control drift, ones / sum "
             "| failed | gate A |", "|---|---|---|---|---|---|---|---|"]
    for lag in gate_a_lags(records):
        for setting in SETTINGS:
            g = gate_a(records, setting, lag)
            if g is None:
                continue
            failed = ", ".join(k for k, ok in g["checks"].items() if not ok) or "-"
            lines.append(f"| {setting} | {lag} | {g['ones']['drift']:+.4f} / {g['sum']['drift']:+.4f} | "
                         f"{g['ones']['low_share']:.1%} | {g['sum']['low_share']:.1%} | "
                         f"{g['control_ones']['drift']:+.4f} / {g['control_sum']['drift']:+.4f} | {failed} | "
                         f"{'PASS' if g['passed'] else 'FAIL'} |")
    return "\n".join(lines)


def mean_log_w(records: list[dict], family: str) -> float:
    """The positives' mean sequence log w, from the per-length sums of log w / |y|."""
    total = n = 0.0
    for r in records:
        for name, cell in r["cells"].items():
            fam, length = name.split()
            if fam == family:
                total, n = total + cell["drift"] * int(length), n + cell["n"]
    return total / n if n else math.nan


def high_share(records: list[dict], family: str) -> float:
    n = sum(family_sums(r, family).get("n", 0) for r in records)
    return sum(family_sums(r, family).get("high", 0) for r in records) / n if n else math.nan


def gate_a_reading(records) -> str:
    """Descriptive, deciding nothing: the gate A cells' positives per family (pooled over the selection seeds)."""
    lines = ["| CPU setting | lag | family | positives (x steps) | mean log w | w < 0.8 | w > 1.2 | lost, low tail | "
             "lost, high tail (per positive) |", "|---|---|---|---|---|---|---|---|---|"]
    for lag in gate_a_lags(records):
        for setting in SETTINGS:
            cell = gate_a_runs(records, setting, lag, False)
            for family in ("sum", "ones"):
                t = tails(cell, family)
                if t["n"]:
                    lines.append(f"| {setting} | {lag} | {family} | {t['n']} | {mean_log_w(cell, family):+.3f} | "
                                 f"{t['low_share']:.0%} | {high_share(cell, family):.0%} | {t['lost_low']:.3f} | "
                                 f"{t['lost_high']:.3f} |")
    return "\n".join(lines)


def gate_a_retained(records) -> str:
    """Each coefficient's retained signal by length on the gate A cells' positives (seq_clip's steps)."""
    bins = " | ".join(f"{a}-{b} tokens" for a, b in LENGTH_BINS)
    lines = [f"| CPU setting | lag | coefficient | {bins} |", "|---|---|---|" + "---|" * len(LENGTH_BINS)]
    for lag in gate_a_lags(records):
        for setting in SETTINGS:
            cell = gate_a_runs(records, setting, lag, False)
            counts = [sum(family_sums(r, f, b).get("n", 0) for r in cell for f in ("sum", "ones")) for b in LENGTH_BINS]
            lines.append(f"| {setting} | {lag} | positives (x steps) | " + " | ".join(f"{n:.0f}" for n in counts) + " |")
            for method in READ_METHODS:
                lines.append(f"| {setting} | {lag} | `{method}` | "
                             + " | ".join(f"{retained(cell, method, b):.3f}" for b in LENGTH_BINS) + " |")
    return "\n".join(lines)


# --- the evaluation ------------------------------------------------------------------------------

def evaluation(records, setting: str, lag: int) -> dict[str, dict[int, dict]]:
    """{method: {seed: record}} of the R = 4 cell at this lag; "anchor": the seeds' on-policy anchors."""
    runs = defaultdict(dict)
    for r in records.get((setting, "evaluate"), []):
        if r["reuse"] == 4 and r["lag"] == lag:
            runs[r["method"]][r["seed"]] = r
        elif r["reuse"] == 1 and r["file"].startswith("anchor-"):
            runs["anchor"][r["seed"]] = r
        elif r["reuse"] == 1:
            runs[f"{r['method']}@R1"][r["seed"]] = r
    return dict(runs)


def paired_seeds(runs) -> list[int]:
    return sorted(set.intersection(*(set(runs.get(m, {})) for m in METHODS)))


def pairing_holds(runs, lag: int) -> bool:
    """Batches 0..lag are sampled by the warm start for every method: identical rollouts on every seed."""
    return all(len({json.dumps(runs[m][s]["rollouts"][:lag + 1], sort_keys=True) for m in METHODS}) == 1
               for s in paired_seeds(runs))


def heldout(record) -> float:
    return record["heldout"]["heldout_pass@1"]


METRICS = {"ones": lambda r: early(r, "ones"), "sum": lambda r: early(r, "sum"), "held-out": heldout}


def differences(runs, method: str, metric: str) -> list[float]:
    read = METRICS[metric]
    return [read(runs[method][s]) - read(runs[BASELINE][s]) for s in paired_seeds(runs)]


def lost_low(record) -> float:
    return tails([record], "ones")["lost_low"]


def contrasts(runs) -> dict:
    """Per contrast on early ones pass@1: mean, 90% interval, p; Holm over the three; sum, held-out; dose; D."""
    out = {}
    for name, method in CONTRASTS.items():
        d = differences(runs, method, "ones")
        out[name] = {"method": method, "d": d, "mean": decision.mean(d), "interval": decision.interval90(d),
                     "p": decision.sign_flip_p(d),
                     **{f"{m}_interval": decision.interval90(differences(runs, method, m)) for m in ("sum", "held-out")},
                     **{f"{m}_mean": decision.mean(differences(runs, method, m)) for m in ("sum", "held-out")}}
    for name, rejected in decision.holm({n: c["p"] for n, c in out.items()}).items():
        out[name]["holm"] = rejected
    seeds = paired_seeds(runs)
    out["C1"]["sum_equivalent"] = decision.equivalent(differences(runs, CONTRASTS["C1"], "sum"))
    out["C1"]["dose_p"] = decision.rising_p([lost_low(runs[BASELINE][s]) for s in seeds], out["C1"]["d"])
    half = [c3 - c2 / 2 for c2, c3 in zip(out["C2"]["d"], out["C3"]["d"])]
    out["C3"]["keeps_half_interval"] = decision.interval90(half)
    return out


def verdicts(c: dict) -> dict[str, str]:
    """M and R on one setting, by the pre-registered rules (gate A passed: the evaluation ran)."""
    positive = {n: c[n]["holm"] and c[n]["mean"] > 0 for n in CONTRASTS}
    shown = positive["C1"] and c["C1"]["sum_equivalent"] and c["C1"]["dose_p"] < 0.05
    m = "shown" if shown else "refuted at this scale" if c["C1"]["interval"][1] < decision.MARGIN else "not resolved"
    supported = shown and positive["C2"] and positive["C3"] and c["C3"]["keeps_half_interval"][1] >= 0
    r = ("supported" if supported else "refuted at this scale" if c["C2"]["interval"][1] < decision.MARGIN
         else "not resolved")
    return {"M": m, "R": r}


def across(per_setting: dict[str, dict[str, str]], claim: str) -> str:
    values = {s: v[claim] for s, v in per_setting.items()}
    if len(values) == len(SETTINGS) and len(set(values.values())) == 1:
        return next(iter(values.values()))
    return "not resolved (" + ", ".join(f"{s}: {v}" for s, v in values.items()) + ")"


def contrast_table(c: dict) -> str:
    lines = ["| contrast (minus seq_clip) | early ones: mean, 90% interval | p (sign-flip) | Holm | early sum: mean, "
             "90% interval | held-out ones: mean, 90% interval |", "|---|---|---|---|---|---|"]
    for name in CONTRASTS:
        x = c[name]
        lines.append(f"| {name} `{x['method']}` | {x['mean']:+.3f} ({x['interval'][0]:+.3f}, {x['interval'][1]:+.3f}) | "
                     f"{x['p']:.4f} | {'rejects' if x['holm'] else '-'} | {x['sum_mean']:+.3f} ({x['sum_interval'][0]:+.3f}, "
                     f"{x['sum_interval'][1]:+.3f}) | {x['held-out_mean']:+.3f} ({x['held-out_interval'][0]:+.3f}, "
                     f"{x['held-out_interval'][1]:+.3f}) |")
    return "\n".join(lines)


def means_table(runs) -> str:
    lines = ["| method | seeds | early ones pass@1 | early sum pass@1 | held-out ones pass@1 | ones below w = 0.8 | "
             "lost low / high (per ones positive) |", "|---|---|---|---|---|---|---|"]
    for method in (*METHODS, "anchor", *sorted(k for k in runs if k.endswith("@R1"))):
        rs = list(runs.get(method, {}).values())
        if not rs:
            continue
        t = tails(rs, "ones")
        lines.append(f"| {method} | {len(rs)} | " + " | ".join(f"{decision.mean(METRICS[m](r) for r in rs):.3f}"
                                                             for m in METRICS)
                     + f" | {t['low_share']:.1%} | {t['lost_low']:.3f} / {t['lost_high']:.3f} |")
    return "\n".join(lines)


def retained_table(runs) -> str:
    bins = " | ".join(f"{a}-{b} tokens" for a, b in LENGTH_BINS)
    lines = [f"| coefficient | read on | {bins} |", "|---|---|" + "---|" * len(LENGTH_BINS)]
    clip_runs = list(runs[BASELINE].values())
    for method in READ_METHODS:
        for where, rs in (("seq_clip's runs", clip_runs), ("its own runs", list(runs.get(method, {}).values()))):
            if rs:
                lines.append(f"| `{method}` | {where} | " + " | ".join(f"{retained(rs, method, b):.3f}"
                                                                         for b in LENGTH_BINS) + " |")
    return "\n".join(lines)


def gate_a_curves(records, path: Path) -> None:
    """The gate runs' curves: the cells at each lag, their bf16 controls, and on-policy respo at lr* (the lr runs)."""
    lr, _ = lr_star(records)
    arms = {}
    for setting in SETTINGS:
        arms[setting] = {f"seq_clip, R = 4, lag {lag}": gate_a_runs(records, setting, lag, False)
                         for lag in gate_a_lags(records)}
        arms[setting] |= {f"bf16 control, {lag + 1 + EARLY_BATCHES} batches": gate_a_runs(records, setting, lag, True)
                          for lag in gate_a_lags(records)}
        arms[setting]["respo on-policy at lr*"] = [r for r in records.get((setting, "lr"), []) if r["lr"] == lr]
    curves(arms, "digit_conflict, the gate runs at lr* (selection seeds 900, 901): mean and min-max band",
           "range", path)


def evaluation_curves(records, lag: int, path: Path) -> None:
    arms = {s: {m: list(evaluation(records, s, lag).get(m, {}).values()) for m in (*METHODS, "anchor")}
            for s in SETTINGS}
    curves(arms, f"digit_conflict, R = 4 with lag {lag}, lr*: mean and 95% band over seeds", "95%", path)


def summarise(out: Path, figures: Path | None = None) -> str:
    """Every table and verdict in markdown (what summary.md holds); the figures drawn into `figures` when given."""
    records = load(out)
    share, search = gate1_search(records)
    parts = ["## Gate 1", gate1_table(records), search]
    if share is None:
        return "\n\n".join(parts)
    lr, lr_table = lr_star(records)
    parts += ["## lr* (default kernels decide)", lr_table, f"lr* = {lr:g}" if lr else "lr* not chosen yet"]
    unvectorised = lr_star(records, "unvectorised")
    if unvectorised[0] is not None:
        parts += ["unvectorised selection:", unvectorised[1], f"it would choose {unvectorised[0]:g}"]
    lag, outcome = gate_a_outcome(records)
    parts += ["## Gate A", gate_a_table(records), outcome,
              "Descriptive, deciding nothing: the gate A cells' positives per family", gate_a_reading(records),
              "What each coefficient retains of the positives' signal there (R_m = sum phi_m A / sum A)",
              gate_a_retained(records)]
    if figures is not None:
        gate_a_curves(records, figures / "conflict-gate-a-curves.png")
    if lag is None:
        return "\n\n".join(parts)
    per_setting = {}
    for setting in SETTINGS:
        runs = evaluation(records, setting, lag)
        if not all(runs.get(m) for m in METHODS):
            parts.append(f"## Evaluation, {setting}: not run yet")
            continue
        seeds = paired_seeds(runs)
        parts += [f"## Evaluation, {setting} ({len(seeds)} paired seeds)",
                  f"pairing check (batches 0-{lag} identical for every method on every seed): "
                  f"{'holds' if pairing_holds(runs, lag) else 'FAILS'}", means_table(runs)]
        c = contrasts(runs)
        per_setting[setting] = verdicts(c)
        parts += [contrast_table(c), f"C1 on early sum pass@1 equivalent to 0: {c['C1']['sum_equivalent']}; "
                  f"C1 rising with the lost low-tail mass: one-sided p = {c['C1']['dose_p']:.4f}; "
                  f"C3 - C2/2, 90% interval ({c['C3']['keeps_half_interval'][0]:+.3f}, "
                  f"{c['C3']['keeps_half_interval'][1]:+.3f})",
                  f"verdicts ({setting}): M {per_setting[setting]['M']}, R {per_setting[setting]['R']}",
                  "retained signal by length (R_m = sum phi_m A / sum A over positives)", retained_table(runs)]
    if per_setting:
        parts.append(f"## Verdicts across both settings: M {across(per_setting, 'M')}; R {across(per_setting, 'R')}")
        if figures is not None:
            evaluation_curves(records, lag, figures / "conflict-curves.png")
    return "\n\n".join(parts)
