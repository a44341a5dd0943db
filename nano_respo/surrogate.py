"""The closed forms of the surrogates whose gradients are the kernel's coefficients, and the coefficient read
back from the loss's gradient: what the tests and the notebooks check the kernel against (autograd through Phi
reproduces phi). Not needed to train.

respo_surrogate: ReSPO's published family, docs/math.md §4.5. power_tilt_surrogate: VESPO's family
w**alpha exp(-lambda (w - 1)), which the reconstruction respo_wtilt also uses, docs/math.md §8.3."""

from __future__ import annotations

import math

import torch

from .kernel import LossConfig, policy_loss


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


def respo_surrogate(log_w: torch.Tensor, alpha: float, beta: float, lam: float) -> torch.Tensor:
    """Phi(W) = int_1^W phi(u) / u du for ReSPO's phi = phi_0 exp(lam (1 - phi_0)), in closed form at the two
    published orders (alpha = 1, the geometric mean; alpha = 2, the arithmetic mean); Phi(1) = 0.

    d Phi(W) / d theta = phi(W) * grad log pi(y|x): A * Phi is the objective whose gradient the detached
    coefficient reproduces (with sequence-sum aggregation). docs/math.md §4.5.
    """
    w = torch.exp(log_w)
    if beta == 0.0:  # phi_0 = 1, phi = 1: the plain log-likelihood
        return log_w
    if alpha == 1.0:  # phi_0 = W**beta; substitute v = u**beta
        if lam == 0.0:
            return torch.expm1(beta * log_w) / beta
        return -torch.expm1(lam * (1 - torch.exp(beta * log_w))) / (beta * lam)
    if alpha == 2.0:  # phi_0 = (1 - beta) + beta u; the tilt is exp(k (1 - u)) with k = lam beta
        if lam == 0.0:
            return (1 - beta) * log_w + beta * (w - 1)
        k = lam * beta
        return ((1 - beta) * math.exp(k) * (exp1(torch.full_like(w, k)) - exp1(k * w))
                - torch.expm1(k * (1 - w)) / lam)
    raise ValueError(f"alpha: the closed forms cover the published orders 1 and 2, got {alpha}")


def power_tilt_surrogate(log_w: torch.Tensor, alpha: float, lam: float) -> torch.Tensor:
    """Phi(w) = int_1^w u**(alpha-1) exp(-lam (u-1)) du, in closed form; Phi(1) = 0. docs/math.md §8.3."""
    w = torch.exp(log_w)
    if lam == 0.0:
        return log_w if alpha == 0.0 else torch.expm1(alpha * log_w) / alpha
    if alpha == 0.0:
        return math.exp(lam) * (exp1(torch.full_like(w, lam)) - exp1(lam * w))
    scale = math.exp(lam - alpha * math.log(lam) + math.lgamma(alpha))
    a = torch.full_like(w, alpha)
    return scale * (torch.special.gammainc(a, lam * w) - torch.special.gammainc(a, torch.full_like(w, lam)))


def phi_curve(method: str, log_w: torch.Tensor, positive: bool, **loss_overrides) -> torch.Tensor:
    """phi(w) read back from the gradient of kernel.policy_loss on one-token responses.

    With seq-mean-token-sum aggregation the loss is -mean_i phi_i A_i log pi_i, so
    d loss / d log pi_i = -phi_i A_i / B. One token per response makes the token ratio and
    the sequence weight the same number, so token- and sequence-level methods share an axis.
    """
    cfg = LossConfig(method=method, agg="seq-mean-token-sum", **loss_overrides)
    logp = log_w.double().clone()[:, None].requires_grad_(True)  # [B, 1]
    advantages = torch.full((len(log_w),), 1.0 if positive else -1.0, dtype=torch.float64)
    loss, _ = policy_loss(logp, torch.zeros_like(logp), advantages, torch.ones_like(logp, dtype=torch.bool), cfg)
    loss.backward()
    return (-logp.grad[:, 0] * len(log_w) / advantages).detach()  # [B]
