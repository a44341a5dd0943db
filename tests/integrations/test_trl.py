"""ReSPOGRPOTrainer: its loss is the kernel's, and it trains a tiny Qwen3 through TRL on the CPU."""

import math

import pytest
import torch

pytest.importorskip("trl", reason="install nano_respo/integrations/requirements.txt (see .ci/integrations.sh)")

from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from nano_respo.integrations.trl import ReSPOGRPOTrainer  # noqa: E402
from nano_respo.kernel import LossConfig, diagnostics, policy_loss  # noqa: E402

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
    ref_loss, applied = policy_loss(logp, old, advantages, completion_mask.bool(), cfg)
    ref_stats = diagnostics(applied["phi"], logp, old, advantages, completion_mask.bool(), cfg)
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


# --- Parity with TRL's own losses (GRPOTrainer._compute_loss), and its rollout corrections ---

# Our method -> (TRL's GRPOConfig settings, our LossConfig settings) for the same loss. Documented
# differences: TRL's `grpo` and `sapo` average per response (our seq-mean-token-mean), `dapo`, `cispo`
# and `vespo` per token (token-mean); TRL's cispo cap is the ratio itself (epsilon_high = 1 + our eps_high).
TRL_TWINS = {
    "grpo": (dict(loss_type="grpo", epsilon=0.2, epsilon_high=0.2), dict(agg="seq-mean-token-mean")),
    "dapo": (dict(loss_type="dapo", epsilon=0.2, epsilon_high=0.28), dict(agg="token-mean")),
    "gspo": (dict(loss_type="grpo", importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4),
             dict(agg="seq-mean-token-mean")),
    "cispo": (dict(loss_type="cispo", epsilon_high=1.28), dict(agg="token-mean", eps_high=0.28)),
    "sapo": (dict(loss_type="sapo"), dict(agg="seq-mean-token-mean")),
    "vespo": (dict(loss_type="vespo"), dict(agg="token-mean")),
}


def random_inputs(model, scale=0.6, seed=1):
    """A batch of random completions whose behaviour log-probs lie `scale` nats per token off the policy."""
    gen = torch.Generator().manual_seed(seed)
    B, P, T = 6, 3, 5
    prompt_ids = torch.randint(2, 40, (B, P), generator=gen)
    completion_ids = torch.randint(2, 40, (B, T), generator=gen)
    completion_mask = torch.ones(B, T, dtype=torch.long)
    completion_mask[1, 3:] = 0
    completion_ids[1, 3:] = 0
    prompt_mask = torch.ones(B, P, dtype=torch.long)
    attention_mask = torch.cat([prompt_mask, completion_mask], 1)
    with torch.no_grad():
        logp = completion_logps(model, prompt_ids, completion_ids, attention_mask)
    old = logp + scale * torch.randn(B, T, generator=gen)
    inputs = dict(prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
                  completion_mask=completion_mask, advantages=torch.tensor([1.0, -0.5, 0.7, -1.2, 0.4, -0.3]),
                  old_per_token_logps=old, num_items_in_batch=completion_mask.sum())
    return inputs, attention_mask


def trl_and_kernel_grads(model_dir, tmp_path, trl_settings, loss_cfg, inputs_of, trainer_setup=None):
    """The gradient of TRL's own GRPOTrainer loss and of the kernel's, on one batch."""
    from trl import GRPOTrainer

    settings = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=6, num_generations=6,
                    max_completion_length=5, temperature=TEMPERATURE, max_steps=1, report_to="none",
                    save_strategy="no", use_cpu=True, bf16=False, seed=0, disable_tqdm=True, **trl_settings)
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                          processing_class=AutoTokenizer.from_pretrained(model_dir), reward_funcs=digit_reward,
                          args=GRPOConfig(**settings), train_dataset=Dataset.from_dict({"prompt": PROMPTS}))
    trainer.current_gradient_accumulation_steps = 1
    if trainer_setup:
        trainer_setup(trainer)
    model = trainer.model.train()
    inputs, attention_mask, kernel_args = inputs_of(model)
    model.zero_grad()
    trainer.compute_loss(model, inputs).backward()
    theirs = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    logp = completion_logps(model, inputs["prompt_ids"], inputs["completion_ids"], attention_mask)
    mu, pi_old = (*kernel_args, None)[:2]  # the sampler's log-probs and, for a correction, the learner's
    loss, _ = policy_loss(logp, mu, inputs["advantages"], inputs["completion_mask"].bool(), loss_cfg,
                          pi_old_logp=pi_old)
    loss.backward()
    return theirs, [p.grad for p in model.parameters()]


def assert_same_gradient(theirs, ours):
    assert any(g.abs().sum() > 0 for g in theirs)
    for g_theirs, g_ours in zip(theirs, ours):
        torch.testing.assert_close(g_ours, g_theirs, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("method", list(TRL_TWINS))
def test_each_method_trl_implements_has_trls_own_gradient(tiny_qwen3_dir, tmp_path, method):
    trl_settings, ours = TRL_TWINS[method]
    scale = 1e-4 if method == "gspo" else 0.6  # gspo's published range clips everything further out

    def inputs_of(model):
        inputs, attention_mask = random_inputs(model, scale)
        return inputs, attention_mask, (inputs["old_per_token_logps"],)

    theirs, grads = trl_and_kernel_grads(tiny_qwen3_dir, tmp_path, trl_settings,
                                         LossConfig(method=method, **ours), inputs_of)
    assert_same_gradient(theirs, grads)


def trl_importance_sampling_ratio(mode, pi_old, mu, mask, clip_max=3.0):
    """What GRPOTrainer._generate_and_score_completions computes as importance_sampling_ratio (clip_min None)."""
    diff = (pi_old - mu) * mask
    ratio = torch.exp(diff.sum(-1, keepdim=True) if mode.startswith("sequence") else diff)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, max=clip_max)
    return ratio.masked_fill(ratio > clip_max, 0.0)


@pytest.mark.parametrize("mode", ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
def test_trls_vllm_correction_is_the_decoupled_form(tiny_qwen3_dir, tmp_path, mode):
    """TRL multiplies the grpo loss (on pi / pi_old) by its importance_sampling_ratio: our --correction."""
    def inputs_of(model):
        inputs, attention_mask = random_inputs(model, scale=0.3)
        pi_old = inputs["old_per_token_logps"]
        mu = pi_old + 0.9 * torch.randn(pi_old.shape, generator=torch.Generator().manual_seed(3))
        mask = inputs["completion_mask"]
        inputs["importance_sampling_ratio"] = trl_importance_sampling_ratio(mode, pi_old, mu, mask)
        unbounded = trl_importance_sampling_ratio(mode, pi_old, mu, mask, clip_max=math.inf)
        assert (inputs["importance_sampling_ratio"] != unbounded).any()  # some weight truncated or masked
        inputs["sampling_per_token_logps"] = mu
        return inputs, attention_mask, (mu, pi_old)

    def use_the_correction(trainer):  # what use_vllm=True sets, without a vLLM server
        trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True

    theirs, grads = trl_and_kernel_grads(
        tiny_qwen3_dir, tmp_path, dict(loss_type="grpo", epsilon=0.2, epsilon_high=0.2),
        LossConfig(method="grpo", agg="seq-mean-token-mean", correction=mode.replace("_", "-"), correction_max=3.0),
        inputs_of, use_the_correction)
    assert_same_gradient(theirs, grads)


def test_trls_off_policy_mask_is_ours(tiny_qwen3_dir, tmp_path):
    def inputs_of(model):
        inputs, attention_mask = random_inputs(model, scale=0.5)
        return inputs, attention_mask, (inputs["old_per_token_logps"],)

    theirs, grads = trl_and_kernel_grads(
        tiny_qwen3_dir, tmp_path, dict(loss_type="grpo", epsilon=0.2, epsilon_high=0.2, off_policy_mask_threshold=0.1),
        LossConfig(method="grpo", agg="seq-mean-token-mean", opsm_delta=0.1), inputs_of)
    assert_same_gradient(theirs, grads)


def test_respo_trainer_with_a_correction_is_trls_own_corrected_loss(tiny_qwen3_dir, tmp_path):
    """ReSPOGRPOTrainer with --correction's LossConfig reads pi_old from TRL and mu from vLLM's log-probs,
    and never multiplies by TRL's importance_sampling_ratio again: TRL's own grpo with its correction."""
    mode = "sequence_mask"
    grads = {}
    for name, trainer_class, cfg in (("theirs", None, None), ("ours", ReSPOGRPOTrainer, LossConfig(
            method="grpo", agg="seq-mean-token-mean", correction="sequence-mask", correction_max=3.0))):
        from trl import GRPOTrainer
        settings = dict(output_dir=str(tmp_path / name), per_device_train_batch_size=6, num_generations=6,
                        max_completion_length=5, temperature=TEMPERATURE, max_steps=1, report_to="none",
                        save_strategy="no", use_cpu=True, bf16=False, seed=0, disable_tqdm=True, loss_type="grpo",
                        epsilon=0.2, epsilon_high=0.2)
        common = dict(model=AutoModelForCausalLM.from_pretrained(tiny_qwen3_dir, dtype=torch.float32),
                      processing_class=AutoTokenizer.from_pretrained(tiny_qwen3_dir), reward_funcs=digit_reward,
                      args=GRPOConfig(**settings), train_dataset=Dataset.from_dict({"prompt": PROMPTS}))
        trainer = GRPOTrainer(**common) if trainer_class is None else trainer_class(**common, loss_config=cfg)
        trainer.current_gradient_accumulation_steps = 1
        trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
        model = trainer.model.train()
        inputs, _ = random_inputs(model, scale=0.3)
        pi_old = inputs["old_per_token_logps"]
        mu = pi_old + 0.9 * torch.randn(pi_old.shape, generator=torch.Generator().manual_seed(3))
        inputs["sampling_per_token_logps"] = mu
        inputs["importance_sampling_ratio"] = trl_importance_sampling_ratio(mode, pi_old, mu, inputs["completion_mask"])
        model.zero_grad()
        trainer.compute_loss(model, inputs).backward()
        grads[name] = [p.grad.clone() for p in model.parameters()]
    assert_same_gradient(grads["theirs"], grads["ours"])
