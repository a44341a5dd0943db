"""Derivation checks: each test is one claim of docs/math.md, checked numerically.

Families, with the section each checks: 1 on-policy equality (§3), 2 each baseline against
the autograd gradient of its own surrogate (§5), 3 the surrogate Phi of VESPO's family (§8.3), 4 the
corners of that family (§8), 5 the alpha-divergence identity (§8.1), 6 VESPO's variational proposal
(§8.2), 7 the branch properties of that family at the constants of this project's reconstruction (§8;
the reconstruction's own row, respo_wtilt, is research/study_rows.py's, checked in research/tests/). ReSPO's published kernel has
families 8-12 of its own in test_published_kernel.py.
"""

import itertools
import math

import pytest
import torch

from nano_respo.kernel import (AGG_MODES, METHODS, LossConfig, aggregate, diagnostics, policy_loss, power_tilt,
                               sequence_log_weight, vespo_coefficient)
from nano_respo.surrogate import power_tilt_surrogate


pytestmark = pytest.mark.usefixtures("float64")  # tests/conftest.py


def random_batch(seed, B=12, T=7, V=5, drift=0.0):
    """A tabular autoregressive-free policy: per-position logits; mu is a drifted copy of pi.

    Returns (params, logp_fn, old_logp, advantages, mask). logp_fn() recomputes the
    per-token log-probs of fixed sampled tokens so that autograd reaches params.
    """
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g)
    tokens = torch.randint(V, (B, T), generator=g)
    params = logits.clone().requires_grad_(True)
    old_logits = logits + drift * torch.randn(B, T, V, generator=g)
    old_logp = torch.log_softmax(old_logits, -1).gather(-1, tokens[..., None])[..., 0]
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = torch.arange(T)[None] < lengths[:, None]
    advantages = torch.randn(B, generator=g)
    advantages[1] = 0.0

    def logp_fn():
        return torch.log_softmax(params, -1).gather(-1, tokens[..., None])[..., 0]

    return params, logp_fn, old_logp, advantages, mask


def grad_of(loss, params):
    (g,) = torch.autograd.grad(loss, params)
    return g


def kernel_grad(batch, **cfg):
    params, logp_fn, old_logp, adv, mask = batch
    loss, _ = policy_loss(logp_fn(), old_logp, adv, mask, LossConfig(**cfg))
    return grad_of(loss, params)


# --- 1. On-policy, every method is the plain policy gradient ---------------------------

@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("agg", AGG_MODES)
def test_on_policy_every_method_is_the_policy_gradient(method, agg):
    params, logp_fn, _, adv, mask = batch = random_batch(0)
    plain = aggregate(-adv[:, None] * logp_fn(), mask, agg)
    logp = logp_fn()
    cfg = LossConfig(method=method, agg=agg)
    loss, applied = policy_loss(logp, logp.detach(), adv, mask, cfg)
    torch.testing.assert_close(grad_of(loss, params), grad_of(plain, params))
    stats = diagnostics(applied["phi"], logp, logp.detach(), adv, mask, cfg)
    assert stats["clip_frac_token"] == 0 and stats["clip_frac_seq"] == 0


def test_aggregation_modes_match_their_definitions():
    """The four modes on a hand-sized example: rows of lengths 2, 1 and 0 (empty)."""
    terms = torch.tensor([[1.0, 2.0, 99.0], [4.0, 99.0, 99.0], [99.0, 99.0, 99.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)
    expected = {"token-mean": (1 + 2 + 4) / 3, "seq-mean-token-mean": ((1 + 2) / 2 + 4 / 1) / 2,
                "seq-mean-token-sum": ((1 + 2) + 4) / 2, "seq-mean-token-sum-norm": ((1 + 2) + 4) / 2 / 3}
    for mode, value in expected.items():
        assert aggregate(terms, mask, mode).item() == pytest.approx(value), mode
    assert aggregate(terms, mask, "seq-mean-token-sum-norm", norm_len=7).item() == pytest.approx(7 / 2 / 7)


# --- 2. Each baseline is the gradient of its own original surrogate --------------------

def surrogate_terms(method, logp, old_logp, adv, mask, cfg):
    """Each method's own objective J, as the per-token terms or per-sequence values it sums.

    Written from each method's definition, independently of the kernel's coefficients.
    Returns (terms, agg) where the loss is aggregate(-terms, mask, agg) for token-level
    terms [B, T], or -mean over non-empty sequences of terms [B].
    """
    A = adv[:, None]
    d = torch.where(mask, logp - old_logp, torch.zeros_like(logp))
    r = torch.exp(d)
    el, eh = cfg["eps"]
    clip_obj = torch.minimum(r * A, r.clamp(1 - el, 1 + eh) * A)
    if method in ("grpo", "dapo"):
        return clip_obj
    if method == "dual_clip":
        return torch.where(A < 0, torch.maximum(clip_obj, cfg["c"] * A), clip_obj)
    if method == "cispo":
        return r.clamp(max=1 + eh).detach() * A * logp
    if method == "sapo":
        tau = torch.where(A > 0, torch.tensor(1.0), torch.tensor(1.05))
        return 4 / tau * torch.sigmoid(tau * (r - 1)) * A
    log_pi_y = torch.where(mask, logp, torch.zeros_like(logp)).sum(-1)
    w = torch.exp(d.sum(-1))
    if method == "seq_clip":
        return torch.minimum(w * adv, w.clamp(1 - el, 1 + eh) * adv)
    if method == "gspo":
        s = torch.exp(d.sum(-1) / mask.sum(-1).clamp(min=1))
        return torch.minimum(s * adv, s.clamp(1 - el, 1 + eh) * adv)
    if method == "vespo":
        log_w = d.sum(-1)
        return torch.where(adv > 0, power_tilt_surrogate(log_w, 2.0, 3.0), power_tilt_surrogate(log_w, 3.0, 2.0)) * adv
    if method == "topr":
        return torch.where(adv > 0, adv * log_pi_y, w.clamp(max=1).detach() * adv * log_pi_y)
    if method == "is":
        return w * adv
    if method == "no_is":
        return adv * log_pi_y
    raise AssertionError(method)


BASELINE_EPS = {"grpo": (0.2, 0.2), "dapo": (0.2, 0.28), "dual_clip": (0.2, 0.2), "seq_clip": (0.2, 0.2),
                "gspo": (3e-4, 4e-4), "cispo": (0.2, 0.28), "sapo": (0.2, 0.2), "vespo": (0.2, 0.2),
                "topr": (0.2, 0.2), "is": (0.2, 0.2), "no_is": (0.2, 0.2)}


def baseline_case(method, seed):
    """(eps, drift): gspo's published 3e-4 range clips nearly everything at a drift of 0.5,
    so seeds 1-2 use a wider range to exercise both regimes and seed 3 the published one."""
    if method == "gspo":
        return ((3e-4, 4e-4), 0.002) if seed == 3 else ((0.1, 0.15), 0.5)
    return BASELINE_EPS[method], 0.5


@pytest.mark.parametrize("method", [m for m in METHODS if m != "respo"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_baseline_coefficient_is_its_surrogate_gradient(method, seed):
    eps, drift = baseline_case(method, seed)
    params, logp_fn, old_logp, adv, mask = batch = random_batch(seed, drift=drift)
    terms = surrogate_terms(method, logp_fn(), old_logp, adv, mask, {"eps": eps, "c": 3.0})
    if terms.dim() == 2:
        agg = "token-mean"
        reference = aggregate(-terms, mask, agg)
    else:
        agg = "seq-mean-token-mean" if method == "gspo" else "seq-mean-token-sum"
        nonempty = mask.any(-1)
        reference = -(terms[nonempty]).sum() / nonempty.sum()
    got = kernel_grad(batch, method=method, agg=agg, eps_low=eps[0], eps_high=eps[1])
    expected = grad_of(reference, params)
    assert expected.abs().sum() > 0
    torch.testing.assert_close(got, expected)


def test_clip_table_of_section_2():
    """seq_clip's coefficient, read off at the six cells of the table in docs/math.md §2."""
    log_w = torch.log(torch.tensor([0.5, 1.0, 2.0, 0.5, 1.0, 2.0]))
    adv = torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0, -1.0])
    logp = log_w[:, None].clone().requires_grad_(True)
    mask = torch.ones(6, 1, dtype=torch.bool)
    loss, _ = policy_loss(logp, torch.zeros(6, 1), adv, mask, LossConfig(method="seq_clip", agg="seq-mean-token-sum"))
    coefficient = -grad_of(loss, logp)[:, 0] * 6 / adv
    torch.testing.assert_close(coefficient, torch.tensor([0.5, 1.0, 0.0, 0.0, 1.0, 2.0]))


# --- 3. The surrogate Phi of VESPO's family has its coefficient as its gradient ----------

BRANCHES = [(0.0, 0.0), (0.0, 0.1), (0.0, 2.0), (0.5, 0.0), (0.5, 0.7), (1.0, 0.0), (3.0, 2.0), (2.0, 3.0)]


@pytest.mark.parametrize("pos,neg", [(BRANCHES[i], BRANCHES[-1 - i]) for i in range(len(BRANCHES))])
def test_surrogate_phi_gives_the_detached_loss_gradient(pos, neg):
    if pos[0] > 1:
        pos, neg = neg, pos
    params, logp_fn, old_logp, adv, mask = batch = random_batch(4, drift=0.4)
    logp = logp_fn()
    log_w = (torch.where(mask, logp - old_logp, torch.zeros_like(logp))).sum(-1)
    phi_obj = torch.where(adv > 0, power_tilt_surrogate(log_w, *pos), power_tilt_surrogate(log_w, *neg)) * adv
    nonempty = mask.any(-1)
    reference = -phi_obj[nonempty].sum() / nonempty.sum()
    got = kernel_grad(batch, method="vespo", agg="seq-mean-token-sum", vespo_k_pos=pos[0], vespo_lambda_pos=pos[1],
                      vespo_k_neg=neg[0], vespo_lambda_neg=neg[1])
    torch.testing.assert_close(got, grad_of(reference, params))


@pytest.mark.parametrize("alpha,lam", BRANCHES)
def test_surrogate_phi_is_zero_at_one_and_its_derivative_is_phi(alpha, lam):
    log_w = torch.linspace(-4, 3, 57, requires_grad=True)
    Phi = power_tilt_surrogate(log_w, alpha, lam)
    (dPhi_dlogw,) = torch.autograd.grad(Phi.sum(), log_w)
    torch.testing.assert_close(dPhi_dlogw, power_tilt(log_w.detach(), alpha, lam))
    assert abs(power_tilt_surrogate(torch.zeros(1), alpha, lam).item()) < 1e-12
    # and the closed form's values, against quadrature of Phi(w) = int_0^{log w} phi(e^v) dv
    for end in (3.0, -3.0):
        grid = torch.linspace(0, end, 30001)
        quadrature = torch.trapezoid(power_tilt(grid, alpha, lam), grid)
        torch.testing.assert_close(power_tilt_surrogate(torch.tensor([end]), alpha, lam)[0], quadrature,
                                   rtol=1e-7, atol=1e-9)


# --- 4. The corners -------------------------------------------------------------------

@pytest.mark.parametrize("corner,method", [((1.0, 0.0), "is"), ((0.0, 0.0), "no_is")])
def test_corners(corner, method):
    batch = random_batch(5, drift=0.6)
    params, logp_fn, old_logp, adv, mask = batch
    alpha, lam = corner
    for agg in AGG_MODES:
        family = kernel_grad(batch, method="vespo", agg=agg, vespo_k_pos=alpha, vespo_lambda_pos=lam,
                             vespo_k_neg=alpha, vespo_lambda_neg=lam)
        torch.testing.assert_close(family, kernel_grad(batch, method=method, agg=agg))


# --- 5. The alpha-divergence identity, exactly on a discrete space --------------------

def enumerate_sequences(seed, V=3, L=3):
    """All V**L sequences with their per-token log-probs under two autoregressive policies."""
    g = torch.Generator().manual_seed(seed)
    tables = [torch.randn(*(V,) * (t + 1), generator=g) for t in range(L)]  # logits given the prefix
    shifted = [t + 0.8 * torch.randn(t.shape, generator=g) for t in tables]
    seqs = torch.tensor(list(itertools.product(range(V), repeat=L)))  # [V**L, L]

    def per_token(tabs):
        cols = []
        for t in range(L):
            logits = tabs[t][tuple(seqs[:, :t].T)] if t else tabs[0].expand(len(seqs), V)
            cols.append(torch.log_softmax(logits, -1).gather(-1, seqs[:, t:t + 1])[:, 0])
        return torch.stack(cols, -1)  # [N, L]

    return per_token(tables), per_token(shifted)


@pytest.mark.parametrize("alpha", [0.25, 0.5, 0.75, 1.5, 2.0])
def test_alpha_divergence_identity(alpha):
    logp_pi, logp_mu = enumerate_sequences(6)
    mask = torch.ones_like(logp_pi, dtype=torch.bool)
    pi, mu = logp_pi.sum(-1).exp(), logp_mu.sum(-1).exp()
    torch.testing.assert_close(pi.sum(), torch.tensor(1.0))
    s = sequence_log_weight(logp_pi, logp_mu, mask)
    expected_w_alpha = (mu * power_tilt(s, alpha, 0.0)).sum()  # E_mu[w^alpha] with the kernel
    ratio = pi / mu
    f = (ratio ** alpha - 1 - alpha * (ratio - 1)) / (alpha * (alpha - 1))  # Amari's f_alpha
    d_alpha = (mu * f).sum()
    assert d_alpha > 0
    torch.testing.assert_close(expected_w_alpha, 1 - alpha * (1 - alpha) * d_alpha, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(expected_w_alpha, (pi ** alpha * mu ** (1 - alpha)).sum(), rtol=1e-12, atol=1e-12)


# --- 6. The variational proposal with the exponential tilt ----------------------------

@pytest.mark.parametrize("alpha,lam", [(0.5, 0.3), (0.0, 0.1), (0.9, 1.0), (0.3, 2.0)])
def test_variational_proposal_matches_phi(alpha, lam):
    logp_pi, logp_mu = enumerate_sequences(7, V=2, L=3)
    log_pi, log_mu = logp_pi.sum(-1), logp_mu.sum(-1)
    w = torch.exp(log_pi - log_mu)
    z = torch.zeros_like(log_mu, requires_grad=True)
    opt = torch.optim.LBFGS([z], lr=1, max_iter=500, tolerance_grad=1e-14, tolerance_change=1e-16,
                            line_search_fn="strong_wolfe")

    def objective():
        opt.zero_grad()
        log_q = torch.log_softmax(z, 0)
        q = log_q.exp()
        value = ((1 - alpha) * (q * (log_q - log_mu)).sum() + alpha * (q * (log_q - log_pi)).sum()
                 + lam * (q * w).sum())
        value.backward()
        return value

    for _ in range(3):
        opt.step(objective)
    q = torch.softmax(z.detach(), 0)
    phi = power_tilt(log_pi - log_mu, alpha, lam)
    # Elements the optimum gives almost no mass barely move the objective, so the optimiser
    # cannot place them precisely: compare where Q* carries mass (most of the space).
    carried = q > 1e-8
    assert carried.float().mean() >= 0.75
    ratio = (q / log_mu.exp() / phi)[carried]
    assert (ratio.std() / ratio.mean()) < 1e-4  # the optimiser's precision; phi varies by > 5%
    # and not trivially: phi itself varies across the space
    assert phi.std() / phi.mean() > 0.05


# --- 7. The two branches of VESPO's family at the reconstruction's constants (§8) -------------

def vespo_family(log_w, positive, pos, neg):
    """VESPO's coefficient with (alpha, lambda) = pos where positive, neg elsewhere (alpha < 2 too: the family)."""
    cfg = LossConfig(method="vespo", vespo_k_pos=pos[0], vespo_lambda_pos=pos[1], vespo_k_neg=neg[0],
                     vespo_lambda_neg=neg[1])
    return vespo_coefficient(log_w, positive, cfg, None)


@pytest.mark.parametrize("alpha,lam", [(0.0, 0.1), (0.0, 0.0), (0.5, 0.0), (0.3, 0.5), (0.9, 0.05)])
def test_positive_branch_keeps_low_w_positives(alpha, lam):
    log_w = torch.linspace(-300, -1e-3, 400)
    phi = vespo_family(log_w, torch.ones_like(log_w, dtype=torch.bool), (alpha, lam), (3.0, 2.0))
    w = log_w.exp()
    assert (phi > w).all()
    ratio = phi / w
    assert ratio[0] > 1e10 and (ratio.diff() < 0).all()  # phi_+/w -> infinity as w -> 0
    if alpha == 0:
        floor = vespo_family(torch.tensor([-60.0]), torch.tensor([True]), (alpha, lam), (3.0, 2.0))
        torch.testing.assert_close(floor, torch.tensor([math.exp(lam)]))


@pytest.mark.parametrize("alpha,lam", [(3.0, 2.0), (2.0, 3.0), (1.0, 0.5), (0.5, 1.0)])
def test_negative_branch_vanishes_and_peaks_where_the_closed_form_says(alpha, lam):
    negative = torch.zeros(1, dtype=torch.bool)
    big = vespo_family(torch.tensor([8.0]), negative, (0.0, 0.1), (alpha, lam))
    assert big.item() < 1e-100
    log_w = torch.linspace(-6, 4, 200001)
    phi = vespo_family(log_w, negative.expand_as(log_w), (0.0, 0.1), (alpha, lam))
    peak = (alpha / lam) ** alpha * math.exp(lam - alpha)
    assert abs(phi.max().item() - peak) < 1e-8
    assert abs(log_w[phi.argmax()].exp().item() - alpha / lam) < 1e-3
    torch.testing.assert_close(vespo_family(torch.zeros(1), negative, (0.0, 0.1), (alpha, lam)), torch.ones(1))
