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
# repository root, then `jupyter lab notebooks/` (CPU only).
#
# Every coefficient below comes from `nano_respo.kernel`; a line starting with ✓ is a check
# that raised if the numbers disagreed. Deeper material is one link away, in
# `notebooks/deeper/` and the research wing's `research/notebooks/`.
#
# ## 1. The policy gradient working
#
# The toy (`toy/`): a small MLP writes digits 0-3 until an end token, and the verifier gives
# reward 1 when the digits sum to the prompt's target. Each rollout batch is 16 prompts × 8
# responses; the advantage $A$ of a response is its reward minus its group's mean. Here every
# batch feeds exactly one optimizer step, so the policy that sampled the batch is the policy
# being trained: the plain policy gradient $\mathbb E_\pi[A\,\nabla\log\pi]$. One run from scratch
# (seed 0), with a copy of the policy kept after batch 20 for §3:

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
kept = {}


def keep_batch_20():
    keep_batch_20.done += 1
    if keep_batch_20.done == 20:
        kept["policy"] = copy.deepcopy(policy)    # the policy after 20 batches, for §3


keep_batch_20.done = 0
run = train(Job(env="seq", method="no_is", reuse=1, seed=0, lr=0.02, iterations=300,
                loss={"agg": "token-mean"}),     # LossConfig's default aggregation (the toy pins its records' one)
            progress=keep_batch_20, policy=policy)
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
# The reward climbs from almost nothing to almost every answer right, on targets it never
# trained on too. This is one run: it shows the loop works, not how often the toy learns at this
# learning rate. The toy's RL runs are deterministic on a given machine; on another CPU setting
# the rounding can differ, so the numbers above may differ there (the check must still hold).
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
# The loop, as `toy/train.py` and `nano_respo/trainer.py` run it:
#
# ```python
# episodes = env.sample(policy, prompts, generator)      # mu: log mu(y_t) kept as episodes.old_logp
# adv, _ = group_advantages(env.reward(episodes), 8)     # once per batch
# for epoch in range(epochs):
#     for rows in minibatch_order(n_groups, 8, per_epoch, generator):
#         loss, stats = policy_loss(env.log_probs(policy, episodes[rows]), episodes.old_logp[rows], ...)
#         loss.backward(); optimizer.step(); optimizer.zero_grad()
# ```
#
# ## 3. Three policies on one timeline, and $w$ drifting within one batch
#
# Three policies take part in one iteration (docs/math.md §7):
#
# - $\mu$, the **behaviour policy**: the one that sampled the batch. Its log-probs are stored while
#   sampling (`old_logp`).
# - $\pi_{old}$: the learner at the start of the updates on this batch. In this toy, as in any
#   synchronous loop with the same numerics, $\pi_{old}=\mu$. A stale sampler (`--lag k`, the
#   learner of $k$ iterations ago) or other numerics (a bf16 inference engine, an MoE's router)
#   make $\mu\ne\pi_{old}$; core notebook 05 takes those apart.
# - $\pi$: the learner now, moved by every optimizer step.
#
# Per response the **sequence weight** is $w=\pi(y|x)/\mu(y|x)=\prod_t\pi(y_t|\cdot)/\mu(y_t|\cdot)$. At the
# first step of a fresh batch $w=1$ for every response; then it drifts. The words this course
# uses for where a response's $w$ ends, with the clip band $\epsilon=0.2$:
#
# | word | meaning |
# |---|---|
# | **drifted** | $w\ne1$: $\pi$ has moved on this response since $\mu$ wrote it |
# | **under-generated**, or **low-$w$** | $w<1-\epsilon$: $\pi$ writes it less often than $\mu$ did |
# | **over-generated** | $w>1+\epsilon$: $\pi$ writes it more often than $\mu$ did |
# | **starved** | an under-generated correct answer ($A>0$) that a method gives a vanishing coefficient |
#
# Below, the run's policy after batch 20 takes one new batch and reuses it as the paper does,
# one epoch of 8 mini-batches of ReSPO's loss (a fresh Adam at the run's learning rate). Before
# each step the cell records $\log w$ of *every* response of the batch; the right panel marks the
# mini-batch each step uses.

# %%
policy = kept["policy"]
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

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 3.2), gridspec_kw={"width_ratios": (1, 1.3)})
ax0.axis("off")
ax0.set(xlim=(0, 10), ylim=(0, 4), title="one iteration, left to right")
ax0.annotate("", xy=(9.9, 2.0), xytext=(0.1, 2.0), arrowprops=dict(arrowstyle="->"))
for x, y, label in ((0.9, 2.4, "μ samples the batch\n(--lag k: the learner\nof k iterations ago)"),
                    (3.4, 0.9, "π_old: the learner\nwhen updates start"),
                    (6.4, 2.4, "π: the learner after\nk − 1 mini-batch steps"), (9.2, 0.9, "next\nbatch")):
    ax0.plot([x], [2.0], "o", color="k")
    ax0.text(x, y, label, ha="center", va="bottom" if y > 2 else "top", fontsize=8)
ax0.annotate("", xy=(8.6, 3.7), xytext=(3.4, 3.7), arrowprops=dict(arrowstyle="<->", color="tab:red"))
ax0.text(6.0, 3.8, "one epoch: mini-batches 1 … N", ha="center", fontsize=8, color="tab:red")
colour = torch.where(adv > 0, 0, torch.where(adv < 0, 1, 2))
names = ("A > 0", "A < 0", "A = 0 (no signal)")
for c, (name, col) in enumerate(zip(names, ("tab:red", "tab:blue", "0.75"))):
    for k in range(len(log_w)):
        pick = colour == c
        jitter = (torch.arange(int(pick.sum())) % 7 - 3) * 0.04
        ax1.scatter(k + 1 + jitter, log_w[k, pick].exp(), s=5, color=col, alpha=0.35, label=name if k == 0 else None)
for k, rows in enumerate(used):
    ax1.scatter(torch.full((len(rows),), k + 1.35), log_w[k, rows].exp(), s=9, marker="<", color="k",
                label="the mini-batch this step uses" if k == 0 else None)
ax1.axhspan(0.8, 1.2, color="0.88", zorder=0)
ax1.set(yscale="log", xlabel="optimizer step k on this batch (mini-batch k)", ylabel="w = π/μ before the step")
ax1.legend(fontsize=7, loc="lower left", ncol=2)
fig.tight_layout()
plt.show()
at_use = [log_w[k, rows].exp() for k, rows in enumerate(used)]
print("w of the responses each step uses, lowest and highest:")
print("  " + "  ".join(f"k={k + 1}: {v.min():.2g}-{v.max():.2g}" for k, v in enumerate(at_use)))
confirm("at the first step every w is 1 (mu = pi)", log_w[0].abs().max(), 1e-12)
confirm("on this batch every later step uses some response whose w lies outside the clip band [0.8, 1.2]",
        max(0.0, *(math.log(1.2) - v.log().abs().max().item() for v in at_use[1:])), 1e-12)

# %% [markdown]
# On this batch, the first mini-batch sees $w=1$ exactly (the first check): at that step every
# method in this course computes the plain policy gradient. Every later step uses responses that
# have drifted out of the grey clip band, some far below it and some far above (the printed
# ranges, the second check). Nothing was lagged or quantised, so $\mu=\pi_{old}$ here: the only thing
# between sampling and step $k$ is the $k-1$ updates. These ranges come from one batch of one run
# and may differ on another machine, like §1's.
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
theta = theta_mu + 0.8 * space.random_theta(g)
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
# multiplicatively with the length (`deeper/derivation_details` §1 derives the recursion, checks it
# and prints $\mathbb E_\mu[w^2]$ at three drifts). Methods replace $w$ by a coefficient $\phi(w)$ (core 02
# lists them). The sequence clip zeroes one tail per sign; ReSPO bounds $\phi$ by $e/2$ with one
# branch per sign of $A$.
#
# Does bounding $\phi$ cut the second moment here? Replace $w$ by ReSPO's $\phi$ on one sign at a
# time, the exact $w$ on the other, on 60 fresh draws of $(\mu,\pi)$ at two drifts (the logits of $\pi$ are
# $\mu$'s moved by drift × $\mathcal N(0,1)$), and compare each second moment with the exact weight's:

# %%
def second_moments(seed: int, drift: float) -> tuple[float, float, float]:
    """E_mu[phi^2 A^2 |grad log pi|^2] / the exact weight's, with ReSPO's phi on A > 0 only, A < 0 only, both."""
    gen = torch.Generator().manual_seed(seed)
    theta_mu = space.random_theta(gen)
    theta = theta_mu + drift * space.random_theta(gen)
    log_mu = space.log_probs(theta_mu)
    mu = log_mu.exp()
    A = reward - (mu * reward).sum()
    sq_norm = torch.autograd.functional.jacobian(space.log_probs, theta).pow(2).sum(-1)    # |grad log pi(y)|^2
    w = (space.log_probs(theta) - log_mu).exp()
    phi = respo_coefficient(w.log(), A > 0)
    moment = [(mu * (c * A) ** 2 * sq_norm).sum() for c in (w, torch.where(A > 0, phi, w), torch.where(A > 0, w, phi), phi)]
    return tuple((m / moment[0]).item() for m in moment[1:])


drifts = (0.8, 3.2)
ratios = {d: torch.tensor([second_moments(seed, d) for seed in range(1, 61)]) for d in drifts}   # [60, 3]
print("draws (of 60) where ReSPO's phi cuts (<) or raises (>) the exact weight's second moment:")
print(f"  {'drift':>5} {'phi_+ only: <':>14} {'>':>3} {'phi_- only: <':>14} {'>':>3} {'both: <':>8}")
for d, r in ratios.items():
    print(f"  {d:>5} {int((r[:, 0] < 1).sum()):>14} {int((r[:, 0] > 1).sum()):>3} {int((r[:, 1] < 1).sum()):>14} "
          f"{int((r[:, 1] > 1).sum()):>3} {int((r[:, 2] < 1).sum()):>8}")
fig, axes = plt.subplots(1, 2, figsize=(8, 3), sharex=True, sharey=True)
for ax, (d, r) in zip(axes, ratios.items()):
    ax.scatter(r[:, 0], r[:, 1], s=12, color="tab:purple")
    ax.axhline(1, color="0.4", lw=0.8)
    ax.axvline(1, color="0.4", lw=0.8)
    ax.set(xscale="log", yscale="log", title=f"drift {d}: one dot per draw", xlabel="φ₊ only / exact")
axes[0].set_ylabel("φ₋ only / exact")
fig.tight_layout()
plt.show()
counts = {d: [int((r[:, k] < 1).sum()) for k in range(3)] for d, r in ratios.items()}
confirm("at drift 0.8 neither branch alone cuts the second moment on most draws; at drift 3.2 the negative branch "
        "alone does, on more draws than at 0.8",
        max(0.0, counts[0.8][0] - 30, counts[0.8][1] - 30, 31 - counts[3.2][1], counts[0.8][1] - counts[3.2][1] + 1), 1e-12)
confirm("the positive branch alone raises it on most draws at both drifts",
        max(0.0, *(counts[d][0] - 29 for d in drifts)), 1e-12)

# %% [markdown]
# Read the counts, not a single draw. At the smaller drift neither branch cuts the exact weight's
# second moment on most draws. At the larger one the negative branch alone cuts it on most
# draws (the checks; the dots below the horizontal line in the right panel), and the positive
# branch alone still raises it on most. The positive branch is not a variance cut: a low-$w$
# positive adds $w^2\approx0$ to the exact weight's second moment, and ReSPO gives it up to $e/2$.
# What it buys is a different target, one that does not let $\pi$ drop a success $\mu$ found
# (docs/math.md §4.1; `deeper/derivation_details` §1 splits one draw's second moment by cell and
# checks the target). Whether that pays depends on the rest of the update: `deeper/branches_explored`
# §6 builds an exact case where, under plain gradient steps, it does not. So
# the choice of $\phi$ is a choice of bias and of target, not only of variance: core 02 lays
# every method's choice side by side.
#
# > **What to remember**
# > - Reusing a batch makes every step after the first off-policy: the $k$-th mini-batch is $k-1$ updates stale, and $w=\pi/\mu$ drifts within one batch.
# > - The exact correction is $w$ (unbiased); its second moment grows with the drift and the length.
# > - A method is what it does with $w$. ReSPO bounds it; on this course's draws its negative branch cuts the variance as the drift grows, and its positive branch changes the target rather than cutting variance.
#
# ## Quick questions
#
# 1. At the first mini-batch of a fresh batch, what is $w$, and how do the methods of this course differ there?
#    <details><summary>answer</summary>$w=1$ ($\pi=\mu$, §3's check). Every method's $\phi(1)=1$, so all compute the plain policy gradient; they differ only from the second step on.</details>
# 2. With the paper's reuse, one epoch of 8 mini-batches, how many updates stale is the last mini-batch, and how many times is each response used?
#    <details><summary>answer</summary>7 updates stale; each response is used once (§2's `reuse_split(8, epochs=1)` printed (1, 8)).</details>
# 3. Why does giving an under-generated correct answer a coefficient near $e/2$ not reduce variance?
#    <details><summary>answer</summary>Under the exact weight it adds $w^2A^2\|\nabla\log\pi\|^2\approx0$; any larger coefficient adds more. §5's counts show the positive branch alone raising the second moment on most draws. What it changes is the target (docs/math.md §4.1).</details>
#
# ## Sources
#
# From [docs/bibliography.md](../docs/bibliography.md): the clipped surrogate and trust region
# (PPO, Schulman et al., arXiv:1707.06347); group-relative advantages (GRPO, Shao et al.,
# arXiv:2402.03300); the exact trajectory weight with one reward at the end (per-decision importance
# sampling, Precup, Sutton and Singh, ICML 2000); the three policies $\mu$, $\pi_{old}$, $\pi$ (decoupled
# PPO, Hilton, Cobbe and Schulman, arXiv:2110.00641); ReSPO's kernel and its one-epoch reuse (Chen,
# Ban and Hsieh, arXiv:2609.35433). The loop above is `toy/train.py`'s; `nano_respo/trainer.py` runs
# the same one on the tiny Qwen3.
