"""A shorter warm start (issue 23, item 3): does RL start in today's band when the warm start anneals for fewer steps?

    NANO_RESPO_CACHE=$(mktemp -d) python -m research.warm_start_stop --sft-seed 0 \
        --out research/results/warm-start-stop/default-tiny-qwen3-seed0-budget.json
    NANO_RESPO_CACHE=$(mktemp -d) python -m research.warm_start_stop --sft-seed 0 --sft-anneal converged \
        --out research/results/warm-start-stop/default-tiny-qwen3-seed0-converged.json
    NANO_RESPO_CACHE=$(mktemp -d) python -m research.warm_start_stop --sft-seed 3 --sft-anneal converged-half \
        --out research/results/warm-start-stop/default-tiny-qwen3-seed3-converged-half.json
    ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 NANO_RESPO_CACHE=$(mktemp -d) python ...
    python -m research.warm_start_stop --summarise research/results/warm-start-stop --candidate converged-half

Trains train.py's warm start from an empty cache (its defaults: tiny-qwen3, `reverse`; --sft-anneal budget
is today's cosine over a quarter of --sft-steps), then evaluates the held-out split exactly as a
run's first `eval` line does: the start of RL. The record holds the command, the CPU setting, the warm
start's report (converged_at, steps, seconds) and the held-out figures. --summarise prints the table of
a folder's records and the verdict of the rule pre-registered in research/WARMSTART.md. No RL step runs.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path


import torch

from research.common import AS_RECORDED, provenance, require_empty_cache, task_of, warm_start_here
from research.lab.records import write_record
from research.cli import parse_config
from train import TrainConfig, evaluate_heldout
from nano_respo.cli import from_flat
from nano_respo.sft import CONVERGED_SHARE


@dataclass
class WarmStopConfig:
    """The start of RL after one warm start, measured from an empty cache."""

    model: str = "tiny-qwen3"
    """train.py --model."""
    sft_seed: int = 0
    """train.py --sft-seed."""
    sft_anneal: str = "budget"
    """train.py --sft-anneal: budget (today's: a quarter of --sft-steps), converged or converged-half (the candidates)."""
    out: str | None = None
    """Where the JSON record goes; None = printed only."""
    summarise: str | None = None
    """Only print the table and the verdict of the records in this folder."""
    candidate: str | None = None
    """With --summarise: today's records and this candidate's only (None: every record)."""
    pass1_margin: float = 0.02
    """The rule: each candidate pass@1 within today's [min, max] widened by this on each side..."""
    greedy_margin: float = 0.01
    """...its greedy accuracy at least today's minimum less this, and every candidate warm start converged."""

    def __post_init__(self):
        if self.candidate not in (None, *CONVERGED_SHARE):
            raise ValueError(f"candidate: choose one of {', '.join(CONVERGED_SHARE)}, got {self.candidate!r}")


def band(today: list[dict]) -> tuple[float, float, float]:
    """Today's band, from its records: (least pass@1, greatest pass@1, least greedy accuracy), before the margins."""
    pass1 = [r["heldout"]["heldout_pass@1"] for r in today]
    return min(pass1), max(pass1), min(r["heldout"]["heldout_acc"] for r in today)


def verdict(records: list[dict], cfg: WarmStopConfig) -> list[str]:
    """The pre-registered rule (research/WARMSTART.md), per model: one line for today's band, one per candidate."""
    lines = []
    for model in sorted({r["config"]["model"] for r in records}):
        mine = [r for r in records if r["config"]["model"] == model]
        today = [r for r in mine if r["config"]["sft_anneal"] == "budget"]
        if not today:
            lines.append(f"{model}: no record of today's warm start: no band to compare with")
            continue
        low, high, greedy = band(today)
        lines.append(f"{model}: today's band ({len(today)} records): pass@1 {low:.3f}-{high:.3f}, "
                     f"greedy accuracy >= {greedy:.3f}")
        for anneal in sorted({r["config"]["sft_anneal"] for r in mine} - {"budget"}):
            cells = [r for r in mine if r["config"]["sft_anneal"] == anneal]
            misses = [f"{r['cpu_setting']} seed {r['config']['sft_seed']}" for r in cells
                      if r["warm_start"]["converged_at"] is None
                      or not low - cfg.pass1_margin <= r["heldout"]["heldout_pass@1"] <= high + cfg.pass1_margin
                      or r["heldout"]["heldout_acc"] < greedy - cfg.greedy_margin]
            steps = [r["warm_start"]["steps"] for r in cells]
            lines.append(f"{model}: --sft-anneal {anneal}: {'PASS' if not misses else 'FAIL'} over {len(cells)} "
                         f"records ({min(steps)}-{max(steps)} steps)"
                         f"{'; outside: ' + ', '.join(misses) if misses else ''}")
    return lines


def summary(folder: str, cfg: WarmStopConfig) -> str:
    records = sorted((r for r in map(json.loads, map(Path.read_text, Path(folder).glob("*.json")))
                      if cfg.candidate in (None, r["config"]["sft_anneal"]) or r["config"]["sft_anneal"] == "budget"),
                     key=lambda r: (r["config"]["sft_anneal"] != "budget", r["config"]["model"], r["cpu_setting"],
                                    r["config"]["sft_seed"]))
    lines = ["| --sft-anneal | model | CPU setting | --sft-seed | converged at | steps | warm start s | greedy accuracy "
             "| pass@1 |", "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['config']['sft_anneal']} | {r['config']['model']} | {r['cpu_setting']} | "
                     f"{r['config']['sft_seed']} | {r['warm_start']['converged_at']} | {r['warm_start']['steps']} | "
                     f"{r['warm_start']['seconds']} | {r['heldout']['heldout_acc']:.3f} | "
                     f"{r['heldout']['heldout_pass@1']:.3f} |")
    return "\n".join(lines + [""] + verdict(records, cfg))


def main(argv=None) -> dict:
    cfg = parse_config(WarmStopConfig, argv)
    if cfg.summarise:
        print(summary(cfg.summarise, cfg))
        return {}
    require_empty_cache()  # before anything is built
    torch.set_num_threads(1)
    train_cfg = from_flat(TrainConfig, dict(model=cfg.model, sft_seed=cfg.sft_seed, sft_anneal=cfg.sft_anneal,
                                            device="cpu", **AS_RECORDED))
    task = task_of(train_cfg)
    torch.manual_seed(train_cfg.seed)  # as train.set_up does before the model is built
    model, tokenizer, warm = warm_start_here(train_cfg, task)
    heldout = evaluate_heldout(model, tokenizer, task, train_cfg, contextlib.nullcontext())  # a run's first eval line
    record = {**provenance("research.warm_start_stop", argv), "config": asdict(cfg), "warm_start": warm,
              "heldout": heldout, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    print(f"warm start: {warm}; CPU setting {record['cpu_setting']}; "
          f"held-out pass@1 {heldout['heldout_pass@1']:.3f} (greedy accuracy {heldout['heldout_acc']:.3f})")
    write_record(record, cfg.out)
    return record


if __name__ == "__main__":
    main()
