"""Warm start: a short supervised phase on task demonstrations, cached on disk.

A random-init model never emits a correct answer, so every group has all-equal rewards
and zero advantage: RL alone has no signal to start from. A few hundred steps of
teacher forcing on (prompt, answer) pairs give it a policy that is sometimes right, which
is where RL begins. The result depends only on its inputs, so it is saved under the cache
directory and reused by every run with the same inputs: the same model, the same settings
and the same training data, recognised by the hash of its content (an edited answer in a
data file is new data, wherever the file lives).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import torch
from tqdm import tqdm

from .models import cache_dir, load_model, refuse_unknown_characters
from .rollout import RolloutBatch, encode_prompts, policy_logprobs
from .tasks import Task, hash_seed


def teacher_forced_batch(tokenizer, prompts: list[str], answers: list[str], device) -> RolloutBatch:
    """Prompts (left-padded) followed by answer + EOS (right-padded), in the rollout layout."""
    prompt = encode_prompts(tokenizer, prompts, device)
    answer_ids = [tokenizer(a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for a in answers]
    width = max(map(len, answer_ids))
    completion = torch.full((len(answers), width), tokenizer.pad_token_id, device=device)  # [N, C]
    for row, ids in enumerate(answer_ids):
        completion[row, :len(ids)] = torch.tensor(ids)
    lengths = torch.tensor(list(map(len, answer_ids)), device=device)
    mask = torch.arange(width, device=device)[None] < lengths[:, None]  # [N, C]
    zeros = torch.zeros(len(answers), device=device)
    return RolloutBatch(input_ids=torch.cat([prompt["input_ids"], completion], 1),
                        attention_mask=torch.cat([prompt["attention_mask"], mask.long()], 1),
                        completion_mask=mask, old_logp=torch.zeros(mask.shape, device=device),
                        rewards=zeros, advantages=zeros)


def sft(model, tokenizer, task: Task, steps: int, batch_size: int, lr: float, seed: int, logprobs=policy_logprobs):
    """Minimise the mean token negative log-likelihood of the reference answers.

    logprobs: rollout.policy_logprobs or a drop-in with its signature (logprobs.chunked_policy_logprobs).
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    bar = tqdm(range(steps), desc="warm start (sft)", dynamic_ncols=True)
    for step in bar:
        problems = task.train_batch(batch_size, seed=hash_seed("sft", seed, step))
        batch = teacher_forced_batch(tokenizer, [p.prompt for p in problems], [p.answer for p in problems],
                                     model.device)
        logp, _, _ = logprobs(model, batch, temperature=1.0)  # [N, C]
        loss = -logp[batch.completion_mask].mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        bar.set_postfix(nll=f"{loss.item():.3f}")
    model.eval()
    return model


def warm_start_key(model_name: str, task: Task, steps: int, batch_size: int, lr: float, seed: int,
                   dtype: str) -> dict:
    """Everything a warm start's result depends on; its hash names the cache entry."""
    return {"model": model_name, "data": task.fingerprint(), "steps": steps, "batch_size": batch_size, "lr": lr,
            "seed": seed, "dtype": dtype}


def warm_start(model_name: str, task: Task, task_key: dict, steps: int, batch_size: int, lr: float, seed: int,
               dtype: str, device: str, logprobs=policy_logprobs):
    """(model, tokenizer) after `steps` SFT steps, from the cache when this exact warm start exists.

    `task_key` (the settings that named the task) is recorded next to the model for the reader;
    the cache entry is chosen by warm_start_key, which sees the data itself.
    """
    key = warm_start_key(model_name, task, steps, batch_size, lr, seed, dtype)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    path = cache_dir() / "sft" / f"{model_name.replace('/', '--')}-{task.name}-{digest}"
    if (path / "config.json").exists():
        print(f"warm start: cached {path}")
        return load_model(str(path), dtype, device)
    model, tokenizer = load_model(model_name, dtype, device)
    refuse_unknown_characters(tokenizer, (task.train_pool or []) + task.heldout_problems)  # before minutes of SFT
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        sft(model, tokenizer, task, steps, batch_size, lr, seed, logprobs)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "warm_start.json").write_text(json.dumps({**key, "named_as": task_key}, indent=1))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, path)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return load_model(str(path), dtype, device)
