# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Reuse makes the data off-policy
#
# **The question.** RL for language models samples a batch of responses, scores them, and then
# feeds that one batch to several optimizer steps. What does that do to the data, and why does
# it make the policy loss matter?
#
# **The answer.** Every step after the first trains on responses that an older policy $\mu$
# wrote, not the current one $\pi$. The exact correction is the sequence weight $w=\pi/\mu$, and it
# drifts away from 1 within a single batch. What a method does with $w$ is what the method is.
#
# **What you need.** Reading Python and PyTorch (tensors, `backward`, an optimizer step);
# expectations, logarithms and the chain rule; what a policy, a reward and a gradient step are.
# No RL library and no earlier course: §1 builds the policy gradient and the advantage from
# these, and the clip is introduced in core 02. To run the notebooks: `pip install -e .` at the
# repository root, then `jupyter lab notebooks/` (CPU only). A line starting with ✓ is a check
# that raised if the numbers disagreed; every coefficient comes from `nano_respo.kernel`.
#
# ## 1. The policy gradient working
#
# The toy (`toy/`): a small MLP writes digits 0-3 until an end token, and the verifier gives
# reward 1 when the digits sum to the prompt's target. Each rollout batch is 16 prompts × 8
# responses; the advantage $A$ of a response is its reward minus its group's mean. Here every
# batch feeds exactly one optimizer step, so the policy that sampled the batch is the policy
# being trained: the plain policy gradient $\mathbb E_\pi[A\,\nabla\log\pi]$. One run from scratch
# (seed 0), keeping the policy after each batch for §3:

# %%
import copy
import math

import matplotlib.pyplot as plt
import torch

from course import SequenceSpace, confirm
from nano_respo.kernel import (LossConfig, group_advantages, masked_sum, minibatch_order, policy_loss,
                               respo_coefficient, reuse_split)
from toy.envs import make_env
from toy.train import Job, train

torch.set_num_threads(1)
plt.rcParams.update({"figure.dpi": 100, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})

env = make_env("seq")
torch.manual_seed(0)
policy = env.make_policy(32)                     # the initial weights train() would draw for seed 0
kept = []                                        # a copy of the policy after each batch (a small MLP)
run = train(Job(env="seq", method="no_is", reuse=1, seed=0, lr=0.02, iterations=300,
                loss={"agg": "token-mean"}),     # LossConfig's default aggregation (the toy pins its records' one)
            progress=lambda: kept.append(copy.deepcopy(policy)), policy=policy)
curve = torch.tensor(run["reward_curve"])
fig, ax = plt.subplots(figsize=(6, 2.4))
ax.plot(range(1, len(curve) + 1), curve, color="0.6", lw=0.8, label="each rollout batch")
ax.plot(range(10, len(curve) + 1), curve.unfold(0, 10, 1).mean(-1), color="tab:red", lw=2, label="mean of the last 10")
ax.set(xlabel="rollout batch (one optimizer step each)", ylabel="training reward", ylim=(-0.02, 1.02))
ax.legend(fontsize=7)
fig.tight_layout()
plt.show()
print(f"training reward: {curve[:10].mean():.2f} over the first 10 batches, {curve[-10:].mean():.2f} over the "
      f"last 10; on held-out targets at the end: {run['heldout_reward']:.2f}")
confirm("this run learns: under 0.1 over the first 10 batches, above 0.9 over the last 10 and held out",
        max(0.0, curve[:10].mean().item() - 0.1, 0.9 - curve[-10:].mean().item(), 0.9 - run["heldout_reward"]), 1e-12)

# %% [markdown]
# The reward climbs from almost nothing to almost every answer right, on held-out targets too.
# One run shows the loop works, not how often the toy learns at this learning rate; on another
# CPU setting its numbers can differ (the check must still hold).
#
# ## 2. The reuse loop
#
# Sampling costs far more than a gradient step, so trainers reuse a batch: $R$ optimizer steps
# on one rollout batch, cut into epochs × mini-batches of whole groups, the advantages computed
# once. ReSPO's paper reuses a batch as **one epoch of $N$ mini-batches**: each response is used
# once, and the $k$-th mini-batch is $k-1$ updates stale. `kernel.reuse_split` turns $R$ steps into
# (epochs, mini-batches per epoch):

# %%
print("R = 8, one epoch (the paper):", reuse_split(8, epochs=1), "  R = 8, two epochs:", reuse_split(8, epochs=2))

# %% [markdown]
# ## 3. $w$ drifting within one batch
#
# $\mu$, the **behaviour policy**, is the sampler that wrote the batch (its log-probs are stored:
# `old_logp`); $\pi$ is the learner now, moved by every optimizer step. A third policy, $\pi_{old}$,
# the learner when the updates on this batch start, is $\mu$ in any synchronous loop with the same
# numerics, as here; core 05 §1 takes the three apart (docs/math.md §7).
#
# Per response the **sequence weight** is $w=\pi(y|x)/\mu(y|x)=\prod_t\pi(y_t|\cdot)/\mu(y_t|\cdot)$. The words
# this course uses for where a response's $w$ ends, with the clip band $\epsilon=0.2$:
#
# | word | meaning |
# |---|---|
# | **drifted** | $w\ne1$: the learner has moved on this response since the sampler wrote it |
# | **under-generated**, or **low-$w$** | $w<1-\epsilon$: the learner writes it less often than the sampler did |
# | **over-generated** | $w>1+\epsilon$: the learner writes it more often than the sampler did |
# | **starved** | an under-generated correct answer ($A>0$) that a method gives a vanishing coefficient |
#
# Below, the run's policy after batch 20 takes one new batch and reuses it as the paper does, in
# the loop `toy/train.py` and `train.py`'s `rl_iteration` run: one epoch of 8 mini-batches of ReSPO's
# loss (a fresh Adam at the run's learning rate). Before each step the cell records $\log w$ of
# *every* response and which ones the step uses.

# %%
policy = kept[19]                                                  # the policy after batch 20
gen = torch.Generator().manual_seed(1)
prompts = env.train_prompts[torch.randint(len(env.train_prompts), (16,), generator=gen)].repeat_interleave(8)
episodes = env.sample(policy, prompts, gen)                        # mu is this policy; log mu kept
adv, _ = group_advantages(env.reward(episodes), 8)                 # [128] once for the batch
epochs, per_epoch = reuse_split(8, epochs=1)
optimizer = torch.optim.Adam(policy.parameters(), lr=0.02)
log_w, used = [], []                                               # before each step: log w of all 128; the rows used
for _ in range(epochs):
    for rows in minibatch_order(16, 8, per_epoch, gen):
        with torch.no_grad():
            log_w.append(masked_sum(env.log_probs(policy, episodes) - episodes.old_logp, episodes.mask))
        used.append(rows)
        batch = episodes[rows]
        loss, _ = policy_loss(env.log_probs(policy, batch), batch.old_logp, adv[rows], batch.mask, LossConfig())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimizer.step()
log_w = torch.stack(log_w)                                         # [8 steps, 128]

fig, ax = plt.subplots(figsize=(6, 3.2))
for pick, name, col in ((adv > 0, "A > 0", "tab:red"), (adv < 0, "A < 0", "tab:blue"), (adv == 0, "A = 0 (no signal)", "0.75")):
    jitter = (torch.arange(int(pick.sum())) % 7 - 3) * 0.04
    for k in range(len(log_w)):
        ax.scatter(k + 1 + jitter, log_w[k, pick].exp(), s=5, color=col, alpha=0.35, label=name if k == 0 else None)
ax.axhspan(0.8, 1.2, color="0.88", zorder=0)
ax.set(yscale="log", xlabel="optimizer step k on this batch (mini-batch k)", ylabel="w = π/μ before the step")
ax.legend(fontsize=7, loc="lower left", ncol=2)
fig.tight_layout()
plt.show()
at_use = [log_w[k, rows].exp() for k, rows in enumerate(used)]
print("w of the responses each step uses, lowest-highest: "
      + "  ".join(f"k={k + 1}: {v.min():.2g}-{v.max():.2g}" for k, v in enumerate(at_use)))
confirm("at the first step every w is 1 (mu = pi)", log_w[0].abs().max(), 1e-12)
confirm("on this batch every later step uses some response whose w lies outside the clip band [0.8, 1.2]",
        max(0.0, *(math.log(1.2) - v.log().abs().max().item() for v in at_use[1:])), 1e-12)

# %% [markdown]
# The first mini-batch sees $w=1$ exactly (the first check): there every method in this course
# computes the plain policy gradient. Every later step on this batch uses responses that have
# drifted out of the grey clip band, some far below it and some far above (the printed ranges,
# the second check). Nothing was lagged or quantised: only the $k-1$ updates lie between sampling
# and step $k$.
#
# ## 4. The exact gradient
#
# We want the gradient of $J(\theta)=\mathbb E_{\pi}[A]$, but the responses come from $\mu$. Multiplying
# and dividing by $\mu$,
# $$\nabla J=\mathbb E_\pi[A\,\nabla\log\pi]=\mathbb E_\mu[w\,A\,\nabla\log\pi] .$$
# So $w$ is the exact correction. Checked on every response of a space small enough to sum
# over: 27 responses of 3 tokens, a tabular policy $\mu$ and a drifted copy $\pi$ (`course.SequenceSpace`).

# %%
space = SequenceSpace(vocab=3, length=3)
reward = (space.seqs.sum(-1) >= 4).double()                       # 1 when the tokens sum to at least 4
g = torch.Generator().manual_seed(0)
theta_mu = space.random_theta(g)
direction = space.random_theta(g)
theta = theta_mu + 0.8 * direction
mu, pi = space.log_probs(theta_mu).exp(), space.log_probs(theta).exp()
A = reward - (mu * reward).sum()
score = torch.autograd.functional.jacobian(space.log_probs, theta)  # [27, P] grad log pi(y)
w = pi / mu
grad_J = torch.autograd.functional.jacobian(lambda t: (space.log_probs(t).exp() * A).sum(), theta)
confirm("grad E_pi[A] = E_mu[w A grad log pi], summed over the 27 responses", (grad_J - (mu * w * A) @ score).abs().max(),
        1e-12)
print(f"w over the 27 responses: {w.min():.2f} to {w.max():.2f}")

# %% [markdown]
# ## 5. Why what a method does with $w$ matters
#
# The exact weight is unbiased, but a product of token ratios is heavy-tailed: the second moment
# of a one-response estimate, $\mathbb E_\mu[w^2A^2\|\nabla\log\pi\|^2]$, grows with the drift, and
# multiplicatively with the length (`deeper/derivation_details` §1 derives the recursion).
# Methods replace $w$ by a coefficient $\phi(w)$ (core 02 lists them): the sequence clip zeroes one
# tail per sign, ReSPO bounds $\phi$ by $e/2$ with one branch per sign of $A$. On §4's space, with
# §4's drift scaled by 0.5 to 4:

# %%
drifts, moments = (0.4, 0.8, 1.6, 3.2), []                        # per drift: E_mu[w^2], E_mu[phi^2]
for drift in drifts:
    log_wd = space.log_probs(theta_mu + drift * direction) - space.log_probs(theta_mu)
    moments.append([(mu * c ** 2).sum().item() for c in (log_wd.exp(), respo_coefficient(log_wd, A > 0))])
print(f"drift {drifts}: E_mu[w^2] = " + ", ".join(f"{m[0]:.3g}" for m in moments)
      + "; ReSPO's E_mu[phi^2] = " + ", ".join(f"{m[1]:.3f}" for m in moments))
confirm("E_mu[w^2] grows with the drift", max(0.0, *(a[0] - b[0] for a, b in zip(moments, moments[1:]))), 1e-12)
confirm("ReSPO's E_mu[phi^2] stays within (e/2)^2 at every drift",
        max(0.0, *(m[1] - (math.e / 2) ** 2 for m in moments)), 1e-12)

# %% [markdown]
# $\mathbb E_\mu[w^2]$, the exact weight's second moment, grows with the drift (the printed line, the first
# check); ReSPO's $\mathbb E_\mu[\phi^2]$ stays within $(e/2)^2$ (the second). That does not make it a variance
# cut of the estimate: for $\mathbb E_\mu[\phi^2A^2\|\nabla\log\pi\|^2]$, replaced one sign at a time over 60
# draws, ReSPO's negative branch alone cuts it below the exact weight's on most draws at a large drift, and its
# positive branch alone raises it on most draws
# ([deeper/derivation_details §8](deeper/derivation_details.ipynb) counts both). A low-$w$ positive
# adds $w^2\approx0$ to the exact weight's second moment, and ReSPO gives it up to $e/2$: what that
# buys is a different target, one that does not let $\pi$ drop a success $\mu$ found (docs/math.md
# §4.1). Whether that pays depends on the rest of the update: `deeper/branches_explored` §6 builds
# an exact case where, under plain gradient steps, it does not. So the choice of $\phi$ is a choice
# of bias and of target, not only of variance: core 02 lays every method's choice side by side.
#
# > **What to remember**
# > - Reusing a batch makes every step after the first off-policy: the $k$-th mini-batch is $k-1$ updates stale.
# > - The exact correction $w=\pi/\mu$ (unbiased) drifts within one batch; its second moment grows with the drift and the length.
# > - A method is what it does with $w$. ReSPO bounds it; on this course's draws its negative branch cuts the variance as the drift grows, and its positive branch alone raises it on most draws: it changes the target instead.
#
# ## Quick questions
#
# 1. At the first mini-batch of a fresh batch, what is $w$, and how do the methods of this course differ there?
#    <details><summary>answer</summary>$w=1$ ($\pi=\mu$, §3's check). Every method's $\phi(1)=1$, so all compute the plain policy gradient; they differ only from the second step on.</details>
# 2. With the paper's reuse, one epoch of 8 mini-batches, how many updates stale is the last mini-batch, and how many times is each response used?
#    <details><summary>answer</summary>7 updates stale; each response is used once (§2's `reuse_split(8, epochs=1)` printed (1, 8)).</details>
# 3. Why does giving an under-generated correct answer a coefficient near $e/2$ not reduce variance?
#    <details><summary>answer</summary>Under the exact weight it adds $w^2A^2\|\nabla\log\pi\|^2\approx0$; any larger coefficient adds more. What it changes is the target (§5, docs/math.md §4.1).</details>
#
# ## Sources
#
# From [docs/bibliography.md](../docs/bibliography.md): the clipped surrogate and trust region
# (PPO, Schulman et al., arXiv:1707.06347); group-relative advantages (GRPO, Shao et al.,
# arXiv:2402.03300); the exact trajectory weight with one reward at the end (per-decision importance
# sampling, Precup, Sutton and Singh, ICML 2000); the three policies $\mu$, $\pi_{old}$, $\pi$ (decoupled
# PPO, Hilton, Cobbe and Schulman, arXiv:2110.00641); ReSPO's kernel and its one-epoch reuse (Chen,
# Ban and Hsieh, arXiv:2609.35433).
