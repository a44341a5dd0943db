"""The mechanism on a real transformer (experiments/MECHANISM.md): digit_conflict, its gates, then the decision.

    NANO_RESPO_CACHE=<new empty dir> python experiments/conflict.py --stage gate1 --sft-full-share 0.02
    NANO_RESPO_CACHE=<that dir> python experiments/conflict.py --stage lr --sft-full-share 0.02
    NANO_RESPO_CACHE=<that dir> python experiments/conflict.py --stage gate-a --sft-full-share 0.02 --lr 3e-4
    NANO_RESPO_CACHE=<that dir> python experiments/conflict.py --stage evaluate --sft-full-share 0.02 --lr 3e-4
    python experiments/conflict.py --summarise            # every table, the verdicts and the figures

Each stage runs on this process's CPU setting (the default kernels, or ATEN_CPU_CAPABILITY=default
MKL_ENABLE_INSTRUCTIONS=SSE4_2 in front of the command) and writes one record per run to
<out>/<setting>/<stage>/; a record that exists is kept unless --overwrite. gate1 trains the warm start into an
empty cache (`--sft-task-size 11 --sft-full-share q`: random `sum` decompositions, a share q of draws from the
whole task) and samples every target; the other stages start every run from that cached warm start. A run is
train.py's loop in-process (experiments/responses.py), read step by step: its record keeps the rollout counts
per family and target, the held-out `ones` pass@1 at the end, and, pooled over the steps of batches 1 on (each
on-policy step left out), per family and response length the sums from which the gates' statistics, what each
tail loses and every method's retained signal are read (conflict_report.py).
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field

import torch

from experiments.common import AS_RECORDED, ROOT, provenance, warm_start_here
from experiments.responses import read_run
from nano_respo.config import TrainConfig
from nano_respo.evaluation import pass_at_k
from nano_respo.kernel import METHOD_TABLE, LossConfig
from nano_respo.lab.records import write_record
from nano_respo.models import cache_dir
from nano_respo.rollout import sample, score
from nano_respo.run.cli import parse_config
from nano_respo.run.session import build_task
from nano_respo.tasks import (CONFLICT_ONES_HELDOUT, CONFLICT_SIZES, CONFLICT_SUM_TARGETS, conflict_ones_targets,
                              conflict_prompt, hash_seed)

STAGES = ("gate1", "lr", "gate-a", "evaluate")
# The study's fixed design (experiments/MECHANISM.md).
MODEL, SFT_TASK_SIZE, SFT_STEPS, MAX_NEW_TOKENS = "tiny-qwen3", 11, 1000, 32
PROMPTS, GROUP, EARLY_BATCHES, LAG = 32, 8, 8, 4  # LAG: the evaluation cell's, unless gate A moves it
ONES_LONG_FROM = 20  # gate 1 reads the trained `ones` targets from here up
SELECTION_SEEDS, EVALUATION_SEEDS, ON_POLICY_CHECK_SEEDS = (900, 901), tuple(range(12)), (0, 1)
METHODS = ("seq_clip", "seq_clip_lowpos1", "respo", "respo_pos_clip_neg")
LR_GRID = (1e-4, 3e-4, 1e-3)
# Coefficients read on every run's positives (each a function of log w and the sign of A): the four methods, and
# plain IS, which is what the sequence clip gives positives without its upper clip (the high tail's price).
READ_METHODS = (*METHODS, "is")
LOW, HIGH = math.log(0.8), math.log(1.2)


@dataclass
class ConflictConfig:
    """One stage of the digit_conflict study on this CPU setting, or the tables of every committed record."""

    stage: str = "gate1"
    """gate1 (warm start from an empty cache, every target sampled), lr (lr*, on-policy), gate-a (the manipulation
    check and its control), evaluate (the decision's runs)."""
    sft_full_share: float = 0.02
    """train.py --sft-full-share: the share of warm-start draws from the whole task (gate 1's rung)."""
    lr: float | None = None
    """lr* (gate-a, evaluate), from the lr stage."""
    lag: int = LAG
    """The evaluation cell's lag (gate-a, evaluate); gate A's fallback is 8."""
    seeds: list[int] | None = None
    """Seeds of the stage; None = the selection seeds (gate1, lr, gate-a) or the evaluation seeds (evaluate)."""
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    """evaluate: the methods at R = 4 (each seed also runs one on-policy anchor)."""
    samples: int = 32
    """gate1: completions per target and seed, at temperature 1."""
    out: str = "experiments/results/conflict"
    """Where the records go: <out>/<setting>/<stage>/<run>.json."""
    overwrite: bool = False
    """Run again and replace a record that exists."""
    summarise: bool = False
    """Only print every table and verdict from the records under --out, and draw the figures."""
    figures: str = "experiments/figures"
    """Where --summarise draws the learning curves per family (conflict-gate-a-curves.png, conflict-curves.png)."""

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"stage: choose one of {', '.join(STAGES)}, got {self.stage!r}")
        if self.stage in ("gate-a", "evaluate") and not self.summarise and not (self.lr and self.lr > 0):
            raise ValueError("lr: pass lr* (> 0) from the lr stage")
        if self.lag < 1:
            raise ValueError(f"lag: the evaluation cell is stale, >= 1, got {self.lag}")
        unknown = [m for m in self.methods if m not in METHOD_TABLE]
        if unknown:
            raise ValueError(f"methods: unknown {', '.join(unknown)}")
        if self.seeds is None:
            self.seeds = list(EVALUATION_SEEDS if self.stage == "evaluate" else SELECTION_SEEDS)


def train_config(cfg: ConflictConfig, method: str, reuse: int, lag: int, seed: int, lr: float,
                 sampler_dtype: str = "float32") -> TrainConfig:
    """One run of the study: the lag's batches, then EARLY_BATCHES whose sampler has moved."""
    return TrainConfig(model=MODEL, task="digit_conflict", sft_task_size=SFT_TASK_SIZE,
                       sft_full_share=cfg.sft_full_share, sft_steps=SFT_STEPS, max_new_tokens=MAX_NEW_TOKENS,
                       loss=LossConfig(method=method), reuse=reuse, epochs=min(2, reuse), lag=lag,
                       sampler_dtype=sampler_dtype, lr=lr, seed=seed, iterations=cfg.lag + 1 + EARLY_BATCHES,
                       prompts_per_iteration=PROMPTS, group_size=GROUP, eval_problems=24, eval_samples=8, plots=False,
                       **AS_RECORDED)


# --- what a run's steps keep ---------------------------------------------------------------------

def read_rows(rows: dict[str, list], on_policy_first_step: bool) -> dict[str, dict[str, float]]:
    """Sums per "family length" over the positives of every step of batches 1 on (a batch's first step left out
    when it is on-policy): count, advantage, the low and high tails (count, 1 - w), per-token drift log w / |y|,
    and each READ_METHODS coefficient times the advantage."""
    first = {}
    for iteration, step in zip(rows["iteration"], rows["step"]):
        first.setdefault(iteration, step)
    keep = [i for i, (it, st) in enumerate(zip(rows["iteration"], rows["step"]))
            if it >= 1 and rows["advantage"][i] > 0 and rows["length"][i] > 0
            and not (on_policy_first_step and st == first[it])]
    cells = defaultdict(lambda: defaultdict(float))
    if not keep:
        return {}
    log_w = torch.tensor([rows["log_w"][i] for i in keep], dtype=torch.float64)
    adv = torch.tensor([rows["advantage"][i] for i in keep], dtype=torch.float64)
    phi = {m: coefficient(m, log_w) * adv for m in READ_METHODS}
    for j, i in enumerate(keep):
        cell = cells[f"{rows['family'][i]} {rows['length'][i]}"]
        w = math.exp(rows["log_w"][i])
        cell["n"] += 1
        cell["adv"] += adv[j].item()
        cell["low"] += w < 0.8
        cell["lost_low"] += (1 - w) * (w < 0.8)
        cell["high"] += w > 1.2
        cell["drift"] += rows["log_w"][i] / rows["length"][i]
        for m in READ_METHODS:
            cell[f"phi_adv_{m}"] += phi[m][j].item()
    return {name: dict(cell) for name, cell in sorted(cells.items())}


def coefficient(method: str, log_w: torch.Tensor) -> torch.Tensor:
    """method's coefficient on positives of these log-weights (every READ_METHODS row is a sequence-level one)."""
    _, compute, eps, _ = METHOD_TABLE[method]
    return compute(log_w, torch.ones_like(log_w, dtype=torch.bool), LossConfig(method=method), eps)


def warm_start_report() -> list[dict]:
    """The cached warm start's own report (warm_start.json): what every run of this setting starts from."""
    reports = [json.loads(p.read_text()) for p in sorted((cache_dir() / "sft").glob("*digit_conflict*/warm_start.json"))]
    return [{"named_as": r["named_as"], **r["report"], "cpu": r["key"]["cpu"]} for r in reports]


def run_record(train_cfg: TrainConfig, argv) -> dict:
    """One run, read: its identity, rollout counts, the held-out `ones` pass@1 at the end and the step sums."""
    start = time.perf_counter()
    run = read_run(train_cfg, heldout=True)
    on_policy = train_cfg.lag == 0 and train_cfg.sampler_dtype == "float32"
    return {**provenance("experiments/conflict.py", argv, empty_cache=False),
            "method": train_cfg.loss.method, "reuse": train_cfg.reuse, "lag": train_cfg.lag,
            "sampler_dtype": train_cfg.sampler_dtype, "lr": train_cfg.lr, "seed": train_cfg.seed,
            "iterations": train_cfg.iterations, "warm_start": warm_start_report(),
            "reward_curve": [r["reward"] for r in run.records if (r["epoch"], r["minibatch"]) == (0, 0)],
            "skipped_steps": sum(r["skipped"] for r in run.records), "rollouts": run.rollouts,
            "heldout": run.heldout, "cells": read_rows(run.rows, on_policy),
            "seconds": round(time.perf_counter() - start), "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}


def run_name(train_cfg: TrainConfig, anchor: bool = False) -> str:
    method = "anchor" if anchor else train_cfg.loss.method
    dtype = "" if train_cfg.sampler_dtype == "float32" else f"-{train_cfg.sampler_dtype}"
    lag = f"-lag{train_cfg.lag}" if train_cfg.lag else ""
    # A lag implies its run's length; an unlagged run (a control, an anchor) of the fallback's length is named so.
    batches = "" if train_cfg.iterations == (train_cfg.lag or LAG) + 1 + EARLY_BATCHES else f"-{train_cfg.iterations}batches"
    return f"{method}-lr{train_cfg.lr:g}-reuse{train_cfg.reuse}{lag}{dtype}{batches}-seed{train_cfg.seed}"


def run_all(cfg: ConflictConfig, runs: list[tuple[str, TrainConfig]], argv) -> None:
    setting = provenance("experiments/conflict.py")["cpu_setting"]
    folder = ROOT / cfg.out / setting / cfg.stage
    todo = [(n, c) for n, c in runs if cfg.overwrite or not (folder / f"{n}.json").exists()]
    print(f"{len(runs) - len(todo)} of {len(runs)} records of {cfg.stage} ({setting}) exist; running {len(todo)}",
          flush=True)
    for index, (name, train_cfg) in enumerate(todo, 1):
        record = run_record(train_cfg, argv)
        write_record(record, str(folder / f"{name}.json"))
        ones = early(record, "ones")
        print(f"[{index}/{len(todo)}] {name}: early pass@1 ones {ones:.3f}, sum {early(record, 'sum'):.3f}, "
              f"held-out {record['heldout']['heldout_pass@1']:.3f}; {record['seconds']} s", flush=True)


def early(record: dict, family: str) -> float:
    """Per-sample success of `family` over the EARLY_BATCHES rollout batches after the lag (the statistic)."""
    first = record["iterations"] - EARLY_BATCHES
    cells = [c for counts in record["rollouts"][first:] for key, c in counts.items() if key.startswith(family + " ")]
    return sum(c for c, _ in cells) / sum(n for _, n in cells)


# --- the stages -------------------------------------------------------------------------------------

def gate1(cfg: ConflictConfig, argv) -> dict:
    """The warm start from an empty cache, then every target of both families sampled on each selection seed."""
    train_cfg = train_config(cfg, "respo", 1, 0, 0, 1e-4)
    task = build_task(train_cfg)
    start = time.perf_counter()
    torch.set_num_threads(1)
    model, tokenizer, warm = warm_start_here(train_cfg, task)
    model.eval()
    targets = [("sum", t) for t in CONFLICT_SUM_TARGETS] + [("ones", t) for t in range(12, CONFLICT_SIZES[0] + 1)]
    per_target = {}
    for family, target in targets:
        reference = "3" + "1" * (target - 3) if family == "sum" else "1" * target  # the verifier reads its family
        correct = []
        for seed in cfg.seeds:
            with torch.random.fork_rng():
                torch.manual_seed(hash_seed("gate1", seed, family, target))
                texts = sample(model, tokenizer, [conflict_prompt(family, target)] * cfg.samples, MAX_NEW_TOKENS,
                               1.0).texts
            correct.append(int(score(task.reward, texts, [reference] * cfg.samples)[0].sum().item()))
        per_target[f"{family} {target}"] = {
            "split": "held-out" if family == "ones" and target in CONFLICT_ONES_HELDOUT else "trained",
            "success_per_seed": [c / cfg.samples for c in correct],
            "pass@8_per_seed": [pass_at_k(cfg.samples, c, 8) for c in correct]}
    long = [f"ones {t}" for t in conflict_ones_targets(CONFLICT_SIZES[0]) if t >= ONES_LONG_FROM]
    success = sum(sum(per_target[k]["success_per_seed"]) for k in long) / (len(long) * len(cfg.seeds))
    pass8 = sum(sum(per_target[k]["pass@8_per_seed"]) for k in long) / (len(long) * len(cfg.seeds))
    outcome = "PASS" if 0.01 <= success <= 0.15 and pass8 >= 0.25 else "FAIL high" if success > 0.15 else "FAIL low"
    record = {**provenance("experiments/conflict.py", argv), "config": asdict(cfg), "warm_start": warm,
              "long_targets": long, "success_long": success, "pass@8_long": pass8, "gate": outcome,
              "per_target": per_target, "seconds": round(time.perf_counter() - start),
              "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    setting = record["cpu_setting"]
    write_record(record, str(ROOT / cfg.out / setting / "gate1" / f"share{cfg.sft_full_share:g}.json"))
    print(f"gate 1 {outcome} ({setting}, share {cfg.sft_full_share:g}): success on ones t >= {ONES_LONG_FROM} "
          f"{success:.3f} (needs 0.01 to 0.15), pass@8 {pass8:.3f} (needs >= 0.25)")
    return record


def stage_runs(cfg: ConflictConfig) -> list[tuple[str, TrainConfig]]:
    """The runs of the stage, in seed-major order (a stopped evaluation still holds whole seeds)."""
    if cfg.stage == "lr":  # on-policy, where every kernel takes the same step: respo stands for all
        return [(run_name(c), c) for lr in LR_GRID for s in cfg.seeds
                for c in [train_config(cfg, "respo", 1, 0, s, lr)]]
    if cfg.stage == "gate-a":  # the cell under the sequence clip, and its control: the bf16 sampler's spread alone
        return [(run_name(c), c) for s in cfg.seeds for c in
                (train_config(cfg, "seq_clip", 4, cfg.lag, s, cfg.lr),
                 train_config(cfg, "seq_clip", 1, 0, s, cfg.lr, sampler_dtype="bfloat16"))]
    runs = []
    for s in cfg.seeds:
        runs += [(run_name(c), c) for m in cfg.methods for c in [train_config(cfg, m, 4, cfg.lag, s, cfg.lr)]]
        anchor = train_config(cfg, METHODS[0], 1, 0, s, cfg.lr)  # on-policy: one run stands for every method
        runs.append((run_name(anchor, anchor=True), anchor))
        if s in ON_POLICY_CHECK_SEEDS:  # how far float noise alone moves runs whose kernels agree
            runs += [(run_name(c), c) for m in cfg.methods[1:] for c in [train_config(cfg, m, 1, 0, s, cfg.lr)]]
    return runs


def main(argv=None) -> None:
    cfg = parse_config(ConflictConfig, argv, prog="python experiments/conflict.py")
    if cfg.summarise:
        from experiments.conflict_report import summarise
        print(summarise(ROOT / cfg.out, ROOT / cfg.figures))
        return
    if cfg.stage == "gate1":
        gate1(cfg, argv)
    else:
        run_all(cfg, stage_runs(cfg), argv)


if __name__ == "__main__":
    main()
