"""Held-out evaluation: greedy accuracy, pass@1 and pass@k (unbiased estimator).

train.py and eval.py both call `evaluate`, with the same batching and the same seed, so
eval.py on a checkpoint reproduces the held-out figures the run logged for it.
"""

from __future__ import annotations

import math

import torch
from tqdm import tqdm

from .rollout import sample, score
from .tasks import Task


def pass_at_k(n: int, correct: int, k: int) -> float:
    """Probability that at least one of k of the n samples is correct: 1 - C(n-c, k) / C(n, k)."""
    if n - correct < k:
        return 1.0
    return 1.0 - math.comb(n - correct, k) / math.comb(n, k)


@torch.no_grad()
def evaluate(model, tokenizer, task: Task, max_new_tokens: int, temperature: float = 1.0,
             samples: int = 4, k: int | None = None, batch_size: int = 256, seed: int = 1234) -> dict[str, float]:
    """heldout_acc (greedy), pass@1 and pass@k over `samples` tempered samples per held-out problem.

    Sampling runs under its own seed inside a forked RNG, so evaluating never changes the
    training run's random stream.
    """
    k = k or samples
    if not 1 <= k <= samples:
        raise ValueError(f"k: must lie in [1, samples={samples}], got {k}")
    problems = task.heldout_problems
    greedy_correct = 0.0
    chunks = range(0, len(problems), batch_size)
    for start in tqdm(chunks, desc="held-out, greedy", leave=False, disable=len(chunks) < 4):
        chunk = problems[start:start + batch_size]
        texts = sample(model, tokenizer, [p.prompt for p in chunk], max_new_tokens, greedy=True).texts
        greedy_correct += score(task.reward, texts, [p.answer for p in chunk])[0].sum().item()
    correct = []
    with torch.random.fork_rng(devices=[model.device] if model.device.type == "cuda" else []):
        torch.manual_seed(seed)
        per_batch = max(1, batch_size // samples)
        chunks = range(0, len(problems), per_batch)
        for start in tqdm(chunks, desc="held-out, sampled", leave=False, disable=len(chunks) < 4):
            chunk = [p for p in problems[start:start + per_batch] for _ in range(samples)]
            texts = sample(model, tokenizer, [p.prompt for p in chunk], max_new_tokens, temperature).texts
            rewards = score(task.reward, texts, [p.answer for p in chunk])[0].view(-1, samples)  # [problems, samples]
            correct += (rewards > 0).sum(-1).tolist()
    return {
        "heldout_acc": greedy_correct / len(problems),
        "heldout_pass@1": sum(c / samples for c in correct) / len(problems),
        f"heldout_pass@{k}": sum(pass_at_k(samples, c, k) for c in correct) / len(problems),
    }
