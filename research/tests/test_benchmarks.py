"""The benchmarks run, so they cannot rot unseen; their figures in research/bench/README.md are read from research/bench/results/
by research/figures.py --check (research/tests/test_figures.py). research/bench/step.py needs TRL: its --quick smoke test
runs in the TRL environment (tests/integrations/test_examples.py)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.run.test_documented_commands import run_once

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def test_the_gpu_benchmark_times_each_route_on_a_tiny_cpu_shape():
    """research/bench/gpu.py --cpu-smoke (the GPU script, run on a GPU when one is lent) at a tiny size on the CPU:
    rollout.decode, the padded against the packed step, each with tokens/s, and the training time ratio."""
    out = run_once(["-m", "research.bench.gpu", "--cpu-smoke"], timeout=300)  # the documented command's run, shared
    assert out.returncode == 0, out.stderr[-2000:]
    for route in ("generation decode ", "training padded", "training packed"):
        assert re.search(rf"{route}\s+\d+ tokens/s", out.stdout), (route, out.stdout)
    assert re.search(r"packed / padded time \d+\.\d\d \(\d+ real tokens of 128 padded\)", out.stdout)


def test_the_readmes_parameter_and_flop_counts_are_what_the_dry_run_prints():
    done = run_once(["-m", "research.bench.gpu", "--dry-run"], timeout=300)  # the documented command's run, shared
    done.check_returncode()
    out = done.stdout
    row = next(line for line in (ROOT / "research" / "bench" / "README.md").read_text().splitlines()
               if line.startswith("| parameter and FLOP counts"))
    figures = row.split("|")[2]
    for model, numbers in re.findall(r"(qwen3-[\w.-]+) ([^;]+)", figures):
        printed = next(line for line in out.splitlines() if line.startswith(f"{model}:"))
        for number in re.findall(r"\d+\.\d+", numbers):
            assert number in printed, (model, number, printed)


def test_a_benchmark_writes_the_record_it_printed(tmp_path):
    record = tmp_path / "kernel.json"
    subprocess.run([sys.executable, "-m", "research.bench.kernel", "--batch", "4", "--length", "8", "--repeats", "2", "--record",
                    str(record)], cwd=ROOT, capture_output=True, text=True, timeout=300, env=ENV, check=True)
    made = json.loads(record.read_text())
    assert made["command"] == f"python -m research.bench.kernel --batch 4 --length 8 --repeats 2 --record {record}"
    assert len(made["ratio_respo_wtilt_grpo"]) == 2 and made["shape"] == [4, 8] and made["cpu_setting"]


def test_the_newcomer_benchmark_times_a_step_of_a_fresh_clone(tmp_path):
    """research/bench/newcomer.py, one step of it: a fresh clone of HEAD with an empty cache, `python -m pytest -q` timed."""
    record = tmp_path / "newcomer.json"
    done = subprocess.run([sys.executable, "-m", "research.bench.newcomer", "--only", "pytest -q", "--record", str(record)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=ENV)
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    made = json.loads(record.read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert list(made["seconds"]) == ["pytest -q"] and made["seconds"]["pytest -q"] > 0 and made["commit"] == head
    assert set(made["load_average"]) == {"before", "after"} and made["failed"] == {}
