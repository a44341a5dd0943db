"""The README's two examples: the TRL script runs; the verl command line is valid for verl 0.9.1."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl", reason="install nano_respo/integrations/requirements.txt (see .ci/integrations.sh)")
pytest.importorskip("verl", reason="install nano_respo/integrations/requirements.txt (see .ci/integrations.sh)")

from hydra import compose, initialize_config_module  # noqa: E402
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402

from nano_respo.kernel import LossConfig, policy_loss  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_trl_example_trains_two_steps(tiny_qwen3_dir, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    import trl_respo

    trainer = trl_respo.main(["--model", tiny_qwen3_dir, "--output-dir", str(tmp_path), "--cpu", "--max-steps", "2",
                              "--num-generations", "4", "--per-device-batch-size", "4",
                              "--max-completion-length", "4", "--num-prompts", "8", "--learning-rate", "1e-3"])
    logs = [entry for entry in trainer.state.log_history if "respo/phi_mean_neg" in entry]
    assert len(logs) == 2 and "reward" in logs[0]
    assert trl_respo.correct_sum(["12 apples", "x", "7"], answer=[12, 3, 8]) == [1.0, 0.0, 0.0]


def verl_example_config(tmp_path, *extra):
    """Run the script with a stand-in python3 that records its arguments, then let verl's Hydra compose them."""
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/args\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "DATA": "/data/gsm8k", "GPUS": "4"}
    subprocess.run(["bash", str(ROOT / "examples" / "verl_respo.sh"), "trainer.total_epochs=1", *extra], env=env,
                   check=True)
    args = (tmp_path / "args").read_text().splitlines()
    assert args[:2] == ["-m", "verl.trainer.main_ppo"]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer", overrides=args[2:])  # unknown keys or bad values raise here


def test_verl_example_command_builds_the_respo_actor(tmp_path):
    cfg = verl_example_config(tmp_path)
    assert cfg.trainer.n_gpus_per_node == 4 and cfg.trainer.total_epochs == 1
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)  # what each verl worker does
    assert actor.policy_loss.loss_mode == "respo" and actor.loss_agg_mode == "token-mean"
    assert (actor.ppo_mini_batch_size, actor.ppo_epochs, cfg.data.train_batch_size) == (32, 1, 256)  # N = 8, one epoch

    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(4, 6, generator=gen)).requires_grad_()
    old = logp.detach() + 0.5 * torch.randn(4, 6, generator=gen)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    mask = torch.ones(4, 6, dtype=torch.bool)
    loss, _ = get_policy_loss_fn(actor.policy_loss.loss_mode)(old, logp, adv[:, None].expand(4, 6), mask,
                                                              actor.loss_agg_mode, actor, None)
    ref, _ = policy_loss(logp, old, adv, mask, LossConfig())
    assert torch.allclose(loss, ref)


def test_verl_example_applies_the_rollout_correction_once(tmp_path):
    """The script's rollout-correction flags, through verl's own weights and the adapter: w = pi / mu, once."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

    cfg = verl_example_config(tmp_path)
    correction = omega_conf_to_dataclass(cfg.algorithm.rollout_correction, RolloutCorrectionConfig)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert cfg.actor_rollout_ref.rollout.calculate_log_probs  # log mu: the engine's log-probs of the sampled tokens
    assert correction.rollout_is == actor.policy_loss.rollout_is_level == "sequence"
    assert correction.bypass_mode is False and correction.rollout_rs is None
    assert actor.policy_loss.correction == "none"  # the kernel's own decoupled correction stays off

    gen = torch.Generator().manual_seed(1)
    mu = -torch.rand(4, 6, generator=gen) * 2  # [B, T] the sampler's log-probs
    pi_old = mu + 0.05 * torch.randn(4, 6, generator=gen)  # the mismatch: small, so no rho reaches the cap
    logp = (pi_old + 0.3 * torch.randn(4, 6, generator=gen)).requires_grad_()  # reuse moved pi from pi_old
    adv, mask = torch.tensor([1.0, -1.0, 0.5, -0.5]), torch.ones(4, 6, dtype=torch.bool)
    mask[2, 3:] = False
    weights, _ = compute_rollout_correction_weights(pi_old - mu, mask.float(), rollout_is=correction.rollout_is,
                                                    rollout_is_threshold=correction.rollout_is_threshold)
    assert weights[mask].max() < correction.rollout_is_threshold
    fn = get_policy_loss_fn(actor.policy_loss.loss_mode)
    loss, _ = fn(pi_old, logp, adv[:, None].expand(4, 6), mask, actor.loss_agg_mode, actor, weights)
    coupled, _ = policy_loss(logp, mu, adv, mask, LossConfig(agg=actor.loss_agg_mode))  # ReSPO on w = pi / mu
    (g,), (g_ref,) = torch.autograd.grad(loss, logp), torch.autograd.grad(coupled, logp)
    assert torch.allclose(g, g_ref, rtol=1e-5, atol=1e-7)
    without, _ = fn(pi_old, logp, adv[:, None].expand(4, 6), mask, actor.loss_agg_mode, actor, None)
    assert not torch.allclose(torch.autograd.grad(without, logp)[0], g_ref)  # rollout_is=null: w = pi / pi_old

    # What the script must not change: each refused, or the kernel replaced.
    token_weights, _ = compute_rollout_correction_weights(pi_old - mu, mask.float(), rollout_is="token")
    with pytest.raises(ValueError, match="rollout_is_level"):  # rollout_is=token without rollout_is_level=token
        fn(pi_old, logp, adv[:, None].expand(4, 6), mask, actor.loss_agg_mode, actor, token_weights)
    twice = omega_conf_to_dataclass(verl_example_config(
        tmp_path, "+actor_rollout_ref.actor.policy_loss.correction=sequence-truncate").actor_rollout_ref.actor)
    with pytest.raises(ValueError, match="correction"):  # the kernel's correction on top of verl's
        get_policy_loss_fn(twice.policy_loss.loss_mode)(pi_old, logp, adv[:, None].expand(4, 6), mask,
                                                        twice.loss_agg_mode, twice, weights)
    from verl import DataProto
    from verl.trainer.ppo.rollout_corr_helper import apply_bypass_mode

    bypass = verl_example_config(tmp_path, "algorithm.rollout_correction.bypass_mode=true")
    apply_bypass_mode(DataProto.from_dict({"rollout_log_probs": mu, "old_log_probs": pi_old}),
                      bypass.algorithm.rollout_correction, bypass.actor_rollout_ref.actor.policy_loss)
    assert bypass.actor_rollout_ref.actor.policy_loss.loss_mode == "bypass_mode"  # verl's loss, not ReSPO's


def test_the_step_benchmark_against_trl_runs_quick(tmp_path):
    """research/bench/step.py needs TRL, which this environment has: its --quick smoke test keeps it from rotting unseen."""
    record = tmp_path / "step.json"
    env = {**os.environ, "NANO_RESPO_CACHE": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "research.bench.step", "--quick", "--record", str(record)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "ratio ours / TRL:" in done.stdout and "overhead ratio" in done.stdout
    made = json.loads(record.read_text())
    assert made["command"].startswith("python -m research.bench.step --quick") and len(made["ratio_to_trl"]["ours"]) == 1
