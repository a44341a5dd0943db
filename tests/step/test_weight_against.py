"""W's denominator (--weight-against): the sampler mu (coupled) or the learner's pi_old (the authors' verl runs).

In the default run the learner samples at the start of the batch's updates, so pi_old is mu and the two
forms compute the same numbers. Under --lag or a bfloat16 sampler they differ, per response, by exactly
log(pi_old / mu); with a correction, pi_old's form folds log c into log W.
"""

import json

import pytest
import torch

from nano_respo.kernel import LossConfig, correction_weight, policy_loss
from nano_respo.models import load_model
from nano_respo.offpolicy import LaggedPolicy, OffPolicy
from nano_respo.rollout import policy_logprobs
from nano_respo.tasks import make_task
from train import TrainConfig, rl_iteration

from conftest import parity_reward

torch.set_num_threads(1)
pytestmark = pytest.mark.usefixtures("model_cache")


def iterations(weight_against="sampler", lag=0, dtype=torch.float32, count=1):
    """`count` iterations of a tiny run (reuse 2); the model, the last batch and every record."""
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-qwen3", "float32", "cpu")
    task = make_task("addition", None, 8, None, seed=0)
    task.reward = parity_reward
    cfg = TrainConfig(prompts_per_iteration=8, group_size=4, reuse=2, epochs=1, max_new_tokens=12,
                     loss=LossConfig(weight_against=weight_against))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    separate = lag or dtype != torch.float32
    off_policy = OffPolicy(LaggedPolicy(model, lag=lag, dtype=dtype)) if separate else None
    records, step = [], 0
    for iteration in range(count):
        batch, new, step = rl_iteration(model, tokenizer, task, optimizer, cfg, iteration, step,
                                        off_policy=off_policy)
        records += new
    return model, batch, records, cfg


def without_timings(records) -> str:
    """The records as text (NaN equals NaN there), timings left out."""
    return json.dumps([{k: v for k, v in r.items() if not k.endswith("_per_s")} for r in records])


def test_in_the_default_run_w_against_pi_old_is_w_against_the_sampler():
    model_mu, batch_mu, records_mu, _ = iterations("sampler", count=2)
    model_old, batch_old, records_old, _ = iterations("pi_old", count=2)
    assert without_timings(records_old) == without_timings(records_mu)
    for a, b in zip(model_mu.parameters(), model_old.parameters()):
        assert torch.equal(a, b)
    assert torch.equal(batch_old.pi_old_logp, batch_mu.old_logp)  # no second forward: the sampler's own log-probs


@pytest.mark.parametrize("lag, dtype", [(1, torch.float32), (0, torch.bfloat16)])
def test_under_lag_or_a_bf16_sampler_the_two_differ_by_log_pi_old_over_mu(lag, dtype):
    model, batch, records, cfg = iterations("pi_old", lag=lag, dtype=dtype, count=2)
    mask = batch.completion_mask
    log_rho = torch.where(mask, batch.pi_old_logp - batch.old_logp, 0.0).sum(-1)  # [N] log(pi_old / mu)
    assert log_rho.abs().max() > 1e-3  # the sampler is not the learner here
    logp = policy_logprobs(model, batch, cfg.temperature)[0].detach()
    _, against_mu = policy_loss(logp, batch.old_logp, batch.advantages, mask, LossConfig())
    _, against_old = policy_loss(logp, batch.old_logp, batch.advantages, mask, LossConfig(weight_against="pi_old"),
                                 pi_old_logp=batch.pi_old_logp)
    torch.testing.assert_close(against_mu["log_w"] - against_old["log_w"], log_rho, atol=1e-5, rtol=0)
    # verl's W is 1 at the first update of every batch, whatever the sampler: pi is pi_old there
    first = records[len(records) // 2]
    assert (first["epoch"], first["minibatch"]) == (0, 0)
    assert max(abs(first[f"log_w_q{q}_{s}"]) for q in (10, 50, 90) for s in ("pos", "neg")) < 1e-4


@pytest.mark.parametrize("correction", ["token-truncate", "sequence-mask"])
def test_a_correction_against_pi_old_folds_log_c_into_log_w(correction):
    torch.manual_seed(1)
    mask = torch.ones(6, 5, dtype=torch.bool)
    mask[0, 3:] = False
    logp, pi_old, mu = (torch.randn(6, 5) * 0.3 for _ in range(3))
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0])
    cfg = LossConfig(weight_against="pi_old", correction=correction)
    _, stats = policy_loss(logp, mu, advantages, mask, cfg, pi_old_logp=pi_old)
    log_c = torch.where(mask, correction_weight(pi_old, mu, mask, cfg).clamp(min=1e-8).log(), 0.0).sum(-1)
    expected = torch.where(mask, logp - pi_old, 0.0).sum(-1) + log_c
    torch.testing.assert_close(stats["log_w"], expected.to(stats["log_w"].dtype), atol=1e-6, rtol=0)


def test_w_against_pi_old_refuses_a_loss_without_pi_old():
    logp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="pi_old_logp"):
        policy_loss(logp, logp, torch.tensor([1.0, -1.0]), torch.ones(2, 3, dtype=torch.bool),
                    LossConfig(weight_against="pi_old"))
    with pytest.raises(ValueError, match="weight_against"):
        LossConfig(weight_against="mu")
