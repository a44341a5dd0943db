"""plots.png of a run, from its metrics.jsonl and config.json: reward, held-out accuracy, the drift of log w per
advantage sign, and the low-w positives a sequence clip starves (docs/training.md, "Reading a run")."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

from .runs import read_metrics


GLOSSARY = "\n".join((
    "A: advantage, the reward minus its group's mean (A > 0: a correct answer in a group that also has wrong ones).",
    "w = pi(y|x) / mu(y|x): how much more likely an answer is now than under the policy that sampled it "
    "(w = 1 at the first step on each batch).",
    "phi: the weight the loss puts on A * grad log pi(y|x) (docs/math.md §3).   eps: the clip range a sequence clip "
    "would use (--diag-eps).   Every logged key: docs/training.md.",
))


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def run_title(run_dir: Path) -> str:
    """'name: model, method, reuse R (E epochs x M mini-batches), task' from the run's config.json."""
    path = Path(run_dir) / "config.json"
    if not path.exists():
        return Path(run_dir).name
    c = json.loads(path.read_text())
    loop = f"reuse {c['reuse']} ({plural(c['epochs'], 'epoch')} x {plural(c['reuse'] // c['epochs'], 'mini-batch', 'mini-batches')})"
    return f"{c.get('name') or Path(run_dir).name}: {c['model']}, method {c['method']}, {loop}, task {c['task']}"


def write_plots(run_dir: Path) -> Path:
    """plots.png: reward, held-out accuracy, log-w quantiles per advantage sign, the low-w positives."""
    import matplotlib.pyplot as plt

    fig = plot_run(run_dir)
    path = Path(run_dir) / "plots.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_run(run_dir: Path):
    """The figure of plots.png, from the run's metrics.jsonl and config.json."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(run_dir)
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    config_path = Path(run_dir) / "config.json"
    config = json.loads(config_path.read_text()) if config_path.exists() else {}
    eps = config.get("diag_eps", 0.2)

    fig = plt.figure(figsize=(13, 10))
    grid = fig.add_gridspec(2, 2)
    axes = {(row, col): fig.add_subplot(grid[row, col]) for row, col in ((0, 0), (0, 1), (1, 0))}
    fig.suptitle(run_title(run_dir), fontsize=12)

    ax = axes[0, 0]  # the reward is one number per rollout batch: plot it once, at the batch's first step
    first_steps = {}
    for r in train:
        if r.get("reward") is not None:
            first_steps.setdefault(r["iteration"], (r["step"], r["reward"]))
    steps, rewards = zip(*first_steps.values()) if first_steps else ((), ())
    ax.plot(steps, rewards, marker=".", label="mean reward of the batch's sampled answers")
    ax.set(title="training reward (one point per rollout batch)", xlabel="optimizer step",
           ylabel="mean reward (1 = correct)")
    ax.legend(loc="best")

    ax = axes[0, 1]
    for key, style, label in (("heldout_acc", dict(marker="o"), "greedy accuracy (heldout_acc)"),
                              ("heldout_pass@1", dict(marker="s", linestyle="--"),
                               "pass@1: mean correctness of tempered samples")):
        ax.plot(*series(evals, key), label=label, **style)
    ax.set(title="held-out problems (never trained on)", xlabel="optimizer step",
           ylabel="share solved", ylim=(-0.02, 1.02))
    ax.legend(loc="lower right")

    ax = axes[1, 0]
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.axhline(math.log(1 - eps), color="grey", linewidth=0.8, linestyle=":",
               label=f"log(1 - eps): below it a sequence clip starves a correct answer")
    for sign, color, who in (("pos", "tab:green", "correct answers (A > 0)"), ("neg", "tab:red", "wrong answers (A < 0)")):
        x, median = series(train, f"log_w_q50_{sign}")
        ax.plot(x, median, color=color, linestyle="-" if sign == "pos" else "--", label=f"median, {who}")
        x, lo = series(train, f"log_w_q10_{sign}")
        x2, hi = series(train, f"log_w_q90_{sign}")
        if x == x2 and x:
            ax.fill_between(x, lo, hi, color=color, alpha=0.15, label=f"10-90% of {who}")
    ax.set(title="drift of each answer's weight w during reuse", xlabel="optimizer step", ylabel="log w")
    ax.legend(loc="best", fontsize=8)

    plot_low_w_positives(fig, grid[1, 1], train, config)

    fig.text(0.01, 0.005, GLOSSARY, fontsize=8, va="bottom", ha="left")
    fig.tight_layout(rect=(0, 0.065, 1, 0.97))
    return fig


def series(rows: list[dict], key: str) -> tuple[list, list]:
    """(steps, values) of the rows that hold a value of key (a statistic of an empty set is logged as null)."""
    points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    return [p[0] for p in points], [p[1] for p in points]


def plot_low_w_positives(fig, cell, train: list[dict], config: dict) -> None:
    """The fourth panel, in its grid cell: how many correct answers are under-generated (top), what one of them
    gets (below, on an axis of its own), and beneath both, never over the data, the key and, when they are rare,
    a note in the run's own counts."""
    eps = config.get("diag_eps", 0.2)
    x, share = series(train, "low_w_pos_frac")
    note = rare_low_w_note(train, share, eps, config.get("reuse"))
    rows = cell.subgridspec(3, 1, height_ratios=(3, 3, 5 if note else 3), hspace=0.1)
    count = fig.add_subplot(rows[0])
    count.plot(x, share, color="tab:blue", marker="o", markersize=3,
               label=f"how many: the share of correct answers with w < 1 - eps = {1 - eps:g} (low_w_pos_frac)")
    count.set(title="under-generated correct answers (what clipping starves)", ylabel="share",
              ylim=(-0.002, max(0.05, 1.1 * max(share, default=0.0))))
    count.tick_params(labelbottom=False)
    weight = fig.add_subplot(rows[1], sharex=count)
    x2, phi = series(train, "phi_low_w_pos")
    weight.plot(x2, phi, color="tab:orange", marker="x", markersize=4, linestyle="--",
                label="what one gets: its weight phi (phi_low_w_pos)")
    weight.axhline(1 - eps, color="grey", linewidth=0.8, linestyle=":",
                   label=f"phi = {1 - eps:g}: a sequence clip gives each less (its w), ReSPO more than 1")
    weight.set(xlabel="optimizer step", ylabel="phi", ylim=(0, max(1.3, 1.1 * max(phi, default=0.0))))
    key = fig.add_subplot(rows[2])
    key.axis("off")
    key.legend(handles=count.get_lines() + weight.get_lines(), fontsize=8, frameon=False,
               **(dict(loc="upper center", bbox_to_anchor=(0.5, 0.8)) if note else dict(loc="lower center")))
    if note:
        key.text(0.5, 0.0, "\n".join(textwrap.wrap(note, 100)), transform=key.transAxes, ha="center",
                 va="bottom", fontsize=8, bbox=dict(boxstyle="round", facecolor="white", edgecolor="grey"))


def rare_low_w_note(train: list[dict], share: list[float], eps: float, reuse: int | None) -> str | None:
    """What an (almost) empty fourth panel means, counted from the run's own steps; None when they are common."""
    seen = sum(value > 0 for value in share)
    if seen >= 0.1 * max(len(share), 1):
        return None
    steps, counted = len(train), len(share)
    unweighed = f" ({plural(steps - counted, 'step')} had no correct answer to count)" if counted < steps else ""
    most = (f"; at the step where they were most common, {max(share):.1%} of its correct answers" if seen else "")
    more = f"more reuse (this run's is {reuse}: --reuse {2 * reuse})" if reuse else "more reuse"
    return (f"Rare in this run: correct answers with w < {1 - eps:g} appeared at {seen} of its "
            f"{plural(steps, 'optimizer step')}{unweighed}{most}. "
            f"So there was little for a clip to starve; {more} or a larger --lr moves more answers here. "
            "When they appear, a clip gives each the weight w (towards 0); "
            "ReSPO's positive branch more than 1, up to e/2 (docs/math.md §2-§3).")
