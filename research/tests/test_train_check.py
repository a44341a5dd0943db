"""The GPU check (python -m research.bench.train_check) in its CPU smoke mode: every step runs and passes."""

import json

from research.bench import train_check


def test_the_cpu_smoke_runs_every_step_of_the_gpu_check(tmp_path):
    record = train_check.main(["--cpu-smoke", "--record", str(tmp_path / "record.json")])
    assert json.loads((tmp_path / "record.json").read_text()) == record
    assert [s["step"] for s in record["steps"]] == ["default", "fsdp", "moe", "protocol"]
    assert record["all_passed"], record["steps"]
    protocol = record["steps"][-1]
    assert protocol["updates"] == 8 and protocol["skipped_updates"] == 0  # one batch of N = 8 mini-batches
    assert protocol["seconds_per_update"] > 0 and protocol["gen_tokens_per_s"] > 0
