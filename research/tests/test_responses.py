"""research/responses.py: the in-process loop takes train.py's steps, and the reader records what the loss saw."""

import json
import math

import pytest

from research.responses import family_and_target, read_run
from nano_respo.config import TrainConfig
from nano_respo.run.cli import parse_config
from nano_respo.run.loop import train
from tests.conftest import parity_reward  # shared with the parity_runs fixture

FLAGS = ["--task", "digit_conflict", "--task-size", "14", "--max-new-tokens", "30", "--sft-steps", "8",
         "--iterations", "3", "--prompts-per-iteration", "4", "--group-size", "4", "--reuse", "4", "--epochs", "2",
         "--lag", "1", "--method", "seq_clip", "--lr", "3e-3", "--eval-every", "3", "--eval-problems", "6",
         "--seed", "5"]
TIMING = {"gen_tokens_per_s", "train_tokens_per_s", "policy_lag"}


def same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        a, b = (float("nan") if v is None else v for v in (a, b))
        return (math.isnan(a) and math.isnan(b)) or a == b
    return a == b


def test_the_reading_loop_takes_train_pys_steps_and_reads_what_the_loss_saw(tmp_path, model_cache, parity_runs):
    """train.py's loop (run.loop.train) and read_run on the same flags, the task scored by parity so that a barely
    warm-started model has advantages: the same steps, and rows that are the loss's own statistics."""
    cfg = parse_config(TrainConfig, [*FLAGS, "--out-dir", str(tmp_path), "--name", "run", "--no-plots"])
    train(cfg)
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    run = read_run(cfg, heldout=True)
    train_lines = [line for line in lines if line["kind"] == "train"]
    assert len(run.records) == len(train_lines) == 12
    for ours, theirs in zip(run.records, train_lines):
        differ = [k for k in set(ours) - TIMING if not same(ours[k], theirs[k])]
        assert not differ, differ
    assert run.heldout == {k: v for k, v in lines[-1].items() if k.startswith("heldout")}
    # Every step read once per response of its mini-batch (2 of the 4 groups), in the order of the steps.
    rows = run.rows
    assert len(rows["step"]) == 12 * 8 and rows["step"][::8] == list(range(1, 13))
    assert rows["iteration"][::8] == [i for i in range(3) for _ in range(4)]
    assert {rows["family"][i] for i in range(96)} <= {"sum", "ones"}
    assert all(parity_reward(text, "") == reward for text, reward in zip(rows["response"], rows["reward"]))
    assert sum(n for counts in run.rollouts for _, n in counts.values()) == 3 * 16
    assert [sum(c for c, _ in counts.values()) for counts in run.rollouts] == \
        [round(record["reward"] * 16) for record in run.records[::4]]
    # With lag 1 only the very first step is on-policy; log w is the drift the loss saw: the step's low-w share.
    assert all(abs(w) < 1e-5 for w in rows["log_w"][:8]) and max(map(abs, rows["log_w"][8:])) > 1e-3
    for record in run.records:
        mine = [w for s, a, w in zip(rows["step"], rows["advantage"], rows["log_w"]) if s == record["step"] and a > 0]
        if mine:
            share = sum(w < math.log(0.8) for w in mine) / len(mine)
            assert share == pytest.approx(record["low_w_pos_frac"], abs=1e-6)


def test_a_prompt_names_its_family_and_target_inside_the_template():
    assert family_and_target("<|im_start|>u:ones 14<|im_end|><|im_start|>a:") == ("ones", 14)
    assert family_and_target("sum 6") == ("sum", 6)
    with pytest.raises(ValueError, match="names no digit family"):
        family_and_target("reverse 123")
