"""digit_conflict: each family's verifier (sum: short answers; ones: 1s and 2s only), the family read from the
reference, the mix of the two families, the held-out `ones` targets, the warm start's `sum`-only size and its
share of the whole task, and the budget guard."""

import collections
import math
import random

import pytest

from nano_respo.tasks import hash_seed
from research.common import task_of
from train import TrainConfig
from nano_respo.sft import curriculum_size
from nano_respo.tasks import make_task, mixed_task
from research.study_tasks import CONFLICT_ONES_HELDOUT, CONFLICT_ONES_SHARE, CONFLICT_SUM_TARGETS, conflict_family, conflict_ones_targets, random_decomposition, sum_limit, sum_reference


def reward_for(task, family: str, target: int):
    """The verifier of one prompt, with a reference drawn as the task draws it."""
    rng = random.Random(target)
    reference = sum_reference(rng, target) if family == "sum" else random_decomposition(rng, target, largest=2)
    return lambda completion: task.reward(completion, reference)


def test_a_sum_answer_must_be_short_and_a_ones_answer_must_avoid_3s():
    task = make_task("digit_conflict")
    for target in CONFLICT_SUM_TARGETS:
        verify = reward_for(task, "sum", target)
        limit = math.ceil(target / 3) + 1
        assert sum_limit(target) == limit
        threes = "3" * (target // 3) + ("" if target % 3 == 0 else str(target % 3))  # the shortest answer
        assert verify(threes) == 1.0 and len(threes) <= limit
        long = "1" * target
        assert verify(long) == 0.0  # sums to t, but too long
        fits = [random_decomposition(random.Random(seed), target) for seed in range(200)]
        assert {verify(a) for a in fits} == {0.0, 1.0}
        assert all(verify(a) == float(len(a) <= limit) for a in fits)
        for miss in ("", str(target), threes + "1", threes[:-1], "4" + threes[1:], threes + " "):
            assert verify(miss) == 0.0, miss
    for target in range(12, 31):
        verify = reward_for(task, "ones", target)
        assert verify("1" * target) == 1.0 and verify("2" * (target // 2) + "1" * (target % 2)) == 1.0
        assert verify("3" + "1" * (target - 3)) == 0.0  # the right sum with a 3
        assert verify("1" * (target - 1)) == 0.0 and verify("1" * (target + 1)) == 0.0 and verify("") == 0.0


def test_the_family_is_read_from_the_reference_whatever_its_length():
    """A `sum` reference always holds a 3 (even when its random draw is too long to earn the reward itself), a
    `ones` reference never does: so the same completion scores by the rule of the prompt it answers."""
    task = make_task("digit_conflict")
    problems = task.train_batch(3000, seed=0)
    for problem in problems:
        family, target = conflict_family(problem.prompt)
        assert sum(map(int, problem.answer)) == target
        assert ("3" in problem.answer) == (family == "sum")
    assert reward_for(task, "ones", 14)("11111111111111") == 1.0
    assert reward_for(task, "sum", 14)("11111111111111") == 0.0
    assert reward_for(task, "sum", 14)("33332") == 1.0 and reward_for(task, "ones", 14)("33332") == 0.0


def test_families_are_mixed_three_to_one_and_held_out_ones_targets_never_train():
    task = make_task("digit_conflict", n_heldout=30)
    draws = [p for seed in range(4) for iteration in range(40)
             for p in task.train_batch(16, seed=hash_seed("rl", seed, iteration))]
    families = collections.Counter(conflict_family(p.prompt)[0] for p in draws)
    n = len(draws)
    assert abs(families["ones"] / n - CONFLICT_ONES_SHARE) < 4 * (CONFLICT_ONES_SHARE * 0.75 / n) ** 0.5
    ones = {t for p in draws for f, t in [conflict_family(p.prompt)] if f == "ones"}
    assert ones == set(conflict_ones_targets(30)) == set(range(12, 31)) - set(CONFLICT_ONES_HELDOUT)
    assert {t for p in draws for f, t in [conflict_family(p.prompt)] if f == "sum"} == set(CONFLICT_SUM_TARGETS)
    heldout = [conflict_family(p.prompt) for p in task.heldout_problems]
    assert len(heldout) == 30 and {t for _, t in heldout} == set(CONFLICT_ONES_HELDOUT)
    assert {f for f, _ in heldout} == {"ones"}
    assert all(task.reward(p.answer, p.answer) == 1.0 for p in task.heldout_problems)


def test_the_warm_starts_size_draws_sum_alone_and_its_share_adds_the_whole_task():
    small, full, share = make_task("digit_conflict", 11), make_task("digit_conflict"), 0.2
    assert {conflict_family(p.prompt)[0] for p in small.train_batch(2000, seed=1)} == {"sum"}
    assert small.sizes == range(11, 12) and curriculum_size(small, 0, 1000) == 11
    mixed = mixed_task(small, full, share)
    n = 20_000
    ones = sum(conflict_family(p.prompt)[0] == "ones" for p in mixed.train_batch(n, seed=2, size=11)) / n
    expected = share * CONFLICT_ONES_SHARE
    assert abs(ones - expected) < 4 * (expected / n) ** 0.5
    # the RL task's own curriculum, from a size of 11 (sum alone) up to its largest ones target
    sizes = [curriculum_size(full, step, 2000) for step in (0, 250, 500)]
    assert sizes == [11, 21, 30]
    assert not any(conflict_family(p.prompt)[0] == "ones" and conflict_family(p.prompt)[1] > 20
                   for p in full.train_batch(2000, seed=3, size=20))


def test_the_budget_must_hold_the_longest_ones_answer_and_a_size_below_11_is_refused():
    assert make_task("digit_conflict").min_new_tokens == 31  # t = 30 in 1s, then EOS
    assert make_task("digit_conflict", 20).min_new_tokens == 30  # the held-out 29 still needs its 29 ones
    with pytest.raises(ValueError, match="max_new_tokens: digit_conflict needs a budget of at least 31 tokens"):
        task_of(TrainConfig(task="digit_conflict", max_new_tokens=30))
    with pytest.raises(ValueError, match=r"task_size: digit_conflict needs a size \(largest ones target\) >= 11"):
        make_task("digit_conflict", 10)
