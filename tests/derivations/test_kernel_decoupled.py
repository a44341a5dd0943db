"""Derivation checks of docs/math.md §7: three policies, the decoupled form and its diagnostics.

Families: 1 the product identity w = (pi / pi_old) (pi_old / mu); 2 every method with every
correction is the autograd gradient of its own surrogate with the correction weight c, c
written here from TRL's and verl's definitions; 3 the off-policy sequence mask; 4 the
diagnostics against their definitions; 5 the options off leave the coefficient bit for bit;
6 VESPO with TRL's correction folded into its weight is the coupled vespo.
"""

import math

import pytest
import torch

from test_kernel_derivations import BASELINE_EPS, grad_of, random_batch, surrogate_terms

from nano_respo.kernel import (CORRECTIONS, METHODS, METHOD_TABLE, SEQUENCE, LossConfig, aggregate,
                               correction_log_ratio, diagnostics, policy_loss, sequence_log_weight)
from nano_respo.surrogate import respo_surrogate
from nano_respo.offpolicy import off_policy_diagnostics

MODES = [c for c in CORRECTIONS if c != "none"]


pytestmark = pytest.mark.usefixtures("float64")  # tests/conftest.py


def three_policies(seed, drift=0.5, mismatch=0.4):
    """(params, logp_fn, mu, pi_old, advantages, mask): pi_old = pi drifted, mu = pi_old drifted again."""
    params, logp_fn, pi_old, adv, mask = random_batch(seed, drift=drift)
    g = torch.Generator().manual_seed(1000 + seed)
    mu = pi_old + mismatch * torch.randn(pi_old.shape, generator=g)
    return params, logp_fn, mu, pi_old, adv, mask


def reference_correction(mode, pi_old, mu, mask, low, high):
    """c [B, T] as TRL's GRPOTrainer computes importance_sampling_ratio (verl's token truncation is the
    token-truncate row): exp of the per-token or summed log-ratio, clamped or zeroed outside the bounds."""
    level, bound = mode.split("-")
    diff = (pi_old - mu) * mask
    ratio = torch.exp(diff.sum(-1, keepdim=True) if level == "sequence" else diff)
    if bound == "truncate":
        ratio = torch.clamp(ratio, min=low, max=high)
    else:
        ratio = ratio.masked_fill((ratio < (low or -math.inf)) | (ratio > high), 0.0)
    return ratio.expand_as(pi_old)


# --- 1. The product identity ------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_weight_is_the_trust_region_ratio_times_the_correction_ratio(seed):
    _, logp_fn, mu, pi_old, _, mask = three_policies(seed)
    logp = logp_fn()
    w = sequence_log_weight(logp, mu, mask)  # log(pi / mu)
    split = sequence_log_weight(logp, pi_old, mask) + correction_log_ratio(pi_old, mu, mask, SEQUENCE)
    torch.testing.assert_close(w, split)
    token = torch.where(mask, logp - mu, 0.0)
    torch.testing.assert_close(token, torch.where(mask, logp - pi_old, 0.0) + correction_log_ratio(pi_old, mu, mask,
                                                                                                   "token"))


@pytest.mark.parametrize("method,level", [("is", "sequence"), ("cispo", "token")])
def test_an_unbounded_correction_on_plain_is_is_the_coupled_weight(method, level):
    """Plain IS has phi(a b) = phi(a) phi(b): split with nothing truncated, it is IS on w = pi / mu itself
    (cispo, a token-level truncated IS, likewise per token while nothing reaches its cap)."""
    params, logp_fn, mu, pi_old, adv, mask = three_policies(3, drift=0.05, mismatch=0.05)
    cfg = dict(method=method, agg="seq-mean-token-sum", eps_high=1e6)
    coupled, _ = policy_loss(logp_fn(), mu, adv, mask, LossConfig(**cfg))
    decoupled, _ = policy_loss(logp_fn(), mu, adv, mask, LossConfig(**cfg, correction=f"{level}-truncate",
                                                                     correction_max=1e6), pi_old_logp=pi_old)
    torch.testing.assert_close(grad_of(decoupled, params), grad_of(coupled, params))


# --- 2. Each correction composed with each method is the gradient of its surrogate ------

def method_terms(method, logp, pi_old, adv, mask):
    """The method's own objective on pi / pi_old (respo and vespo by their surrogate Phi)."""
    if method == "respo":
        log_w = torch.where(mask, logp - pi_old, 0.0).sum(-1)
        return torch.where(adv > 0, respo_surrogate(log_w, 2.0, 0.5, 2.0), respo_surrogate(log_w, 1.0, 0.5, 2.0)) * adv
    return surrogate_terms(method, logp, pi_old, adv, mask, {"eps": BASELINE_EPS[method], "c": 3.0})


@pytest.mark.parametrize("method", [m for m in METHODS if m != "gspo"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bounds", [(None, None), (0.7, 1.5)])
def test_each_correction_is_the_gradient_of_the_methods_surrogate_weighted_by_c(method, mode, bounds):
    params, logp_fn, mu, pi_old, adv, mask = three_policies(11, drift=0.2, mismatch=0.7)
    low, high = bounds
    cfg = LossConfig(method=method, correction=mode, correction_min=low, correction_max=high,
                     agg="token-mean" if METHOD_TABLE[method][0] == "token" else "seq-mean-token-sum")
    default_high = 2.0 if mode == "token-truncate" else 3.0
    c = reference_correction(mode, pi_old, mu, mask, low, high or default_high)  # [B, T]
    unbounded = reference_correction(mode, pi_old, mu, mask, None, math.inf)
    assert ((c != unbounded) & mask).any(), "some weight is truncated or masked"
    logp = logp_fn()
    if METHOD_TABLE[method][0] == "token":  # TRL's composition: per_token_loss * importance_sampling_ratio
        reference = aggregate(-method_terms(method, logp, pi_old, adv, mask) * c, mask, cfg.agg)
    else:  # each token's gradient weighted by its c: logp_t enters as sg(logp_t) + c_t (logp_t - sg(logp_t))
        weighted = logp.detach() + c * (logp - logp.detach())
        nonempty = mask.any(-1)
        reference = -method_terms(method, weighted, pi_old, adv, mask)[nonempty].sum() / nonempty.sum()
    loss, _ = policy_loss(logp_fn(), mu, adv, mask, cfg, pi_old_logp=pi_old)
    expected = grad_of(reference, params)
    assert expected.abs().sum() > 0
    torch.testing.assert_close(grad_of(loss, params), expected)


def test_the_correction_needs_pi_old_and_its_bounds_are_checked():
    _, logp_fn, mu, pi_old, adv, mask = three_policies(5)
    with pytest.raises(ValueError, match="^pi_old_logp:"):
        policy_loss(logp_fn(), mu, adv, mask, LossConfig(correction="token-truncate"))
    with pytest.raises(ValueError, match="^pi_old_logp:"):
        policy_loss(logp_fn(), mu, adv, mask, LossConfig(correction="token-truncate"), pi_old_logp=pi_old[:, :2])
    with pytest.raises(ValueError, match="^correction:"):
        LossConfig(correction="icepop")
    with pytest.raises(ValueError, match="^correction_min, correction_max:"):
        LossConfig(correction="token-mask", correction_min=2.0, correction_max=1.5)
    with pytest.raises(ValueError, match="^opsm_delta:"):
        LossConfig(opsm_delta=-0.1)


# --- 3. DeepSeek-V3.2's off-policy sequence mask ------------------------------------------

@pytest.mark.parametrize("method", ["grpo", "respo"])
def test_the_off_policy_sequence_mask_drops_exactly_the_far_negatives(method):
    params, logp_fn, mu, _, adv, mask = three_policies(7, drift=0.0, mismatch=0.6)
    mu = mu + 0.3  # a sampler more confident than pi on its own samples, as in practice: the KL estimate > 0
    agg = "token-mean" if method == "grpo" else "seq-mean-token-sum"
    logp = logp_fn()
    kl = (torch.where(mask, mu - logp.detach(), 0.0).sum(-1) / mask.sum(-1).clamp(min=1))  # mean log(mu / pi)
    delta = kl[(adv < 0) & mask.any(-1)].median().item()
    dropped = (adv < 0) & (kl > delta)
    assert dropped.any() and ((adv < 0) & ~dropped & mask.any(-1)).any()
    full, _ = policy_loss(logp_fn(), mu, adv, mask, LossConfig(method=method, agg=agg))
    kept_only, _ = policy_loss(logp_fn(), mu, adv, mask & ~dropped[:, None], LossConfig(method=method, agg=agg))
    masked, _ = policy_loss(logp_fn(), mu, adv, mask, LossConfig(method=method, agg=agg, opsm_delta=delta))
    if agg == "token-mean":  # a dropped response still counts in the denominator, as in TRL
        reference = kept_only * (mask & ~dropped[:, None]).sum() / mask.sum()
    else:
        reference = kept_only * (mask & ~dropped[:, None]).any(-1).sum() / mask.any(-1).sum()
    got = grad_of(masked, params)
    torch.testing.assert_close(got, grad_of(reference, params))
    assert not torch.allclose(grad_of(full, params), got)
    diag = off_policy_diagnostics(logp.detach(), mu, adv, mask, LossConfig(opsm_delta=delta))
    assert diag["opsm_masked_frac"] == pytest.approx(dropped.sum().item() / mask.any(-1).sum().item())


# --- 4. The diagnostics -------------------------------------------------------------------

def test_effective_sample_size_per_sign_and_overall_matches_its_definition():
    _, logp_fn, mu, pi_old, adv, mask = three_policies(7, drift=0.8)
    logp = logp_fn().detach()
    cfg = LossConfig(correction="sequence-mask")
    _, applied = policy_loss(logp, mu, adv, mask, cfg, pi_old_logp=pi_old)
    stats = diagnostics(applied["phi"], logp, mu, adv, mask, cfg)  # the weights' spread: the §6 diagnostics
    stats.update(off_policy_diagnostics(logp, mu, adv, mask, cfg, pi_old))  # what pi_old adds
    w = torch.exp(torch.where(mask, logp - mu, 0.0).sum(-1))
    nonempty = mask.any(-1)
    for key, rows in (("ess", nonempty), ("ess_pos", nonempty & (adv > 0)), ("ess_neg", nonempty & (adv < 0))):
        expected = w[rows].sum() ** 2 / (rows.sum() * (w[rows] ** 2).sum())
        assert stats[key] == pytest.approx(expected.item(), rel=1e-6)
        assert 0 < stats[key] < 1
    d = torch.where(mask, pi_old - mu, 0.0)
    assert stats["sampler_kl"] == pytest.approx(((torch.exp(d) - 1 - d)[mask]).mean().item(), rel=1e-6)
    rho = torch.exp(d.sum(-1))
    assert stats["correction_outside_frac"] == pytest.approx(((rho > 3.0) & nonempty).sum().item() / nonempty.sum().item())
    _, applied = policy_loss(mu, mu, adv, mask, LossConfig())
    assert diagnostics(applied["phi"], mu, mu, adv, mask, LossConfig())["ess"] == pytest.approx(1.0)
    assert off_policy_diagnostics(mu, mu, adv, mask, LossConfig()) == {}  # nothing without pi_old or an option


def test_vespo_outliers_count_the_negatives_above_one_hundred():
    mask = torch.ones(5, 2, dtype=torch.bool)
    log_w = torch.tensor([5.0, 4.0, 5.0, 4.7, -3.0])  # w = e^5 > 100 > e^4 > ... and e^4.7 > 100
    adv = torch.tensor([-1.0, -1.0, 1.0, -0.5, -1.0])
    mu = torch.zeros(5, 2)
    logp = torch.stack([log_w / 2] * 2, 1)
    _, applied = policy_loss(logp, mu, adv, mask, LossConfig())
    assert diagnostics(applied["phi"], logp, mu, adv, mask, LossConfig())["vespo_outliers"] == 2  # rows 0 and 3; row 2 is a positive


# --- 5. With the options off the coefficient is untouched --------------------------------

@pytest.mark.parametrize("method", METHODS)
def test_without_a_correction_pi_old_is_unread_bit_for_bit(method):
    params, logp_fn, mu, pi_old, adv, mask = three_policies(8)
    cfg = LossConfig(method=method)
    coupled, coupled_stats = policy_loss(logp_fn(), mu, adv, mask, cfg)
    given, given_stats = policy_loss(logp_fn(), mu, adv, mask, cfg, pi_old_logp=pi_old)
    assert torch.equal(coupled, given) and torch.equal(grad_of(coupled, params), grad_of(given, params))
    assert coupled_stats.keys() == given_stats.keys() == {"phi", "log_w"}
    assert all(torch.equal(coupled_stats[key], given_stats[key]) for key in coupled_stats)


# --- 6. VESPO under TRL's vLLM correction is the coupled vespo on w = pi / mu ---------------

def test_vespo_folding_the_correction_into_its_weight_is_the_coupled_vespo_with_token_mean():
    """GRPOTrainer.get_gamma_weights (TRL) adds sum_t log(truncated rho_t) to log(pi / pi_old) and does not
    multiply its loss by rho again: while no rho_t reaches the cap that is phi(pi / mu), token-mean."""
    params, logp_fn, mu, pi_old, adv, mask = three_policies(9, drift=0.3, mismatch=0.3)
    cap = 3.0
    rho = torch.exp((pi_old - mu) * mask).clamp(max=cap)
    assert rho[mask].max() < cap
    logp = logp_fn()
    log_w = ((logp.detach() - pi_old).clamp(-20, 20) * mask).sum(-1) + torch.log(rho).sum(-1)
    k = torch.where(adv >= 0, 2.0, 3.0)
    lam = torch.where(adv >= 0, 3.0, 2.0)
    phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w))[:, None]  # [B, 1]
    reference = (-phi * adv[:, None] * logp * mask).sum() / mask.sum()
    ours, _ = policy_loss(logp_fn(), mu, adv, mask, LossConfig(method="vespo", agg="token-mean"))
    torch.testing.assert_close(grad_of(ours, params), grad_of(reference, params))
