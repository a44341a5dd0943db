"""One toy training run: sample a rollout batch, then R optimizer steps on it, repeat.

Every update goes through nano_respo.kernel.policy_loss; this file only does the
bookkeeping around it (groups, advantages, mini-batches, epochs, what to record).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import torch

from nano_respo.kernel import LossConfig, group_advantages, policy_loss
from toy.envs import make_env

# Per-step kernel statistics kept in the record (docs/math.md §6); each is averaged over the
# steps of a run where it is defined (nan where a set was empty, e.g. no positives).
KERNEL_STATS = ("low_w_pos_frac", "low_w_pos_phi_mass", "phi_low_w_pos", "phi_mean_pos", "phi_mean_neg", "phi_max_neg",
                "clip_frac_token", "clip_frac_seq", "approx_kl", "log_w_q10_pos", "log_w_q50_pos",
                "log_w_q90_pos", "log_w_q10_neg", "log_w_q50_neg", "log_w_q90_neg")


@dataclass
class Job:
    """Everything one run needs; picklable so that runs can go to worker processes."""

    env: str
    method: str
    reuse: int
    seed: int
    lr: float
    iterations: int = 60
    prompts_per_batch: int = 16
    group_size: int = 8
    minibatches: int = 4
    hidden: int = 32
    max_grad_norm: float = 1.0
    adv_scale: str = "none"
    heldout_samples: int = 64
    loss: dict = field(default_factory=dict)  # LossConfig overrides, e.g. alpha_neg

    def key(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.loss.items()))
        return f"{self.env}|{self.method}|R{self.reuse}|s{self.seed}|lr{self.lr:g}|{extra}"


def steps_plan(reuse: int, minibatches: int) -> tuple[int, int]:
    """R optimizer steps as (mini-batches per epoch, epochs): min(R, minibatches) x the rest."""
    per_epoch = min(reuse, minibatches)
    if reuse % per_epoch:
        raise ValueError(f"reuse: {reuse} must be a multiple of min(reuse, minibatches={minibatches})")
    return per_epoch, reuse // per_epoch


def nanmean(values) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else float("nan")


@torch.no_grad()
def heldout_reward(env, policy, samples: int, generator: torch.Generator) -> float:
    if hasattr(env, "expected_reward"):
        return env.expected_reward(policy)
    prompts = env.heldout_prompts.repeat_interleave(samples)
    return env.reward(env.sample(policy, prompts, generator)).mean().item()


def train(job: Job, progress=None, policy=None) -> dict:
    """Run one job; returns a JSON-ready record (curves, per-run diagnostics, held-out reward).

    policy: continue training this policy in place instead of a fresh one (notebook 03).
    """
    torch.manual_seed(job.seed)
    generator = torch.Generator().manual_seed(job.seed)
    env = make_env(job.env, job.seed)
    policy = env.make_policy(job.hidden) if policy is None else policy
    optimizer = torch.optim.Adam(policy.parameters(), lr=job.lr)
    cfg = LossConfig(method=job.method, **job.loss)
    per_epoch, epochs = steps_plan(job.reuse, job.minibatches)

    rewards, zero_var, lengths, entropies, grad_norms, tokens_per_s = [], [], [], [], [], []
    kernel = {name: [] for name in KERNEL_STATS}
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
        for _ in range(epochs):
            # Mini-batches are whole groups, reshuffled each epoch.
            order = torch.randperm(n_groups, generator=generator).view(per_epoch, -1)  # [M, groups]
            for groups in order:
                rows = (groups[:, None] * job.group_size + torch.arange(job.group_size)).reshape(-1)  # [b]
                batch = episodes[rows]
                logp = env.log_probs(policy, batch)  # [b, T]
                loss, stats = policy_loss(logp, batch.old_logp, advantages[rows], batch.mask, cfg)
                optimizer.zero_grad()
                loss.backward()
                grad_norms.append(torch.nn.utils.clip_grad_norm_(policy.parameters(), job.max_grad_norm).item())
                optimizer.step()
                for name in KERNEL_STATS:
                    kernel[name].append(stats[name])
                n_tokens += int(batch.mask.sum())
        tokens_per_s.append(n_tokens / (time.perf_counter() - started))
        if progress is not None:
            progress()
    quarter = max(1, job.iterations // 4)
    tail = max(1, job.iterations // 10)
    record = asdict(job)
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
        low_w_pos_frac_curve=[nanmean(kernel["low_w_pos_frac"][i:i + job.reuse])
                              for i in range(0, len(kernel["low_w_pos_frac"]), job.reuse)],
        low_w_pos_phi_mass_curve=[nanmean(kernel["low_w_pos_phi_mass"][i:i + job.reuse])
                                  for i in range(0, len(kernel["low_w_pos_phi_mass"]), job.reuse)],
    )
    for name in kernel:
        record[name] = nanmean(kernel[name])
    for name in ("reward_curve", "low_w_pos_frac_curve", "low_w_pos_phi_mass_curve"):
        record[name] = [round(v, 4) for v in record[name]]  # keeps runs.jsonl small enough to commit
    return record
