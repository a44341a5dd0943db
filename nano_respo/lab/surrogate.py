"""The closed form of ReSPO's surrogate, docs/math.md §4.3: what the tests and notebook 01 check the
kernel's coefficient against (autograd through Phi reproduces phi). Not needed to train."""

from __future__ import annotations

import math

import torch


def exp1(x: torch.Tensor) -> torch.Tensor:
    """Exponential integral E1(x) = int_x^inf e^-u / u du for x > 0, differentiable.

    Power series below 1, Lentz's continued fraction above (Numerical Recipes' expint, n = 1).
    """
    small = x <= 1.0
    xs = torch.where(small, x, torch.ones_like(x))
    series = -0.5772156649015329 - torch.log(xs)
    term = torch.ones_like(xs)
    for k in range(1, 30):
        term = -term * xs / k
        series = series - term / k
    xl = torch.where(small, torch.full_like(x, 2.0), x)
    b = xl + 1.0
    c = torch.full_like(xl, 1e300 if x.dtype == torch.float64 else 1e30)
    d = 1.0 / b
    h = d
    for i in range(1, 60):
        an = -float(i * i)
        b = b + 2.0
        d = 1.0 / (an * d + b)
        c = b + an / c
        h = h * c * d
    return torch.where(small, series, h * torch.exp(-xl))


def respo_surrogate(log_w: torch.Tensor, alpha: float, lam: float) -> torch.Tensor:
    """Phi(w) = int_1^w u**(alpha-1) exp(-lam (u-1)) du, in closed form; Phi(1) = 0.

    d Phi(w) / d theta = phi(w) * grad log pi(y|x): A * Phi is the objective whose gradient
    the detached ReSPO coefficient reproduces (with sequence-sum aggregation).
    """
    w = torch.exp(log_w)
    if lam == 0.0:
        return log_w if alpha == 0.0 else torch.expm1(alpha * log_w) / alpha
    if alpha == 0.0:
        return math.exp(lam) * (exp1(torch.full_like(w, lam)) - exp1(lam * w))
    scale = math.exp(lam - alpha * math.log(lam) + math.lgamma(alpha))
    a = torch.full_like(w, alpha)
    return scale * (torch.special.gammainc(a, lam * w) - torch.special.gammainc(a, torch.full_like(w, lam)))
