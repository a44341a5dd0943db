# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Gradient starvation: mechanism, symptom, consequence, and the other half
#
# Notebooks 01–02 looked at coefficients as functions. Here a policy learns, and we watch
# (1) how a correct response ends up with a low weight $w$ although every update pushed
# positives up, (2) what each method then gives it, (3) what that costs in learning, and
# (4) the other half of the problem: over-generated wrong responses taking the update.
# The environment is the digit-sum bandit of `toy/`; every update is `kernel.policy_loss`.

# %%
import copy
import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import torch

import toy
from nano_respo.kernel import LossConfig, coefficients, group_advantages, policy_loss, sequence_log_weight
from toy.envs import DigitSum
from nano_respo.lab.report import mean_ci

torch.set_num_threads(1)
plt.rcParams.update({"figure.dpi": 100, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
ROOT = Path(toy.__file__).resolve().parent.parent

# %% [markdown]
# ## 0. The environment
#
# The prompt is a target $t$; the policy (a small MLP reading the previous token and the
# remaining sum) writes digits 0–3 and an end token; the verifier gives reward 1 exactly when
# the digits sum to $t$ and the response ended. Large targets need long responses, which the
# initial policy rarely writes: they are the under-generated positives.

# %%
env = DigitSum()
print(f"digits 0..{env.digits - 1}, end token {env.end}, at most {env.max_len} tokens")
print("training targets:", env.train_prompts.tolist())
torch.manual_seed(0)
policy = env.make_policy()
gen = torch.Generator().manual_seed(0)
shown = env.sample(policy, torch.tensor([12, 12, 30, 30]), gen)
for prompt, tokens, mask, r in zip(shown.prompts, shown.tokens, shown.mask, env.reward(shown)):
    print(f"target {prompt.item():>2}: {tokens[mask].tolist()}  reward {r.item():.0f}")

# %% [markdown]
# ## 1. The reuse loop, written out
#
# This is `toy/train.py`'s loop without its bookkeeping: sample a rollout batch from the
# current policy $\mu$ (storing $\log\mu$ of every token), compute group advantages, then take
# `reuse` optimizer steps on that one batch, as mini-batches of whole groups over epochs. After
# the first step the policy $\pi_\theta$ is no longer $\mu$, and the weights drift.

# %%
def reuse_loop(env, policy, method, lr, reuse, iterations, seed, prompts_per_batch=16, group_size=8, minibatches=4):
    """Train `policy` in place; returns the mean training reward of each rollout batch."""
    cfg = LossConfig(method=method)
    optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    per_epoch = min(reuse, minibatches)                      # mini-batches per epoch
    rewards = []
    for _ in range(iterations):
        pick = torch.randint(len(env.train_prompts), (prompts_per_batch,), generator=generator)
        prompts = env.train_prompts[pick].repeat_interleave(group_size)       # [B] groups contiguous
        batch = env.sample(policy, prompts, generator)                        # mu = the policy now
        reward = env.reward(batch)                                            # [B] the verifier
        adv, _ = group_advantages(reward, group_size)                         # [B] r - group mean
        rewards.append(reward.mean().item())
        for _ in range(reuse // per_epoch):                                   # epochs
            order = torch.randperm(prompts_per_batch, generator=generator).view(per_epoch, -1)
            for groups in order:                                              # one optimizer step each
                rows = (groups[:, None] * group_size + torch.arange(group_size)).reshape(-1)
                part = batch[rows]
                logp = env.log_probs(policy, part)                            # [b, T] log pi_theta, drifting
                loss, _ = policy_loss(logp, part.old_logp, adv[rows], part.mask, cfg)
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
                optimizer.step()
    return rewards


torch.manual_seed(1)
policy = env.make_policy()
warm = reuse_loop(env, policy, "respo", lr=0.01, reuse=4, iterations=15, seed=1)
print("reward of the 15 warm-up batches:", " ".join(f"{r:.2f}" for r in warm))

# %% [markdown]
# *Takeaway:* reuse is a few lines: one `env.sample` (which stores $\log\mu$), then several
# `policy_loss` steps on the same episodes. Everything below uses this warm policy.
#
# ## 2. Mechanism: how a correct response ends up with a low $w$
#
# Draw one batch from the warm policy (32 prompts × 8 responses) and take 16 full-batch
# sequence-clip steps on it ($R=16$, learning rate 0.01), recording every response's $\log w$
# before each step.

# %%
gen = torch.Generator().manual_seed(6)
prompts = env.train_prompts[torch.randint(len(env.train_prompts), (32,), generator=gen)].repeat_interleave(8)
batch = env.sample(policy, prompts, gen)
adv, _ = group_advantages(env.reward(batch), 8)
positive, negative = adv > 0, adv < 0
lengths = batch.mask.sum(-1)
print(f"batch reward {env.reward(batch).mean():.2f}: {int(positive.sum())} positives, {int(negative.sum())} negatives")


def drift_run(method, steps=16, lr=0.01):
    """Copy the warm policy, take `steps` full-batch updates on `batch`; per-step token log-probs [steps, B, T]."""
    pol = copy.deepcopy(policy)
    opt = torch.optim.Adam(pol.parameters(), lr=lr)
    cfg = LossConfig(method=method)
    seen = []
    for _ in range(steps):
        logp = env.log_probs(pol, batch)                                      # [B, T]
        seen.append(logp.detach())
        loss, _ = policy_loss(logp, batch.old_logp, adv, batch.mask, cfg)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(pol.parameters(), 1.0)
        opt.step()
    return torch.stack(seen)                                                  # [steps, B, T]


clip_run = drift_run("seq_clip")
log_w = torch.stack([sequence_log_weight(lp, batch.old_logp, batch.mask) for lp in clip_run])   # [steps, B]
for step in (0, 1, 2, 4, 8, 15):
    low = positive & (log_w[step] < math.log(0.8))
    print(f"after {step:>2} updates: positives with w < 0.8: {int(low.sum()):>2} of {int(positive.sum())}")

# %%
step = 4
token_ratio = (clip_run[step] - batch.old_logp)[batch.mask & positive[:, None]]   # d_t of every positive token
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3))
bins = torch.linspace(-2.5, 1.5, 41)
ax1.hist(token_ratio, bins=bins, density=True, alpha=0.6, color="tab:gray", label="token log-ratio d_t")
ax1.hist(log_w[step, positive], bins=bins, density=True, alpha=0.6, color="tab:red", label="sequence log w = Σ d_t")
ax1.axvline(math.log(0.8), color="k", ls=":", lw=1)
ax1.set(xlabel="log-ratio after 4 updates", ylabel="density",
        title="positives: each token moves a little, the sum a lot")
ax1.legend(fontsize=7)
for rows, colour, name in ((positive, "tab:red", "positives"), (negative, "tab:blue", "negatives")):
    jitter = 0.15 * torch.randn(int(rows.sum()), generator=torch.Generator().manual_seed(0))
    ax2.scatter(lengths[rows] + jitter, log_w[step, rows], s=10, color=colour, alpha=0.6, label=name)
ax2.axhline(math.log(0.8), color="k", ls=":", lw=1)
ax2.set(xlabel="response length (tokens)", ylabel="log w after 4 updates", title="log w against response length")
ax2.legend(fontsize=7)
fig.tight_layout()
plt.show()
print(f"after 4 updates: token log-ratios of positives have std {token_ratio.std():.2f}, "
      f"their sequence log w std {log_w[step, positive].std():.2f}")

# %% [markdown]
# Two mechanisms are at work. **Shared parameters:** the very first update is on-policy
# ($w=1$, every positive pushed up with coefficient 1), yet after it a good share of the
# positives already sit below $w=0.8$ (the printout above). The policy's parameters are shared
# across responses and prompts, and the same step pushed down the batch's negatives (there
# are several times more of them), which share digits, prefixes and hidden units with the
# positives. **The product over length:** $\log w=\sum_td_t$, so small token changes add up
# along a response (left: the token log-ratios are narrow, the sums wide); on this batch the
# spread of $\log w$ grows only mildly with length (right), since most responses here are
# 8–16 tokens long.
#
# *Takeaway:* a positive becomes low-$w$ not because anyone pushed it down on purpose, but
# because it shares parameters with the negatives being pushed down, and because it is long
# (many small drifts multiply).
#
# ## 3. Symptom: what each method gives the low-$w$ positives
#
# At each of the 15 off-policy sequence-clip steps of §2, ask every method's kernel for its
# coefficient on the same drifted batch (for a token-level method, the mean of its token
# coefficients over the response), and split the positives by where their sequence weight
# sits: below the trust region ($w<0.8$), inside it, above it ($w>1.2$). Averaged over the steps
# (the first, on-policy step gives everyone 1):

# %%
methods = ("seq_clip", "grpo", "gspo", "cispo", "vespo", "respo")
regions = {"below (w < 0.8)": lambda lw: lw < math.log(0.8),
           "inside": lambda lw: (lw >= math.log(0.8)) & (lw <= math.log(1.2)),
           "above (w > 1.2)": lambda lw: lw > math.log(1.2)}
given = {m: {r: [] for r in regions} for m in methods}
for logp, lw in zip(clip_run[1:], log_w[1:]):
    for m in methods:
        phi_t, _ = coefficients(logp, batch.old_logp, adv, batch.mask, LossConfig(method=m))       # [B, T]
        per_response = (phi_t * batch.mask).sum(-1) / lengths                                       # [B]
        for r, inside in regions.items():
            rows = positive & inside(lw)
            if rows.any():
                given[m][r].append(per_response[rows].mean().item())
fig, ax = plt.subplots(figsize=(8, 2.8))
x = torch.arange(len(methods)).float()
for k, (r, colour) in enumerate(zip(regions, ("tab:red", "0.6", "tab:orange"))):
    ax.bar(x + (k - 1) * 0.27, [sum(given[m][r]) / len(given[m][r]) for m in methods], 0.27, color=colour, label=r)
ax.axhline(1.0, color="k", ls=":", lw=0.8)
ax.set_xticks(x.tolist(), methods)
ax.set(ylabel="mean φ of a positive", title="what a positive receives, by where its w sits")
ax.legend(fontsize=7, ncol=3)
fig.tight_layout()
plt.show()
for m in methods:
    print(f"{m:>9}: " + "  ".join(f"{r} {sum(v) / len(v):.2f}" for r, v in given[m].items()))

# %% [markdown]
# Below the trust region the sequence clip gives a positive only its weight $w$; ReSPO's
# nearly flat branch gives about 1; VESPO's $w^2e^{-3(w-1)}$ is above 1 at these moderate
# weights (it peaks at $w=2/3$) and starves only far lower. The token-level methods (GRPO,
# CISPO) and GSPO, whose length-normalised ratio stays near 1, keep most of it: the sharp
# starvation is a *sequence-level* clip's. Above the trust region the sequence clip and GSPO
# (whose $\epsilon=4\cdot10^{-4}$ clips nearly everything) give a positive 0 and VESPO little,
# GRPO zeroes only its tokens above 1.2, while CISPO and ReSPO keep pushing.
#
# *Takeaway:* the symptom is a coefficient: a sequence clip multiplies a drifted correct
# answer's gradient by $w<0.8$ and an already-improved one's by 0.
#
# ## 4. Consequence: the starved positives stop being learned
#
# Same warm policy, same batch, same learning rate (0.01), 16 full-batch steps: once with the
# sequence clip, once with ReSPO. Follow $\log\pi(y)-\log\mu(y)$ (how much more likely the
# policy makes each response than when it was sampled) for the six positives that fall
# lowest under the sequence clip.

# %%
respo_run = drift_run("respo")
respo_log_w = torch.stack([sequence_log_weight(lp, batch.old_logp, batch.mask) for lp in respo_run])
candidates = positive.nonzero().squeeze(1)
followed = candidates[log_w[:, candidates].min(0).values.argsort()[:6]]                  # the six lowest under the clip
fig, axes = plt.subplots(1, 2, figsize=(9, 3), sharey=True)
palette = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink")
for ax, run, title in ((axes[0], log_w, "sequence clip"), (axes[1], respo_log_w, "ReSPO")):
    for i, colour in zip(followed.tolist(), palette):
        label = f"target {batch.prompts[i].item()}, {lengths[i].item()} tokens"
        ax.plot(range(16), run[:, i], "o-", ms=3, color=colour, label=label)
    ax.axhline(math.log(0.8), color="k", ls=":", lw=1)
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set(title=title, xlabel="optimizer step on the batch")
axes[0].set_ylabel("log π(y) − log μ(y)")
axes[1].legend(fontsize=7)
fig.tight_layout()
plt.show()
ever_low = positive & (log_w < math.log(0.8)).any(0)
for name, run in (("sequence clip", log_w), ("ReSPO", respo_log_w)):
    print(f"{name:>13}: log w after the last step: the six followed "
          + " ".join(f"{v:+.2f}" for v in run[-1, followed].tolist())
          + f"; mean over the {int(ever_low.sum())} ever below 0.8 {run[-1, ever_low].mean():+.2f}"
          + f", over all {int(positive.sum())} positives {run[-1, positive].mean():+.2f}")

# %% [markdown]
# Under the clip, a positive that drifts below $0.8$ is given only $w$, which shrinks as it
# drifts, so little pulls it back: the followed positives sink further and for longer. Under
# ReSPO the same responses keep a coefficient near 1 and turn back sooner, and on average the
# positives end higher (the printout: the mean over those ever below 0.8, and over all
# positives). Not every one: a few end lower under ReSPO, whose update also keeps pushing
# the other responses. One batch, one seed: it shows the mechanism, not a rate.
#
# **Does it cost learning?** Learning curves need several seeds and learning rates, and an
# honest comparison is at *equal* learning rates: a method's best learning rate is part of
# the method (a clip tolerates less, since it does not bound negatives). The toy's
# selection runs (`toy/results/selection/runs.jsonl`, written by `python -m toy.select`)
# ran every method at three learning rates, reuse 4 and 16, seeds 0–2; they are read back here,
# not rerun. These are the seeds the learning rates were chosen on, 3 of them: read them as a
# sweep, not as an evaluation (that is `toy/RESULTS.md`, on fresh seeds).

# %%
records = [json.loads(line) for line in open(ROOT / "toy/results/selection/runs.jsonl")]
default_kernel = {"alpha_pos": 0.0, "lambda_pos": 0.1, "alpha_neg": 3.0, "lambda_neg": 2.0}
sweep = [r for r in records if r["method"] != "respo" or r["loss"] == default_kernel]
lrs = sorted({r["lr"] for r in sweep})


def early_auc(method, reuse, lr):
    """(mean, 95% half-width) over seeds of the early AUC of one sweep cell."""
    return mean_ci([r["early_auc"] for r in sweep if (r["method"], r["reuse"], r["lr"]) == (method, reuse, lr)])


colours = dict(zip(methods, ("tab:blue", "tab:green", "tab:orange", "tab:purple", "tab:brown", "tab:red")))
fig, axes = plt.subplots(1, 3, figsize=(10, 3))
for ax, reuse in zip(axes[:2], (4, 16)):
    for m in methods:
        means = [early_auc(m, reuse, lr)[0] for lr in lrs]
        ax.plot(lrs, means, "o-", color=colours[m], lw=2.2 if m == "respo" else 1.2, label=m)
    ax.set(xscale="log", xlabel="learning rate", title=f"R = {reuse}: early AUC (first 15 batches)")
    ax.set_xticks(lrs, [f"{lr:g}" for lr in lrs])
    ax.minorticks_off()
axes[0].set_ylabel("mean over seeds 0-2")
axes[0].legend(fontsize=7, ncol=2)
for m in ("seq_clip", "grpo", "respo"):
    curves = torch.tensor([r["reward_curve"] for r in sweep if (r["method"], r["reuse"], r["lr"]) == (m, 16, 0.01)])
    axes[2].plot(range(1, curves.shape[1] + 1), curves.mean(0), color=colours[m], lw=2.2 if m == "respo" else 1.2,
                 label=m)
axes[2].set(xlabel="rollout batch", title="R = 16, all at lr 0.01: training reward")
axes[2].legend(fontsize=7)
fig.tight_layout()
plt.show()
for reuse in (4, 16):
    print(f"early AUC at R = {reuse}, mean ± 95% interval over 3 seeds:")
    for m in methods:
        row = [early_auc(m, reuse, lr) for lr in lrs]
        print(f"{m:>9}: " + "  ".join(f"lr {lr:<5g} {v:.3f} ± {h:.3f}" for lr, (v, h) in zip(lrs, row)))

# %% [markdown]
# Read the sweep at a fixed learning rate. At R = 4 the methods are within noise of each
# other at every learning rate. At R = 16 and the shared learning rate 0.01, ReSPO has the
# highest mean early AUC (the printout), with intervals that overlap most others at 3 seeds.
# The ranking also moves with the learning rate: at 0.03 the sequence clip, CISPO and VESPO
# collapse at R = 16 while ReSPO, GRPO and GSPO do not, so part of ReSPO's early speed in the
# evaluation (`toy/RESULTS.md`, where each method runs at its own chosen rate) is that it
# tolerates a larger step. And early is not final: at lr 0.01 and R = 16 (right), GRPO keeps
# climbing and ends highest on these seeds while ReSPO plateaus lower.
#
# *Takeaway:* starvation costs the drifted positives their gradient; on the toy the learning
# cost shows most where reuse is heavy and steps are large.
#
# ## 5. The other half: over-generated negatives take the update
#
# The same drifted batch, seen from the negatives: what share of the whole update
# $\sum_i|\phi_iA_i|$ goes to negatives the policy now over-generates ($w>1.2$)?

# %%
high_share, high_count = {m: [] for m in methods}, []
for logp, lw in zip(clip_run[1:], log_w[1:]):
    high = negative & (lw > math.log(1.2))
    high_count.append((high.sum() / (positive | negative).sum()).item())
    for m in methods:
        phi_t, _ = coefficients(logp, batch.old_logp, adv, batch.mask, LossConfig(method=m))
        size = ((phi_t * batch.mask).sum(-1) / lengths * adv).abs()                 # [B] |phi A| per response
        high_share[m].append((size[high].sum() / size.sum()).item())
fig, ax = plt.subplots(figsize=(7, 2.6))
ax.bar(x, [sum(v) / len(v) for v in high_share.values()], 0.6, color=[colours[m] for m in methods])
ax.axhline(sum(high_count) / len(high_count), color="k", ls=":", lw=1, label="their share of the responses")
ax.set_xticks(x.tolist(), methods)
ax.set(ylabel="share of Σ|φA|", title="the update taken by negatives with w > 1.2")
ax.legend(fontsize=7)
fig.tight_layout()
plt.show()
print(f"negatives with w > 1.2 are {sum(high_count) / len(high_count):.1%} of the responses; share of the update: "
      + ", ".join(f"{m} {sum(v) / len(v):.1%}" for m, v in high_share.items()))

# %% [markdown]
# A sequence-level clip leaves an over-generated negative its full weight $w>1.2$ while it
# zeroes the positives above the band, so these few responses take about twice their number's
# share of the update (the sequence clip's and GSPO's bars). ReSPO's negative branch is bounded
# (at most 1.24, falling beyond $w=1.5$), so their share stays below their number; the
# token-level GRPO and CISPO, whose per-token ratios stay nearer 1, give them little too.
# Together with §3 this is the sign-dependent starvation of the abstract: the clip turns the
# update *away* from drifted correct answers and *towards* over-generated wrong ones.
#
# *Takeaway:* both halves are visible on one batch: starved positives below the trust region,
# dominant negatives above it. ReSPO's two branches address one each.
