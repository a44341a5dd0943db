# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Why clipping starves off-policy gradients, and the objective that does not
#
# A derivation to follow with pen and paper. Each step is one claim, the one-line reason
# for it, and a numerical check underneath (a line that starts with ✓). The math is
# docs/math.md §1–§4; every coefficient comes from `nano_respo.kernel`, nothing here
# re-implements the loss.
#
# **Notation.** A prompt $x$, a response $y$, the behaviour policy $\mu$ that sampled it
# (the policy when the rollouts were drawn), the current policy $\pi_\theta$, the sequence
# weight $w=\pi_\theta(y|x)/\mu(y|x)$ and an advantage $A(y)$ (reward minus the group mean).
# Every method in this project is a **coefficient** $\phi$ on the policy gradient
# (docs/math.md §1):
# $$g=\mathbb E_{y\sim\mu}\big[\phi\,A\,\nabla\log\pi_\theta(y|x)\big].$$

# %%
import math

import matplotlib.pyplot as plt
import torch

from course import SequenceSpace, confirm
from nano_respo.kernel import LossConfig, policy_loss, power_tilt, respo_coefficient
from nano_respo.lab.surrogate import respo_surrogate
from nano_respo.lab.report import phi_curve  # phi read back from the gradient of kernel.policy_loss

torch.set_num_threads(1)
plt.rcParams.update({"figure.dpi": 100, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})

# %% [markdown]
# ## 1. The exact off-policy gradient, and why something must give
#
# The objective is the expected advantage under the current policy, $J(\theta)=\mathbb E_{\pi_\theta}[A]$.
#
# **Claim.** $\nabla J=\mathbb E_{\pi}[A\,\nabla\log\pi]=\mathbb E_{\mu}[w\,A\,\nabla\log\pi]$.
# *Reason:* the first is $\nabla\pi=\pi\nabla\log\pi$; the second multiplies and divides each
# term of $\sum_y\pi(y)A\nabla\log\pi$ by $\mu(y)$.
#
# So the importance weight $w$ is the *exact* correction, and under rollout reuse (docs/math.md §1:
# one batch from $\mu$ feeds $R$ optimizer steps) it is all we have. Check it exactly on a
# space small enough to enumerate: 3 tokens from a vocabulary of 3 (27 responses), a tabular
# autoregressive policy, $\pi$ a drifted copy of $\mu$, reward 1 when the tokens sum to at least 4.

# %%
space = SequenceSpace(vocab=3, length=3)
g = torch.Generator().manual_seed(0)
theta_mu = space.random_theta(g)
theta = (theta_mu + 0.8 * space.random_theta(g)).requires_grad_(True)
reward = (space.seqs.sum(-1) >= 4).double()          # [N] the verifier
log_mu = space.log_probs(theta_mu)                    # [N]
mu = log_mu.exp()
A = reward - (mu * reward).sum()                      # [N] advantage: reward minus its mean under mu

log_pi = space.log_probs(theta)                       # [N], differentiable
(grad_on,) = torch.autograd.grad((log_pi.exp() * A).sum(), theta)       # grad of E_pi[A]
w = (log_pi - log_mu).exp().detach()
log_pi = space.log_probs(theta)                       # a fresh graph for the second gradient
(grad_off,) = torch.autograd.grad((mu * w * A * log_pi).sum(), theta)   # E_mu[w A grad log pi]
confirm("grad E_pi[A] = E_mu[w A grad log pi]", (grad_on - grad_off).abs().max(), 1e-12)

# %% [markdown]
# **Claim.** The price of exactness is a variance that grows exponentially with the length.
# *Reason:* $w=\prod_t r_t$ is a product of token ratios, so
# $\mathbb E_\mu[w^2]=\sum_y\pi^2/\mu$ multiplies over positions; every position whose
# policy has drifted contributes a factor above 1. The estimator's effective sample size,
# $n/\mathbb E_\mu[w^2]$ for $n$ draws, shrinks by the same factor.
#
# Below, exactly by enumeration: responses of 1 to 7 tokens over 3 symbols (the first $L$
# tokens of one policy), every position's logits moved by $\delta\cdot\mathcal N(0,1)$.

# %%
drifts, lengths = (0.5, 1.0, 2.0), range(1, 8)
sp = SequenceSpace(vocab=3, length=7)                 # 2187 responses; a length-L response is a prefix
gen = torch.Generator().manual_seed(1)
base, direction = sp.random_theta(gen), sp.random_theta(gen)
log_mu_tok = sp.token_log_probs(base)                 # [N, 7]
second_moment = {}
for d in drifts:
    log_w_prefix = (sp.token_log_probs(base + d * direction) - log_mu_tok).cumsum(-1)   # [N, 7] log w of y_<=L
    # E_mu[w_L^2]: the first L tokens' weight, averaged over mu (the rest of y sums out)
    second_moment[d] = (log_mu_tok.sum(-1).exp()[:, None] * (2 * log_w_prefix).exp()).sum(0).tolist()

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
print("E_mu[w^2] at L = 7:", ", ".join(f"δ={d}: {second_moment[d][-1]:.3g}" for d in drifts))

# %% [markdown]
# **The objection, answered.** "$w\to0$ *is* the correct weight of a response the current
# policy rarely writes, so why call it starvation?" Because no practical method uses the
# exact weight. It is unbiased only in expectation; on a finite, reused batch its variance
# (above) makes it useless, so every method trades bias for variance. Clipping (next
# section) makes that trade *sign-dependently*: it removes the two harmless cells of the
# weight table and keeps the two harmful ones, where a correct response gets the vanishing
# $w$ and an over-generated wrong response gets an unbounded $w$. The question is therefore
# not "exact or biased" but "which bias": ReSPO picks one that keeps the positives' signal
# and bounds the negatives'.
#
# *Takeaway:* the exact off-policy gradient weighs each response by $w$; its variance grows
# like a product over tokens, so a method must bias it, and the choice of bias is the design.
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
# is $\phi A$); the bottom row is $\phi$ itself.

# %%
below, above = torch.linspace(math.log(0.02), 0, 300), torch.linspace(0, math.log(8.0), 301)[1:]
log_w = torch.cat([below, above]).double()            # w = 1 is grid point 299
methods = {"seq_clip": "tab:blue", "is": "0.4", "respo": "tab:red"}
labels = {"seq_clip": "sequence clip (ε = 0.2)", "is": "exact weight w", "respo": "ReSPO (defaults)"}
fig, axes = plt.subplots(2, 2, figsize=(8, 5), sharex=True)
for col, positive in enumerate((True, False)):
    sign = 1.0 if positive else -1.0
    for method, colour in methods.items():
        phi = phi_curve(method, log_w, positive)
        slope = sign * phi                                         # d L / d log w
        area = torch.cat([torch.zeros(1, dtype=torch.float64),
                          torch.cumulative_trapezoid(slope, log_w)])  # L(w) - L(w_min)
        L = area - area[299]                                       # L(w) - L(1)
        ls = ":" if method == "is" else "-"
        axes[0, col].plot(log_w.exp(), L, ls, color=colour, lw=2 if method == "respo" else 1.3, label=labels[method])
        axes[1, col].plot(log_w.exp(), phi, ls, color=colour, lw=2 if method == "respo" else 1.3)
    for ax in axes[:, col]:
        ax.axvspan(0.8, 1.2, color="0.85", zorder=0)
        ax.set_xscale("log")
    axes[0, col].set_title(f"A {'> 0' if positive else '< 0'}")
    axes[1, col].set(xlabel="w", ylim=(-0.05, 2.5))
axes[0, 0].set_ylabel("surrogate L(w) − L(1)")
axes[1, 0].set_ylabel("coefficient φ(w)")
axes[0, 0].legend(fontsize=8)
fig.tight_layout()
plt.show()

phi_respo = phi_curve("respo", log_w, True)
Phi_numeric = torch.cumulative_trapezoid(phi_respo, log_w)
Phi_closed = respo_surrogate(log_w, 0.0, 0.1)
confirm("ReSPO's surrogate from the figure equals the kernel's closed form Phi (up to a constant)",
        ((Phi_closed[1:] - Phi_closed[0]) - Phi_numeric).abs().max(), 1e-4)

# %% [markdown]
# Read the grey band as the trust region $[1-\epsilon,1+\epsilon]$. Left: the clip's surrogate
# keeps falling along $w$ as $w\to0$ (its slope $w$ vanishes) and goes flat above the band;
# ReSPO's keeps a slope near 1 everywhere. Right: the clip's surrogate keeps a slope $w$ that
# grows without bound above the band, ReSPO's bends back to flat.
#
# *Takeaway:* the clip is a coefficient table; its bias is the zero cells, and it leaves the
# exact (tiny or huge) weight where the sign makes it hurt.
#
# ## 3. The power surrogate and its gradient
#
# Replace the weight by a power of it. With $\lambda=0$ (docs/math.md §4.1):
# $$J_\alpha(\theta)=\mathbb E_\mu\Big[A\,\frac{w^\alpha-1}{\alpha}\Big]\ \ (\log w\text{ at }\alpha=0),\qquad
# \nabla J_\alpha=\mathbb E_\mu\big[A\,w^\alpha\,\nabla\log\pi\big].$$
# *Reason:* $\mu$ does not depend on $\theta$, so $\nabla w^\alpha=\alpha w^{\alpha-1}\nabla w=\alpha w^\alpha\nabla\log\pi$.
# At $\alpha=1$ this is the exact gradient of §1; at $\alpha=0$ the weight is ignored (the
# on-policy formula applied to stale samples); in between, $w^\alpha$ shrinks the tails.
# Check, on the 27-response space, with the kernel's `respo_surrogate` (the surrogate) and
# `power_tilt` (the coefficient $w^\alpha$):

# %%
for alpha in (0.0, 0.5, 2.0):
    log_pi = space.log_probs(theta)
    surrogate = (mu * A * respo_surrogate(log_pi - log_mu, alpha, 0.0)).sum()
    (by_autograd,) = torch.autograd.grad(surrogate, theta, retain_graph=True)
    coefficient = power_tilt((log_pi - log_mu).detach(), alpha, 0.0)
    (by_formula,) = torch.autograd.grad((mu * coefficient * A * log_pi).sum(), theta)
    confirm(f"alpha = {alpha}: grad J_alpha = E_mu[A w^alpha grad log pi]",
            (by_autograd - by_formula).abs().max(), 1e-12)

# %% [markdown]
# *Takeaway:* $\alpha$ is a dial between ignoring the weight (0) and using it exactly (1).
#
# ## 4. The α-divergence hiding in $J_\alpha$
#
# The core of $J_\alpha$ is $\mathbb E_\mu[w^\alpha]=\sum_y\pi^\alpha\mu^{1-\alpha}$. Amari's α-divergence
# is the f-divergence with
# $$f_\alpha(t)=\frac{t^\alpha-1-\alpha(t-1)}{\alpha(\alpha-1)},\qquad D_\alpha(\pi\|\mu)=\mathbb E_\mu\big[f_\alpha(w)\big].$$
# ($f_\alpha$ is convex with $f_\alpha(1)=f'_\alpha(1)=0$, so $D_\alpha\ge0$ with equality iff $\pi=\mu$.)
#
# **Claim.** $\mathbb E_\mu[w^\alpha]=1-\alpha(1-\alpha)\,D_\alpha(\pi\|\mu)$.
# *Reason:* $\mathbb E_\mu[w]=\sum_y\pi=1$, so the linear term of $f_\alpha$ averages to zero:
# $D_\alpha=(\mathbb E_\mu[w^\alpha]-1)/(\alpha(\alpha-1))$; solve for $\mathbb E_\mu[w^\alpha]$.
#
# **Claim (the KL limits).** $D_\alpha\to\mathrm{KL}(\mu\|\pi)$ as $\alpha\to0$ and $D_\alpha\to\mathrm{KL}(\pi\|\mu)$ as $\alpha\to1$.
# *Reason:* at $\alpha\to0$, $t^\alpha=1+\alpha\log t+O(\alpha^2)$ gives $f_\alpha(t)\to t-1-\log t$,
# whose $\mu$-mean is $\mathbb E_\mu[-\log w]=\mathrm{KL}(\mu\|\pi)$; at $\alpha\to1$, $t^\alpha=t+(\alpha-1)t\log t+O((\alpha-1)^2)$
# gives $f_\alpha(t)\to t\log t-t+1$, whose $\mu$-mean is $\mathbb E_\mu[w\log w]=\mathrm{KL}(\pi\|\mu)$.
#
# So maximising $J_\alpha$ rewards advantage while the power $\alpha$ picks which divergence
# from $\mu$ the weights feel: mass-covering ($\alpha\to0$) or mode-seeking ($\alpha\to1$).

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
          for a in (0.25, 0.5, 1.5, 2.0)]
confirm("E_mu[w^alpha] = 1 - alpha (1 - alpha) D_alpha at alpha = 0.25, 0.5, 1.5, 2", max(errors), 1e-12)
confirm("D_alpha -> KL(mu || pi) as alpha -> 0", (d_alpha(1e-7) - kl_mu_pi).abs(), 1e-5)
confirm("D_alpha -> KL(pi || mu) as alpha -> 1", (d_alpha(1 - 1e-7) - kl_pi_mu).abs(), 1e-5)

alphas = [a for a in torch.linspace(-0.5, 1.5, 81).tolist() if min(abs(a), abs(a - 1)) > 1e-6]
fig, ax = plt.subplots(figsize=(5, 2.8))
ax.plot(alphas, [d_alpha(a).item() for a in alphas], color="tab:purple", label="D_α(π‖μ)")
ax.axhline(kl_mu_pi, color="tab:blue", ls="--", lw=1)
ax.axhline(kl_pi_mu, color="tab:orange", ls="--", lw=1)
ax.plot([0], [kl_mu_pi], "o", color="tab:blue", label=f"KL(μ‖π) = {kl_mu_pi:.3f}, the α → 0 limit")
ax.plot([1], [kl_pi_mu], "o", color="tab:orange", label=f"KL(π‖μ) = {kl_pi_mu:.3f}, the α → 1 limit")
ax.set(xlabel="α", ylabel="divergence", title="Amari's α-divergence interpolates the two KLs")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# *Takeaway:* $\mathbb E_\mu[w^\alpha]$ is one minus a scaled α-divergence; $\alpha$ chooses which
# KL direction the surrogate's weights respect.
#
# ## 5. The variational proposal and the exponential tilt
#
# Ask a different question: under which distribution $Q$ should the gradient
# $\mathbb E_Q[A\nabla\log\pi]$ be averaged? One that stays close to $\mu$ (where the data is),
# close to $\pi$ (where we are going), and spends a bounded weight (docs/math.md §4.2):
# $$\min_Q\ F(Q)=(1-\alpha)\,\mathrm{KL}(Q\|\mu)+\alpha\,\mathrm{KL}(Q\|\pi)+\lambda\,\mathbb E_Q[w]\quad\text{s.t.}\ \textstyle\sum_yQ(y)=1.$$
#
# **Lagrangian.** With a multiplier $\nu$ for the normalisation,
# $\mathcal L=F(Q)+\nu(\sum_yQ-1)$, and $\partial\mathcal L/\partial Q(y)=\log Q(y)+1-(1-\alpha)\log\mu(y)-\alpha\log\pi(y)+\lambda w(y)+\nu=0$ gives
# $$Q^*(y)=\frac{\mu(y)^{1-\alpha}\pi(y)^\alpha e^{-\lambda w(y)}}{Z(x)},\qquad Z(x)=\sum_y\mu^{1-\alpha}\pi^\alpha e^{-\lambda w}.$$
#
# **Why that stationary point is the minimum for every α (the Gibbs rewrite).** Collect the
# terms of $F$: $F(Q)=\sum_yQ\log Q-\sum_yQ\,[(1-\alpha)\log\mu+\alpha\log\pi-\lambda w]=\sum_yQ\log\frac{Q}{Z\,Q^*}=\mathrm{KL}(Q\|Q^*)-\log Z$.
# A KL is $\ge0$ and zero only at $Q=Q^*$, so $Q^*$ is the unique minimiser, also for $\alpha>1$
# where $(1-\alpha,\alpha)$ is not a convex combination of the two KLs: $F$ is negative entropy
# plus a linear term, convex in $Q$ whatever $\alpha$ is.
#
# **Why $Z(x)$ drops out of the direction.** $Q^*/\mu=w^\alpha e^{-\lambda w}/Z=\frac{e^{-\lambda}}{Z}\,\phi(w)$ with
# $\phi(w)=w^\alpha e^{-\lambda(w-1)}$, so
# $$\mathbb E_{Q^*}[A\nabla\log\pi]=\frac{e^{-\lambda}}{Z(x)}\ \mathbb E_\mu\big[\phi(w)\,A\,\nabla\log\pi\big].$$
# For one prompt, $e^{-\lambda}/Z(x)$ is a positive number: it scales the step, it does not turn
# it. The kernel drops it, which makes $\phi(1)=1$ (on-policy, every method is the plain policy
# gradient). Across prompts, dropping $Z(x)$ changes how much each prompt weighs: a choice,
# not a consequence of the derivation.
#
# **Why the tilt is a variance control.** $\lambda$ is the multiplier of a budget $\mathbb E_Q[w]\le C$,
# and at $Q=\pi$ that budget is the variance of the weight: $\mathrm{Var}_\mu(w)=\mathbb E_\mu[w^2]-1=\sum_y\pi^2/\mu-1=\mathbb E_\pi[w]-1$.
#
# Check: minimise $F$ numerically over $Q$ and compare with the closed form built from the
# kernel's `power_tilt`; check the variance identity.

# %%
space8 = SequenceSpace(vocab=2, length=3)                 # 8 responses: bars stay readable
g8 = torch.Generator().manual_seed(3)
th_mu8 = space8.random_theta(g8)
log_mu8, log_pi8 = space8.log_probs(th_mu8), space8.log_probs(th_mu8 + 0.9 * space8.random_theta(g8))
w8 = (log_pi8 - log_mu8).exp()


def F(q, alpha, lam):
    return ((1 - alpha) * (q * (q.log() - log_mu8)).sum() + alpha * (q * (q.log() - log_pi8)).sum()
            + lam * (q * w8).sum())


proposals = {}
for alpha, lam in ((0.5, 0.0), (0.5, 1.0), (0.0, 0.1), (3.0, 2.0)):
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
variance = (log_mu8.exp() * w8 ** 2).sum() - 1
confirm("Var_mu(w) = E_pi[w] - 1", (variance - ((log_pi8.exp() * w8).sum() - 1)).abs(), 1e-12)

# %%
shown = [(0.5, 0.0), (0.5, 1.0), (3.0, 2.0)]
fig, axes = plt.subplots(1, len(shown), figsize=(9, 2.6), sharey=True)
x = torch.arange(8).float()
names = ["".join(map(str, s.tolist())) for s in space8.seqs]
for ax, key in zip(axes, shown):
    ax.bar(x - 0.27, log_mu8.exp(), 0.27, color="tab:blue", label="μ (sampled the data)")
    ax.bar(x, log_pi8.exp(), 0.27, color="tab:orange", label="π (current)")
    ax.bar(x + 0.27, proposals[key], 0.27, color="tab:green", label="Q*")
    ax.set_xticks(x.tolist(), names, fontsize=7)
    ax.set_title(f"α = {key[0]}, λ = {key[1]}")
    ax.set_xlabel("response y")
axes[0].set_ylabel("probability")
axes[0].legend(fontsize=7)
fig.tight_layout()
plt.show()
print("w of each response:", " ".join(f"{v:.2f}" for v in w8.tolist()))

# %% [markdown]
# With $\lambda=0$, $Q^*$ sits between $\mu$ and $\pi$ (a geometric mixture). The tilt
# $e^{-\lambda w}$ takes mass away from responses with a large $w$, the ones that blow up the
# variance (compare 000 and 010 in the middle panel); at $(\alpha,\lambda)=(3,2)$, the negative
# branch's setting, the proposal favours $w$ near $\alpha/\lambda=1.5$ and drops the low-$w$
# response 110 altogether.
#
# *Takeaway:* the ReSPO coefficient is the density ratio $Q^*/\mu$ of a proposal that
# balances $\mu$, $\pi$ and a variance budget, up to the per-prompt constant the kernel drops.
#
# ## 6. The surrogate $\Phi$ whose gradient is the kernel, and its closed forms
#
# The loss is `-stopgrad(phi) * A * log pi`. It is the gradient of a real objective
# (docs/math.md §4.3): $J=\operatorname{mean}_iA_i\,\Phi(w_i)$ with
# $$\Phi(w)=\int_1^w u^{\alpha-1}e^{-\lambda(u-1)}\,du .$$
# *Reason:* $\nabla\Phi(w)=\Phi'(w)\,w\,\nabla\log\pi=w^{\alpha}e^{-\lambda(w-1)}\nabla\log\pi=\phi(w)\nabla\log\pi$.
#
# **Closed forms, by the substitution $v=\lambda u$** ($du=dv/\lambda$, $u^{\alpha-1}=v^{\alpha-1}\lambda^{1-\alpha}$):
# $$\Phi(w)=e^{\lambda}\lambda^{-\alpha}\int_\lambda^{\lambda w}v^{\alpha-1}e^{-v}\,dv .$$
# - $\alpha>0$, $\lambda>0$: the integral is a difference of lower incomplete gammas,
#   $\Phi=e^\lambda\lambda^{-\alpha}\Gamma(\alpha)\,[P(\alpha,\lambda w)-P(\alpha,\lambda)]$ with $P$ the regularised one.
# - $\alpha=0$, $\lambda>0$: the integrand is $e^{-v}/v$, whose tail integral is the exponential
#   integral $E_1(z)=\int_z^\infty e^{-v}/v\,dv$, so $\Phi=e^\lambda\,[E_1(\lambda)-E_1(\lambda w)]$.
# - $\lambda=0$: $\int_1^wu^{\alpha-1}du=(w^\alpha-1)/\alpha$, and $\log w$ at $\alpha=0$ (§3's surrogate).
#
# Check the kernel's `respo_surrogate` on every branch: its derivative in $\log w$ is $\phi$
# (autograd), and its value is the integral (quadrature in $\log w$):

# %%
grid = torch.linspace(-5.0, 2.5, 30001, dtype=torch.float64)
slope_errors, value_errors = [], []
for alpha, lam in ((0.0, 0.1), (0.0, 0.0), (0.5, 0.0), (3.0, 2.0), (0.5, 0.7)):
    s = grid.clone().requires_grad_(True)
    (slope,) = torch.autograd.grad(respo_surrogate(s, alpha, lam).sum(), s)
    slope_errors.append((slope - power_tilt(grid, alpha, lam)).abs().max())
    quad = torch.cumulative_trapezoid(power_tilt(grid, alpha, lam), grid)   # int_{-5}^{s} phi(e^v) dv
    closed = respo_surrogate(grid, alpha, lam)
    value_errors.append(((closed[1:] - closed[0]) - quad).abs().max())
confirm("dPhi/dlog w = phi on all five branches (autograd of the closed forms)", max(slope_errors), 1e-10)
confirm("Phi(w) - Phi(e^-5) = quadrature of phi on all five branches", max(value_errors), 1e-6)

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
Phi = torch.where(adv > 0, respo_surrogate(s, cfg.alpha_pos, cfg.lambda_pos),
                  respo_surrogate(s, cfg.alpha_neg, cfg.lambda_neg))
(g_surrogate,) = torch.autograd.grad(-(adv * Phi).sum() / mask.any(-1).sum(), logp)
confirm("grad policy_loss = grad of -mean A Phi(w)", (g_loss - g_surrogate).abs().max(), 1e-12)

# %% [markdown]
# *Takeaway:* ReSPO is not a heuristic reweighting: it is the exact gradient of a surrogate
# with a closed form, so everything said about objectives applies to it.
#
# ## 7. Why two branches, and why the defaults sit where they do
#
# Nothing forces one $(\alpha,\lambda)$ for both signs: the derivation holds for each sign
# separately, so ReSPO uses one per sign (docs/math.md §3):
# $$\phi_\pm(w)=w^{\alpha_\pm}e^{-\lambda_\pm(w-1)},\qquad\phi_\pm(1)=1 .$$
#
# **What a positive ($A>0$) needs.** Its signal must survive $w\to0$ (the clip's starved cell).
# $\alpha_+$ sets how fast $\phi_+$ falls as $w\to0$ ($\sim w^{\alpha_+}$), so $\alpha_+=0$ keeps a floor:
# $\phi_+\to e^{\lambda_+}$. $\lambda_+$ sets how fast it falls for large $w$; a small $\lambda_+$ keeps
# pushing positives that are already up, but gently ($\phi_+(10)\approx0.4$ at $\lambda_+=0.1$).
#
# **What a negative ($A<0$) needs.** Its weight must not explode as $w\to\infty$ (the clip's
# unbounded cell): $\lambda_->0$ makes $\phi_-\to0$ there, with the peak at $w^*=\alpha_-/\lambda_-$.
# It also needs a trust region below $w=1$: a wrong answer already pushed down should stop
# being pushed, which is $\phi_-\sim w^{\alpha_-}\to0$ as $w\to0$. $\alpha_->\lambda_-$ puts the peak
# above 1, so a negative the policy over-generates (slightly above 1) is pushed hardest and
# one already below 1 fades fast.
#
# **The defaults $(\alpha_+,\lambda_+,\alpha_-,\lambda_-)=(0,0.1,3,2)$** are the project's toy
# evidence (`toy/RESULTS.md`): the best of the settings screened, not the paper's constants,
# which the abstract does not give. In words to repeat: *positives keep a floor, negatives
# get a bump: pushed hardest just above $w=1$, released far above and far below.*

# %%
c = LossConfig()
w_show = torch.tensor([1e-3, 0.1, 0.5, 1.0, 2.0, 10.0], dtype=torch.float64)
phi_pos = respo_coefficient(w_show.log(), torch.ones(6, dtype=torch.bool))
phi_neg = respo_coefficient(w_show.log(), torch.zeros(6, dtype=torch.bool))
print("w        " + "".join(f"{v:>8g}" for v in w_show.tolist()))
print("phi_+(w) " + "".join(f"{v:>8.3f}" for v in phi_pos.tolist()))
print("phi_-(w) " + "".join(f"{v:>8.3f}" for v in phi_neg.tolist()))
floor = respo_coefficient(torch.tensor([-50.0], dtype=torch.float64), torch.tensor([True]))
confirm(f"the positive floor is e^lambda_+ = {math.exp(c.lambda_pos):.3f}",
        (floor - math.exp(c.lambda_pos)).abs().max(), 1e-12)
dense = torch.linspace(-3, 3, 600001, dtype=torch.float64)
phi_dense = respo_coefficient(dense, torch.zeros_like(dense, dtype=torch.bool))
w_star = c.alpha_neg / c.lambda_neg
peak = w_star ** c.alpha_neg * math.exp(c.lambda_neg - c.alpha_neg)
confirm(f"the negative peak is at w* = alpha_-/lambda_- = {w_star:.2f} with height {peak:.3f}",
        max(abs(dense[phi_dense.argmax()].exp().item() - w_star), abs(phi_dense.max().item() - peak)), 1e-4)

# %% [markdown]
# *Takeaway:* one kernel family, two settings: a floor for positives (nothing correct is
# starved) and a bump for negatives (nothing wrong dominates). Notebook 02 lets you move the
# four numbers and see what each one does.
