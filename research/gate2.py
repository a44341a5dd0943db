"""Gate 2 of research/PREREGISTRATION.md: at lr*, does the sequence clip meet long low-w positives?

    python -m research.gate2 --lr 3e-4 --sft-task-size S --out research/results/gate2/default-reuse8.json
    python -m research.gate2 --lr 3e-4 --sft-task-size S --reuse 16 ...      # the first fallback
    python -m research.gate2 --lr 3e-4 --sft-task-size S --lag 8 ...         # the second

Runs `seq_clip` on digit_sum on the selection seeds through research/run.py (resumable), then reads
every run's metrics.jsonl: over the off-policy optimizer steps of batches --first-batch to --last-batch
(every step but each batch's first; with a lag, every step), the mean share of positives below
w = 1 - diag_eps (`low_w_pos_frac`) and the mean lengths of those positives (`len_low_w_pos`) and of the
positives above w = 1 + diag_eps (`len_high_w_pos`). PASS when the share is at least --min-share and the
low-w positives are the longer, pooled over seeds. No other method runs. The runs are research/run.py's, so
they keep what the committed records relied on of the defaults of the time (research/common.py: two epochs,
--agg seq-mean-token-sum-norm).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path


from research.cli import parse_config
from nano_respo.runs import read_metrics
from research.common import ExperimentConfig, provenance, run_dir, run_grid
from research.lab.records import write_record

KEYS = ("low_w_pos_frac", "len_low_w_pos", "len_high_w_pos", "len_pos", "phi_low_w_pos", "approx_kl")


@dataclass
class Gate2Config:
    """Gate 2: the share and the length of the sequence clip's low-w positives early in RL, at lr*."""

    lr: float = 0.0
    """lr*, from the on-policy selection (required)."""
    reuse: int = 8
    """train.py --reuse (2 epochs of reuse / 2 mini-batches); the first fallback is 16."""
    lag: int = 0
    """train.py --lag; the second fallback is 8."""
    sft_task_size: int | None = None
    """train.py --sft-task-size, as gate 1 fixed it."""
    sft_full_share: float | None = None
    """train.py --sft-full-share, as gate 1 fixed it (amendment 1); None = train.py's default 0."""
    sft_steps: int = 1000
    """train.py --sft-steps."""
    model: str = "tiny-qwen3"
    """train.py --model."""
    seeds: list[int] = field(default_factory=lambda: [900, 901])
    """Selection seeds."""
    iterations: int = 30
    """Rollout batches per run (the evaluation's budget)."""
    first_batch: int = 1
    """The gate reads the batches from this one..."""
    last_batch: int = 10
    """...to this one."""
    min_share: float = 0.10
    """PASS needs at least this mean share of positives below w = 1 - diag_eps."""
    workers: int = 1
    """Runs in parallel, one torch thread each."""
    out_dir: str = "runs/gate2"
    """Where the runs are written."""
    out: str | None = None
    """Where the JSON record goes; None = printed only."""
    summarise: str | None = None
    """Only print the table of the records in this folder."""

    def __post_init__(self):
        if self.summarise:
            return
        if not self.lr > 0:
            raise ValueError(f"lr: pass lr* (> 0), got {self.lr}")
        if not 0 <= self.first_batch <= self.last_batch < self.iterations:
            raise ValueError(f"first_batch, last_batch: need 0 <= first <= last < iterations, got "
                             f"{self.first_batch}, {self.last_batch}")


def experiment(cfg: Gate2Config) -> ExperimentConfig:
    return ExperimentConfig(models=[cfg.model], methods=["seq_clip"], settings=[f"{cfg.reuse}+lag{cfg.lag}"
                                                                               if cfg.lag else str(cfg.reuse)],
                            lrs=[f"seq_clip={cfg.lr}"], seeds=cfg.seeds, iterations=cfg.iterations, task="digit_sum",
                            sft_task_size=cfg.sft_task_size, sft_full_share=cfg.sft_full_share,
                            sft_steps=cfg.sft_steps, eval_every=cfg.iterations,
                            eval_problems=12, workers=cfg.workers, out_dir=cfg.out_dir)


def gate_steps(records: list[dict], cfg: Gate2Config) -> list[dict]:
    """The off-policy optimizer steps of the gate's batches."""
    return [r for r in records if r["kind"] == "train" and cfg.first_batch <= r["iteration"] <= cfg.last_batch
            and ((r["epoch"], r["minibatch"]) != (0, 0) or cfg.lag)]


def mean(values) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return sum(values) / len(values) if values else float("nan")


def summary(folder: str) -> str:
    """One line per record: setting, cell, the gate's figures pooled over seeds, the outcome."""
    lines = ["| record | CPU setting | R | lag | low-w share | length low-w / high-w / all positives | approx_kl | "
             "gate |", "|---|---|---|---|---|---|---|---|"]
    for path in sorted(Path(folder).glob("*.json")):
        r = json.loads(path.read_text())
        p = r["pooled"]
        lines.append(f"| `{path.name}` | {r['cpu_setting']} | {r['config']['reuse']} | {r['config']['lag']} | "
                     f"{p['low_w_pos_frac']:.3f} | {p['len_low_w_pos']:.1f} / {p['len_high_w_pos']:.1f} / "
                     f"{p['len_pos']:.1f} | {p['approx_kl']:.3f} | {r['gate']} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    cfg = parse_config(Gate2Config, argv)
    if cfg.summarise:
        print(summary(cfg.summarise))
        return {}
    grid = experiment(cfg)
    run_grid(grid)
    per_seed = {}
    for seed in cfg.seeds:
        steps = gate_steps(read_metrics(run_dir(grid, cfg.model, "seq_clip", cfg.reuse, cfg.lag, seed)), cfg)
        if not steps:
            raise SystemExit(f"seed {seed}: no finished steps in batches {cfg.first_batch}-{cfg.last_batch}; "
                             f"see the run's .log")
        per_seed[seed] = {key: mean(r.get(key) for r in steps) for key in KEYS} | {"steps": len(steps)}
    pooled = {key: mean(row[key] for row in per_seed.values()) for key in KEYS}
    passed = pooled["low_w_pos_frac"] >= cfg.min_share and pooled["len_low_w_pos"] > pooled["len_high_w_pos"]
    record = {**provenance("research.gate2", argv, empty_cache=False),
              "config": asdict(cfg), "per_seed": per_seed, "pooled": pooled, "gate": "PASS" if passed else "FAIL"}
    for seed, row in per_seed.items():
        print(f"seed {seed}: " + ", ".join(f"{k} {v:.3g}" for k, v in row.items()))
    print(f"gate 2 {record['gate']}: seq_clip at lr {cfg.lr:g}, R = {cfg.reuse}, lag {cfg.lag}, batches "
          f"{cfg.first_batch}-{cfg.last_batch}: low-w share {pooled['low_w_pos_frac']:.3f} (needs >= "
          f"{cfg.min_share}), length low-w {pooled['len_low_w_pos']:.1f} against high-w "
          f"{pooled['len_high_w_pos']:.1f} (all positives {pooled['len_pos']:.1f})")
    write_record(record, cfg.out)
    return record


if __name__ == "__main__":
    main()
