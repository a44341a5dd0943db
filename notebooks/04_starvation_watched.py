# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Starvation, watched
#
# **The question.** Core 01 said reuse makes $w$ drift and core 02 that each method is a
# coefficient of $w$. When a policy really learns, which correct answers end up low-$w$, what
# does each method then give them, and what does that cost?
#
# **The answer.** A step that pushes every correct answer up still lowers some of them: the
# positives share weights, and at first order a positive whose gradient points against the
# batch's push loses probability. Under reuse some end low-$w$ (how many is set more by the step's
# length than by this count, §2); the sequence clip gives each its $w$ and keeps under 0.6 of the
# positives' push at most steps, where the published ReSPO keeps more at every step. ReSPO gives an
# over-generated wrong answer less than $\phi=1$ and less than $\phi=w$; below $W=1$ it pushes a
# wrong answer down harder than on-policy, where the clip gives 0. In an exact planted case, under
# plain gradient steps that push lowers a rare long correct answer most under ReSPO; under Adam the
# order reverses.
#
# Words as in core 01's glossary: **drifted**, **under-generated** or **low-$w$** ($w<0.8$),
# **over-generated** ($w>1.2$), **starved**. §2-§3 check each mechanism sentence on two warm
# policies, printed side by side; §4 checks the kernel's curve (per batch: deeper/branches_explored
# §11); §5 reads the planted case of deeper/branches_explored §6.
#
# ## 1. Two warm policies, five batches each
#
# The digit-sum bandit of `toy/` (a target $t$; the policy writes digits 0–3 and an end token;
# reward 1 when the digits sum to $t$). Two policies are warmed up as `research/notebooks/starvation_controls`
# §1 warms its one, with warm-up seeds 1 and 2 (15 rollout batches of reuse, the reconstruction
# `respo_wtilt`, under `seq-mean-token-sum-norm` as its records were). From each we draw five
# batches of 32 prompts × 8 responses and take 8 full-batch sequence-clip steps on each batch
# (Adam, lr 0.01), recording every response's $\log w$ before each step.

# %%
import math

import matplotlib.pyplot as plt
import torch

from course import POLICY_BATCHES, clip_drift, confirm, draw_batch, per_response, response_gradients, warm_policy
from nano_respo.kernel import LossConfig, coefficients, sequence_log_weight
from toy.envs import DigitSum

torch.set_num_threads(1)
plt.rcParams.update({"figure.dpi": 100, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
LOW = math.log(0.8)
env = DigitSum()


# the warm-up, the batches and the clip steps: notebooks/course.py (deeper/branches_explored §11 reads them too)
policies = {seed: warm_policy(env, seed) for seed in POLICY_BATCHES}
batches = {(p, b): draw_batch(env, policies[p], b) for p, seeds in POLICY_BATCHES.items() for b in seeds}
drifts = {key: clip_drift(env, policies[key[0]], *batch) for key, batch in batches.items()}

# %% [markdown]
# ## 2. The first-order count: a push up lowers some positives
#
# A step $\Delta\theta$ changes response $j$'s $\log\pi$ by $\langle\nabla\log\pi_j,\Delta\theta\rangle$ to first
# order. Push the positives alone, $\Delta\theta=\eta\sum_{i:A_i>0}A_i\nabla\log\pi_i$: positive $j$ gains
# $\eta A_j\|\nabla\log\pi_j\|^2$ from its own term and $\eta\sum_{i\ne j}A_i\langle\nabla\log\pi_j,\nabla\log\pi_i\rangle$
# from the others, which is negative when its gradient points against theirs. The cell counts,
# per batch, the positives whose first-order change is negative (per-response gradients by
# autograd); the count against a tiny real step, batch by batch: [deeper/branches_explored §11](deeper/branches_explored.ipynb).

# %%
falling, low_after = {}, {}
for (p, b), (batch, adv) in batches.items():
    positive = adv > 0
    grads = response_gradients(env, policies[p], batch)
    falling[p, b] = positive & (grads @ ((adv * positive) @ grads) < 0)
    low_after[p, b] = positive & (sequence_log_weight(drifts[p, b][4], batch.old_logp, batch.mask) < LOW)
for p, seeds in POLICY_BATCHES.items():
    print(f"policy {p}, batches {seeds[0]}-{seeds[-1]}: positives falling at first order / positives "
          + " ".join(f"{int(falling[p, b].sum())}/{int((batches[p, b][1] > 0).sum())}" for b in seeds)
          + "; low-w positives after 4 clip steps " + " ".join(str(int(low_after[p, b].sum())) for b in seeds))
confirm("on every batch of both policies some positives fall at first order under a push on the positives alone",
        sum(int(f.sum()) == 0 for f in falling.values()), 1e-12)
confirm("row by row, policy 2's batch has fewer positives falling at first order than policy 1's and more low-w "
        "positives after 4 clip steps", sum(int(falling[2, b2].sum()) >= int(falling[1, b1].sum())
                                             or int(low_after[2, b2].sum()) <= int(low_after[1, b1].sum())
                                             for b1, b2 in zip(*POLICY_BATCHES.values())), 1e-12)

# %% [markdown]
# Interference at first order is there on every batch of both policies (the check), but how
# much differs: policy 1 lowers about a third of its positives, policy 2 a few (the counts printed).
# How many positives then end low-$w$ is not the first-order count: after 4 steps policy 2 has
# more of them, not fewer (the second check). Adam's first step is about lr on every weight whatever the gradient,
# beyond the linear regime at lr 0.01; `research/notebooks/starvation_controls` §2 runs the controls on
# policy 1 and finds that the step's length decides how many cross 0.8.
#
# ## 3. The symptom: what each method keeps of the positives' push
#
# At each step after the first, ask three kernels for their coefficient on the same drifted
# batch (for the token clip, GRPO's, the mean over the response's tokens) and sum $\phi_iA_i$ over
# the positives, as a share of $\sum A_i$, what $\phi=1$ would give: the share of the positives'
# push the method keeps.

# %%
KEPT_METHODS = {"seq_clip": "tab:blue", "respo": "tab:red", "grpo": "tab:green"}


kept = {}
for key, (batch, adv) in batches.items():
    positive = adv > 0
    for method in KEPT_METHODS:
        kept[key, method] = torch.tensor([((per_response(logp, batch, adv, method) * adv)[positive].sum()
                                           / adv[positive].sum()).item() for logp in drifts[key][1:]])
fig, axes = plt.subplots(1, 2, figsize=(9, 3), sharey=True)
for ax, p in zip(axes, POLICY_BATCHES):
    for method, colour in KEPT_METHODS.items():
        for b in POLICY_BATCHES[p]:
            ax.plot(range(2, 9), kept[(p, b), method], color=colour, alpha=0.6, label=method if b == POLICY_BATCHES[p][0] else None)
    ax.axhline(1, color="0.4", ls=":", lw=1)
    ax.set(xlabel="clip step", title=f"warm policy {p}: share of the positives' push kept")
axes[0].set_ylabel("Σ φA over positives / Σ A")
axes[0].legend(fontsize=7)
fig.tight_layout()
plt.show()
for p in POLICY_BATCHES:
    print(f"policy {p}, steps 2-8 on 5 batches: " + ", ".join(
        f"{m} {min(kept[(p, b), m].min().item() for b in POLICY_BATCHES[p]):.2f}-"
        f"{max(kept[(p, b), m].max().item() for b in POLICY_BATCHES[p]):.2f}" for m in KEPT_METHODS))
confirm("at every step on every batch of both policies ReSPO keeps more of the positives' push than the sequence clip",
        sum(int((kept[key, "respo"] <= kept[key, "seq_clip"]).sum()) for key in batches), 1e-12)
confirm("the sequence clip keeps under 0.6 of it at most steps of every batch of both policies",
        sum(int((kept[key, "seq_clip"] >= 0.6).sum()) > 3 for key in batches), 1e-12)

# %% [markdown]
# The clip gives a low-$w$ positive its $w$ and an over-generated one 0, so it keeps under 0.6 of
# the push at most steps on both policies (the second check; the ranges printed). ReSPO keeps
# more at every step of every batch (the first check): its positive branch
# $\phi_+=\frac{1+W}2e^{1-W}$ is above 1 for every $W<1$ (core 02). The token clip keeps much of it
# too, for another reason: each token's ratio drifts little, so few tokens leave the band. What a
# larger own term buys over many steps: `research/notebooks/starvation_controls` §4.
#
# ## 4. The negative branch, on both sides of $W=1$
#
# The paper's abstract gives $\phi_-$ one job: it "suppresses heavily over-generated negative
# responses". A wrong answer the learner now writes more often than the sampler did ($w>1.2$) is
# the one an update should push down. Two references: $\phi=1$ (ignore $w$) and $\phi=w$ (the exact
# importance weight). The sequence clip gives such a negative $w$ (its pessimistic side has no
# ceiling for $A<0$). ReSPO's negative branch $\phi_-(W)=\sqrt W\,e^{2(1-\sqrt W)}$ is below both
# for every $W>1$, and above $W$ for every $W<1$ (its peak, $e/2$ at $W=1/4$, is on the
# under-generated side):

# %%
def negative_coefficient(method, log_w):
    """The kernel's coefficient of a one-token wrong answer (A = -1) whose weight is exp(log_w)."""
    phi, _ = coefficients(log_w[:, None], torch.zeros(len(log_w), 1, dtype=log_w.dtype), -torch.ones(len(log_w)),
                          torch.ones(len(log_w), 1, dtype=torch.bool), LossConfig(method=method))
    return phi[:, 0]


grid = torch.linspace(-6, 6, 12001, dtype=torch.float64)
below = {m: negative_coefficient(m, grid) for m in ("respo", "seq_clip", "vespo")}
phi_minus, over, under = below["respo"], grid > 1e-9, grid < -1e-9
confirm("phi_- < 1 and phi_- < W for every W > 1 (log W up to 6)",
        max(0.0, (phi_minus[over] - 1).max().item(), (phi_minus[over] - grid[over].exp()).max().item()), 1e-12)
confirm("phi_- > W for every W < 1 (log W down to -6): not below the exact weight on the under-generated side",
        max(0.0, (grid[under].exp() - phi_minus[under]).max().item()), 1e-12)
band, rising = (grid.exp() > 0.05) & (grid.exp() < 0.999), (grid.exp() > 0.25) & (grid.exp() < 1)
at_quarter = {m: negative_coefficient(m, torch.tensor([math.log(0.25)], dtype=torch.float64)).item() for m in below}
confirm("phi_- > 1 for every W in (0.05, 1)", max(0.0, (1 - phi_minus[band]).max().item()), 1e-12)
confirm("phi_- peaks at W = 1/4 with e/2, rising as W falls from 1 to there; the clip gives 0 there, VESPO under 0.1",
        max(abs(at_quarter["respo"] - math.e / 2), abs(grid[phi_minus.argmax()].exp().item() - 0.25),
            max(0.0, phi_minus[rising].diff().max().item()), at_quarter["seq_clip"], max(0.0, at_quarter["vespo"] - 0.1)),
        1e-3)
fig, ax = plt.subplots(figsize=(6.5, 3))
for m, colour in (("respo", "tab:red"), ("seq_clip", "tab:blue"), ("vespo", "tab:brown")):
    ax.plot(grid.exp(), below[m], color=colour, label=m)
ax.plot(grid.exp(), grid.exp(), ":", color="0.3", label="φ = W (exact)")
ax.axhline(1, color="0.6", ls="--", lw=1, label="φ = 1 (W ignored)")
ax.axvspan(0.8, 1.2, color="0.9", label="clip band")
ax.set(xscale="log", xlim=(0.01, 8), ylim=(0, 2.5), xlabel="W", ylabel="coefficient of a negative",
       title="the negative branch: ReSPO, the sequence clip, VESPO and both references")
ax.legend(fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# ReSPO pushes over-generated negatives down less than either reference (the first check; on the
# warm policies' batches: [deeper/branches_explored §11](deeper/branches_explored.ipynb)): that is the
# suppression the abstract names, a bound on how much an over-generated failure weighs, not a harder
# push. It is no trust region (docs/math.md §2): the step moves their $W$ back towards 1.
#
# The shape does more than the abstract says. Below $W=1$ a negative step lowers $W$ further, into
# the cell where the clip's trust region gives 0 ($W<0.8$). There $\phi_-$ is above 1 (the third
# check), a harder push than on-policy, with its peak $e/2$ at $W=1/4$; VESPO's negative branch
# $W^3e^{-2(W-1)}$ nearly zeroes the same cell (the last check, the figure). So below $W=1$ the
# published $\phi_-$ removes the clip's trust region for negatives; only its fall to 0 as $W\to0$
# (below 0.05) bounds the push. As a wrong answer's $W$ falls from 1 to 1/4 its coefficient rises
# (the curve, the last check), so each step
# pushes it harder than the last until it passes the peak. What that costs
# depends on what the wrong answer shares with a correct one and on the optimizer: §5 plants a case
# where it costs a rare correct answer under plain gradient steps, and not under Adam. On the drift
# study's runs, post hoc, the clip's negative branch in its place gained early reward on both CPU
# settings (core 05 §6 prints it); the reuse study pre-registered that swap as its claim B (research/REUSE.md)
# but stopped at its manipulation check before comparing any method (core 05 §6).
#
# A real batch of the tiny Qwen3, read as text: [deeper/branches_explored §10](deeper/branches_explored.ipynb).
#
# ## 5. The consequence, exactly: a rare long correct answer (plain steps lower it most under ReSPO; Adam reverses it)
#
# [deeper/branches_explored §6](deeper/branches_explored.ipynb) plants the mechanism with nothing
# sampled: a rare long correct answer $y^*$ sharing its first token with a short correct one and
# with wrong answers, each method taking 16 steps on its exact expected gradient. Under plain
# gradient steps $y^*$ ends lower under ReSPO than under the clip, though ReSPO gives it more than 1:
# its negative branch keeps pushing down, with $\phi_->1$ below $W=1$, the wrong answers sharing
# $y^*$'s first token, and that token with them. Under Adam, which every trainer here and the paper
# use, the order reverses, again through the negatives' coefficients. Each sentence is a check
# there, in one planted space at one learning rate per optimizer: a mechanism, not how often it
# arises in training.
#
# > **What to remember**
# > - A push on the correct answers lowers some of them at first order, through shared weights (every batch of both policies); how many end low-$w$ depends on the step's length.
# > - The sequence clip gives a low-$w$ positive its $w$ and keeps under 0.6 of the positives' push at most steps; ReSPO's $\phi_+>1$ below $W=1$ keeps more at every step.
# > - ReSPO's $\phi_-$ bounds an over-generated negative's weight (below $\phi=1$ and $\phi=w$), no harder push; below $W=1$ it pushes harder than on-policy (peak $e/2$ at $W=1/4$) where the clip's trust region gives 0 (§4).
# > - In the planted case that push, on wrong answers sharing a rare correct answer's prefix, lowers it most under plain gradient steps; under Adam the order reverses (§5).
#
# ## Quick questions
#
# 1. Why can a step that pushes every positive up lower one of them?
#    <details><summary>answer</summary>Its first-order change is its own term, $\eta A_j\|\nabla\log\pi_j\|^2>0$, plus the others', $\eta\sum_{i\ne j}A_i\langle\nabla\log\pi_j,\nabla\log\pi_i\rangle$, which is negative when its gradient points against the batch's (§2).</details>
# 2. A negative has $w=4$. What do the sequence clip, $\phi=1$ and ReSPO give it?
#    <details><summary>answer</summary>The clip 4 (no ceiling on its pessimistic side for $A<0$), $\phi=1$ gives 1, ReSPO $\phi_-(4)=2e^{-2}\approx0.27$ (§4).</details>
# 3. Is ReSPO's negative coefficient below the exact weight $w$ for every negative?
#    <details><summary>answer</summary>No: only for $w>1$. For $w<1$ it is above $w$; its peak, $e/2$ at $W=1/4$, is on the under-generated side (§4's second check).</details>
#
# ## Sources
#
# The published kernel (Chen, Ban and Hsieh, arXiv:2609.35433; docs/math.md §3); the sequence
# clip and GSPO's sequence ratio (Zheng et al., arXiv:2507.18071); GRPO's token clip (Shao et al.,
# arXiv:2402.03300); the controls and records behind each section: `research/notebooks/starvation_controls`,
# `research/notebooks/tiny_qwen3_records`, `deeper/branches_explored` §6 and §10 (docs/bibliography.md).
