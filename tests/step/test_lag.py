"""Rollout staleness (--lag k): rollouts sampled by the weights of k iterations earlier.

The recorded log mu must be the lagged policy's, so the first optimizer step of a batch
sees w = pi_now / mu_lagged, off 1 by exactly the drift between the two weight sets; and a
lagged run must survive a stop and --resume like any other.
"""

import copy

import pytest
import torch

from nano_respo.cli import from_flat
from nano_respo.models import load_model
from nano_respo.offpolicy import LaggedPolicy, OffPolicy
from nano_respo.rollout import policy_logprobs
from nano_respo.routes import RouteConfig
from nano_respo.runs import read_metrics
from nano_respo.tasks import make_task
from train import TrainConfig, rl_iteration, train

from conftest import parity_reward, without_timings  # shared with the parity_runs fixture

torch.set_num_threads(1)
pytestmark = pytest.mark.usefixtures("model_cache")



def test_lagged_rollouts_record_the_lagged_policys_log_probs():
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-qwen3", "float32", "cpu")
    task = make_task("addition", None, 8, None, seed=0)
    task.reward = parity_reward
    cfg = TrainConfig(prompts_per_iteration=4, group_size=4, reuse=1, epochs=1, max_new_tokens=6)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    lagged = LaggedPolicy(model, lag=1)

    assert lagged.lag_now == -1
    rl_iteration(model, tokenizer, task, optimizer, cfg, 0, 0, off_policy=OffPolicy(lagged))
    assert lagged.lag_now == 0  # nothing older than the start exists yet
    weights_before = copy.deepcopy(lagged.kept[0])  # the weights that sampled iteration 0 ...
    learner_now = copy.deepcopy(model)  # ... and the learner that steps on iteration 1's batch
    batch, records, _ = rl_iteration(model, tokenizer, task, optimizer, cfg, 1, 1, off_policy=OffPolicy(lagged))
    assert lagged.lag_now == 1

    mask = batch.completion_mask
    lagged_model = copy.deepcopy(model)
    lagged_model.load_state_dict(weights_before)
    with torch.no_grad():
        logp_lagged, _, _ = policy_logprobs(lagged_model, batch, cfg.temperature)
        logp_now, _, _ = policy_logprobs(learner_now, batch, cfg.temperature)
    torch.testing.assert_close(batch.old_logp[mask], logp_lagged[mask], atol=1e-5, rtol=0)
    log_w = torch.where(mask, logp_now - batch.old_logp, 0.0).sum(-1)  # [N] the drift, per response
    assert log_w.abs().max() > 1e-2  # w != 1 at the first step ...
    first = records[0]  # reuse 1: one mini-batch, the whole batch, before any step on it
    for sign, rows in (("pos", batch.advantages > 0), ("neg", batch.advantages < 0)):
        if rows.any():  # ... by exactly that drift
            expected = torch.quantile(log_w[rows], torch.tensor([0.1, 0.5, 0.9]))
            got = torch.tensor([first[f"log_w_q{q}_{sign}"] for q in (10, 50, 90)])
            torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def run_config(tmp_path, **overrides) -> TrainConfig:
    settings = dict(model="tiny-qwen3", task="addition", sft_steps=0, iterations=4, prompts_per_iteration=4,
                    group_size=4, reuse=2, epochs=1, max_new_tokens=6, eval_problems=8, eval_samples=2,
                    eval_every=2, save_every=2, out_dir=str(tmp_path), plots=False, lag=2, lr=1e-2)
    settings.update(overrides)
    return from_flat(TrainConfig, settings)


def records_of(run_dir):
    return without_timings([r for r in read_metrics(run_dir) if r["kind"] != "time"])


def test_a_lagged_run_resumes_to_the_same_records(tmp_path, parity_runs):
    straight = train(run_config(tmp_path, name="straight"))
    train(run_config(tmp_path, name="resumed", iterations=2))
    resumed = train(run_config(tmp_path, name="resumed", resume=True))
    assert records_of(resumed) == records_of(straight)
    lags = [r["policy_lag"] for r in records_of(straight) if r["kind"] == "train" and r["minibatch"] == 0]
    assert lags == [0, 1, 2, 2]


def test_lag_is_refused_under_fsdp_and_when_negative():
    with pytest.raises(ValueError, match=r"^lag\b.*must be >= 0"):
        TrainConfig(lag=-1)
    with pytest.raises(ValueError, match=r"^lag\b.*not supported under --fsdp"):
        TrainConfig(lag=1, routes=RouteConfig(fsdp=True))
