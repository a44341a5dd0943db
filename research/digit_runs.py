"""What the digit_conflict studies share: one run read step by step into per-length sums, the statistics read off
those sums, and the learning-curve figure. Imported by research/conflict.py, conflict_report.py (Study 3,
research/MECHANISM.md) and drift.py (research/DRIFT.md); it imports none of them.

A run is train.py's own loop in-process (train.train, read by research/responses.py). Its record keeps the
rollout counts per family and target, the held-out `ones` pass@1 at the end, and, over the positives of every
optimizer step of batches 1 on (a batch's first step left out when it is on-policy), per family and response
length ("sum 5", "ones 14") the sums from which the shares, the tails, the lengths and every coefficient's
retained signal are read.
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from pathlib import Path

import torch

from research.common import provenance, task_of, warm_start_here
from research.responses import read_run
from research.select_lr import choose_final
from nano_respo.evaluation import pass_at_k
from nano_respo.kernel import METHOD_TABLE, LossConfig
from research.lab.records import write_record
from nano_respo.models import cache_dir
from nano_respo.rollout import sample, score
from nano_respo.tasks import hash_seed
from train import TrainConfig
from research.study_tasks import CONFLICT_ONES_HELDOUT, CONFLICT_SIZES, CONFLICT_SUM_TARGETS, conflict_ones_targets, conflict_prompt

# The task, the warm start's recipe and the runs' shape, fixed by Study 3 (research/MECHANISM.md) and kept.
MODEL, SFT_TASK_SIZE, SFT_STEPS, MAX_NEW_TOKENS = "tiny-qwen3", 11, 1000, 32
PROMPTS, GROUP = 32, 8
EARLY_BATCHES = 8  # the batches after the lag: their sampler has moved
ONES_LONG_FROM = 20  # gate 1 reads the trained `ones` targets from here up
SELECTION_SEEDS = (900, 901)
LR_GRID = (1e-4, 3e-4, 1e-3)
SETTINGS = ("default", "unvectorised")
LENGTH_BINS = ((2, 6), (7, 12), (13, 20), (21, 32))  # response tokens, the EOS included
FAMILIES = ("sum", "ones")
# A reading that is not a kernel row: on positives a "<kernel>_pos_clip_neg" ablation is that kernel's phi_+.
POSITIVE_BRANCH_OF = {"respo_wtilt_pos_clip_neg": "respo_wtilt"}


# --- one run, read ---------------------------------------------------------------------------------

def coefficient(method: str, log_w: torch.Tensor) -> torch.Tensor:
    """A sequence-level method's coefficient on positives of these log-weights."""
    method = POSITIVE_BRANCH_OF.get(method, method)
    _, compute, eps, _ = METHOD_TABLE[method]
    return compute(log_w, torch.ones_like(log_w, dtype=torch.bool), LossConfig(method=method), eps)


def read_rows(rows: dict[str, list], on_policy_first_step: bool, readings: tuple[str, ...],
              own: bool = False) -> dict[str, dict[str, float]]:
    """Sums per "family length" over the positives of every step of batches 1 on (a batch's first step left out
    when it is on-policy): count, advantage, the low and high tails (count, 1 - w), the paper's tail log w < -1,
    per-token drift log w / |y|,
    each reading's coefficient times the advantage, and with `own` the run's own coefficient times it."""
    first = {}
    for iteration, step in zip(rows["iteration"], rows["step"]):
        first.setdefault(iteration, step)
    keep = [i for i, (it, st) in enumerate(zip(rows["iteration"], rows["step"]))
            if it >= 1 and rows["advantage"][i] > 0 and rows["length"][i] > 0
            and not (on_policy_first_step and st == first[it])]
    if not keep:
        return {}
    cells = defaultdict(lambda: defaultdict(float))
    log_w = torch.tensor([rows["log_w"][i] for i in keep], dtype=torch.float64)
    adv = torch.tensor([rows["advantage"][i] for i in keep], dtype=torch.float64)
    phi = {m: coefficient(m, log_w) * adv for m in readings}
    for j, i in enumerate(keep):
        cell = cells[f"{rows['family'][i]} {rows['length'][i]}"]
        w = math.exp(rows["log_w"][i])
        cell["n"] += 1
        cell["adv"] += adv[j].item()
        cell["low"] += w < 0.8
        cell["lost_low"] += (1 - w) * (w < 0.8)
        cell["high"] += w > 1.2
        cell["deep"] += rows["log_w"][i] < -1.0  # the paper's low tail, log w < -1
        cell["drift"] += rows["log_w"][i] / rows["length"][i]
        for m in readings:
            cell[f"phi_adv_{m}"] += phi[m][j].item()
        if own:
            cell["phi_adv_own"] += rows["phi"][i] * adv[j].item()
    return {name: dict(cell) for name, cell in sorted(cells.items())}


def warm_start_report() -> list[dict]:
    """The cached warm starts' own reports (warm_start.json): what every run of this cache starts from."""
    reports = [json.loads(p.read_text()) for p in sorted((cache_dir() / "sft").glob("*digit_conflict*/warm_start.json"))]
    return [{"named_as": r["named_as"], **r["report"], "cpu": r["key"]["cpu"]} for r in reports]


def run_record(train_cfg: TrainConfig, script: str, argv, readings: tuple[str, ...], own: bool = False) -> dict:
    """One run, read: its identity, rollout counts, the held-out `ones` pass@1 at the end and the step sums."""
    start = time.perf_counter()
    run = read_run(train_cfg, own_phi=own)
    on_policy = train_cfg.lag == 0 and train_cfg.sampler_dtype == "float32"
    return {**provenance(script, argv, empty_cache=False),
            "method": train_cfg.loss.method, "model": train_cfg.model, "reuse": train_cfg.reuse,
            "epochs": train_cfg.epochs, "agg": train_cfg.loss.agg, "lag": train_cfg.lag,
            "sampler_dtype": train_cfg.sampler_dtype, "lr": train_cfg.lr, "seed": train_cfg.seed,
            "iterations": train_cfg.iterations, "warm_start": warm_start_report(),
            "reward_curve": [r["reward"] for r in run.records if (r["epoch"], r["minibatch"]) == (0, 0)],
            "skipped_steps": sum(r["skipped"] for r in run.records), "rollouts": run.rollouts,
            "heldout": run.heldout, "cells": read_rows(run.rows, on_policy, readings, own),
            "seconds": round(time.perf_counter() - start), "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}


def run_all(folder: Path, runs: list[tuple[str, TrainConfig]], make_record, label: str, overwrite: bool = False) -> None:
    """Each run whose record is missing (all with overwrite), in order, one record each: a killed process loses
    at most the run in flight. make_record(train_cfg) -> record."""
    todo = [(n, c) for n, c in runs if overwrite or not (folder / f"{n}.json").exists()]
    print(f"{len(runs) - len(todo)} of {len(runs)} records of {label} exist; running {len(todo)}", flush=True)
    for index, (name, train_cfg) in enumerate(todo, 1):
        record = make_record(train_cfg)
        write_record(record, str(folder / f"{name}.json"))
        print(f"[{index}/{len(todo)}] {name}: early pass@1 {early(record):.3f} (ones {early(record, 'ones'):.3f}), "
              f"held-out ones {record['heldout']['heldout_pass@1']:.3f}; {record['seconds']} s", flush=True)


# --- gate 1 and lr*: the start has something to find; the step size, on-policy --------------------------

def gate1(train_cfg: TrainConfig, seeds, samples: int, out: Path, script: str, argv, config: dict) -> dict:
    """The warm start (trained into the cache when missing), then `samples` completions at temperature 1 of every
    target of both families on each seed; PASS when the trained `ones` targets t >= ONES_LONG_FROM have a mean
    per-sample success in [1%, 15%] and a mean pass@8 of at least 25%. One record, at `out`."""
    task = task_of(train_cfg)
    start = time.perf_counter()
    torch.set_num_threads(1)
    model, tokenizer, warm = warm_start_here(train_cfg, task)
    model.eval()
    targets = [("sum", t) for t in CONFLICT_SUM_TARGETS] + [("ones", t) for t in range(12, CONFLICT_SIZES[0] + 1)]
    per_target = {}
    for family, target in targets:
        reference = "3" + "1" * (target - 3) if family == "sum" else "1" * target  # the verifier reads its family
        correct = []
        for seed in seeds:
            with torch.random.fork_rng():
                torch.manual_seed(hash_seed("gate1", seed, family, target))
                texts = sample(model, tokenizer, [conflict_prompt(family, target)] * samples, train_cfg.max_new_tokens,
                               1.0).texts
            correct.append(int(score(task.reward, texts, [reference] * samples)[0].sum().item()))
        per_target[f"{family} {target}"] = {
            "split": "held-out" if family == "ones" and target in CONFLICT_ONES_HELDOUT else "trained",
            "success_per_seed": [c / samples for c in correct],
            "pass@8_per_seed": [pass_at_k(samples, c, 8) for c in correct]}
    long = [f"ones {t}" for t in conflict_ones_targets(CONFLICT_SIZES[0]) if t >= ONES_LONG_FROM]
    success = sum(sum(per_target[k]["success_per_seed"]) for k in long) / (len(long) * len(seeds))
    pass8 = sum(sum(per_target[k]["pass@8_per_seed"]) for k in long) / (len(long) * len(seeds))
    outcome = "PASS" if 0.01 <= success <= 0.15 and pass8 >= 0.25 else "FAIL high" if success > 0.15 else "FAIL low"
    record = {**provenance(script, argv), "config": config, "warm_start": warm, "long_targets": long,
              "success_long": success, "pass@8_long": pass8, "gate": outcome, "per_target": per_target,
              "seconds": round(time.perf_counter() - start), "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    write_record(record, str(out))
    print(f"gate 1 {outcome} ({record['cpu_setting']}, {train_cfg.model}, share {train_cfg.sft.full_share:g}): "
          f"success on ones t >= {ONES_LONG_FROM} {success:.3f} (needs 0.01 to 0.15), pass@8 {pass8:.3f} (needs >= 0.25)")
    return record


def lr_star(lr_records: list[dict], method: str) -> tuple[float | None, str]:
    """lr* by select_lr.choose_final on on-policy runs (every kernel the same step there): (lr* or None, table)."""
    if not lr_records:
        return None, "no lr runs"
    runs = [{**r, "method": method} for r in lr_records]
    best, table = choose_final(runs, [method], sorted({r["lr"] for r in runs}))
    return best.get(method), table


# --- what the records give ---------------------------------------------------------------------------

def batch_success(record: dict, batches: slice, family: str | None = None) -> float:
    """Per-sample success of `family` (None: every prompt) over the rollout batches `batches`."""
    cells = [c for counts in record["rollouts"][batches] for key, c in counts.items()
             if family is None or key.startswith(family + " ")]
    return sum(c for c, _ in cells) / sum(n for _, n in cells)


def early(record: dict, family: str | None = None) -> float:
    """Per-sample success over the EARLY_BATCHES rollout batches after the lag (the last EARLY_BATCHES of a run
    of lag + 1 + EARLY_BATCHES batches)."""
    return batch_success(record, slice(record["iterations"] - EARLY_BATCHES, None), family)


def family_sums(record: dict, family: str | None, bins=None) -> dict[str, float]:
    """The step sums of one family's positives (None: both families; all lengths, or those in `bins`)."""
    total = defaultdict(float)
    for name, cell in record["cells"].items():
        fam, length = name.split()
        if (family is None or fam == family) and (bins is None or bins[0] <= int(length) <= bins[1]):
            for key, value in cell.items():
                total[key] += value
    return dict(total)


def tails(records: list[dict], family: str | None) -> dict[str, float]:
    """Pooled over runs: mean per-token drift, share below 0.8, what the clip takes from each tail (per positive)."""
    total = defaultdict(float)
    for r in records:
        for key, value in family_sums(r, family).items():
            total[key] += value
    n = total.get("n", 0)
    if not n:
        return {"n": 0, "drift": math.nan, "low_share": math.nan, "lost_low": math.nan, "lost_high": math.nan}
    return {"n": int(n), "drift": total["drift"] / n, "low_share": total["low"] / n,
            "lost_low": total["lost_low"] / n, "lost_high": total["high"] / n}


def retained(records: list[dict], method: str, bins) -> float:
    """R_m = sum over positives of phi_m A / sum of A in a length bin, both families, pooled over runs
    (method "own": each run's own coefficient)."""
    num = den = 0.0
    for r in records:
        s = family_sums(r, None, bins)
        num, den = num + s.get(f"phi_adv_{method}", 0.0), den + s.get("adv", 0.0)
    return num / den if den else math.nan


def positives_in(records: list[dict], bins) -> float:
    return sum(family_sums(r, None, bins).get("n", 0) for r in records)


def family_curve(record: dict, family: str) -> list[float]:
    """Per-sample success of `family` in each rollout batch of one run."""
    return [sum(c for k, (c, n) in counts.items() if k.startswith(family + " "))
            / max(1, sum(n for k, (c, n) in counts.items() if k.startswith(family + " "))) for counts in record["rollouts"]]


def curves(arms: dict[str, dict[str, list[dict]]], title: str, band: str, path: Path) -> None:
    """Per setting (columns) and family (rows): each arm's success per rollout batch, its mean over the runs and a
    band (band = "95%": the t interval over seeds; "range": min to max)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from research.lab.report import mean_ci

    fig, axes = plt.subplots(2, len(SETTINGS), figsize=(6 * len(SETTINGS), 7), squeeze=False, sharex=True)
    for col, setting in enumerate(SETTINGS):
        for row, family in enumerate(("ones", "sum")):
            ax = axes[row][col]
            for label, runs in arms.get(setting, {}).items():
                if not runs:
                    continue
                per_batch = list(zip(*[family_curve(r, family) for r in runs]))
                means = [sum(b) / len(b) for b in per_batch]
                if band == "95%":
                    halves = [0 if math.isnan(h) else h for _, h in map(mean_ci, per_batch)]
                    low, high = [m - h for m, h in zip(means, halves)], [m + h for m, h in zip(means, halves)]
                else:
                    low, high = [min(b) for b in per_batch], [max(b) for b in per_batch]
                line, = ax.plot(range(len(means)), means, label=f"{label} ({len(runs)} runs)")
                ax.fill_between(range(len(means)), low, high, alpha=0.15, color=line.get_color())
            ax.set_title(f"{setting}: {family} prompts", fontsize=10)
            ax.set_ylabel("per-sample success")
        axes[1][col].set_xlabel("rollout batch")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def load(out: Path) -> dict[tuple[str, str], list[dict]]:
    """{(setting, stage): records} under out/<setting>/<stage>/, each record with its file name."""
    found = defaultdict(list)
    for path in sorted(out.glob("*/*/*.json")):
        found[(path.parts[-3], path.parts[-2])].append({**json.loads(path.read_text()), "file": path.stem})
    return found


def default_lr_records(out: Path) -> list[dict]:
    """The default setting's lr-stage records under out, once all LR_GRID x SELECTION_SEEDS exist: a study's
    other setting waits here for the process that runs them, since that setting's lr decides both."""
    while True:
        runs = load(out).get(("default", "lr"), [])
        if len(runs) == len(LR_GRID) * len(SELECTION_SEEDS):
            return runs
        print(f"waiting for the default setting's lr stage ({len(runs)} of {len(LR_GRID) * len(SELECTION_SEEDS)} "
              f"records)", flush=True)
        time.sleep(60)

