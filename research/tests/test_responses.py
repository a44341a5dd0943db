"""research/responses.py: read_run is train.py's own loop (train.train with a watch), and the reader's rows are what
the loss saw, step by step, as the run's own records log it."""

import math

import pytest
import torch

import train
from nano_respo.runs import read_metrics
from research.cli import parse_config
from research.responses import family_and_target, read_run
from tests.conftest import parity_reward  # shared with the parity_runs fixture
from train import TrainConfig

FLAGS = ["--task", "digit_conflict", "--task-size", "14", "--max-new-tokens", "30", "--sft-steps", "8",
         "--iterations", "3", "--prompts-per-iteration", "4", "--group-size", "4", "--reuse", "4", "--epochs", "2",
         "--lag", "1", "--method", "seq_clip", "--lr", "3e-3", "--eval-every", "3", "--eval-problems", "6",
         "--seed", "5"]
TIMING = {"gen_tokens_per_s", "train_tokens_per_s"}


def same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        a, b = (float("nan") if v is None else v for v in (a, b))
        return (math.isnan(a) and math.isnan(b)) or a == b
    return a == b


def quantiles(values: list[float]) -> list[float]:
    """diagnostics' log_w quantiles (10, 50, 90%) of one step's positives, in its float32."""
    return torch.quantile(torch.tensor(values, dtype=torch.float32), torch.tensor((0.1, 0.5, 0.9))).tolist()


def test_the_reader_rows_line_up_with_the_runs_own_records(tmp_path, model_cache, parity_runs):
    """read_run on flags whose task is scored by parity (a barely warm-started model then has advantages): a plain
    train.py run on the same flags logs the same steps (the watch only reads), and each step's rows give the
    statistics that step's record logs (its positives' log w quantiles, low-w share, lengths, coefficient)."""
    cfg = parse_config(TrainConfig, FLAGS)
    run = read_run(cfg, own_phi=True)
    plain = read_metrics(train.train(parse_config(TrainConfig, [*FLAGS, "--out-dir", str(tmp_path), "--name", "run",
                                                                "--no-plots", "--device", "cpu"])))
    plain_train = [r for r in plain if r["kind"] == "train"]
    assert len(run.records) == len(plain_train) == 3 * 4
    for ours, theirs in zip(run.records, plain_train):
        assert set(ours) == set(theirs)
        differ = [k for k in set(ours) - TIMING if not same(ours[k], theirs[k])]
        assert not differ, differ
    assert run.heldout == {k: v for k, v in plain[-1].items() if k.startswith("heldout")} and run.heldout
    # Every step read once per response of its mini-batch (2 of the 4 groups), in the order of the steps.
    rows = run.rows
    assert len(rows["step"]) == 12 * 8 and rows["step"][::8] == [r["step"] for r in run.records] == list(range(1, 13))
    assert rows["iteration"][::8] == [r["iteration"] for r in run.records] == [i for i in range(3) for _ in range(4)]
    assert {rows["family"][i] for i in range(96)} <= {"sum", "ones"}
    assert all(parity_reward(text, "") == reward for text, reward in zip(rows["response"], rows["reward"]))
    assert sum(n for counts in run.rollouts for _, n in counts.values()) == 3 * 16
    assert [sum(c for c, _ in counts.values()) for counts in run.rollouts] == \
        [round(record["reward"] * 16) for record in run.records[::4]]
    # With lag 1 only the very first step is on-policy; log w is the drift the loss saw, as its record logs it.
    assert all(abs(w) < 1e-5 for w in rows["log_w"][:8]) and max(map(abs, rows["log_w"][8:])) > 1e-3
    checked = 0
    for record in run.records:
        mine = [i for i, s in enumerate(rows["step"]) if s == record["step"]]
        pos = [i for i in mine if rows["advantage"][i] > 0 and rows["length"][i] > 0]
        assert record["frac_pos"] == pytest.approx(len(pos) / len(mine), abs=1e-6)
        if not pos:
            continue
        checked += 1
        log_w = [rows["log_w"][i] for i in pos]
        assert [record[f"log_w_q{q}_pos"] for q in (10, 50, 90)] == pytest.approx(quantiles(log_w), abs=1e-5)
        assert record["low_w_pos_frac"] == pytest.approx(sum(w < math.log(0.8) for w in log_w) / len(pos), abs=1e-6)
        assert record["len_pos"] == pytest.approx(sum(rows["length"][i] for i in pos) / len(pos), abs=1e-5)
        assert record["phi_mean_pos"] == pytest.approx(sum(rows["phi"][i] for i in pos) / len(pos), abs=1e-5)
    assert checked >= 6


def test_a_prompt_names_its_family_and_target_inside_the_template():
    assert family_and_target("<|im_start|>u:ones 14<|im_end|><|im_start|>a:") == ("ones", 14)
    assert family_and_target("sum 6") == ("sum", 6)
    with pytest.raises(ValueError, match="names no digit family"):
        family_and_target("reverse 123")
