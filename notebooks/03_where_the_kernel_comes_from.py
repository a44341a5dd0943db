# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Where ReSPO's kernel comes from
#
# **The question.** Core notebook 02 drew ReSPO's two branches,
# $\phi_+(W)=\frac{1+W}{2}e^{1-W}$ and $\phi_-(W)=\sqrt W\,e^{2(1-\sqrt W)}$. Why these curves, and why these
# constants?
#
# **The answer.** In three steps (docs/math.md §4, after the paper's own summary). A coefficient
# is a change of measure: $\phi(W)$ is the density ratio $Q/\mu$ of a proposal $Q$ the gradient is
# averaged under. The proposal starts as the measure closest to both $\mu$ and $\pi$ in an
# α-divergence, a power mean $\phi_0$ of 1 and $W$ whose order is set by the sign of $A$. Then a
# projection under a moment budget tilts it, $\phi=\phi_0\,e^{\lambda(1-\phi_0)}$, which bounds it. The
# constants follow from two conditions on the curve, not from a search.
#
# Each result is stated with one check against the kernel (`nano_respo.kernel`) on an enumerated
# space of 27 responses (`course.SequenceSpace`), where expectations are exact sums; the steps in
# between and other checks are in [deeper/derivation_details §9-§10](deeper/derivation_details.ipynb).
# Two steps are this project's reading of the paper, whose full argument was not readable here:
# marked *Reconstructed*, as in docs/math.md. We write $W=\pi(y|x)/\mu(y|x)$, the paper's name for core
# 01's $w$.
#
# ## 1. A coefficient is a change of measure
#
# For any coefficient $\phi(W)>0$,
# $$\mathbb E_\mu[\phi(W)\,A\,\nabla\log\pi]=Z\,\mathbb E_Q[A\,\nabla\log\pi],\qquad Q=\frac{\mu\,\phi(W)}{Z},\quad Z=\mathbb E_\mu[\phi(W)] .$$
# Choosing $\phi$ is choosing where the gradient is taken: $\phi=W$ gives $Q=\pi$ (the exact gradient,
# core 01 §4), $\phi=1$ gives $Q=\mu$ (the weight ignored).

# %%
import math

import matplotlib.pyplot as plt
import torch

from course import SequenceSpace, branch_slope, confirm, divergence
from nano_respo.kernel import power_mean_log, power_tilt, respo_branch, respo_coefficient

torch.set_num_threads(1)
plt.rcParams.update({"figure.dpi": 100, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})

space = SequenceSpace(vocab=3, length=3)
reward = (space.seqs.sum(-1) >= 4).double()
g = torch.Generator().manual_seed(0)
theta_mu = space.random_theta(g)
theta = theta_mu + 0.8 * space.random_theta(g)
log_mu, log_pi = space.log_probs(theta_mu), space.log_probs(theta)
mu, pi, log_W = log_mu.exp(), log_pi.exp(), log_pi - log_mu
A = reward - (mu * reward).sum()
score = torch.autograd.functional.jacobian(space.log_probs, theta)          # [27, P] grad log pi(y)
phi = respo_coefficient(log_W, A > 0)                                        # ReSPO, both branches
Q = mu * phi / (mu * phi).sum()
confirm("E_mu[phi A grad log pi] = Z E_Q[A grad log pi] with Q = mu phi / Z",
        ((mu * phi * A) @ score - (mu * phi).sum() * (Q * A) @ score).abs().max(), 1e-12)
confirm("phi = W gives Q = pi, phi = 1 gives Q = mu",
        max((mu * log_W.exp() / (mu * log_W.exp()).sum() - pi).abs().max(), (mu / mu.sum() - mu).abs().max()), 1e-12)

# %% [markdown]
# The group baseline and a flat positive branch under this reading:
# [deeper/derivation_details §1](deeper/derivation_details.ipynb).
#
# ## 2. The power mean: the measure closest to both policies
#
# Take Amari's α-divergence between positive measures, indexed by $\gamma=\alpha-1$,
# $D_\gamma(p\|m)=\sum\frac{p^\gamma m^{1-\gamma}-\gamma p-(1-\gamma)m}{\gamma(\gamma-1)}$ (KL at $\gamma\to1$ and $0$;
# `course.divergence`). The measure closest to $\mu$ and $\pi$ with weights $(1-\beta,\beta)$,
# $m^\star=\arg\min_m(1-\beta)D_\gamma(\mu\|m)+\beta D_\gamma(\pi\|m)$, is their power mean:
# $$\frac{m^\star}{\mu}=\phi_0(W)=\big[(1-\beta)+\beta W^{\alpha-1}\big]^{\frac1{\alpha-1}} .$$
# The order picks the tail. At $\alpha=2$ (the positive branch) it is the arithmetic mixture,
# $\phi_0=(1-\beta)+\beta W\ge1-\beta$: an under-generated success keeps $\mu$'s share. At $\alpha=1$ (the
# negative branch) it is the geometric mixture, $\phi_0=W^\beta\to0$: a failure $\pi$ dropped stays
# dropped. *Reconstructed:* the paper calls this step an α-divergence power mean; the barycentre
# is this project's reading of it, with the indexing chosen so that the published constants read
# as the code writes them (docs/math.md §4.2). The objective is convex in $m$; check that its
# gradient vanishes at the kernel's `power_mean_log`, at the two published orders and two others:

# %%
errors = []
for alpha, beta in ((2.0, 0.5), (1.0, 0.5), (3.0, 0.3), (1.5, 0.7)):
    log_m = (log_mu + power_mean_log(log_W, alpha, beta)).requires_grad_(True)   # m = mu phi_0(W)
    objective = (1 - beta) * divergence(mu, log_m.exp(), alpha - 1) + beta * divergence(pi, log_m.exp(), alpha - 1)
    errors.append(torch.autograd.grad(objective, log_m)[0].abs().max())
confirm("the objective is stationary at m = mu phi_0(W) at (alpha, beta) = (2, 1/2), (1, 1/2), (3, 0.3), (1.5, 0.7)",
        max(errors), 1e-12)

# %% [markdown]
# ## 3. The tilt: a projection under a moment budget
#
# Both power means grow without bound as $W\to\infty$. Normalise the mean, $Q_0=\mu\phi_0/Z_0$, and
# project it onto the proposals under which the untilted power-mean weight $\phi_0$ stays within a budget,
# $\mathbb E_Q[\phi_0]\le C$ (not $Q$'s own weight $Q/\mu$; docs/math.md §4.3):
# $$Q^\star=\arg\min_Q\ \mathrm{KL}(Q\|Q_0)+\lambda\,\mathbb E_Q[\phi_0]\quad\Longrightarrow\quad Q^\star\propto\mu\,\phi_0\,e^{-\lambda\phi_0},$$
# with $\lambda\ge0$ the budget's Lagrange multiplier (Csiszár's I-projection: a moment constraint
# gives an exponential tilt). Fixing the value 1 at $W=1$, where $\phi_0=1$, gives the kernel,
# $\phi=\phi_0e^{\lambda(1-\phi_0)}$. As a function of $u=\phi_0$ it peaks at $u=1/\lambda$ with height
# $e^{\lambda-1}/\lambda$, $e/2$ at $\lambda=2$, and falls to 0: the tilt bounds the coefficient, so a
# one-response estimate's second moment is bounded however far the policy drifts (docs/math.md §4.6),
# and fades both branches for large $W$. *Reconstructed:* the paper names a moment constraint whose
# multiplier gives the exponential factor; that the moment is $\mathbb E_Q[\phi_0]$, the one that gives
# exactly the published factor, is this project's reading (docs/math.md §4.3). The projection's
# objective is convex in $Q$; check that it is stationary at $Q\propto\mu\phi$ for each published
# branch, and the bound:

# %%
stationary = []
for alpha, beta, lam in ((2.0, 0.5, 2.0), (1.0, 0.5, 2.0)):
    phi0 = power_mean_log(log_W, alpha, beta).exp()
    log_q0 = (mu * phi0 / (mu * phi0).sum()).log()
    z = (log_mu + respo_branch(log_W, alpha, beta, lam).log()).requires_grad_(True)   # Q ~ mu phi, as logits
    q = torch.softmax(z, 0)
    stationary.append(torch.autograd.grad((q * (q.log() - log_q0)).sum() + lam * (q * phi0).sum(), z)[0].abs().max())
confirm("KL(Q || Q_0) + lambda E_Q[phi_0] is stationary at Q ~ mu phi_+ and at Q ~ mu phi_-", max(stationary), 1e-12)
u = torch.linspace(0.01, 6, 60001, dtype=torch.float64)
tilted = u * torch.exp(2 * (1 - u))
confirm("at lambda = 2 the tilt u e^(2 (1 - u)) peaks at u = 1/2 with height e/2",
        max(abs(u[tilted.argmax()].item() - 0.5), abs(tilted.max().item() - math.e / 2)), 1e-4)
sup = respo_coefficient(torch.linspace(-20, 20, 40001, dtype=torch.float64).repeat(2), torch.arange(80002) < 40001).max()
confirm("phi <= e/2 on both branches over W from e^-20 to e^20", max(0.0, sup.item() - math.e / 2), 1e-12)

# %% [markdown]
# The two steps, drawn: the power mean $\phi_0$ (dashed) and the tilted kernel $\phi$ (solid), per
# branch. At $\lambda=2$ the peak sits where $\phi_0=1/2$: at $W=0$ for the positive branch (its
# arithmetic mean never drops below 1/2) and at $W=1/4$ for the negative one ($\sqrt W=1/2$). What
# the two proposals look like on one draw, and how the kernel splices them:
# [deeper/derivation_details §9](deeper/derivation_details.ipynb).

# %%
grid = torch.linspace(math.log(1e-3), math.log(30.0), 800, dtype=torch.float64)
fig, axes = plt.subplots(1, 2, figsize=(9, 3.1), sharey=True)
for ax, (name, (alpha, beta, lam), colour) in zip(axes, (("A > 0: α = 2 (arithmetic)", (2.0, 0.5, 2.0), "tab:red"),
                                                         ("A < 0: α = 1 (geometric)", (1.0, 0.5, 2.0), "tab:blue"))):
    ax.plot(grid.exp(), power_mean_log(grid, alpha, beta).exp(), "--", color=colour, label="φ₀: the power mean of 1 and W")
    ax.plot(grid.exp(), respo_branch(grid, alpha, beta, lam), color=colour, lw=2, label="φ = φ₀ · exp(λ (1 − φ₀))")
    ax.plot(grid.exp(), grid.exp(), ":", color="0.5", label="W")
    ax.axhline(math.e / 2, color="0.6", lw=0.8)
    ax.set(xscale="log", ylim=(0, 3), xlabel="W", title=f"{name}, β = {beta:g}, λ = {lam:g}")
    ax.legend(fontsize=7, loc="upper left")
axes[0].set_ylabel("coefficient")
axes[0].text(1.5e-3, math.e / 2 + 0.06, "e/2: the tilt's bound", fontsize=7, color="0.4")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 4. The constants, set analytically
#
# For any order, $\phi_0(1)=1$ and $\phi_0'(1)=\beta$, so the slope at $W=1$ is $\phi'(1)=\beta(1-\lambda)$. The
# positive branch's slope vanishes at $W=0$ exactly when $\lambda(1-\beta)=1$ (deeper/derivation_details
# §10 differentiates it and checks the slope at four orders): $\lambda_+=1/(1-\beta_+)$ makes $W=0$ the
# branch's stationary maximum, the most weight for the most under-generated success. With
# $\beta_+=\tfrac12$ that is $\lambda_+=2$, and slope $-\tfrac12$ at $W=1$. The negative branch takes the same
# $\beta_-=\tfrac12$ and the $\lambda_-$ that matches that slope, so both signs answer a small drift alike:
# $\beta_-(1-\lambda_-)=-\tfrac12$ gives $\lambda_-=2$. Checked by autograd on the kernel's branch
# (`course.branch_slope`), and drawn:

# %%
near_zero = {lam: branch_slope(math.log(1e-6), 2.0, 0.5, lam) for lam in (1.5, 2.0, 3.0)}
confirm("only lambda_+ = 1 / (1 - beta_+) = 2 makes W = 0 stationary; the published slopes at W = 1 are both "
        "beta (1 - lambda) = -1/2",
        max(abs(near_zero[2.0]), max(0.0, 0.1 - min(abs(near_zero[1.5]), abs(near_zero[3.0]))),
            abs(branch_slope(0.0, 2.0, 0.5, 2.0) + 0.5), abs(branch_slope(0.0, 1.0, 0.5, 2.0) + 0.5)), 1e-5)
fig, ax = plt.subplots(figsize=(6, 2.6))
for lam, colour in zip((1.5, 2.0, 3.0), ("0.6", "tab:red", "0.3")):
    ax.plot(grid.exp(), respo_branch(grid, 2.0, 0.5, lam), color=colour, lw=2 if lam == 2.0 else 1, label=f"λ₊ = {lam:g}")
ax.set(xlim=(0, 1.5), xlabel="W", ylabel="φ₊ (α = 2, β = 1/2)", title="slope at W = 0: zero only at λ₊ = 2")
ax.legend(fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# *Not derived here:* why $\beta=\tfrac12$. The paper sets it analytically and its argument was not
# readable; equal weights on the two policies are the symmetric choice, and that this is the paper's
# reason is a conjecture (docs/math.md §4.4). Every coefficient is also the gradient of a surrogate,
# ReSPO's in closed form: [deeper/derivation_details §6](deeper/derivation_details.ipynb).
#
# ## 5. VESPO's construction, credited
#
# This shape of argument is VESPO's (Shen et al., arXiv:2602.10693, §3): a reshaping read as a
# proposal, and a proposal between behaviour and target under a weight budget, which gives VESPO's
# kernel $W^\alpha e^{-\lambda(W-1)}$, a geometric mixture of the two policies tilted on $W$
# (deeper/derivation_details §5). ReSPO keeps the shape, with a power mean whose order depends on the
# sign in place of the geometric mixture, and its tilt on that mean. Without the tilt the two
# families meet: ReSPO's geometric branch is VESPO's untilted power. VESPO's derivation and this
# project's earlier reconstruction (`respo_wtilt`, VESPO's family with a flat positive branch):
# [deeper/derivation_details §3-§7](deeper/derivation_details.ipynb).

# %%
confirm("ReSPO's branch at alpha = 1, lambda = 0 is W^beta, VESPO's family w^alpha e^(-lambda (w - 1)) at lambda = 0",
        max((respo_branch(grid, 1.0, b, 0.0) - power_tilt(grid, b, 0.0)).abs().max() for b in (0.25, 0.5, 0.75)), 1e-12)

# %% [markdown]
# > **What to remember**
# > - A coefficient is a proposal: $\phi(W)$ is $Q/\mu$ up to a constant.
# > - ReSPO's $\phi_0$ is the α-divergence barycentre of the two policies, arithmetic for successes and geometric for failures; the tilt, a projection under a moment budget, bounds it by $e/2$.
# > - The constants come from two conditions: $W=0$ the positive branch's stationary maximum, equal slopes at $W=1$. $\beta=\tfrac12$ is not derived here.
#
# ## Quick questions
#
# 1. Which proposal does $\phi=W$ give, and which does $\phi=1$?
#    <details><summary>answer</summary>$Q=\mu W/Z=\pi$ (the exact gradient) and $Q=\mu$ (the behaviour policy's gradient); §1's check.</details>
# 2. Before the tilt, why does an under-generated success keep weight as $W\to0$ and a dropped failure not?
#    <details><summary>answer</summary>The positive branch's arithmetic mixture never drops below $1-\beta$; the negative branch's geometric one, $W^\beta$, goes to 0 (§2).</details>
# 3. With $\beta_+=\tfrac12$, which $\lambda_+$ makes $W=0$ the positive branch's stationary maximum, and what is $\phi_+(0)$ then?
#    <details><summary>answer</summary>$\lambda_+=1/(1-\beta_+)=2$ (§4's check and figure), and $\phi_+(0)=\tfrac12e^{1}=e/2$.</details>
#
# ## Sources
#
# From [docs/bibliography.md](../docs/bibliography.md): ReSPO's kernel, constants and derivation
# (Chen, Ban and Hsieh, arXiv:2609.35433), read here through docs/math.md §3-§4; the α-mean as the
# minimiser of weighted α-divergences (Amari, Neural Computation 19(10), 2007); the exponential tilt
# from a moment constraint (Csiszár's I-projection, Annals of Probability 3(1), 1975); the
# variational proposal under a weight budget (VESPO, Shen et al., arXiv:2602.10693).
