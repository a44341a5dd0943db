"""Data that is off-policy from the start: a sampler other than the learner, and pi_old.

Reuse makes a batch off-policy from its second optimizer step on; two more sources make it so
from the first (docs/math.md §7):

    staleness   --lag k: the sampler is the learner of k iterations earlier (asynchronous RL)
    mismatch    --sampler-dtype bfloat16: the sampler is a lower-precision copy (an inference
                engine), and on an MoE its routers may pick other experts

Three policies are then in play: mu (the sampler, whose log-probs the rollout recorded),
pi_old (the learner's log-probs recomputed at the start of the updates on the batch, one
no-grad forward) and pi (the learner now). The decoupled corrections (--correction) weigh
pi_old / mu; pi_old is computed only when one is asked for or the sampler is separate.

A run that needs none of this never imports this module: train.off_policy_of builds an `OffPolicy`
and hands it to train.rl_iteration only for --lag, --sampler-dtype, --correction or
--opsm-delta, as it hands over the systems routes.
"""

from __future__ import annotations

import copy
from collections import deque

import torch

from .kernel import TOKEN, correction_log_ratio, off_policy_sequence_mask, outside_bounds
from .rollout import RolloutBatch, policy_logprobs, real_positions


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


class OffPolicy:
    """What the step adds when its data is off-policy from the start (train.rl_iteration's `off_policy`).

    lagged: the separate sampler (--lag, --sampler-dtype), or None when the learner samples and only the
    loss asks for pi_old (--correction) or reads the sampler's log-probs (--opsm-delta).
    """

    def __init__(self, lagged: LaggedPolicy | None = None):
        self.lagged = lagged

    def sampler_for(self, model):
        """mu for this iteration: the lagged (or lower-precision) copy, having kept the learner's weights; else
        the learner."""
        return self.lagged.sampler_for(model) if self.lagged else model

    def prepare(self, model, sampler, batch: RolloutBatch, cfg, logprobs=policy_logprobs) -> dict:
        """Fills batch.pi_old_logp when the loss or the diagnostics need it; returns the rollout's own statistics."""
        if self.lagged is None and cfg.loss.correction == "none":
            return {}
        batch.pi_old_logp = learner_logprobs(model, batch, cfg, logprobs)
        if self.lagged is not None and hasattr(model.config, "output_router_logits"):
            return {"router_mismatch_frac": router_mismatch(sampler, model, batch)}
        return {}

    def step_stats(self, logp: torch.Tensor, batch: RolloutBatch, loss_cfg) -> dict:
        """What one optimizer step logs beside the kernel's diagnostics (off_policy_diagnostics)."""
        return off_policy_diagnostics(logp, batch.old_logp, batch.advantages, batch.completion_mask, loss_cfg,
                                      batch.pi_old_logp)


@torch.no_grad()
def learner_logprobs(model, batch: RolloutBatch, cfg, logprobs=policy_logprobs) -> torch.Tensor:
    """log pi_old [N, C]: the learner's log-probs of the rollout batch before any step on it (one no-grad forward)."""
    n = len(batch.advantages)
    pi_old_logp = torch.zeros_like(batch.old_logp)  # [N, C]
    for rows in torch.arange(n, device=batch.old_logp.device).split(cfg.micro_batch or n):
        micro = batch.select(rows)
        pi_old_logp[rows, :micro.completion_mask.shape[1]] = logprobs(model, micro, cfg.temperature)[0].float()
    return pi_old_logp


@torch.no_grad()
def router_choices(model, batch: RolloutBatch) -> torch.Tensor:
    """MoE: the top-k experts [L, B, C, k] (sorted) each layer's router picks where a completion token is predicted.

    Qwen3-MoE returns, with output_router_logits, one [B * (P + C), experts] tensor of router logits per layer
    (its Qwen3MoeTopKRouter's first output); the router takes the top-k of their softmax, so of the logits too.
    """
    width = batch.completion_mask.shape[1]
    position_ids = real_positions(batch.attention_mask)  # [B, P + C]
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=position_ids,
                logits_to_keep=1, use_cache=False, output_router_logits=True)
    n, length = batch.input_ids.shape
    k = model.config.num_experts_per_tok
    return torch.stack([logits.view(n, length, -1)[:, -width - 1:-1].topk(k, -1).indices.sort(-1).values
                        for logits in out.router_logits])  # [L, B, C, k]


def router_mismatch(sampler, model, batch: RolloutBatch) -> float:
    """MoE: the share of response tokens at which some layer's router picks other top-k experts in the sampler."""
    differs = (router_choices(sampler, batch) != router_choices(model, batch)).any(-1).any(0)  # [N, C]
    return differs[batch.completion_mask].float().mean().item()


@torch.no_grad()
def off_policy_diagnostics(logp, old_logp, advantages, mask, cfg, pi_old_logp=None) -> dict[str, float]:
    """docs/math.md §7 statistics of one batch, as python floats: KL(mu || pi_old) per token (k3) when pi_old is
    known, the share the correction weighs outside [C_min, C_max], the share the sequence mask drops."""
    mask = mask.bool()
    lengths = mask.sum(-1)  # [B]
    stats = {}
    if pi_old_logp is not None:
        d = correction_log_ratio(pi_old_logp, old_logp, mask, TOKEN)  # [B, T]
        stats["sampler_kl"] = (torch.expm1(d.clamp(max=cfg.log_w_max)) - d)[mask].sum() / mask.sum().clamp(min=1)
    if cfg.correction != "none":
        level = cfg.correction.split("-")[0]
        log_rho = correction_log_ratio(pi_old_logp, old_logp, mask, level)  # [B, T] or [B]
        counted = mask if level == TOKEN else lengths > 0  # [B, T] or [B]: what the correction weighs
        stats["correction_outside_frac"] = (outside_bounds(log_rho, cfg) & counted).sum() / counted.sum().clamp(min=1)
    if cfg.opsm_delta is not None:
        kept = off_policy_sequence_mask(logp, old_logp, advantages, mask, cfg.opsm_delta)  # [B]
        stats["opsm_masked_frac"] = (kept[lengths > 0] == 0).sum() / (lengths > 0).sum().clamp(min=1)
    if not stats:
        return {}
    values = torch.stack([torch.as_tensor(v).float().reshape(()) for v in stats.values()]).tolist()
    return dict(zip(stats, values))
