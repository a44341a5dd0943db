# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercises · solutions
#
# Six exercises on the derivations of core notebooks 02-03 and `deeper/derivation_details`, each with a
# check cell that grades your answer by
# autograd or by the kernel itself and says ✓ or ✗ with a hint. Write your answer in the cell
# marked *your answer*, run it, then run the check under it. The solutions are in
# this notebook, which passes every check. Math: docs/math.md §2-§5 and §8.

# %%
import math

import torch

from checks import (PROPERTIES, SAPO_TAU, check_baseline_term, check_e1_surrogate,  # noqa: F401
                    check_log_space_phi, check_mutant, check_negative_peak, check_sapo_coefficient,
                    coefficient_of, loss_at_the_is_corner, mutant, sapo_surrogate)  # yours to poke at
from nano_respo.surrogate import exp1  # noqa: F401 (E1, for exercise 4)

torch.set_num_threads(1)

# %% [markdown]
# ## 1. A coefficient from its surrogate
#
# SAPO replaces the clip by a soft gate. Its per-token objective is
# $$J(r)=\frac{4}{\tau}\,\sigma\big(\tau(r-1)\big)\,A,\qquad r=\pi_\theta(y_t|\cdot)/\mu(y_t|\cdot),$$
# with $\tau=1$ for $A>0$ and $\tau=1.05$ for $A<0$ (`SAPO_TAU`; `sapo_surrogate` in `checks.py`
# is this $J$). Like every method here, its gradient is a coefficient on the policy gradient:
# $\nabla J=\phi(r)\,A\,\nabla\log\pi_\theta$. Write $\phi$ as a function of $\log r$ and the sign.
# The check differentiates `sapo_surrogate` with autograd and compares.

# %%
# A solution. d/dlog pi of J = J'(r) r; J'(r) = 4 sigma'(tau (r - 1)) A, and
# sigma'(x) = sigma(x)(1 - sigma(x)) = 1 / (4 cosh^2(x / 2)). So phi = r / cosh^2(tau (r - 1) / 2).
def sapo_coefficient(log_r: torch.Tensor, positive: bool) -> torch.Tensor:
    """phi(r) with d J / d log pi = phi * A, for SAPO's gate (tau = SAPO_TAU[positive])."""
    r = torch.exp(log_r)
    tau = SAPO_TAU[positive]
    return r / torch.cosh(tau * (r - 1) / 2) ** 2

# %%
check_sapo_coefficient(sapo_coefficient)

# %% [markdown]
# ## 2. $\phi$ in log space
#
# Write the power-tilt branch $\phi(w)=w^\alpha e^{-\lambda(w-1)}$ (VESPO's family, which this project's
# reconstruction `respo_wtilt` uses; docs/math.md §8) as a function of $s=\log w$ that is
# exact wherever $w^\alpha$ is a representable number and finite (no nan, no inf) for *every*
# finite $s$, including $|s|=10^4$ (docs/math.md §3, "Numerics", and §8). Do not call the kernel.

# %%
# A solution. log phi = alpha s - lam (e^s - 1). Cap s before exp (e^s overflows past 709)
# and log phi before the final exp; the caps only act where phi is 0 or beyond float range.
def log_space_phi(log_w: torch.Tensor, alpha: float, lam: float) -> torch.Tensor:
    """w**alpha * exp(-lam (w - 1)) from s = log w, finite for every finite s."""
    log_phi = alpha * log_w - lam * torch.expm1(log_w.clamp(max=20.0))
    return torch.exp(log_phi.clamp(max=20.0))

# %%
check_log_space_phi(log_space_phi)

# %% [markdown]
# ## 3. The peak of the negative branch
#
# For $\alpha,\lambda>0$, where does VESPO's negative branch $\phi_-(w)=w^\alpha e^{-\lambda(w-1)}$ peak, and how high? Return
# `(w_star, phi_max)` in closed form. The check compares with a dense grid of the kernel.

# %%
# A solution. d/dw [alpha log w - lam (w - 1)] = alpha / w - lam = 0 at w* = alpha / lam, a maximum
# (the second derivative -alpha / w^2 < 0), where phi = (alpha / lam)^alpha e^(lam - alpha).
def negative_peak(alpha: float, lam: float) -> tuple[float, float]:
    """(w*, phi(w*)) for phi(w) = w**alpha exp(-lam (w - 1)), alpha, lam > 0."""
    w_star = alpha / lam
    return w_star, w_star ** alpha * math.exp(lam - alpha)

# %%
check_negative_peak(negative_peak)

# %% [markdown]
# ## 4. The E1 case of $\Phi$
#
# At $\alpha_+=0$ the reconstruction's positive branch is $\phi_+(w)=e^{-\lambda(w-1)}$ and its surrogate
# (`deeper/derivation_details` §6) is $\Phi(w)=\int_1^w e^{-\lambda(u-1)}\,du/u$. Write $\Phi$ in closed form with
# the exponential integral $E_1(z)=\int_z^\infty e^{-v}/v\,dv$ (`exp1`, differentiable). The check
# differentiates your $\Phi$ in $\log w$ by autograd, compares with the kernel's $\phi_+$, and
# asks for $\Phi(1)=0$. Do not call `power_tilt_surrogate`.

# %%
# A solution. With v = lam u: int_1^w e^(-lam (u - 1)) du / u = e^lam int_lam^(lam w) e^-v dv / v, and
# int_a^b = int_a^inf - int_b^inf = E1(a) - E1(b).
def e1_surrogate(log_w: torch.Tensor, lam: float) -> torch.Tensor:
    """Phi(w) = int_1^w exp(-lam (u - 1)) du / u, in closed form with exp1; differentiable in log_w."""
    return math.exp(lam) * (exp1(torch.full_like(log_w, lam)) - exp1(lam * torch.exp(log_w)))

# %%
check_e1_surrogate(e1_surrogate)

# %% [markdown]
# ## 5. What the baseline adds to $J_\alpha$
#
# With $A=r-b$, the power surrogate is $J_\alpha=\mathbb E_\mu[(r-b)(w^\alpha-1)/\alpha]$. How much does
# the baseline $b$ add to it, compared with $A=r$? Write it as a function of $b$, $\alpha$ and
# $D_\alpha(\pi\|\mu)$ (`deeper/derivation_details` §4). The check computes the difference by enumeration on
# one prompt's 27 responses (`checks.baseline_space()`) for four $\alpha$ and two $b$.

# %%
# A solution. The b part is -b (E_mu[w^alpha] - 1) / alpha, and E_mu[w^alpha] = 1 - alpha (1 - alpha) D_alpha.
def baseline_term(b: float, alpha: float, d_alpha: float) -> float:
    """E_mu[(r - b) (w^alpha - 1) / alpha] - E_mu[r (w^alpha - 1) / alpha]."""
    return b * (1 - alpha) * d_alpha

# %%
check_baseline_term(baseline_term)

# %% [markdown]
# ## 6. Find the silent bug
#
# `mutant("mutant_a")` … `mutant("mutant_e")` are copies of `nano_respo/kernel.py`, each with
# one small edit. None raises an error and each still trains. For each, name a property that
# catches it, and give the number that property reads off the mutant (each property's
# "Reads:" says which), one of:

# %%
for name, prop in PROPERTIES.items():
    print(f"{name:>20}: {prop.__doc__}")

# %% [markdown]
# Poke at the mutants like the real kernel, e.g. `mutant("mutant_a").respo_branch(torch.zeros(1), 2.0, 0.5, 2.0)`,
# or run a property on one: `PROPERTIES["on_policy"](mutant("mutant_a"))`. To read a coefficient
# off a kernel, `coefficient_of(k, method, w, positive)` differentiates its `policy_loss`; the
# loss at the plain-IS corner is `loss_at_the_is_corner(k)`. Then fill in the dictionary with
# `(property, value)`, the value computed by your own call on the mutant, and for each mutant
# write in a comment *why* that property fails (which line of the kernel the edit must have
# touched, and what it does to $\phi$).

# %%
# A solution (other properties can catch some mutants too; the value is then the one that property reads).
answers = {
    # the tilt became exp(-lam phi_0) instead of exp(-lam (phi_0 - 1)): phi(1) = e^-lam, not 1, so a fresh
    # batch is no longer the policy gradient
    "mutant_a": ("on_policy", coefficient_of(mutant("mutant_a"), "respo", 1.0, True)),
    # the branches swapped: positives get sqrt(w) e^(2 (1 - sqrt w)) -> 0 as w -> 0, the starvation ReSPO removes
    "mutant_b": ("positive_limit", coefficient_of(mutant("mutant_b"), "respo", 1e-30, True)),
    # the tilt is gone (lam * -> 0 *): phi = phi_0, and phi_- = sqrt(w) grows without bound for over-generated
    # negatives
    "mutant_c": ("negative_vanishes", coefficient_of(mutant("mutant_c"), "respo", 1e6, False)),
    # the clamp of log w is gone: at the plain-IS corner (beta, lambda) = (1, 0), phi = w = e^(1e4) overflows to inf
    "mutant_d": ("finite_at_extremes", loss_at_the_is_corner(mutant("mutant_d"))),
    # positives are clipped at 1 + eps_low: DAPO's clip-higher (1 + 0.28) silently becomes 1 + 0.2
    "mutant_e": ("dapo_clip_higher", coefficient_of(mutant("mutant_e"), "dapo", 1.25, True)),
}

# %%
for name, (property_name, value) in answers.items():
    check_mutant(name, property_name, value)

# %% [markdown]
# ## Where this comes from
#
# - Exercise 1: SAPO's soft gate (Gao et al., arXiv:2511.20347), read as a coefficient the way
#   docs/math.md §2 and §5 read every method.
# - Exercises 2-4: the power-tilt family $\phi_\pm(w)=w^{\alpha_\pm}e^{-\lambda_\pm(w-1)}$ (VESPO's, Shen et al.,
#   arXiv:2602.10693, and this project's reconstruction `respo_wtilt`; docs/math.md §8), its surrogate
#   $\Phi$ and the exponential integral case (docs/math.md §8.3).
# - Exercise 5: the $\alpha$-divergence surrogate and its baseline term (docs/math.md §8.1,
#   `deeper/derivation_details` §4).
# - Exercise 6: mutation testing of a numerical kernel, as `tools/mutation_check.py` does for the
#   test suite; the properties restate docs/math.md §2-§3 (ReSPO's published kernel), the mutants are this course's
#   (`checks.MUTANTS`).
#
# One line per work: [docs/bibliography.md](../docs/bibliography.md).
