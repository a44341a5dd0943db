"""Tasks with exact-answer verifiers: procedural ones and a JSONL format for your own data.

Every task yields Problems (a prompt and its reference answer) from a train split and a
held-out split. Procedural splits are disjoint by construction: a problem belongs to the
held-out split exactly when a hash of its prompt says so, so no seed can leak one into the
other. The reward is 1 when the answer extracted from a completion (the last \\boxed{...},
else the last number) equals the reference, else 0.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Problem:
    prompt: str
    answer: str


NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def extract_answer(completion: str) -> str | None:
    """The content of the last \\boxed{...}, else the last number in the text, else None."""
    boxed = BOXED.findall(completion)
    if boxed:
        return boxed[-1].strip()
    numbers = NUMBER.findall(completion)
    return numbers[-1] if numbers else None


def answers_match(predicted: str | None, reference: str) -> bool:
    """Equal as strings (commas dropped), or as numbers when both parse."""
    if predicted is None:
        return False
    predicted, reference = predicted.replace(",", "").strip(), reference.replace(",", "").strip()
    if predicted == reference:
        return True
    try:
        return float(predicted) == float(reference)
    except ValueError:
        return False


def math_reward(completion: str, answer: str) -> float:
    return float(answers_match(extract_answer(completion), answer))


def hash_seed(*parts) -> int:
    """A seed named by its parts ("rl", seed, iteration): each draw of a run gets its own stream."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "little")


def in_heldout(prompt: str, heldout_percent: int = 10) -> bool:
    return zlib.crc32(prompt.encode()) % 100 < heldout_percent


def addition(rng: random.Random, digits: int) -> Problem:
    """a+b with up to `digits` digits per operand."""
    a, b = (rng.randrange(10 ** rng.randint(1, digits)) for _ in range(2))
    return Problem(f"{a}+{b}=", str(a + b))


def reverse(rng: random.Random, digits: int) -> Problem:
    """Write a digit string backwards: the answer is as long as the input (the long-answer task)."""
    length = rng.randint(max(2, digits - 2), digits)
    text = "".join(rng.choice("0123456789") for _ in range(length - 1)) + rng.choice("123456789")
    return Problem(f"reverse {text}", text[::-1])


PROCEDURAL: dict[str, tuple[Callable[[random.Random, int], Problem], int]] = {
    # name: (generator, default size knob: digits per operand / string length)
    "addition": (addition, 3),
    "reverse": (reverse, 8),
}


@dataclass
class Task:
    """A source of problems; `reward(completion, answer)` may be replaced by your own verifier."""

    name: str
    train_problem: Callable[[random.Random], Problem]
    heldout_problems: list[Problem]
    reward: Callable[[str, str], float] = math_reward

    def train_batch(self, n: int, seed: int) -> list[Problem]:
        """n training problems, a pure function of the seed (so a resumed run sees the same ones)."""
        rng = random.Random(seed)
        return [self.train_problem(rng) for _ in range(n)]


def procedural_task(name: str, size: int | None, n_heldout: int, seed: int) -> Task:
    make, default_size = PROCEDURAL[name]
    size = size or default_size
    if size < 1:
        raise ValueError(f"task_size: must be >= 1, got {size}")

    def draw(rng: random.Random, heldout: bool) -> Problem:
        for _ in range(10_000):
            problem = make(rng, size)
            if in_heldout(problem.prompt) == heldout:
                return problem
        raise ValueError(f"task_size: {size} is too small for disjoint train and held-out splits of {name}")

    rng = random.Random(f"heldout-{name}-{seed}")
    heldout, seen = [], set()
    for _ in range(50 * n_heldout):
        problem = draw(rng, heldout=True)
        if problem.prompt not in seen:
            seen.add(problem.prompt)
            heldout.append(problem)
        if len(heldout) == n_heldout:
            break
    return Task(name, lambda rng: draw(rng, heldout=False), heldout)


def read_jsonl(path: str) -> list[Problem]:
    problems = []
    for line_no, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            problems.append(Problem(str(row["prompt"]), str(row["answer"])))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f"task: {path}:{line_no} is not a JSON object with 'prompt' and 'answer'") from None
    if not problems:
        raise ValueError(f"task: {path} holds no problems")
    return problems


def jsonl_task(path: str, heldout_file: str | None, n_heldout: int) -> Task:
    """Your own data: train from `path`; held-out from `heldout_file`, else a hashed 10% of `path`."""
    rows = read_jsonl(path)
    if heldout_file:
        train, heldout = rows, read_jsonl(heldout_file)
    else:
        train = [p for p in rows if not in_heldout(p.prompt)]
        heldout = [p for p in rows if in_heldout(p.prompt)]
    if not train or not heldout:
        raise ValueError(f"task: {path} is too small to split into train and held-out; pass --heldout-file")
    return Task(Path(path).stem, lambda rng: rng.choice(train), heldout[:n_heldout])


def make_task(name: str, size: int | None = None, n_heldout: int = 128, heldout_file: str | None = None,
              seed: int = 0) -> Task:
    """A registered procedural task by name, or a .jsonl file of {"prompt": ..., "answer": ...}."""
    if n_heldout < 1:
        raise ValueError(f"eval_problems: must be >= 1, got {n_heldout}")
    if name.endswith(".jsonl"):
        if not Path(name).is_file():
            raise ValueError(f"task: no such file {name!r}")
        return jsonl_task(name, heldout_file, n_heldout)
    if name not in PROCEDURAL:
        raise ValueError(f"task: unknown task {name!r}; choose one of {', '.join(PROCEDURAL)} or a .jsonl file")
    return procedural_task(name, size, n_heldout, seed)
