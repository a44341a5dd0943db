"""The drift study (research/DRIFT.md): on digit_conflict, does drift put positives in the low-w tail, and does
losing them under the sequence clip cost learning? Every method at one learning rate, one-epoch reuse with a lag.

    NANO_RESPO_CACHE=runs/drift-cache-default python -m research.drift --stage all
    ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 NANO_RESPO_CACHE=runs/drift-cache-unvectorised \\
        python -m research.drift --stage all
    python -m research.drift --summarise          # every table, the checks, the verdicts and the figures
    python -m research.drift --stage evaluate --lr 0.0003 --only respo-seed0 --out runs/drift-rerun  # one record again

Each command runs on its process's CPU setting, in the order DRIFT.md fixes (gate 1, the lr stage, the dense cell
seed by seed, the MoE's gate 1 and cell, the longer cell, the respo_wtilt row, and the 2 x 2 fallback when the
manipulation check failed), one record per run under <out>/<setting>/<stage>/; a record that exists is kept, so
a stopped command resumes where it stopped. One stage alone: --stage gate1 | lr | evaluate | moe-gate1 | moe |
long | wtilt | evaluate-2x2. The rules and the tables are research/drift_rules.py's.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from research.common import AS_RECORDED, ROOT, provenance
from research.digit_runs import (GROUP, LR_GRID, MAX_NEW_TOKENS, PROMPTS, SELECTION_SEEDS, SFT_STEPS,
                                    SFT_TASK_SIZE, default_lr_records, gate1, load, lr_star, run_all, run_record)
from research.drift_rules import (DENSE_METHODS, DENSE_SEEDS, EXTRA_METHODS, LAG, LONG_BATCHES, LONG_METHODS,
                                     LONG_SEEDS, MOE_METHODS, MOE_SEEDS, READINGS, cell_runs, complete, manipulation,
                                     summarise)
from train import TrainConfig
from nano_respo.cli import from_flat
from nano_respo.kernel import LossConfig
from nano_respo.models import cache_dir
from research.cli import parse_config

SCRIPT = "research.drift"
STAGES = ("all", "gate1", "lr", "evaluate", "moe-gate1", "moe", "long", "wtilt", "evaluate-2x2")
SHARE = 0.04  # the warm start's share of whole-task draws: Study 3's gate 1 passed there on both settings
DENSE, MOE = "tiny-qwen3", "tiny-qwen3-moe"


@dataclass
class DriftConfig:
    """The drift study on this CPU setting (DRIFT.md), or the tables of every committed record."""

    stage: str = "all"
    """all (every stage in DRIFT.md's order), or one of gate1, lr, evaluate, moe-gate1, moe, long, wtilt, evaluate-2x2."""
    lr: float | None = None
    """lr* for the stages after lr; None = read it from the default setting's lr records (waiting for them)."""
    moe_seeds: int = len(MOE_SEEDS)
    """Seeds of the MoE cell (DRIFT.md's cut: 8 when the projection passes 5 hours)."""
    long_seeds: int = len(LONG_SEEDS)
    """Seeds of the longer cell (DRIFT.md's first cut: 8)."""
    out: str = "research/results/drift"
    """Where the records go: <out>/<setting>/<stage>/<run>.json."""
    summarise: bool = False
    """Only print every table and verdict from the records under --out, and draw the figure."""
    figures: str = "research/figures"
    """Where --summarise draws its figures (drift-curves.png, drift-evidence.png)."""
    only: str | None = None
    """Run only the record of this name in --stage (e.g. respo-seed0, with --lr): one recorded run again, into --out."""

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"stage: choose one of {', '.join(STAGES)}, got {self.stage!r}")
        if self.lr is not None and not self.lr > 0:
            raise ValueError(f"lr: must be > 0, got {self.lr}")
        if self.only is not None and (self.stage in ("all", "gate1", "moe-gate1") or self.lr is None):
            raise ValueError("only: name a run of one stage (--stage evaluate, lr, moe, long, wtilt or evaluate-2x2) "
                             "and give its --lr")
        if not 1 <= self.moe_seeds <= len(MOE_SEEDS) or not 1 <= self.long_seeds <= len(LONG_SEEDS):
            raise ValueError(f"moe_seeds, long_seeds: between 1 and {len(MOE_SEEDS)}")


def train_config(model: str, method: str, seed: int, lr: float, reuse: int = 4, epochs: int = 1, lag: int = LAG,
                 batches: int = LAG + 9) -> TrainConfig:
    """One run: Study 3's task, warm start and batch shape; the paper's reuse (one-epoch mini-batches) and
    aggregation (token-mean, the default)."""
    return from_flat(TrainConfig, dict(model=model, task="digit_conflict", sft_task_size=SFT_TASK_SIZE,
                                       sft_full_share=SHARE, sft_steps=SFT_STEPS, max_new_tokens=MAX_NEW_TOKENS,
                                       loss=LossConfig(method=method), reuse=reuse, epochs=epochs, lag=lag, lr=lr,
                                       seed=seed, iterations=batches, prompts_per_iteration=PROMPTS,
                                       group_size=GROUP, eval_problems=24, eval_samples=8, plots=False, **AS_RECORDED))


def anchor(model: str, seed: int, lr: float, batches: int = LAG + 9) -> tuple[str, TrainConfig]:
    """The seed's on-policy run (R = 1, lag 0), where every kernel's run is this one."""
    return f"anchor-seed{seed}", train_config(model, "seq_clip", seed, lr, reuse=1, lag=0, batches=batches)


def stage_runs(stage: str, lr: float, cfg: DriftConfig) -> list[tuple[str, TrainConfig]]:
    """The runs of one stage, seed by seed (a stopped stage still holds whole seeds)."""
    if stage == "lr":  # on-policy, where every kernel takes the same step: respo stands for all
        return [(f"respo-lr{x:g}-seed{s}", train_config(DENSE, "respo", s, x, reuse=1, lag=0))
                for x in LR_GRID for s in SELECTION_SEEDS]
    cells = {"evaluate": (DENSE, DENSE_METHODS, DENSE_SEEDS, 1, LAG + 9, True),
             "evaluate-2x2": (DENSE, DENSE_METHODS, DENSE_SEEDS, 2, LAG + 9, True),
             "wtilt": (DENSE, EXTRA_METHODS, DENSE_SEEDS, 1, LAG + 9, False),
             "moe": (MOE, MOE_METHODS, MOE_SEEDS[:cfg.moe_seeds], 1, LAG + 9, True),
             "long": (DENSE, LONG_METHODS, LONG_SEEDS[:cfg.long_seeds], 1, LONG_BATCHES, False)}
    model, methods, seeds, epochs, batches, anchors = cells[stage]
    runs = []
    for s in seeds:
        runs += [(f"{m}-seed{s}", train_config(model, m, s, lr, epochs=epochs, batches=batches)) for m in methods]
        if anchors and stage != "evaluate-2x2":  # the 2 x 2 cell shares the one-epoch cell's anchors: R = 1 alike
            runs.append(anchor(model, s, lr, batches))
    return runs


def folder(cfg: DriftConfig, stage: str) -> Path:
    """Where a stage's records go; the respo_wtilt row joins the dense cell it extends."""
    return ROOT / cfg.out / provenance(SCRIPT)["cpu_setting"] / ("evaluate" if stage == "wtilt" else stage)


@contextlib.contextmanager
def model_cache(stage: str):
    """The MoE's stages use a cache of their own beside the setting's, <NANO_RESPO_CACHE>-moe: its gate 1 trains its
    warm start from an empty cache, as the dense gate 1 did in the setting's cache, and its cell finds it there."""
    if not stage.startswith("moe"):
        yield
        return
    setting_cache = os.environ.get("NANO_RESPO_CACHE")
    os.environ["NANO_RESPO_CACHE"] = f"{cache_dir()}-moe"
    try:
        yield
    finally:
        if setting_cache is None:
            del os.environ["NANO_RESPO_CACHE"]
        else:
            os.environ["NANO_RESPO_CACHE"] = setting_cache


def run_stage(cfg: DriftConfig, stage: str, lr: float | None, argv) -> None:
    with model_cache(stage):
        run_stage_here(cfg, stage, lr, argv)


def run_stage_here(cfg: DriftConfig, stage: str, lr: float | None, argv) -> None:
    if stage in ("gate1", "moe-gate1"):
        path = folder(cfg, stage) / f"share{SHARE:g}.json"
        if not path.exists():
            gate1(train_config(DENSE if stage == "gate1" else MOE, "respo", 0, 1e-4, reuse=1, lag=0), SELECTION_SEEDS,
                  32, path, SCRIPT, argv, {**asdict(cfg), "stage": stage})
        return
    own = stage != "lr"  # each run's own coefficient, for its retained signal on its own runs
    runs = [(n, c) for n, c in stage_runs(stage, lr, cfg) if cfg.only in (None, n)]
    if not runs:
        raise SystemExit(f"only: {cfg.only!r} is no run of --stage {stage}")
    run_all(folder(cfg, stage), runs,
            lambda train_cfg: run_record(train_cfg, SCRIPT, argv, READINGS, own=own), f"{stage} ({folder(cfg, stage).parent.name})")


def decided_lr(cfg: DriftConfig) -> float:
    """lr*: given, or chosen by the rule on the default setting's lr records (waiting until all six exist)."""
    if cfg.lr:
        return cfg.lr
    lr, table = lr_star(default_lr_records(ROOT / cfg.out), "respo")
    print(f"{table}\nlr* = {lr:g} (the default setting's lr stage decides)", flush=True)
    return lr


def moe_passes(cfg: DriftConfig) -> bool:
    record = load(ROOT / cfg.out).get((provenance(SCRIPT)["cpu_setting"], "moe-gate1"), [])
    return bool(record) and record[0]["gate"] == "PASS"


def check_fails_somewhere(cfg: DriftConfig) -> bool | None:
    """Whether the one-epoch cell's manipulation check fails on a setting; None until both settings' cells exist."""
    records = load(ROOT / cfg.out)
    checks = []
    for setting in ("default", "unvectorised"):
        runs = cell_runs(records, setting, "evaluate")
        if not complete(runs, DENSE_METHODS, DENSE_SEEDS):
            return None
        checks.append(manipulation(list(runs["seq_clip"].values()))["passed"])
    return not all(checks)


def main(argv=None) -> None:
    cfg = parse_config(DriftConfig, argv, prog="python -m research.drift")
    if cfg.summarise:
        print(summarise(ROOT / cfg.out, ROOT / cfg.figures))
        return
    if cfg.stage != "all":
        run_stage(cfg, cfg.stage, None if cfg.stage in ("gate1", "moe-gate1", "lr") else decided_lr(cfg), argv)
        return
    run_stage(cfg, "gate1", None, argv)
    run_stage(cfg, "lr", None, argv)
    lr = decided_lr(cfg)
    run_stage(cfg, "evaluate", lr, argv)
    run_stage(cfg, "moe-gate1", None, argv)
    if moe_passes(cfg):
        run_stage(cfg, "moe", lr, argv)
    else:
        print("MoE gate 1 failed on this setting (its record says which bound): the MoE cell is not run", flush=True)
    run_stage(cfg, "long", lr, argv)
    run_stage(cfg, "wtilt", lr, argv)
    while (fails := check_fails_somewhere(cfg)) is None:
        print("waiting for the other setting's dense cell to decide on the fallback", flush=True)
        time.sleep(300)
    if fails:
        print("the manipulation check failed on a setting: DRIFT.md's fallback, the dense cell at 2 x 2", flush=True)
        run_stage(cfg, "evaluate-2x2", lr, argv)
    print("done: python -m research.drift --summarise", flush=True)


if __name__ == "__main__":
    main()
