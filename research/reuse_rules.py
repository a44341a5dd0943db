"""The rules of the reuse study (research/REUSE.md) as code: its design, the lr rule, the pairing and manipulation
checks, the 27 contrasts with exact sign-flip tests and Holm, the verdicts, and the tables and figure read from its
records. Imported by research/reuse.py and research/reuse_figures.py; imports neither.

    python -m research.reuse --summarise
"""

from __future__ import annotations

import math
from pathlib import Path

from research import decision
from research.digit_runs import SETTINGS, load
from research.drift_rules import heldout, sign_flip_p
from research.select_lr import collapsed as collapsed_in_last_batches

# --- the design (REUSE.md) -------------------------------------------------------------------------------------
NS = (8, 16, 32)
UPDATES = 256
DIAGNOSTIC_UPDATES = UPDATES // 2  # the paper's first half; early (updates 1-64) and late (225-256): nano_respo/summary.py
BASELINES = ("grpo", "gspo", "vespo")
ARMS = ("respo_pos_clip_neg", "respo_pos_vespo_neg")
METHODS = BASELINES + ("respo",) + ARMS
SEEDS = tuple(range(16))
MARGIN = decision.MARGIN  # the training score's tie margin (REUSE.md)
SMALLEST_CUT = 6  # below 6 seeds no exact sign-flip p reaches 0.05 (2 / 2**5 = 0.0625): the check could not pass
COLLAPSED_BELOW, LR_TIE = 0.5, 0.01  # select_lr.choose_final's rule, read on the late score
CHECK_P = 0.05
# The paper's rows (REUSE.md, "The paper's numbers"): (model, N) -> {method: (early, late)}.
PAPER = {("Qwen3-1.7B", 8): {"grpo": (0.169, 0.213), "gspo": (0.158, 0.209), "vespo": (0.161, 0.275), "respo": (0.192, 0.286)},
         ("Qwen3-1.7B", 16): {"grpo": (0.156, 0.210), "gspo": (0.127, 0.199), "vespo": (0.151, 0.268), "respo": (0.166, 0.264)},
         ("Qwen3-1.7B", 32): {"grpo": (0.118, 0.197), "gspo": (0.106, 0.184), "vespo": (0.127, 0.230), "respo": (0.157, 0.276)},
         ("Qwen3-30B-A3B", 8): {"grpo": (0.478, 0.530), "gspo": (0.416, 0.538), "vespo": (0.414, 0.538), "respo": (0.468, 0.595)},
         ("Qwen3-30B-A3B", 16): {"grpo": (0.403, 0.498), "gspo": (0.369, 0.521), "vespo": (0.386, 0.531), "respo": (0.445, 0.563)},
         ("Qwen3-30B-A3B", 32): {"grpo": (0.362, 0.504), "gspo": (0.341, 0.493), "vespo": (0.364, 0.523), "respo": (0.418, 0.588)}}
PAPER_DIAGNOSTIC = {"deep_share": 0.228, "respo_mass": 0.385, "vespo_mass": 0.155}  # N = 32, updates 1-512


# --- one run's metrics -----------------------------------------------------------------------------------------

def late(record: dict) -> float:
    return record["summary"]["late"]


def early(record: dict) -> float:
    return record["summary"]["early"]


METRICS = {"late": late, "early": early, "held-out": heldout}


def shares(records: list[dict], updates: int = DIAGNOSTIC_UPDATES) -> dict[str, float]:
    """Pooled over runs and their updates 1 .. updates: the share of positives with w < 0.8 and with log W < -1."""
    pos = sum(sum(r["positives"][:updates]) for r in records)
    return {"n": pos, "below_0.8": sum(sum(r["below_0.8"][:updates]) for r in records) / pos if pos else math.nan,
            "log_w_below_-1": sum(sum(r["log_w_below_-1"][:updates]) for r in records) / pos if pos else math.nan}


def coefficient_mass(records: list[dict], updates: int = DIAGNOSTIC_UPDATES) -> float:
    """The mean over runs and updates 1 .. updates of the share of the positives' coefficient mass on log W < -1
    (the paper's second diagnostic; an update with no positives there counts 0, one with no positives not at all)."""
    values = [v for r in records for v in r["deep_low_w_pos_phi_mass"][:updates] if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else math.nan


# --- the lr rule -------------------------------------------------------------------------------------------------

def collapsed(record: dict) -> bool:
    """A collapse as this code reads choose_final's rule: the late score below half the first update's score."""
    return late(record) < COLLAPSED_BELOW * record["score"][0] or record["skipped_steps"] > 0


def collapsed_as_choose_final(record: dict) -> bool:
    """select_lr.choose_final's own reading: the mean of the last 5 rollout batches (here updates) below half the
    first; REUSE.md names that rule, the code above reads it on the late score (a difference found in review)."""
    return collapsed_in_last_batches({"reward_curve": record["score"], "skipped_steps": record["skipped_steps"]})


def choose_lr(records: list[dict]) -> tuple[float | None, str]:
    """REUSE.md's lr: the highest mean late score among the lrs none of whose runs collapsed; within LR_TIE of the
    best, the smallest. (lr or None, the table)."""
    by_lr = {}
    for r in records:
        by_lr.setdefault(r["lr"], []).append(r)
    mean_late = {lr: sum(map(late, rs)) / len(rs) for lr, rs in by_lr.items()}
    eligible = [lr for lr, rs in by_lr.items() if not any(map(collapsed, rs))]
    chosen = None
    if eligible:
        top = max(mean_late[lr] for lr in eligible)
        chosen = min(lr for lr in eligible if mean_late[lr] >= top - LR_TIE)
    table = ["| lr | late score per seed | mean | collapsed | collapsed, choose_final's last 5 batches |",
             "|---|---|---|---|---|"]
    table += [f"| {lr:g} | {', '.join(f'{late(r):.3f}' for r in sorted(rs, key=lambda r: r['seed']))} | "
              f"{mean_late[lr]:.3f} | {sum(map(collapsed, rs))} of {len(rs)} | "
              f"{sum(map(collapsed_as_choose_final, rs))} of {len(rs)} |" for lr, rs in sorted(by_lr.items())]
    return chosen, "\n".join(table)


# --- a setting's cell ----------------------------------------------------------------------------------------

def cell(records: list[dict]) -> dict[str, dict[int, dict[int, dict]]]:
    """{method: {N: {seed: record}}} of one setting's evaluate records."""
    out = {}
    for r in records:
        out.setdefault(r["method"], {}).setdefault(r["n"], {})[r["seed"]] = r
    return out


def whole_seeds(runs, methods=METHODS) -> list[int]:
    """The seeds every one of `methods` ran at every N: the paired design (a stopped stage is cut to them)."""
    return sorted(set.intersection(*[set(runs.get(m, {}).get(n, {})) for m in methods for n in NS]))


def pairing_holds(runs, seeds) -> bool:
    """At each N and seed, every method saw the same first rollout batch (the same warm start, prompts and draws)."""
    return all(len({repr(runs[m][n][s]["rollouts"][0]) for m in METHODS}) == 1 for n in NS for s in seeds)


def manipulation(runs, seeds) -> dict:
    """REUSE.md's check on the grpo runs: both shares grow strictly with N, and the per-seed rise of the log W < -1
    share from N = 8 to N = 32 is an increase (mean above 0) with an exact sign-flip p below CHECK_P."""
    per_n = {n: shares([runs["grpo"][n][s] for s in seeds]) for n in NS}
    rise = [shares([runs["grpo"][NS[-1]][s]])["log_w_below_-1"] - shares([runs["grpo"][NS[0]][s]])["log_w_below_-1"]
            for s in seeds]
    grows = {key: all(per_n[a][key] < per_n[b][key] for a, b in zip(NS, NS[1:])) for key in ("below_0.8", "log_w_below_-1")}
    p = sign_flip_p(rise) if rise else math.nan
    return {"per_n": per_n, "rise": rise, "p": p, "grows": grows,
            "passed": all(grows.values()) and p < CHECK_P and decision.mean(rise) > 0}


def paired(runs, a: str, b: str, n: int, seeds, metric: str = "late") -> list[float]:
    read = METRICS[metric]
    return [read(runs[a][n][s]) - read(runs[b][n][s]) for s in seeds]


def contrasts(runs, seeds) -> dict[str, dict]:
    """The 27 contrasts of one setting: C(N, b) on late and early, T(b), S(arm, N); Holm over them all."""
    d = {}
    for b in BASELINES:
        for n in NS:
            for metric in ("late", "early"):
                d[f"C({n}, {b}) {metric}"] = paired(runs, "respo", b, n, seeds, metric)
        low, high = paired(runs, "respo", b, NS[0], seeds), paired(runs, "respo", b, NS[-1], seeds)
        d[f"T({b})"] = [(y - x) / 2 for x, y in zip(low, high)]  # the slope in log2 N, per seed
    for arm in ARMS:
        for n in NS:
            d[f"S({arm}, {n})"] = paired(runs, arm, "respo", n, seeds)
    out = {name: {"d": x, "mean": decision.mean(x), "interval": decision.interval90(x), "p": sign_flip_p(x),
                  "held-out": held_out(runs, name, seeds)} for name, x in d.items()}
    for name, rejected in decision.holm({k: c["p"] for k, c in out.items()}).items():
        c = out[name]
        c["reads"] = ("higher" if rejected and c["mean"] > 0 else "lower" if rejected else
                      "tie" if decision.equivalent(c["d"], MARGIN) else "not resolved")
    return out


def held_out(runs, name: str, seeds) -> tuple[float, tuple[float, float]] | None:
    """A C or S contrast's held-out pass@1 difference (mean, 90% interval), untested; None for T."""
    if name.startswith("T("):
        return None
    inside = name.split("(", 1)[1].split(")", 1)[0].split(", ")
    n, a, b = ((int(inside[0]), "respo", inside[1]) if name.startswith("C(") else (int(inside[1]), inside[0], "respo"))
    x = paired(runs, a, b, n, seeds, "held-out")
    return decision.mean(x), decision.interval90(x)


def verdicts(c: dict[str, dict]) -> dict[str, str]:
    """E(N), L(N), G and B on one setting whose manipulation check passed, by REUSE.md's rules."""
    out = {}
    for n in NS:
        for claim, metric in (("E", "early"), ("L", "late")):
            cs = [c[f"C({n}, {b}) {metric}"] for b in BASELINES]
            supported = all(x["reads"] == "higher" for x in cs)
            refuted = any(x["interval"][1] < MARGIN for x in cs)
            # Both rules can hold: every gain significant, one of them surely under the margin. Both are said.
            out[f"{claim}({n})"] = ("supported, and refuted at this scale as a gain of the margin" if supported and refuted
                                    else "supported" if supported else "refuted at this scale" if refuted
                                    else "not resolved")
    ts = [c[f"T({b})"] for b in BASELINES]
    out["G"] = ("supported" if all(t["reads"] == "higher" for t in ts) else
                "refuted at this scale" if any(t["interval"][1] < 0 for t in ts) else "not resolved")
    ss = [c[f"S({arm}, {n})"] for arm in ARMS for n in NS]
    out["B"] = ("refuted at this scale" if any(s["reads"] == "higher" for s in ss) else
                "supported" if all(s["reads"] == "lower" for s in ss) else "not resolved")
    return out


def reading(x: dict, claim: str) -> str:
    """One setting's reading of a claim: its verdict, or why there is none."""
    if "check" not in x:
        return "not run"
    if not x["check_final"]:
        return f"check interim ({len(x['check_seeds'])} of {x['needed']} grpo seeds)"
    if not x["check"]["passed"]:
        return "check failed"
    if not x["complete"]:
        return f"not read ({len(x['seeds'])} of {x['needed']} seeds)"
    return x["verdicts"][claim] if "verdicts" in x else "pairing failed"


def across(settings: dict[str, dict], claim: str) -> str:
    """A verdict stated only when both settings give it; otherwise each setting's reading."""
    values = {s: reading(x, claim) for s, x in settings.items()}
    if len(values) == len(SETTINGS) and len(set(values.values())) == 1:
        return next(iter(values.values()))
    return "not resolved (" + ", ".join(f"{s}: {v}" for s, v in values.items()) + ")"


# --- reading the records -------------------------------------------------------------------------------------

def read_setting(records: list[dict], seeds_needed: int = len(SEEDS)) -> dict:
    """One setting's cell: its whole seeds, the pairing and manipulation checks (interim below seeds_needed), and,
    once seeds_needed whole seeds exist and the check passed on them, the contrasts and verdicts on those seeds.
    No contrast is read on part of the cell: REUSE.md reads them on all 16 seeds or on a declared cut (--seeds)."""
    runs = cell(records)
    seeds, check_seeds = whole_seeds(runs), whole_seeds(runs, ("grpo",))  # the check reads grpo's runs alone
    out = {"runs": runs, "seeds": seeds[:seeds_needed], "complete": len(seeds) >= seeds_needed,
           "check_seeds": check_seeds[:seeds_needed], "check_final": len(check_seeds) >= seeds_needed,
           "needed": seeds_needed}
    if len(out["check_seeds"]) >= 2:
        out["check"] = manipulation(runs, out["check_seeds"])
    if out["seeds"]:
        out["pairing"] = pairing_holds(runs, out["seeds"])
    if out["complete"] and out["check_final"] and out["check"]["passed"] and out["pairing"]:
        out["contrasts"] = contrasts(runs, out["seeds"])
        out["verdicts"] = verdicts(out["contrasts"])
    return out


def read_all(out: Path, seeds_needed: int = len(SEEDS)) -> dict[str, dict]:
    records = load(out)
    return {s: read_setting(records.get((s, "evaluate"), []), seeds_needed) for s in SETTINGS}


def mean_interval(values: list[float]) -> str:
    m = decision.mean(values)
    if len(values) < 2:
        return f"{m:.3f}"
    low, high = decision.interval90(values)
    return f"{m:.3f} ({low:.3f} to {high:.3f})"


def check_table(settings: dict[str, dict]) -> str:
    lines = ["| setting | grpo seeds | N | positives | share w < 0.8 | share log W < -1 | rise 8 -> 32 (p) | passes |",
             "|---|---|---|---|---|---|---|---|"]
    for s, r in settings.items():
        if "check" not in r:
            lines.append(f"| {s} | {len(r['check_seeds'])} | - | - | - | - | - | not read (fewer than 2 grpo seeds) |")
            continue
        c = r["check"]
        verdict = ("yes" if c["passed"] else "no") if r["check_final"] else "interim"
        for n in NS:
            x = c["per_n"][n]
            tail = (f"{decision.mean(c['rise']):+.3f} ({c['p']:.4f})", verdict) if n == NS[-1] else ("", "")
            lines.append(f"| {s} | {len(r['check_seeds'])} | {n} | {x['n']} | {x['below_0.8']:.3f} | "
                         f"{x['log_w_below_-1']:.3f} | {tail[0]} | {tail[1]} |")
    return "\n".join(lines)


def means_table(settings: dict[str, dict], metric: str) -> str:
    lines = [f"| setting | N | " + " | ".join(METHODS) + " |", "|---|---|" + "---|" * len(METHODS)]
    for s, r in settings.items():
        for n in NS:
            lines.append(f"| {s} | {n} | " + " | ".join(
                mean_interval([METRICS[metric](r["runs"][m][n][x]) for x in r["seeds"]]) if r["seeds"] else "-"
                for m in METHODS) + " |")
    return "\n".join(lines)


def contrast_table(c: dict[str, dict]) -> str:
    lines = ["| contrast | mean | 90% interval | seeds ahead | p | reads | held-out (90% interval) |",
             "|---|---|---|---|---|---|---|"]
    for name, x in c.items():
        h = x["held-out"]
        lines.append(f"| {name} | {x['mean']:+.3f} | {x['interval'][0]:+.3f} to {x['interval'][1]:+.3f} | "
                     f"{sum(v > 0 for v in x['d'])} of {len(x['d'])} | {x['p']:.4f} | {x['reads']} | "
                     + (f"{h[0]:+.3f} ({h[1][0]:+.3f} to {h[1][1]:+.3f})" if h else "-") + " |")
    return "\n".join(lines)


def diagnostic_table(settings: dict[str, dict]) -> str:
    """Per method and N: the paper's positive-branch diagnostic (the share of positives with log W < -1, their share
    of the positive coefficient mass) and the share below w = 0.8, over updates 1-128; the paper's at N = 32 first."""
    lines = ["| setting | N | method | share of positives with log W < -1 | their share of the positive coefficient "
             "mass | share below w = 0.8 |", "|---|---|---|---|---|---|",
             f"| paper (Qwen3-1.7B, updates 1-512) | 32 | respo | {PAPER_DIAGNOSTIC['deep_share']:.1%} | "
             f"{PAPER_DIAGNOSTIC['respo_mass']:.1%} | - |",
             f"| paper | 32 | vespo | {PAPER_DIAGNOSTIC['deep_share']:.1%} | {PAPER_DIAGNOSTIC['vespo_mass']:.1%} | - |"]
    for s, r in settings.items():
        for n in NS:
            for m in METHODS:
                runs = [r["runs"][m][n][x] for x in r["seeds"]]
                x = shares(runs)
                lines.append(f"| {s} | {n} | {m} | {x['log_w_below_-1']:.1%} | {coefficient_mass(runs):.1%} | "
                             f"{x['below_0.8']:.1%} |")
    return "\n".join(lines)


def stopped_table(settings: dict[str, dict]) -> str:
    """What a setting whose check failed reports (REUSE.md: the check and the descriptive table): grpo's runs per N
    over the check's seeds, their scores beside the paper's GRPO and their drift beside the paper's diagnostic."""
    lines = ["| setting | N | grpo early | grpo late | paper's GRPO early, late (1.7B; 30B-A3B) | share w < 0.8 | "
             "share log W < -1 (paper at N = 32: 22.8%) |", "|---|---|---|---|---|---|---|"]
    for s, r in settings.items():
        for n in NS:
            runs = [r["runs"]["grpo"][n][x] for x in r["check_seeds"]]
            paper = "; ".join(f"{PAPER[(model, n)]['grpo'][0]:.3f}, {PAPER[(model, n)]['grpo'][1]:.3f}"
                              for model in ("Qwen3-1.7B", "Qwen3-30B-A3B"))
            x = shares(runs)
            lines.append(f"| {s} ({len(runs)} seeds) | {n} | {mean_interval([early(y) for y in runs])} | "
                         f"{mean_interval([late(y) for y in runs])} | {paper} | {x['below_0.8']:.1%} | "
                         f"{x['log_w_below_-1']:.1%} |")
    return "\n".join(lines)


# --- post hoc: read after the study stopped, by no pre-registered rule --------------------------------------------

# Each method's coefficient on negatives (phi_-): only `respo` carries the published branch,
# phi_-(W) = sqrt(W) exp(2 (1 - sqrt W)), which is above 1 for W between about 0.04 and 1 (each other method's is at
# most 1 where its ratio, W or grpo's per token, is below 1). The split arms keep ReSPO's positive branch only.
NEGATIVE_BRANCH = {"grpo": "the token clip", "gspo": "the sequence clip (length-normalised W)", "vespo": "VESPO's",
                   "respo": "**the published phi_-**", "respo_pos_clip_neg": "the sequence clip",
                   "respo_pos_vespo_neg": "VESPO's"}


def drift_by_method(records: list[dict], updates: int = DIAGNOSTIC_UPDATES) -> dict[str, dict[int, tuple[float, int]]]:
    """Post hoc, per method and N: (the share of positives with log W < -1, runs) over every committed run of the
    cell, whole seed or not. Pooled as the check pools (`shares`): the positives with log W < -1 summed over the
    runs and their updates 1 .. updates, over all positives summed alike (so a run weighs by its positives)."""
    runs = cell(records)
    return {m: {n: (shares(list(runs[m][n].values()), updates)["log_w_below_-1"], len(runs[m][n]))
                for n in NS if runs.get(m, {}).get(n)} for m in METHODS if m in runs}


def drift_by_method_table(settings: dict[str, list[dict]]) -> str:
    """Post hoc: drift_by_method per setting (its evaluate records), one row per method, its negative branch named."""
    lines = ["| setting | method | its negative branch | " + " | ".join(f"N = {n}: share (seeds)" for n in NS) + " |",
             "|---|---|---|" + "---|" * len(NS)]
    for s, records in settings.items():
        for m, cells in drift_by_method(records).items():
            lines.append(f"| {s} | `{m}` | {NEGATIVE_BRANCH[m]} | " + " | ".join(
                f"{cells[n][0]:.1%} ({cells[n][1]})" if n in cells else "-" for n in NS) + " |")
    return "\n".join(lines)


POST_HOC = ("## Post hoc, read after the study stopped by no pre-registered rule: the share of positives with "
            f"log W < -1 per method and N (updates 1-{DIAGNOSTIC_UPDATES}, every committed run pooled as the check "
            "pools; seeds in brackets)")


def paper_table(settings: dict[str, dict]) -> str:
    """The paper's early / late rows above, ours below, laid out alike (ours: mean (90% interval) over seeds)."""
    four = BASELINES + ("respo",)
    lines = ["| model | N | " + " | ".join(f"early: {m}" for m in four) + " | " + " | ".join(f"late: {m}" for m in four)
             + " |", "|---|---|" + "---|" * 8]
    for (model, n), row in PAPER.items():
        lines.append(f"| {model} (paper, one run) | {n} | " + " | ".join(f"{row[m][0]:.3f}" for m in four) + " | "
                     + " | ".join(f"{row[m][1]:.3f}" for m in four) + " |")
    for s, r in settings.items():
        for n in NS:
            lines.append(f"| tiny-qwen3, {s} ({len(r['seeds'])} seeds) | {n} | " + " | ".join(
                mean_interval([early(r["runs"][m][n][x]) for x in r["seeds"]]) for m in four) + " | " + " | ".join(
                mean_interval([late(r["runs"][m][n][x]) for x in r["seeds"]]) for m in four) + " |")
    return "\n".join(lines)


def figure(settings: dict[str, dict], path: Path) -> None:
    """Per setting (columns): late and early score (rows) against N, each method's mean and 90% interval."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(settings), figsize=(6 * len(settings), 7), squeeze=False, sharex=True)
    for col, (s, r) in enumerate(settings.items()):
        for row, metric in enumerate(("late", "early")):
            ax = axes[row][col]
            for k, m in enumerate(METHODS):
                values = [[METRICS[metric](r["runs"][m][n][x]) for x in r["seeds"]] for n in NS]
                means = [decision.mean(v) for v in values]
                bands = [decision.interval90(v) if len(v) > 1 else (mu, mu) for v, mu in zip(values, means)]
                xs = [math.log2(n) + 0.04 * (k - 2.5) for n in NS]
                ax.errorbar(xs, means, yerr=[[mu - lo for mu, (lo, _) in zip(means, bands)],
                                             [hi - mu for mu, (_, hi) in zip(means, bands)]],
                            marker="o", capsize=3, label=m, linestyle="-" if m in ("respo",) + BASELINES else ":")
            ax.set_title(f"{s}: {metric} score ({len(r['seeds'])} seeds, 90% intervals)", fontsize=10)
            ax.set_xticks([math.log2(n) for n in NS], [str(n) for n in NS])
        axes[1][col].set_xlabel("N (one-epoch mini-batches per rollout batch)")
    axes[0][0].legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def summarise(out: Path, figures: Path | None = None, seeds_needed: int = len(SEEDS)) -> str:
    """Every table in REUSE.md's order: the lr stage, the check (read first), then, for a setting whose cell is whole
    (or cut as declared), the contrasts, the verdicts and the tables beside the paper's. A setting still in progress
    shows its interim check only: its methods' scores are withheld, so no reading of them can steer when to stop.
    Where the check failed on both settings: the stop, then one post-hoc table (the drift per method, by no rule)."""
    records = load(out)
    text = []
    for setting in SETTINGS:
        if lr_runs := records.get((setting, "lr"), []):
            lr, table = choose_lr(lr_runs)
            text += [f"## The lr stage, {setting} setting" + (" (it decides)" if setting == "default" else " (reported)"),
                     table, f"the rule's lr here: {lr}"]
    settings = read_all(out, seeds_needed)
    text += [f"## First, the manipulation check (grpo runs, updates 1-128; interim until {seeds_needed} grpo seeds)",
             check_table(settings)]
    for s, r in settings.items():
        state = ("" if r["complete"] and r["needed"] == len(SEEDS) else " (a declared cut)" if r["complete"]
                 else f" (in progress: scores withheld and no contrast read before {r['needed']})")
        text.append(f"{s}: {len(r['seeds'])} whole seeds of {len(SEEDS)}{state}"
                    + (f"; pairing {'holds' if r['pairing'] else 'FAILS'}" if "pairing" in r else ""))
    stopped = {s: r for s, r in settings.items() if r["check_final"] and not r["check"]["passed"]}
    if stopped:
        text += ["## Where the check failed: what REUSE.md reports there (the check and the descriptive table)",
                 stopped_table(stopped)]
    whole = {s: r for s, r in settings.items() if r["complete"] and s not in stopped}
    for s, r in whole.items():
        if "contrasts" in r:
            text += [f"## Contrasts, {s} (Holm over 27)", contrast_table(r["contrasts"])]
    claims = [f"{c}({n})" for c in ("E", "L") for n in NS] + ["G", "B"]
    text += ["## Verdicts (stated only when both settings give them)"]
    text += [f"- {claim}: {across(settings, claim)}" for claim in claims]
    if len(stopped) == len(SETTINGS):
        return "\n\n".join(text + ["The check failed on both settings: by REUSE.md the study stops here.", POST_HOC,
                                     drift_by_method_table({s: records.get((s, "evaluate"), []) for s in SETTINGS})])
    if not whole:
        return "\n\n".join(text + ["The tables of scores are withheld until a setting's cell is whole."])
    for metric in ("late", "early", "held-out"):
        text += [f"## {metric} per method and N, mean (90% interval)", means_table(whole, metric)]
    text += ["## Beside the paper", paper_table(whole), "## The positive-branch diagnostic", diagnostic_table(whole)]
    if figures is not None:
        figure(whole, figures / "reuse-evidence.png")
        text.append(f"figure: {figures / 'reuse-evidence.png'}")
    return "\n\n".join(text)
