"""research/reread.py: each committed gate 2 record's command becomes the train.py runs gate 2 launched, and
the committed reading (research/results/gate2-reread/reading.md) is what --summarise prints from the dumps."""

import json
from pathlib import Path

from research import gate2, reread
from research.common import TRAIN_ENTRY, train_command
from train import TrainConfig
from research.cli import parse_config

ROOT = Path(__file__).resolve().parents[2]


def test_each_committed_command_is_rerun_as_gate2_ran_it_up_to_its_last_batch():
    paths = sorted((ROOT / "research/results/gate2-amended").glob("*.json"))
    assert len(paths) == 6
    for path in paths:
        record = json.loads(path.read_text())
        cfg = reread.gate_config(record)
        assert cfg == parse_config(gate2.Gate2Config, [f"--{k.replace('_', '-')}={v}" for k, v in record["config"].items()
                                                       if v is not None and k != "seeds"] + ["--seeds", "900", "901"])
        for seed, run in reread.seed_runs(record).items():
            launched = parse_config(TrainConfig, train_command(gate2.experiment(cfg), cfg.model, "seq_clip", cfg.reuse,
                                                               cfg.lag, seed, resume=False)[len(TRAIN_ENTRY):])
            assert run.iterations == cfg.last_batch + 1 == 11
            assert {**vars(run), "iterations": 0} == {**vars(launched), "iterations": 0}
            assert (run.loss.agg, run.epochs) == ("seq-mean-token-sum-norm", 2)  # as the records ran, not today's defaults


def test_the_committed_reading_is_what_summarise_prints(tmp_path):
    printed = reread.summarise(ROOT / "research/results/gate2-reread", tmp_path / "scatter.png")
    assert (ROOT / "research/results/gate2-reread/reading.md").read_text().rstrip("\n") == printed
    assert (tmp_path / "scatter.png").stat().st_size > 10_000


def test_the_gate_reads_the_steps_gate2_reads():
    """Batches 1-10, each batch's first step left out without a lag; every step with one."""
    columns = {"iteration": [0, 1, 1, 10, 11], "step": [1, 2, 3, 20, 22], "advantage": [1.0] * 5,
               "length": [3] * 5, "log_w": [0.0] * 5, "target": [6] * 5, "response": ["33"] * 5, "reward": [1.0] * 5}
    record = {"gate": {"first_batch": 1, "last_batch": 10, "lag": 0}, "rows": {"900": columns}}
    assert [p["step"] for p in reread.gate_positives(record)] == [3]
    record["gate"]["lag"] = 8
    assert [p["step"] for p in reread.gate_positives(record)] == [2, 3, 20]
