"""digit_sum: the verifier sums (any valid answer earns the reward, nothing else does), the held-out
targets never reach training, the warm start sees random decompositions, and the budget guard."""

import random
import types

import pytest
import torch

from nano_respo.cli import from_flat
from nano_respo.models import build_char_tokenizer, refuse_unknown_characters
from nano_respo.rollout import sample, score
from nano_respo.tasks import hash_seed
from research.common import task_of
from train import TrainConfig
from nano_respo.sft import curriculum_size
from nano_respo.tasks import make_task, mixed_task
from research.study_tasks import DIGIT_SUM_EXTRAPOLATION, DIGIT_SUM_HELDOUT, DIGIT_SUM_INTERPOLATION, digit_sum_targets, random_decomposition


def target_of(problem) -> int:
    return int(problem.prompt.split()[-1])


def test_every_valid_string_earns_the_reward_and_every_near_miss_scores_0():
    task = make_task("digit_sum")
    for target in (6, 17, 27, 36, 40):
        witness = random_decomposition(random.Random(target), target)
        assert task.reward(witness, witness) == 1.0
        others = {random_decomposition(random.Random(seed), target) for seed in range(50)}
        assert len(others) > 10 and all(task.reward(other, witness) == 1.0 for other in others)  # no reference string
        assert task.reward("1" * target, witness) == 1.0 and task.reward("3" * (target // 3) + "1" * (target % 3),
                                                                          witness) == 1.0
        near_misses = {
            "sum one short": "1" * (target - 1),
            "sum one over": "1" * (target + 1),
            "a 4": "4" + "1" * (target - 4),
            "a 0": "0" + "1" * target,
            "a wrong digit": "5" + "1" * (target - 5),
            "a space": "1" * (target - 1) + " 1",
            "a letter": "1" * target + "a",
            "the target itself": str(target),
            "empty": "",
        }
        for name, completion in near_misses.items():
            assert task.reward(completion, witness) == 0.0, name


class ScriptedCharModel:
    """A stand-in for tiny-qwen3 that emits the characters of `text` (then EOS if `eos`), whatever the prompt."""

    def __init__(self, tokenizer, text: str, eos: bool):
        self.script = tokenizer(text, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if eos else
                                                                                   [])
        self.vocab = len(tokenizer)
        self.generation_config = types.SimpleNamespace(eos_token_id=tokenizer.eos_token_id)
        self.device, self.training = torch.device("cpu"), False

    def eval(self):
        return self

    def train(self, mode=True):
        return self

    def __call__(self, input_ids, attention_mask, position_ids, use_cache, cache=None, logits_to_keep=None):
        if cache is None:  # the prefill
            cache = StepCache()
        else:
            cache.step += 1
        logits = torch.zeros(len(input_ids), 1, self.vocab)
        logits[:, 0, self.script[min(cache.step, len(self.script) - 1)]] = 30.0
        return types.SimpleNamespace(logits=logits, cache=cache)


class StepCache:
    """A stand-in KV cache: how many forwards followed the prefill (every row follows the same script)."""
    step = 0

    def batch_select_indices(self, indices) -> None:  # what rollout.decode calls to copy and drop rows
        pass


def test_through_the_sampler_a_truncated_completion_scores_0_and_the_longest_answer_fits():
    tokenizer, task = build_char_tokenizer(), make_task("digit_sum")
    assert task.min_new_tokens == 41  # the longest answer: t = 40 ones, then EOS
    witness = random_decomposition(random.Random(0), 40)
    for text, eos, expected in (("1" * 40, True, 1.0), ("1" * 39, True, 0.0), ("1" * 60, False, 0.0),
                                ("2" * 20, True, 1.0), ("1" * 40, False, 0.0)):
        samples = sample(ScriptedCharModel(tokenizer, text, eos), tokenizer, ["sum 40"], task.min_new_tokens)
        assert samples.truncated.item() == (not eos)  # without an EOS the script repeats its last character
        assert score(task.reward, samples.texts, [witness])[0].item() == expected, (text, eos)
    # Under a budget of 40 the same 40 ones without an EOS would be cut into a right-looking answer: refused.
    samples = sample(ScriptedCharModel(tokenizer, "1" * 60, eos=False), tokenizer, ["sum 40"], 40)
    assert samples.truncated.item() and task.reward(samples.texts[0], witness) == 1.0
    with pytest.raises(ValueError, match="max_new_tokens: digit_sum needs a budget of at least 41 tokens"):
        task_of(TrainConfig(task="digit_sum", max_new_tokens=40))
    assert task_of(TrainConfig(task="digit_sum", max_new_tokens=41)).min_new_tokens == 41
    with pytest.raises(ValueError, match="needs a budget of at least 51"):
        task_of(TrainConfig(task="digit_sum", task_size=50))


@pytest.mark.parametrize("size", [None, 20, 40])
def test_a_heldout_target_never_appears_in_a_training_or_warm_start_batch(size):
    task = make_task("digit_sum", size=size, n_heldout=64)
    largest = size or 36
    rl_targets = {target_of(p) for seed in range(4) for iteration in range(30)
                  for p in task.train_batch(16, seed=hash_seed("rl", seed, iteration))}
    assert rl_targets == set(range(6, largest + 1)) - set(DIGIT_SUM_HELDOUT)  # every other target is trained
    sft_targets = {target_of(p) for step in range(0, 2000, 7) for p in
                   task.train_batch(64, seed=hash_seed("sft", 0, step), size=curriculum_size(task, step, 2000))}
    assert sft_targets == rl_targets
    heldout = [target_of(p) for p in task.heldout_problems]
    assert len(heldout) == 64 and set(heldout) == set(DIGIT_SUM_INTERPOLATION + DIGIT_SUM_EXTRAPOLATION)
    assert all(task.reward(p.answer, p.answer) == 1.0 for p in task.heldout_problems)


def test_warm_start_demonstrations_are_random_valid_decompositions_of_small_targets_only():
    task = make_task("digit_sum", size=14)
    problems = task.train_batch(2000, seed=0)
    assert {target_of(p) for p in problems} == set(range(6, 15))
    assert all(sum(map(int, p.answer)) == target_of(p) and set(p.answer) <= set("123") for p in problems)
    twelves = [p.answer for p in problems if target_of(p) == 12]
    assert len(set(twelves)) > len(twelves) / 2  # not one canonical string
    digits = "".join(twelves)
    assert all(0.2 < digits.count(d) / len(digits) < 0.5 for d in "123")
    assert task.train_batch(50, seed=1) == task.train_batch(50, seed=1) != task.train_batch(50, seed=2)
    with pytest.raises(ValueError, match="task_size: digit_sum needs a size .* >= 6, got 5"):
        make_task("digit_sum", size=5)


def test_the_character_tokenizer_encodes_every_prompt_and_answer():
    tokenizer = build_char_tokenizer()
    task = make_task("digit_sum", size=40)
    problems = task.train_batch(500, seed=0) + task.heldout_problems
    refuse_unknown_characters(tokenizer, problems)  # raises on a character the model does not know
    for problem in problems[:20]:
        ids = tokenizer(problem.prompt + problem.answer, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == problem.prompt + problem.answer


def test_a_full_share_mixes_long_demonstrations_in_at_that_rate_and_names_another_warm_start():
    small, full, share = make_task("digit_sum", 20), make_task("digit_sum", 36), 0.2
    mixed = mixed_task(small, full, share)
    long_in_full = sum(t > 20 for t in digit_sum_targets(36)) / len(digit_sum_targets(36))
    n = 20_000
    for draws in (mixed.train_batch(n, seed=1), mixed.train_batch(n, seed=2, size=12)):  # the curriculum too
        long = sum(target_of(p) > 20 for p in draws) / n
        assert abs(long - share * long_in_full) < 4 * (share * long_in_full / n) ** 0.5  # binomial, 4 sd
        assert not any(target_of(p) in DIGIT_SUM_HELDOUT for p in draws)
        assert all(sum(map(int, p.answer)) == target_of(p) for p in draws[:500])
    assert mixed.fingerprint() not in (small.fingerprint(), full.fingerprint())  # its own cache entry
    assert mixed.heldout_problems == small.heldout_problems
    for refused in ({"sft_full_share": 0.1}, {"sft_task_size": 20, "sft_full_share": 1.5}):  # no size, or no share
        with pytest.raises(ValueError, match=r"^sft_full_share: a share in \[0, 1\] .* beside --sft-task-size"):
            from_flat(TrainConfig, {"task": "digit_sum", **refused})
