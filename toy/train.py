"""One toy training run: sample a rollout batch, then R optimizer steps on it, repeat.

Every update goes through nano_respo.kernel.policy_loss, with LossConfig's defaults unless a job's `loss` names
others; this file only does the bookkeeping around it (groups, advantages, mini-batches, epochs, what to record).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import torch

from nano_respo.kernel import (DIAGNOSTIC_KEYS, LossConfig, diagnostics, group_advantages, minibatch_order,
                               policy_loss, reuse_split)
from toy.envs import make_env

# Kernel statistics (docs/math.md §6) also kept per rollout batch (mean over its R steps), to
# follow a run over time: where the low-w positives are, and how hard negatives are pushed.
CURVE_KEYS = ("low_w_pos_frac", "low_w_pos_phi_mass", "phi_mean_pos", "phi_mean_neg", "phi_max_neg", "approx_kl")

@dataclass
class RunSettings:
    """What every run of one comparison shares (research.toy.run's flags of the same names)."""

    iterations: int = 60
    """Rollout batches per run (the same for every R: reuse buys more updates per sample)."""
    prompts_per_batch: int = 16
    """Prompts per rollout batch."""
    group_size: int = 8
    """Responses per prompt (one advantage group)."""
    minibatches: int = 4
    """Mini-batches per epoch; R steps = min(R, minibatches) mini-batches x R / that many epochs."""
    hidden: int = 32
    """Hidden width of the sequence policy."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip of every update."""
    adv_scale: str = "none"
    """Advantage scaling: none (r - group mean) or std (also divided by the group std)."""
    heldout_samples: int = 64
    """Samples per held-out prompt for the held-out reward (bandit: exact expectation)."""


@dataclass(kw_only=True)
class Job(RunSettings):
    """Everything one run needs; picklable so that runs can go to worker processes."""

    env: str
    method: str
    reuse: int
    seed: int
    lr: float
    loss: dict = field(default_factory=dict)  # LossConfig overrides, e.g. beta_neg or agg

    def key(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.loss.items()))
        return f"{self.env}|{self.method}|R{self.reuse}|s{self.seed}|lr{self.lr:g}|{extra}"



def nanmean(values) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else float("nan")


@torch.no_grad()
def heldout_reward(env, policy, samples: int, generator: torch.Generator) -> float:
    if hasattr(env, "expected_reward"):
        return env.expected_reward(policy)
    prompts = env.heldout_prompts.repeat_interleave(samples)
    return env.reward(env.sample(policy, prompts, generator)).mean().item()


def train(job: Job, progress=None, policy=None, skip_silent_steps: bool = False,
          config_class: type[LossConfig] = LossConfig) -> dict:
    """Run one job; returns a JSON-ready record (curves, per-run diagnostics, held-out reward).

    policy: continue training this policy in place instead of a fresh one (research/notebooks/starvation_controls, core notebook 04).
    skip_silent_steps: take no optimizer step on a mini-batch whose advantages are all 0. Adam
        still moves the weights there, on its momentum; research/toy/stuck.py turns that off to see its part.
    config_class: what job.loss configures; a subclass carries the knobs of a row registered elsewhere.
    """
    torch.manual_seed(job.seed)
    generator = torch.Generator().manual_seed(job.seed)
    env = make_env(job.env, job.seed)
    policy = env.make_policy(job.hidden) if policy is None else policy
    optimizer = torch.optim.Adam(policy.parameters(), lr=job.lr)
    cfg = config_class(method=job.method, **job.loss)
    epochs, per_epoch = reuse_split(job.reuse, minibatches=job.minibatches)

    rewards, zero_var, lengths, entropies, grad_norms, tokens_per_s, update_norms = [], [], [], [], [], [], []
    kernel = {name: [] for name in DIAGNOSTIC_KEYS}  # each averaged over the run's steps where defined
    started = time.perf_counter()
    n_tokens = 0
    for _ in range(job.iterations):
        pick = torch.randint(len(env.train_prompts), (job.prompts_per_batch,), generator=generator)
        prompts = env.train_prompts[pick].repeat_interleave(job.group_size)  # [B] groups contiguous
        episodes = env.sample(policy, prompts, generator)
        reward = env.reward(episodes)  # [B]
        advantages, adv_stats = group_advantages(reward, job.group_size, job.adv_scale)  # [B]
        rewards.append(reward.mean().item())
        zero_var.append(adv_stats["zero_var_frac"])
        lengths.append(episodes.mask.sum(-1).float().mean().item())
        entropies.append(-(episodes.old_logp * episodes.mask).sum().item() / episodes.mask.sum().item())
        n_groups = len(prompts) // job.group_size
        before = torch.nn.utils.parameters_to_vector(policy.parameters()).detach().clone()
        for _ in range(epochs):
            for rows in minibatch_order(n_groups, job.group_size, per_epoch, generator):  # [b] whole groups
                batch = episodes[rows]
                logp = env.log_probs(policy, batch)  # [b, T]
                loss, applied = policy_loss(logp, batch.old_logp, advantages[rows], batch.mask, cfg)
                stats = diagnostics(applied["phi"], logp, batch.old_logp, advantages[rows], batch.mask, cfg)
                optimizer.zero_grad()
                loss.backward()
                grad_norms.append(torch.nn.utils.clip_grad_norm_(policy.parameters(), job.max_grad_norm).item())
                if not (skip_silent_steps and not advantages[rows].any()):
                    optimizer.step()
                for name in DIAGNOSTIC_KEYS:
                    kernel[name].append(stats[name])
                n_tokens += int(batch.mask.sum())
        # How far the R steps moved the weights. Adam keeps moving them on its momentum even
        # when a batch carries no signal (every group's rewards equal, so every advantage is 0).
        update_norms.append((torch.nn.utils.parameters_to_vector(policy.parameters()) - before).norm().item())
        tokens_per_s.append(n_tokens / (time.perf_counter() - started))
        if progress is not None:
            progress()
    quarter = max(1, job.iterations // 4)
    tail = max(1, job.iterations // 10)
    record = asdict(job)
    if skip_silent_steps:
        record["skip_silent_steps"] = True
    record.update(
        key=job.key(),
        reward_curve=rewards,
        early_auc=sum(rewards[:quarter]) / quarter,
        full_auc=sum(rewards) / len(rewards),
        final_reward=sum(rewards[-tail:]) / tail,
        heldout_reward=heldout_reward(env, policy, job.heldout_samples, generator),
        zero_var_frac=sum(zero_var) / len(zero_var),
        response_length=sum(lengths) / len(lengths),
        final_entropy=entropies[-1],
        grad_norm=nanmean(grad_norms),
        tokens_per_s=tokens_per_s[-1],
        seconds=time.perf_counter() - started,
        # Rounding, and so a run's trajectory, depends on the CPU kernels torch dispatched to.
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
        torch_version=torch.__version__,
        entropy_curve=entropies,
        length_curve=lengths,
        zero_var_curve=zero_var,
        update_norm_curve=update_norms,
    )
    for name in CURVE_KEYS:
        steps = kernel[name]
        record[f"{name}_curve"] = [nanmean(steps[i:i + job.reuse]) for i in range(0, len(steps), job.reuse)]
    for name in kernel:
        record[name] = nanmean(kernel[name])
    for name in ("reward_curve", "entropy_curve", "length_curve", "zero_var_curve", "update_norm_curve",
                 *(f"{k}_curve" for k in CURVE_KEYS)):
        record[name] = [round(v, 4) for v in record[name]]  # keeps runs.jsonl small enough to commit
    return record
