"""Tables and plots of compared runs: means with 95% CIs over seeds, paired differences, diagnostics.

Shared by the toy (research/toy/run.py) and the tiny-Qwen3 grid (research/run.py). A record is one
run: what toy.train.train returns, or research/run.py's summary of a metrics.jsonl. Runs
group by (method, setting), the setting being the reuse R and the rollout lag (the LLM grid's
staleness axis; 0 in the toy); seeds are the replicates. Paired differences use only seeds that
both methods ran.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import NamedTuple

import torch

from nano_respo.kernel import METHOD_TABLE, LossConfig
from nano_respo.surrogate import phi_curve

# Two-sided 95% Student-t quantiles t_{0.975, df}, df = 1..30 (beyond: the normal 1.96).
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042)
OUTCOMES = (("early_auc", "early AUC"), ("full_auc", "full AUC"), ("final_reward", "final train"),
            ("heldout_reward", "held-out"))
# The kernel statistics (diagnostics.DIAGNOSTIC_KEYS) that describe the tails of the weights under reuse (all trivial
# at w = 1): what the tables show.
TAIL_KEYS = ("low_w_pos_frac", "low_w_pos_phi_mass", "phi_low_w_pos", "phi_max_neg", "clip_frac_seq",
             "clip_frac_token", "approx_kl", "log_w_q10_pos", "log_w_q90_pos", "log_w_q10_neg", "log_w_q90_neg",
             "deep_low_w_pos_frac", "deep_low_w_pos_phi_mass")  # the last two: the paper's positive-branch diagnostic
RESPO_METHODS = ("respo", "respo_wtilt")  # drawn heavier in the plots: the published kernel and the reconstruction
DIAGNOSTICS = (*TAIL_KEYS, "len_low_w_pos", "len_high_w_pos", "len_pos", "zero_var_frac", "response_length", "final_entropy",
               "grad_norm", "tokens_per_s")


def mean_ci(values) -> tuple[float, float]:
    """(mean, half-width of the 95% t interval); half-width nan for a single value."""
    values = [v for v in values if not math.isnan(v)]
    n = len(values)
    if n == 0:
        return float("nan"), float("nan")
    mean = sum(values) / n
    if n == 1:
        return mean, float("nan")
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, (T975[n - 2] if n - 1 <= len(T975) else 1.96) * sd / math.sqrt(n)


def fmt(mean: float, half: float, digits: int = 3) -> str:
    return f"{mean:.{digits}f}" if math.isnan(half) else f"{mean:.{digits}f} ± {half:.{digits}f}"


class Setting(NamedTuple):
    """How off-policy a cell is: reuse R and rollout lag; it prints as R alone when the lag is 0."""

    reuse: int
    lag: int = 0

    def __str__(self) -> str:
        return f"{self.reuse}" if not self.lag else f"{self.reuse}, lag {self.lag}"


def parse_setting(text: str) -> Setting:
    """'8' -> Setting(8, 0); '4+lag2' -> Setting(4, 2): how commands and claims name a setting."""
    import re

    match = re.fullmatch(r"(\d+)(?:\+lag(\d+))?", text.strip())
    if not match or int(match.group(1)) < 1:
        raise ValueError(f"settings: expected R or R+lagK with R >= 1 (e.g. 8, 4+lag2), got {text!r}")
    return Setting(int(match.group(1)), int(match.group(2) or 0))


def group_runs(records) -> dict:
    """{(method, Setting(reuse, lag)): {seed: record}}."""
    groups = defaultdict(dict)
    for r in records:
        groups[(r["method"], Setting(r["reuse"], r.get("lag", 0)))][r["seed"]] = r
    return groups


def selection_score(record) -> float:
    """The selection criterion: (early AUC + final training reward + held-out reward) / 3.

    Early AUC alone rewards the largest step that does not diverge; the two end-of-run terms
    charge for what that step costs later.
    """
    return (record["early_auc"] + record["final_reward"] + record["heldout_reward"]) / 3


def mean_scores(records, key) -> dict:
    """{key(record): (mean selection score, 95% half-width)} over the records sharing a key."""
    by = defaultdict(list)
    for r in records:
        by[key(r)].append(selection_score(r))
    return {k: mean_ci(v) for k, v in by.items()}


def is_stuck(record, stuck_below: float) -> bool:
    return record["final_reward"] < stuck_below


def outcome_table(records, stuck_below: float) -> str:
    groups = group_runs(records)
    lines = ["| method | R | lr | seeds | " + " | ".join(name for _, name in OUTCOMES) + " | stuck |",
             "|---|---|---|---|" + "---|" * (len(OUTCOMES) + 1)]
    for (method, reuse), runs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cells = [fmt(*mean_ci([r[key] for r in runs.values()])) for key, _ in OUTCOMES]
        stuck = sum(is_stuck(r, stuck_below) for r in runs.values())
        lr = next(iter(runs.values()))["lr"]
        lines.append(f"| {method} | {reuse} | {lr:g} | {len(runs)} | " + " | ".join(cells) + f" | {stuck}/{len(runs)} |")
    return "\n".join(lines)


def paired_table(records, reference: str = "respo") -> str:
    groups = group_runs(records)
    lines = [f"| {reference} minus | R | pairs | " + " | ".join(name for _, name in OUTCOMES) + " |",
             "|---|---|---|" + "---|" * len(OUTCOMES)]
    for (method, reuse), runs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        ours = groups.get((reference, reuse), {})
        seeds = sorted(set(ours) & set(runs))
        if method == reference or not seeds:
            continue
        cells = [fmt(*mean_ci([ours[s][key] - runs[s][key] for s in seeds]), digits=3) for key, _ in OUTCOMES]
        lines.append(f"| {method} | {reuse} | {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_across(record_sets: dict, key: str, reference: str = "respo") -> str:
    """One metric's paired reference-minus-baseline differences, one column per record set.

    record_sets: {name: records}, e.g. the same evaluation under two CPU settings. A cell is
    bold when its 95% interval excludes 0; a claim is carried only by a row bold on the same
    side in every column.
    """
    names = list(record_sets)
    groups = {name: group_runs(records) for name, records in record_sets.items()}
    cells = sorted({cell for g in groups.values() for cell in g if cell[0] != reference}, key=lambda c: (c[1], c[0]))
    lines = [f"| {reference} minus | R | " + " | ".join(names) + " | same sign, CI excludes 0 in all |",
             "|---|---|" + "---|" * (len(names) + 1)]
    for method, reuse in cells:
        row, sides = [], set()
        for name in names:
            ours, theirs = groups[name].get((reference, reuse), {}), groups[name].get((method, reuse), {})
            seeds = sorted(set(ours) & set(theirs))
            mean, half = mean_ci([ours[s][key] - theirs[s][key] for s in seeds])
            excludes = not math.isnan(half) and abs(mean) > half
            sides.add(("+" if mean > 0 else "-") if excludes else "0")
            row.append((f"**{fmt(mean, half)}**" if excludes else fmt(mean, half)) + f" ({len(seeds)})")
        verdict = {"+": f"{reference} higher", "-": f"{reference} lower"}.get(sides.pop(), "no") if len(sides) == 1 else "no"
        lines.append(f"| {method} | {reuse} | " + " | ".join(row) + f" | {verdict} |")
    return "\n".join(lines)


def diagnostics_table(records) -> str:
    groups = group_runs(records)
    lines = ["| method | R | " + " | ".join(DIAGNOSTICS) + " |", "|---|---|" + "---|" * len(DIAGNOSTICS)]
    for (method, reuse), runs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cells = []
        for key in DIAGNOSTICS:
            mean, _ = mean_ci([r.get(key, float("nan")) for r in runs.values()])
            cells.append(f"{mean:.0f}" if key == "tokens_per_s" else f"{mean:.3g}")
        lines.append(f"| {method} | {reuse} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def stuck_table(record_sets: dict, stuck_below: float) -> str:
    names = list(record_sets)
    groups = {name: group_runs(records) for name, records in record_sets.items()}
    cells = sorted({cell for g in groups.values() for cell in g}, key=lambda c: (c[1], c[0]))
    lines = ["| method | R | " + " | ".join(f"stuck, {name}" for name in names) + " |", "|---|---|" + "---|" * len(names)]
    for cell in cells:
        counts = []
        for name in names:
            runs = groups[name].get(cell, {})
            counts.append(f"{sum(is_stuck(r, stuck_below) for r in runs.values())}/{len(runs)}")
        lines.append(f"| {cell[0]} | {cell[1]} | " + " | ".join(counts) + " |")
    return "\n".join(lines)


def across_report(record_sets: dict, reference: str, stuck_below: float) -> str:
    parts = [f"# {reference} against each baseline, under {len(record_sets)} settings",
             "Paired differences on the same seeds, mean ± 95% t-interval (pairs); bold: the interval excludes 0."]
    for key, name in OUTCOMES:
        parts += [f"## {name}", paired_across(record_sets, key, reference)]
    parts += [f"## Stuck runs (final training reward < {stuck_below})", stuck_table(record_sets, stuck_below)]
    return "\n\n".join(parts)


# --- Reproduction check: agreement within intervals, not digits -----------------------
# Floating-point rounding differs between CPUs (and CPU kernel sets), and these runs are
# chaotic: one rounding difference can flip a seed from learning to stuck. So a rerun is
# judged the way a new set of seeds would be: per (method, R) cell, does its mean fall inside
# the reference's 95% interval, and the reference's mean inside its own; and do the stated
# claims (paired differences whose interval excludes 0) still hold on the rerun.

SETTING_KEYS = ("lr", "loss", "iterations", "prompts_per_batch", "group_size", "minibatches", "hidden",
                "max_grad_norm", "adv_scale", "heldout_samples", "env")


def load_records(path: str) -> list[dict]:
    """The records of a runs.jsonl file (gzipped if it ends in .gz), or of a folder's
    runs.jsonl.gz and runs.jsonl (large committed records are stored compressed; new runs
    append to the plain file)."""
    import gzip
    import json
    import os

    paths = [path]
    if os.path.isdir(path):
        paths = [os.path.join(path, name) for name in ("runs.jsonl.gz", "runs.jsonl")
                 if os.path.exists(os.path.join(path, name))]
        if not paths:
            raise FileNotFoundError(f"no runs.jsonl or runs.jsonl.gz in {path}")
    records = []
    for p in paths:
        with (gzip.open(p, "rt") if p.endswith(".gz") else open(p)) as f:
            records += [json.loads(line) for line in f if line.strip()]
    return records


def cell_settings(runs: dict) -> set:
    """The run settings of one (method, R) cell apart from the seed (normally exactly one)."""
    return {repr([r.get(k) for k in SETTING_KEYS]) for r in runs.values()}


def agreement_rows(reference, rerun, stuck_below: float) -> list[dict]:
    """One row per (method, R, metric) present in both record sets."""
    ref_groups, new_groups = group_runs(reference), group_runs(rerun)
    rows = []
    for cell in sorted(set(ref_groups) & set(new_groups), key=lambda c: (c[1], c[0])):
        old, new = ref_groups[cell], new_groups[cell]
        same_settings = cell_settings(old) == cell_settings(new)
        for key, name in OUTCOMES:
            ref_mean, ref_half = mean_ci([r[key] for r in old.values()])
            new_mean, new_half = mean_ci([r[key] for r in new.values()])
            rows.append(dict(method=cell[0], reuse=cell[1], metric=name, same_settings=same_settings,
                             reference=(ref_mean, ref_half), rerun=(new_mean, new_half),
                             stuck=(sum(is_stuck(r, stuck_below) for r in old.values()), len(old),
                                    sum(is_stuck(r, stuck_below) for r in new.values()), len(new)),
                             rerun_in_reference=abs(new_mean - ref_mean) <= ref_half,
                             reference_in_rerun=abs(ref_mean - new_mean) <= new_half))
    return rows


def agreement_table(rows) -> str:
    lines = ["| method | R | metric | reference | rerun | rerun mean in reference CI | reference mean in rerun CI | stuck (ref / rerun) |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if not row["same_settings"]:
            lines.append(f"| {row['method']} | {row['reuse']} | {row['metric']} | settings differ | | no | no | |")
            continue
        s = row["stuck"]
        lines.append(f"| {row['method']} | {row['reuse']} | {row['metric']} | {fmt(*row['reference'])} | {fmt(*row['rerun'])} | "
                     f"{'yes' if row['rerun_in_reference'] else 'NO'} | {'yes' if row['reference_in_rerun'] else 'NO'} | "
                     f"{s[0]}/{s[1]} / {s[2]}/{s[3]} |")
    return "\n".join(lines)


def parse_claim(text: str) -> tuple[str, Setting, str, str, str]:
    """'early_auc@8:respo:above:seq_clip' -> ('early_auc', Setting(8, 0), 'respo', 'above', 'seq_clip').

    The claim: on paired seeds at that R (and lag: 'early_auc@8+lag2:...'), metric(method) -
    metric(other) has a 95% interval entirely above 0 ('above') or entirely below 0 ('below').
    """
    import re

    match = re.fullmatch(r"(\w+)@(\d+(?:\+lag\d+)?):(\w+):(above|below):(\w+)", text.strip())
    keys = [key for key, _ in OUTCOMES]
    if not match or match.group(1) not in keys:
        raise ValueError(f"claims: expected metric@R:method:above:other (or below) with metric one of "
                         f"{', '.join(keys)}, got {text!r}")
    metric, setting, method, side, other = match.groups()
    return metric, parse_setting(setting), method, side, other


def claim_result(records, claim: str) -> tuple[bool, float, float, int]:
    """(holds, mean paired difference, its 95% half-width, pairs) of one claim on these records."""
    metric, reuse, method, side, other = parse_claim(claim)
    groups = group_runs(records)
    ours, theirs = groups.get((method, reuse), {}), groups.get((other, reuse), {})
    seeds = sorted(set(ours) & set(theirs))
    mean, half = mean_ci([ours[s][metric] - theirs[s][metric] for s in seeds])
    if len(seeds) < 2:
        return False, mean, half, len(seeds)
    holds = mean - half > 0 if side == "above" else mean + half < 0
    return holds, mean, half, len(seeds)


def claims_table(claims, record_sets: dict) -> tuple[str, bool]:
    """Markdown table of every claim on every named record set; True when all hold on the last set."""
    names = list(record_sets)
    lines = ["| claim | " + " | ".join(f"{name}: difference, holds" for name in names) + " |",
             "|---|" + "---|" * len(names)]
    all_hold = True
    for claim in claims:
        cells = []
        for name in names:
            holds, mean, half, pairs = claim_result(record_sets[name], claim)
            cells.append(f"{fmt(mean, half)} ({pairs} pairs), {'yes' if holds else 'NO'}")
        all_hold &= holds  # holds of the last set, the one judged
        lines.append(f"| `{claim}` | " + " | ".join(cells) + " |")
    return "\n".join(lines), all_hold


def check_report(reference, rerun, claims, stuck_below: float) -> tuple[str, bool]:
    """The reproduction check: per-cell agreement within intervals, then the claims.

    Returns (markdown, passed): passed when every cell ran with the reference's settings and
    every claim holds on the rerun. Cells whose means fall outside the other's interval are
    reported, not failed: with n seeds per side about one cell in ten does so by chance alone.
    """
    rows = agreement_rows(reference, rerun, stuck_below)
    if not rows:
        return "No (method, R) cell is in both the reference and the rerun.", False
    outside = sum(not (r["rerun_in_reference"] and r["reference_in_rerun"]) for r in rows)
    same = all(r["same_settings"] for r in rows)
    parts = ["## Agreement with the reference, per cell (95% t-intervals over seeds)", agreement_table(rows),
             f"{len(rows) - outside} of {len(rows)} (cell, metric) entries agree both ways."]
    failures = [] if same else ["a cell ran with other settings than the reference"]
    if claims:
        table, hold = claims_table(claims, {"reference": reference, "rerun": rerun})
        parts += ["## Claims (paired differences; a claim holds when its 95% interval excludes 0 on its side)", table]
        failures += [] if hold else ["a claim does not hold on the rerun"]
    parts.append("CHECK FAILED: " + "; ".join(failures) if failures else "CHECK PASSED")
    return "\n\n".join(parts), not failures


# --- Plots ----------------------------------------------------------------------------

def plot_rewards(records, path: str, title: str = ""):
    import matplotlib.pyplot as plt

    groups = group_runs(records)
    reuses = sorted({reuse for _, reuse in groups})
    methods = list(dict.fromkeys(method for method, _ in groups))
    fig, axes = plt.subplots(1, len(reuses), figsize=(3.6 * len(reuses), 3.2), sharey=True, squeeze=False)
    for ax, reuse in zip(axes[0], reuses):
        for method in methods:
            runs = groups.get((method, reuse))
            if not runs:
                continue
            curves = torch.tensor([r["reward_curve"] for r in runs.values()])  # [S, I]
            mean = curves.mean(0)
            half = torch.zeros_like(mean)
            if len(curves) > 1:
                t = T975[len(curves) - 2] if len(curves) - 1 <= len(T975) else 1.96
                half = t * curves.std(0) / math.sqrt(len(curves))
            x = torch.arange(1, len(mean) + 1)
            lw = 2.2 if method in RESPO_METHODS else 1.2
            ax.plot(x, mean, label=method, lw=lw)
            ax.fill_between(x, mean - half, mean + half, alpha=0.15)
        ax.set_title(f"R = {reuse}")
        ax.set_xlabel("rollout batch")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("training reward (mean, 95% CI)")
    axes[0][-1].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return save(fig, path)


def plot_phi(methods, path: str, overrides: dict | None = None):
    """phi(w) of each method on both signs; overrides: {method: its LossConfig knobs} (e.g. the kernel a run used)."""
    import matplotlib.pyplot as plt

    log_w = torch.linspace(math.log(1e-3), math.log(1e2), 400)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for ax, positive in zip(axes, (True, False)):
        for method in methods:
            phi = phi_curve(method, log_w, positive, **(overrides or {}).get(method, {}))
            level = METHOD_TABLE[method][0]
            ax.plot(log_w.exp(), phi, label=f"{method} ({level})", lw=2.2 if method in RESPO_METHODS else 1.2)
        ax.plot(log_w.exp(), log_w.exp(), "k:", lw=0.8, label="plain IS (w)")
        ax.set_xscale("log")
        ax.set_ylim(0, 2.0)
        ax.set_xlabel("w (token ratio for token-level methods)")
        ax.set_title("A > 0" if positive else "A < 0")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("phi(w)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return save(fig, path)


def plot_low_w(records, path: str | None):
    """Per method and R: how many positives have w < 1 - eps, and what each of them is given."""
    import matplotlib.pyplot as plt

    groups = group_runs(records)
    reuses = sorted({reuse for _, reuse in groups})
    methods = list(dict.fromkeys(method for method, _ in groups))
    fig, axes = plt.subplots(2, len(reuses), figsize=(3.2 * len(reuses), 4.6), sharey="row", squeeze=False)
    x = torch.arange(len(methods)).float()
    for col, reuse in enumerate(reuses):
        def mean_of(key):
            return [mean_ci([r.get(key, float("nan")) for r in groups.get((m, reuse), {}).values()])[0] for m in methods]
        top, bottom = axes[0][col], axes[1][col]
        top.bar(x - 0.2, mean_of("low_w_pos_frac"), 0.4, label="share of positives with w < 0.8")
        top.bar(x + 0.2, mean_of("low_w_pos_phi_mass"), 0.4, label="their share of the positive phi mass")
        bottom.bar(x, mean_of("phi_low_w_pos"), 0.6, color="tab:green")
        bottom.axhline(1.0, color="k", ls=":", lw=0.8)
        top.set_title(f"R = {reuse}")
        top.set_xticks(x.tolist(), [])
        bottom.set_xticks(x.tolist(), methods, rotation=45, fontsize=7)
        for ax in (top, bottom):
            ax.grid(alpha=0.3, axis="y")
    axes[0][0].legend(fontsize=6)
    axes[1][0].set_ylabel("mean phi of one\nlow-w positive")
    fig.tight_layout()
    return save(fig, path)


def save(fig, path):
    """A 256-colour PNG at modest dpi keeps committed figures light.

    path: a file name or a binary file object; None leaves the figure open to show.
    """
    import io

    import matplotlib.pyplot as plt
    from PIL import Image

    if path is not None:
        buffer = io.BytesIO()
        fig.savefig(buffer, dpi=80, format="png")
        Image.open(buffer).convert("RGB").quantize(colors=256).save(path, format="PNG", optimize=True)
        plt.close(fig)
    return fig
