# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Deeper · The derivation in detail: the exact gradient, the clip, and VESPO's family
#
# **Where the core links here.** Core notebook 01 (reuse makes data off-policy) sends its
# sentence on the exact weight's variance growing with the length to §1, and its
# one-branch-at-a-time count over 60 draws to §8. Core 02 (every
# method is a coefficient) sends its worked group's steps to §0 and the clip table's derivation
# case by case, with the clip's surrogate beside ReSPO's, to §2. Core 03 (where ReSPO's kernel
# comes from) sends the baseline and the change of target to §1, the steps between its results
# to §9 (the power mean and the tilt solved numerically, the proposals on one draw, the splice)
# and §10 (the slopes that fix the constants), ReSPO's surrogate to §6, and its credit to VESPO's
# construction to §3-§7: the power surrogate (§3), the α-divergence identity (§4), the
# variational proposal (§5), the closed forms of both families (§6) and the reconstruction's
# branches (§7). This notebook was course notebook 01 before the paper was public; it keeps its
# controls and side topics.
#
# A derivation to follow with pen and paper. Each step is one claim, the one-line reason
# for it, and a numerical check underneath (a line that starts with ✓). The math is
# docs/math.md §1-§4 and §8; every coefficient comes from `nano_respo.kernel`, nothing here
# re-implements the loss. Two families appear, each by its name: ReSPO, the published kernel
# `respo` (docs/math.md §3), and the power-tilt family $w^{\alpha}e^{-\lambda(w-1)}$ that VESPO uses
# (`vespo`) and that this project's reconstruction from the abstract used (`respo_wtilt`,
# docs/math.md §8). A number in the text is one a code cell printed: "printed above"
# points at it. Two passages marked **Optional depth** (§4's KL limits, §6's closed forms) can
# be skipped on a first reading.
#
# ## 0. Start here
#
# **What you need, and what it is used for.**
#
# | prerequisite | used for |
# |---|---|
# | the policy gradient $\nabla\mathbb E_\pi[A]=\mathbb E_\pi[A\nabla\log\pi]$, and why a baseline is free on-policy ($\mathbb E_\pi[\nabla\log\pi]=\sum_y\nabla\pi=0$) | §1: the exact off-policy gradient, and why the baseline is *not* free once $\phi\ne w$ |
# | PPO's clipped surrogate $\min(rA,\mathrm{clip}(r,1\pm\epsilon)A)$ | §2: the clip's surrogate beside ReSPO's |
# | KL divergence and f-divergences $D_f(\pi\|\mu)=\mathbb E_\mu[f(\pi/\mu)]$, $f$ convex, $f(1)=0$ | §4: Amari's α-divergence |
# | Lagrange multipliers for a constrained minimum | §5: VESPO's variational proposal $Q^*$ |
# | Adam (a per-weight step of about the learning rate, whatever the gradient's scale) | §0's picture: $R$ steps move $w$ even when the coefficients are small |
#
# **Notation.** A prompt $x$, a response $y$, the behaviour policy $\mu$ that sampled it
# (the policy when the rollouts were drawn), the current policy $\pi_\theta$, the sequence
# weight $w=\pi_\theta(y|x)/\mu(y|x)$ and an advantage $A(y)$ (reward minus the group mean).
# Every method in this project is a **coefficient** $\phi$ on the policy gradient
# (docs/math.md §1):
# $$g=\mathbb E_{y\sim\mu}\big[\phi\,A\,\nabla\log\pi_\theta(y|x)\big].$$
# Core notebook 01 trains the digit-sum toy from scratch and follows $w$ through one batch of the
# paper's one-epoch reuse; this section draws one iteration on a space small enough to enumerate.
#
# **One RL iteration, drawn.** The sampler $\mu$ draws a group of responses and the verifier
# scores them; then the *same* batch feeds $R$ optimizer steps (`--reuse R`). At the first
# step $\pi_\theta=\mu$ and every $w=1$; each step moves $\pi_\theta$, so every response's $w$
# drifts, and by the last step each one sits in one cell of the clip table. With
# `--lag k` the sampler is the learner of $k$ iterations ago, so $w\ne1$ already at the first
# step. In `train.py` the $R$ steps are epochs × mini-batches of whole groups, the advantages
# computed once for the batch (core notebook 01 writes the loop out). The picture below is
# computed, not sketched: a group of 4 responses on the 27-response space of §1, $R=8$ Adam
# steps of ReSPO's loss (the published kernel) on the whole group, so every step reuses every
# response (several epochs of one mini-batch, not the paper's one epoch); the right panel's sampler is a stand-in for a
# stale one (its parameters moved at random), not a trained older learner.

# %%
import math
from types import SimpleNamespace

import matplotlib.pyplot as plt
import torch

from course import SequenceSpace, branch_slope, confirm, divergence, reuse_one_group
from nano_respo.kernel import (METHOD_TABLE, LossConfig, coefficients, policy_loss, power_mean_log, power_tilt,
                               respo_branch, respo_coefficient)
from nano_respo.surrogate import phi_curve, power_tilt_surrogate, respo_surrogate  # phi_curve: phi read back from the loss

torch.set_num_threads(1)
plt.rcParams.update({"figure.dpi": 100, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})

space = SequenceSpace(vocab=3, length=3)              # 27 responses of 3 tokens over 3 symbols
g = torch.Generator().manual_seed(0)
theta_mu = space.random_theta(g)
reward = (space.seqs.sum(-1) >= 4).double()          # [N] the verifier: 1 when the tokens sum to at least 4


def one_iteration(theta_sampler, theta_learner, picks, steps):
    """R Adam steps of ReSPO's loss on one group sampled by theta_sampler: log w per step, A, the last step's weights."""
    return reuse_one_group(space, reward, theta_sampler, theta_learner, picks, steps)


picks = torch.tensor([14, 13, 12, 10])               # 112 is correct; 111, 110 share its prefix, 101 does not
R = 8
fresh, adv4, theta_end = one_iteration(theta_mu, theta_mu, picks, R)
theta_older = theta_mu - 0.5 * space.random_theta(g)  # a stand-in for an older learner: the --lag sampler
lagged, _, _ = one_iteration(theta_older, theta_mu, picks, R)

fig = plt.figure(figsize=(10, 3.6))
ax0 = fig.add_axes([0.01, 0.05, 0.27, 0.9])
ax0.axis("off")
boxes = [(0.5, 0.9, "sampler μ\n(the learner now, or\n--lag k iterations ago)"),
         (0.5, 0.62, "group of G responses y ~ μ\nlog μ(y) kept"),
         (0.5, 0.36, "verifier: r ∈ {0, 1}\nA = r − mean of the group"),
         (0.5, 0.1, "R optimizer steps on this batch\n(--reuse R): π moves, w = π/μ drifts")]
for x0, y0, text in boxes:
    ax0.text(x0, y0, text, ha="center", va="center", fontsize=8,
             bbox=dict(boxstyle="round", fc="0.95", ec="0.5"))
for (_, y_from, _), (_, y_to, _) in zip(boxes, boxes[1:]):
    ax0.annotate("", xy=(0.5, y_to + 0.09), xytext=(0.5, y_from - 0.09), arrowprops=dict(arrowstyle="->"))
ax0.annotate("", xy=(0.04, 0.9), xytext=(0.04, 0.1), arrowprops=dict(arrowstyle="->", color="0.4"))
ax0.text(0.0, 0.5, "next iteration", fontsize=7, rotation=90, va="center", ha="right", color="0.4")


def cell(log_w: float, positive: bool, eps: float = 0.2) -> str:
    """The cell of the clip table (docs/math.md §2) a response ends in."""
    w_end = math.exp(log_w)
    if 1 - eps <= w_end <= 1 + eps:
        return "inside: φ = w"
    if positive:
        return "low w: φ = w, starved" if w_end < 1 - eps else "high w: φ = 0"
    return "low w: φ = 0" if w_end < 1 - eps else "high w: φ = w, unbounded"


panels = ((fresh, "fresh sampler (--lag 0)"), (lagged, "sampler moved at random (--lag stand-in)"))
for k, (trace, title) in enumerate(panels):
    ax = fig.add_axes([0.36 + 0.33 * k, 0.14, 0.28, 0.74])
    ax.axhspan(0.8, 1.2, color="0.88", zorder=0)
    for i in range(len(picks)):
        positive = bool(adv4[i] > 0)
        ax.plot(range(1, R + 1), trace[:, i].exp(), "o-", ms=3, color="tab:red" if positive else "tab:blue",
                label=f"{'A > 0' if positive else 'A < 0'} → {cell(trace[-1, i].item(), positive)}")
    ax.set(yscale="log", xlabel="optimizer step on the same batch")
    ax.set_title(title + "\ngrey: the clip band", fontsize=8)
    ax.yaxis.set_major_formatter(plt.ScalarFormatter())
    ax.yaxis.set_minor_formatter(plt.NullFormatter())
    ax.set_yticks([0.25, 0.5, 1, 2, 4])
    ax.legend(fontsize=6.5, loc="upper left", title="sign → cell at the last step", title_fontsize=6.5)
    if k == 0:
        ax.set_ylabel("w = π/μ")
plt.show()
confirm("with a fresh sampler every w is 1 at the first step", fresh[0].abs().max(), 1e-12)
print("first-step w with the randomly moved sampler:", " ".join(f"{v:.2f}" for v in lagged[0].exp().tolist()))
for i, y in enumerate(picks.tolist()):
    name = "".join(map(str, space.seqs[y].tolist()))
    print(f"response {name} (A = {adv4[i]:+.2f}): w at the last step {fresh[-1, i].exp():.2f} fresh, "
          f"{lagged[-1, i].exp():.2f} moved sampler -> {cell(fresh[-1, i].item(), bool(adv4[i] > 0))} (fresh)")

# %% [markdown]
# Read the left panel with the printout, on this draw: the correct response's $w$ rises (it is
# being pushed up) and the wrong response 101 falls far, while the two wrong responses that share
# the correct one's prefix 11 fall much less. The policy is tabular, so 112, 111 and 110 read the
# same parameter rows for their first two tokens; the next cell splits each last-step $\log w$
# into the part on those two tokens and the part on the last one, and checks that the two wrong
# responses rose on the shared prefix while their own last token fell: the push on 112 lifts its
# neighbours too. Where each lands in the clip table (docs/math.md §2, core notebook 02) is
# printed above; the right panel starts from the first-step weights printed above instead of 1.

# %%
last_logp = space.token_log_probs(theta_end)[picks].detach()                    # [4, 3] the policy at the last step
split = last_logp - space.token_log_probs(theta_mu)[picks].detach()             # [4, 3] per-token log-ratios
for i, y in enumerate(picks.tolist()):
    print(f"response {''.join(map(str, space.seqs[y].tolist()))}: log w at the last step {split[i].sum():+.2f} = "
          f"{split[i, :2].sum():+.2f} on its first two tokens {split[i, 2]:+.2f} on its last")
confirm("111 and 110 rose on the prefix 11 they share with 112, and fell on their own last token",
        max(0.0, -split[1:3, :2].sum(-1).min().item(), split[1:3, 2].max().item()), 1e-12)

# %% [markdown]
# Everything below is about what a method should do with these drifted weights.
#
# ## 1. The exact off-policy gradient, and why something must give
#
# The objective is the expected advantage under the current policy, $J(\theta)=\mathbb E_{\pi_\theta}[A]$.
#
# **Claim.** $\nabla J=\mathbb E_{\pi}[A\,\nabla\log\pi]=\mathbb E_{\mu}[w\,A\,\nabla\log\pi]$.
# *Reason:* the first is $\nabla\pi=\pi\nabla\log\pi$; the second multiplies and divides each
# term of $\sum_y\pi(y)A\nabla\log\pi$ by $\mu(y)$. So $w$ is the *exact* correction. Check it on
# the 27-response space: a tabular autoregressive policy, $\pi$ a drifted copy of $\mu$.

# %%
drift_direction = space.random_theta(g)
theta = (theta_mu + 0.8 * drift_direction).requires_grad_(True)
log_mu = space.log_probs(theta_mu)                    # [N]
mu = log_mu.exp()
baseline = (mu * reward).sum()                        # b = E_mu[r]
A = reward - baseline                                 # [N] advantage: reward minus its mean under mu

log_pi = space.log_probs(theta)                       # [N], differentiable
(grad_on,) = torch.autograd.grad((log_pi.exp() * A).sum(), theta)       # grad of E_pi[A]
w = (log_pi - log_mu).exp().detach()
log_pi = space.log_probs(theta)                       # a fresh graph for the second gradient
(grad_off,) = torch.autograd.grad((mu * w * A * log_pi).sum(), theta)   # E_mu[w A grad log pi]
confirm("grad E_pi[A] = E_mu[w A grad log pi]", (grad_on - grad_off).abs().max(), 1e-12)
print(f"w over the 27 responses: {w.min():.2f} to {w.max():.2f}; baseline b = E_mu[r] = {baseline:.3f}")

# %% [markdown]
# **Claim (the baseline is free only for the unreshaped weight).** Subtracting $b$ from the reward
# changes the expected gradient by $-b\,\mathbb E_\mu[\phi\nabla\log\pi]$, which is $0$ for
# $\phi=w$ (and for any constant multiple $\phi=c\,w$; per token, for $\phi_t=r_t$, below), and in
# general not $0$ for any other $\phi$.
# *Reason:* $\mathbb E_\mu[w\nabla\log\pi]=\sum_y\nabla\pi=\nabla1=0$; for a $\phi$ that is not a multiple of $w$
# the sum $\sum_y\mu\phi\nabla\log\pi$ has no such cancellation (at $\phi=1$ it is $\mathbb E_\mu[\nabla\log\pi]$,
# the gradient of $-\mathrm{KL}(\mu\|\pi)$, which for a tabular policy, every prefix with its own
# logits, is zero only at $\pi=\mu$).
#
# **Where the baseline moves a method, exactly.** A token-level method's unclipped coefficient is
# the token ratio $r_t$, and $\mathbb E_\mu[\sum_tr_t\nabla\log\pi_t]=0$ too (at each position
# $\sum_{y_t}\mu_tr_t\nabla\log\pi_t=\sum_{y_t}\nabla\pi_t=0$). So the baseline's term is
# $-b\,\mathbb E_\mu[\sum_t(\phi_t-w)\nabla\log\pi_t]=-b\,\mathbb E_\mu[\sum_t(\phi_t-r_t)\nabla\log\pi_t]$: it comes only
# from where the coefficient departs from $w$ (a sequence method) or from $r_t$ (a token method).
# A clip whose band is inactive writes $w$ or $r_t$, so the baseline leaves it alone; ReSPO's
# $\phi\ne w$ wherever $w\ne1$. Check on the 27-response space, every method of the kernel, at
# §1's drift and at the same drift scaled to 0.05: the expected gradient with $A=r-b$ against the
# one with $A=r$ (per-token gradients by autograd, coefficients from `kernel.coefficients`), and
# how far each coefficient is from the nearer of $w$ and $r_t$.

# %%
tok_jac = space.token_jacobian(theta.detach())                       # [N, 3, P]
tok_logp = space.token_log_probs(theta.detach())                     # [N, 3]
tok_logp_mu = space.token_log_probs(theta_mu)                        # [N, 3]
all_tokens = torch.ones_like(tok_logp, dtype=torch.bool)


def baseline_shares(theta_now: torch.Tensor):
    """Per method: the baseline's share |g(r - b) - g(r)| / |g(r - b)| of its exact expected gradient,
    and its coefficient's distance from the nearer of w and r_t (max over every token)."""
    logp_now, jac = space.token_log_probs(theta_now), space.token_jacobian(theta_now)   # [N, 3], [N, 3, P]
    r_t = (logp_now - tok_logp_mu).exp()                                                # [N, 3] token ratios
    w_now = (logp_now - tok_logp_mu).sum(-1, keepdim=True).exp()                        # [N, 1]
    share, departure = {}, {}
    for method in METHOD_TABLE:
        grads = []
        for advantage in (A, reward):                 # E_mu[sum_t phi_t A grad log pi_t], a sum over the 27
            phi_t, _ = coefficients(logp_now, tok_logp_mu, advantage, all_tokens, LossConfig(method=method))
            grads.append((mu[:, None, None] * (phi_t * advantage[:, None])[..., None] * jac).sum((0, 1)))
        share[method] = ((grads[0] - grads[1]).norm() / grads[0].norm()).item()
        phi_t, _ = coefficients(logp_now, tok_logp_mu, A, all_tokens, LossConfig(method=method))
        departure[method] = min((phi_t - w_now).abs().max(), (phi_t - r_t).abs().max()).item()
    return share, departure, w_now, r_t


shift, departs = baseline_shares(theta.detach())[:2]
shift_small, departs_small, w_small, r_small = baseline_shares(theta_mu + 0.05 * drift_direction)
confirm("for the exact weight (is) the baseline does not move the expected gradient", shift["is"], 1e-12)
confirm("nor for a multiple of it, phi = 2 w: b E_mu[2 w grad log pi] = 0",
        (mu[:, None] * 2 * w[:, None] * tok_jac.sum(1)).sum(0).norm(), 1e-12)
confirm("at §1's drift every other method's expected gradient moves by more than 10% of its size",
        max(0.0, 0.1 - min(s for m, s in shift.items() if m != "is")), 1e-12)
print(f"drift scaled to 0.05: w in [{w_small.min():.3f}, {w_small.max():.3f}], "
      f"token ratios in [{r_small.min():.3f}, {r_small.max():.3f}]")
print("the baseline's share |g(r - b) - g(r)| / |g(r - b)| of each method's expected gradient, and how far its")
print("coefficient is from the nearer of w and r_t:")
print(f"  {'method':<19}{'share, drift 0.8':>17}{'share, drift 0.05':>19}{'|phi - w or r_t|, 0.05':>24}")
for m in METHOD_TABLE:                                # under 1e-12 is rounding: printed as 0
    print(f"  {m:<19}" + "".join(f"{'0' if v < 1e-12 else f'{v:.3g}':>{width}}"
                                 for v, width in ((shift[m], 17), (shift_small[m], 19), (departs_small[m], 24))))
confirm("at both drifts the share is 0 for every method whose coefficient is w or r_t on every token, "
        "and above 1e-4 for every method whose coefficient departs",
        max(max(0.0, s - 1e-12) if d < 1e-12 else max(0.0, 1e-4 - s)
            for sh, dep in ((shift, departs), (shift_small, departs_small)) for s, d in zip(sh.values(), dep.values())),
        1e-12)
band_inactive = ("grpo", "dapo", "dual_clip", "seq_clip", "cispo")
confirm("at drift 0.05 w and every r_t lie inside [0.8, 1.2], the clips (and cispo) write w or r_t there, "
        "and the baseline leaves them alone; ReSPO's and GSPO's shares stay above 1%",
        max(max(0.0, 0.8 - min(w_small.min(), r_small.min()).item(), max(w_small.max(), r_small.max()).item() - 1.2),
            max(departs_small[m] for m in band_inactive), max(shift_small[m] for m in band_inactive),
            max(0.0, 0.01 - min(shift_small["respo"], shift_small["gspo"]))), 1e-12)

# %% [markdown]
# At §1's drift every method but `is` departs from $w$ and $r_t$ somewhere, and its expected
# gradient moves by the share printed in the first column. At drift 0.05 every ratio sits
# inside the clip bands (the printed ranges): the clips and CISPO write exactly $w$ or $r_t$ and
# their share is 0 (second column), while ReSPO, whose coefficient departs from $w$ wherever
# $w\ne1$, and GSPO, whose clip is on another ratio, keep one; the third column is the
# departure. Where the coefficient is reshaped, which gradient the group baseline picks is
# therefore part of a method's definition, not a variance trick; §4 shows what it picks for the
# power surrogate.
#
# **Claim.** The price of exactness is a variance that grows multiplicatively with the length.
# *Reason:* $w=\prod_tr_t$ is a product of token ratios, and $\mathbb E_\mu[w^2]=\sum_y\pi^2/\mu$
# obeys the autoregressive recursion
# $$M(y_{<t})=\sum_{y_t}\frac{\pi(y_t|y_{<t})^2}{\mu(y_t|y_{<t})}\,M(y_{\le t}),\qquad M(y_{\le T})=1,\qquad \mathbb E_\mu[w^2]=M(\varnothing).$$
# Each position's factor is $c_t(y_{<t})=\sum_{y_t}\pi_t^2/\mu_t=1+\chi^2(\pi_t\|\mu_t)\ge1$. Read forward,
# adding position $t$ to the first $t-1$ tokens multiplies $\mathbb E_\mu[w^2]$ by $\bar c_t$, the factor
# $c_t$ averaged over prefixes with weights $\mu(y_{<t})\,w_{<t}^2$, so $\bar c_t\ge1$ and
# $\mathbb E_\mu[w_L^2]=\prod_{t\le L}\bar c_t$. That is exponential in $L$ when the $\bar c_t$ stay above
# some $c>1$, as when the positions drift independently and alike (every $\bar c_t$ then the same).
# The estimator's effective sample size, $n/\mathbb E_\mu[w^2]$ for $n$ draws, shrinks by the same factors.
#
# Below, exactly by enumeration: responses of 1 to 7 tokens over 3 symbols (the first $L$
# tokens of one policy), every position's logits moved by $\delta\cdot\mathcal N(0,1)$.

# %%
drifts, lengths = (0.5, 1.0, 2.0), range(1, 8)
sp = SequenceSpace(vocab=3, length=7)                 # 2187 responses; a length-L response is a prefix
gen = torch.Generator().manual_seed(1)
base, direction = sp.random_theta(gen), sp.random_theta(gen)
log_mu_tok = sp.token_log_probs(base)                 # [N, 7]
mu7 = log_mu_tok.sum(-1).exp()                        # [N]
second_moment, phi_moment, mean_factor = {}, {}, {}
for d in drifts:
    log_pi_tok = sp.token_log_probs(base + d * direction)
    log_w_prefix = (log_pi_tok - log_mu_tok).cumsum(-1)   # [N, 7] log w of y_<=L
    # E_mu[w_L^2]: the first L tokens' weight, averaged over mu (the rest of y sums out)
    second_moment[d] = (mu7[:, None] * (2 * log_w_prefix).exp()).sum(0).tolist()
    phi_moment[d] = [(mu7 * respo_coefficient(log_w_prefix[:, -1], torch.full((len(mu7),), s)) ** 2).sum().item()
                     for s in (True, False)]
    # the recursion, from the last position back: M(y_<t) = sum over y_t of c(y_t | y_<t) M(y_<=t)
    factor = (2 * log_pi_tok - log_mu_tok).exp()          # [N, 7] pi_t^2 / mu_t of each sequence's token
    M, c_of_prefix = torch.ones(len(mu7), dtype=torch.float64), [None] * 7
    for t in reversed(range(7)):
        rows, repeats = sp.prefix_id[:, t], 3 ** (sp.length - 1 - t)   # each (y_<t, y_t) appears `repeats` times
        c_t = torch.zeros(3 ** t, dtype=torch.float64).index_add_(0, rows, factor[:, t]) / repeats   # [3^t]
        c_of_prefix[t] = c_t[rows]                                       # [N] c_t of each sequence's prefix
        M = (torch.zeros(3 ** t, dtype=torch.float64).index_add_(0, rows, factor[:, t] * M) / repeats)[rows]
    # bar c_t: c_t averaged with weights mu(y_<t) w_<t^2 (mu7 sums the later tokens out)
    w2_before = torch.cat([torch.ones(len(mu7), 1, dtype=torch.float64), (2 * log_w_prefix[:, :-1]).exp()], -1)
    mean_factor[d] = [((mu7 * w2_before[:, t] * c_of_prefix[t]).sum() / (mu7 * w2_before[:, t]).sum()).item()
                      for t in range(7)]
    steps = [b / a for a, b in zip([1.0] + second_moment[d][:-1], second_moment[d])]   # E[w_L^2] / E[w_(L-1)^2]
    confirm(f"δ = {d}: the recursion gives E_mu[w^2] at L = 7, and each added position multiplies it by bar c_t",
            abs(M[0].item() / second_moment[d][-1] - 1) + max(abs(a - b) for a, b in zip(steps, mean_factor[d])), 1e-9)

confirm("E_mu[w_L^2] grows with the length L at every drift (each factor bar c_t >= 1)",
        max(0.0, max(a - b for m in second_moment.values() for a, b in zip(m, m[1:]))), 1e-12)
for d in drifts:
    print(f"δ = {d}: bar c_t at t = 1..7: " + " ".join(f"{v:.2f}" for v in mean_factor[d]))
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 2.8))
for d, colour in zip(drifts, ("tab:blue", "tab:orange", "tab:red")):
    ax1.semilogy(lengths, [m - 1 for m in second_moment[d]], "o-", color=colour, label=f"drift δ = {d}")
    ax2.plot(lengths, [1 / m for m in second_moment[d]], "o-", color=colour)
ax1.set(xlabel="response length L", ylabel="Var_μ(w) = E_μ[w²] − 1", title="variance of the exact weight")
ax2.set(xlabel="response length L", ylabel="effective sample size / n", title="what n samples are worth",
        ylim=(0, 1.05))
ax1.legend()
fig.tight_layout()
plt.show()
for d in drifts:
    print(f"δ = {d}: E_mu[w^2] = {second_moment[d][-1]:.3g} at L = 7; "
          f"E_mu[phi_+^2] = {phi_moment[d][0]:.3g}, E_mu[phi_-^2] = {phi_moment[d][1]:.3g} (ReSPO, defaults)")
d_cfg = LossConfig()                                   # sup phi = e^(lambda - 1) / lambda on each branch (§4.3)
caps = tuple((math.exp(lam - 1) / lam) ** 2 for lam in (d_cfg.lambda_pos, d_cfg.lambda_neg))
confirm("at every drift E_mu[phi_s^2] <= sup phi_s^2 = (e^(lambda_s - 1) / lambda_s)^2, (e/2)^2 for both branches",
        max(0.0, max(m[k] - caps[k] for m in phi_moment.values() for k in (0, 1))), 1e-12)

# %% [markdown]
# The per-position factors $\bar c_t$ printed first are each at least 1 and differ from position
# to position: the growth with the length is a product of unequal factors, not a fixed rate. The
# next lines put the two second moments next to each other: the exact weight's grows with the
# drift; ReSPO's cannot pass $\sup\phi_\pm^2=(e/2)^2$ on either branch at any drift (the check; the
# argument of docs/math.md §4.6: the tilt bounds the coefficient by $e^{\lambda-1}/\lambda$).
#
# **The objection, answered.** "$w\to0$ *is* the correct weight of a response the current
# policy rarely writes, so why call it starvation?" Because of *which* cell the variance comes
# from. The cells of the weight table cost very different amounts:
#
# - a high-$w$ response adds $w^2$ to the second moment. On §1's draw the $w>1.2$ cells carry
#   most of the exact weight's, negatives and positives both (the split by sign is printed
#   below). ReSPO fades both signs there, but replacing one branch at a time (also printed)
#   shows that on this draw the cut in the total is its negative branch's: its positive branch
#   alone *raises* the second moment, since what it adds on the low-$w$ positives (next point)
#   outweighs what it takes from the high-$w$ ones, and ReSPO's total ends above the exact
#   weight's (the first column). §8 repeats this one-branch comparison on fresh draws and
#   prints how often each branch alone cuts or raises it;
# - a low-$w$ positive adds almost nothing ($w^2\to0$). Raising its coefficient from $w$ to
#   ReSPO's value near $e/2$ *adds* variance there; what it buys is a different **target**. At the
#   flat corner $\phi_+=1$ the positives' expected gradient is
#   $\mathbb E_\mu[A_+\nabla\log\pi]=\nabla\,\mathbb E_\mu[A_+\log\pi]=-Z_+\nabla\mathrm{KL}(q_+\|\pi)$ with
#   $q_+\propto\mu A_+$ the advantage-weighted successes of $\mu$: a weighted likelihood of
#   every success the sampler found. $\mathrm{KL}(q_+\|\pi)$ is large wherever $q_+$ has mass and
#   $\pi$ has none, so this target does not let $\pi$ drop a success $\mu$ found, however low its
#   $w$ has fallen.
#
# **The whole target at the flat corner: two divergences, opposite signs.** With $\phi=1$ on
# both signs (the $\alpha=0$, $\lambda=0$ corner) and $A=r-\mathbb E_\mu[r]$, the negatives carry
# $q_-\propto\mu|A_-|$ with the same total, $Z_-=\sum_y\mu|A_-|=Z_+=Z$ (centred advantages sum to zero
# under $\mu$), and
# $$J_0=\mathbb E_\mu[A\log\pi]=Z\,\big[\mathrm{KL}(q_-\|\pi)-\mathrm{KL}(q_+\|\pi)\big]+\text{const}:$$
# fit $\mu$'s successes, repel from its failures. That is the precise sense of "mass-covering as
# $\alpha\to0$" in this course; §4 returns to it.
#
# Check on the 27-response space: each cell's part of the second moment
# $\mathbb E_\mu[\phi^2A^2\|\nabla\log\pi\|^2]$ under the exact weight, under ReSPO, and with one ReSPO
# branch at a time (the exact weight on the other sign); the flat positive branch's gradient
# against the gradient of $-Z_+\mathrm{KL}(q_+\|\pi)$; and $J_0$ against the two divergences.

# %%
positive = A > 0
sq_norm = tok_jac.sum(1).pow(2).sum(-1)                                  # [N] |grad log pi(y)|^2
phi_respo = respo_coefficient(w.log(), positive)
cells_of_table = {"low-w pos": positive & (w < 0.8), "w>1.2 pos": positive & (w > 1.2),
                  "w>1.2 neg": ~positive & (w > 1.2)}
coefficient_sets = {"exact weight w": w, "ReSPO": phi_respo,
                    "ReSPO's phi_+ only": torch.where(positive, phi_respo, w),   # w on the negatives
                    "ReSPO's phi_- only": torch.where(positive, w, phi_respo)}   # w on the positives
moments = {}                                                             # [N] each response's part of E|g_hat|^2
print(f"{'E_mu[phi^2 A^2 |grad log pi|^2]':<32}{'total':>7}" + "".join(f"{c:>11}" for c in cells_of_table))
for name, coeff in coefficient_sets.items():
    moments[name] = mu * (coeff * A) ** 2 * sq_norm
    print(f"{name:<32}{moments[name].sum():>7.3f}"
          + "".join(f"{moments[name][cell].sum():>11.3f}" for cell in cells_of_table.values()))
share = {name: {c: (moments[name][cell].sum() / moments[name].sum()).item() for c, cell in cells_of_table.items()}
         for name in ("exact weight w", "ReSPO")}
for name, parts_of in share.items():
    print(f"{name}: low-w positives carry {parts_of['low-w pos']:.1%} of the total; the w > 1.2 cells "
          f"{parts_of['w>1.2 pos'] + parts_of['w>1.2 neg']:.1%} ({parts_of['w>1.2 neg']:.1%} negatives, "
          f"{parts_of['w>1.2 pos']:.1%} positives)")
q_plus = mu * A.clamp(min=0)
Z_plus = q_plus.sum()
log_pi = space.log_probs(theta)
(by_flat_branch,) = torch.autograd.grad((mu * A.clamp(min=0) * log_pi).sum(), theta)   # phi_+ = 1 on positives
log_pi = space.log_probs(theta)
kl = (q_plus / Z_plus * ((q_plus / Z_plus).clamp(min=1e-300).log() - log_pi)).sum()
(by_kl,) = torch.autograd.grad(-Z_plus * kl, theta)
confirm("E_mu[A_+ grad log pi] = -Z_+ grad KL(q_+ || pi): the flat branch fits mu's successes",
        (by_flat_branch - by_kl).abs().max(), 1e-12)
q_minus = mu * (-A).clamp(min=0)
confirm("Z_- = Z_+ when A = r - E_mu[r]", (q_minus.sum() - Z_plus).abs(), 1e-12)


def flat_corner_terms(log_pi_now):
    """(J_0 = E_mu[A log pi], Z [KL(q_- || pi) - KL(q_+ || pi)], the constant Z [H(q_-) - H(q_+)])."""
    kls, entropies = [], []
    for q in (q_minus / Z_plus, q_plus / Z_plus):
        kls.append((q * (q.clamp(min=1e-300).log() - log_pi_now)).sum())
        entropies.append(-(q * q.clamp(min=1e-300).log()).sum())
    return (mu * A * log_pi_now).sum(), Z_plus * (kls[0] - kls[1]), Z_plus * (entropies[0] - entropies[1])


errors = []
for th in (theta.detach(), theta_mu, theta_mu + 2.0 * space.random_theta(torch.Generator().manual_seed(7))):
    j0, two_kls, const = flat_corner_terms(space.log_probs(th))
    errors.append((j0 - (two_kls + const)).abs())
confirm("J_0 = Z [KL(q_- || pi) - KL(q_+ || pi)] + Z [H(q_-) - H(q_+)], at three policies", max(errors), 1e-12)
exact = share["exact weight w"]
confirm("under the exact weight the w > 1.2 cells carry most of the second moment, each sign over 10% of it, "
        "the low-w positives little; ReSPO's coefficient near e/2 raises the low-w positives' share",
        max(0.0, 0.5 - exact["w>1.2 pos"] - exact["w>1.2 neg"], 0.1 - min(exact["w>1.2 pos"], exact["w>1.2 neg"]),
            exact["low-w pos"] - 0.1, exact["low-w pos"] - share["ReSPO"]["low-w pos"]), 1e-12)
total = {name: m.sum().item() for name, m in moments.items()}
added_low = (moments["ReSPO's phi_+ only"] - moments["exact weight w"])[cells_of_table["low-w pos"]].sum().item()
taken_high = (moments["exact weight w"] - moments["ReSPO's phi_+ only"])[cells_of_table["w>1.2 pos"]].sum().item()
confirm("one branch at a time: phi_- alone lowers the second moment, phi_+ alone raises it, "
        "adding more on the low-w positives than it takes from the w > 1.2 ones",
        max(0.0, total["ReSPO's phi_- only"] - total["exact weight w"],
            total["exact weight w"] - total["ReSPO's phi_+ only"], taken_high - added_low), 1e-12)

# %% [markdown]
# *Takeaway:* the exact off-policy gradient weighs each response by $w$; its variance grows
# multiplicatively with the length and, on §1's draw, lives mostly in the high-$w$ cells of both
# signs; the baseline moves a method's gradient wherever its coefficient departs from $w$ (or
# $r_t$). So the question is "which bias where": ReSPO's negative branch fades the high-$w$
# negatives (on that draw, the branch that cuts the second moment) and its positive branch
# gives low-$w$ positives up to $e/2$ (a change of target, which there raises the second moment).
#
# ## 2. The clipped surrogate as a coefficient table, and where it is biased
#
# Sequence-level PPO clip maximises $L_{\text{clip}}(w)=\min\big(wA,\ \mathrm{clip}(w,1-\epsilon,1+\epsilon)A\big)$.
# Since $\nabla w=w\,\nabla\log\pi$, the coefficient is $w$ wherever the $\min$ picks $wA$ and $0$
# wherever it picks the constant clipped value. Case by case (docs/math.md §2):
#
# - $A>0$, $w>1+\epsilon$: $\mathrm{clip}(w)A=(1+\epsilon)A<wA$, the min is constant → $\phi=0$.
# - $A>0$, $w<1-\epsilon$: $\mathrm{clip}(w)A=(1-\epsilon)A>wA$, the min is $wA$ → $\phi=w$ (→ 0: **starved**).
# - $A<0$, $w<1-\epsilon$: $\min$ of two negatives picks $(1-\epsilon)A$, constant → $\phi=0$.
# - $A<0$, $w>1+\epsilon$: the min is $wA$ → $\phi=w$ (**unbounded**).
# - inside $[1-\epsilon,1+\epsilon]$: $\mathrm{clip}(w)=w$ → $\phi=w$.
#
# | sign | $w<1-\epsilon$ | inside | $w>1+\epsilon$ |
# |---|---|---|---|
# | $A>0$ | $w$ (starved) | $w$ | $0$ |
# | $A<0$ | $0$ | $w$ | $w$ (unbounded) |
#
# Against the exact coefficient $w$ of §1, the clip is biased exactly where it writes $0$
# (progress already made, in either direction, stops counting) and exact where $w$ is worst.
# Check: differentiate the kernel's `seq_clip` loss at the six cells ($\epsilon=0.2$):

# %%
cells = torch.tensor([0.5, 1.0, 2.0])
table = {sign: phi_curve("seq_clip", cells.log(), sign == "A > 0") for sign in ("A > 0", "A < 0")}
expected = {"A > 0": torch.tensor([0.5, 1.0, 0.0]), "A < 0": torch.tensor([0.0, 1.0, 2.0])}
confirm("seq_clip's coefficient at w = 0.5, 1, 2 is (w, w, 0) for A > 0 and (0, w, w) for A < 0",
        max((table[s].float() - expected[s]).abs().max() for s in table), 1e-6)

# %% [markdown]
# The PPO paper draws the surrogate against the ratio case by case; here is the same figure
# for sequences, with ReSPO beside the clip. The top row is the surrogate $L(w)-L(1)$, obtained
# by integrating the kernel's coefficient, $L(w)-L(1)=A\int_1^w\phi(u)\,du/u$ (the slope in $\log w$
# is $\phi A$); the bottom row is $\phi$ itself. The check under the figure confirms that this
# integral gives back PPO's own $\min(wA,\mathrm{clip}(w)A)$ for the clip.

# %%
below, above = torch.linspace(math.log(0.02), 0, 300), torch.linspace(0, math.log(8.0), 301)[1:]
log_w = torch.cat([below, above]).double()            # w = 1 is grid point 299
methods = {"seq_clip": "tab:blue", "is": "0.4", "respo": "tab:red"}
labels = {"seq_clip": "sequence clip (ε = 0.2)", "is": "exact weight w", "respo": "ReSPO (defaults)"}
surrogates = {}
fig, axes = plt.subplots(2, 2, figsize=(8, 5), sharex=True)
for col, pos in enumerate((True, False)):
    sign = 1.0 if pos else -1.0
    for method, colour in methods.items():
        phi = phi_curve(method, log_w, pos)
        slope = sign * phi                                         # d L / d log w
        area = torch.cat([torch.zeros(1, dtype=torch.float64),
                          torch.cumulative_trapezoid(slope, log_w)])  # L(w) - L(w_min)
        L = area - area[299]                                       # L(w) - L(1)
        surrogates[method, pos] = L
        ls = ":" if method == "is" else "-"
        axes[0, col].plot(log_w.exp(), L, ls, color=colour, lw=2 if method == "respo" else 1.3, label=labels[method])
        axes[1, col].plot(log_w.exp(), phi, ls, color=colour, lw=2 if method == "respo" else 1.3)
    for ax in axes[:, col]:
        ax.axvspan(0.8, 1.2, color="0.85", zorder=0)
        ax.set_xscale("log")
    axes[0, col].set_title(f"A {'> 0' if pos else '< 0'}")
    axes[1, col].set(xlabel="w", ylim=(-0.05, 2.5))
axes[0, 0].set_ylabel("surrogate L(w) − L(1)")
axes[1, 0].set_ylabel("coefficient φ(w)")
axes[0, 0].legend(fontsize=8)
fig.tight_layout()
plt.show()

W = log_w.exp()
for pos in (True, False):
    a = 1.0 if pos else -1.0
    ppo = torch.minimum(W * a, W.clamp(0.8, 1.2) * a) - a                # PPO's objective minus its value at w = 1
    confirm(f"A {'> 0' if pos else '< 0'}: A * int_1^w phi(u) du / u of the clip's phi = PPO's min(wA, clip(w)A)",
            (surrogates["seq_clip", pos] - ppo).abs().max(), 5e-3)   # trapezoids across the kinks
phi_respo_grid = phi_curve("respo", log_w, True)
Phi_numeric = torch.cumulative_trapezoid(phi_respo_grid, log_w)
Phi_closed = respo_surrogate(log_w, 2.0, 0.5, 2.0)
confirm("ReSPO's surrogate from the figure equals the kernel's closed form Phi (up to a constant)",
        ((Phi_closed[1:] - Phi_closed[0]) - Phi_numeric).abs().max(), 1e-4)
print(f"A > 0 at w = {W[0]:.2f}: clip L(w) - L(1) = {surrogates['seq_clip', True][0]:.3f} "
      f"(-A (1 - w)), ReSPO {surrogates['respo', True][0]:.3f}")

# %% [markdown]
# Read the grey band as the clip's band $[1-\epsilon,1+\epsilon]$. Left, as the drifted
# positive's $w\to0$: the clip's surrogate is $wA$, whose slope in $w$ stays $A$ but whose slope in
# $\log w$, the one the gradient $\nabla\log\pi$ sees, is $wA\to0$; on the log axis the curve goes
# flat at $-A$ (its value at the left edge is printed above), so pushing the response further
# down costs the clip's objective little: its own term's pull shrinks with $w$. (`research/notebooks/starvation_controls`
# §2 measures on one warm toy policy trained with Adam what brings such
# responses back.) ReSPO's surrogate keeps a slope in $\log w$ that grows towards $e/2$ as $w\to0$,
# and keeps falling (its value is printed beside the clip's). Above the band the clip goes flat
# at once; ReSPO's flattens smoothly, as $\phi_+$ fades. Right: the clip's surrogate keeps a slope
# $w$ that grows without bound above the band and is flat below it; ReSPO's bends back to flat
# above, and below the band keeps a slope, steeper than on-policy where $\phi_->1$, flattening as
# $w\to0$.
#
# *Takeaway:* the clip is a coefficient table; its bias is the zero cells, and it leaves the
# exact (tiny or huge) weight where the sign makes it hurt.
#
# ## 3. The power surrogate and its gradient (VESPO's family)
#
# §3-§7 are about the power-tilt family $w^\alpha e^{-\lambda(w-1)}$ of VESPO and of this project's
# reconstruction (`respo_wtilt`), not the published ReSPO kernel, whose derivation core notebook 03
# checks. Replace the weight by a power of it. With $\lambda=0$ (docs/math.md §8.1):
# $$J_\alpha(\theta)=\mathbb E_\mu\Big[A\,\frac{w^\alpha-1}{\alpha}\Big]\ \ (\log w\text{ at }\alpha=0),\qquad
# \nabla J_\alpha=\mathbb E_\mu\big[A\,w^\alpha\,\nabla\log\pi\big].$$
# *Reason:* $\mu$ does not depend on $\theta$, so $\nabla w^\alpha=\alpha w^{\alpha-1}\nabla w=\alpha w^\alpha\nabla\log\pi$.
# At $\alpha=1$ this is the exact gradient of §1; at $\alpha=0$ the weight is ignored (the
# on-policy formula applied to stale samples); in between, $w^\alpha$ shrinks the tails.
# Check, on the 27-response space, with `power_tilt_surrogate` (the surrogate,
# `nano_respo/surrogate.py`) and the kernel's `power_tilt` (the coefficient $w^\alpha$):

# %%
for alpha in (0.0, 0.5, 2.0):
    log_pi = space.log_probs(theta)
    surrogate = (mu * A * power_tilt_surrogate(log_pi - log_mu, alpha, 0.0)).sum()
    (by_autograd,) = torch.autograd.grad(surrogate, theta, retain_graph=True)
    coefficient = power_tilt((log_pi - log_mu).detach(), alpha, 0.0)
    (by_formula,) = torch.autograd.grad((mu * coefficient * A * log_pi).sum(), theta)
    confirm(f"alpha = {alpha}: grad J_alpha = E_mu[A w^alpha grad log pi]",
            (by_autograd - by_formula).abs().max(), 1e-12)

# %% [markdown]
# *Takeaway:* $\alpha$ is a dial between ignoring the weight (0) and using it exactly (1);
# past 1 it sharpens $w$ (VESPO's negative branch, $\alpha_-=3$, §5).
#
# ## 4. The baseline is where the α-divergence enters $J_\alpha$
#
# The core of $J_\alpha$ is $\mathbb E_\mu[w^\alpha]=\sum_y\pi^\alpha\mu^{1-\alpha}$. Amari's α-divergence
# is the f-divergence with
# $$f_\alpha(t)=\frac{t^\alpha-1-\alpha(t-1)}{\alpha(\alpha-1)},\qquad D_\alpha(\pi\|\mu)=\mathbb E_\mu\big[f_\alpha(w)\big].$$
# ($f_\alpha$ is convex for every $\alpha$ with $f_\alpha(1)=f'_\alpha(1)=0$, so $D_\alpha\ge0$ with equality iff $\pi=\mu$.)
#
# **Claim.** $\mathbb E_\mu[w^\alpha]=1-\alpha(1-\alpha)\,D_\alpha(\pi\|\mu)$.
# *Reason:* $\mathbb E_\mu[w]=\sum_y\pi=1$, so the linear term of $f_\alpha$ averages to zero:
# $D_\alpha=(\mathbb E_\mu[w^\alpha]-1)/(\alpha(\alpha-1))$; solve for $\mathbb E_\mu[w^\alpha]$.
#
# **Claim (the baseline identity).** With $A=r-b$ for a constant $b$,
# $$\mathbb E_\mu\Big[(r-b)\frac{w^\alpha-1}{\alpha}\Big]=\mathbb E_\mu\Big[r\,\frac{w^\alpha-1}{\alpha}\Big]+b\,(1-\alpha)\,D_\alpha(\pi\|\mu).$$
# *Reason:* the $b$ term is $-b(\mathbb E_\mu[w^\alpha]-1)/\alpha$; put in the claim above.
#
# This is where the α-divergence actually enters $J_\alpha$: not through $A$, but through the
# baseline, as a bonus or a penalty on moving away from $\mu$. For $b>0$ (the group mean of
# 0/1 rewards) and $\alpha<1$ it *rewards* divergence from $\mu$; for $\alpha>1$, where
# $\alpha(1-\alpha)<0$, it penalises it. It is also §1's baseline shift, in closed form.
#
# **Optional depth: the KL limits** (the rest of the course does not use them; skip to the
# figure on a first reading). $D_\alpha\to\mathrm{KL}(\mu\|\pi)$ as $\alpha\to0$ and $D_\alpha\to\mathrm{KL}(\pi\|\mu)$ as $\alpha\to1$.
# *Reason:* at $\alpha\to0$, $t^\alpha=1+\alpha\log t+O(\alpha^2)$ gives $f_\alpha(t)\to t-1-\log t$,
# whose $\mu$-mean is $\mathbb E_\mu[-\log w]=\mathrm{KL}(\mu\|\pi)$; at $\alpha\to1$, $t^\alpha=t+(\alpha-1)t\log t+O((\alpha-1)^2)$
# gives $f_\alpha(t)\to t\log t-t+1$, whose $\mu$-mean is $\mathbb E_\mu[w\log w]=\mathrm{KL}(\pi\|\mu)$.
# $\mathrm{KL}(\mu\|\pi)$ is the mass-covering direction ($\pi$ must have mass wherever $\mu$ does),
# $\mathrm{KL}(\pi\|\mu)$ the mode-seeking one. Careful with the sign: in $J_\alpha$ the baseline
# *adds* $b\,\mathrm{KL}(\mu\|\pi)$ at $\alpha\to0$, a reward for leaving $\mu$, so "mass-covering"
# describes the divergence, not what the objective does with it (next paragraph).

# %%
pi = space.log_probs(theta).detach().exp()
ratio = pi / mu


def d_alpha(alpha: float) -> torch.Tensor:
    """Amari's alpha-divergence D_alpha(pi || mu) = E_mu[f_alpha(w)], from its definition."""
    f = (ratio ** alpha - 1 - alpha * (ratio - 1)) / (alpha * (alpha - 1))
    return (mu * f).sum()


kl_mu_pi = (mu * (mu / pi).log()).sum()
kl_pi_mu = (pi * (pi / mu).log()).sum()
errors = [((mu * power_tilt(ratio.log(), a, 0.0)).sum() - (1 - a * (1 - a) * d_alpha(a))).abs()
          for a in (0.25, 0.5, 1.5, 2.0, 3.0)]
confirm("E_mu[w^alpha] = 1 - alpha (1 - alpha) D_alpha at alpha = 0.25, 0.5, 1.5, 2, 3", max(errors), 1e-12)
identity = []
for a in (0.25, 0.5, 1.5, 3.0):
    for b in (0.0, baseline.item(), 0.9):
        lhs = (mu * (reward - b) * power_tilt_surrogate(ratio.log(), a, 0.0)).sum()
        rhs = (mu * reward * power_tilt_surrogate(ratio.log(), a, 0.0)).sum() + b * (1 - a) * d_alpha(a)
        identity.append((lhs - rhs).abs())
confirm("E_mu[(r - b) Phi_alpha(w)] = E_mu[r Phi_alpha(w)] + b (1 - alpha) D_alpha, four alphas, three b",
        max(identity), 1e-12)
print(f"b = {baseline:.3f}: the baseline term b (1 - alpha) D_alpha is "
      + ", ".join(f"{baseline * (1 - a) * d_alpha(a):+.3f} at alpha = {a:g}" for a in (0.25, 0.5, 1.5, 3.0)))
confirm("D_alpha -> KL(mu || pi) as alpha -> 0", (d_alpha(1e-7) - kl_mu_pi).abs(), 1e-5)
confirm("D_alpha -> KL(pi || mu) as alpha -> 1", (d_alpha(1 - 1e-7) - kl_pi_mu).abs(), 1e-5)
terms = {a: (baseline * (1 - a) * d_alpha(a)).item() for a in (0.25, 0.5, 1.5, 3.0)}
confirm("the baseline's term is positive for alpha < 1 and negative for alpha > 1 (b > 0, D_alpha >= 0)",
        max(0.0, *(-v for a, v in terms.items() if a < 1), *(v for a, v in terms.items() if a > 1)), 1e-12)

alphas = [a for a in torch.linspace(-0.5, 3.5, 161).tolist() if min(abs(a), abs(a - 1)) > 1e-6]
fig, (ax, ax_b) = plt.subplots(1, 2, figsize=(9, 2.9))
ax.plot(alphas, [d_alpha(a).item() for a in alphas], color="tab:purple", label="D_α(π‖μ)")
ax.plot([0], [kl_mu_pi], "o", color="tab:blue", label="KL(μ‖π), the α → 0 limit")
ax.plot([1], [kl_pi_mu], "o", color="tab:orange", label="KL(π‖μ), the α → 1 limit")
ax.set(xlabel="α", ylabel="divergence", yscale="log", title="Amari's α-divergence (≥ 0 for every α)")
ax.legend(fontsize=7)
ax_b.plot(alphas, [(baseline * (1 - a) * d_alpha(a)).item() for a in alphas], color="tab:green")
ax_b.axhline(0, color="0.3", lw=0.8)
ax_b.axvline(3, color="tab:blue", ls=":", lw=1)
ax_b.text(3.05, 0.02, "α₋ = 3", fontsize=7, color="tab:blue", transform=ax_b.get_xaxis_transform())
ax_b.set(xlabel="α", ylabel="b (1 − α) D_α",
         title="the baseline's term in J_α: a bonus for α < 1, a penalty above")
fig.tight_layout()
plt.show()

# %% [markdown]
# Read the two panels with the printout. The α-divergence is non-negative at every α (left);
# what changes sign is the factor $(1-\alpha)$ in front of it (right; the printed values are
# positive for the two $\alpha$ below 1 and negative for the two above; the check asserts the
# signs). At $\alpha=0$ the baseline adds $b\,\mathrm{KL}(\mu\|\pi)$, the divergence from the *whole* of
# $\mu$, successes and failures together, with a plus sign: it rewards $\pi$ for leaving the
# responses $\mu$ wrote. Read alone it misleads; with the $r$ term the whole objective at $b=\mathbb E_\mu[r]$
# is §1's $J_0=Z\,[\mathrm{KL}(q_-\|\pi)-\mathrm{KL}(q_+\|\pi)]+\text{const}$ (checked there): the $r$ term
# pulls towards the successes only, the baseline pushes away from all of $\mu$, and the sum pulls
# towards each success with weight $1-b$ and pushes away from each failure with weight $b$. At
# $\alpha=3$ the baseline subtracts $2b\,D_3$, a pull back
# towards $\mu$. The closed form is for one $\alpha$ on every response; a two-branch kernel (VESPO,
# the reconstruction, ReSPO) picks its branch by the sign of $A=r-b$, so its baseline term is a sum
# of per-branch pieces, not this formula.
#
# *Takeaway:* $\mathbb E_\mu[w^\alpha]$ is one minus a scaled α-divergence, and the divergence
# enters $J_\alpha$ through the baseline, with a sign set by $1-\alpha$.
#
# ## 5. VESPO's variational proposal and its exponential tilt
#
# Ask a different question: under which distribution $Q$ should the gradient
# $\mathbb E_Q[A\nabla\log\pi]$ be averaged? **This construction is VESPO's** (Shen et al.,
# arXiv:2602.10693, §3.1–3.3): every reshaping $\phi(w)$ is a change of measure to a proposal
# $Q=\mu\phi(w)/Z$, and VESPO derives $\phi$ from a proposal that balances proximity to the
# behaviour $\mu$ and the target $\pi$ under an importance-weight budget $\mathbb E_Q[w]\le C$. Its
# objective $\mathrm{KL}(Q\|\mu)-\alpha\mathbb E_Q[\log w]$ is the one below, since
# $\alpha\,\mathrm{KL}(Q\|\pi)=\alpha\,\mathrm{KL}(Q\|\mu)-\alpha\,\mathbb E_Q[\log w]$. Write the criterion
# (docs/math.md §8.2), with $\lambda$ the budget's multiplier:
# $$\min_Q\ F(Q)=(1-\alpha)\,\mathrm{KL}(Q\|\mu)+\alpha\,\mathrm{KL}(Q\|\pi)+\lambda\,\mathbb E_Q[w]\quad\text{s.t.}\ \textstyle\sum_yQ(y)=1.$$
#
# **Lagrangian.** With a multiplier $\nu$ for the normalisation,
# $\mathcal L=F(Q)+\nu(\sum_yQ-1)$, and $\partial\mathcal L/\partial Q(y)=\log Q(y)+1-(1-\alpha)\log\mu(y)-\alpha\log\pi(y)+\lambda w(y)+\nu=0$ gives
# $$Q^*(y)=\frac{\mu(y)^{1-\alpha}\pi(y)^\alpha e^{-\lambda w(y)}}{Z(x)},\qquad Z(x)=\sum_y\mu^{1-\alpha}\pi^\alpha e^{-\lambda w}.$$
#
# **Why that stationary point is the minimum for every α (the Gibbs rewrite).** Collect the
# terms of $F$: $F(Q)=\sum_yQ\log Q-\sum_yQ\,[(1-\alpha)\log\mu+\alpha\log\pi-\lambda w]=\sum_yQ\log\frac{Q}{Z\,Q^*}=\mathrm{KL}(Q\|Q^*)-\log Z$.
# A KL is $\ge0$ and zero only at $Q=Q^*$, so $Q^*$ is the unique minimiser, also for $\alpha>1$.
# The rewrite proves that a minimiser exists; it does not say what it means, which the next
# claims do.
#
# **From $Q^*$ to a coefficient.** $Q^*/\mu=w^\alpha e^{-\lambda w}/Z=\frac{e^{-\lambda}}{Z(x)}\,\phi(w)$ with
# $\phi(w)=w^\alpha e^{-\lambda(w-1)}$, so
# $$\mathbb E_{Q^*}[A\nabla\log\pi]=\frac{e^{-\lambda}}{Z(x)}\ \mathbb E_\mu\big[\phi(w)\,A\,\nabla\log\pi\big].$$
# For *one* $(\alpha,\lambda)$ and one prompt, $e^{-\lambda}/Z(x)$ is a positive number: it scales the
# step, it does not turn it. The kernel drops it, which makes $\phi(1)=1$ (on-policy, every
# method is the plain policy gradient). ReSPO's published kernel keeps this shape, a proposal
# between behaviour and target and then a budget, with a power mean in place of the geometric
# mixture and its tilt on that mean (core notebook 03 checks it).
#
# **Claim (two branches are two problems, spliced).** The reconstruction `respo_wtilt` uses
# $(\alpha_+,\lambda_+)=(0,0.1)$ on the positives and VESPO's $(\alpha_-,\lambda_-)=(3,2)$ on the
# negatives (docs/math.md §8). Each sign solves its own problem and
# drops its own constant $e^{-\lambda_s}/Z_s(x)$; the two constants differ, so dropping both
# *turns* the step within a prompt.
# *Reason:* $g=c_+g_++c_-g_-$ and $g_++g_-$ are parallel only if $c_+=c_-$ (or one part is 0).
# Splicing the two branches with $\phi_\pm(1)=1$ is therefore a design choice (both signs
# weigh the same on-policy), not the solution of one variational problem (docs/math.md §4.3 says
# the same of the published kernel's splice, whose two constants §9 prints). Check on the
# 27-response space (one prompt), at the reconstruction's constants:

# %%
# The reconstruction's constants (its row, respo_wtilt, is the research wing's): VESPO's family at these.
c = SimpleNamespace(wtilt_alpha_pos=0.0, wtilt_lambda_pos=0.1, wtilt_alpha_neg=3.0, wtilt_lambda_neg=2.0)
WTILT_AS_VESPO = dict(vespo_k_pos=c.wtilt_alpha_pos, vespo_lambda_pos=c.wtilt_lambda_pos,
                      vespo_k_neg=c.wtilt_alpha_neg, vespo_lambda_neg=c.wtilt_lambda_neg)
grad_log_pi = tok_jac.sum(1)                                             # [N, P] grad log pi(y)
parts, constants = {}, {}
for s, (a_s, l_s) in (("+", (c.wtilt_alpha_pos, c.wtilt_lambda_pos)), ("-", (c.wtilt_alpha_neg, c.wtilt_lambda_neg))):
    Z_s = (mu * power_tilt(w.log(), a_s, 0.0) * torch.exp(-l_s * w)).sum()   # sum_y mu w^a e^(-l w)
    constants[s] = math.exp(-l_s) / Z_s.item()
    on_sign = A > 0 if s == "+" else A < 0
    parts[s] = ((mu * power_tilt(w.log(), a_s, l_s) * A * on_sign) @ grad_log_pi)   # E_mu[phi_s A grad log pi]
kernel_direction = parts["+"] + parts["-"]
two_problems = constants["+"] * parts["+"] + constants["-"] * parts["-"]
print(f"e^-lambda_s / Z_s(x) for this prompt: {constants['+']:.3f} for (0, 0.1), {constants['-']:.3f} for (3, 2)")
reweighting = constants["-"] / constants["+"]
print(f"so the kernel weighs its positive part {reweighting:.2f} times as much, against its negative part, "
      f"as the two problems' own normalisations would")
cosine = (kernel_direction @ two_problems / (kernel_direction.norm() * two_problems.norm())).item()
print(f"cosine between the kernel's step and the two problems' own-normalised step: {cosine:.4f}")
size_ratio = (parts["-"].norm() / parts["+"].norm()).item()
part_cosine = (parts["+"] @ parts["-"] / (parts["+"].norm() * parts["-"].norm())).item()
angles = torch.linspace(-1, 1, 2001, dtype=torch.float64)                 # every cosine between the two parts
worst = ((1 + (1 + reweighting) * size_ratio * angles + reweighting * size_ratio ** 2)
         / ((1 + 2 * size_ratio * angles + size_ratio ** 2) * (1 + 2 * reweighting * size_ratio * angles
                                                             + (reweighting * size_ratio) ** 2)).sqrt()).min().item()
print(f"the parts themselves: |g+| {parts['+'].norm():.3f}, |g-| {parts['-'].norm():.3f} (ratio {size_ratio:.2f}), "
      f"cos(g+, g-) {part_cosine:+.2f}; at these norms and this factor, the smallest cosine any angle between them "
      f"could give: {worst:.3f}")
confirm("the near-1 cosine is the norms' doing: at these norms and factor no angle between the parts gives under 0.95",
        max(0.0, 0.95 - worst, worst - cosine), 1e-12)
confirm("the two constants differ by more than 10%, so the splice re-weights the signs", max(0.0, 0.1 - abs(reweighting - 1)), 1e-12)
(kernel_grad,) = torch.autograd.grad(
    policy_loss(space.token_log_probs(theta), tok_logp_mu, A, all_tokens,
                LossConfig(method="vespo", agg="seq-mean-token-sum", **WTILT_AS_VESPO))[0], theta)
confirm("respo_wtilt's step is the spliced sum (1/N) sum_y phi_s A grad log pi, constants dropped",
        (kernel_grad + (power_tilt(w.log(), 0.0, 0.1) * positive + power_tilt(w.log(), 3.0, 2.0) * (A < 0))
         .mul(A) @ grad_log_pi / len(A)).abs().max(), 1e-12)

# %% [markdown]
# The two constants printed above differ, and their ratio is the point: relative to the two
# problems solved with their own constants, the kernel's step weighs the positives' part by
# that factor against the negatives' (the second line). The cosine under it only says how
# much that re-weighting turns the step on this prompt, and it is near 1 because the negative
# part is small beside the positive one (the norms printed), not because the two parts point the
# same way (their own cosine, printed, is far from 1): at these norms and this factor no angle
# between them could turn the step much (the printed bound, and the check). Which share of the
# step goes to the positives is set by the splice, not by the derivation. Across prompts,
# dropping $Z_s(x)$ also changes how much each prompt weighs: a choice too.
#
# **Claim (where $Q^*$ sits).** For $\alpha\in[0,1]$ and $\lambda=0$, $Q^*\propto\mu^{1-\alpha}\pi^\alpha$ is a
# geometric mixture and always sits *between* $\mu$ and $\pi$: nearer $\mu$ than $\pi$ is, and nearer
# $\pi$ than $\mu$ is. For $\alpha>1$ it does not. At VESPO's negative branch's $\alpha_-=3$ the weights are
# $(1-\alpha,\alpha)=(-2,3)$: $F$ *rewards* distance from $\mu$, and $Q^*\propto\pi^3/\mu^2=\pi\,w^2$
# extrapolates past $\pi$, away from $\mu$. The reconstruction's positive branch $(0,\lambda_+)$,
# $\lambda_+>0$, never sits between: it ends farther from $\pi$ than $\mu$ is.
# *Reason:* along $Q_\alpha\propto\mu\,w^\alpha$ (an exponential family in $\alpha$ with statistic $\log w$, $Q_0=\mu$,
# $Q_1=\pi$), $\frac{d}{d\alpha}\mathrm{KL}(Q_\alpha\|\mu)=\alpha\,\mathrm{Var}_{Q_\alpha}(\log w)\ge0$ and
# $\frac{d}{d\alpha}\mathrm{KL}(Q_\alpha\|\pi)=(\alpha-1)\,\mathrm{Var}_{Q_\alpha}(\log w)\le0$ on $[0,1]$: the first distance rises
# from 0 to $\mathrm{KL}(\pi\|\mu)$, the second falls from $\mathrm{KL}(\mu\|\pi)$ to 0, and $Q_3$ is farther from
# $\mu$ than $\pi$ is. Along $Q_\lambda\propto\mu\,e^{-\lambda w}$ ($\alpha=0$, $Q_0=\mu$),
# $\frac{d}{d\lambda}\mathrm{KL}(Q_\lambda\|\pi)=\mathrm{Cov}_{Q_\lambda}(w,\log w)+\lambda\,\mathrm{Var}_{Q_\lambda}(w)>0$ (write
# $\mathrm{KL}(Q_\lambda\|\pi)=\mathbb E_{Q_\lambda}[-\log w-\lambda w]-\log Z_\lambda$ and differentiate; $\log w$ rises with
# $w$, so the covariance is positive unless $\pi=\mu$): every $\lambda>0$ moves $Q$ away from $\pi$. For
# other tilted settings, the negative branch's $(3,2)$ among them, neither argument applies:
# whether $Q^*$ lies between depends on the draw. Check on 8 responses (3 binary tokens, bars
# readable): minimise $F$ numerically over $Q$, compare with the closed form built from the
# kernel's `power_tilt`, measure how far each $Q^*$ is from $\mu$ and from $\pi$, and evaluate both
# derivatives.

# %%
space8 = SequenceSpace(vocab=2, length=3)                 # 8 responses: bars stay readable
g8 = torch.Generator().manual_seed(3)
th_mu8 = space8.random_theta(g8)
log_mu8, log_pi8 = space8.log_probs(th_mu8), space8.log_probs(th_mu8 + 0.9 * space8.random_theta(g8))
w8 = (log_pi8 - log_mu8).exp()


def F(q, alpha, lam):
    return ((1 - alpha) * (q * (q.log() - log_mu8)).sum() + alpha * (q * (q.log() - log_pi8)).sum()
            + lam * (q * w8).sum())


def kl_from_mu(q):
    return (q * (q.log() - log_mu8)).sum().item()


proposals = {}
for alpha, lam in ((0.5, 0.0), (0.5, 0.05), (0.5, 1.0), (0.0, 0.1), (3.0, 0.0), (3.0, 2.0)):
    z = torch.zeros(8, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([z], max_iter=500, tolerance_grad=1e-14, tolerance_change=1e-16,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        value = F(torch.softmax(z, 0), alpha, lam)
        value.backward()
        return value

    for _ in range(3):
        opt.step(closure)
    q_closed = log_mu8.exp() * power_tilt(log_pi8 - log_mu8, alpha, lam)   # mu * phi(w), then normalise
    q_closed = q_closed / q_closed.sum()
    proposals[(alpha, lam)] = q_closed
    confirm(f"alpha = {alpha}, lambda = {lam}: argmin_Q F = mu phi(w) / Z",
            (torch.softmax(z.detach(), 0) - q_closed).abs().max(), 1e-6)
print(f"KL(. || mu): pi {kl_from_mu(log_pi8.exp()):.3f}; "
      + ", ".join(f"Q*(α={a:g}, λ={lam:g}) {kl_from_mu(q):.3f}" for (a, lam), q in proposals.items()))


def kl_to_pi(q):
    return (q * (q.log() - log_pi8)).sum().item()


print(f"KL(. || pi): mu {kl_to_pi(log_mu8.exp()):.3f}; "
      + ", ".join(f"Q*(α={a:g}, λ={lam:g}) {kl_to_pi(q):.3f}" for (a, lam), q in proposals.items()))
between = proposals[(0.5, 0.0)]
confirm("the untilted Q*(0.5, 0) lies between: nearer mu than pi is, and nearer pi than mu is",
        max(0.0, kl_from_mu(between) - kl_from_mu(log_pi8.exp()), kl_to_pi(between) - kl_to_pi(log_mu8.exp())), 1e-12)
away = proposals[(0.0, 0.1)]
confirm("the reconstruction's positive Q*(0, 0.1) is farther from pi than mu is: the tilt moves it away from what pi raised",
        max(0.0, kl_to_pi(log_mu8.exp()) - kl_to_pi(away)), 1e-12)
beyond = kl_from_mu(proposals[(3.0, 2.0)]) - kl_from_mu(log_pi8.exp())
print(f"KL(Q*(3, 2) || mu) - KL(pi || mu) = {beyond:+.3f}: on this draw the tilted negative proposal is "
      f"{'farther from' if beyond > 0 else 'no farther from'} mu than pi is")
family = [log_mu8.exp() * w8 ** a / (log_mu8.exp() * w8 ** a).sum() for a in torch.linspace(0, 3, 31).tolist()]
to_mu, to_pi = [kl_from_mu(q) for q in family], [kl_to_pi(q) for q in family[:11]]   # family[10] is alpha = 1
confirm("along Q_alpha ~ mu w^alpha, KL(Q_alpha || mu) rises with alpha on [0, 3] and KL(Q_alpha || pi) falls on [0, 1]",
        max(0.0, -min(b - a for a, b in zip(to_mu, to_mu[1:])), max(b - a for a, b in zip(to_pi, to_pi[1:]))), 1e-12)


def kl_to_pi_along_tilt(lam):
    """KL(Q_lambda || pi) for Q_lambda ~ mu e^(-lambda w), the positive branch's family at alpha = 0."""
    q = torch.softmax(log_mu8 - lam * w8, 0)
    return (q * (q.log() - log_pi8)).sum()


slopes, formula = [], []
for lam0 in (0.0, 0.05, 0.1, 0.5, 1.0, 2.0):
    lam = torch.tensor(lam0, dtype=torch.float64, requires_grad=True)
    (slope,) = torch.autograd.grad(kl_to_pi_along_tilt(lam), lam)
    q = torch.softmax(log_mu8 - lam0 * w8, 0)
    cov = (q * w8 * w8.log()).sum() - (q * w8).sum() * (q * w8.log()).sum()
    slopes.append(slope.item())
    formula.append((cov + lam0 * ((q * w8 ** 2).sum() - (q * w8).sum() ** 2)).item())
confirm("d/dlambda KL(Q_lambda || pi) = Cov_Q(w, log w) + lambda Var_Q(w) > 0 at lambda = 0, 0.05, 0.1, 0.5, 1, 2",
        max(max(abs(a - b) for a, b in zip(slopes, formula)), max(0.0, 1e-9 - min(slopes))), 1e-12)


def between(q, log_m, log_p):
    """(KL(Q || mu) - KL(pi || mu), KL(Q || pi) - KL(mu || pi)): Q lies between when both are negative."""
    def kl(a, log_b):
        return (a * (a.log() - log_b)).sum().item()
    return kl(q, log_m) - kl(log_p.exp(), log_m), kl(q, log_p) - kl(log_m.exp(), log_p)


log_pi27 = space.log_probs(theta).detach()
q27 = mu * power_tilt(log_pi27 - log_mu, 3.0, 2.0)
gaps = {f"Q*{key}, 8 responses": between(q, log_mu8, log_pi8) for key, q in proposals.items()}
gaps["Q*(3.0, 2.0), §1's 27 responses"] = between(q27 / q27.sum(), log_mu, log_pi27)
print("lies between mu and pi? (KL(Q || mu) - KL(pi || mu), KL(Q || pi) - KL(mu || pi); both < 0: yes)")
for name, (a, b) in gaps.items():
    print(f"  {name:<32} {a:+.3f} {b:+.3f}  {'yes' if max(a, b) < 0 else 'no'}")
confirm("the mildly tilted Q*(0.5, 0.05) lies between here; the negative branch's Q*(3, 2) does not on this draw "
        "and does on §1's: for it the answer depends on the draw",
        max(0.0, *gaps["Q*(0.5, 0.05), 8 responses"], -max(gaps["Q*(3.0, 2.0), 8 responses"]),
            *gaps["Q*(3.0, 2.0), §1's 27 responses"]), 1e-12)

# %%
shown = [(0.5, 0.0), (0.5, 1.0), (3.0, 2.0)]
fig, axes = plt.subplots(1, len(shown), figsize=(9, 2.6), sharey=True)
x = torch.arange(8).float()
names = ["".join(map(str, s.tolist())) for s in space8.seqs]
for ax, key in zip(axes, shown):
    ax.bar(x - 0.27, log_mu8.exp(), 0.27, color="tab:blue", label="μ (sampled the data)")
    ax.bar(x, log_pi8.exp(), 0.27, color="tab:orange", label="π (current)")
    ax.bar(x + 0.27, proposals[key], 0.27, color="tab:green", label="Q*")
    for xi, q in zip(x.tolist(), proposals[key].tolist()):
        if q < 0.005:                                   # a bar too small to see: say it is (almost) zero
            ax.text(xi + 0.27, 0.01, "≈0", ha="center", fontsize=6, color="tab:green")
    ax.set_xticks(x.tolist(), names, fontsize=7)
    ax.set_title(f"α = {key[0]}, λ = {key[1]}")
    ax.set_xlabel("response y")
axes[0].set_ylabel("probability")
axes[0].legend(fontsize=7)
fig.tight_layout()
plt.show()
print("w of each response:", " ".join(f"{v:.2f}" for v in w8.tolist()))

# %% [markdown]
# With $\alpha=0.5,\lambda=0$ (left), $Q^*$ sits between $\mu$ and $\pi$: its distance from $\mu$ is
# below $\pi$'s and its distance from $\pi$ below $\mu$'s (both printed, the first check). The tilt
# $e^{-\lambda w}$ takes mass away from responses with a large $w$ (middle). "Favours $w$ near
# $\alpha/\lambda$" is meant relative to $\mu$: $Q^*/\mu\propto w^\alpha e^{-\lambda w}$ is largest at
# $w=\alpha/\lambda$. So the reconstruction's positive branch $(0,0.1)$, with $\alpha/\lambda=0$, favours the *lowest* $w$:
# relative to $\mu$ it moves mass off the responses $\pi$ raised, and it ends farther from $\pi$ than
# $\mu$ itself: on this draw (the second printed line, the second check) and on every draw (the
# derivative of the *Reason*, positive at every $\lambda$ its check evaluates). At $(3,0)$ the
# printed distance from $\mu$ is far beyond $\pi$'s: the proposal overshoots $\pi$. The tilt of $(3,2)$
# (right) pulls it back towards $\pi$'s distance; on this draw not inside it (the difference
# printed), on §1's 27-response space inside (the last line of the table); relative to $\mu$ it
# favours $w$ near $\alpha/\lambda=1.5$ and drops the low-$w$ responses. So what holds in general:
# the untilted $\alpha\in[0,1]$ always lies between $\mu$ and $\pi$, the reconstruction's positive
# branch never does, and for VESPO's negative branch it depends on the draw; a mild tilt such as
# $(0.5,0.05)$ can lie between (the table), a strong one such as $(0.5,1)$ need not. What describes
# both of the reconstruction's branches on every draw is the coefficient's own shape (§7), nearly
# flat for positives, a bump for negatives.
#
# **Claim (the variance control, and what it is not).** As in VESPO (§3.2, §3.4 of its paper),
# $\lambda$ is the multiplier of a budget
# $\mathbb E_Q[w]\le C$. That budget equals $1+\mathrm{Var}_\mu(w)$ only at $Q=\pi$ (since
# $\mathbb E_\pi[w]=\sum_y\pi^2/\mu=\mathbb E_\mu[w^2]$), not at the tilted $Q^*$ the kernel uses. The argument that
# holds is docs/math.md §4.6's (stated there for the published kernel, whose bound is $e/2$): with
# $\lambda>0$ the coefficient is *bounded*, for the reconstruction $\phi_+\le e^{\lambda_+}$
# (at $\alpha_+=0$) and $\phi_-\le$ its peak (§7), so a one-response estimate's second moment is at
# most $\max\phi^2\cdot\mathbb E_\mu[A^2\|\nabla\log\pi\|^2]$ whatever the drift, while the exact weight's
# grows with the drift as in §1. Check both on the 8- and 27-response spaces:

# %%
at_pi = (log_pi8.exp() * w8).sum() - 1
confirm("Var_mu(w) = E_pi[w] - 1 (the budget at Q = pi)", (((log_mu8.exp() * w8 ** 2).sum() - 1) - at_pi).abs(), 1e-12)
print(f"E_Q[w] - 1 at Q = pi: {at_pi:.3f}; at the tilted Q*(0.5, 1): {(proposals[(0.5, 1.0)] * w8).sum() - 1:.3f}")
phi_max = max(math.exp(c.wtilt_lambda_pos),                             # the reconstruction's two suprema
              (c.wtilt_alpha_neg / c.wtilt_lambda_neg) ** c.wtilt_alpha_neg * math.exp(c.wtilt_lambda_neg - c.wtilt_alpha_neg))
phi_wtilt = torch.where(positive, power_tilt(w.log(), c.wtilt_alpha_pos, c.wtilt_lambda_pos),
                        power_tilt(w.log(), c.wtilt_alpha_neg, c.wtilt_lambda_neg))   # respo_wtilt's coefficient
wtilt_moment = (mu * (phi_wtilt * A) ** 2 * sq_norm).sum()
confirm(f"respo_wtilt: E_mu[phi^2 A^2 |grad log pi|^2] <= max phi^2 E_mu[A^2 |grad log pi|^2], max phi = {phi_max:.3f}",
        max(0.0, wtilt_moment - phi_max ** 2 * (mu * A ** 2 * sq_norm).sum()), 1e-12)

# %% [markdown]
# *Takeaway:* each branch's coefficient is the density ratio $Q^*/\mu$ of its own proposal, up
# to a per-sign constant the kernel drops; splicing the two is a choice; for $\alpha>1$ the
# proposal overshoots $\pi$; and the variance is controlled by $\phi$ being bounded.
#
# ## 6. Every coefficient has a surrogate; the closed forms of both families
#
# The loss is `-stopgrad(phi) * A * log pi`. Its gradient is $\phi A\nabla\log\pi$, and
# **every** coefficient $\phi(w)$ is the gradient of a surrogate: $A\,\Phi(w)$ with
# $\Phi(w)=\int_1^w\phi(u)\,du/u$.
# *Reason:* $\nabla\Phi(w)=\Phi'(w)\,w\,\nabla\log\pi=\phi(w)\nabla\log\pi$. §2 used exactly that to draw the
# clip's surrogate, and the check under its figure got PPO's objective back. So *having* a
# surrogate is not special. What the two smooth families share (docs/math.md §4.5, §8.3):
#
# - **No flat pieces, smooth tails.** $\phi_\pm>0$ everywhere, so $\Phi_\pm$ is strictly increasing
#   in $w$ where the clip's surrogate is flat on two cells. That is not "every response keeps
#   its gradient": ReSPO's $\phi_-$ (and VESPO's) fades to 0 in both tails by design (§7's table,
#   the two ends of each $\phi_-$ row), smoothly where the clip cuts. What no response loses is a
#   positive's below $w=1$: there ReSPO's $\phi_+$ and the reconstruction's are above 1.
# - **Each branch is the density ratio of a proposal** (§5; core notebook 03 for ReSPO's): the
#   gradient of $\mathbb E_\mu[A\,\Phi_\pm(w)]$ is the policy gradient averaged under that sign's
#   $Q^*$, up to the constant the kernel drops.
# - **Optional depth: closed forms** (used by the tests as an independent check of the kernel;
#   nothing later in the course needs them, so skip to §7 on a first reading). For the power-tilt
#   family, $\Phi(w)=\int_1^w u^{\alpha-1}e^{-\lambda(u-1)}\,du$, and by the substitution $v=\lambda u$
#   ($du=dv/\lambda$, $u^{\alpha-1}=v^{\alpha-1}\lambda^{1-\alpha}$):
# $$\Phi(w)=e^{\lambda}\lambda^{-\alpha}\int_\lambda^{\lambda w}v^{\alpha-1}e^{-v}\,dv .$$
# - $\alpha>0$, $\lambda>0$: the integral is a difference of lower incomplete gammas,
#   $\Phi=e^\lambda\lambda^{-\alpha}\Gamma(\alpha)\,[P(\alpha,\lambda w)-P(\alpha,\lambda)]$ with $P$ the regularised one.
# - $\alpha=0$, $\lambda>0$: the integrand is $e^{-v}/v$, whose tail integral is the exponential
#   integral $E_1(z)=\int_z^\infty e^{-v}/v\,dv$, so $\Phi=e^\lambda\,[E_1(\lambda)-E_1(\lambda w)]$.
# - $\lambda=0$: $\int_1^wu^{\alpha-1}du=(w^\alpha-1)/\alpha$, and $\log w$ at $\alpha=0$ (§3's surrogate).
#
# ReSPO's published branches have closed forms too (docs/math.md §4.5): with $k=\lambda\beta$,
# $\Phi=(1-e^{\lambda(1-w^\beta)})/(\beta\lambda)$ at $\alpha=1$ and
# $\Phi=(1-\beta)e^k[E_1(k)-E_1(kw)]+(1-e^{k(1-w)})/\lambda$ at $\alpha=2$.
# Check `power_tilt_surrogate` on five branches of its family and `respo_surrogate` on ReSPO's two
# (`nano_respo/surrogate.py`): the derivative in $\log w$ is $\phi$ (autograd), and the value
# is the integral (quadrature in $\log w$):

# %%
grid = torch.linspace(-5.0, 2.5, 30001, dtype=torch.float64)
slope_errors, value_errors = [], []
branches = {("power tilt", a, lam): (lambda x, a=a, lam=lam: power_tilt_surrogate(x, a, lam),
                                     power_tilt(grid, a, lam))
            for a, lam in ((0.0, 0.1), (0.0, 0.0), (0.5, 0.0), (3.0, 2.0), (0.5, 0.7))}
for sign, (a, b, lam) in (("+", (2.0, 0.5, 2.0)), ("-", (1.0, 0.5, 2.0))):
    branches["ReSPO", sign] = (lambda x, a=a, b=b, lam=lam: respo_surrogate(x, a, b, lam),
                               respo_coefficient(grid, torch.full_like(grid, sign == "+", dtype=torch.bool)))
for surrogate_of, phi_on_grid in branches.values():
    s = grid.clone().requires_grad_(True)
    (slope,) = torch.autograd.grad(surrogate_of(s).sum(), s)
    slope_errors.append((slope - phi_on_grid).abs().max())
    quad = torch.cumulative_trapezoid(phi_on_grid, grid)   # int_{-5}^{s} phi(e^v) dv
    closed = surrogate_of(grid)
    value_errors.append(((closed[1:] - closed[0]) - quad).abs().max())
confirm("dPhi/dlog w = phi on all seven branches (autograd of the closed forms)", max(slope_errors), 1e-10)
confirm("Phi(w) - Phi(e^-5) = quadrature of phi on all seven branches", max(value_errors), 1e-6)
confirm("Phi is strictly increasing in w on ReSPO's two branches and the reconstruction's two (no flat piece)",
        max(0.0, -min(surrogate_of(grid).diff().min() for key, (surrogate_of, _) in branches.items()
                      if key[0] == "ReSPO" or key[1:] in ((0.0, 0.1), (3.0, 2.0)))), 1e-12)

# %% [markdown]
# And the whole loss: on a batch of multi-token responses with both advantage signs, the
# gradient of `policy_loss` (sequence-sum aggregation) equals the gradient of
# $-\operatorname{mean}_iA_i\,\Phi_{\mathrm{sign}(A_i)}(w_i)$.

# %%
gen = torch.Generator().manual_seed(1)
B, T = 8, 5
old_logp = -2 * torch.rand(B, T, dtype=torch.float64, generator=gen)
logp = (old_logp + 0.4 * torch.randn(B, T, dtype=torch.float64, generator=gen)).requires_grad_(True)
mask = torch.rand(B, T, generator=gen) > 0.2
adv = torch.randn(B, dtype=torch.float64, generator=gen)
cfg = LossConfig(method="respo", agg="seq-mean-token-sum")
loss, _ = policy_loss(logp, old_logp, adv, mask, cfg)
(g_loss,) = torch.autograd.grad(loss, logp)
s = torch.where(mask, logp - old_logp, torch.zeros_like(logp)).sum(-1)     # log w, with its gradient
Phi = torch.where(adv > 0, respo_surrogate(s, cfg.alpha_pos, cfg.beta_pos, cfg.lambda_pos),
                  respo_surrogate(s, cfg.alpha_neg, cfg.beta_neg, cfg.lambda_neg))
(g_surrogate,) = torch.autograd.grad(-(adv * Phi).sum() / mask.any(-1).sum(), logp)
confirm("grad policy_loss = grad of -mean A Phi(w)", (g_loss - g_surrogate).abs().max(), 1e-12)

# %% [markdown]
# *Takeaway:* every coefficient has a surrogate; ReSPO's and the power-tilt family's are smooth,
# strictly increasing, the gradient of one proposal per sign, and in closed form.
#
# ## 7. The reconstruction's branches and VESPO's, beside the published ones
#
# Before the paper was public this project reconstructed ReSPO from its abstract as one
# $(\alpha,\lambda)$ per sign in VESPO's family (docs/math.md §8.4), a design choice (§5):
# $$\phi_\pm(w)=w^{\alpha_\pm}e^{-\lambda_\pm(w-1)},\qquad\phi_\pm(1)=1,$$
# with $(\alpha_+,\lambda_+,\alpha_-,\lambda_-)=(0,0.1,3,2)$, kept as `respo_wtilt` for the records
# made with it. The published kernel is another family (core notebooks 02 and 03). What the
# reconstruction's parameters do:
#
# **What a positive ($A>0$) needs.** Its signal must survive $w\to0$ (the clip's starved cell).
# $\alpha_+$ sets how fast $\phi_+$ falls as $w\to0$ ($\sim w^{\alpha_+}$). At $\alpha_+=0$, $\phi_+=e^{-\lambda_+(w-1)}$
# is decreasing, so its limit $e^{\lambda_+}$ at $w\to0$ is its **maximum** on $w<1$: every positive
# drifted down ($w<1$) gets more than 1, up to $e^{\lambda_+}$ (up-weighted, gently).
# $\lambda_+$ sets how fast it falls for large $w$; a small $\lambda_+$ keeps pushing positives that
# are already up, but gently (the value at $w=10$ is printed below): above $1+\epsilon$, where the
# clip's trust region gives a positive 0, it barely fades, almost no trust region (docs/math.md §2).
# ReSPO's published $\phi_+$ also has its maximum at $w\to0$, higher ($e/2$), and fades to 0 above 1:
# a soft trust region for positives.
#
# **What a negative ($A<0$) needs.** Its weight must not explode as $w\to\infty$ (the clip's
# unbounded cell): $\lambda_->0$ makes $\phi_-\to0$ there, with the peak at $w^*=\alpha_-/\lambda_-$
# (where $\frac{d}{dw}[\alpha\log w-\lambda w]=0$); a step on such a negative moves $w$ back towards 1,
# so that bound is a weighting, not a trust region. Below $w=1$, where the clip's trust region gives a
# negative 0 under $1-\epsilon$, the reconstruction fades it instead, a soft trust region:
# $\phi_-\sim w^{\alpha_-}\to0$ as $w\to0$, and $\alpha_->\lambda_-$ puts the peak above 1, so
# a negative the policy over-generates (slightly above 1) is pushed hardest and one already below 1
# fades fast. ReSPO's published $\phi_-$ peaks *below* 1, at $w=1/4$, and is above 1 on a band
# below 1 (the rows printed below): no trust region there.
#
# **Credit: the negative branch is VESPO's.** VESPO is the same family, $w^ke^{\lambda(1-w)}$, with
# $(k,\lambda)=(2,3)$ for $A\ge0$ and $(3,2)$ for $A<0$. The reconstruction's negative branch $(3,2)$
# *is* VESPO's, so at its defaults the reconstruction is VESPO with a flat positive branch. VESPO's
# positive branch does not starve like $w^2$ near $w=1$: it peaks at $w=2/3$ (where $2/w=3$) with
# height $(2/3)^2e$, up-weights moderately drifted positives, and starves only far-drifted ones
# ($\sim e^3w^2$ as $w\to0$). All three kernels are printed below from the kernel.
#
# **The reconstruction's defaults $(0,0.1,3,2)$** were the project's toy evidence
# (`research/toy/README.md`): the best-scoring of the settings screened, not separated from its
# flat-positive-branch neighbours, and not the paper's constants (the abstract gave none).

# %%
w_show = torch.tensor([1e-3, 0.1, 0.25, 0.5, 2 / 3, 1.0, 1.5, 2.0, 10.0], dtype=torch.float64)
kernels = {"ReSPO": ("respo", {}), "respo_wtilt": ("vespo", WTILT_AS_VESPO), "VESPO": ("vespo", {})}
rows = {f"{name} phi_{sign}": phi_curve(method, w_show.log(), sign == "+", **knobs)
        for name, (method, knobs) in kernels.items() for sign in "+-"}
print("w                 " + "".join(f"{v:>7.3g}" for v in w_show.tolist()))
for name, values in rows.items():
    print(f"{name:<18}" + "".join(f"{v:>7.3f}" for v in values.tolist()))
dense = torch.linspace(-3, 3, 600001, dtype=torch.float64)
below_one = dense < 0
wtilt_pos = phi_curve("vespo", dense, True, **WTILT_AS_VESPO)
wtilt_limit = phi_curve("vespo", torch.tensor([-50.0], dtype=torch.float64), True, **WTILT_AS_VESPO)
confirm(f"respo_wtilt's phi_+ limit as w -> 0, e^lambda_+ = {math.exp(c.wtilt_lambda_pos):.3f}, is its maximum on w < 1",
        max((wtilt_limit - math.exp(c.wtilt_lambda_pos)).abs().max().item(),
            max(0.0, wtilt_pos[below_one].max().item() - math.exp(c.wtilt_lambda_pos))), 1e-12)
wtilt_neg = phi_curve("vespo", dense, False, **WTILT_AS_VESPO)
w_star = c.wtilt_alpha_neg / c.wtilt_lambda_neg
peak = w_star ** c.wtilt_alpha_neg * math.exp(c.wtilt_lambda_neg - c.wtilt_alpha_neg)
confirm(f"respo_wtilt's negative peak is at w* = alpha_-/lambda_- = {w_star:.2f} with height {peak:.3f}",
        max(abs(dense[wtilt_neg.argmax()].exp().item() - w_star), abs(wtilt_neg.max().item() - peak)), 1e-4)
vespo_pos = phi_curve("vespo", dense, True)
vespo_peak = (2 / 3) ** 2 * math.e
confirm(f"VESPO's positive branch peaks at w = 2/3 with height (2/3)^2 e = {vespo_peak:.3f}",
        max(abs(dense[vespo_pos.argmax()].exp().item() - 2 / 3), abs(vespo_pos.max().item() - vespo_peak)), 1e-4)
confirm("at its defaults the reconstruction's negative branch is VESPO's",
        (phi_curve("vespo", dense, False) - wtilt_neg).abs().max(), 1e-12)
respo_neg = phi_curve("respo", dense, False)
confirm("ReSPO's published phi_+ is largest as w -> 0 (e/2) and phi_- peaks at w = 1/4 (e/2), below 1 where the "
        "reconstruction's peaks above",
        max(abs(phi_curve("respo", torch.tensor([-50.0], dtype=torch.float64), True).item() - math.e / 2),
            abs(dense[respo_neg.argmax()].exp().item() - 0.25), abs(respo_neg.max().item() - math.e / 2)), 1e-4)

# %% [markdown]
# *Takeaway:* one family, two settings: the reconstruction gave positives a nearly flat branch,
# at least 1 below $w=1$ and at most $e^{\lambda_+}$, and negatives VESPO's bump above 1. The
# published kernel lifts low-$w$ positives more (up to $e/2$), fades high-$w$ positives, and puts
# the negatives' bump below 1. `deeper/branches_explored.ipynb` moves the parameters.

# %% [markdown]
# ## 8. Behind core 01 §5: which of ReSPO's branches cuts the second moment, over 60 draws
#
# *Extends core notebook 01 §5*, which checks that the exact weight's second moment grows with the
# drift while ReSPO's stays bounded, and sends here the question whether bounding $\phi$ is a
# variance cut. It needs only the 27-response space of core 01 §4 (3 tokens over 3 symbols, reward
# 1 when the tokens sum to at least 4): this notebook's `space` and `reward`, and ReSPO's coefficient from the kernel.
#
# Replace $w$ by ReSPO's $\phi$ on one sign at a time, the exact $w$ on the other, on 60 fresh draws
# of $(\mu,\pi)$ at two drifts (the logits of $\pi$ are $\mu$'s moved by drift × $\mathcal N(0,1)$), and compare
# each second moment $\mathbb E_\mu[\phi^2A^2\|\nabla\log\pi\|^2]$ with the exact weight's (§1 splits one draw's
# by cell):

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
# (docs/math.md §4.1; §1 splits one draw's second moment by cell and checks the target).
#
# ## 9. Behind core 03 §2-§3: the power mean and the tilt solved, the proposals on one draw, the splice
#
# *Extends core notebook 03 §2 and §3*, which state the power mean and the tilt with one check
# each (the objective is stationary at the kernel's curve). Here: the steps in between, both
# problems solved numerically, the two proposals drawn on one draw, and the splice of the two
# branches. It needs the 27-response draw of core 03 (seed 0, $\pi$ a copy of $\mu$ drifted by 0.8,
# rebuilt below) and the kernel's `power_mean_log`, `respo_branch` and `respo_coefficient`.
#
# **The power mean.** Take Amari's α-divergence between positive measures, indexed by $\gamma=\alpha-1$,
# $$D_\gamma(p\|m)=\sum_y\frac{p^\gamma m^{1-\gamma}-\gamma p-(1-\gamma)m}{\gamma(\gamma-1)},$$
# $\mathrm{KL}(p\|m)$ at $\gamma=1$ and $\mathrm{KL}(m\|p)$ at $\gamma=0$. The measure closest to $\mu$ and $\pi$
# with weights $(1-\beta,\beta)$, $m^\star=\arg\min_m(1-\beta)D_\gamma(\mu\|m)+\beta D_\gamma(\pi\|m)$, solves pointwise
# $(1-\beta)(\mu/m)^\gamma+\beta(\pi/m)^\gamma=1$:
# $$m^\star=\big[(1-\beta)\mu^\gamma+\beta\pi^\gamma\big]^{1/\gamma},\qquad \frac{m^\star}{\mu}=\phi_0(W)=\big[(1-\beta)+\beta W^{\alpha-1}\big]^{\frac1{\alpha-1}} .$$
# Minimise the objective numerically over all 27 values of $m$ and compare with the kernel's
# `power_mean_log`, at the two published orders and two others:

# %%
g03 = torch.Generator().manual_seed(0)
theta_mu03 = space.random_theta(g03)
theta03 = theta_mu03 + 0.8 * space.random_theta(g03)
log_mu03, log_pi03 = space.log_probs(theta_mu03), space.log_probs(theta03)
mu03, pi03, log_W03 = log_mu03.exp(), log_pi03.exp(), log_pi03 - log_mu03


def minimise(objective, start):
    """argmin of objective(z) over z in R^27, by L-BFGS."""
    z = start.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([z], max_iter=500, tolerance_grad=1e-15, tolerance_change=1e-18,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        value = objective(z)
        value.backward()
        return value

    for _ in range(3):
        opt.step(closure)
    return z.detach()


errors = []
for alpha, beta in ((2.0, 0.5), (1.0, 0.5), (3.0, 0.3), (1.5, 0.7)):
    log_m = minimise(lambda z: (1 - beta) * divergence(mu03, z.exp(), alpha - 1)
                     + beta * divergence(pi03, z.exp(), alpha - 1), log_mu03)
    errors.append(((log_m - log_mu03) - power_mean_log(log_W03, alpha, beta)).abs().max())
confirm("the minimiser m* is mu phi_0(W) at (alpha, beta) = (2, 1/2), (1, 1/2), (3, 0.3), (1.5, 0.7)", max(errors), 1e-5)

# %% [markdown]
# **The tilt.** Core 03 §3 projects $Q_0=\mu\phi_0/Z_0$ under the budget $\mathbb E_Q[\phi_0]\le C$ and checks that
# $\mathrm{KL}(Q\|Q_0)+\lambda\,\mathbb E_Q[\phi_0]$ is stationary at $Q\propto\mu\phi$. Solve the projection numerically
# for each published branch and compare $Q^\star/\mu$ with the kernel's $\phi$ (up to the constant the
# kernel drops):

# %%
projected = {}
for sign, (alpha, beta, lam) in (("+", (2.0, 0.5, 2.0)), ("-", (1.0, 0.5, 2.0))):
    log_phi0 = power_mean_log(log_W03, alpha, beta)
    log_q0 = (log_mu03 + log_phi0) - torch.logsumexp(log_mu03 + log_phi0, 0)
    z = minimise(lambda z: (torch.softmax(z, 0) * (torch.log_softmax(z, 0) - log_q0)).sum()
                 + lam * (torch.softmax(z, 0) * log_phi0.exp()).sum(), torch.zeros(27, dtype=torch.float64))
    ratio = torch.softmax(z, 0) / mu03                                        # Q* / mu
    phi_sign = respo_branch(log_W03, alpha, beta, lam)
    projected[sign] = (ratio / ratio.sum() - phi_sign / phi_sign.sum()).abs().max() * len(ratio)
confirm("Q*/mu is proportional to the kernel's phi_+ and phi_- (relative error)", max(projected.values()), 1e-5)

# %% [markdown]
# **The proposal itself, beside the curve.** On 8 responses of 3 binary tokens (one prompt), the
# behaviour $\mu$, the current $\pi$, and the two proposals $Q^\star_\pm=\mu\phi_\pm(W)/Z_\pm$, responses
# ordered by $W$; right, the two branches with the 8 responses' $W$ marked.

# %%
grid03 = torch.linspace(math.log(1e-3), math.log(30.0), 800, dtype=torch.float64)
g8 = torch.Generator().manual_seed(3)
space8.random_theta(g8)                                              # §5's mu, th_mu8; the next draw is §5's direction
log_pi8_far = space8.log_probs(th_mu8 + 2.0 * space8.random_theta(g8))  # pi moved 2.0 along it (§5: 0.9)
order = (log_pi8_far - log_mu8).argsort()
log_W8 = (log_pi8_far - log_mu8)[order]
proposals = {s: log_mu8[order].exp() * respo_coefficient(log_W8, torch.full((8,), s == "+"))
             for s in "+-"}
proposals = {s: q / q.sum() for s, q in proposals.items()}
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 3), gridspec_kw={"width_ratios": (1.4, 1)})
x = torch.arange(8).float()
for k, (values, label, colour) in enumerate(((log_mu8[order].exp(), "μ (sampled)", "0.6"),
                                             (log_pi8_far[order].exp(), "π (current)", "tab:orange"),
                                             (proposals["+"], "Q*₊ (A > 0)", "tab:red"),
                                             (proposals["-"], "Q*₋ (A < 0)", "tab:blue"))):
    ax0.bar(x + (k - 1.5) * 0.2, values, 0.2, color=colour, label=label)
ax0.set_xticks(x.tolist(), [f"{v:.2f}" for v in log_W8.exp().tolist()])
ax0.set(xlabel="the 8 responses, by W = π/μ", ylabel="probability")
ax0.legend(fontsize=7)
for s, colour in (("+", "tab:red"), ("-", "tab:blue")):
    ax1.plot(grid03.exp(), respo_coefficient(grid03, torch.full_like(grid03, s == "+", dtype=torch.bool)), color=colour,
             label=f"φ{'₊' if s == '+' else '₋'}(W) = Q*/μ up to Z")
    ax1.plot(log_W8.exp(), respo_coefficient(log_W8, torch.full((8,), s == "+")), "o", color=colour, ms=4)
ax1.set(xscale="log", xlim=(0.003, 5), xlabel="W", ylim=(0, 1.6))
ax1.legend(fontsize=7)
fig.tight_layout()
plt.show()
moved = {s: ((q - log_mu8[order].exp()) * log_W8).sum().item() for s, q in proposals.items()}
print(f"E_Q[log W] - E_mu[log W]: Q*_+ {moved['+']:+.3f}, Q*_- {moved['-']:+.3f}; "
      f"W of the 8 responses from {log_W8.exp().min():.2f} to {log_W8.exp().max():.2f}")
shift = {s: q - log_mu8[order].exp() for s, q in proposals.items()}                # Q* - mu, by response
raised = log_W8 > 0
confirm("on this draw both proposals put less mass than mu on every response pi raised (W > 1); Q*_+ puts more on "
        "every one it lowered, Q*_- less on the lowest-W one",
        max(0.0, shift["+"][raised].max().item(), shift["-"][raised].max().item(), -shift["+"][~raised].min().item(),
            shift["-"][0].item()), 1e-12)

# %% [markdown]
# On this draw both proposals lean away from what $\pi$ raised and towards what it lowered (the
# check, and the printed shifts of $\mathbb E_Q[\log W]$): both branches are below 1 above $W=1$ and above
# 1 on a band below it. They part at the low end: at the response $\pi$ has almost dropped (the
# smallest printed $W$), $Q^\star_+$ keeps more mass than $\mu$ and $Q^\star_-$ less, as the two curves on the
# right part below $W=1/4$.
#
# **The splice.** Each sign solves its own problem and drops its own constant $Z_\pm$; fixing
# $\phi_\pm(1)=1$ splices the two so that both weigh the same on-policy. The two constants differ, so
# the spliced step is not the solution of one variational problem: a design choice (docs/math.md
# §4.3; §5 shows the same for the reconstruction). For core 03's prompt:

# %%
constants = {s: (mu03 * respo_coefficient(log_W03, torch.full((27,), s == "+"))).sum().item() for s in "+-"}
print(f"Z_+ = E_mu[phi_+(W)] = {constants['+']:.3f}, Z_- = E_mu[phi_-(W)] = {constants['-']:.3f}")
confirm("the two constants differ (by more than 1%), so the splice re-weights the signs",
        max(0.0, 0.01 - abs(constants["+"] / constants["-"] - 1)), 1e-12)

# %% [markdown]
# ## 10. Behind core 03 §4: the slopes, differentiated
#
# *Extends core notebook 03 §4*, which states the two conditions that fix the constants and checks
# them on the published branches. It needs only the kernel's `respo_branch` and `LossConfig`.
#
# For any order, $\phi_0(1)=1$ and $\phi_0'(1)=\beta$, and $\phi=\phi_0e^{\lambda(1-\phi_0)}$ has
# $\phi'=\phi_0'\,e^{\lambda(1-\phi_0)}(1-\lambda\phi_0)$, so the slope at $W=1$ is $\phi'(1)=\beta(1-\lambda)$ at every
# order. For the positive branch ($\alpha=2$, $\phi_0=(1-\beta)+\beta W$) that reads
# $\phi_+'(W)=\beta e^{\lambda\beta(1-W)}(1-\lambda\phi_0(W))$, which vanishes at $W=0$, where $\phi_0=1-\beta$, exactly when
# $\lambda(1-\beta)=1$. Check both by autograd on the kernel's branch, print the slope near $W=0$ at
# three $\lambda_+$, and check that `LossConfig`'s defaults are the constants core 03 derives:

# %%
at_one = max(abs(branch_slope(0.0, a, b, lam) - b * (1 - lam))
             for a in (1.0, 1.5, 2.0, 3.0) for b in (0.3, 0.5) for lam in (0.5, 2.0))
confirm("phi'(1) = beta (1 - lambda) at four orders, two betas, two lambdas", at_one, 1e-12)
w_grid = torch.linspace(0.01, 5.0, 50, dtype=torch.float64)
formula = 0.5 * torch.exp(2.0 * 0.5 * (1 - w_grid)) * (1 - 2.0 * (0.5 + 0.5 * w_grid))   # beta = 1/2, lambda = 2
by_autograd = torch.tensor([branch_slope(math.log(v), 2.0, 0.5, 2.0) for v in w_grid.tolist()], dtype=torch.float64)
confirm("phi_+'(W) = beta e^(lambda beta (1 - W)) (1 - lambda phi_0(W)) at the published constants, W from 0.01 to 5",
        (formula - by_autograd).abs().max(), 1e-10)
near_zero = {lam: branch_slope(math.log(1e-6), 2.0, 0.5, lam) for lam in (1.5, 2.0, 3.0)}
print("slope of phi_+ at W = 1e-6, by lambda_+: "
      + ", ".join(f"{lam:g}: " + (f"{v:+.3f}" if abs(v) > 1e-5 else "< 1e-5 in size") for lam, v in near_zero.items()))
confirm("only lambda_+ = 1 / (1 - beta_+) = 2 makes W = 0 stationary",
        max(abs(near_zero[2.0]), max(0.0, 0.1 - min(abs(near_zero[1.5]), abs(near_zero[3.0])))), 1e-5)
d03 = LossConfig()
confirm("LossConfig()'s defaults are these constants: (2, 1/2, 2) for A > 0 and (1, 1/2, 2) for A < 0",
        float((d03.alpha_pos, d03.beta_pos, d03.lambda_pos, d03.alpha_neg, d03.beta_neg, d03.lambda_neg)
              != (2.0, 0.5, 2.0, 1.0, 0.5, 2.0)), 1e-12)

# %% [markdown]
# *Takeaway:* the two conditions of core 03 §4 are conditions on this derivative: a stationary
# maximum at $W=0$ fixes $\lambda_+=1/(1-\beta_+)$, the matched slope at $W=1$ fixes $\lambda_-$, and the
# kernel's defaults are the constants they give.
#
# ## Quick questions
#
# 1. Why is the group baseline free for the exact weight but not for ReSPO?
#    <details><summary>answer</summary>$\mathbb E_\mu[w\nabla\log\pi]=\sum_y\nabla\pi=0$, so $b\,\mathbb E_\mu[w\nabla\log\pi]=0$ (and for $c\,w$); the baseline's term is $-b\,\mathbb E_\mu[\sum_t(\phi_t-w)\nabla\log\pi_t]$, which comes only from where $\phi$ departs from $w$, and ReSPO's does wherever $w\ne1$. §1 printed how much of each method's expected gradient the baseline accounts for, at two drifts.</details>
# 2. For the power surrogate $J_\alpha$ with baseline $b>0$, does the baseline reward or penalise moving away from $\mu$ at $\alpha=0$, and at $\alpha=3$?
#    <details><summary>answer</summary>It adds $b(1-\alpha)D_\alpha$ (§4). $D_\alpha\ge0$ always, so at $\alpha=0$ it adds $b\,\mathrm{KL}(\mu\|\pi)$ (a reward for divergence) and at $\alpha=3$ it subtracts $2bD_3$ (a penalty).</details>
# 3. Does giving a low-$w$ positive a coefficient near $e/2$ reduce variance?
#    <details><summary>answer</summary>No. That cell contributes almost nothing to the exact weight's second moment ($w^2\to0$) and more under ReSPO (§1 printed the shares). It changes the target, towards the likelihood of $\mu$'s successes $\mathbb E_\mu[A_+\log\pi]$. On §1's draw the variance cut is the negative branch's: with one branch replaced at a time, $\phi_-$ alone lowered the second moment and $\phi_+$ alone raised it (§1 printed both; §8 counts both over fresh draws).</details>
# 4. Why is a two-branch kernel's step not the solution of one variational problem?
#    <details><summary>answer</summary>Each sign has its own $Q^*_s$ and its own constant $e^{-\lambda_s}/Z_s(x)$; the kernel drops both, and they differ (§5 printed them for the reconstruction), so the kernel weighs its positive part against its negative part by their ratio relative to the two problems' own step; how far that turns the step depends on the prompt (§5's cosine). The published kernel splices its two branches the same way (docs/math.md §4.3).</details>
# 5. At its defaults, how does the reconstruction `respo_wtilt` differ from VESPO, and how does the published ReSPO differ from both?
#    <details><summary>answer</summary>The reconstruction differs from VESPO only on positives: its negative branch $(3,2)$ is VESPO's; VESPO's positive branch $(2,3)$ peaks at $w=2/3$ and falls to 0 like $e^3w^2$, the reconstruction's $(0,0.1)$ is nearly flat with its maximum $e^{0.1}$ at $w\to0$. The published ReSPO is another family: $\phi_+$ is largest ($e/2$) at $w\to0$ and fades to 0 above 1, $\phi_-$ peaks at $w=1/4$ and is below 1 above $w=1$ (§7's rows).</details>
#
# ## Where this comes from
#
# - The exact off-policy gradient and its product weight (§1): importance sampling over whole
#   trajectories; with one reward at the end of a response, Precup et al.'s per-decision weighting
#   (ICML 2000) saves nothing, so the weight is the whole $w$.
# - The clip as a coefficient table (§2): PPO (Schulman et al., arXiv:1707.06347), applied here to
#   the sequence weight; GRPO (arXiv:2402.03300) and GSPO (arXiv:2507.18071) clip other ratios.
# - The α-divergence and its KL limits (§4): Amari's α-family of f-divergences.
# - The variational proposal under a weight budget (§5), the power-times-exponential kernel and
#   the negative branch $(3,2)$ (§7): VESPO (Shen et al., arXiv:2602.10693, §3).
# - The flat positive corner $\phi_+=1$ (§1's change of target): TOPR's positive branch (Le Roux
#   et al., arXiv:2503.14286).
# - ReSPO's published kernel, its closed-form surrogates (§6), its branches (§7) and the steps and
#   constants of its derivation (§9-§10): Chen, Ban and Hsieh, arXiv:2609.35433, read through
#   docs/math.md §4; the power mean as the minimiser of weighted α-divergences (Amari, Neural
#   Computation 19(10), 2007) and the tilt as an I-projection under a moment constraint (Csiszár,
#   Annals of Probability 3(1), 1975). The nearly flat positive branch of `respo_wtilt` is this project's
#   reconstruction from the abstract (docs/math.md §8).
#
# One line per work, in this course's notation: [docs/bibliography.md](../../docs/bibliography.md).
