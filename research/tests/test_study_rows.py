"""The study-only rows (research/study_rows.py), checked as the reference checks its own (tests/derivations/):
each coefficient is the gradient of its own surrogate, the reconstruction is VESPO's family at its constants, the
dose-response arm changes the starved positives alone, and the knobs are validated."""

import pytest
import torch

from nano_respo.kernel import AGG_MODES, LossConfig, METHOD_TABLE, policy_loss
from nano_respo.surrogate import power_tilt_surrogate, respo_surrogate
from research.study_rows import StudyLossConfig
from tests.derivations.test_kernel_derivations import grad_of, kernel_grad, random_batch

pytestmark = pytest.mark.usefixtures("float64")  # tests/conftest.py
ROWS = ("respo_wtilt", "respo_pos_clip_neg", "respo_pos_vespo_neg", "seq_clip_lowpos1", "clip_pos_respo_neg")


def study_surrogate(method, logp, old_logp, adv, mask, eps=(0.2, 0.2)):
    """Each row's own objective J per sequence [B], written from its definition (the loss is -mean over non-empty)."""
    d = torch.where(mask, logp - old_logp, torch.zeros_like(logp))
    log_w, log_pi_y = d.sum(-1), torch.where(mask, logp, torch.zeros_like(logp)).sum(-1)
    w = torch.exp(log_w)
    clip = torch.minimum(w * adv, w.clamp(1 - eps[0], 1 + eps[1]) * adv)
    if method == "respo_wtilt":
        return torch.where(adv > 0, power_tilt_surrogate(log_w, 0.0, 0.1), power_tilt_surrogate(log_w, 3.0, 2.0)) * adv
    if method == "respo_pos_clip_neg":  # ReSPO's positive surrogate, the sequence clip's negative objective
        return torch.where(adv > 0, respo_surrogate(log_w, 2.0, 0.5, 2.0) * adv, clip)
    if method == "clip_pos_respo_neg":  # the sequence clip's positive objective, ReSPO's negative surrogate
        return torch.where(adv > 0, clip, respo_surrogate(log_w, 1.0, 0.5, 2.0) * adv)
    if method == "respo_pos_vespo_neg":  # ReSPO's positive surrogate, VESPO's negative one at (3, 2)
        return torch.where(adv > 0, respo_surrogate(log_w, 2.0, 0.5, 2.0), power_tilt_surrogate(log_w, 3.0, 2.0)) * adv
    return torch.where((adv > 0) & (w < 1 - eps[0]), adv * log_pi_y, clip)  # seq_clip_lowpos1


def test_importing_research_registers_the_rows():
    assert set(ROWS) <= set(METHOD_TABLE)
    assert LossConfig(method="respo_wtilt").method == "respo_wtilt"


@pytest.mark.parametrize("method", ROWS)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_row_is_the_gradient_of_its_own_surrogate(method, seed):
    params, logp_fn, old_logp, adv, mask = batch = random_batch(seed, drift=0.5)
    terms = study_surrogate(method, logp_fn(), old_logp, adv, mask)
    nonempty = mask.any(-1)
    expected = grad_of(-(terms[nonempty]).sum() / nonempty.sum(), params)
    assert expected.abs().sum() > 0
    torch.testing.assert_close(kernel_grad(batch, method=method, agg="seq-mean-token-sum"), expected)


def test_the_reconstruction_is_vespos_family_at_its_constants():
    batch = random_batch(4, drift=0.6)
    for agg in AGG_MODES:
        torch.testing.assert_close(
            kernel_grad(batch, method="respo_wtilt", agg=agg),
            kernel_grad(batch, method="vespo", agg=agg, vespo_k_pos=0.0, vespo_lambda_pos=0.1, vespo_k_neg=3.0,
                        vespo_lambda_neg=2.0), rtol=0, atol=0)


@pytest.mark.parametrize("corner,method", [((1.0, 0.0), "is"), ((0.0, 0.0), "no_is")])
def test_the_reconstructions_corners_are_plain_and_no_importance_sampling(corner, method):
    params, logp_fn, old_logp, adv, mask = batch = random_batch(5, drift=0.6)
    alpha, lam = corner
    knobs = StudyLossConfig(method="respo_wtilt", wtilt_alpha_pos=alpha, wtilt_lambda_pos=lam, wtilt_alpha_neg=alpha,
                            wtilt_lambda_neg=lam)
    loss, _ = policy_loss(logp_fn(), old_logp, adv, mask, knobs)
    torch.testing.assert_close(grad_of(loss, params), kernel_grad(batch, method=method, agg=knobs.agg))


@pytest.mark.parametrize("kwargs,argument", [({"wtilt_alpha_pos": 1.5}, "wtilt_alpha_pos"),
                                             ({"wtilt_alpha_neg": -1.0}, "wtilt_alpha_neg"),
                                             ({"beta_pos": 2.0}, "beta_pos")])
def test_bad_knobs_name_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=f"^{argument}:"):
        StudyLossConfig(method="respo_wtilt", **kwargs)


def test_the_starved_positives_are_all_that_seq_clip_lowpos1_changes():
    """Against seq_clip on a grid of weights, each sign: 1 instead of w for a positive below 1 - eps_low, the same
    coefficient everywhere else (the negatives, the trust region, the clipped high positives)."""
    log_w = torch.linspace(-3, 1.5, 91)
    w = torch.exp(log_w)
    for sign in (1.0, -1.0):
        adv = torch.full((91,), sign)
        coefficient = {}
        for method in ("seq_clip", "seq_clip_lowpos1"):
            logp = log_w[:, None].clone().requires_grad_(True)
            loss, _ = policy_loss(logp, torch.zeros(91, 1), adv, torch.ones(91, 1, dtype=torch.bool),
                                  LossConfig(method=method, agg="seq-mean-token-sum"))
            coefficient[method] = -grad_of(loss, logp)[:, 0] * 91 / adv
        starved = (w < 0.8) & (sign > 0)
        assert starved.sum() > 30 if sign > 0 else not starved.any()
        torch.testing.assert_close(coefficient["seq_clip_lowpos1"][starved], torch.ones(int(starved.sum())))
        torch.testing.assert_close(coefficient["seq_clip_lowpos1"][~starved], coefficient["seq_clip"][~starved])


@pytest.mark.parametrize("arm,negatives", [("respo_pos_clip_neg", "seq_clip"), ("respo_pos_vespo_neg", "vespo")])
def test_each_split_arm_is_respo_on_positives_and_its_donor_on_negatives(arm, negatives):
    """The reuse study's split arms (research/REUSE.md): on a batch of positives only the arm's gradient is respo's,
    on negatives only it is the donor's; with both signs it is neither (each branch matters)."""
    params, logp_fn, old_logp, adv, mask = random_batch(6, drift=0.8)
    for sign, same_as in ((1.0, "respo"), (-1.0, negatives)):
        signed = (params, logp_fn, old_logp, adv.abs() * sign, mask)
        torch.testing.assert_close(kernel_grad(signed, method=arm), kernel_grad(signed, method=same_as))
    mixed = (params, logp_fn, old_logp, adv, mask)
    assert (adv > 0).any() and (adv < 0).any()
    for other in ("respo", negatives):
        assert not torch.allclose(kernel_grad(mixed, method=arm), kernel_grad(mixed, method=other))


def test_the_mirror_arm_is_the_clip_on_positives_and_respo_on_negatives():
    """The table study's mirror arm (research/TABLE.md): on a batch of positives its gradient is seq_clip's, on
    negatives respo's; with both signs it is neither. And its coefficient, on a grid of weights of each sign: the
    sequence clip's w (0 above 1 + eps_high) on positives, the published phi_-(W) = sqrt(W) exp(2 (1 - sqrt W)) on
    negatives, which lies above 1 between about W = 0.04 and 1."""
    params, logp_fn, old_logp, adv, mask = random_batch(7, drift=0.8)
    for sign, same_as in ((1.0, "seq_clip"), (-1.0, "respo")):
        signed = (params, logp_fn, old_logp, adv.abs() * sign, mask)
        torch.testing.assert_close(kernel_grad(signed, method="clip_pos_respo_neg"), kernel_grad(signed, method=same_as))
    mixed = (params, logp_fn, old_logp, adv, mask)
    for other in ("seq_clip", "respo"):
        assert not torch.allclose(kernel_grad(mixed, method="clip_pos_respo_neg"), kernel_grad(mixed, method=other))
    log_w = torch.linspace(-4, 1.5, 111)
    w = torch.exp(log_w)
    _, compute, eps, _ = METHOD_TABLE["clip_pos_respo_neg"]
    cfg = LossConfig(method="clip_pos_respo_neg")
    positive = compute(log_w, torch.ones(111, dtype=torch.bool), cfg, eps)
    negative = compute(log_w, torch.zeros(111, dtype=torch.bool), cfg, eps)
    torch.testing.assert_close(positive, torch.where(w > 1.2, torch.zeros_like(w), w))
    torch.testing.assert_close(negative, w.sqrt() * torch.exp(2 * (1 - w.sqrt())))
    assert (negative[(w > 0.05) & (w < 0.99)] > 1).all()
