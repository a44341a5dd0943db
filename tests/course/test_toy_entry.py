"""`python -m toy` (toy/__main__.py): the default kernel beside the sequence clip, each with its starvation line."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_python_m_toy_prints_both_methods():  # about 10 s on a loaded 2-core CPU
    done = subprocess.run([sys.executable, "-m", "toy"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "positives with w < 0.8" in lines[1] and "coefficient they kept" in lines[1]
    rows = {line.split()[0]: line.split()[-3:] for line in lines[2:]}
    assert set(rows) == {"respo", "seq_clip"}, done.stdout
    for low, kept, final in rows.values():
        assert low.endswith("%") and 0 <= float(low[:-1]) <= 100 and 0 <= float(final) <= 1
