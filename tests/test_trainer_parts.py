"""The trainer's pieces in isolation: log-probs, tasks and verifiers, pass@k, tokenizer."""

import math
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from nano_respo.evaluation import pass_at_k  # noqa: E402
from nano_respo.logprobs import linear_head, token_logprobs  # noqa: E402
from nano_respo.models import build_char_tokenizer  # noqa: E402
from nano_respo.rollout import completion_mask_of  # noqa: E402
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


@pytest.mark.parametrize("name", list(PROCEDURAL))
def test_procedural_splits_are_disjoint_and_deterministic(name):
    task = make_task(name, n_heldout=64)
    heldout = {p.prompt for p in task.heldout_problems}
    train = task.train_batch(500, seed=3)
    assert len(heldout) == 64 and not heldout & {p.prompt for p in train}
    assert all(in_heldout(p) for p in heldout)
    assert train == task.train_batch(500, seed=3) != task.train_batch(500, seed=4)
    assert all(task.reward(p.answer, p.answer) == 1.0 for p in train[:50])


def test_reverse_answers_are_long_and_correct():
    task = make_task("reverse", size=10)
    for problem in task.train_batch(50, seed=0):
        digits = problem.prompt.split()[-1]
        assert problem.answer == digits[::-1] and 8 <= len(problem.answer) <= 10


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


def test_completion_mask_stops_after_the_first_eos():
    ids = torch.tensor([[5, 6, 2, 0, 2], [5, 5, 5, 5, 5], [2, 0, 0, 0, 0]])
    assert completion_mask_of(ids, [2]).int().tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]


def test_a_broken_tiny_model_cache_is_rebuilt(tmp_path, monkeypatch):
    """A cache entry without weights (an interrupted or rank-0-less save) is replaced, not trusted."""
    from nano_respo.models import load_model

    monkeypatch.setenv("NANO_RESPO_CACHE", str(tmp_path))
    broken = tmp_path / "models" / "tiny-qwen3"
    broken.mkdir(parents=True)
    build_char_tokenizer().save_pretrained(broken)
    model, _ = load_model("tiny-qwen3")
    assert (broken / "config.json").exists() and sum(p.numel() for p in model.parameters()) > 100_000
