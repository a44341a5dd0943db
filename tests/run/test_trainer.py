"""The trainer end to end on the tiny models: smoke runs, w == 1, resume, checkpoints, bad input."""

import copy
import dataclasses
import functools
import json
import math
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

import train as train_module  # noqa: E402
from conftest import parse_train, without_timings  # noqa: E402
from eval import EvalConfig, run_eval  # noqa: E402
from nano_respo import checkpoint as checkpoint_module  # noqa: E402
from nano_respo.checkpoint import latest_checkpoint, load_trainer_state, save_checkpoint  # noqa: E402
from nano_respo.cli import flat_fields, from_flat  # noqa: E402
from nano_respo.kernel import LossConfig  # noqa: E402
from nano_respo.models import load_model  # noqa: E402
from nano_respo.rollout import RolloutBatch, policy_logprobs, sample, score  # noqa: E402
from nano_respo.runs import Stopped, read_metrics  # noqa: E402
from nano_respo.scale.logprobs import chunked_policy_logprobs  # noqa: E402
from nano_respo.scale.packed import packed_policy_logprobs  # noqa: E402
from nano_respo.scale.shared_prompts import shared_prompt_policy_logprobs  # noqa: E402
from nano_respo.tasks import make_task  # noqa: E402
from train import TrainConfig, rl_step, train  # noqa: E402

eval_module = sys.modules["eval"]  # eval.py (the name would shadow the builtin)


# Tiny models and warm starts go to a private cache per module (tests/conftest.py), never the user's.
pytestmark = pytest.mark.usefixtures("model_cache")


def parity_reward(text: str, answer: str) -> float:
    """A random-init model never answers right; this reward still varies, so advantages are nonzero."""
    return float(sum(map(ord, text)) % 2)


@pytest.fixture
def varied_reward(monkeypatch):
    """Training and eval.py both score with parity_reward."""
    def make_parity_task(*args, **kwargs):
        task = make_task(*args, **kwargs)
        task.reward = parity_reward
        return task
    monkeypatch.setattr(train_module, "make_task", make_parity_task)
    monkeypatch.setattr(eval_module, "make_task", make_parity_task)


def tiny_config(tmp_path, **overrides) -> TrainConfig:
    settings = dict(model="tiny-qwen3", task="addition", sft_steps=0, iterations=2, prompts_per_iteration=4,
                    group_size=4, reuse=2, epochs=1, max_new_tokens=6, eval_problems=8, eval_samples=2,
                    eval_every=1, save_every=1, out_dir=str(tmp_path), plots=False, name="run")
    settings.update(overrides)
    return from_flat(TrainConfig, settings)


def batch_of(samples, rewards, advantages) -> RolloutBatch:
    return RolloutBatch(samples.input_ids, samples.attention_mask, samples.completion_mask, samples.old_logp,
                        rewards, advantages)


def step(model, optimizer, batch, cfg: TrainConfig) -> dict:
    return rl_step(model, optimizer, batch, cfg)


def train_records(run_dir):
    return without_timings([r for r in read_metrics(run_dir) if r["kind"] != "time"])


@pytest.mark.parametrize("model", ["tiny-qwen3", "tiny-qwen3-moe"])
def test_two_iteration_smoke_run_logs_checkpoints_and_reproduces_with_eval(tmp_path, varied_reward, model, capsys):
    cfg = tiny_config(tmp_path, model=model, plots=model == "tiny-qwen3")
    run_dir = train(cfg)
    out = capsys.readouterr().out
    records = read_metrics(run_dir)
    steps = [r for r in records if r["kind"] == "train"]
    assert len(steps) == cfg.iterations * cfg.reuse
    assert [r["step"] for r in steps] == list(range(1, len(steps) + 1))
    assert all(r["skipped"] == 0 and r["grad_norm"] > 0 for r in steps)
    for key in ("reward", "response_len", "truncated_frac", "zero_var_frac", "grad_norm", "entropy",
                "gen_tokens_per_s", "train_tokens_per_s", "log_w_q50_pos", "low_w_pos_phi_mass", "approx_kl"):
        assert key in steps[0], key
    if model == "tiny-qwen3-moe":
        assert all(r["router_aux_loss"] > 0 for r in steps)
    else:
        assert "router_aux_loss" not in steps[0]
        assert (run_dir / "plots.png").stat().st_size > 0
    evals = [r for r in records if r["kind"] == "eval"]
    first_eval, final_eval = evals[0], evals[-1]
    assert final_eval["iteration"] == cfg.iterations
    # The start and end lines print the logged figures, the headline pass@1 first.
    assert f"start held-out pass@1 {first_eval['heldout_pass@1']:.3f}\n" in out
    assert (f"end held-out pass@1 {final_eval['heldout_pass@1']:.3f} (greedy accuracy {final_eval['heldout_acc']:.3f}), "
            f"after 2 iterations, 4 optimizer steps\n") in out
    # eval.py on the run directory reproduces the logged figures exactly.
    result = run_eval(EvalConfig(model=str(run_dir)))
    for key in ("heldout_acc", "heldout_pass@1", "heldout_pass@2"):
        assert result[key] == final_eval[key]


ROUTES = {"plain": (policy_logprobs, chunked_policy_logprobs),
          "packed": (packed_policy_logprobs, functools.partial(chunked_policy_logprobs, packed=True)),
          "shared-prompts": (shared_prompt_policy_logprobs,)}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("model", ["tiny-qwen3", "tiny-qwen3-moe"])
def test_first_step_on_a_fresh_batch_sees_w_equal_one(model, route):
    torch.manual_seed(0)
    net, tokenizer = load_model(model)
    prompts = [f"{a}+{a * 7}=" for a in range(6) for _ in range(2)]  # groups of 2: the sampler shares prefills
    # Three decode calls (5 + 5 + 2 prompts) whose completions are padded to one width.
    batch = batch_of(sample(net, tokenizer, prompts, 10, temperature=0.7, batch_size=5), torch.zeros(12),
                     torch.zeros(12))
    for logprobs in ROUTES[route]:
        for part in (batch, batch.select(torch.tensor([0, 5, 11]))):
            logp, _, _ = logprobs(net, part, temperature=0.7)
            log_w = torch.where(part.completion_mask, logp - part.old_logp, 0.0).sum(-1)  # [B]
            assert log_w.abs().max() < 1e-4
    # The wrong temperature in the training forward breaks it: the test can fail.
    logp, _, _ = policy_logprobs(net, batch, temperature=1.0)
    assert torch.where(batch.completion_mask, logp - batch.old_logp, 0.0).sum(-1).abs().max() > 1e-2


@pytest.mark.parametrize("model", ["tiny-qwen3", "tiny-qwen3-moe"])
def test_chunked_policy_logprobs_match_the_models_own_logits_with_gradients(model):
    """The head-input route (logits never built) equals log_softmax(model(...).logits), for every parameter's grad."""
    torch.manual_seed(0)
    net, tokenizer = load_model(model)
    batch = batch_of(sample(net, tokenizer, ["12+3=", "7+70="] * 3, 6, temperature=0.8), torch.zeros(6),
                     torch.zeros(6))
    input_ids, attention_mask, mask = batch.input_ids, batch.attention_mask, batch.completion_mask
    mix = torch.randn(mask.shape) * mask  # [B, C]
    width = mask.shape[1]
    logp, _, _ = chunked_policy_logprobs(net, batch, temperature=0.8, chunk_mb=1e-3)
    ours = torch.autograd.grad((logp * mix).sum(), list(net.parameters()), allow_unused=True)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = net(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    naive = torch.log_softmax(logits[:, -width - 1:-1] / 0.8, -1).gather(-1, input_ids[:, -width:, None])[..., 0]
    reference = torch.autograd.grad((naive * mix).sum(), list(net.parameters()), allow_unused=True)
    torch.testing.assert_close(logp, naive, rtol=0, atol=1e-5)
    for (name, _), a, b in zip(net.named_parameters(), ours, reference):
        assert (a is None) == (b is None), name
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=2e-5, msg=name)


@pytest.mark.parametrize("less_work", [{}, {"packed_forward": True}, {"shared_prompts": True},
                                       {"packed_forward": True, "logprob_chunk_mb": 1e-3}],
                         ids=["default", "packed-forward", "shared-prompts", "packed-chunked"])
def test_first_step_of_every_iteration_logs_w_one(tmp_path, varied_reward, less_work):
    run_dir = train(tiny_config(tmp_path, reuse=4, epochs=2, iterations=2, **less_work))
    for record in read_metrics(run_dir):
        if record["kind"] == "train" and record["epoch"] == 0 and record["minibatch"] == 0:
            for key in ("log_w_q10_pos", "log_w_q90_pos", "log_w_q10_neg", "log_w_q90_neg"):
                assert abs(record[key]) < 1e-4, (key, record[key])


def test_resume_gives_the_same_metrics_as_an_uninterrupted_run(tmp_path, varied_reward):
    straight = train(tiny_config(tmp_path, name="straight", iterations=4, save_every=2))
    train(tiny_config(tmp_path, name="resumed", iterations=2, save_every=2))
    resumed = train(tiny_config(tmp_path, name="resumed", iterations=4, save_every=2, resume=True))
    assert train_records(resumed) == train_records(straight)
    assert len(train_records(straight)) == 4 * 2 + 5


def test_resume_refuses_changed_flags_and_missing_checkpoints(tmp_path, varied_reward):
    train(tiny_config(tmp_path, iterations=1))
    with pytest.raises(ValueError, match="resume: flags differ.*lr"):
        train(tiny_config(tmp_path, iterations=2, lr=1e-2, resume=True))
    with pytest.raises(ValueError, match="resume: no run in .*other; drop --resume to start it"):
        train(tiny_config(tmp_path, name="other", resume=True))
    with pytest.raises(ValueError, match="already holds a run"):
        train(tiny_config(tmp_path, iterations=1))


def test_a_failed_save_leaves_the_previous_checkpoint_loadable(tmp_path, monkeypatch):
    net, tokenizer = load_model("tiny-qwen3")
    optimizer = torch.optim.AdamW(net.parameters())
    save_checkpoint(tmp_path, net, tokenizer, iteration=1, step=2, config={"a": 1},
                    optimizer_state=optimizer.state_dict())

    def killed_midway(*args, **kwargs):  # the model files are written, the trainer state is not
        raise OSError("disk full")
    monkeypatch.setattr(checkpoint_module.torch, "save", killed_midway)
    with torch.no_grad():
        next(net.parameters()).add_(1.0)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path, net, tokenizer, iteration=2, step=4, config={"a": 1},
                        optimizer_state=optimizer.state_dict())
    latest = latest_checkpoint(tmp_path)
    assert latest.name == "iter-000001"
    assert load_trainer_state(latest)["step"] == 2
    reloaded, _ = load_model(str(tmp_path))
    assert not torch.equal(next(reloaded.parameters()), next(net.parameters()))
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["iter-000001"]


def test_a_nan_loss_skips_the_step_and_leaves_weights_and_optimizer_untouched():
    torch.manual_seed(0)
    net, tokenizer = load_model("tiny-qwen3")
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2)
    batch = batch_of(sample(net, tokenizer, ["1+1=", "2+2="] * 2, 5), torch.tensor([1.0, 0, 0, 1]),
                     torch.tensor([0.5, -0.5, -0.5, 0.5]))
    cfg = from_flat(TrainConfig, dict(sft_steps=0, group_size=2))  # rl_step's mini-batches are whole groups
    before = [p.detach().clone() for p in net.parameters()]
    hook = net.model.norm.register_forward_hook(lambda module, inputs, out: out * float("nan"))  # NaN hidden states
    stats = step(net, optimizer, batch, cfg)
    hook.remove()
    assert stats["skipped"] == 1 and "non-finite" in stats["skip_reason"]
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))
    assert optimizer.state_dict()["state"] == {}
    stats = step(net, optimizer, batch, cfg)
    assert stats["skipped"] == 0
    assert not all(torch.equal(a, b) for a, b in zip(before, net.parameters()))


def test_a_raising_reward_function_scores_zero_and_is_counted():
    def flaky(text, answer):
        if text == "boom":
            raise RuntimeError("verifier crashed")
        return float(text == answer)
    rewards, errors = score(flaky, ["7", "boom", "8"], ["7"] * 3)
    assert rewards.tolist() == [1.0, 0.0, 0.0] and errors == ["RuntimeError: verifier crashed"]
    rewards, errors = score(lambda text, answer: float("nan"), ["7"], ["7"])
    assert rewards.tolist() == [0.0] and errors == ["ValueError: non-finite reward nan"]


def test_reward_errors_are_reported_in_the_metrics(tmp_path, monkeypatch, capsys):
    def make_broken_task(*args, **kwargs):
        task = make_task(*args, **kwargs)
        task.reward = lambda text, answer: 1 / 0
        return task
    monkeypatch.setattr(train_module, "make_task", make_broken_task)
    run_dir = train(tiny_config(tmp_path, iterations=1))
    steps = [r for r in read_metrics(run_dir) if r["kind"] == "train"]
    assert steps[0]["reward_errors"] == 16 and steps[0]["reward"] == 0.0
    assert steps[0]["zero_var_frac"] == 1.0  # all-equal rewards: no signal, but no crash
    printed = capsys.readouterr().out
    assert "iteration 0: the reward function failed on 16 completions (scored 0): ZeroDivisionError" in printed
    assert "every group has all-equal rewards" in printed


@pytest.mark.parametrize("overrides, message", [
    (dict(method="ppo"), "method: unknown method 'ppo'"),
    (dict(reuse=3, epochs=2), "reuse: 3 optimizer steps do not split into 2 epochs"),
    (dict(prompts_per_iteration=3, group_size=2, reuse=2, epochs=1), "reuse: 3 prompts do not split into 2"),
    (dict(group_size=1), "group_size: must be >= 2"),
    (dict(temperature=0.0), "temperature: must be > 0"),
    (dict(lr=-0.1), r"^lr: must be > 0, got -0.1$"),
    (dict(sft_lr=0.0), r"^sft_lr: must be > 0, got 0.0$"),
    (dict(max_grad_norm=-1.0), r"^max_grad_norm: must be > 0, got -1.0$"),
    (dict(adv_scale="minmax"), "adv_scale: choose one of none, std, got 'minmax'"),
    (dict(beta_pos=2.0), "beta_pos: must lie in"),
])
def test_impossible_configs_fail_with_one_line_messages(overrides, message):
    with pytest.raises(ValueError, match=message):
        from_flat(TrainConfig, overrides)


@pytest.mark.parametrize("overrides, message", [
    (dict(task="sudoku"), "task: unknown task 'sudoku'"),
    (dict(task="missing.jsonl"), "task: no such file"),
    (dict(model="no-such-model"), "model: unknown model 'no-such-model'"),
])
def test_unknown_task_or_model_fails_with_one_line_messages(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        train(tiny_config(tmp_path, **overrides))


def test_cli_has_a_flag_for_every_kernel_and_trainer_field():
    from nano_respo.routes import RouteConfig
    from nano_respo.sft import WarmStartConfig
    names = lambda cls, prefix="": {prefix + f.name for f in dataclasses.fields(cls)}  # noqa: E731
    fields = names(TrainConfig) | names(LossConfig) | names(WarmStartConfig, "sft_") | names(RouteConfig)
    assert set(flat_fields(TrainConfig)) == fields - {"loss", "sft", "routes"}
    cfg = parse_train(["--method", "grpo", "--reuse", "8", "--group-size", "4", "--alpha-pos", "0.5", "--eps-high",
                       "0.28", "--sft-steps", "7", "--packed-forward"])
    assert (cfg.loss.method, cfg.reuse, cfg.group_size, cfg.loss.alpha_pos, cfg.loss.eps_high) == ("grpo", 8, 4, 0.5, 0.28)
    assert (cfg.sft.steps, cfg.routes.packed_forward) == (7, True)
    assert not isinstance(cfg, LossConfig)  # a TrainConfig cannot be passed as the loss's config by mistake


def test_metrics_lines_are_plain_json(tmp_path, varied_reward):
    run_dir = train(tiny_config(tmp_path, iterations=1))
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        json.loads(line)  # nan is written as null, never as the non-JSON NaN
        assert "NaN" not in line


def test_micro_batches_accumulate_to_the_same_update_and_statistics():
    torch.manual_seed(0)
    net, tokenizer = load_model("tiny-qwen3")
    batch = batch_of(sample(net, tokenizer, [f"{a}+1=" for a in range(3) for _ in range(2)], 8), torch.zeros(6),
                     torch.tensor([0.5, -0.5, 1.0, -1.0, 0.25, -0.25]))
    results = []
    for micro_batch in (None, 4, 1):
        model = copy.deepcopy(net)
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        cfg = from_flat(TrainConfig, dict(sft_steps=0, group_size=2, micro_batch=micro_batch, max_grad_norm=1e9))
        stats = step(model, optimizer, batch, cfg)
        results.append((stats, torch.cat([p.detach().flatten() for p in model.parameters()])))
    (full_stats, full_params), *others = results
    assert not torch.equal(full_params, torch.cat([p.detach().flatten() for p in net.parameters()]))
    for stats, params in others:
        assert torch.allclose(params, full_params, atol=1e-6)
        assert stats["loss"] == pytest.approx(full_stats["loss"], abs=1e-6)
        assert stats["grad_norm"] == pytest.approx(full_stats["grad_norm"], rel=1e-4)
        assert stats["log_w_q50_neg"] == pytest.approx(full_stats["log_w_q50_neg"], abs=1e-5)
        assert stats["len_excess_low_w_pos"] == full_stats["len_excess_low_w_pos"] or all(  # nan when none fell
            math.isnan(s["len_excess_low_w_pos"]) for s in (stats, full_stats))


def test_ctrl_c_finishes_the_iteration_saves_and_stops(tmp_path, varied_reward, monkeypatch):
    real_collect = train_module.collect_rollouts

    def interrupted(model, tokenizer, task, cfg, iteration, *ranks):
        if iteration == 1:
            os.kill(os.getpid(), signal.SIGINT)  # as if the user pressed Ctrl-C mid-iteration
        return real_collect(model, tokenizer, task, cfg, iteration, *ranks)
    monkeypatch.setattr(train_module, "collect_rollouts", interrupted)
    handler_before = signal.getsignal(signal.SIGINT)
    cfg = tiny_config(tmp_path, iterations=5, save_every=10, eval_every=10)
    with pytest.raises(Stopped) as stopped:  # saved, then stopped: a status of its own, not a finished run's
        train(cfg)
    assert stopped.value.exit_code == 130
    assert str(stopped.value) == "Ctrl-C: stopped after iteration 2 of 5; `--resume` continues"
    run_dir = Path(cfg.out_dir) / cfg.run_name
    assert latest_checkpoint(run_dir).name == "iter-000002"
    assert load_trainer_state(latest_checkpoint(run_dir))["step"] == 2 * 2
    assert max(r["iteration"] for r in read_metrics(run_dir)) == 1
    assert signal.getsignal(signal.SIGINT) is handler_before


def test_sampling_ignores_a_checkpoints_truncating_generation_config():
    """mu must be the plain tempered softmax the trainer reproduces, whatever generation_config.json says."""
    torch.manual_seed(0)
    net, tokenizer = load_model("tiny-qwen3")
    net.generation_config.top_k, net.generation_config.top_p = 1, 0.5  # would make every sample greedy
    net.generation_config.repetition_penalty = 1.3
    samples = sample(net, tokenizer, ["1+1="] * 8, 6, temperature=1.0)
    assert len(set(samples.texts)) > 1
    logp, _, _ = policy_logprobs(net, batch_of(samples, torch.zeros(8), torch.zeros(8)), temperature=1.0)
    assert torch.where(samples.completion_mask, logp - samples.old_logp, 0.0).abs().max() < 1e-4
    assert net.generation_config.top_k == 1  # the checkpoint's own config is left as it was


def test_resume_of_a_run_stopped_before_its_first_save_starts_it_over(tmp_path, varied_reward):
    straight = train(tiny_config(tmp_path, iterations=2, name="straight"))
    stopped = train(tiny_config(tmp_path, iterations=2, name="stopped"))
    shutil.rmtree(stopped / "checkpoints")
    (stopped / "latest").unlink()
    resumed = train(tiny_config(tmp_path, iterations=2, name="stopped", resume=True))
    assert train_records(resumed) == train_records(straight)


def test_default_run_names_tell_the_model_and_the_lag_apart():
    """After the default run, `--model tiny-qwen3-moe` or `--lag 2` starts a run of its own, not a collision."""
    names = {TrainConfig(**flags).run_name for flags in ({}, {"model": "tiny-qwen3-moe"}, {"lag": 2},
                                                          {"model": "tiny-qwen3-moe", "lag": 2})}
    assert len(names) == 4
    assert TrainConfig().run_name == "reverse-tiny-qwen3-respo-reuse4-seed0"
    assert TrainConfig(model="org/Some-Model", name="mine").run_name == "mine"
