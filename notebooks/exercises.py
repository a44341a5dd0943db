# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercises
#
# Four exercises on notebooks 01–02, each with a check cell that grades your answer by
# autograd or by the kernel itself and says ✓ or ✗ with a hint. Write your answer in the cell
# marked *your answer*, run it, then run the check under it. The solutions are in
# `exercises_solutions.ipynb`; try first. Math: docs/math.md §2–§5.

# %%
import math  # noqa: F401 (for your answers)

import torch

from checks import (PROPERTIES, SAPO_TAU, check_log_space_phi, check_mutant, check_negative_peak,  # noqa: F401
                    check_sapo_coefficient, mutant, sapo_surrogate)  # mutant, sapo_surrogate: yours to poke at

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
# your answer
def sapo_coefficient(log_r: torch.Tensor, positive: bool) -> torch.Tensor:
    """phi(r) with d J / d log pi = phi * A, for SAPO's gate (tau = SAPO_TAU[positive])."""
    raise NotImplementedError("write the coefficient")

# %%
check_sapo_coefficient(sapo_coefficient)

# %% [markdown]
# ## 2. $\phi$ in log space
#
# Write ReSPO's branch $\phi(w)=w^\alpha e^{-\lambda(w-1)}$ as a function of $s=\log w$ that is
# exact wherever $w^\alpha$ is a representable number and finite (no nan, no inf) for *every*
# finite $s$, including $|s|=10^4$ (docs/math.md §3, "Numerics"). Do not call the kernel.

# %%
# your answer
def log_space_phi(log_w: torch.Tensor, alpha: float, lam: float) -> torch.Tensor:
    """w**alpha * exp(-lam (w - 1)) from s = log w, finite for every finite s."""
    raise NotImplementedError("write phi in log space")

# %%
check_log_space_phi(log_space_phi)

# %% [markdown]
# ## 3. The peak of the negative branch
#
# For $\alpha,\lambda>0$, where does $\phi_-(w)=w^\alpha e^{-\lambda(w-1)}$ peak, and how high? Return
# `(w_star, phi_max)` in closed form. The check compares with a dense grid of the kernel.

# %%
# your answer
def negative_peak(alpha: float, lam: float) -> tuple[float, float]:
    """(w*, phi(w*)) for phi(w) = w**alpha exp(-lam (w - 1)), alpha, lam > 0."""
    raise NotImplementedError("derive the peak")

# %%
check_negative_peak(negative_peak)

# %% [markdown]
# ## 4. Find the silent bug
#
# `mutant("mutant_a")` … `mutant("mutant_e")` are copies of `nano_respo/kernel.py`, each with
# one small edit. None raises an error and each still trains. For each, name a property that
# catches it, one of:

# %%
for name, prop in PROPERTIES.items():
    print(f"{name:>20}: {prop.__doc__}")

# %% [markdown]
# Poke at the mutants like the real kernel, e.g. `mutant("mutant_a").power_tilt(torch.zeros(1), 0.0, 0.1)`,
# or run a property on one: `PROPERTIES["on_policy"](mutant("mutant_a"))`. Then fill in the
# dictionary, and for each mutant write in a comment *why* that property fails (which
# line of the kernel the edit must have touched, and what it does to $\phi$).

# %%
# your answer: a property name from the list above for each mutant, and why in a comment
answers = {
    "mutant_a": "?",
    "mutant_b": "?",
    "mutant_c": "?",
    "mutant_d": "?",
    "mutant_e": "?",
}

# %%
for name, property_name in answers.items():
    check_mutant(name, property_name)
