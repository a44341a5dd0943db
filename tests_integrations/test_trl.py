"""ReSPOGRPOTrainer: its loss is the kernel's, and it trains a tiny Qwen3 through TRL on the CPU."""

import math

import pytest
import torch

pytest.importorskip("trl", reason="install requirements-integrations.txt (see .ci/integrations.sh)")

from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from nano_respo.integrations.trl import ReSPOGRPOTrainer  # noqa: E402
from nano_respo.kernel import LossConfig, policy_loss  # noqa: E402

PROMPTS = ["1+2=", "3+4=", "5+1=", "2+2=", "7+1=", "4+4=", "6+2=", "1+1="]
TEMPERATURE = 0.7


def digit_reward(completions, **kwargs):
    """Verifiable toy reward: the share of digits in the completion."""
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def make_trainer(model_dir, tmp_path, loss_config, **overrides):
    settings = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4,
                    max_completion_length=6, temperature=TEMPERATURE, learning_rate=3e-2, max_steps=4,
                    logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, bf16=False,
                    seed=0, dataloader_num_workers=0, disable_tqdm=True)
    settings.update(overrides)
    return ReSPOGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        reward_funcs=digit_reward, args=GRPOConfig(**settings),
        train_dataset=Dataset.from_dict({"prompt": PROMPTS}), loss_config=loss_config)


def completion_logps(model, prompt_ids, completion_ids, attention_mask):
    """Independent reference: log softmax(logits / T) of the completion tokens [B, T]."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # [B, P + T, V]
    logits = logits[:, prompt_ids.size(1) - 1:-1] / TEMPERATURE  # [B, T, V] predicts each completion token
    return torch.log_softmax(logits.float(), -1).gather(-1, completion_ids[..., None]).squeeze(-1)


@pytest.mark.parametrize("method", ["respo", "grpo", "vespo"])
def test_trl_loss_and_gradients_equal_the_kernel(tiny_qwen3_dir, tmp_path, method):
    cfg = LossConfig(method=method)
    trainer = make_trainer(tiny_qwen3_dir, tmp_path, cfg)
    trainer.current_gradient_accumulation_steps = 1  # set by HF's training loop; one micro-batch here
    model = trainer.model.train()
    gen = torch.Generator().manual_seed(1)
    B, P, T = 4, 3, 5
    prompt_ids = torch.randint(2, 40, (B, P), generator=gen)
    completion_ids = torch.randint(2, 40, (B, T), generator=gen)
    completion_mask = torch.ones(B, T, dtype=torch.long)
    completion_mask[1, 3:] = 0  # a shorter completion, padded
    completion_ids[1, 3:] = 0
    prompt_mask = torch.ones(B, P, dtype=torch.long)
    attention_mask = torch.cat([prompt_mask, completion_mask], 1)
    advantages = torch.tensor([1.0, -0.5, 0.7, -1.2])
    with torch.no_grad():
        # behaviour log-probs 0.6 nats per token away from the current policy: weights far from 1
        old = completion_logps(model, prompt_ids, completion_ids, attention_mask) + 0.6 * torch.randn(B, T, generator=gen)
    inputs = dict(prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
                  completion_mask=completion_mask, advantages=advantages, old_per_token_logps=old,
                  num_items_in_batch=completion_mask.sum())

    model.zero_grad()
    trl_loss = trainer.compute_loss(model, inputs)
    trl_loss.backward()
    trl_grads = [p.grad.clone() for p in model.parameters()]

    model.zero_grad()
    logp = completion_logps(model, prompt_ids, completion_ids, attention_mask)
    ref_loss, ref_stats = policy_loss(logp, old, advantages, completion_mask.bool(), cfg)
    ref_loss.backward()

    assert torch.allclose(trl_loss, ref_loss, rtol=1e-5, atol=1e-7)
    assert any(g.abs().sum() > 0 for g in trl_grads)
    for g_trl, p in zip(trl_grads, model.parameters()):
        assert torch.allclose(g_trl, p.grad, rtol=1e-4, atol=1e-7)
    logged = trainer._metrics["train"]
    assert logged["respo/log_w_q50_pos"][-1] == pytest.approx(ref_stats["log_w_q50_pos"], abs=1e-5)
    assert logged["respo/phi_max_neg"][-1] == pytest.approx(ref_stats["phi_max_neg"], abs=1e-5)


def test_trl_prefers_the_samplers_logprobs(tiny_qwen3_dir, tmp_path):
    """vLLM's sampling log-probs, when present, define the behaviour policy; NaNs fall back."""
    trainer = make_trainer(tiny_qwen3_dir, tmp_path, LossConfig())
    current = torch.zeros(2, 3)
    old = torch.full((2, 3), -1.0)
    sampling = torch.tensor([[-2.0, float("nan"), -2.0], [-3.0, -3.0, -3.0]])
    behaviour = trainer.behaviour_logps({"old_per_token_logps": old, "sampling_per_token_logps": sampling}, current)
    assert torch.equal(behaviour, torch.tensor([[-2.0, -1.0, -2.0], [-3.0, -3.0, -3.0]]))
    assert torch.equal(trainer.behaviour_logps({}, current), current)


def test_trl_rejects_terms_the_kernel_lacks(tiny_qwen3_dir, tmp_path):
    with pytest.raises(ValueError, match="beta"):
        make_trainer(tiny_qwen3_dir, tmp_path, LossConfig(), beta=0.04)


def test_trl_trains_tiny_qwen3_with_respo_and_reuse(tiny_qwen3_dir, tmp_path):
    trainer = make_trainer(tiny_qwen3_dir, tmp_path, LossConfig(method="respo"), num_iterations=2)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()

    logs = [entry for entry in trainer.state.log_history if "respo/frac_pos" in entry]
    assert len(logs) == 4
    for entry in logs:
        assert math.isfinite(entry["loss"])
        assert 0.0 <= entry["respo/clip_frac_token"] <= 1.0
        assert entry["entropy"] > 0
    assert "reward" in logs[0] and "reward" in logs[2]  # TRL logs rewards where it generates
    # num_iterations=2: each batch is used twice. The first pass is on-policy (w = 1); the
    # reuse pass sees the policy after one step, so its weights must have moved.
    log_w = [max(abs(entry.get(f"respo/log_w_q{q}_{s}") or 0.0) for q in (10, 50, 90) for s in ("pos", "neg"))
             for entry in logs]
    assert log_w[0] < 1e-4 and log_w[2] < 1e-4
    assert log_w[1] > 1e-3 and log_w[3] > 1e-3
    moved = sum((p.detach() - b).abs().sum().item() for p, b in zip(trainer.model.parameters(), before))
    assert moved > 0
