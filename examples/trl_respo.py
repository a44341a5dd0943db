"""ReSPO in TRL: GRPO with nano_respo's policy loss on a toy addition task.

    python examples/trl_respo.py --model Qwen/Qwen3-0.6B                     # one process
    accelerate launch --num_processes 8 examples/trl_respo.py --model Qwen/Qwen3-0.6B --use-vllm

Needs the integrations environment (nano_respo/integrations/requirements.txt). The reward is
verifiable: 1 when the first number of the completion is the sum, else 0.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig

from nano_respo.cli import parse_config
from nano_respo.integrations.trl import ReSPOGRPOTrainer
from nano_respo.kernel import METHODS, LossConfig


@dataclass
class TRLExampleConfig:
    """GRPO through TRL with a nano_respo loss on "a+b=" prompts."""

    model: str = "Qwen/Qwen3-0.6B"
    """Model name on the Hub or a local directory (save_pretrained format)."""
    output_dir: str = "runs/trl-respo"
    """Where TRL writes checkpoints and logs."""
    method: str = "respo"
    """Kernel method (nano_respo.kernel.METHODS); respo's constants are LossConfig's defaults."""
    num_prompts: int = 512
    """Size of the generated addition data set."""
    num_generations: int = 8
    """Completions per prompt (the GRPO group)."""
    per_device_batch_size: int = 8
    """Completions per device per optimizer step; a multiple of num_generations across devices."""
    num_iterations: int = 2
    """Reuse: optimizer passes over each generated batch; > 1 takes the loss off-policy."""
    max_completion_length: int = 16
    """Generated tokens per completion."""
    learning_rate: float = 1e-6
    """AdamW learning rate."""
    max_steps: int = 200
    """Optimizer steps."""
    use_vllm: bool = False
    """Generate with vLLM, colocated on the training GPUs (needs vllm installed)."""
    cpu: bool = False
    """Train on the CPU (for smoke runs)."""
    seed: int = 0
    """Seed of the data set and of TRL."""

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method: unknown method {self.method!r}; choose one of {', '.join(METHODS)}")


def addition_dataset(num_prompts: int, seed: int) -> Dataset:
    rng = random.Random(seed)
    pairs = [(rng.randint(0, 99), rng.randint(0, 99)) for _ in range(num_prompts)]
    return Dataset.from_dict({"prompt": [f"{a}+{b}=" for a, b in pairs], "answer": [a + b for a, b in pairs]})


def correct_sum(completions, answer, **kwargs):
    """1.0 when the completion's first number is the sum; TRL passes the data set's columns."""
    rewards = []
    for text, target in zip(completions, answer):
        found = re.search(r"\d+", text)
        rewards.append(float(found is not None and int(found.group()) == target))
    return rewards


def main(argv=None):
    cfg = parse_config(TRLExampleConfig, argv)
    gpu = torch.cuda.is_available() and not cfg.cpu
    args = GRPOConfig(output_dir=cfg.output_dir, num_generations=cfg.num_generations,
                      per_device_train_batch_size=cfg.per_device_batch_size, num_iterations=cfg.num_iterations,
                      max_completion_length=cfg.max_completion_length, learning_rate=cfg.learning_rate,
                      max_steps=cfg.max_steps, use_vllm=cfg.use_vllm, vllm_mode="colocate", bf16=gpu,
                      use_cpu=not gpu, seed=cfg.seed, logging_steps=1, report_to="none", save_strategy="no")
    trainer = ReSPOGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(cfg.model, dtype=torch.bfloat16 if gpu else torch.float32),
        processing_class=AutoTokenizer.from_pretrained(cfg.model), reward_funcs=correct_sum, args=args,
        train_dataset=addition_dataset(cfg.num_prompts, cfg.seed), loss_config=LossConfig(method=cfg.method))
    trainer.train()
    return trainer


if __name__ == "__main__":
    main()
