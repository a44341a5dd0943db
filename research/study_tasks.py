"""The study tasks, registered into nano_respo.tasks.TASKS by name when research/ is imported.

digit_sum: the prompt names a target t; any string of the digits 1-3 summing to t, then EOS, is
right, so large targets need long answers. digit_conflict: digit_sum's short `sum` family trained
beside long answers of 1s and 2s (`ones`), whose rewarded answers pull apart. Held-out splits are
whole targets never trained. Their verifiers sum the completion (any valid answer earns the reward).
The studies that use them: research/README.md.
"""

from __future__ import annotations

import random

from nano_respo.tasks import TASKS, Problem, Task

# digit_sum: the prompt names a target t; any string of the digits 1-3 summing to t, then EOS, is right.
DIGIT_SUM_DIGITS = "123"
DIGIT_SUM_SIZES = (36, 6)  # (default, smallest) largest training target
# Never trained, whatever the size: targets inside the training range and beyond it.
DIGIT_SUM_INTERPOLATION = (17, 23, 29, 35)
DIGIT_SUM_EXTRAPOLATION = (38, 40)
DIGIT_SUM_HELDOUT = DIGIT_SUM_INTERPOLATION + DIGIT_SUM_EXTRAPOLATION


def random_decomposition(rng: random.Random, target: int, largest: int = 3) -> str:
    """A random string of the digits 1 to `largest` summing to target: each digit uniform among those that fit.

    Not a canonical answer (there are many per target): a warm start on these learns to track
    the running sum, not to recite one string.
    """
    digits, left = [], target
    while left:
        digit = rng.randint(1, min(largest, left))
        digits.append(str(digit))
        left -= digit
    return "".join(digits)


def digit_sum_reward(completion: str, answer: str) -> float:
    """1 when the completion is a non-empty string of the digits 1, 2, 3 summing to the target, else 0.

    `answer` is one valid string (the warm start's demonstration): only its sum, the target, is
    read, so every decomposition earns the same reward. The completion ends at its first EOS; one
    cut at the budget without an EOS holds max_new_tokens digits or something else, so under
    Task.min_new_tokens (a budget above every target) it sums past the target and scores 0.
    """
    target = sum(map(int, answer))
    return float(bool(completion) and set(completion) <= set(DIGIT_SUM_DIGITS)
                 and sum(map(int, completion)) == target)


# digit_conflict: two families over the digits 1-3, trained together, whose rewarded answers pull apart.
#   "sum t"  (t in 6-20, 3 prompts in 4): digits summing to t in at most ceil(t/3) + 1 of them (so mostly 3s)
#   "ones t" (t in 12-30, 1 in 4):       digits summing to t using only 1s and 2s (6 to 30 of them)
# RL on `sum` pushes 3s and an early EOS up; the shared network carries that push onto the long `ones` answers.
CONFLICT_SUM_TARGETS = tuple(range(6, 21))
CONFLICT_SIZES = (30, 11)  # (default, smallest) largest `ones` target; at 11, below every one, only `sum` is drawn
CONFLICT_ONES_FROM = 12
CONFLICT_ONES_HELDOUT = (17, 23, 29)  # `ones` targets never trained, whatever the size
CONFLICT_ONES_SHARE = 0.25


def conflict_prompt(family: str, target: int) -> str:
    return f"{family} {target}"


def conflict_family(prompt: str) -> tuple[str, int]:
    """("sum" or "ones", the target) of a digit_conflict prompt."""
    family, target = prompt.split()
    return family, int(target)


def conflict_ones_targets(up_to: int) -> list[int]:
    """The trained `ones` targets of at most `up_to` (none below CONFLICT_ONES_FROM)."""
    return [t for t in range(CONFLICT_ONES_FROM, up_to + 1) if t not in CONFLICT_ONES_HELDOUT]


def sum_reference(rng: random.Random, target: int) -> str:
    """A random decomposition of target holding at least one 3 (drawn again until it does), so that the verifier
    tells a `sum` reference from a `ones` one by its digits: the warm start's demonstration, often too long."""
    while "3" not in (reference := random_decomposition(rng, target)):
        pass
    return reference


def sum_limit(target: int) -> int:
    """The most digits a correct `sum` answer may have: ceil(t / 3) + 1."""
    return -(-target // 3) + 1


def digit_conflict_reward(completion: str, answer: str) -> float:
    """1 when the completion answers the family of its reference (`answer`), else 0.

    A reference holding a 3 is a `sum` one: the completion must be digits 1-3 summing to the target in at most
    sum_limit(t) digits. Any other is a `ones` reference: only 1s and 2s, summing to the target, at any length.
    Under Task.min_new_tokens a completion cut without an EOS is longer than either allows, so it scores 0.
    """
    target = sum(map(int, answer))
    if "3" in answer:
        return float(digit_sum_reward(completion, answer) == 1.0 and len(completion) <= sum_limit(target))
    return float(bool(completion) and set(completion) <= {"1", "2"} and sum(map(int, completion)) == target)


def digit_sum_prompt(target: int) -> str:
    return f"sum {target}"


def digit_sum_targets(up_to: int) -> list[int]:
    """The training targets of at most `up_to`: the smallest to it, the held-out targets left out."""
    return [t for t in range(DIGIT_SUM_SIZES[1], up_to + 1) if t not in DIGIT_SUM_HELDOUT]


def digit_sum_task(size: int | None, n_heldout: int, seed: int) -> Task:
    """Targets uniform over the training targets up to `size`; held-out: DIGIT_SUM_HELDOUT in turn.

    Every correct answer to a target t is at least t / 3 tokens long, so large targets need long
    answers. The budget must exceed the largest target (held-out ones included): the longest
    answer (t ones) then fits with its EOS, and a truncated completion cannot sum to a target.
    """
    default_size, smallest = DIGIT_SUM_SIZES
    size = default_size if size is None else size
    if size < smallest:
        raise ValueError(f"task_size: digit_sum needs a size (largest target) >= {smallest}, got {size}")

    def draw(rng: random.Random, up_to: int = size) -> Problem:
        target = rng.choice(digit_sum_targets(up_to))
        return Problem(digit_sum_prompt(target), random_decomposition(rng, target))

    rng = random.Random(f"heldout-digit_sum-{seed}")
    heldout = [Problem(digit_sum_prompt(t), random_decomposition(rng, t))
               for t in (DIGIT_SUM_HELDOUT[i % len(DIGIT_SUM_HELDOUT)] for i in range(n_heldout))]
    return Task("digit_sum", draw, heldout, reward=digit_sum_reward, sizes=range(smallest, size + 1),
                train_problem_of_size=draw, min_new_tokens=max(size, *DIGIT_SUM_HELDOUT) + 1)


def digit_conflict_task(size: int | None, n_heldout: int, seed: int) -> Task:
    """`ones` with probability CONFLICT_ONES_SHARE (targets up to `size`, held-out ones left out), else `sum`;
    held-out: the `ones` targets CONFLICT_ONES_HELDOUT in turn.

    The size is the largest `ones` target: at the smallest, 11, every prompt is a `sum` one (what the warm start
    demonstrates, with --sft-full-share drawing a share from the whole task). The budget must exceed the
    largest `ones` target, held-out ones included: its longest answer (all 1s) then fits with its EOS.
    """
    default_size, smallest = CONFLICT_SIZES
    size = default_size if size is None else size
    if size < smallest:
        raise ValueError(f"task_size: digit_conflict needs a size (largest ones target) >= {smallest}, got {size}")

    def draw(rng: random.Random, up_to: int = size) -> Problem:
        ones = conflict_ones_targets(up_to)
        if ones and rng.random() < CONFLICT_ONES_SHARE:
            target = rng.choice(ones)
            return Problem(conflict_prompt("ones", target), random_decomposition(rng, target, largest=2))
        target = rng.choice(CONFLICT_SUM_TARGETS)
        return Problem(conflict_prompt("sum", target), sum_reference(rng, target))

    rng = random.Random(f"heldout-digit_conflict-{seed}")
    heldout = [Problem(conflict_prompt("ones", t), random_decomposition(rng, t, largest=2))
               for t in (CONFLICT_ONES_HELDOUT[i % len(CONFLICT_ONES_HELDOUT)] for i in range(n_heldout))]
    return Task("digit_conflict", draw, heldout, reward=digit_conflict_reward, sizes=range(smallest, size + 1),
                train_problem_of_size=draw, min_new_tokens=max(size, *CONFLICT_ONES_HELDOUT) + 1)


TASKS["digit_sum"] = digit_sum_task
TASKS["digit_conflict"] = digit_conflict_task
