"""Choose every method's learning rate and a ReSPO kernel's knobs on selection seeds, so that the
evaluation (research.toy.run on fresh seeds) never sees them.

    python -m research.toy.select --workers 2

Criterion: score = (early AUC + final training reward + held-out reward) / 3, averaged over
the selection seeds and reuse factors. Early AUC alone rewards the largest step that does
not diverge; the two end-of-run terms charge for what that step costs later.

Stages: (1) every method (the kernel at LossConfig's defaults) over the learning-rate grid;
(2) the --kernel's grid at its stage-1 learning rate; (3) the learning-rate grid again for the
winning kernel setting. Prints the chosen values and the research.toy.run command that evaluates them,
and writes <out>/selection.md.

The committed selection (research/toy/results/selection/) tuned this project's reconstruction, `respo_wtilt`
(knobs wtilt_alpha_pos, wtilt_lambda_pos, wtilt_alpha_neg, wtilt_lambda_neg): the defaults here, so that its
command reruns it. `--kernel respo --methods respo ... --respo-grid` with six values an entry tunes the
published kernel (research.toy.run's KNOBS give the order).
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass, field

from research.cli import parse_config
from research.study_rows import StudyLossConfig
from research.lab.report import mean_ci, mean_scores
from research.toy.run import KNOBS, RunConfig, run_jobs, worker_pool


@dataclass
class SelectConfig:
    """Selection protocol for the toy: learning rates per method, then a ReSPO kernel's parameters."""

    env: str = "seq"
    """Environment (see research.toy.run)."""
    methods: list[str] = field(default_factory=lambda: ["respo_wtilt", "seq_clip", "grpo", "gspo", "cispo", "vespo"])
    """Methods whose learning rate is chosen (--kernel among them)."""
    kernel: str = "respo_wtilt"
    """The ReSPO method whose knobs stage 2 varies: respo_wtilt (the reconstruction, as recorded) or respo."""
    reuse: list[int] = field(default_factory=lambda: [4, 16])
    """Reuse factors the score averages over."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    """Selection seeds (keep them disjoint from the evaluation seeds)."""
    lr_grid: list[float] = field(default_factory=lambda: [0.003, 0.01, 0.03])
    """Adam learning rates tried for every method."""
    respo_grid: list[str] = field(default_factory=lambda: [
        "0,0.1,3,2", "0,0,3,2", "0,1,3,2", "0.5,0.1,3,2",  # positive branch varied, negative at (3, 2)
        "0,0.1,2,2", "0,0.1,3,1", "0,0.1,1,0", "0,0,2,2"])  # negative branch varied
    """Kernel settings as research.toy.run's KNOBS of --kernel, comma-separated (respo_wtilt:
    'wtilt_alpha_pos,wtilt_lambda_pos,wtilt_alpha_neg,wtilt_lambda_neg'; one factor at a time around its start)."""
    iterations: int = 60
    """Rollout batches per run."""
    workers: int = 1
    """Parallel worker processes."""
    out: str = "runs/toy-selection"
    """Folder for runs.jsonl and selection.md."""

    def __post_init__(self):
        if self.kernel not in KNOBS or self.kernel not in self.methods:
            raise ValueError(f"kernel: one of {', '.join(KNOBS)}, and among --methods; got {self.kernel!r}")
        for item in self.respo_grid:
            if len(item.split(",")) != len(KNOBS[self.kernel]):
                raise ValueError(f"respo_grid: {item!r} does not give the {len(KNOBS[self.kernel])} knobs "
                                 f"{', '.join(KNOBS[self.kernel])} of {self.kernel}")


def kernel_setting(record, kernel: str) -> tuple:
    defaults = StudyLossConfig()
    return tuple(record["loss"].get(k, getattr(defaults, k)) for k in KNOBS[kernel])


def runs(cfg: SelectConfig, methods, lrs, respo: dict | None = None, desc: str = "", pool=None) -> list[dict]:
    records = []
    for lr in lrs:
        run = RunConfig(env=cfg.env, methods=methods, reuse=cfg.reuse, seeds=cfg.seeds, lr=lr,
                        iterations=cfg.iterations, out=cfg.out, **(respo or {}))
        records += run_jobs(run.jobs(), cfg.out, cfg.workers, desc=f"{desc} lr={lr:g}", pool=pool)
    return records


def main(argv=None):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cfg = parse_config(SelectConfig, argv)
    # One pool of workers for every stage's runs (each run seeds itself: which worker runs it changes nothing).
    with worker_pool(cfg.workers) if cfg.workers > 1 else nullcontext() as pool:
        stages(cfg, pool)


def stages(cfg: SelectConfig, pool=None) -> None:
    """The three stages, the chosen values and the command that evaluates them (printed, and <out>/selection.md)."""
    lines = [f"# Selection ({cfg.env}; seeds {cfg.seeds}; R {cfg.reuse}; score = (early AUC + final + held-out) / 3)"]

    stage1 = runs(cfg, cfg.methods, cfg.lr_grid, desc="stage 1", pool=pool)
    lr_scores = mean_scores(stage1, lambda r: (r["method"], r["lr"]))
    best_lr = {m: max(cfg.lr_grid, key=lambda lr: lr_scores[(m, lr)][0]) for m in cfg.methods}
    lines += ["", "## Stage 1: learning rate per method", "", "| method | " + " | ".join(f"lr {lr:g}" for lr in cfg.lr_grid) + " | chosen |",
              "|---|" + "---|" * (len(cfg.lr_grid) + 1)]
    for m in cfg.methods:
        lines.append(f"| {m} | " + " | ".join(f"{lr_scores[(m, lr)][0]:.3f} ± {lr_scores[(m, lr)][1]:.3f}" for lr in cfg.lr_grid)
                     + f" | {best_lr[m]:g} |")

    kernel, knobs = cfg.kernel, KNOBS[cfg.kernel]
    grid = [tuple(float(x) for x in item.split(",")) for item in cfg.respo_grid]
    stage2 = []
    for setting in grid:
        stage2 += runs(cfg, [kernel], [best_lr[kernel]], dict(zip(knobs, setting)), desc=f"stage 2 {setting}",
                       pool=pool)
    kernel_scores = mean_scores(stage2, lambda r: kernel_setting(r, kernel))
    best = max(grid, key=lambda s: kernel_scores[s][0])
    lines += ["", f"## Stage 2: {kernel} kernel grid at lr {best_lr[kernel]:g}", "",
              "| " + " | ".join(knobs) + " | score | early AUC | final | held-out |", "|---|" + "---|" * (len(knobs) + 3)]
    for setting in sorted(grid, key=lambda s: -kernel_scores[s][0]):
        mine = [r for r in stage2 if kernel_setting(r, kernel) == setting]
        parts = [mean_ci([r[k] for r in mine])[0] for k in ("early_auc", "final_reward", "heldout_reward")]
        lines.append("| " + " | ".join(f"{x:g}" for x in setting)
                     + f" | {kernel_scores[setting][0]:.3f} ± {kernel_scores[setting][1]:.3f} | "
                     + " | ".join(f"{x:.3f}" for x in parts) + " |")

    stage3 = runs(cfg, [kernel], cfg.lr_grid, dict(zip(knobs, best)), desc="stage 3", pool=pool)
    final_scores = mean_scores(stage3, lambda r: r["lr"])
    best_lr[kernel] = max(cfg.lr_grid, key=lambda lr: final_scores[lr][0])
    lines += ["", f"## Stage 3: learning rate for {kernel} {best}", "",
              " | ".join(f"lr {lr:g}: {final_scores[lr][0]:.3f} ± {final_scores[lr][1]:.3f}" for lr in cfg.lr_grid)]

    flags = " ".join(f"--{k.replace('_', '-')} {v:g}" for k, v in zip(knobs, best))
    command = (f"python -m research.toy.run --env {cfg.env} --methods {' '.join(cfg.methods)} --reuse 4 8 16 32 "
               f"--seeds 100 101 102 103 104 --lrs {' '.join(f'{m}={lr:g}' for m, lr in best_lr.items())} {flags} "
               f"--out runs/toy-eval")
    lines += ["", "## Chosen", "", f"{kernel} {dict(zip(knobs, best))}; learning rates {best_lr}", "",
              "Evaluate on fresh seeds with:", "", f"    {command}"]
    text = "\n".join(lines)
    with open(os.path.join(cfg.out, "selection.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
