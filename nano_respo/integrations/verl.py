"""nano_respo's policy loss as a verl policy loss (`loss_mode`), for verl 0.9.

Importing this module registers, in verl's own POLICY_LOSS_REGISTRY:

    respo                   ReSPO (nano_respo.kernel.policy_loss with method="respo"): the coefficient of the
                            authors' verl recipe (yhangchen/ReSPO-code), which registers the same name
    nano_respo_<method>     every other kernel method: nano_respo_grpo, nano_respo_vespo, ...

verl imports it in each worker when the actor's policy-loss config names the class below
as its `_target_` (nano_respo/integrations/README.md, "verl (0.9.1)"):

    actor_rollout_ref.actor.policy_loss._target_=nano_respo.integrations.verl.ReSPOPolicyLossConfig
    actor_rollout_ref.actor.policy_loss.loss_mode=respo
    +actor_rollout_ref.actor.policy_loss.beta_pos=0.3       # any LossConfig field

What maps onto what:
- loss_agg_mode -> LossConfig.agg (the kernel uses verl's names; verl's "token-sum" has no
  kernel counterpart); loss_scale_factor -> norm_len. Every other LossConfig field is read
  from the policy_loss config; verl's clip_ratio* keys are not used (set eps_low/eps_high).
- advantages: verl passes one per token [B, T]; the kernel takes one per response [B]. We
  take each response's masked mean and refuse token-varying advantages (a critic's GAE),
  which a sequence-weight method cannot use.
- rollout_is_weights (verl's rollout correction, pi_old / pi_rollout) are folded into the
  sequence weight in log space, so w is measured against the policy that really sampled:
  log w = sum_t (log pi - log pi_old) + log rho. A zero weight (IcePop, rejection) rejects
  the whole response: its advantage becomes 0.
- verl normalises each micro-batch by global counts (global_batch_info); the kernel's
  local mean is rescaled to match, so micro-batching and data parallelism give verl's sums.
"""

from __future__ import annotations

from dataclasses import field, fields, make_dataclass

import torch
from verl.trainer.ppo.core_algos import register_policy_loss
from verl.workers.config import PolicyLossConfig

from nano_respo.kernel import AGG_MODES, METHODS, LossConfig, diagnostics, loss_denominator, policy_loss

SET_BY_VERL = ("method", "agg", "norm_len")  # from loss_mode, loss_agg_mode, loss_scale_factor
LOSS_MODES = {"respo": "respo", **{f"nano_respo_{m}": m for m in METHODS if m != "respo"}}
ROLLOUT_IS_LEVELS = ("token", "sequence")

# verl's PolicyLossConfig plus every LossConfig field (same names, same defaults), so that the
# kernel's knobs are plain Hydra keys. Generated from LossConfig so the two never disagree.
ReSPOPolicyLossConfig = make_dataclass(
    "ReSPOPolicyLossConfig",
    [("loss_mode", str, field(default="respo"))]
    + [(f.name, f.type, field(default=f.default)) for f in fields(LossConfig) if f.name not in SET_BY_VERL]
    # Must equal algorithm.rollout_correction.rollout_is: a sequence-level weight is repeated
    # on every token of its response and must enter log w once, not once per token.
    + [("rollout_is_level", str, field(default="sequence"))],
    bases=(PolicyLossConfig,),
)
ReSPOPolicyLossConfig.__module__ = __name__  # Ray pickles configs by module path to send them to workers


def loss_config(method: str, loss_agg_mode: str, config) -> LossConfig:
    """The kernel's LossConfig for one verl call: method from loss_mode, the rest from config."""
    policy_cfg = config.get("policy_loss", None) if config is not None else None
    knobs = {}
    for f in fields(LossConfig):
        if f.name not in SET_BY_VERL and policy_cfg is not None and policy_cfg.get(f.name, None) is not None:
            knobs[f.name] = policy_cfg.get(f.name)
    norm_len = config.get("loss_scale_factor", None) if config is not None else None
    if loss_agg_mode not in AGG_MODES:
        raise ValueError(f"loss_agg_mode: {loss_agg_mode!r} has no nano_respo counterpart; use one of "
                         f"{', '.join(AGG_MODES)}")
    if knobs.get("correction", "none") != "none":
        raise ValueError("correction: verl computes the rollout correction itself (algorithm.rollout_correction) "
                         "and this loss folds its weights into w; leave policy_loss.correction at none")
    return LossConfig(method=method, agg=loss_agg_mode, norm_len=norm_len, **knobs)


def sequence_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's per-token advantages [B, T] -> one per response [B] (masked mean; 0 if empty)."""
    adv = advantages.float()
    lengths = mask.sum(-1)  # [B]
    per_seq = torch.where(mask, adv, torch.zeros_like(adv)).sum(-1) / lengths.clamp(min=1)  # [B]
    spread = torch.where(mask, (adv - per_seq[:, None]).abs(), torch.zeros_like(adv)).amax(-1)  # [B]
    if (spread > 1e-4 * (1 + per_seq.abs())).any():
        raise ValueError("advantages: nano_respo needs one advantage per response (an outcome estimator "
                         "such as grpo or rloo); these vary across the tokens of a response")
    return per_seq


def fold_rollout_is(old_log_prob: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                    rollout_is_weights: torch.Tensor | None, level: str):
    """Move verl's rollout IS weights rho into the behaviour log-probs: log w gains + log rho.

    Returns (behaviour log-probs [B, T], advantages [B]); responses with a zero weight
    anywhere are rejected (advantage 0), as verl's IcePop / rejection sampling intends.
    """
    if rollout_is_weights is None:
        return old_log_prob, advantages
    if level not in ROLLOUT_IS_LEVELS:
        raise ValueError(f"rollout_is_level: must be one of {', '.join(ROLLOUT_IS_LEVELS)}, got {level!r}")
    rho = torch.where(mask, rollout_is_weights.float(), torch.ones_like(rollout_is_weights, dtype=torch.float))  # [B, T]
    rejected = (rho <= 0).any(-1)  # [B]
    keep = mask & ~rejected[:, None]  # [B, T]
    log_rho = torch.where(keep, rho.clamp(min=1e-30).log(), torch.zeros_like(rho))  # [B, T]
    if level == "sequence":
        lengths = keep.sum(-1).clamp(min=1)  # [B]
        row_log_rho = log_rho.sum(-1) / lengths  # [B]
        if (torch.where(keep, (log_rho - row_log_rho[:, None]).abs(), torch.zeros_like(log_rho)) > 1e-4).any():
            raise ValueError("rollout_is_level: 'sequence' but the rollout IS weights vary within a response; "
                             "set it to algorithm.rollout_correction.rollout_is")
        log_rho = log_rho / lengths[:, None]  # one sequence weight, spread evenly so it enters log w once
    behaviour = old_log_prob.float() - log_rho  # [B, T]
    return behaviour, torch.where(rejected, torch.zeros_like(advantages), advantages)


def global_batch_scale(mask: torch.Tensor, cfg: LossConfig, global_batch_info: dict) -> float | torch.Tensor:
    """Factor turning the kernel's micro-batch mean into verl's share of the global mean.

    verl divides each micro-batch's sum by the global token or sequence count and multiplies
    by dp_size (DDP/FSDP average the ranks' gradients); the kernel divides by the local
    kernel.loss_denominator, so the factor is local denominator x dp_size / global denominator.
    """
    dp_size = global_batch_info.get("dp_size") or 1
    total = global_batch_info.get("batch_num_tokens" if cfg.agg == "token-mean" else "global_batch_size")
    if total is None:
        if dp_size > 1:
            raise ValueError("global_batch_info: dp_size > 1 needs batch_num_tokens / global_batch_size from verl")
        return 1.0
    local = loss_denominator(mask, cfg.agg, cfg.norm_len)
    if cfg.agg == "seq-mean-token-sum-norm":  # the same constant divides locally and globally
        total = total * (cfg.norm_len or mask.shape[-1])
    return local.clamp(min=1).float() * dp_size / total


def make_policy_loss(method: str):
    """A verl policy-loss function (verl 0.9's PolicyLossFn signature) for one kernel method."""

    def nano_respo_policy_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                               response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                               rollout_is_weights: torch.Tensor | None = None):
        cfg = loss_config(method, loss_agg_mode, config)
        mask = response_mask.bool()  # [B, T]
        adv = sequence_advantages(advantages, mask)  # [B]
        policy_cfg = config.get("policy_loss", None) if config is not None else None
        level = policy_cfg.get("rollout_is_level", "sequence") if policy_cfg is not None else "sequence"
        behaviour, adv = fold_rollout_is(old_log_prob, adv, mask, rollout_is_weights, level)
        loss, applied = policy_loss(log_prob, behaviour, adv, mask, cfg)
        stats = diagnostics(applied["phi"], log_prob, behaviour, adv, mask, cfg)  # docs/math.md §6
        global_info = (config.get("global_batch_info", None) if config is not None else None) or {}
        loss = loss * global_batch_scale(mask, cfg, global_info)
        return loss, {f"actor/nano_respo/{name}": value for name, value in stats.items()}

    nano_respo_policy_loss.__name__ = f"nano_respo_{method}_policy_loss"
    return nano_respo_policy_loss


for _loss_mode, _method in LOSS_MODES.items():
    register_policy_loss(_loss_mode)(make_policy_loss(_method))
