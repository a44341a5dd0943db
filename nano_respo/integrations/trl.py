"""TRL's GRPOTrainer with nano_respo's policy loss (ReSPO or any kernel method), for TRL 1.16.

TRL keeps generation, rewards, group advantages, reuse (num_iterations,
steps_per_generation), vLLM and multi-GPU; only the loss changes:

    from nano_respo.kernel import LossConfig
    from nano_respo.integrations.trl import ReSPOGRPOTrainer
    trainer = ReSPOGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...),
                               train_dataset=..., loss_config=LossConfig(method="respo"))

The loss is nano_respo.kernel.policy_loss(current log-probs, behaviour log-probs, TRL's
advantages, completion mask), where the behaviour policy is the one that sampled: vLLM's
log-probs when TRL has them (then ReSPO's weight replaces TRL's vLLM IS correction),
else the policy's log-probs at generation time (TRL stores them as old_per_token_logps
when the batch is reused), else the current ones detached (the on-policy step, w = 1).
TRL's importance_sampling_ratio is never applied on top, so no correction counts twice.
With LossConfig.correction set (docs/math.md §7, the decoupled form), old_per_token_logps
is pi_old and the vLLM log-probs mu: the kernel's correction weight on pi_old / mu then
stands where TRL's vllm_importance_sampling_mode would. GRPOConfig's loss_type, epsilon*,
importance_sampling_level and vllm_importance_sampling_mode are not used: LossConfig says
all of that. Every docs/math.md §6 statistic is logged as `respo/<name>`; TRL already
logs reward, entropy, completion length, the zero-std reward fraction and grad norm.
"""

from __future__ import annotations

import torch
from trl import GRPOTrainer

from nano_respo.kernel import LossConfig, diagnostics, policy_loss


class ReSPOGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose loss is nano_respo.kernel.policy_loss; loss_config picks the method."""

    def __init__(self, *args, loss_config: LossConfig | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_config = loss_config or LossConfig()
        unsupported = {
            "beta": (self.beta, 0.0),  # the kernel has no KL-to-reference term
            "top_entropy_quantile": (self.top_entropy_quantile, 1.0),
            "off_policy_mask_threshold": (self.off_policy_mask_threshold, None),
            "entropy_coef": (self.args.entropy_coef, 0.0),
        }
        for name, (value, neutral) in unsupported.items():
            if value != neutral:
                kernels = " (the kernel's own is LossConfig.opsm_delta)" if name == "off_policy_mask_threshold" else ""
                raise ValueError(f"{name}: ReSPOGRPOTrainer's loss is the nano_respo kernel alone; "
                                 f"set {name}={neutral!r} (got {value!r}){kernels}")

    def behaviour_logps(self, inputs: dict, per_token_logps: torch.Tensor) -> torch.Tensor:
        """Log-probs of the policy that sampled the completions [B, T] (see the module docstring)."""
        old = inputs.get("old_per_token_logps")
        old = per_token_logps.detach() if old is None else old  # [B, T]
        sampling = inputs.get("sampling_per_token_logps")
        if sampling is None:
            return old
        # vLLM leaves NaN where it could not score a token; the trainer's own value stands in.
        return torch.where(torch.isnan(sampling), old, sampling)  # [B, T]

    def _compute_loss(self, model, inputs):
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [B, P + T]
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)  # [B, P + T]
        mask = inputs["completion_mask"] if "tool_mask" not in inputs else inputs["completion_mask"] * inputs["tool_mask"]
        per_token_logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **{key: inputs.get(key) for key in ("pixel_values", "image_grid_thw", "num_images",
                                                "pixel_attention_mask", "spatial_shapes", "num_tiles",
                                                "image_sizes", "token_type_ids", "mm_token_type_ids",
                                                "image_position_ids")},
        )  # [B, T], [B, T]
        advantages = inputs["advantages"]  # [B]
        if advantages.dim() != 1:
            raise ValueError(f"advantages: nano_respo needs one advantage per completion, got shape {tuple(advantages.shape)}")

        pi_old = None
        if self.loss_config.correction != "none":  # decoupled: TRL's own log-probs at generation time are pi_old
            pi_old = inputs.get("old_per_token_logps")
            if pi_old is None:
                raise ValueError("correction: needs TRL's old_per_token_logps (use_vllm with "
                                 "vllm_importance_sampling_correction, or num_iterations > 1)")
        behaviour = self.behaviour_logps(inputs, per_token_logps)  # [B, T]
        loss, applied = policy_loss(per_token_logps, behaviour, advantages, mask.bool(), self.loss_config,
                                    pi_old_logp=pi_old)
        stats = diagnostics(applied["phi"], per_token_logps, behaviour, advantages, mask.bool(), self.loss_config)

        mode = "train" if self.model.training else "eval"
        # HF's automatic scaling is off for GRPO: TRL divides by the accumulation steps itself.
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        loss = loss / accumulation
        if self.aux_loss_enabled:  # MoE load balancing, kept as TRL adds it
            loss = loss + self.router_aux_loss_coef * aux_loss / accumulation
        self.log_kernel_stats(mode, stats, entropies, mask)
        return loss

    def log_kernel_stats(self, mode: str, stats: dict[str, float], entropies: torch.Tensor, mask: torch.Tensor):
        """Average the kernel's statistics over processes (max for maxima) into TRL's metrics."""
        values = torch.tensor(list(stats.values()), device=self.accelerator.device)  # [K]
        gathered = self.accelerator.gather(values[None]).view(-1, len(stats))  # [processes, K]
        for i, name in enumerate(stats):
            column = gathered[:, i]
            reduced = column.nan_to_num(float("-inf")).max() if "max" in name else column.nanmean()
            self._metrics[mode][f"respo/{name}"].append(reduced.item() if column.isfinite().any() else float("nan"))
        token_entropy = torch.stack([(entropies * mask).sum(), mask.sum().float()])  # [2]
        total = self.accelerator.reduce(token_entropy, reduction="sum")
        self._metrics[mode]["entropy"].append((total[0] / total[1].clamp(min=1.0)).item())
