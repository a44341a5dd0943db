"""Family 8: numerics at the extremes, bad input, and the small helpers around the loss."""

import dataclasses
import math
import subprocess
import sys

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from nano_respo.kernel import AGG_MODES, METHODS, LossConfig, diagnostics, group_advantages, policy_loss

finite_log_ratio = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, allow_infinity=False)


@st.composite
def extreme_batches(draw):
    B = draw(st.integers(1, 4))
    T = draw(st.integers(1, 6))
    log_ratio = torch.tensor(draw(st.lists(finite_log_ratio, min_size=B * T, max_size=B * T))).view(B, T)
    lengths = torch.tensor(draw(st.lists(st.integers(0, T), min_size=B, max_size=B)))
    adv = torch.tensor(draw(st.lists(st.sampled_from([0.0, 1.0, -1.0, 0.37, -2.5]), min_size=B, max_size=B)))
    return log_ratio, lengths, adv


published_branch = st.tuples(st.sampled_from([-1.0, 0.5, 1.0, 2.0, 3.0]), st.sampled_from([0.0, 0.5, 1.0]),
                              st.sampled_from([0.0, 2.0]))  # (alpha, beta, lambda): orders below, at and above 1
vespo_branches = st.tuples(st.sampled_from([0.0, 0.3, 1.0]), st.sampled_from([0.0, 0.1, 2.0]),
                           st.sampled_from([0.0, 1.0, 3.0]), st.sampled_from([0.0, 2.0]))


@given(extreme_batches(), published_branch, published_branch, vespo_branches)
# The largest weights on the untilted corners, every profile: e^(alpha log w) overflows without the log-space guard.
@example((torch.full((2, 2), 1e4), torch.tensor([2, 2]), torch.tensor([1.0, -1.0])), (3.0, 1.0, 0.0), (1.0, 1.0, 0.0),
         (1.0, 0.0, 3.0, 0.0))
def test_loss_and_gradient_are_finite_for_every_finite_input(batch, pos, neg, tilt):
    log_ratio, lengths, adv = batch
    B, T = log_ratio.shape
    mask = torch.arange(T)[None] < lengths[:, None]
    old_logp = torch.full((B, T), -1.0)
    branches = {**dict(zip(("alpha_pos", "beta_pos", "lambda_pos"), pos)),
                **dict(zip(("alpha_neg", "beta_neg", "lambda_neg"), neg)),
                **dict(zip(("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"), tilt))}
    for method in METHODS:
        for agg in AGG_MODES:
            logp = (old_logp + log_ratio).requires_grad_(True)
            cfg = LossConfig(method=method, agg=agg, **branches)  # the corners (beta, lambda) = (1, 0), (0, 0) too
            loss, applied = policy_loss(logp, old_logp, adv, mask, cfg)
            stats = diagnostics(applied["phi"], logp, old_logp, adv, mask, cfg)
            loss.backward()
            assert torch.isfinite(loss), (method, agg)
            assert torch.isfinite(logp.grad).all(), (method, agg)
            # stats are nan for an empty set (no positives, say), never inf
            assert not any(abs(v) == float("inf") for v in stats.values()), stats


def test_all_zero_masks_and_zero_advantages_give_zero_gradient():
    logp = torch.randn(3, 4, requires_grad=True)
    for mask, adv in ((torch.zeros(3, 4, dtype=torch.bool), torch.randn(3)),
                      (torch.ones(3, 4, dtype=torch.bool), torch.zeros(3))):
        for method in METHODS:
            loss, _ = policy_loss(logp, logp.detach() - 0.3, adv, mask, LossConfig(method=method))
            (grad,) = torch.autograd.grad(loss, logp)
            assert loss.item() == 0 and (grad == 0).all()


def test_padding_may_hold_anything():
    logp = torch.randn(2, 4)
    logp[0, 3] = float("-inf")
    old = logp.clone()
    old[1, 2] = float("nan")
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    loss, _ = policy_loss(logp.requires_grad_(True), old, torch.tensor([1.0, -1.0]), mask, LossConfig())
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()


@pytest.mark.parametrize("kwargs,argument", [
    ({"method": "ppo2"}, "method"),
    ({"agg": "mean"}, "agg"),
    ({"lambda_pos": -0.1}, "lambda_pos"),
    ({"lambda_neg": -1.0}, "lambda_neg"),
    ({"beta_pos": 1.5}, "beta_pos"),
    ({"beta_neg": -0.5}, "beta_neg"),
    ({"alpha_neg": float("inf")}, "alpha_neg"),
    ({"vespo_k_neg": -1.0}, "vespo_k_neg"),
    ({"eps_low": -0.2}, "eps_low"),
    ({"dual_clip_c": 0.5}, "dual_clip_c"),
    ({"lambda_neg": float("nan")}, "lambda_neg"),
])
def test_bad_config_names_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=rf"^{argument}:"):
        LossConfig(**kwargs)


def test_a_config_cannot_change_after_its_check():
    cfg = LossConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lambda_neg = -2.0
    with pytest.raises(ValueError, match="^lambda_neg:"):
        dataclasses.replace(cfg, lambda_neg=-2.0)


def make(B=2, T=3):
    return torch.zeros(B, T), torch.zeros(B, T), torch.ones(B), torch.ones(B, T, dtype=torch.bool)


@pytest.mark.parametrize("position,bad,argument", [
    (0, torch.zeros(2, 3, 1), "logp"),
    (1, torch.zeros(2, 4), "old_logp"),
    (2, torch.ones(3), "advantages"),
    (3, torch.ones(2, 2, dtype=torch.bool), "mask"),
    (0, torch.tensor([[0.0, float("nan"), 0.0], [0.0, 0.0, 0.0]]), "logp"),
    (1, torch.tensor([[0.0, 0.0, 0.0], [float("inf"), 0.0, 0.0]]), "old_logp"),
    (2, torch.tensor([1.0, float("nan")]), "advantages"),
])
def test_bad_tensors_name_the_argument(position, bad, argument):
    args = list(make())
    args[position] = bad
    with pytest.raises(ValueError, match=rf"^{argument}:"):
        policy_loss(*args, LossConfig())


def test_group_advantages_centre_scale_and_count_zero_variance_groups():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    adv, stats = group_advantages(rewards, 4)
    torch.testing.assert_close(adv.view(3, 4).sum(-1), torch.zeros(3))
    torch.testing.assert_close(adv[:4], torch.tensor([0.5, -0.5, -0.5, 0.5]))
    assert stats == {"zero_var_groups": 1, "zero_var_frac": pytest.approx(1 / 3)}
    assert (adv[4:8] == 0).all()
    scaled, _ = group_advantages(rewards, 4, scale="std")
    torch.testing.assert_close(scaled.view(3, 4)[[0, 2]].std(-1), torch.ones(2), atol=1e-5, rtol=1e-5)
    assert (scaled[4:8] == 0).all()


@pytest.mark.parametrize("args,argument", [
    ((torch.ones(6), 4), "group_size"),
    ((torch.ones(6), 0), "group_size"),
    ((torch.tensor([1.0, float("nan")]), 2), "rewards"),
    ((torch.ones(4), 2, "rank"), "scale"),
])
def test_group_advantages_bad_input(args, argument):
    with pytest.raises(ValueError, match=rf"^{argument}:"):
        group_advantages(*args)


def test_importing_the_kernel_does_not_import_transformers():
    code = "import sys, nano_respo.kernel; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def diagnosed(logp, old_logp, adv, mask, cfg, group_size=None):
    """docs/math.md §6's statistics of the coefficient policy_loss applies, as the trainer computes them."""
    _, applied = policy_loss(logp, old_logp, adv, mask, cfg)
    return diagnostics(applied["phi"], logp, old_logp, adv, mask, cfg, group_size)


@pytest.mark.parametrize("method", ["respo", "grpo", "gspo"])
@pytest.mark.parametrize("correction", ["none", "sequence-truncate"])
def test_stats_are_the_detached_coefficient_the_gradient_applies_and_the_log_weight(method, correction):
    """d loss / d logp = -phi A / (token count) under token-mean: stats["phi"] is what the loss applied."""
    torch.manual_seed(0)
    mask = torch.arange(5)[None] < torch.tensor([5, 3, 4, 1])[:, None]  # [4, 5]
    old, pi_old = torch.randn(4, 5) * 0.3 - 1, torch.randn(4, 5) * 0.3 - 1
    logp = (old + torch.randn(4, 5) * 0.3).requires_grad_(True)
    adv = torch.tensor([1.0, -0.5, 2.0, -1.0])
    cfg = LossConfig(method=method, correction=correction)
    loss, stats = policy_loss(logp, old, adv, mask, cfg, pi_old_logp=pi_old)
    assert set(stats) == {"phi", "log_w"} and not any(t.requires_grad for t in stats.values())
    assert stats["phi"].shape == (4, 5) and stats["log_w"].shape == (4,)
    (grad,) = torch.autograd.grad(loss, logp)
    torch.testing.assert_close(grad[mask], (-stats["phi"] * adv[:, None] / mask.sum())[mask])
    reference = pi_old if correction != "none" else old  # the decoupled form's trust region reads pi / pi_old
    log_w = torch.where(mask, logp.detach() - reference, 0.0).sum(-1)
    torch.testing.assert_close(stats["log_w"], log_w / mask.sum(-1) if method == "gspo" else log_w)


def test_diagnostics_on_a_hand_sized_batch():
    """Two positives (one drifted to w = e^-0.8, 4 tokens; one at w = 1, then e^0.4, 2 tokens), one negative."""
    old = torch.zeros(3, 4)
    old[0] = 0.2
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    adv = torch.tensor([1.0, 1.0, -1.0])
    stats = diagnosed(torch.zeros(3, 4, requires_grad=True), old, adv, mask, LossConfig(method="seq_clip"))
    w = torch.exp(torch.tensor(-0.8)).item()
    assert stats["low_w_pos_frac"] == pytest.approx(0.5)
    assert stats["phi_low_w_pos"] == pytest.approx(w)  # the sequence clip gives it its own weight
    assert stats["low_w_pos_phi_mass"] == pytest.approx(w / (w + 1))
    assert (stats["len_low_w_pos"], stats["len_pos"]) == (4.0, 3.0)
    assert math.isnan(stats["len_high_w_pos"])  # no positive above w = 1.2
    assert stats["log_w_q50_pos"] == pytest.approx(-0.4) and stats["phi_max_neg"] == pytest.approx(1.0)
    assert stats["clip_frac_token"] == 0 and stats["clip_frac_seq"] == 0
    old[1] = -0.2  # the short positive drifts up to w = e^0.4 > 1.2
    stats = diagnosed(torch.zeros(3, 4, requires_grad=True), old, adv, mask, LossConfig(method="seq_clip"))
    assert (stats["len_low_w_pos"], stats["len_high_w_pos"], stats["len_pos"]) == (4.0, 2.0, 3.0)
    # What the sequence clip takes, per positive: 1 - w from the low one, the whole 1 from the high one.
    assert stats["lost_low_w_pos"] == pytest.approx((1 - w) / 2) and stats["lost_high_w_pos"] == pytest.approx(0.5)
    assert stats["deep_low_w_pos_frac"] == 0 and stats["deep_low_w_pos_phi_mass"] == 0  # log w = -0.8 is above -1
    old[0] = 0.3  # the long positive now at log w = -1.2, in the paper's tail log W < -1
    stats = diagnosed(torch.zeros(3, 4, requires_grad=True), old, adv, mask, LossConfig())
    phi_deep, phi_high = ((1 + w_) / 2 * math.exp(1 - w_) for w_ in (math.exp(-1.2), math.exp(0.4)))
    assert stats["deep_low_w_pos_frac"] == pytest.approx(0.5)
    assert stats["deep_low_w_pos_phi_mass"] == pytest.approx(phi_deep / (phi_deep + phi_high))


def test_within_group_lengths_take_out_which_prompt_a_positive_answers():
    """Two groups of 3 (one prompt, one target each). In group 1 the long positive (6 tokens, against a
    positive of 2) fell to w = e^-0.8; in group 2 the short positive (3 tokens, against one of 7) rose to e^0.4.
    Pooled over the batch the low-w one is 6 - 4.5 = 1.5 tokens above the mean positive; within its group it is
    6 - 4 = 2, and the high-w one 3 - 5 = -2."""
    lengths = [6, 2, 1, 3, 7, 5]
    mask = torch.arange(8)[None, :] < torch.tensor(lengths)[:, None]  # [6, 8]
    adv = torch.tensor([1.0, 1.0, -2.0, 1.0, 1.0, -2.0])
    old = torch.zeros(6, 8)
    old[0], old[3] = 0.8 / 6, -0.4 / 3
    logp = torch.zeros(6, 8, requires_grad=True)
    stats = diagnosed(logp, old, adv, mask, LossConfig(method="seq_clip"), group_size=3)
    assert stats["len_low_w_pos"] - stats["len_pos"] == pytest.approx(1.5)
    assert stats["len_excess_low_w_pos"] == pytest.approx(2.0)
    assert stats["len_excess_high_w_pos"] == pytest.approx(-2.0)
    without = diagnosed(logp, old, adv, mask, LossConfig(method="seq_clip"))
    assert "len_excess_low_w_pos" not in without  # rows of unknown grouping: not computed
    with pytest.raises(ValueError, match="group_size"):
        diagnosed(logp, old, adv, mask, LossConfig(method="seq_clip"), group_size=4)
