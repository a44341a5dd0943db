"""The README's two examples: the TRL script runs; the verl command line is valid for verl 0.9.1."""

import os
import subprocess
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl", reason="install requirements-integrations.txt (see .ci/integrations.sh)")
pytest.importorskip("verl", reason="install requirements-integrations.txt (see .ci/integrations.sh)")

from hydra import compose, initialize_config_module  # noqa: E402
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402

from nano_respo.kernel import LossConfig, policy_loss  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_trl_example_trains_two_steps(tiny_qwen3_dir, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    import trl_respo

    trainer = trl_respo.main(["--model", tiny_qwen3_dir, "--output-dir", str(tmp_path), "--cpu", "--max-steps", "2",
                              "--num-generations", "4", "--per-device-batch-size", "4",
                              "--max-completion-length", "4", "--num-prompts", "8", "--learning-rate", "1e-3"])
    logs = [entry for entry in trainer.state.log_history if "respo/phi_mean_neg" in entry]
    assert len(logs) == 2 and "reward" in logs[0]
    assert trl_respo.correct_sum(["12 apples", "x", "7"], answer=[12, 3, 8]) == [1.0, 0.0, 0.0]


def test_verl_example_command_builds_the_respo_actor(tmp_path):
    """Run the script with a stand-in python3 that records its arguments, then let verl parse them."""
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/args\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "DATA": "/data/gsm8k", "GPUS": "4"}
    subprocess.run(["bash", str(ROOT / "examples" / "verl_respo.sh"), "trainer.total_epochs=1"], env=env, check=True)
    args = (tmp_path / "args").read_text().splitlines()
    assert args[:2] == ["-m", "verl.trainer.main_ppo"]

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=args[2:])  # unknown keys or bad values raise here
    assert cfg.trainer.n_gpus_per_node == 4 and cfg.trainer.total_epochs == 1
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)  # what each verl worker does
    assert actor.policy_loss.loss_mode == "respo" and actor.loss_agg_mode == "seq-mean-token-sum-norm"

    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(4, 6, generator=gen)).requires_grad_()
    old = logp.detach() + 0.5 * torch.randn(4, 6, generator=gen)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    mask = torch.ones(4, 6, dtype=torch.bool)
    loss, _ = get_policy_loss_fn(actor.policy_loss.loss_mode)(old, logp, adv[:, None].expand(4, 6), mask,
                                                              actor.loss_agg_mode, actor, None)
    ref, _ = policy_loss(logp, old, adv, mask, LossConfig(agg="seq-mean-token-sum-norm"))
    assert torch.allclose(loss, ref)
