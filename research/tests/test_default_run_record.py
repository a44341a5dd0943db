"""research/default_run.py, shortened to one iteration: train.py from an empty cache, its records copied."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_run_record_holds_the_run_and_the_shipped_warm_start_it_loaded(tmp_path):
    out = tmp_path / "default"
    done = subprocess.run([sys.executable, "-m", "research.default_run", "--out", str(out), "--iterations", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    assert {p.name for p in out.iterdir()} == {"metrics.jsonl", "config.json", "warm_start.json", "record.json"}
    record = json.loads((out / "record.json").read_text())
    assert record["printed"][0].startswith("warm start: shipped tiny-qwen3-reverse")
    assert record["command"].endswith("python -m research.default_run --out " + str(out) + " --iterations 1")
    shipped = json.loads((ROOT / "nano_respo/warm_starts/tiny-qwen3-reverse/manifest.json").read_text())
    assert json.loads((out / "warm_start.json").read_text()) == shipped
    kinds = [json.loads(line)["kind"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert kinds.count("eval") == 2 and "train" in kinds
