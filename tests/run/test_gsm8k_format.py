"""GSM8K's own JSONL ({"question", "answer": "... #### 72"}) is a task as it is: read, checked, and trained on."""

import json

import pytest

from nano_respo.cli import from_flat
from nano_respo.runs import read_metrics
from nano_respo.tasks import GSM8K_INSTRUCTION, extract_answer, make_task, math_reward
from train import TrainConfig, train

pytestmark = pytest.mark.usefixtures("model_cache")


def gsm8k_lines(start: int, count: int) -> list[str]:
    """Lines in GSM8K's own format: a worked solution with calculator annotations, the answer after ####."""
    lines = []
    for i in range(start, start + count):
        a, b = 3 + i, 40 + 7 * i
        question = f"Tom has {a} bags with {b} marbles each. How many marbles does he have?"
        solution = f"He has {a} * {b} = <<{a}*{b}={a * b}>>{a * b} marbles.\n#### {a * b:,}"
        lines.append(json.dumps({"question": question, "answer": solution}))
    return lines


def write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_gsm8k_line_becomes_its_question_and_the_number_after_the_hashes(tmp_path):
    task = make_task(write(tmp_path / "train.jsonl", gsm8k_lines(0, 10)), heldout_file=write(
        tmp_path / "test.jsonl", gsm8k_lines(100, 3)))
    first = task.train_pool[0]
    assert first.prompt == f"Tom has 3 bags with 40 marbles each. How many marbles does he have? {GSM8K_INSTRUCTION}"
    assert first.answer == "120" and task.heldout_problems[0].answer == "76220"  # "#### 76,220": the comma dropped
    with pytest.raises(ValueError, match="####"):
        make_task(write(tmp_path / "bad.jsonl", [json.dumps({"question": "q", "answer": "no mark"})] * 12))


@pytest.mark.parametrize("completion, expected", [
    ("3 * 40 = 120\n#### 120", "120"), ("so \\boxed{7}, or #### 8", "7"), ("#### 1,200 marbles, 5 bags", "1,200"),
    ("it is 9", "9")])
def test_the_answer_check_reads_boxed_then_hashes_then_the_last_number(completion, expected):
    assert extract_answer(completion) == expected
    assert math_reward("#### 1,200", "1200") == 1.0


def test_a_gsm8k_file_trains_one_iteration_of_the_tiny_model(tmp_path):
    cfg = from_flat(TrainConfig, dict(
        model="tiny-qwen3", task=write(tmp_path / "gsm8k_train.jsonl", gsm8k_lines(0, 10)),
        heldout_file=write(tmp_path / "gsm8k_test.jsonl", gsm8k_lines(100, 2)), sft_steps=0, iterations=1,
        prompts_per_iteration=2, group_size=2, reuse=1, max_new_tokens=8, eval_problems=2, eval_samples=1,
        out_dir=str(tmp_path / "runs"), plots=False))
    run_dir = train(cfg)
    train_records = [r for r in read_metrics(run_dir) if r["kind"] == "train"]
    assert len(train_records) == 1 and train_records[0]["skipped"] == 0
