"""The reuse study (research/REUSE.md): the paper's table at small scale. Drift from the reuse ratio N alone (one
epoch of N mini-batches, no lag, W against the recomputed pi_old: `--protocol paper`), N in {8, 16, 32} at 256
updates per run, the paper's four methods and two arms that split ReSPO's branches, on digit_conflict.

    NANO_RESPO_CACHE=runs/reuse-cache-default python -m research.reuse --stage all
    ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 NANO_RESPO_CACHE=runs/reuse-cache-unvectorised \\
        python -m research.reuse --stage all
    python -m research.reuse --summarise          # the check first, then the contrasts, verdicts, tables, figure
    python -m research.reuse --stage evaluate --lr 0.0001 --only respo-N8-seed0 --out runs/reuse-rerun  # one run

Each command runs on its process's CPU setting, in REUSE.md's order (the lr stage; every seed's grpo runs, which the
manipulation check reads; then the other methods seed-major), one record per run under <out>/<setting>/<stage>/; a
record that exists is kept, so a stopped command resumes where it stopped, and a stop leaves whole seeds. A run is
train.py's own loop in-process (train.train, read by research/responses.py): each record names its train.py command.
The rules and tables are research/reuse_rules.py's.
"""

from __future__ import annotations

import math
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from research.common import ROOT, provenance
from research.digit_runs import (LR_GRID, MAX_NEW_TOKENS, SELECTION_SEEDS, SFT_STEPS, SFT_TASK_SIZE,
                                 default_lr_records, warm_start_report)
from research.lab.records import write_record
from research.responses import read_run
from research.reuse_rules import METHODS, NS, SEEDS, SMALLEST_CUT, UPDATES, choose_lr, summarise
from nano_respo.summary import paper_summary
from research.cli import parse_config
from train import TrainConfig

SCRIPT = "research.reuse"
STAGES = ("all", "lr", "evaluate")
PROMPTS_PER_MINIBATCH = 4  # the paper's 32, scaled to the tiny model (REUSE.md, "Scaled down")
SHARE = 0.04  # the warm start's share of whole-task draws: the drift study's recipe


@dataclass
class ReuseConfig:
    """The reuse study on this CPU setting (REUSE.md), or the tables of every committed record."""

    stage: str = "all"
    """all (the lr stage, then the cell: grpo's runs first, then seed-major), or one of lr, evaluate."""
    lr: float | None = None
    """The cell's learning rate; None = chosen by REUSE.md's rule from the default setting's lr records (waiting)."""
    seeds: int = len(SEEDS)
    """Seeds of the cell, 0 .. seeds-1 (REUSE.md: 16; fewer is a declared cut); --summarise reads the cell there."""
    out: str = "research/results/reuse"
    """Where the records go: <out>/<setting>/<stage>/<run>.json."""
    summarise: bool = False
    """Only print the manipulation check, the contrasts, the verdicts and the tables from the records under --out."""
    figures: str = "research/figures"
    """Where --summarise draws its figure (reuse-evidence.png), once a setting's cell is whole."""
    only: str | None = None
    """Run only the record of this name in --stage (e.g. respo-N8-seed0, with --lr): one recorded run again."""

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"stage: choose one of {', '.join(STAGES)}, got {self.stage!r}")
        if self.lr is not None and not self.lr > 0:
            raise ValueError(f"lr: must be > 0, got {self.lr}")
        if not SMALLEST_CUT <= self.seeds <= len(SEEDS):
            raise ValueError(f"seeds: between {SMALLEST_CUT} (fewer, and the check could not pass) and {len(SEEDS)}, "
                             f"got {self.seeds}")
        if self.only is not None and (self.stage == "all" or (self.stage == "evaluate" and self.lr is None)):
            raise ValueError("only: name a run of one stage (--stage lr, or --stage evaluate with its --lr)")


def train_argv(method: str, n: int, seed: int, lr: float) -> list[str]:
    """train.py's flags for one run: the paper's protocol, the drift study's task and warm start, REUSE.md's scale."""
    return ["--protocol", "paper", "--model", "tiny-qwen3", "--task", "digit_conflict", "--method", method,
            "--reuse", str(n), "--epochs", "1", "--prompts-per-iteration", str(PROMPTS_PER_MINIBATCH * n),
            "--iterations", str(UPDATES // n), "--lr", f"{lr:g}", "--seed", str(seed),
            "--max-new-tokens", str(MAX_NEW_TOKENS), "--sft-steps", str(SFT_STEPS),
            "--sft-task-size", str(SFT_TASK_SIZE),
            "--sft-full-share", f"{SHARE:g}", "--sft-from-scratch", "--eval-problems", "24", "--eval-samples", "8",
            "--no-plots"]


def train_config(method: str, n: int, seed: int, lr: float) -> TrainConfig:
    return parse_config(TrainConfig, train_argv(method, n, seed, lr))


def stage_runs(stage: str, lr: float | None, seeds: int) -> list[tuple[str, list[str]]]:
    """(name, train.py flags) of a stage's runs in REUSE.md's order (amendment 1): every seed's grpo runs first,
    which the manipulation check reads, then the other methods seed-major, so a stop leaves whole seeds."""
    if stage == "lr":  # on-policy (N = 1), where every kernel takes the same step: respo stands for all
        return [(f"respo-lr{x:g}-seed{s}", train_argv("respo", 1, s, x)) for x in LR_GRID for s in SELECTION_SEEDS]
    order = [(s, n, "grpo") for s in SEEDS[:seeds] for n in NS]
    order += [(s, n, m) for s in SEEDS[:seeds] for n in NS for m in METHODS if m != "grpo"]
    return [(f"{m}-N{n}-seed{s}", train_argv(m, n, s, lr)) for s, n, m in order]


def host() -> dict:
    """The CPU this record was made on: the default setting's records reproduce only on a host of the same flags."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    lines = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    flags = set(lines.get("flags\t\t", "").split())
    return {"cpu": lines.get("model name\t", "").strip(), "avx512f": "avx512f" in flags, "avx2": "avx2" in flags}


def per_update(rows: dict[str, list]) -> dict[str, list[int]]:
    """Per optimizer step, over its positives: how many, how many with w < 0.8, how many with log W < -1."""
    steps = max(rows["step"], default=0)
    counts = {key: [0] * steps for key in ("positives", "below_0.8", "log_w_below_-1")}
    for step, advantage, log_w in zip(rows["step"], rows["advantage"], rows["log_w"]):
        if advantage > 0:
            counts["positives"][step - 1] += 1
            counts["below_0.8"][step - 1] += log_w < math.log(0.8)
            counts["log_w_below_-1"][step - 1] += log_w < -1.0
    return counts


def run_record(flags: list[str], argv) -> dict:
    """One run, read: its identity and host, the train.py command, the per-update score and diagnostics, the
    paper's summaries, the rollout counts per batch (the pairing check) and held-out pass@1 at the end."""
    cfg = parse_config(TrainConfig, flags)
    start = time.perf_counter()
    run = read_run(cfg)
    train = [r for r in run.records if r["kind"] == "train"]
    return {**provenance(SCRIPT, argv, empty_cache=False), "host": host(),
            "train_command": "python train.py " + shlex.join(flags), "method": cfg.loss.method, "n": cfg.reuse,
            "lr": cfg.lr, "seed": cfg.seed, "updates": len(train), "warm_start": warm_start_report(),
            "score": [r["reward"] for r in train], "skipped_steps": sum(r["skipped"] for r in train),
            "deep_low_w_pos_frac": [r.get("deep_low_w_pos_frac") for r in train],
            "deep_low_w_pos_phi_mass": [r.get("deep_low_w_pos_phi_mass") for r in train],
            **per_update(run.rows), "summary": paper_summary(run.records, UPDATES),
            "rollouts": run.rollouts, "heldout": run.heldout,
            "seconds": round(time.perf_counter() - start), "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}


def folder(cfg: ReuseConfig, stage: str) -> Path:
    return ROOT / cfg.out / provenance(SCRIPT)["cpu_setting"] / stage


def run_stage(cfg: ReuseConfig, stage: str, lr: float | None, argv) -> None:
    """Each run of the stage whose record is missing, in order: a killed process loses at most the run in flight."""
    runs = [(n, f) for n, f in stage_runs(stage, lr, cfg.seeds) if cfg.only in (None, n)]
    if not runs:
        raise SystemExit(f"only: {cfg.only!r} is no run of --stage {stage}")
    where = folder(cfg, stage)
    todo = [(n, f) for n, f in runs if cfg.only or not (where / f"{n}.json").exists()]
    print(f"{len(runs) - len(todo)} of {len(runs)} records of {stage} ({where.parent.name}) exist; running {len(todo)}",
          flush=True)
    torch.set_num_threads(1)
    for index, (name, flags) in enumerate(todo, 1):
        record = run_record(flags, argv)
        write_record(record, str(where / f"{name}.json"))
        s = record["summary"]
        print(f"[{index}/{len(todo)}] {name}: early {s['early']:.3f}, late {s['late']:.3f}, "
              f"held-out {record['heldout']['heldout_pass@1']:.3f}; {record['seconds']} s", flush=True)


def decided_lr(cfg: ReuseConfig) -> float:
    """The cell's lr: given, or chosen by REUSE.md's rule on the default setting's lr records (waiting for all)."""
    if cfg.lr:
        return cfg.lr
    lr, table = choose_lr(default_lr_records(ROOT / cfg.out))
    if lr is None:
        raise SystemExit(f"{table}\nno lr passes REUSE.md's rule (each collapsed a run): the study stops here")
    print(f"{table}\nthe cell's lr = {lr:g} (the default setting's lr stage decides)", flush=True)
    return lr


def main(argv=None) -> None:
    cfg = parse_config(ReuseConfig, argv, prog="python -m research.reuse")
    if cfg.summarise:
        print(summarise(ROOT / cfg.out, ROOT / cfg.figures, cfg.seeds))
        return
    if cfg.stage in ("all", "lr"):
        run_stage(cfg, "lr", None, argv)
    if cfg.stage in ("all", "evaluate"):
        run_stage(cfg, "evaluate", decided_lr(cfg), argv)
        print("done: python -m research.reuse --summarise", flush=True)


if __name__ == "__main__":
    main()
