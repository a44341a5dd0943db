"""`--protocol paper` held to the authors' launcher, key by key, and the learning-rate warm-up it turns on.

The launcher's values are transcribed below from `recipe/respo/scripts/train_qwen3_1_7b.sh` of
yhangchen/ReSPO-code (commit 54ccaf50467a5fa21bd717a64147bf5a191679a2), verl's defaults it leaves alone from
`verl/trainer/config/ppo_trainer.yaml` (ReSPO-code 8d456e85) and verl's `trainer/config/actor/actor.yaml`.
"""

import pytest

import train as train_module
from conftest import parse_train
from nano_respo.cli import from_flat
from nano_respo.kernel import reuse_split
from train import TrainConfig

LAUNCHER = {
    "train_batch_n": 8,  # the default of --N
    "ppo_mini_batch_size": 32,
    "train_batch_size": "ppo_mini_batch_size * train_batch_n",
    "total_training_steps": "1024 / train_batch_n",
    "n_resp_per_prompt": 8,
    "temperature": 1.0,
    "loss_agg_mode": "token-mean",
    "actor.optim.lr": 1e-6,
    "actor.optim.lr_warmup_steps_ratio": 0.05,
    "actor.optim.weight_decay": 0.1,
    "actor.grad_clip": 1.0,
    "actor.use_kl_loss": False,
    "algorithm.use_kl_in_reward": False,
}
VERL_DEFAULTS = {
    "algorithm.norm_adv_by_std_in_grpo": True,  # ppo_trainer.yaml
    "actor.ppo_epochs": 1,  # actor.yaml
    "algorithm.rollout_correction": None,  # off: its rollout_correction.yaml default, and the launcher sets none
}


def test_the_paper_protocol_is_the_authors_launcher():
    cfg = parse_train(["--protocol", "paper"])
    n = LAUNCHER["train_batch_n"]
    assert cfg.reuse == n and cfg.epochs == VERL_DEFAULTS["actor.ppo_epochs"]  # one epoch of N mini-batches
    assert cfg.prompts_per_iteration == LAUNCHER["ppo_mini_batch_size"] * n
    assert cfg.prompts_per_iteration // reuse_split(cfg.reuse, cfg.epochs)[1] == LAUNCHER["ppo_mini_batch_size"]
    assert cfg.iterations * cfg.reuse == 1024 and cfg.iterations == 1024 // n
    assert cfg.group_size == LAUNCHER["n_resp_per_prompt"]
    assert cfg.temperature == LAUNCHER["temperature"]
    assert cfg.loss.agg == LAUNCHER["loss_agg_mode"]
    assert cfg.adv_scale == ("std" if VERL_DEFAULTS["algorithm.norm_adv_by_std_in_grpo"] else "none")
    assert cfg.loss.weight_against == "pi_old"  # verl's W: old_log_prob recomputed by the actor
    assert cfg.loss.correction == "none" and VERL_DEFAULTS["algorithm.rollout_correction"] is None
    assert cfg.lr == LAUNCHER["actor.optim.lr"]
    assert cfg.lr_warmup_ratio == LAUNCHER["actor.optim.lr_warmup_steps_ratio"]
    assert cfg.weight_decay == LAUNCHER["actor.optim.weight_decay"]
    assert cfg.max_grad_norm == LAUNCHER["actor.grad_clip"]
    assert not (LAUNCHER["actor.use_kl_loss"] or LAUNCHER["algorithm.use_kl_in_reward"])  # no KL term exists here
    assert cfg.loss.method == "respo"


def test_flags_given_beside_the_protocol_win_and_the_default_run_is_untouched():
    cfg = parse_train(["--reuse", "32", "--protocol", "paper", "--prompts-per-iteration", "1024",
                                     "--iterations", "32", "--method", "vespo"])
    assert (cfg.reuse, cfg.prompts_per_iteration, cfg.iterations, cfg.loss.method) == (32, 1024, 32, "vespo")
    assert cfg.adv_scale == "std" and cfg.weight_decay == 0.1
    assert parse_train([]) == TrainConfig()
    assert TrainConfig().lr_warmup_ratio == 0 and TrainConfig().loss.weight_against == "sampler"


def test_the_warm_up_is_verls_constant_schedule_stepped_once_per_rollout_batch():
    cfg = parse_train(["--protocol", "paper"])  # 128 iterations: int(0.05 x 128) = 6 warm up
    assert [cfg.lr_at(i) / cfg.lr for i in range(8)] == pytest.approx([0, 1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6, 1, 1])
    assert all(TrainConfig().lr_at(i) == TrainConfig().lr for i in range(40))
    with pytest.raises(ValueError, match="lr_warmup_ratio"):
        TrainConfig(lr_warmup_ratio=1.0)


def test_the_loop_sets_each_iterations_learning_rate(tmp_path, model_cache, monkeypatch):
    seen = []
    rl_iteration = train_module.rl_iteration

    def recording(model, tokenizer, task, optimizer, *args, **kwargs):
        seen.append([group["lr"] for group in optimizer.param_groups])
        return rl_iteration(model, tokenizer, task, optimizer, *args, **kwargs)
    monkeypatch.setattr(train_module, "rl_iteration", recording)
    cfg = from_flat(TrainConfig, dict(model="tiny-qwen3", task="addition", sft_steps=0, iterations=4,
                                      prompts_per_iteration=4, group_size=2, reuse=1, max_new_tokens=4,
                                      eval_problems=4, eval_samples=1, eval_every=4, out_dir=str(tmp_path),
                                      plots=False, lr=1e-3, lr_warmup_ratio=0.5))
    train_module.train(cfg)
    assert seen == [[0.0], [5e-4], [1e-3], [1e-3]]
