"""One RL step with explicit rollout reuse: `rl_iteration` samples a rollout batch (`collect_rollouts`),
centres its advantages within each group, and takes `reuse` optimizer steps on it (`rl_step`).

The step reads its routes (the training forward, the sampler's loop) and what it shares with
other processes (`ranks`: OneProcess here, scale.distributed.Ranks under --fsdp) as arguments,
so it imports nothing of the run around it; the loop that repeats it inside an open run is
run/loop.py.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

import torch
from tqdm import tqdm

from .config import StepConfig, hash_seed
from .diagnostics import diagnostics
from .kernel import compute_dtype, group_advantages, loss_denominator, minibatch_order, policy_loss, reuse_split
from .rollout import RolloutBatch, decode, policy_logprobs, sample, score

if TYPE_CHECKING:
    from .offpolicy import OffPolicy


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
            ranks=ONE_PROCESS, off_policy: OffPolicy | None = None) -> dict:
    """One optimizer step on one mini-batch of whole groups, gradients accumulated over micro-batches.

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
    phi_all = torch.zeros_like(batch.old_logp, dtype=compute_dtype(batch.old_logp))  # [B, C] the loss's coefficient
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
        loss, applied = policy_loss(logp, micro.old_logp, micro.advantages, micro.completion_mask, loss_cfg,
                                    pi_old_logp=micro.pi_old_logp)
        phi_all[rows, :width] = applied["phi"]
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
    # The diagnostics of the whole mini-batch (docs/math.md §6), from the coefficient the loss applied.
    against = batch.pi_old_logp if loss_cfg.weight_against == "pi_old" else batch.old_logp  # W's denominator
    stats = diagnostics(phi_all, logp_all, against, batch.advantages, full_mask, loss_cfg,
                        cfg.group_size)  # whole groups, in order
    if off_policy is not None:
        stats.update(off_policy.step_stats(logp_all, batch, loss_cfg))
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
                 logprobs=policy_logprobs, ranks=ONE_PROCESS, decoder=decode,
                 off_policy: OffPolicy | None = None) -> tuple[RolloutBatch, list[dict], int]:
    """One RL step: a rollout batch, then cfg.reuse = epochs x mini-batches optimizer steps on it.

    Returns (batch, one record per optimizer step, the step count after them). `logprobs` (the training
    forward) and `decoder` (the sampler's loop) are the run's routes to the same numbers; `off_policy`
    (nano_respo/offpolicy.py) a separate sampler and pi_old, when the run has them (run.session.routes).
    """
    # 1. Rollout: completions and, for ReSPO's weight w = pi / mu, log mu of each sampled token; rewards.
    sampler = off_policy.sampler_for(model) if off_policy else model  # mu: the learner, or a lagged / cast copy
    samples, rewards, rollout_stats = collect_rollouts(sampler, tokenizer, task, cfg, iteration, ranks, decoder)
    # 2. Advantages: centred within each group of G samples of one prompt.
    advantages, adv_stats = group_advantages(rewards, cfg.group_size, cfg.adv_scale)
    if adv_stats["zero_var_frac"] == 1.0:
        tqdm.write(f"iteration {iteration}: every group has all-equal rewards, so this batch carries no signal")
    batch = RolloutBatch(samples.input_ids, samples.attention_mask, samples.completion_mask, samples.old_logp,
                         rewards, advantages.to(rewards.device))
    if off_policy is not None:  # pi_old for the decoupled form, and what tells the sampler from the learner
        rollout_stats.update(off_policy.prepare(model, sampler, batch, cfg, logprobs))
    if cfg.loss.weight_against == "pi_old" and batch.pi_old_logp is None:
        batch.pi_old_logp = batch.old_logp  # the learner itself sampled, at the start of these updates: pi_old is mu
    # 3. Reuse: the same episodes feed cfg.reuse optimizer steps; from the second on, pi differs from mu.
    epochs, minibatches = reuse_split(cfg.reuse, cfg.epochs)
    records = []
    for epoch in range(epochs):
        order = torch.Generator().manual_seed(hash_seed("order", cfg.seed, iteration, epoch))
        for minibatch, rows in enumerate(minibatch_order(len(rewards) // cfg.group_size, cfg.group_size,
                                                         minibatches, order)):
            start = time.perf_counter()
            stats = rl_step(model, optimizer, batch.select(rows.to(rewards.device)), cfg, logprobs, ranks, off_policy)
            step += 1
            if stats["skipped"]:
                tqdm.write(f"step {step}: skipped ({stats['skip_reason']}); weights and optimizer unchanged")
            tokens = batch.completion_mask[rows].sum().item()
            records.append({"kind": "train", "iteration": iteration, "step": step, "epoch": epoch,
                            "minibatch": minibatch, **stats, **rollout_stats, "zero_var_frac": adv_stats["zero_var_frac"],
                            "train_tokens_per_s": tokens / (time.perf_counter() - start)})
    return batch, records, step

