"""Stuck runs, batch by batch: what a run that never learns does differently from one that does.

    python -m research.toy.stuck --records research/toy/results/stuck-selection --reuse 4 --out research/toy/figures/stuck.png

A run is stuck when its final training reward is below --stuck-below. Once no response of a
group is correct, every reward in it is equal, its advantages are all 0 (docs/math.md §1)
and it carries no gradient; when that holds for every group of every batch the run cannot
recover. The figure follows the runs of one cell (method, R, lr, kernel) over the rollout
batches, stuck ones in red: reward, the share of signal-free groups, response length,
sampled entropy, how far each batch's R steps moved the weights, and the kernel's
statistics (docs/math.md §6). The printed table says, per cell, how many runs got stuck and
how much of the weights' movement in the first quarter of training happened in batches
without any signal (Adam moves on its momentum when the gradient is 0).

The committed stuck runs ran this project's reconstruction, `respo_wtilt`: the method the figure shows by default.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from dataclasses import dataclass

from research.cli import parse_config
from research.study_rows import StudyLossConfig
from research.lab.report import fmt, is_stuck, load_records, mean_ci, save
from research.toy.run import KNOBS

PANELS = (("reward_curve", "training reward"), ("zero_var_curve", "share of signal-free groups"),
          ("length_curve", "response length"), ("entropy_curve", "entropy of sampled tokens"),
          ("update_norm_curve", "weights moved per batch (L2)"), ("phi_mean_neg_curve", "mean phi on negatives"),
          ("phi_max_neg_curve", "max phi on a negative"), ("low_w_pos_phi_mass_curve", "low-w positives' share of phi"))


@dataclass
class StuckConfig:
    """Stuck against healthy runs of one toy cell, over the rollout batches."""

    records: str = "research/toy/results/stuck-selection"
    """runs.jsonl (or its folder) written by research.toy.run with per-batch curves."""
    method: str = "respo_wtilt"
    """Method whose runs the figure shows."""
    reuse: int = 4
    """Rollout reuse R of the runs the figure shows."""
    lr: float = 0.03
    """Learning rate of the runs the figure shows."""
    kernel: str = ""
    """Kernel of the runs the figure shows, the method's knobs (research.toy.run's KNOBS) comma-separated; empty = LossConfig's."""
    stuck_below: float = 0.1
    """A run is stuck when its final training reward is below this."""
    out: str = "runs/stuck.png"
    """Where the figure goes."""


def setting(record) -> tuple:
    """The cell a run belongs to apart from its seed: (method, lr, kernel, R)."""
    kernel = tuple(sorted(record.get("loss", {}).items()))
    method = record["method"] + (" (no silent steps)" if record.get("skip_silent_steps") else "")
    return method, record["lr"], kernel, record["reuse"]


def coasting_share(record, batches: int) -> float:
    """Share of the weights' movement over the first `batches` batches made in batches with no signal."""
    moved = record["update_norm_curve"][:batches]
    silent = [m for m, zero in zip(moved, record["zero_var_curve"][:batches]) if zero == 1.0]
    return sum(silent) / sum(moved) if sum(moved) > 0 else float("nan")


def summary_table(records, stuck_below: float) -> str:
    """Per cell: stuck runs, early AUC, final and held-out reward, and the coasting share of stuck and healthy runs."""
    cells = defaultdict(list)
    for r in records:
        cells[setting(r)].append(r)
    kernels = "; ".join(", ".join(KNOBS[m]) for m in KNOBS if any(r["method"] == m and r.get("loss") for r in records))
    lines = [f"| method | lr | kernel ({kernels or 'none'}) | R | seeds | stuck | early AUC | final train | "
             "held-out | early moves without signal: stuck / healthy |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (method, lr, kernel, reuse), runs in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][3], -kv[0][1], kv[0][2])):
        knobs = dict(kernel)
        name = ", ".join(f"{knobs[k]:g}" for k in KNOBS.get(runs[0]["method"], tuple(knobs))) if knobs else "-"
        stuck = [r for r in runs if is_stuck(r, stuck_below)]
        healthy = [r for r in runs if not is_stuck(r, stuck_below)]
        quarter = max(1, runs[0]["iterations"] // 4)
        shares = []
        for group in (stuck, healthy):
            mean, _ = mean_ci([coasting_share(r, quarter) for r in group if "update_norm_curve" in r])
            shares.append("-" if math.isnan(mean) else f"{mean:.2f}")
        outcomes = [fmt(*mean_ci([r[k] for r in runs])) for k in ("early_auc", "final_reward", "heldout_reward")]
        lines.append(f"| {method} | {lr:g} | {name} | {reuse} | {len(runs)} | {len(stuck)}/{len(runs)} | "
                     + " | ".join(outcomes) + f" | {shares[0]} / {shares[1]} |")
    return "\n".join(lines)


def plot_stuck(runs, path, stuck_below: float, title: str = ""):
    """One panel per PANELS entry; every run a thin line, stuck runs red, healthy ones blue."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(14, 5.6), sharex=True)
    for ax, (key, label) in zip(axes.flat, PANELS):
        for r in sorted(runs, key=lambda r: is_stuck(r, stuck_below)):  # stuck ones drawn last, on top
            curve = r.get(key)
            if curve is None:
                continue
            stuck = is_stuck(r, stuck_below)
            ax.plot(range(1, len(curve) + 1), curve, color="tab:red" if stuck else "tab:blue",
                    lw=1.4 if stuck else 0.7, alpha=0.9 if stuck else 0.5)
        if key == "update_norm_curve":
            ax.set_yscale("log")
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("rollout batch")
    axes[0][0].plot([], [], color="tab:red", label="stuck")
    axes[0][0].plot([], [], color="tab:blue", label="learns")
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save(fig, path)


def main(argv=None):
    cfg = parse_config(StuckConfig, argv, prog="python -m research.toy.stuck")
    records = load_records(cfg.records)
    print(summary_table(records, cfg.stuck_below))
    knobs = KNOBS.get(cfg.method, ())
    values = [float(x) for x in cfg.kernel.split(",")] if cfg.kernel else [getattr(StudyLossConfig(), k) for k in knobs]
    kernel = dict(zip(knobs, values))
    runs = [r for r in records if (r["method"], r["reuse"], r["lr"], r.get("loss", {})) == (cfg.method, cfg.reuse, cfg.lr, kernel)]
    if not runs:
        raise SystemExit(f"records: no {cfg.method} runs at R = {cfg.reuse}, lr {cfg.lr:g}, kernel {kernel}")
    os.makedirs(os.path.dirname(cfg.out) or ".", exist_ok=True)
    n_stuck = sum(is_stuck(r, cfg.stuck_below) for r in runs)
    plot_stuck(runs, cfg.out, cfg.stuck_below,
               title=f"{cfg.method}, R = {cfg.reuse}, lr {cfg.lr:g}: {n_stuck} of {len(runs)} seeds stuck (red)")
    print(f"\nwrote {cfg.out}")


if __name__ == "__main__":
    main()
