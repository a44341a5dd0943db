"""Derivation checks of ReSPO's published kernel (docs/math.md §3, §4), each claim checked numerically.

Families, with the section each checks: 9 parity with the published closed forms (§3), 10 the two
branches' shapes (§3), 11 the family: power mean, limits and corners (§4.2), 12 the construction: the
power mean as an alpha-divergence barycentre, the tilt as a moment-constrained projection, the
analytic constants (§4.2-§4.4), 13 the surrogate Phi and the loss's gradient (§4.5).
"""

import itertools
import math

import pytest
import torch

from nano_respo.kernel import (LossConfig, policy_loss, power_mean_log, respo_branch, respo_coefficient,
                               sequence_log_weight)
from nano_respo.surrogate import respo_surrogate

pytestmark = pytest.mark.usefixtures("float64")  # tests/conftest.py

E = math.e
PUBLISHED = {"pos": (2.0, 0.5, 2.0), "neg": (1.0, 0.5, 2.0)}  # (alpha, beta, lambda), ReSPO-code's constants


def published_pos(w):
    return (1 + w) / 2 * torch.exp(1 - w)


def published_neg(w):
    return torch.sqrt(w) * torch.exp(2 * (1 - torch.sqrt(w)))


def slope_in_w(alpha, beta, lam, w):
    """d phi / d W by autograd, at the weights w."""
    w = w.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(respo_branch(torch.log(w), alpha, beta, lam).sum(), w)
    return grad


# --- 9. The coefficient is the published one ------------------------------------------

def test_the_default_coefficient_equals_the_published_closed_forms_on_a_grid_of_log_w():
    log_w = torch.linspace(-20, 20, 4001)
    w = log_w.exp()
    for positive, closed in ((True, published_pos), (False, published_neg)):
        phi = respo_coefficient(log_w, torch.full_like(log_w, positive, dtype=torch.bool))
        # float64 precision: exp() of an argument x rounds to a relative x * 2e-16, and |x| reaches a few hundred
        torch.testing.assert_close(phi, closed(w), rtol=1e-12, atol=1e-300)


def test_log_w_is_clamped_to_plus_minus_20_as_the_published_code_does():
    inside = torch.tensor([-20.0, 20.0])
    outside = torch.tensor([-1e4, 1e4])
    for positive in (True, False):
        sign = torch.full((2,), positive)
        assert torch.equal(respo_coefficient(outside, sign), respo_coefficient(inside, sign))
    assert respo_coefficient(torch.tensor([-1e4]), torch.tensor([True])).item() == pytest.approx(E / 2, rel=1e-8)


def test_policy_loss_with_the_default_config_is_the_published_token_mean_loss():
    """-phi A log pi per token, phi detached, divided by the number of response tokens (verl's token-mean)."""
    g = torch.Generator().manual_seed(0)
    B, T = 6, 5
    old = -torch.rand(B, T, generator=g)
    logp = (old + 0.4 * torch.randn(B, T, generator=g)).requires_grad_(True)
    mask = torch.arange(T)[None] < torch.tensor([5, 3, 1, 4, 2, 5])[:, None]
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0])
    loss, _ = policy_loss(logp, old, adv, mask, LossConfig())
    w = sequence_log_weight(logp, old, mask).exp()
    phi = torch.where(adv > 0, published_pos(w), published_neg(w))
    reference = -(phi[:, None] * adv[:, None] * logp * mask).sum() / mask.sum()
    torch.testing.assert_close(loss, reference)
    (got,) = torch.autograd.grad(loss, logp)
    torch.testing.assert_close(got, -(phi * adv)[:, None].expand(B, T) * mask / mask.sum())


# --- 10. The two branches --------------------------------------------------------------

@pytest.mark.parametrize("branch", ["pos", "neg"])
def test_both_branches_are_one_with_slope_minus_a_half_at_w_one(branch):
    one = torch.ones(1)
    assert respo_branch(torch.zeros(1), *PUBLISHED[branch]).item() == pytest.approx(1.0, abs=1e-15)
    assert slope_in_w(*PUBLISHED[branch], one).item() == pytest.approx(-0.5, abs=1e-12)


def test_the_positive_branch_is_largest_at_w_zero_and_falls_to_zero():
    w = torch.cat([torch.logspace(-12, -1, 50), torch.linspace(0.11, 40, 500)])
    phi = respo_branch(torch.log(w), *PUBLISHED["pos"])
    assert (phi.diff() <= 0).all() and (phi.diff()[w[:-1] > 1e-6] < 0).all()  # decreasing (flat to float64 near 0)
    assert phi[0].item() == pytest.approx(E / 2, rel=1e-10) and phi[-1].item() < 1e-15
    assert abs(slope_in_w(*PUBLISHED["pos"], torch.tensor([1e-8])).item()) < 1e-7  # stationary at W = 0: O(W)
    assert (phi[w < 1] > 1).all() and (phi[w < 1] > w[w < 1]).all()  # an under-generated positive is kept


def test_the_negative_branch_peaks_at_a_quarter_and_vanishes_at_both_ends():
    log_w = torch.linspace(-20, 20, 400001)
    w = log_w.exp()
    phi = respo_branch(log_w, *PUBLISHED["neg"])
    assert phi.max().item() == pytest.approx(E / 2, rel=1e-9)
    assert w[phi.argmax()].item() == pytest.approx(0.25, rel=1e-3)
    rising, falling = w[1:] < 0.25, (w[:-1] > 0.25) & (phi[1:] > 1e-250)  # until phi underflows
    assert (phi.diff()[rising] > 0).all() and (phi.diff()[falling] < 0).all()
    assert phi[0] < 1e-3 and phi[-1] < 1e-300  # 0 at both ends
    assert (phi[w > 1] < 1).all()  # an over-generated negative gets less than on-policy
    # and more than on-policy in a band below 1: moderately under-generated negatives are up-weighted
    band = (w > 0.05) & (w < 0.99)
    assert (phi[band] > 1).all()


# --- 11. The family: a power mean of 1 and W, then the tilt ----------------------------

ORDERS = [-1.0, 0.5, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("beta", [0.2, 0.5, 0.9])
def test_phi_0_is_a_power_mean_between_1_and_w_and_grows_with_its_order(beta):
    log_w = torch.linspace(-8, 8, 161)
    w = log_w.exp()
    means = torch.stack([power_mean_log(log_w, a, beta).exp() for a in ORDERS])  # [orders, W]
    lo, hi = torch.minimum(w, torch.ones_like(w)), torch.maximum(w, torch.ones_like(w))
    assert ((means >= lo * (1 - 1e-12)) & (means <= hi * (1 + 1e-12))).all()
    assert (means.diff(dim=0) >= -1e-12).all()  # the power-mean inequality: larger order, larger mean
    direct = ((1 - beta) + beta * w ** (ORDERS[-1] - 1)) ** (1 / (ORDERS[-1] - 1))
    torch.testing.assert_close(means[-1], direct)


@pytest.mark.parametrize("beta", [0.3, 0.5])
def test_the_order_one_is_the_limit_of_the_power_mean(beta):
    log_w = torch.linspace(-10, 10, 41)
    geometric = power_mean_log(log_w, 1.0, beta)
    torch.testing.assert_close(geometric, beta * log_w)
    for delta in (1e-5, -1e-5):
        torch.testing.assert_close(power_mean_log(log_w, 1.0 + delta, beta), geometric, atol=2e-3, rtol=0)
    assert (power_mean_log(log_w, 1.0 + 1e-6, beta) - geometric).abs().max() < 3e-4  # shrinks with the gap


@pytest.mark.parametrize("alpha", ORDERS)
def test_the_corners_of_the_family_are_no_weight_and_plain_importance_sampling(alpha):
    log_w = torch.linspace(-15, 15, 61)
    torch.testing.assert_close(respo_branch(log_w, alpha, 0.0, 0.0), torch.ones_like(log_w))  # beta = 0: no IS
    torch.testing.assert_close(respo_branch(log_w, alpha, 1.0, 0.0), log_w.exp())  # beta = 1, lambda = 0: IS
    for other, (beta, lam) in (("no_is", (0.0, 0.0)), ("is", (1.0, 0.0))):
        g = torch.Generator().manual_seed(3)
        old = -torch.rand(5, 4, generator=g)
        logp = (old + 0.5 * torch.randn(5, 4, generator=g)).requires_grad_(True)
        mask, adv = torch.ones(5, 4, dtype=torch.bool), torch.randn(5, generator=g)
        cfg = dict(alpha_pos=alpha, beta_pos=beta, lambda_pos=lam, alpha_neg=alpha, beta_neg=beta, lambda_neg=lam)
        mine = torch.autograd.grad(policy_loss(logp, old, adv, mask, LossConfig(**cfg))[0], logp)[0]
        theirs = torch.autograd.grad(policy_loss(logp, old, adv, mask, LossConfig(method=other))[0], logp)[0]
        torch.testing.assert_close(mine, theirs)


# --- 12. The construction -----------------------------------------------------------------

def enumerated_policies(seed, V=3, L=3):
    """mu and pi over all V**L sequences of two autoregressive tabular policies: (log mu, log pi) [N]."""
    g = torch.Generator().manual_seed(seed)
    tables = [torch.randn(*(V,) * (t + 1), generator=g) for t in range(L)]
    shifted = [t + 0.9 * torch.randn(t.shape, generator=g) for t in tables]
    seqs = torch.tensor(list(itertools.product(range(V), repeat=L)))

    def log_prob(tabs):
        total = torch.zeros(len(seqs))
        for t in range(L):
            logits = tabs[t][tuple(seqs[:, :t].T)] if t else tabs[0].expand(len(seqs), V)
            total = total + torch.log_softmax(logits, -1).gather(-1, seqs[:, t:t + 1])[:, 0]
        return total

    return log_prob(tables), log_prob(shifted)


def power_divergence(p, m, gamma):
    """Amari's alpha-divergence between positive measures, in the order gamma = alpha - 1 of the power mean:
    sum [p^g m^(1-g) - g p - (1-g) m] / (g (g - 1)); KL(p || m) at g = 1 and KL(m || p) at g = 0 (generalised)."""
    if gamma == 1.0:
        return (p * torch.log(p / m) - p + m).sum()
    if gamma == 0.0:
        return (m * torch.log(m / p) - m + p).sum()
    return ((p ** gamma * m ** (1 - gamma) - gamma * p - (1 - gamma) * m) / (gamma * (gamma - 1))).sum()


def minimise(objective, x0, rounds=3):
    x = x0.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([x], lr=1, max_iter=500, tolerance_grad=1e-14, tolerance_change=1e-16,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        value = objective(x)
        value.backward()
        return value

    for _ in range(rounds):
        opt.step(closure)
    return x.detach()


@pytest.mark.parametrize("alpha,beta", [(2.0, 0.5), (1.0, 0.5), (0.5, 0.3), (3.0, 0.7)])
def test_mu_times_phi_0_is_the_measure_closest_to_mu_and_pi_in_the_weighted_alpha_divergence(alpha, beta):
    """argmin over positive measures m of (1 - beta) D(mu || m) + beta D(pi || m) is m = mu * phi_0(pi / mu)."""
    log_mu, log_pi = enumerated_policies(1)
    mu, pi = log_mu.exp(), log_pi.exp()
    gamma = alpha - 1.0
    log_m = minimise(lambda x: (1 - beta) * power_divergence(mu, x.exp(), gamma)
                     + beta * power_divergence(pi, x.exp(), gamma), log_mu)
    expected = log_mu + power_mean_log(log_pi - log_mu, alpha, beta)
    torch.testing.assert_close(log_m, expected, atol=1e-6, rtol=0)
    assert (expected - log_mu).std() > 0.1  # and not trivially: phi_0 varies across the space


@pytest.mark.parametrize("branch,lam", [("pos", 2.0), ("neg", 2.0), ("pos", 0.7)])
def test_the_tilt_is_the_projection_of_the_power_mean_under_a_moment_budget(branch, lam):
    """Q* = argmin_Q KL(Q || Q_0) + lam E_Q[phi_0], Q_0 = mu phi_0 / Z_0, has Q* / mu proportional to phi."""
    alpha, beta, _ = PUBLISHED[branch]
    log_mu, log_pi = enumerated_policies(2, V=2)
    log_phi0 = power_mean_log(log_pi - log_mu, alpha, beta)
    log_q0 = torch.log_softmax(log_mu + log_phi0, 0)

    def objective(z):
        log_q = torch.log_softmax(z, 0)
        return (log_q.exp() * (log_q - log_q0)).sum() + lam * (log_q.exp() * log_phi0.exp()).sum()

    q = torch.softmax(minimise(objective, log_q0), 0)
    ratio = q / log_mu.exp() / respo_branch(log_pi - log_mu, alpha, beta, lam)
    assert ratio.std() / ratio.mean() < 1e-6
    assert respo_branch(log_pi - log_mu, alpha, beta, lam).std() > 0.05  # phi varies across the space


@pytest.mark.parametrize("beta", [0.3, 0.5, 0.8])
def test_lambda_plus_one_over_one_minus_beta_makes_w_zero_the_positive_branchs_stationary_maximum(beta):
    tiny = torch.tensor([1e-8])  # inside the clamp of log W at -20
    lam = 1 / (1 - beta)
    stationary = abs(slope_in_w(2.0, beta, lam, tiny).item())  # lam beta^2 W e^(lam beta): zero in the limit
    for other in (0.8 * lam, 1.2 * lam):  # any other tilt leaves a slope of order beta at W = 0
        assert abs(slope_in_w(2.0, beta, other, tiny).item()) > 1e4 * stationary
    w = torch.linspace(1e-6, 5, 2001)
    assert (respo_branch(torch.log(w), 2.0, beta, lam).diff() < 0).all()  # and that stationary point is the maximum


@pytest.mark.parametrize("alpha", ORDERS)
def test_the_slope_at_one_is_beta_one_minus_lambda_for_every_order(alpha):
    """So two branches with the same beta have matching slopes at W = 1 exactly when lambda_- = lambda_+."""
    for beta, lam in ((0.5, 2.0), (0.3, 1.0), (0.7, 0.0)):
        assert slope_in_w(alpha, beta, lam, torch.ones(1)).item() == pytest.approx(beta * (1 - lam), abs=1e-9)


# --- 13. The surrogate and the loss's gradient ---------------------------------------------

@pytest.mark.parametrize("alpha,beta,lam", [(2.0, 0.5, 2.0), (1.0, 0.5, 2.0), (2.0, 0.3, 1.0), (1.0, 0.7, 0.5),
                                            (2.0, 0.5, 0.0), (1.0, 0.5, 0.0)])
def test_the_closed_form_surrogate_is_zero_at_one_and_its_derivative_is_phi(alpha, beta, lam):
    log_w = torch.linspace(-20, 20, 161, requires_grad=True)
    (slope,) = torch.autograd.grad(respo_surrogate(log_w, alpha, beta, lam).sum(), log_w)
    torch.testing.assert_close(slope, respo_branch(log_w.detach(), alpha, beta, lam), rtol=1e-10, atol=1e-12)
    assert abs(respo_surrogate(torch.zeros(1), alpha, beta, lam).item()) < 1e-14
    for end in (3.0, -3.0):  # the closed form against quadrature of int_0^{log W} phi(e^v) dv
        grid = torch.linspace(0, end, 30001)
        quadrature = torch.trapezoid(respo_branch(grid, alpha, beta, lam), grid)
        torch.testing.assert_close(respo_surrogate(torch.tensor([end]), alpha, beta, lam)[0], quadrature,
                                   rtol=1e-7, atol=1e-9)


def test_the_loss_gradient_is_the_gradient_of_the_surrogate_objective():
    """With sequence-sum aggregation, grad of -mean_i A_i Phi(W_i) (float64 autograd) equals the kernel's."""
    g = torch.Generator().manual_seed(4)
    B, T, V = 10, 6, 5
    logits = torch.randn(B, T, V, generator=g, requires_grad=True)
    tokens = torch.randint(V, (B, T), generator=g)
    old = torch.log_softmax(logits.detach() + 0.5 * torch.randn(B, T, V, generator=g), -1).gather(-1, tokens[..., None])[..., 0]
    mask = torch.arange(T)[None] < torch.randint(1, T + 1, (B,), generator=g)[:, None]
    adv = torch.randn(B, generator=g)

    def logp():
        return torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]

    loss, _ = policy_loss(logp(), old, adv, mask, LossConfig(agg="seq-mean-token-sum"))
    (kernel,) = torch.autograd.grad(loss, logits)
    log_w = torch.where(mask, logp() - old, torch.zeros(())).sum(-1)
    Phi = torch.where(adv > 0, respo_surrogate(log_w, *PUBLISHED["pos"]), respo_surrogate(log_w, *PUBLISHED["neg"]))
    (surrogate,) = torch.autograd.grad(-(adv * Phi).mean(), logits)
    assert surrogate.abs().sum() > 0
    torch.testing.assert_close(kernel, surrogate, rtol=1e-9, atol=1e-12)


ZERO = torch.tensor([-200.0], dtype=torch.float64)  # log W far below any W a run reaches: W = e^-200, with the clamp widened to keep it


@pytest.mark.parametrize("beta", [0.3, 0.5, 0.8])
def test_the_tails_fix_the_orders_phi_at_zero_is_positive_only_above_order_one(beta):
    """docs/math.md §4.4: phi(0) > 0 needs alpha > 1 (the positive branch), phi(0) = 0 needs alpha <= 1 (the negative)."""
    for alpha in (1.5, 2.0, 3.0):
        at_zero = respo_branch(ZERO, alpha, beta, 2.0, log_w_max=300.0).item()
        phi0 = (1 - beta) ** (1 / (alpha - 1))
        assert at_zero == pytest.approx(phi0 * math.exp(2.0 * (1 - phi0)), rel=1e-9) and at_zero > 0.01
    for alpha in (0.0, 0.5, 1.0):
        assert respo_branch(ZERO, alpha, beta, 2.0, log_w_max=300.0).item() < 1e-20


@pytest.mark.parametrize("alpha,beta", [(1.5, 0.5), (2.0, 0.3), (3.0, 0.5), (4.0, 0.8)])
def test_lambda_plus_at_least_the_general_bound_makes_w_zero_the_positive_branchs_maximum(alpha, beta):
    """docs/math.md §4.4: phi_+ decreases on W > 0 exactly when lambda >= (1 - beta)^(-1 / (alpha - 1))."""
    bound = (1 - beta) ** (-1 / (alpha - 1))
    log_w = torch.linspace(-30, 3, 4001)
    for lam in (bound, 1.5 * bound):
        assert (respo_branch(log_w, alpha, beta, lam, log_w_max=300.0).diff() <= 1e-15).all()
    rises = respo_branch(log_w, alpha, beta, 0.8 * bound, log_w_max=300.0).diff()
    assert rises.max() > 0  # a smaller tilt leaves an interior peak
