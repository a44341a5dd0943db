"""The trainer's pieces in isolation: log-probs, tasks and verifiers, pass@k, tokenizer."""

import math
import os
import types

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from nano_respo.evaluation import pass_at_k  # noqa: E402
from nano_respo.scale.logprobs import linear_head, token_logprobs  # noqa: E402
from nano_respo.models import build_char_tokenizer  # noqa: E402
from nano_respo.rollout import decode  # noqa: E402
from nano_respo.tasks import PROCEDURAL, answers_match, extract_answer, in_heldout, make_task  # noqa: E402


def naive_logprobs(hidden, weight, targets, temperature):
    logits = hidden @ weight.T / temperature  # [..., V]
    return torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1), torch.softmax(logits, -1)


@pytest.mark.parametrize("temperature, chunk_mb", [(1.0, 1e-3), (0.6, 1.0), (1.7, 1e-6)])
def test_token_logprobs_equals_a_naive_log_softmax_with_gradients(temperature, chunk_mb):
    torch.manual_seed(0)
    hidden = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 50, (3, 5))
    naive, p = naive_logprobs(hidden, weight, targets, temperature)
    chunked, entropy = token_logprobs(hidden, weight, targets, temperature, chunk_mb, with_entropy=True)
    mix = torch.randn(3, 5, dtype=torch.float64)
    grads_naive = torch.autograd.grad((naive * mix).sum(), (hidden, weight))
    grads_chunked = torch.autograd.grad((chunked * mix).sum(), (hidden, weight))
    assert torch.allclose(chunked.double(), naive, atol=1e-5)
    for ours, reference in zip(grads_chunked, grads_naive):
        assert torch.allclose(ours, reference, atol=1e-5)
    assert torch.allclose(entropy.double(), -(p * p.log()).sum(-1).detach(), atol=1e-5)


def test_token_logprobs_backward_passes_gradcheck():
    """Finite differences of the whole routine (forward and hand-written backward), float64, several chunks."""
    torch.manual_seed(1)
    hidden = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(9, 4, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 9, (7,))
    routine = lambda h, w: token_logprobs(h, w, targets, 0.8, chunk_mb=100 / 2**20)  # noqa: E731 (4 chunks, 3 vocabulary slices)
    assert torch.autograd.gradcheck(routine, (hidden, weight))


def test_token_logprobs_of_bfloat16_inputs_is_float32_with_gradients_in_their_dtype():
    hidden = torch.randn(4, 8, 16).bfloat16().requires_grad_()
    weight = torch.randn(30, 16).bfloat16().requires_grad_()
    out = token_logprobs(hidden, weight, torch.zeros(4, 8, dtype=torch.long), chunk_mb=1e-3)
    out.sum().backward()
    assert out.dtype == torch.float32 and out.shape == (4, 8)
    assert hidden.grad.dtype == weight.grad.dtype == torch.bfloat16


def test_models_whose_logits_are_not_a_plain_head_are_refused():
    """Granite divides its logits by logits_scaling after the head: the head's input would give wrong log-probs."""
    import transformers

    config = transformers.GraniteConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, logits_scaling=8.0)
    with pytest.raises(ValueError, match="'granite'"):
        linear_head(transformers.AutoModelForCausalLM.from_config(config))
    qwen3 = transformers.Qwen3Config(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1, head_dim=4)
    model = transformers.AutoModelForCausalLM.from_config(qwen3)
    assert linear_head(model) is model.lm_head


def test_token_logprobs_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="targets: shape"):
        token_logprobs(torch.randn(2, 3, 4), torch.randn(5, 4), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="head_weight"):
        token_logprobs(torch.randn(2, 3, 4), torch.randn(5, 3), torch.zeros(2, 3, dtype=torch.long))


@pytest.mark.parametrize("text, expected", [
    ("The answer is 42.", "42"), ("1,234 apples", "1,234"), ("x = -3.5", "-3.5"),
    ("so \\boxed{17} and then 99", "17"), ("no digits", None), ("94617283", "94617283"),
])
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_answers_match_strings_and_numbers():
    assert answers_match("1,234", "1234") and answers_match("3.50", "3.5") and answers_match("007", "007")
    assert not answers_match("12", "21") and not answers_match(None, "1")
    assert answers_match("1e3", "1000") and answers_match("0.50", ".5") and not answers_match("1/0", "1")


def test_long_answers_differing_in_one_late_digit_do_not_match():
    # 37 digits: as floats both round to the same double, so a float comparison would reward the wrong one.
    right, wrong = "7559092458167286049411278158173304156", "7559092458167286049411258158173304156"
    assert float(right) == float(wrong)
    assert answers_match(right, right) and not answers_match(wrong, right)
    assert not answers_match(right + "0", right) and not answers_match(right[:-1], right)


@pytest.mark.parametrize("name", list(PROCEDURAL))
def test_procedural_splits_are_disjoint_and_deterministic(name):
    task = make_task(name, n_heldout=64)
    heldout = {p.prompt for p in task.heldout_problems}
    train = task.train_batch(500, seed=3)
    assert len(heldout) == 64 and not heldout & {p.prompt for p in train}
    assert all(in_heldout(p) for p in heldout)
    assert train == task.train_batch(500, seed=3) != task.train_batch(500, seed=4)
    assert all(task.reward(p.answer, p.answer) == 1.0 for p in train[:50])


def test_reverse_answers_are_correct_and_take_every_length_from_2_to_the_size():
    task = make_task("reverse", size=10)
    problems = task.train_batch(500, seed=0)
    for problem in problems:
        digits = problem.prompt.split()[-1]
        assert problem.answer == digits[::-1] and problem.answer[0] != "0"
    assert {len(p.answer) for p in problems} == set(range(2, 11))
    default = sorted(len(p.answer) for p in make_task("reverse").heldout_problems)
    assert default[0] <= 4 and default[-1] >= 36  # a few tokens to about 40 in one held-out set


def test_jsonl_task_and_its_errors(tmp_path):
    rows = [f'{{"prompt": "q{i}", "answer": "{i}"}}' for i in range(200)]
    (tmp_path / "data.jsonl").write_text("\n".join(rows))
    task = make_task(str(tmp_path / "data.jsonl"))
    assert task.heldout_problems and all(in_heldout(p.prompt) for p in task.heldout_problems)
    (tmp_path / "bad.jsonl").write_text('{"prompt": "q"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1 is not a JSON object"):
        make_task(str(tmp_path / "bad.jsonl"))


def test_pass_at_k_matches_enumeration():
    import itertools
    n, correct = 6, 2
    outcomes = [1] * correct + [0] * (n - correct)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(outcomes, k))
        assert math.isclose(pass_at_k(n, correct, k), sum(any(s) for s in subsets) / len(subsets))


def test_char_tokenizer_round_trips_and_formats_chat():
    tokenizer = build_char_tokenizer()
    text = "reverse 0123 Ab,!\n"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text) and tokenizer.decode(ids) == text
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "1+1="}], add_generation_prompt=True,
                                           tokenize=False)
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert prompt.endswith("<|im_start|>a:") and ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 2


class ScriptedCache:
    """A stand-in KV cache: the script rows its batch holds, and how many forwards followed the prefill."""

    def __init__(self, rows: torch.Tensor):
        self.rows, self.step = rows, 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:  # what decode calls to copy and drop rows
        self.rows = self.rows[indices]


class ScriptedModel:
    """A stand-in language model: a row whose prompt ends in token i greedily emits script[i][t] at decoding step t
    (then the script's last). `calls` (a list) collects the batch size of every forward."""

    def __init__(self, script: list[list[int]], vocab: int = 8, calls: list | None = None):
        self.script, self.vocab, self.calls = script, vocab, calls if calls is not None else []

    def __call__(self, input_ids, attention_mask, position_ids, use_cache, cache=None, logits_to_keep=None):
        self.calls.append(len(input_ids))
        if cache is None:  # the prefill: a prompt's last token names its script row
            cache = ScriptedCache(input_ids[:, -1].clone())
        else:
            cache.step += 1
        logits = torch.zeros(len(cache.rows), 1, self.vocab)
        for i, row in enumerate(cache.rows.tolist()):
            tokens = self.script[row]
            logits[i, 0, tokens[min(cache.step, len(tokens) - 1)]] = 10.0
        return types.SimpleNamespace(logits=logits, cache=cache)


def test_a_response_ends_at_its_first_eos_and_decoding_stops_when_all_have():
    prompt = torch.tensor([[0, 0], [1, 1], [2, 2]])
    script = [[5, 6, 2, 7, 2], [5, 5, 5, 5, 5], [2, 3, 3, 3, 3]]  # EOS = 2
    tokens, logps, in_response, ended = decode(ScriptedModel(script), prompt, torch.ones_like(prompt), 5, 1.0,
                                               greedy=True, eos_ids=[2], pad_id=0)
    assert tokens.tolist() == [[5, 6, 2, 0, 0], [5, 5, 5, 5, 5], [2, 0, 0, 0, 0]]  # padding after the EOS
    assert in_response.int().tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert ended.tolist() == [True, False, True]
    assert (logps[~in_response] == 0).all() and (logps[in_response] < 0).all()
    prompt = prompt[:2]
    tokens, _, in_response, ended = decode(ScriptedModel([[2] * 5, [4, 2, 4, 4, 4]]), prompt, torch.ones_like(prompt),
                                           5, 1.0, greedy=True, eos_ids=[2], pad_id=0)
    assert tokens.tolist() == [[2, 0], [4, 2]] and in_response.tolist() == [[True, False], [True, True]]
    assert ended.tolist() == [True, True]


def test_a_broken_tiny_model_cache_is_rebuilt(tmp_path, monkeypatch):
    """A cache entry without weights (an interrupted or rank-0-less save) is replaced, not trusted."""
    from nano_respo.models import load_model, tiny_model_dir

    monkeypatch.setenv("NANO_RESPO_CACHE", str(tmp_path))
    broken = tiny_model_dir("tiny-qwen3")
    broken.mkdir(parents=True)
    build_char_tokenizer().save_pretrained(broken)
    model, _ = load_model("tiny-qwen3")
    assert (broken / "config.json").exists() and sum(p.numel() for p in model.parameters()) > 100_000


def tiny_vocabulary_model(family: str, sharpness: float = 8.0):
    """A 6-token Qwen3 (0 pad, 1 EOS) whose next-token distributions are far from uniform."""
    import transformers

    shape = dict(vocab_size=6, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                 head_dim=8, intermediate_size=32, max_position_embeddings=32, tie_word_embeddings=False,
                 pad_token_id=0, eos_token_id=1, bos_token_id=None)
    if family == "moe":
        config = transformers.Qwen3MoeConfig(**shape, moe_intermediate_size=8, num_experts=4, num_experts_per_tok=2,
                                             norm_topk_prob=True)
    else:
        config = transformers.Qwen3Config(**shape)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpness)
    return model.eval()


def exact_distribution(model, prompt: list[int], steps: int, temperature: float) -> dict[tuple, float]:
    """Every completion of at most `steps` tokens (ending at EOS or the budget) and its probability, by enumeration."""
    out, frontier = {}, [((), 1.0)]
    for _ in range(steps):
        grown = []
        for prefix, p in frontier:
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([prompt + list(prefix)])).logits[0, -1]
            probs = torch.softmax(logits.double() / temperature, -1)
            for token in range(len(probs)):
                (out if token == 1 else dict()).update({prefix + (token,): p * probs[token].item()})
                if token != 1:
                    grown.append((prefix + (token,), p * probs[token].item()))
        frontier = grown
    out.update(dict(frontier))
    return out


@pytest.mark.parametrize("family", ["dense", "moe"])
def test_sampler_draws_the_exact_tempered_distribution_with_left_padding(family):
    """Completion frequencies of the KV-cache sampler match exact enumeration; log mu matches each sequence's."""
    model = tiny_vocabulary_model(family)
    temperature, steps, n = 0.6, 3, 3000
    prompts = [[2, 3, 4], [5, 2, 2, 3, 4]]  # different lengths: the short one is left-padded
    width = max(map(len, prompts))
    input_ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts]).repeat_interleave(n, 0)  # [2n, P]
    attention_mask = (torch.arange(width) >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()
    torch.manual_seed(1)
    tokens, logps, *_ = decode(model, input_ids, attention_mask.repeat_interleave(n, 0), steps, temperature,
                               greedy=False, eos_ids=[1], pad_id=0)
    for row, prompt in enumerate(prompts):
        exact = exact_distribution(model, prompt, steps, temperature)
        drawn = tokens[row * n:(row + 1) * n].tolist()
        completions = [tuple(seq[:seq.index(1) + 1] if 1 in seq else seq) for seq in drawn]
        counts = {c: completions.count(c) for c in set(completions)}
        assert set(counts) <= set(exact)
        for completion, p in exact.items():  # each count within 5 binomial standard deviations
            assert abs(counts.get(completion, 0) - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1, completion
        statistic, df = chi_square(counts, exact, n)
        assert statistic < df + 5 * math.sqrt(2 * df)
        # The test can fail: the same draws are far from the untempered distribution.
        statistic, df = chi_square(counts, exact_distribution(model, prompt, steps, 1.0), n)
        assert statistic > df + 5 * math.sqrt(2 * df)
        for i, completion in enumerate(completions[:50]):  # recorded log mu = the exact log-probability
            recorded = logps[row * n + i, :len(completion)].sum().item()
            assert recorded == pytest.approx(math.log(exact[completion]), abs=1e-4)


def chi_square(counts: dict, probabilities: dict, n: int) -> tuple[float, int]:
    """Pearson's statistic over the completions expected at least 5 times (the rest pooled), and its dof."""
    frequent = [c for c, p in probabilities.items() if n * p >= 5]
    observed = [counts.get(c, 0) for c in frequent] + [n - sum(counts.get(c, 0) for c in frequent)]
    expected = [n * probabilities[c] for c in frequent] + [n - sum(n * probabilities[c] for c in frequent)]
    return sum((o - e) ** 2 / e for o, e in zip(observed, expected) if e > 0), len(frequent)


@pytest.mark.parametrize("route", ["plain", "packed", "shared-prompts"])
def test_at_reuse_1_without_lag_every_method_takes_the_same_first_step(tmp_path, monkeypatch, route):
    """The claim lr* rests on (PREREGISTRATION.md): on-policy, one gradient for every kernel. Through the
    trainer's own path, where log mu comes from the KV-cache sampler and log pi from the training forward
    (the plain one or an opt-in route), so w = 1 up to their float noise: the steps agree to that noise, and a
    drifted mu makes them differ."""
    import dataclasses

    from nano_respo.kernel import LossConfig, group_advantages
    from nano_respo.models import load_model
    from nano_respo.rollout import RolloutBatch
    from nano_respo.routes import RouteConfig
    from train import TrainConfig, collect_rollouts, rl_step, routes_of

    monkeypatch.setenv("NANO_RESPO_CACHE", str(tmp_path))
    model, tokenizer = load_model("tiny-qwen3")
    task = make_task("addition")
    task.reward = lambda completion, answer: float(len(completion) % 2)  # any reward with spread will do
    cfg = TrainConfig(prompts_per_iteration=4, reuse=1, epochs=1, seed=0,
                      routes=RouteConfig(packed_forward=route == "packed", shared_prompts=route == "shared-prompts"))
    logprobs = routes_of(cfg.routes)[1]
    torch.manual_seed(0)
    samples, rewards, _ = collect_rollouts(model, tokenizer, task, cfg, iteration=0)
    advantages, _ = group_advantages(rewards, cfg.group_size)
    assert advantages.abs().sum() > 0
    start = {k: v.clone() for k, v in model.state_dict().items()}

    def first_step(method, old_logp):
        model.load_state_dict(start)
        batch = RolloutBatch(samples.input_ids, samples.attention_mask, samples.completion_mask, old_logp, rewards,
                             advantages)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        stats = rl_step(model, optimizer, batch, dataclasses.replace(cfg, loss=LossConfig(method=method)), logprobs)
        return torch.cat([p.grad.flatten() for p in model.parameters()]), stats

    methods = ("respo", "seq_clip", "gspo", "grpo", "topr", "cispo", "vespo")
    reference, stats = first_step("respo", samples.old_logp)
    assert stats["log_w_q90_pos"] < 1e-4 and stats["log_w_q10_neg"] > -1e-4  # w = 1 up to float noise
    for method in methods[1:]:
        grad, _ = first_step(method, samples.old_logp)
        assert (grad - reference).norm() < 1e-5 * reference.norm(), method
    drifted = samples.old_logp + 0.05 * torch.randn(samples.old_logp.shape, generator=torch.Generator().manual_seed(1))
    grad_respo, _ = first_step("respo", drifted)
    grad_clip, _ = first_step("seq_clip", drifted)
    assert (grad_respo - grad_clip).norm() > 1e-2 * reference.norm()
