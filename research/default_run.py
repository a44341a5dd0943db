"""The README's quick start, recorded: `python train.py` with no flags, from an empty cache, under one CPU setting.

    python -m research.default_run --out research/results/default-run/default
    ATEN_CPU_CAPABILITY=default python -m research.default_run --out research/results/default-run/unvectorised

Runs train.py in a new process (one torch thread, NANO_RESPO_CACHE at a new empty directory, the CPU
variables of this process) and copies what it wrote into --out: metrics.jsonl, config.json, the manifest
of the shipped warm start it loaded as warm_start.json (or the cache entry's, when it trained one), and
record.json (the command, CPU setting, wall seconds and the machine's load average, which the timings
depend on). research/figures.py reads them for README.md and docs/training.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from research.common import ROOT, provenance
from research.lab.records import write_record
from research.cli import parse_config
from nano_respo.shipped import SHIPPED_DIR


@dataclass
class DefaultRunConfig:
    """Record `python train.py` as a newcomer runs it."""

    out: str = "research/results/default-run/default"
    """The folder the records go to (replaced)."""
    iterations: int | None = None
    """train.py --iterations; None = its default (the committed records)."""


def warm_start_of(output: str, cache: Path) -> dict:
    """What the run started from: the shipped warm start it named, else the one it trained into `cache`."""
    for line in output.splitlines():
        if line.startswith("warm start: shipped "):
            return json.loads((SHIPPED_DIR / line.split()[3] / "manifest.json").read_text())
    (entry,) = (cache / "sft").glob("*/warm_start.json")
    return json.loads(entry.read_text())


def main(argv=None) -> dict:
    cfg = parse_config(DefaultRunConfig, argv)
    out = Path(cfg.out)
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as runs:
        env = {**os.environ, "NANO_RESPO_CACHE": cache, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
        start = time.perf_counter()
        shorter = ["--iterations", str(cfg.iterations)] if cfg.iterations else []
        done = subprocess.run([sys.executable, str(ROOT / "train.py"), "--out-dir", runs, *shorter], env=env,
                              cwd=ROOT, capture_output=True, text=True)
        seconds = round(time.perf_counter() - start)
        if done.returncode:
            raise SystemExit(f"train.py failed ({done.returncode}):\n{done.stderr[-2000:]}")
        (run,) = Path(runs).iterdir()
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        for name in ("metrics.jsonl", "config.json"):
            shutil.copy(run / name, out / name)
        (out / "warm_start.json").write_text(json.dumps(warm_start_of(done.stdout, Path(cache)), indent=1) + "\n")
    record = {**provenance("research.default_run", argv, empty_cache=False), "wall_s": seconds,
              "load_average": list(os.getloadavg()), "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "printed": [line for line in done.stdout.splitlines() if line.startswith(("warm start", "run:"))]}
    write_record(record, str(out / "record.json"))
    print("\n".join(record["printed"]) + f"\n{seconds} s")
    return record


if __name__ == "__main__":
    main()
