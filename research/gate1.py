"""Gate 1 of research/PREREGISTRATION.md: does RL on digit_sum start where long answers are rare but found?

    NANO_RESPO_CACHE=$(mktemp -d) python -m research.gate1 --sft-task-size 20 \
        --out research/results/gate1/default-sft20.json
    ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 NANO_RESPO_CACHE=$(mktemp -d) python -m research.gate1 ...

Warm-starts the tiny model exactly as train.py does (the same cached recipe, demonstrations of the
targets up to --sft-task-size only) from an empty cache, then samples at temperature 1, on each
selection seed, --samples completions of every target from 6 to 40, and prints per target the
success rate and pass@8. The gate reads the training targets t >= --long-from (RL's long targets):
PASS when their mean per-sample success lies in [--min-success, --max-success] and their mean
pass@8 (the expected share of RL's groups of 8 holding a correct answer) is at least --min-pass8.
The record (the command, the CPU setting, the warm start's report, every figure) goes to --out.
No RL step runs: no method is looked at.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path


import torch

from research.common import AS_RECORDED, provenance, require_empty_cache, task_of, warm_start_here
from research.lab.records import write_record
from nano_respo.cli import from_flat
from nano_respo.evaluation import pass_at_k
from nano_respo.rollout import sample, score
from research.cli import parse_config
from nano_respo.tasks import hash_seed
from train import TrainConfig
from research.study_tasks import DIGIT_SUM_HELDOUT, digit_sum_prompt

CPU_SETTING_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")


@dataclass
class Gate1Config:
    """Gate 1: per-sample success and pass@8 on the long digit_sum targets at the start of RL."""

    model: str = "tiny-qwen3"
    """train.py --model."""
    task_size: int = 36
    """train.py --task-size: the largest RL target."""
    sft_task_size: int = 20
    """train.py --sft-task-size: the largest target of the warm start's demonstrations."""
    sft_full_share: float = 0.0
    """train.py --sft-full-share: the share of demonstrations drawn from every RL target (amendment 1)."""
    sft_steps: int = 1000
    """train.py --sft-steps (random demonstrations are never all reproduced, so the warm start runs its budget)."""
    sft_seed: int = 0
    """train.py --sft-seed: the warm start every RL seed starts from."""
    seeds: list[int] = field(default_factory=lambda: [900, 901])
    """Selection seeds: each samples its own completions (the gate's figures pool them)."""
    samples: int = 32
    """Completions per target and seed, at temperature 1."""
    max_target: int = 40
    """Every target from the smallest (6) to this one is measured."""
    long_from: int = 27
    """The gate reads the training targets from this one up (RL's long targets)."""
    min_success: float = 0.01
    """PASS needs the mean per-sample success on the long training targets at least this..."""
    max_success: float = 0.15
    """...and at most this..."""
    min_pass8: float = 0.25
    """...and their mean pass@8 at least this."""
    max_new_tokens: int = 48
    """train.py --max-new-tokens."""
    batch_size: int = 256
    """Sequences per sampler call."""
    out: str | None = None
    """Where the JSON record goes; None = printed only."""
    summarise: str | None = None
    """Only print the table of the records in this folder (the search's steps), in the order they were made."""

    def __post_init__(self):
        if self.samples < 8:
            raise ValueError(f"samples: pass@8 needs at least 8 completions per target and seed, got {self.samples}")
        if not self.seeds:
            raise ValueError("seeds: give at least one selection seed")
        if not 0 <= self.min_success <= self.max_success <= 1:
            raise ValueError(f"min_success, max_success: need 0 <= min <= max <= 1, got {self.min_success}, "
                             f"{self.max_success}")


def measure(model, tokenizer, task, target: int, cfg: Gate1Config, seed: int) -> int:
    """Correct completions of `target` among cfg.samples drawn at temperature 1 under this seed."""
    problem = next(p for p in task.heldout_problems if p.prompt == digit_sum_prompt(target)) \
        if target in DIGIT_SUM_HELDOUT else None
    witness = problem.answer if problem else "1" * target  # the verifier reads only its sum
    with torch.random.fork_rng():
        torch.manual_seed(hash_seed("gate1", seed, target))
        texts = sample(model, tokenizer, [digit_sum_prompt(target)] * cfg.samples, cfg.max_new_tokens, 1.0,
                       batch_size=cfg.batch_size).texts
    return int(score(task.reward, texts, [witness] * cfg.samples)[0].sum().item())


def summary(folder: str) -> str:
    """One line per record: CPU setting, demonstrated targets, the gate's two figures (and per seed), the outcome."""
    records = sorted((json.loads(p.read_text()) for p in Path(folder).glob("*.json")),
                     key=lambda r: (r.get("finished", ""), r["config"]["sft_task_size"]))  # the first had no time
    lines = ["| step | CPU setting | demonstrations | success, t >= 27 (per seed) | pass@8, t >= 27 (per seed) | "
             "gate | success on the demonstrated targets, min-max | success / pass@8 on S+1, S+2, S+3 | warm start |",
             "|---|---|---|---|---|---|---|---|---|"]
    for step, r in enumerate(records, 1):
        per_seed = [" / ".join(f"{v:.3f}" for v in r[f"{key}_long_per_seed"]) for key in ("success", "pass@8")]
        largest = r["config"]["sft_task_size"]
        beyond = [r["per_target"][str(t)] for t in range(largest + 1, largest + 4) if str(t) in r["per_target"]]
        edge = ", ".join(f"{sum(row['success_per_seed']) / len(row['success_per_seed']):.3f} / "
                         f"{sum(row['pass@8_per_seed']) / len(row['pass@8_per_seed']):.2f}" for row in beyond)
        shown = [sum(row["success_per_seed"]) / len(row["success_per_seed"]) for row in r["per_target"].values()
                 if row["split"] == "demonstrated"]
        share = r["config"].get("sft_full_share", 0.0)
        shown_as = f"t = 6-{largest}" + (f", {share:.0%} from 6-{r['config']['task_size']}" if share else "")
        lines.append(f"| {step} | {r['cpu_setting']} | {shown_as} | {r['success_long']:.3f} "
                     f"({per_seed[0]}) | {r['pass@8_long']:.3f} ({per_seed[1]}) | {r['gate']} | "
                     f"{min(shown):.3f}-{max(shown):.3f} | {edge} | "
                     f"{r['warm_start']['steps']} steps, {r['warm_start']['seconds']} s |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    cfg = parse_config(Gate1Config, argv)
    if cfg.summarise:
        print(summary(cfg.summarise))
        return {}
    require_empty_cache()  # before anything is built
    torch.set_num_threads(1)
    train_cfg = from_flat(TrainConfig, dict(model=cfg.model, task="digit_sum", task_size=cfg.task_size,
                                            sft_task_size=cfg.sft_task_size, sft_full_share=cfg.sft_full_share,
                                            sft_steps=cfg.sft_steps, sft_seed=cfg.sft_seed,
                                            max_new_tokens=cfg.max_new_tokens, device="cpu", **AS_RECORDED))
    task = task_of(train_cfg)
    start = time.perf_counter()
    model, tokenizer, warm = warm_start_here(train_cfg, task)
    model.eval()
    training = set(task.sizes) - set(DIGIT_SUM_HELDOUT)
    per_target = {}
    for target in range(task.sizes[0], cfg.max_target + 1):
        correct = [measure(model, tokenizer, task, target, cfg, seed) for seed in cfg.seeds]
        per_target[target] = {
            "split": ("demonstrated" if target <= cfg.sft_task_size and target in training else
                      "trained" if target in training else "held-out" if target in DIGIT_SUM_HELDOUT else "beyond"),
            "success_per_seed": [c / cfg.samples for c in correct],
            "pass@8_per_seed": [pass_at_k(cfg.samples, c, 8) for c in correct]}
    long_targets = [t for t in per_target if t >= cfg.long_from and t in training]

    def mean_over(targets, key, seed_index=None):
        values = [sum(per_target[t][key]) / len(cfg.seeds) if seed_index is None else per_target[t][key][seed_index]
                  for t in targets]
        return sum(values) / len(values)

    success, pass8 = mean_over(long_targets, "success_per_seed"), mean_over(long_targets, "pass@8_per_seed")
    passed = cfg.min_success <= success <= cfg.max_success and pass8 >= cfg.min_pass8
    record = {
        **provenance("research.gate1", argv),
        "config": asdict(cfg),
        "warm_start": warm, "long_targets": long_targets,
        "success_long": success, "pass@8_long": pass8,
        "success_long_per_seed": [mean_over(long_targets, "success_per_seed", i) for i in range(len(cfg.seeds))],
        "pass@8_long_per_seed": [mean_over(long_targets, "pass@8_per_seed", i) for i in range(len(cfg.seeds))],
        "gate": "PASS" if passed else "FAIL", "per_target": per_target,
        "seconds": round(time.perf_counter() - start), "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    print("| target | split | success (per seed) | pass@8 (per seed) |\n|---|---|---|---|")
    for target, row in per_target.items():
        print(f"| {target} | {row['split']} | " + " / ".join(f"{v:.3f}" for v in row["success_per_seed"]) + " | "
              + " / ".join(f"{v:.3f}" for v in row["pass@8_per_seed"]) + " |")
    print(f"\nwarm start: {warm}; CPU setting {record['cpu_setting']}")
    print(f"gate 1 {record['gate']}: long training targets {long_targets}: success {success:.3f} "
          f"(needs {cfg.min_success} to {cfg.max_success}), pass@8 {pass8:.3f} (needs >= {cfg.min_pass8})")
    write_record(record, cfg.out)
    return record


if __name__ == "__main__":
    main()
