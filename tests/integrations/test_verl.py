"""The verl policy losses, fetched back through verl's own registry, against the kernel."""

import math

import pytest
import torch

pytest.importorskip("verl", reason="install nano_respo/integrations/requirements.txt (see .ci/integrations.sh)")

from hydra import compose, initialize_config_module  # noqa: E402
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402

import nano_respo.integrations.verl as respo_verl  # noqa: E402  (registers the losses)
from nano_respo.kernel import (AGG_MODES, METHODS, LossConfig, coefficients, diagnostics, policy_loss)  # noqa: E402

B, T = 6, 7


def actor_config(*overrides):
    """verl's actor config as its workers build it: Hydra compose, then omega_conf_to_dataclass."""
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        prefixed = [("+" if o.startswith("+") else "") + "actor_rollout_ref.actor." + o.lstrip("+") for o in overrides]
        cfg = compose(config_name="ppo_trainer", overrides=prefixed)
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


@pytest.fixture(scope="module")
def respo_actor():
    return actor_config("policy_loss._target_=nano_respo.integrations.verl.ReSPOPolicyLossConfig",
                        "policy_loss.loss_mode=respo", "+policy_loss.beta_pos=0.3", "+policy_loss.lambda_neg=1.5",
                        "ppo_micro_batch_size_per_gpu=2")


def batch(seed=0, scale=0.5):
    """Random log-probs with weights far from 1, one advantage per response, ragged masks."""
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=gen) * 3).requires_grad_()
    old = logp.detach() + scale * torch.randn(B, T, generator=gen)
    adv = torch.tensor([1.0, -0.5, 0.7, -1.2, 0.0, 0.3])
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 4:] = False
    mask[3, 2:] = False
    mask[5, :] = False  # an empty response
    return logp, old, adv, mask


def grads(loss, logp):
    (g,) = torch.autograd.grad(loss, logp, retain_graph=True)
    return g


def test_registry_lists_every_method():
    for name in ["respo"] + [f"nano_respo_{m}" for m in METHODS if m != "respo"]:
        assert callable(get_policy_loss_fn(name))


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("method", METHODS)
def test_verl_loss_equals_kernel(method, agg):
    loss_mode = "respo" if method == "respo" else f"nano_respo_{method}"
    logp, old, adv, mask = batch()
    # verl hands per-token advantages, constant along a response; padding may hold anything
    token_adv = torch.where(mask, adv[:, None].expand(B, T), torch.full((B, T), 9.0))
    loss, metrics = get_policy_loss_fn(loss_mode)(old, logp, token_adv, mask.float(), agg, None, None)
    cfg = LossConfig(method=method, agg=agg)
    ref, applied = policy_loss(logp, old, adv, mask, cfg)
    stats = diagnostics(applied["phi"], logp, old, adv, mask, cfg)
    assert torch.allclose(loss, ref, rtol=1e-6, atol=1e-8)
    assert torch.allclose(grads(loss, logp), grads(ref, logp), rtol=1e-6, atol=1e-8)
    assert metrics.keys() == {f"actor/nano_respo/{k}" for k in stats}
    for key, value in stats.items():
        assert metrics[f"actor/nano_respo/{key}"] == pytest.approx(value, nan_ok=True)


def test_loss_mode_respo_is_the_published_loss():
    """loss_mode=respo computes the authors' recipe (yhangchen/ReSPO-code, recipe/respo/core_algos.py, which registers
    the same name): phi of the clamped log W in closed form, detached, -phi A log pi per token, verl's token-mean."""
    logp, old, adv, mask = batch(seed=6, scale=1.5)
    log_w = torch.where(mask, logp.detach() - old, torch.zeros(())).sum(-1).clamp(-20, 20)
    w = log_w.exp()
    phi = torch.where(adv >= 0, (1 + w) / 2 * torch.exp(1 - w), w.sqrt() * torch.exp(2 * (1 - w.sqrt())))
    token_adv = adv[:, None].expand(B, T)
    published = agg_loss(loss_mat=-phi[:, None] * token_adv * logp, loss_mask=mask.float(), loss_agg_mode="token-mean")
    loss, _ = get_policy_loss_fn("respo")(old, logp, token_adv, mask.float(), "token-mean", None, None)
    assert torch.allclose(loss, published, rtol=1e-6, atol=1e-8)
    assert torch.allclose(grads(loss, logp), grads(published, logp), rtol=1e-6, atol=1e-8)


def test_hydra_keys_reach_the_kernel(respo_actor):
    assert isinstance(respo_actor.policy_loss, respo_verl.ReSPOPolicyLossConfig)
    logp, old, adv, mask = batch(seed=1)
    token_adv = adv[:, None].expand(B, T)
    loss, _ = get_policy_loss_fn("respo")(old, logp, token_adv, mask, "seq-mean-token-sum", respo_actor, None)
    ref, _ = policy_loss(logp, old, adv, mask, LossConfig(beta_pos=0.3, lambda_neg=1.5, agg="seq-mean-token-sum"))
    default, _ = policy_loss(logp, old, adv, mask, LossConfig(agg="seq-mean-token-sum"))
    assert torch.allclose(grads(loss, logp), grads(ref, logp), rtol=1e-6, atol=1e-8)
    assert not torch.allclose(grads(ref, logp), grads(default, logp))  # the keys changed something


def test_token_level_rollout_is_weights_fold_into_log_w():
    logp, old, adv, mask = batch(seed=2)
    gen = torch.Generator().manual_seed(3)
    rho = torch.exp(0.4 * torch.randn(B, T, generator=gen)) * mask  # verl zeroes padding
    config = respo_verl.ReSPOPolicyLossConfig(rollout_is_level="token")
    loss, _ = get_policy_loss_fn("respo")(old, logp, adv[:, None].expand(B, T), mask, "seq-mean-token-sum",
                                          {"policy_loss": config}, rho)
    log_rho = torch.where(mask, rho.clamp(min=1e-30).log(), torch.zeros_like(rho))  # [B, T]
    # the kernel's sequence log-weight becomes sum_t (log pi - log pi_old) + sum_t log rho_t
    ref, _ = policy_loss(logp, old - log_rho, adv, mask, LossConfig(agg="seq-mean-token-sum"))
    assert torch.allclose(loss, ref, rtol=1e-6) and torch.allclose(grads(loss, logp), grads(ref, logp), rtol=1e-6)
    no_is, _ = policy_loss(logp, old, adv, mask, LossConfig(agg="seq-mean-token-sum"))
    assert not torch.allclose(grads(loss, logp), grads(no_is, logp))  # the weights did matter


def test_sequence_level_rollout_is_weight_counts_once():
    logp, old, adv, mask = batch(seed=4)
    log_rho = torch.tensor([0.5, -0.3, 0.2, -0.6, 0.1, 0.0])  # one weight per response
    rho = torch.exp(log_rho)[:, None].expand(B, T) * mask
    fn = get_policy_loss_fn("respo")
    loss, metrics = fn(old, logp, adv[:, None].expand(B, T), mask, "seq-mean-token-sum", None, rho)
    lengths = mask.sum(-1).clamp(min=1)
    ref, _ = policy_loss(logp, old - (log_rho / lengths)[:, None], adv, mask, LossConfig(agg="seq-mean-token-sum"))
    assert torch.allclose(grads(loss, logp), grads(ref, logp), rtol=1e-6)
    # median log w of the positives moved by exactly their log rho: rows 0, 2 (rows 4, 5: A = 0 / empty)
    plain_cfg = LossConfig(agg="seq-mean-token-sum")
    _, applied = policy_loss(logp, old, adv, mask, plain_cfg)
    plain = diagnostics(applied["phi"], logp, old, adv, mask, plain_cfg)
    assert metrics["actor/nano_respo/log_w_q50_pos"] == pytest.approx(
        plain["log_w_q50_pos"] + (0.5 + 0.2) / 2, abs=1e-5)


def test_zero_rollout_is_weight_rejects_the_response():
    logp, old, adv, mask = batch(seed=5)
    rho = torch.ones(B, T) * mask
    rho[0, 2] = 0.0  # IcePop dropped a token of response 0
    config = {"policy_loss": respo_verl.ReSPOPolicyLossConfig(rollout_is_level="token")}
    loss, _ = get_policy_loss_fn("respo")(old, logp, adv[:, None].expand(B, T), mask, "token-mean", config, rho)
    ref, _ = policy_loss(logp, old, adv * torch.tensor([0.0, 1, 1, 1, 1, 1]), mask, LossConfig(agg="token-mean"))
    g = grads(loss, logp)
    assert torch.allclose(g, grads(ref, logp), rtol=1e-6)
    assert g[0].abs().sum() == 0 and g[2].abs().sum() > 0


def test_bad_inputs_raise_one_line_errors():
    logp, old, adv, mask = batch()
    fn = get_policy_loss_fn("respo")
    varying = adv[:, None] + torch.linspace(0, 1, T)  # a critic's per-token advantages
    with pytest.raises(ValueError, match="advantages"):
        fn(old, logp, varying, mask, "token-mean", None, None)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        fn(old, logp, adv[:, None].expand(B, T), mask, "token-sum", None, None)
    token_rho = torch.exp(0.3 * torch.randn(B, T))  # token-level weights under the default "sequence" level
    with pytest.raises(ValueError, match="rollout_is_level"):
        fn(old, logp, adv[:, None].expand(B, T), mask, "token-mean", None, token_rho)


@pytest.mark.parametrize("agg", AGG_MODES)
def test_micro_batches_and_data_parallel_match_verls_agg_loss(agg):
    """With verl's global batch info, the loss is verl's agg_loss of the kernel's token terms (in float64: the token
    sums cancel, and float32's accumulation order alone moves them by a few parts in a million)."""
    logp, old, adv, mask = (t.double() if t.is_floating_point() else t for t in batch(seed=6))
    info = {"dp_size": 2, "batch_num_tokens": 61, "global_batch_size": 11, "loss_scale_factor": 9}
    config = {"loss_scale_factor": 9, "global_batch_info": info}
    loss, _ = get_policy_loss_fn("respo")(old, logp, adv[:, None].expand(B, T), mask, agg, config, None)
    phi, _ = coefficients(logp, old, adv, mask, LossConfig())
    terms = -(phi * adv[:, None]).detach() * logp  # [B, T]
    expected = agg_loss(terms, mask.float(), agg, **info)
    assert torch.allclose(loss, expected, rtol=1e-6)
    assert torch.allclose(grads(loss, logp), grads(expected, logp), rtol=1e-6)


@pytest.mark.parametrize("verl_mode, method, agg", [("vanilla", "dual_clip", "token-mean"),
                                                     ("gspo", "gspo", "seq-mean-token-mean")])
def test_gradients_match_verls_own_losses(verl_mode, method, agg):
    """Same coefficient, two code bases: verl's dual-clip PPO and GSPO give the kernel's gradient."""
    actor = actor_config("policy_loss._target_=nano_respo.integrations.verl.ReSPOPolicyLossConfig",
                         f"policy_loss.loss_mode=nano_respo_{method}", "+policy_loss.eps_low=0.2",
                         "+policy_loss.eps_high=0.28", "clip_ratio_low=0.2", "clip_ratio_high=0.28",
                         "ppo_micro_batch_size_per_gpu=2")
    logp, old, adv, mask = batch(seed=7, scale=0.3)
    # a high-w positive and a low-w negative: both clipped, at token and at sequence level
    old = old - torch.tensor([0.5, 0.0, 0.0, -0.5, 0.0, 0.0])[:, None]
    token_adv = adv[:, None].expand(B, T)
    ours, _ = get_policy_loss_fn(f"nano_respo_{method}")(old, logp, token_adv, mask, agg, actor, None)
    theirs, _ = get_policy_loss_fn(verl_mode)(old, logp, token_adv, mask.float(), agg, actor, None)
    g_ours, g_theirs = grads(ours, logp), grads(theirs, logp)
    live = mask & (adv != 0)[:, None]
    assert (g_theirs[live] == 0).any() and (g_theirs[live] != 0).any()  # some tokens clipped, some not
    assert torch.allclose(g_ours, g_theirs, rtol=1e-5, atol=1e-7)
    assert math.isfinite(ours.item())


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_verls_rollout_correction_is_the_decoupled_form(level):
    """verl multiplies its PPO loss on pi / pi_old by compute_rollout_correction_weights' truncated pi_old / mu:
    the kernel's --correction {level}-truncate with the same threshold."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

    actor = actor_config("clip_ratio_low=0.2", "clip_ratio_high=0.28", "ppo_micro_batch_size_per_gpu=2")
    logp, pi_old, adv, mask = batch(seed=8, scale=0.3)
    mu = pi_old + 0.5 * torch.randn(B, T, generator=torch.Generator().manual_seed(9))
    weights, _ = compute_rollout_correction_weights(pi_old - mu, mask.float(), rollout_is=level,
                                                    rollout_is_threshold=2.0)
    assert (weights[mask] == 2.0).any() and (weights[mask] < 2.0).any()  # some truncated, some not
    token_adv = adv[:, None].expand(B, T)
    theirs, _ = get_policy_loss_fn("vanilla")(pi_old, logp, token_adv, mask.float(), "token-mean", actor, weights)
    cfg = LossConfig(method="dual_clip", eps_low=0.2, eps_high=0.28, agg="token-mean",
                     correction=f"{level}-truncate", correction_max=2.0)
    ours, _ = policy_loss(logp, mu, adv, mask, cfg, pi_old_logp=pi_old)
    assert torch.allclose(grads(ours, logp), grads(theirs, logp), rtol=1e-5, atol=1e-7)


def test_the_kernels_own_correction_is_refused_under_verls():
    """verl's rollout correction is folded into w; the kernel's would apply a second one."""
    actor = actor_config("policy_loss._target_=nano_respo.integrations.verl.ReSPOPolicyLossConfig",
                         "policy_loss.loss_mode=respo", "+policy_loss.correction=token-truncate",
                         "ppo_micro_batch_size_per_gpu=2")
    logp, old, adv, mask = batch(seed=10)
    with pytest.raises(ValueError, match="^correction:"):
        get_policy_loss_fn("respo")(old, logp, adv[:, None].expand(B, T), mask, "token-mean", actor, None)
