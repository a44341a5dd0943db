"""Tasks with exact-answer verifiers: procedural ones and a JSONL format for your own data.

Every task yields Problems (a prompt and its reference answer) from a train split and a
held-out split. Procedural splits are disjoint by construction: a problem belongs to the
held-out split exactly when a hash of its prompt says so, so no seed can leak one into the
other. The reward is 1 when the answer extracted from a completion (the last \\boxed{...}, else the
number after the last "####", else the last number) equals the reference, else 0. TASKS maps a name
to the function that builds the task; a task of your own is one more entry (make_task finds it by name).

JSONL files hold {"prompt", "answer"} lines, or GSM8K's own {"question", "answer": "... #### 72"} lines, read
as they are (gsm8k_row). They are checked as they load, so that bad data stops a run before any model loads:
every line must hold a non-empty string prompt and a string or number answer (a null would
otherwise become the answer "None"), prompts are bounded in length, and a held-out file may
share no prompt with the training file (its figures would measure memorisation).
"""

from __future__ import annotations

import codecs
import hashlib
import json
import math
import random
import re
import zlib
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Problem:
    prompt: str
    answer: str


NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
AFTER_HASHES = re.compile(r"####\s*(-?\d[\d,]*(?:\.\d+)?)")  # GSM8K's own answer line: "#### 72"
# GSM8K's files hold {"question", "answer": "<worked solution>\n#### 72"}; their question is asked with this line
# after it (verl's GSM8K preparation asks the same), and the reference is the number after "####".
GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def extract_answer(completion: str) -> str | None:
    """The content of the last \\boxed{...}, else the number after the last "####", else the last number."""
    boxed = BOXED.findall(completion)
    if boxed:
        return boxed[-1].strip()
    hashed = AFTER_HASHES.findall(completion)
    if hashed:
        return hashed[-1]
    numbers = NUMBER.findall(completion)
    return numbers[-1] if numbers else None


def answers_match(predicted: str | None, reference: str) -> bool:
    """Equal as strings (commas dropped), or as exact numbers when both parse.

    Exact (Fraction, not float): a float keeps about 16 digits, so two 40-digit answers that
    differ in a late digit would compare equal and a wrong answer would earn the reward.
    """
    if predicted is None:
        return False
    predicted, reference = predicted.replace(",", "").strip(), reference.replace(",", "").strip()
    if predicted == reference:
        return True
    try:
        return Fraction(predicted) == Fraction(reference)
    except (ValueError, ZeroDivisionError):
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
    """Write a digit string of 2 to `digits` characters backwards: the answer is as long as the input.

    Lengths are uniform, so one rollout batch holds correct answers from 3 tokens (EOS included)
    to `digits` + 1: the long ones are where sampling errs most and where a weight drifts furthest.
    """
    length = rng.randint(2, digits)
    text = "".join(rng.choice("0123456789") for _ in range(length - 1)) + rng.choice("123456789")
    return Problem(f"reverse {text}", text[::-1])


PROCEDURAL: dict[str, tuple[Callable[[random.Random, int], Problem], int, int]] = {
    # name: (generator, default size, smallest size); size = digits per operand / string length
    "addition": (addition, 3, 1),
    "reverse": (reverse, 40, 2),
}
# Far beyond any prompt these tasks need; a longer one is a data error, not a problem to sample.
MAX_PROMPT_CHARS = 32_768
# Problems of a procedural task's fingerprint: enough that a change of size or generator shows.
FINGERPRINT_SAMPLE = 256


@dataclass
class Task:
    """A source of problems; `reward(completion, answer)` may be replaced by your own verifier."""

    name: str
    train_problem: Callable[[random.Random], Problem]
    heldout_problems: list[Problem]
    reward: Callable[[str, str], float] = math_reward
    train_pool: list[Problem] | None = None
    """Every training problem, for tasks backed by a file; None for generated ones."""
    sizes: range | None = None
    """Generated tasks: the sizes `train_problem_of_size` accepts, smallest to the task's own; None for files."""
    train_problem_of_size: Callable[[random.Random, int], Problem] | None = None
    """Generated tasks: a training problem of at most the given size (the warm start's curriculum)."""
    min_new_tokens: int = 1
    """The smallest generation budget the task is scored correctly under (a task of long answers: above the longest)."""

    def train_batch(self, n: int, seed: int, size: int | None = None) -> list[Problem]:
        """n training problems, a pure function of the seed (so a resumed run sees the same ones).

        size: draw from the easier task of at most this size (generated tasks only); None = the task itself.
        """
        rng = random.Random(seed)
        if size is None:
            return [self.train_problem(rng) for _ in range(n)]
        return [self.train_problem_of_size(rng, size) for _ in range(n)]

    def check_budget(self, max_new_tokens: int) -> None:
        """A one-line error when completions cut at this budget could be scored wrongly or miss their answer."""
        if max_new_tokens < self.min_new_tokens:
            raise ValueError(f"max_new_tokens: {self.name} needs a budget of at least {self.min_new_tokens} tokens "
                             f"(the longest answer and its EOS), got {max_new_tokens}")

    def fingerprint(self) -> str:
        """A hash of the problems training draws from: it changes exactly when their content does.

        A file-backed task hashes its whole pool, so one edited answer changes it; a generated
        one hashes a fixed sample of its generator, which changes with the size and the code.
        """
        problems = self.train_pool if self.train_pool is not None else self.train_batch(FINGERPRINT_SAMPLE, 0)
        digest = hashlib.sha256()
        for problem in problems:
            digest.update(json.dumps([problem.prompt, problem.answer]).encode() + b"\n")
        return digest.hexdigest()


def procedural_task(name: str, size: int | None, n_heldout: int, seed: int) -> Task:
    make, default_size, smallest = PROCEDURAL[name]
    size = default_size if size is None else size
    if size < smallest:
        raise ValueError(f"task_size: {name} needs a size >= {smallest}, got {size}")

    def draw(rng: random.Random, heldout: bool, up_to: int = size) -> Problem:
        for _ in range(10_000):
            problem = make(rng, up_to)
            if in_heldout(problem.prompt) == heldout:
                return problem
        raise ValueError(f"task_size: {up_to} is too small for disjoint train and held-out splits of {name}")

    rng = random.Random(f"heldout-{name}-{seed}")
    heldout, seen = [], set()
    for _ in range(50 * n_heldout):
        problem = draw(rng, heldout=True)
        if problem.prompt not in seen:
            seen.add(problem.prompt)
            heldout.append(problem)
        if len(heldout) == n_heldout:
            break
    return Task(name, lambda rng: draw(rng, heldout=False), heldout, sizes=range(smallest, size + 1),
                train_problem_of_size=lambda rng, up_to: draw(rng, heldout=False, up_to=up_to))


# name -> (size, n_heldout, seed) -> Task; other tasks register here by name.
TASKS: dict[str, Callable[[int | None, int, int], Task]] = {
    name: (lambda size, n_heldout, seed, name=name: procedural_task(name, size, n_heldout, seed))
    for name in PROCEDURAL}


def mixed_task(small: Task, full: Task, share: float) -> Task:
    """`small`, except that each training problem is drawn from `full` with probability `share`.

    The warm start's demonstrations with a few from the whole RL task: long answers are then
    demonstrated rarely, so the warm start finds them rarely, at a rate `share` moves smoothly
    (a size alone moves the rate in steps of one target).
    """
    def pick(rng: random.Random, draw_small: Callable[[random.Random], Problem]) -> Problem:
        return full.train_problem(rng) if rng.random() < share else draw_small(rng)

    return replace(small, train_problem=lambda rng: pick(rng, small.train_problem),
                   train_problem_of_size=lambda rng, up_to: pick(rng, lambda r: small.train_problem_of_size(r, up_to)))


def is_answer(value) -> bool:
    """A non-empty string or a finite number (exact as text); null, booleans, NaN and containers are not."""
    if isinstance(value, str):
        return bool(value.strip())
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def gsm8k_row(row: dict, where: str) -> dict:
    """A line of GSM8K's own files as {"prompt", "answer"}: the question and GSM8K_INSTRUCTION, the number after
    the answer's "####"."""
    question, solution = row["question"], row.get("answer")
    if not isinstance(question, str) or not isinstance(solution, str) or not AFTER_HASHES.search(solution):
        raise ValueError(f"task: {where}: a GSM8K line needs a string 'question' and an 'answer' ending in "
                         f"'#### <number>', got {json.dumps(solution)[:60]}")
    return {"prompt": f"{question.strip()} {GSM8K_INSTRUCTION}",
            "answer": AFTER_HASHES.findall(solution)[-1].replace(",", "")}


def parse_problem(line: str, where: str) -> Problem:
    """One JSONL line as a Problem; `where` ("file:line") names it in every error."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        row = None
    if isinstance(row, dict) and "prompt" not in row and "question" in row:
        row = gsm8k_row(row, where)
    if not isinstance(row, dict) or "prompt" not in row or "answer" not in row:
        raise ValueError(f"task: {where} is not a JSON object with 'prompt' and 'answer' (or GSM8K's 'question' "
                         f"and 'answer')")
    prompt, answer = row["prompt"], row["answer"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"task: {where}: 'prompt' must be a non-empty string, got {json.dumps(prompt)[:40]}")
    if not is_answer(answer):
        raise ValueError(f"task: {where}: 'answer' must be a non-empty string or a number, "
                         f"got {json.dumps(answer)[:40]}")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"task: {where}: the prompt is {len(prompt):,} characters, over the limit of "
                         f"{MAX_PROMPT_CHARS:,}")
    return Problem(prompt, str(answer))


def read_jsonl(path: str) -> list[Problem]:
    """The problems of a UTF-8 JSONL file (a leading byte-order mark is allowed), each line checked."""
    data = Path(path).read_bytes().removeprefix(codecs.BOM_UTF8)
    problems = []
    for line_no, raw in enumerate(data.split(b"\n"), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"task: {path}:{line_no} is not UTF-8 text (byte {error.start + 1} of the line: "
                             f"{raw[error.start:error.start + 1]!r}); save the file as UTF-8") from None
        if line.strip():
            problems.append(parse_problem(line, f"{path}:{line_no}"))
    if not problems:
        raise ValueError(f"task: {path} holds no problems")
    report_duplicates(problems, path)
    return problems


def report_duplicates(problems: list[Problem], path: str) -> None:
    """Print a note when prompts repeat: repeats weight a problem more, which may not be meant."""
    answers: dict[str, str] = {}
    repeats = conflicting = 0
    for problem in problems:
        if problem.prompt in answers:
            repeats += 1
            conflicting += answers[problem.prompt] != problem.answer
        answers.setdefault(problem.prompt, problem.answer)
    if repeats:
        print(f"task: {path} repeats {repeats} prompt(s) ({conflicting} with a different answer); "
              f"each repeat is one more draw of that problem")


def refuse_overlap(train: list[Problem], heldout: list[Problem], path: str, heldout_file: str) -> None:
    """Held-out prompts that are also training prompts would measure memorisation, not learning."""
    training_prompts = {p.prompt for p in train}
    shared = [p.prompt for p in heldout if p.prompt in training_prompts]
    if shared:
        raise ValueError(f"heldout_file: {len(shared)} prompt(s) of {heldout_file} are also in {path} "
                         f"(first: {shared[0][:60]!r}); remove them from one of the files")


def check_data_file(path: str, argument: str) -> None:
    """A one-line error naming the argument when `path` is not a readable file."""
    if Path(path).is_dir():
        raise ValueError(f"{argument}: {path!r} is a directory, not a .jsonl file")
    if not Path(path).is_file():
        raise ValueError(f"{argument}: no such file {path!r}")


def jsonl_task(path: str, heldout_file: str | None, n_heldout: int) -> Task:
    """Your own data: train from `path`; held-out from `heldout_file`, else a hashed 10% of `path`."""
    rows = read_jsonl(path)
    if heldout_file:
        train, heldout = rows, read_jsonl(heldout_file)
        refuse_overlap(train, heldout, path, heldout_file)
    else:
        train = [p for p in rows if not in_heldout(p.prompt)]
        heldout = [p for p in rows if in_heldout(p.prompt)]
    if not train or not heldout:
        raise ValueError(f"task: {path} is too small to split into train and held-out; pass --heldout-file")
    return Task(Path(path).stem, lambda rng: rng.choice(train), heldout[:n_heldout], train_pool=train)


def make_task(name: str, size: int | None = None, n_heldout: int = 128, heldout_file: str | None = None,
              seed: int = 0) -> Task:
    """A registered procedural task by name, or a .jsonl file of {"prompt": ..., "answer": ...}."""
    if n_heldout < 1:
        raise ValueError(f"eval_problems: must be >= 1, got {n_heldout}")
    if name.endswith(".jsonl"):
        check_data_file(name, "task")
        if heldout_file:
            check_data_file(heldout_file, "heldout_file")
        return jsonl_task(name, heldout_file, n_heldout)
    if name not in TASKS:
        raise ValueError(f"task: unknown task {name!r}; choose one of {', '.join(TASKS)} or a .jsonl file")
    if heldout_file:
        raise ValueError(f"heldout_file: only .jsonl tasks take a held-out file; {name} draws its own held-out "
                         f"split")
    return TASKS[name](size, n_heldout, seed)
