"""Warm start: supervised training on task demonstrations to convergence, cached on disk.

A random-init model never emits a correct answer, so every group has all-equal rewards
and zero advantage: RL alone has no signal to start from. Teacher forcing on (prompt,
answer) pairs gives it a policy that is right often enough for RL to begin.

The phase is run to convergence, not stopped early. A tiny model learns `reverse` in a
sudden transition whose step moves with the seed and with float rounding (AVX2 against
AVX-512 kernels): stopped in the middle of it, the same settings land anywhere from a model
that answers nothing to one that answers almost everything. Three things aim to make the
end point the same for every seed and CPU (when the model converges; it says when not):

    curriculum:       a generated task's size grows from its smallest to its own over the
                      first quarter of the steps (short strings are learned first, and
                      each longer one extends what is learned), so the transition comes early;
    until converged:  the learning rate stays constant until the model reproduces its
                      demonstrations (or the steps run out), then decays to 0 along a
                      cosine over a fixed number of steps, so where the transition fell no
                      longer decides where the model ends;
    label smoothing:  the optimum keeps a fixed probability eps off every answer token, so
                      converged means a known place: greedy decoding answers, while a sample
                      at temperature 1 is right with probability about (1 - eps)^tokens,
                      less often the longer the answer. That gap is the room RL has.

The result depends only on its inputs, so it is saved under the cache
directory and reused by every run with the same inputs: the same model, the same settings
and the same training data, recognised by the hash of its content (an edited answer in a
data file is new data, wherever the file lives), made by the same code (WARM_START_VERSION),
library versions and CPU setting. The default run's warm starts also ship with the package
(shipped.py): a fresh clone loads them instead of training.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
from collections import deque
from dataclasses import dataclass
from importlib.metadata import version

import torch
import torch.nn.functional as F
from tqdm import tqdm

from .models import TINY_WARM_START_STEPS, cache_dir, load_model, refuse_unknown_characters
from .rollout import RolloutBatch, encode_prompts, policy_logprobs, training_forward
from .checkpoint import publish_directory
from .cli import check_values
from .shipped import describe, shipped_warm_start
from .tasks import Task, hash_seed, make_task, mixed_task

# How long the cosine runs (--sft-anneal): budget, a quarter of `steps` (LR_SCHEDULE); the others, a share of the
# step the model converged at, so it stops about when it has what it needs (research/WARMSTART.md).
CONVERGED_SHARE = {"converged": 4, "converged-half": 2}  # annealing = convergence step // this
ANNEALS = ("budget", *CONVERGED_SHARE)


@dataclass
class WarmStartConfig:
    """The warm start: supervised training before RL (train.py's --sft-* flags)."""
    steps: int | None = None
    """Warm-start SFT budget (cached); None = 2000 for the tiny models, 0 (none) otherwise."""
    anneal: str = "budget"
    """Warm-start annealing length: budget (a quarter of --sft-steps), converged / converged-half (a quarter / half of the step it converged at)."""
    batch: int = 64
    """Warm-start batch size (demonstrations per step)."""
    lr: float = 1e-3
    """Warm-start AdamW peak learning rate."""
    label_smoothing: float = 0.01
    """Warm-start label smoothing: the converged model keeps about this much off each answer token."""
    task_size: int | None = None
    """Warm-start task size (shorter demonstrations than RL's task); None = --task-size. Generated tasks only."""
    full_share: float = 0.0
    """Share of warm-start demonstrations drawn from the whole RL task instead of --sft-task-size."""
    seed: int = 0
    """Warm-start seed, apart from --seed so that every RL seed starts from the same model."""
    from_scratch: bool = False
    """Train the warm start here (or take it from the cache) even where one ships with the package (nano_respo/warm_starts/)."""

    def __post_init__(self):
        check_values(self, at_least_one=("batch",), positive=("lr",), in_range={"steps": (0, math.inf),
                     "label_smoothing": (0, 1)}, choices={"anneal": ANNEALS}, prefix="sft_")
        if not 0 <= self.full_share <= 1 or (self.full_share and self.task_size is None):
            raise ValueError("sft_full_share: a share in [0, 1] of the whole task's demonstrations beside --sft-task-size's")


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


# The schedule of the warm start (all of it is in its cache key): the task size grows over
# the first quarter of `steps`; the learning rate stays constant until the model has converged
# (a share CONVERGED_EXACT of the demonstrations reproduced, on average over CONVERGED_WINDOW
# steps at the full size) or `steps` have passed, then decays to 0 over a quarter of `steps`.
CURRICULUM = "size from smallest to full over steps // 4"
LR_SCHEDULE = "constant until converged or steps, then cosine to 0 over steps // 4"
CONVERGED_EXACT = 0.5
CONVERGED_WINDOW = 20


def cosine_lr(lr: float, step: int, steps: int) -> float:
    """lr at `step` of `steps`: from lr down to 0 along half a cosine."""
    return lr * 0.5 * (1 + math.cos(math.pi * step / steps))


def curriculum_size(task: Task, step: int, steps: int) -> int | None:
    """The task size of SFT step `step`: smallest to full over `steps // 4`; None for a file-backed task."""
    if task.sizes is None:
        return None
    first, last = task.sizes[0], task.sizes[-1]
    return min(last, first + round((last - first) * step / max(1, steps // 4)))


def smoothed_answer_loss(model, batch: RolloutBatch, label_smoothing: float):
    """(mean label-smoothed cross-entropy over answer tokens, log-prob [N, C] of each answer token).

    With smoothing the loss needs every token's log-prob, so this takes the full logits [N, C, V].
    """
    out, width = training_forward(model, batch)
    logits = out.logits[:, :-1].float()  # [N, C, V]: position t predicts answer token t
    targets = batch.input_ids[:, -width:]  # [N, C]
    loss = F.cross_entropy(logits.transpose(1, 2), targets, label_smoothing=label_smoothing,
                           reduction="none")  # [N, C]
    logp = torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1)  # [N, C]
    return loss[batch.completion_mask].mean(), logp


def sft(model, tokenizer, task: Task, steps: int, batch_size: int, lr: float, seed: int,
        label_smoothing: float = 0.0, logprobs=policy_logprobs, anneal: str = "budget") -> dict:
    """Minimise the (label-smoothed) token cross-entropy of the reference answers, to convergence.

    Returns {"exact", "converged_at", "steps"}: exact is the share of the last step's
    demonstrations whose every answer token (EOS included) has probability above 1/2, so that
    greedy decoding reproduces the whole answer; converged_at the step the annealing began
    because the model had converged (None: it began at `steps` without); steps the steps taken.
    logprobs: without smoothing, rollout.policy_logprobs or a drop-in with its signature
    (scale.logprobs.chunked_policy_logprobs, for a large vocabulary). anneal: the cosine's length
    (ANNEALS).
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    if anneal not in ANNEALS:
        raise ValueError(f"anneal: unknown annealing {anneal!r}; choose one of {', '.join(ANNEALS)}")
    length = max(1, steps // 4)  # the annealing's length; CONVERGED_SHARE's rules set it once convergence is known
    recent = deque(maxlen=CONVERGED_WINDOW)  # exact at the full size, the last steps
    anneal_from, converged_at, step, exact = None, None, 0, 0.0
    # The most steps it can take: the budget, then the annealing. A model that converges earlier
    # anneals from there, and the bar's total moves down to that end.
    bar = tqdm(desc="warm start (sft)", total=steps + length, dynamic_ncols=True)
    while anneal_from is None or step < anneal_from + length:
        if anneal_from is None and len(recent) == CONVERGED_WINDOW and sum(recent) / len(recent) >= CONVERGED_EXACT:
            anneal_from = converged_at = step
            if anneal in CONVERGED_SHARE:
                length = max(1, converged_at // CONVERGED_SHARE[anneal])
        elif anneal_from is None and step >= steps:
            anneal_from = step
        if anneal_from == step:
            bar.total = anneal_from + length
        for group in optimizer.param_groups:
            group["lr"] = lr if anneal_from is None else cosine_lr(lr, step - anneal_from, length)
        size = curriculum_size(task, step, steps)
        problems = task.train_batch(batch_size, seed=hash_seed("sft", seed, step), size=size)
        batch = teacher_forced_batch(tokenizer, [p.prompt for p in problems], [p.answer for p in problems],
                                     model.device)
        if label_smoothing:
            loss, logp = smoothed_answer_loss(model, batch, label_smoothing)
        else:
            logp, _, _ = logprobs(model, batch, temperature=1.0)  # [N, C]
            loss = -logp[batch.completion_mask].mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        # A token is reproduced when its probability exceeds 1/2: then no other token can be the argmax.
        reproduced = (logp > math.log(0.5)) | ~batch.completion_mask  # [N, C]
        exact = reproduced.all(-1).float().mean().item()
        if size is None or size == task.sizes[-1]:
            recent.append(exact)
        step += 1
        bar.update()
        bar.set_postfix(nll=f"{loss.item():.3f}", exact=f"{exact:.2f}", annealing=anneal_from is not None)
    bar.close()
    model.eval()
    return {"exact": exact, "converged_at": converged_at, "steps": step}


# Part of every warm start's cache key: raise it when an edit changes what a warm start computes (the recipe above,
# the training forward, the tiny models' creation), so that no cache entry made by the old code is reused.
# tests/run/test_shipped_warm_starts.py retrains the shipped ones and fails when such an edit went unmarked.
WARM_START_VERSION = 2


def cpu_setting() -> str:
    """The kernels this process's float math runs on: ATen's CPU capability, MKL's instructions when set, and the
    processor (the same capability rounds differently on another vendor's chip). The same recipe rounds
    differently under another setting, so its warm start is another cache entry."""
    mkl = os.environ.get("MKL_ENABLE_INSTRUCTIONS")
    try:
        names = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")]
    except OSError:  # not Linux
        names = []
    return ", ".join([torch.backends.cpu.get_cpu_capability(), *([f"MKL {mkl}"] if mkl else []),
                      names[0] if names else platform.processor() or platform.machine()])


def warm_start_key(model_name: str, task: Task, steps: int, batch_size: int, lr: float, seed: int,
                   dtype: str, label_smoothing: float = 0.0, anneal: str = "budget") -> dict:
    """Everything a warm start's result depends on (settings, data, code, library versions, CPU setting); its
    hash names the cache entry."""
    return {"model": model_name, "data": task.fingerprint(), "steps": steps, "batch_size": batch_size, "lr": lr,
            "lr_schedule": LR_SCHEDULE, "curriculum": CURRICULUM if task.sizes else None,
            "label_smoothing": label_smoothing, "seed": seed, "dtype": dtype, "anneal": anneal,
            "code": f"v{WARM_START_VERSION}", "torch": torch.__version__, "transformers": version("transformers"),
            "cpu": cpu_setting()}


def warm_start(model_name: str, task: Task, task_key: dict, steps: int, batch_size: int, lr: float, seed: int,
               dtype: str, device: str, logprobs=policy_logprobs, label_smoothing: float = 0.0,
               anneal: str = "budget", shipped: bool = True):
    """(model, tokenizer) after `steps` SFT steps: the shipped one (shipped.py) when it has these settings and
    this code, else from the cache when this exact warm start exists, else trained and cached.

    Prints how much of the last batch the model reproduces (see `sft`) and records it beside the model.

    `task_key` (the settings that named the task) is recorded next to the model for the reader;
    the cache entry is chosen by warm_start_key, which sees the data itself. shipped=False
    (--sft-from-scratch) never takes the shipped one.
    """
    key = warm_start_key(model_name, task, steps, batch_size, lr, seed, dtype, label_smoothing, anneal)
    if shipped and (path := shipped_warm_start(key)) is not None:
        print(describe(path))
        return load_model(str(path), dtype, device)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    path = cache_dir() / "sft" / f"{model_name.replace('/', '--')}-{task.name}-{digest}"
    if (path / "config.json").exists():
        print(f"warm start: cached {path}")
        return load_model(str(path), dtype, device)
    model, tokenizer = load_model(model_name, dtype, device)
    refuse_unknown_characters(tokenizer, (task.train_pool or []) + task.heldout_problems)  # before minutes of SFT
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        report = sft(model, tokenizer, task, steps, batch_size, lr, seed, label_smoothing, logprobs, anneal)
    converged = (f"converged at step {report['converged_at']}" if report["converged_at"] is not None
                 else f"not converged within {steps} steps (where RL starts then depends on the seed and "
                      f"the CPU: raise --sft-steps or lower --sft-lr)")
    print(f"warm start: {converged}, {report['steps']} steps; {report['exact']:.0%} of the last batch's answers "
          f"have every token above probability 1/2")

    def write(tmp):
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "warm_start.json").write_text(json.dumps({"key": key, "named_as": task_key, "report": report}, indent=1))

    publish_directory(path, write)
    return load_model(str(path), dtype, device)


def initial_model(cfg, task: Task, device: str, logprobs=policy_logprobs):
    """(model, tokenizer) where RL starts: the tiny models' warm start (shipped, cached or trained here), else the
    model as loaded. cfg: train.py's TrainConfig (cfg.sft, a WarmStartConfig)."""
    ws = cfg.sft
    steps = ws.steps if ws.steps is not None else TINY_WARM_START_STEPS.get(cfg.model, 0)
    if steps == 0:
        return load_model(cfg.model, cfg.dtype, device, cfg.gradient_checkpointing)
    # A smaller size draws from the same training split (held-out prompts are excluded by hash).
    sft_task = task if ws.task_size is None else make_task(cfg.task, ws.task_size, cfg.eval_problems,
                                                           cfg.heldout_file, seed=0)
    if ws.full_share:
        sft_task = mixed_task(sft_task, task, ws.full_share)
    named_as = {"task": cfg.task, "task_size": ws.task_size or cfg.task_size,
                **({"full_share": ws.full_share} if ws.full_share else {})}
    model, tokenizer = warm_start(cfg.model, sft_task, named_as, steps, ws.batch, ws.lr, ws.seed, cfg.dtype, device,
                                  logprobs, ws.label_smoothing, ws.anneal, shipped=not ws.from_scratch)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, tokenizer
