"""The toy environments' verifiers and distributions, the runner's bookkeeping, and learning."""

import itertools
import math

import pytest
import torch

from nano_respo.kernel import LossConfig, power_tilt, respo_branch, reuse_split
from toy.envs import DigitSum, Episodes, FactorisedBandit, make_env
from nano_respo.surrogate import phi_curve
from toy.train import Job, train

torch.set_num_threads(1)


def episodes_of(env, target, rows):
    """Episodes for hand-written responses (lists of token ids) to one target."""
    width = max(len(r) for r in rows)
    tokens = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[t < len(r) for t in range(width)] for r in rows])
    return Episodes(torch.full((len(rows),), target), tokens, mask, torch.zeros(tokens.shape))


def test_digit_sum_verifier():
    env = DigitSum(digits=4, max_len=6, train_targets=[7], heldout_targets=[0])
    end = env.end
    rows = [[3, 3, 1, end],      # 7, ended: correct
            [3, 3, end],         # 6: wrong sum
            [3, 3, 1],           # 7 but never ended: wrong
            [3, 3, 3, end],      # overshoot
            [0, 3, 0, 3, 1, end],  # zeros count as digits of value 0
            [end]]               # empty answer to a nonzero target
    assert env.reward(episodes_of(env, 7, rows)).tolist() == [1, 0, 0, 0, 1, 0]
    assert env.reward(episodes_of(env, 0, [[end]])).tolist() == [1]


def test_digit_sum_rejects_unreachable_targets():
    with pytest.raises(ValueError, match="heldout_targets"):
        DigitSum(digits=4, max_len=4, train_targets=[3], heldout_targets=[50])


def test_digit_sum_policy_is_a_distribution_over_responses():
    """Summed over every possible response (ended or cut at max_len), pi(y|x) adds to 1."""
    env = DigitSum(digits=2, max_len=3, train_targets=[1], heldout_targets=[2])
    torch.manual_seed(0)
    policy = env.make_policy(8)
    responses = []
    for length in range(1, 4):
        for body in itertools.product(range(2), repeat=length - 1):
            responses.append(list(body) + [env.end])
    responses += [list(body) for body in itertools.product(range(2), repeat=3)]
    for target in (0, 1, 2):
        ep = episodes_of(env, target, responses)
        logp = env.log_probs(policy, ep)
        total = torch.where(ep.mask, logp, torch.zeros_like(logp)).sum(-1).exp().sum()
        assert total.item() == pytest.approx(1.0, abs=1e-5)


def test_sampled_episodes_store_behaviour_log_probs():
    """At the first update on a fresh batch the recomputed log-probs equal the stored ones: w = 1."""
    env = DigitSum()
    policy = env.make_policy()
    ep = env.sample(policy, env.train_prompts.repeat(4), torch.Generator().manual_seed(0))
    assert torch.equal(env.log_probs(policy, ep), ep.old_logp)
    ended = ep.tokens.gather(1, (ep.mask.sum(-1) - 1)[:, None]).squeeze(1) == env.end
    assert (ended | (ep.mask.sum(-1) == env.max_len)).all()


def test_bandit_verifier_and_exact_expected_reward():
    env = FactorisedBandit(positions=3, arms=3, need=2, seed=1)
    target = env.target.tolist()
    wrong = [(t + 1) % 3 for t in target]
    rows = [target, [target[0], target[1], wrong[2]], [target[0], wrong[1], wrong[2]], wrong]
    ep = Episodes(torch.zeros(4, dtype=torch.long), torch.tensor(rows), torch.ones(4, 3, dtype=torch.bool), torch.zeros(4, 3))
    assert env.reward(ep).tolist() == [1, 1, 0, 0]
    torch.manual_seed(0)
    policy = env.make_policy()
    policy.logits.data.normal_()
    every = torch.tensor(list(itertools.product(range(3), repeat=3)))  # all 27 responses
    all_ep = Episodes(torch.zeros(27, dtype=torch.long), every, torch.ones(27, 3, dtype=torch.bool), torch.zeros(27, 3))
    probs = env.log_probs(policy, all_ep).sum(-1).exp()
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-6)
    assert env.expected_reward(policy) == pytest.approx((probs * env.reward(all_ep)).sum().item(), abs=1e-6)


def test_make_env_rejects_unknown_names():
    with pytest.raises(ValueError, match="env"):
        make_env("chess")


def test_reuse_split_gives_epochs_and_minibatches_with_the_given_count_capped_at_reuse():
    assert reuse_split(1, minibatches=4) == (1, 1)
    assert reuse_split(16, minibatches=4) == (4, 4)
    assert reuse_split(8, epochs=2) == (2, 4)
    assert reuse_split(1, epochs=2) == (1, 1)  # on-policy needs no --epochs 1
    for bad in (dict(minibatches=4), dict(epochs=4)):
        with pytest.raises(ValueError, match="reuse"):
            reuse_split(6, **bad)
    with pytest.raises(ValueError, match="not both"):
        reuse_split(4, epochs=2, minibatches=2)


@pytest.mark.parametrize("env,method,reuse,lr", [("seq", "respo", 4, 0.01), ("seq", "seq_clip", 4, 0.01),
                                                 ("bandit", "respo", 4, 0.03)])
def test_short_run_raises_reward(env, method, reuse, lr):
    record = train(Job(env=env, method=method, reuse=reuse, seed=7, lr=lr, iterations=30))
    curve = record["reward_curve"]
    assert sum(curve[-5:]) / 5 > sum(curve[:5]) / 5 + 0.1
    assert 0.0 <= record["heldout_reward"] <= 1.0
    assert 0.0 <= record["low_w_pos_frac"] <= 1.0


def test_reuse_one_sees_only_on_policy_weights():
    """R = 1 with one mini-batch: every update is on-policy, so no positive has w < 1 - eps."""
    record = train(Job(env="seq", method="seq_clip", reuse=1, seed=3, lr=0.01, iterations=5))
    assert record["low_w_pos_frac"] == 0.0
    assert record["clip_frac_seq"] == 0.0


def test_record_follows_the_run_batch_by_batch():
    """Every per-batch curve has one entry per rollout batch; the kernel ones average that batch's R steps."""
    record = train(Job(env="seq", method="respo", reuse=4, seed=5, lr=0.03, iterations=6))
    curves = [k for k in record if k.endswith("_curve")]
    assert {"reward_curve", "entropy_curve", "length_curve", "phi_max_neg_curve", "low_w_pos_frac_curve"} <= set(curves)
    assert all(len(record[k]) == 6 for k in curves)
    assert all(1 <= v <= 16 for v in record["length_curve"]) and all(v >= 0 for v in record["entropy_curve"])
    assert record["early_auc"] == pytest.approx(record["reward_curve"][0], abs=1e-4)  # quarter of 6 batches = 1
    assert all(math.isnan(v) or v >= 0 for v in record["phi_max_neg_curve"]) and record["cpu_capability"]


def test_phi_curve_reads_the_kernel_coefficient_back_from_the_gradient():
    log_w = torch.linspace(-5, 3, 50)
    assert torch.allclose(phi_curve("respo", log_w, True), respo_branch(log_w.double(), 2.0, 0.5, 2.0), rtol=1e-6)
    assert torch.allclose(phi_curve("respo", log_w, False, beta_neg=0.3, lambda_neg=1.0),
                          respo_branch(log_w.double(), 1.0, 0.3, 1.0), rtol=1e-6)
    assert torch.allclose(phi_curve("vespo", log_w, False, vespo_k_neg=2.0, vespo_lambda_neg=1.0),
                          power_tilt(log_w.double(), 2.0, 1.0), rtol=1e-6)
    w = log_w.exp().double()
    clip_pos = phi_curve("seq_clip", log_w, True)
    assert torch.allclose(clip_pos, torch.where(w > 1.2, torch.zeros_like(w), w), rtol=1e-6)





def test_the_toy_runs_the_kernels_defaults_unless_its_loss_names_another():
    """A toy run aggregates as LossConfig's default does, unless its job's loss names another aggregation."""
    job = dict(env="seq", method="seq_clip", reuse=4, seed=3, lr=0.03, iterations=3)

    def run(**loss):
        record = train(Job(**job, loss=loss))
        return record["reward_curve"], record["grad_norm"]
    default = run()
    assert run(agg=LossConfig().agg) == default
    assert run(agg="seq-mean-token-sum-norm")[1] != default[1]  # another scale of the same gradient
