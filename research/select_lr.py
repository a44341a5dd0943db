"""Choose every method's learning rate for the tiny-Qwen3 grid on selection seeds only.

    python -m research.select_lr --methods respo_wtilt seq_clip grpo gspo vespo --lr-grid 1e-4 3e-4 1e-3 --seeds 900 901

Every (method, learning rate) runs on the selection seeds at every setting given,
through research/run.py (each learning rate's runs in <out-dir>/lr<lr>/, resumable: stop
it any time and start it again). The criterion (--rule score) is the toy's, report.selection_score:
(early AUC + final training reward + held-out accuracy) / 3, averaged over seeds and
settings; --rule final is research/PREREGISTRATION.md's lr*: the highest mean final reward
(the last 5 batches) among the learning rates with no collapsed run. Prints the table and the
`--lrs` to pass to research/run.py, whose evaluation seeds must differ from these.

    python -m research.select_lr --task digit_sum --sft-task-size S --methods respo_wtilt --settings 1 \
        --iterations 30 --rule final        # lr*: on-policy, where every method takes the same step

Its runs are research/run.py's, with what that pins (research/common.py: two epochs, --agg
seq-mean-token-sum-norm); the committed selections (research/results/lr_select/) ran the reconstruction,
`respo_wtilt`, which is why it heads the default methods.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path


from research.cli import parse_config
from nano_respo.runs import read_metrics
from research.lab.report import mean_scores
from research.common import ExperimentConfig, finished, grid, record_of, run_dir, run_grid


RULES = ("score", "final")
# PREREGISTRATION.md's lr*: the final reward is the mean of the last FINAL_BATCHES batches; a run collapsed when
# it ends below COLLAPSED_BELOW of its batch-0 reward or skipped a step; lrs within TIE of the best count as tied.
FINAL_BATCHES, COLLAPSED_BELOW, TIE = 5, 0.5, 0.01


@dataclass
class SelectConfig:
    """Learning-rate selection for research/run.py on seeds the evaluation never uses."""

    models: list[str] = field(default_factory=lambda: ["tiny-qwen3"])
    """Models to train (train.py --model)."""
    methods: list[str] = field(default_factory=lambda: ["respo_wtilt", "seq_clip", "grpo", "gspo", "vespo"])
    """Methods whose learning rate is chosen."""
    lr_grid: list[float] = field(default_factory=lambda: [1e-4, 3e-4, 1e-3])
    """AdamW learning rates tried for every method."""
    settings: list[str] = field(default_factory=lambda: ["8"])
    """Off-policy settings the score averages over: R or R+lagK, as research/run.py --settings."""
    seeds: list[int] = field(default_factory=lambda: [900, 901])
    """Selection seeds (keep them disjoint from the evaluation seeds)."""
    iterations: int = 12
    """Rollout batches per run."""
    prompts_per_iteration: int = 16
    """train.py --prompts-per-iteration: prompts per rollout batch."""
    eval_problems: int = 64
    """train.py --eval-problems: held-out problems per evaluation."""
    workers: int = 2
    """Runs in parallel, one torch thread each."""
    out_dir: str = "runs/experiments-selection"
    """Where the runs are written, one folder per learning rate."""
    task: str = "reverse"
    """train.py --task."""
    task_size: int | None = None
    """train.py --task-size; None = the task's default."""
    sft_task_size: int | None = None
    """train.py --sft-task-size; None = --task-size."""
    sft_full_share: float | None = None
    """train.py --sft-full-share; None = train.py's default 0."""
    sft_steps: int | None = None
    """train.py --sft-steps; None = train.py's default."""
    records: str | None = None
    """Where the selection runs' records (research/run.py's format) and the choice go as JSON; None = not written."""
    rule: str = "score"
    """score: the toy's (early AUC + final + held-out) / 3; final: PREREGISTRATION.md's lr*."""

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"rule: choose one of {', '.join(RULES)}, got {self.rule!r}")


def grid_at(cfg: SelectConfig, lr: float) -> ExperimentConfig:
    """research/run.py's grid with every method at this learning rate."""
    return ExperimentConfig(models=cfg.models, methods=cfg.methods, settings=cfg.settings,
                            seeds=cfg.seeds, iterations=cfg.iterations, eval_every=cfg.iterations,
                            prompts_per_iteration=cfg.prompts_per_iteration, eval_problems=cfg.eval_problems,
                            workers=cfg.workers,
                            out_dir=str(Path(cfg.out_dir) / f"lr{lr:g}"), lrs=[f"{m}={lr}" for m in cfg.methods],
                            task=cfg.task, task_size=cfg.task_size, sft_task_size=cfg.sft_task_size,
                            sft_full_share=cfg.sft_full_share, sft_steps=cfg.sft_steps)


def choose(records, methods, lr_grid) -> tuple[dict, str]:
    """({method: the learning rate of the highest mean score}, the score table in markdown)."""
    scores = mean_scores(records, lambda r: (r["method"], r["lr"]))
    lines = ["| method | " + " | ".join(f"lr {lr:g}" for lr in lr_grid) + " |", "|---|" + "---|" * len(lr_grid)]
    best = {}
    for method in methods:
        tried = [lr for lr in lr_grid if (method, lr) in scores]
        if tried:
            best[method] = max(tried, key=lambda lr: scores[(method, lr)][0])
        lines.append(f"| {method} | " + " | ".join(
            f"{scores[(method, lr)][0]:.3f} ± {scores[(method, lr)][1]:.3f}" if (method, lr) in scores else "-"
            for lr in lr_grid) + " |")
    return best, "\n".join(lines)


def collapsed(record) -> bool:
    curve = record["reward_curve"]
    return sum(curve[-FINAL_BATCHES:]) / FINAL_BATCHES < COLLAPSED_BELOW * curve[0] or record["skipped_steps"] > 0


def choose_final(records, methods, lr_grid) -> tuple[dict, str]:
    """PREREGISTRATION.md's lr*: ({method: lr}, the table): the highest mean final reward over the runs among
    the learning rates none of whose runs collapsed; within TIE of the best, the smallest such lr."""
    lines = ["| method | " + " | ".join(f"lr {lr:g}: final (collapsed)" for lr in lr_grid) + " |",
             "|---|" + "---|" * len(lr_grid)]
    best = {}
    for method in methods:
        runs = {lr: [r for r in records if (r["method"], r["lr"]) == (method, lr)] for lr in lr_grid}
        final = {lr: sum(sum(r["reward_curve"][-FINAL_BATCHES:]) / FINAL_BATCHES for r in rs) / len(rs)
                 for lr, rs in runs.items() if rs}
        eligible = [lr for lr in final if not any(collapsed(r) for r in runs[lr])]
        if eligible:
            top = max(final[lr] for lr in eligible)
            best[method] = min(lr for lr in eligible if final[lr] >= top - TIE)
        lines.append(f"| {method} | " + " | ".join(
            f"{final[lr]:.3f} ({sum(map(collapsed, runs[lr]))} of {len(runs[lr])})" if lr in final else "-"
            for lr in lr_grid) + " |")
    return best, "\n".join(lines)


def main(argv=None):
    cfg = parse_config(SelectConfig, argv)
    records = []
    for lr in cfg.lr_grid:
        experiment = grid_at(cfg, lr)
        run_grid(experiment)
        records += [record_of(run_dir(experiment, *cell), *cell) for cell in grid(experiment)
                    if finished(read_metrics(run_dir(experiment, *cell)), experiment.iterations)]
    best, table = (choose_final if cfg.rule == "final" else choose)(records, cfg.methods, cfg.lr_grid)
    print(table)
    print("\npython -m research.run --lrs " + " ".join(f"{m}={lr:g}" for m, lr in best.items()))
    if cfg.records:
        Path(cfg.records).parent.mkdir(parents=True, exist_ok=True)
        command = shlex.join(["python", "research/select_lr.py", *(sys.argv[1:] if argv is None else argv)])
        Path(cfg.records).write_text(json.dumps({"command": command, "rule": cfg.rule, "chosen": best, "table": table,
                                                 "runs": records}, indent=0) + "\n")


if __name__ == "__main__":
    main()
