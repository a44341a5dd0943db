"""The train-inference mismatch (--sampler-dtype) and the decoupled form in the trainer.

A low-precision copy of the learner samples, so the recorded log mu is its log-probs and
the first step of a batch sees w = pi / mu off 1 by exactly the mismatch; at float32 the
copy is the learner and w = 1. pi_old is the learner's forward before any step on the batch.
On the MoE the routers of the two copies pick other experts for some tokens.
"""

import copy

import pytest
import torch

from nano_respo.cli import from_flat
from nano_respo.kernel import LossConfig
from nano_respo.models import load_model
from nano_respo.offpolicy import LaggedPolicy, OffPolicy
from nano_respo.rollout import policy_logprobs
from nano_respo.routes import RouteConfig
from nano_respo.runs import read_metrics
from nano_respo.tasks import make_task
from train import TrainConfig, rl_iteration, train

from conftest import parity_reward  # shared with the parity_runs fixture

torch.set_num_threads(1)
pytestmark = pytest.mark.usefixtures("model_cache")



def first_iteration(model_name, dtype, seed=0, **loss):
    """The learner before its first step, the cast sampler, and the first iteration's batch and records."""
    torch.manual_seed(seed)
    model, tokenizer = load_model(model_name, "float32", "cpu")
    task = make_task("addition", None, 8, None, seed=0)
    task.reward = parity_reward
    cfg = TrainConfig(prompts_per_iteration=8, group_size=4, reuse=1, epochs=1, max_new_tokens=12,
                     loss=LossConfig(**loss))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    learner = copy.deepcopy(model)
    lagged = LaggedPolicy(model, lag=0, dtype=dtype)
    batch, records, _ = rl_iteration(model, tokenizer, task, optimizer, cfg, 0, 0, off_policy=OffPolicy(lagged))
    return learner, lagged.sampler, batch, records, cfg


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_low_precision_sampler_records_its_own_log_probs_and_w_is_off_one_by_the_mismatch(dtype):
    learner, sampler, batch, records, cfg = first_iteration("tiny-qwen3", dtype)
    assert all(p.dtype == dtype for p in sampler.parameters())
    mask = batch.completion_mask
    with torch.no_grad():
        logp_low, _, _ = policy_logprobs(sampler, batch, cfg.temperature)
        logp_learner, _, _ = policy_logprobs(learner, batch, cfg.temperature)
    # log mu is the low-precision model's (its KV-cache decode rounds differently from one full forward,
    # by the dtype's own rounding: a few of its epsilons) ...
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(batch.old_logp[mask], logp_low[mask].float(), atol=8 * eps, rtol=0)
    # ... pi_old is the float32 learner's, and the first step sees w = pi_old / mu, not 1
    torch.testing.assert_close(batch.pi_old_logp[mask], logp_learner[mask], atol=1e-5, rtol=0)
    log_w = torch.where(mask, logp_learner - batch.old_logp, 0.0).sum(-1)  # [N]
    assert log_w.abs().max() > 10 * 1e-5
    first = records[0]
    for sign, rows in (("pos", batch.advantages > 0), ("neg", batch.advantages < 0)):
        expected = torch.quantile(log_w[rows], torch.tensor([0.1, 0.5, 0.9]))
        got = torch.tensor([first[f"log_w_q{q}_{sign}"] for q in (10, 50, 90)])
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    d = torch.where(mask, batch.pi_old_logp - batch.old_logp, 0.0)
    assert first["sampler_kl"] == pytest.approx((torch.expm1(d) - d)[mask].mean().item(), rel=1e-4)
    assert first["sampler_kl"] > 0 and first["ess"] < 1


def test_a_float32_sampler_copy_is_the_learner_and_w_is_one():
    _, _, batch, records, _ = first_iteration("tiny-qwen3", torch.float32)
    mask = batch.completion_mask
    assert (batch.pi_old_logp - batch.old_logp)[mask].abs().max() < 1e-5
    assert max(abs(records[0][f"log_w_q{q}_{s}"]) for q in (10, 50, 90) for s in ("pos", "neg")) < 1e-4


def test_the_cast_sampler_composes_with_the_lag():
    torch.manual_seed(0)
    model, _ = load_model("tiny-qwen3", "float32", "cpu")
    lagged = LaggedPolicy(model, lag=1, dtype=torch.bfloat16)
    lagged.sampler_for(model)
    before = copy.deepcopy(lagged.kept[0])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    sampler = lagged.sampler_for(model)  # lag 1: the weights before the change, cast
    for name, value in sampler.state_dict().items():
        assert torch.equal(value, before[name].to(value.dtype)), name
    assert lagged.lag_now == 1


def router_choices_by_hooks(model, batch):
    """The experts each Qwen3MoeTopKRouter picks (its third output), captured at the routers themselves."""
    picked = []
    hooks = [layer.mlp.gate.register_forward_hook(lambda m, i, out: picked.append(out[2]))
             for layer in model.model.layers]
    with torch.no_grad():
        policy_logprobs(model, batch, 1.0)
    for hook in hooks:
        hook.remove()
    n, length = batch.input_ids.shape
    width = batch.completion_mask.shape[1]
    return [p.view(n, length, -1)[:, -width - 1:-1].sort(-1).values for p in picked]


def test_on_the_moe_the_router_mismatch_is_the_share_of_tokens_routed_elsewhere():
    learner, sampler, batch, records, _ = first_iteration("tiny-qwen3-moe", torch.bfloat16)
    differs = torch.zeros_like(batch.completion_mask)
    for low, full in zip(router_choices_by_hooks(sampler, batch), router_choices_by_hooks(learner, batch)):
        differs |= (low != full).any(-1)
    expected = differs[batch.completion_mask].float().mean().item()
    assert records[0]["router_mismatch_frac"] == pytest.approx(expected)
    assert 0 < expected < 0.5  # bf16 routes some tokens elsewhere, most not
    _, _, _, same, _ = first_iteration("tiny-qwen3-moe", torch.float32)
    assert same[0]["router_mismatch_frac"] == 0


def test_the_correction_runs_in_the_trainer_and_reads_pi_old():
    _, _, batch, records, _ = first_iteration("tiny-qwen3", torch.bfloat16, method="grpo",
                                              correction="sequence-mask", correction_max=1.0001)
    mask = batch.completion_mask
    rho = torch.where(mask, batch.pi_old_logp - batch.old_logp, 0.0).sum(-1).exp()  # [N]
    expected = (rho > 1.0001).float().mean().item()
    assert records[0]["correction_outside_frac"] == pytest.approx(expected)
    assert 0 < expected < 1


def test_a_bf16_sampler_run_with_a_correction_trains_and_resumes_to_the_same_records(tmp_path, parity_runs):
    settings = dict(model="tiny-qwen3", task="addition", sft_steps=0, iterations=2, prompts_per_iteration=4,
                    group_size=4, reuse=2, epochs=1, max_new_tokens=6, eval_problems=8, eval_samples=2,
                    eval_every=1, save_every=1, out_dir=str(tmp_path), plots=False, lr=1e-2,
                    sampler_dtype="bfloat16", correction="token-truncate", opsm_delta=0.5)
    straight = train(from_flat(TrainConfig, {**settings, "name": "straight"}))
    train(from_flat(TrainConfig, {**settings, "name": "resumed", "iterations": 1}))
    resumed = train(from_flat(TrainConfig, {**settings, "name": "resumed", "resume": True}))
    from test_lag import records_of
    assert records_of(resumed) == records_of(straight)
    steps = [r for r in read_metrics(straight) if r["kind"] == "train"]
    assert all(r["policy_lag"] == 0 and "sampler_kl" in r and "opsm_masked_frac" in r for r in steps)


def test_sampler_dtype_is_checked():
    with pytest.raises(ValueError, match="^sampler_dtype:"):
        TrainConfig(sampler_dtype="int8")
    with pytest.raises(ValueError, match=r"sampler_dtype: .*not supported under --fsdp"):
        TrainConfig(sampler_dtype="bfloat16", routes=RouteConfig(fsdp=True))
