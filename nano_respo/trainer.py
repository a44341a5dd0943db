"""One RL step with explicit rollout reuse (`rl_iteration`), and the loop that repeats it (`train`).

    for each iteration:
        sample G completions for each of P prompts, recording log mu      (collect_rollouts;
            mu = the current weights, or with --lag k those of k iterations earlier)
        reward, group advantages                                           (kernel)
        reuse = epochs x mini-batches optimizer steps on this batch        (rl_step)
        log; every eval_every iterations evaluate held-out; every save_every checkpoint

What keeps a run alive around this loop (its directory and lock, resume, Ctrl-C, saves, the
metrics log) is nano_respo/run/session.py. Under torchrun --fsdp the same loop runs on every
rank; what differs is confined to the `ranks` object (OneProcess here, scale.distributed.Ranks
there).
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tqdm import tqdm

from .kernel import (SCALES, LossConfig, corrected_coefficients, diagnostics, group_advantages, loss_denominator,
                     minibatch_order, off_policy_diagnostics, policy_loss, reuse_split)
from .rollout import RolloutBatch, decode, policy_logprobs, router_choices, sample, score
from .tasks import hash_seed

if TYPE_CHECKING:
    from .run.config import TrainConfig


@dataclass
class StepConfig:
    """What one RL step reads: its rollout batch, advantages, reuse loop and loss (flags of train.py)."""
    prompts_per_iteration: int = 32
    """Prompts per rollout batch (P); the batch holds P x group_size episodes."""
    group_size: int = 8
    """Completions sampled per prompt (G); advantages are centred within each group."""
    reuse: int = 4
    """Optimizer steps per rollout batch (epochs x mini-batches); 1 = on-policy."""
    epochs: int = 2
    """Passes over each rollout batch (at most reuse); mini-batches (of whole groups) per pass = reuse / epochs."""
    max_new_tokens: int = 48
    """Generation budget; a completion without EOS within it is truncated (and usually wrong)."""
    temperature: float = 1.0
    """Sampling temperature; the training forward divides logits by the same value so w = 1 on a fresh batch."""
    adv_scale: str = "none"
    """Group advantage scaling: none (A = r - group mean) or std (also divide by the group std, as GRPO)."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold (total L2 norm)."""
    router_aux_coef: float = 0.0
    """MoE only: coefficient of the router load-balancing loss added to the policy loss (always logged)."""
    rollout_batch: int | None = None
    """Sequences per sampler call (bounds the KV cache); None = the whole rollout batch at once."""
    micro_batch: int | None = None
    """Sequences per forward/backward; gradients accumulate over a mini-batch. None = the whole mini-batch."""
    seed: int = 0
    """Seed of sampling, mini-batch order and the task's training problems."""
    loss: LossConfig = field(default_factory=LossConfig)
    """The policy loss (its fields are flags of their own: --method, --alpha-pos, ...)."""

    def __post_init__(self):
        for name in ("prompts_per_iteration", "reuse", "epochs", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:  # an advantage is a reward minus its group's mean: a group of one has 0
            raise ValueError(f"group_size: must be >= 2, got {self.group_size}; a group of one has advantage 0 "
                             f"(its reward minus its own mean), so nothing would be learned")
        for name in ("micro_batch", "rollout_batch"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.prompts_per_iteration % self.minibatches:
            raise ValueError(f"reuse: {self.prompts_per_iteration} prompts do not split into {self.minibatches} "
                             f"mini-batches of whole groups (reuse / epochs)")
        if not self.temperature > 0:
            raise ValueError(f"temperature: must be > 0, got {self.temperature}")
        if self.adv_scale not in SCALES:
            raise ValueError(f"adv_scale: unknown scale {self.adv_scale!r}; choose one of {', '.join(SCALES)}")
        if not (math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0):
            raise ValueError(f"max_grad_norm: must be > 0, got {self.max_grad_norm}")

    @property
    def minibatches(self) -> int:
        return reuse_split(self.reuse, self.epochs)[1]

    @property
    def step_loss(self) -> LossConfig:
        """The loss as the step runs it: Dr. GRPO's constant divisor defaults to the generation budget, so
        every mini-batch and rank divides alike."""
        return self.loss if self.loss.norm_len else replace(self.loss, norm_len=self.max_new_tokens)


class OneProcess:
    """What a step shares with other processes, on one device: nothing (scale.distributed.Ranks under --fsdp)."""

    rank, world_size = 0, 1

    def all_agree(self, flag: torch.Tensor) -> bool:
        return bool(flag)

    def loss_factor(self, denominator: torch.Tensor) -> float:
        return 1.0

    def barrier(self) -> None:
        pass

    def gathered(self, model):
        return contextlib.nullcontext()


ONE_PROCESS = OneProcess()


def rl_step(model, optimizer, batch: RolloutBatch, cfg: StepConfig, logprobs=policy_logprobs,
            ranks=ONE_PROCESS) -> dict:
    """One optimizer step on one mini-batch, gradients accumulated over micro-batches.

    A NaN/inf log-prob, loss or gradient skips the step: weights and optimizer state stay untouched (under FSDP on
    every rank together). Each micro-batch's loss is scaled by its share of the mini-batch's kernel.loss_denominator,
    so the scaled losses sum to the mini-batch's loss; the diagnostics are computed once, on the whole mini-batch.
    """
    loss_cfg = cfg.step_loss
    n = len(batch.advantages)
    full_mask = batch.completion_mask  # [B, C]
    denominator = loss_denominator(full_mask, loss_cfg.agg, loss_cfg.norm_len)
    loss_factor = ranks.loss_factor(denominator)  # 1 on one device; this rank's share of the global loss
    logp_all = torch.zeros_like(batch.old_logp)  # [B, C] detached, for the mini-batch statistics
    entropy_all = torch.zeros_like(batch.old_logp)  # [B, C]
    loss_total, aux_total = 0.0, None
    optimizer.zero_grad(set_to_none=True)
    for rows in torch.arange(n, device=full_mask.device).split(cfg.micro_batch or n):
        micro = batch.select(rows)
        width = micro.completion_mask.shape[1]
        logp, entropy, aux_loss = logprobs(model, micro, cfg.temperature, with_entropy=True)  # [b, c]: log pi
        logp_all[rows, :width], entropy_all[rows, :width] = logp.detach(), entropy
        if not ranks.all_agree(torch.where(micro.completion_mask, logp.detach(), 0.0).isfinite().all()):
            optimizer.zero_grad(set_to_none=True)
            return {"skipped": 1, "skip_reason": "non-finite log-prob"}
        # ReSPO: the method lives in this one call (loss_cfg.method); everything around it is plain RL.
        loss, _ = policy_loss(logp, micro.old_logp, micro.advantages, micro.completion_mask, loss_cfg,
                              with_stats=False, pi_old_logp=micro.pi_old_logp)
        share = loss_denominator(micro.completion_mask, loss_cfg.agg, loss_cfg.norm_len) / denominator.clamp(min=1)
        loss = loss * share * loss_factor
        if aux_loss is not None:
            aux_total = (aux_total or 0.0) + aux_loss.item() * len(rows) / n
            if cfg.router_aux_coef:
                loss = loss + cfg.router_aux_coef * aux_loss * len(rows) / n
        if not ranks.all_agree(loss.isfinite()):
            optimizer.zero_grad(set_to_none=True)
            return {"skipped": 1, "skip_reason": "non-finite loss"}
        loss.backward()
        loss_total += loss.item()
    phi = corrected_coefficients(logp_all, batch.old_logp, batch.advantages, full_mask, loss_cfg,
                                 batch.pi_old_logp)  # [B, C]
    stats = diagnostics(phi, logp_all, batch.old_logp, batch.advantages, full_mask, loss_cfg)
    stats.update(off_policy_diagnostics(logp_all, batch.old_logp, batch.advantages, full_mask, loss_cfg,
                                        batch.pi_old_logp))
    stats.update(loss=loss_total, entropy=entropy_all[full_mask].mean().item() if full_mask.any() else float("nan"))
    if aux_total is not None:
        stats["router_aux_loss"] = aux_total
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
    if not grad_norm.isfinite():
        optimizer.zero_grad(set_to_none=True)
        return {**stats, "grad_norm": grad_norm.item(), "skipped": 1, "skip_reason": "non-finite gradient"}
    optimizer.step()
    return {**stats, "grad_norm": grad_norm.item(), "skipped": 0}


def collect_rollouts(model, tokenizer, task, cfg: StepConfig, iteration: int, ranks=ONE_PROCESS, decoder=decode):
    """This process's prompts, G samples of each with log mu, and their rewards: (samples, rewards [N], stats)."""
    problems = task.train_batch(cfg.prompts_per_iteration, seed=hash_seed("rl", cfg.seed, iteration))
    per_rank = len(problems) // ranks.world_size  # whole prompts, so whole groups (all of them on one device)
    problems = problems[ranks.rank * per_rank:(ranks.rank + 1) * per_rank]
    grouped = [p for p in problems for _ in range(cfg.group_size)]
    start = time.perf_counter()
    with ranks.gathered(model):  # under FSDP: full weights for the whole rollout, no collectives while decoding
        samples = sample(model, tokenizer, [p.prompt for p in grouped], cfg.max_new_tokens, cfg.temperature,
                         batch_size=cfg.rollout_batch, decoder=decoder)
    gen_seconds = time.perf_counter() - start
    rewards, reward_errors = score(task.reward, samples.texts, [p.answer for p in grouped])
    if reward_errors:
        tqdm.write(f"iteration {iteration}: the reward function failed on {len(reward_errors)} of "
                   f"{len(samples.texts)} completions (scored 0); first: {reward_errors[0]}")
    lengths = samples.completion_mask.sum(-1)  # [N]
    stats = {"reward": rewards.mean().item(), "reward_errors": len(reward_errors),
             "empty_frac": sum(not t.strip() for t in samples.texts) / len(samples.texts),
             "response_len": lengths.float().mean().item(), "truncated_frac": samples.truncated.float().mean().item(),
             "gen_tokens_per_s": lengths.sum().item() / gen_seconds, "sample_text": samples.texts[0]}
    return samples, rewards.to(samples.input_ids.device), stats


def rl_iteration(model, tokenizer, task, optimizer, cfg: StepConfig, iteration: int, step: int,
                 logprobs=policy_logprobs, ranks=ONE_PROCESS, sampler=None,
                 decoder=decode) -> tuple[RolloutBatch, list[dict], int]:
    """One RL step: a rollout batch, then cfg.reuse = epochs x mini-batches optimizer steps on it.

    The behaviour policy mu is `sampler` (a lagged copy of the weights) or else the model; returns
    (batch, one record per optimizer step, the step count after them). `logprobs` (the training forward) and
    `decoder` (the sampler's loop) are the run's routes to the same numbers (run.session.routes).
    """
    # 1. Rollout: completions and, for ReSPO's weight w = pi / mu, log mu of each sampled token; rewards.
    samples, rewards, rollout_stats = collect_rollouts(sampler or model, tokenizer, task, cfg, iteration, ranks, decoder)
    # 2. Advantages: centred within each group of G samples of one prompt.
    advantages, adv_stats = group_advantages(rewards, cfg.group_size, cfg.adv_scale)
    if adv_stats["zero_var_frac"] == 1.0:
        tqdm.write(f"iteration {iteration}: every group has all-equal rewards, so this batch carries no signal")
    batch = RolloutBatch(samples.input_ids, samples.attention_mask, samples.completion_mask, samples.old_logp,
                         rewards, advantages.to(rewards.device))
    # The decoupled form's pi_old, and what tells a separate sampler from the learner: only when asked for.
    if sampler is not None or cfg.loss.correction != "none":
        batch.pi_old_logp = learner_logprobs(model, batch, cfg, logprobs)
        if sampler is not None and hasattr(model.config, "output_router_logits"):
            rollout_stats["router_mismatch_frac"] = router_mismatch(sampler, model, batch)
    # 3. Reuse: the same episodes feed cfg.reuse optimizer steps; from the second on, pi differs from mu.
    epochs, minibatches = reuse_split(cfg.reuse, cfg.epochs)
    records = []
    for epoch in range(epochs):
        order = torch.Generator().manual_seed(hash_seed("order", cfg.seed, iteration, epoch))
        for minibatch, rows in enumerate(minibatch_order(len(rewards) // cfg.group_size, cfg.group_size,
                                                         minibatches, order)):
            start = time.perf_counter()
            stats = rl_step(model, optimizer, batch.select(rows.to(rewards.device)), cfg, logprobs, ranks)
            step += 1
            if stats["skipped"]:
                tqdm.write(f"step {step}: skipped ({stats['skip_reason']}); weights and optimizer unchanged")
            tokens = batch.completion_mask[rows].sum().item()
            records.append({"kind": "train", "iteration": iteration, "step": step, "epoch": epoch,
                            "minibatch": minibatch, **stats, **rollout_stats, "zero_var_frac": adv_stats["zero_var_frac"],
                            "train_tokens_per_s": tokens / (time.perf_counter() - start)})
    return batch, records, step


@torch.no_grad()
def learner_logprobs(model, batch: RolloutBatch, cfg: StepConfig, logprobs=policy_logprobs) -> torch.Tensor:
    """log pi_old [N, C]: the learner's log-probs of the rollout batch before any step on it (one no-grad forward)."""
    n = len(batch.advantages)
    pi_old_logp = torch.zeros_like(batch.old_logp)  # [N, C]
    for rows in torch.arange(n, device=batch.old_logp.device).split(cfg.micro_batch or n):
        micro = batch.select(rows)
        pi_old_logp[rows, :micro.completion_mask.shape[1]] = logprobs(model, micro, cfg.temperature)[0].float()
    return pi_old_logp


def router_mismatch(sampler, model, batch: RolloutBatch) -> float:
    """MoE: the share of response tokens at which some layer's router picks other top-k experts in the sampler."""
    differs = (router_choices(sampler, batch) != router_choices(model, batch)).any(-1).any(0)  # [N, C]
    return differs[batch.completion_mask].float().mean().item()


class LaggedPolicy:
    """The behaviour policy of asynchronous RL: the learner's weights as they were `lag` iterations ago.

    Each iteration keeps a CPU copy of the learner's weights; a second model holding the
    oldest kept copy samples the rollouts, so log mu is the lagged policy's and the first
    step's weights are w = pi_now / mu_lagged, not 1. The lag grows 0, 1, ..., lag over the
    first iterations (nothing older exists). Costs lag + 1 CPU copies of the weights.

    With `dtype` (--sampler-dtype) the sampler's parameters are cast to it, as a bf16 inference engine
    holds an fp32 learner's weights: the train-inference mismatch, at lag 0 alone or on top of the lag.
    """

    def __init__(self, model, lag: int, kept: list[dict] | None = None, dtype: torch.dtype | None = None):
        self.kept = deque(kept or [], maxlen=lag + 1)
        self.sampler = copy.deepcopy(model)
        for param in self.sampler.parameters() if dtype else ():  # buffers (RoPE frequencies) stay as they are
            param.data = param.data.to(dtype)

    def sampler_for(self, model):
        self.kept.append({k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
        self.sampler.load_state_dict(self.kept[0])
        return self.sampler

    @property
    def lag_now(self) -> int:
        return len(self.kept) - 1


def train(cfg: TrainConfig) -> Path:
    """Run (or resume) training; returns the run directory. docs/training.md explains every flag and metric."""
    from .run.session import open_run  # the session builds on this module (OneProcess, LaggedPolicy)

    with open_run(cfg) as run:  # directory locked, model loaded (or resumed), held-out evaluated at the start
        model, optimizer = run.model, run.optimizer
        for iteration in run.iterations():  # a progress bar; Ctrl-C or SIGTERM ends it after a save
            start = time.perf_counter()
            model.train()
            with run.amp:
                sampler = run.lagged.sampler_for(model) if run.lagged else None  # mu: --lag iterations old
                _, records, run.step = rl_iteration(model, run.tokenizer, run.task, optimizer, cfg, iteration,
                                                    run.step, run.logprobs, run.ranks, sampler, run.decoder)
            run.log(iteration, records, seconds=time.perf_counter() - start)
            done = iteration + 1
            if done % cfg.eval_every == 0 or done == cfg.iterations:
                run.evaluate(done)
            if done % cfg.save_every == 0 or done == cfg.iterations or run.stop.requested:
                run.save(done)
    return run.dir
