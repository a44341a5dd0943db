"""examples/own_loop.py, the complete minimal drop-in the README points at: it runs as a user runs it, learns its
task, and takes nothing from nano_respo but the kernel."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "own_loop.py"


def test_the_own_loop_example_learns_its_task_with_the_kernel_alone():
    done = subprocess.run([sys.executable, str(EXAMPLE)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    rewards = [float(r) for r in re.findall(r"^iteration +\d+  reward (\S+)$", done.stdout, re.M)]
    assert len(rewards) == 30
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    print(f"own_loop.py: mean reward of the first 5 iterations {first:.2f}, of the last 5 {last:.2f}")
    assert first < 0.3 < 0.8 < last  # from about chance (0.1 per digit) to nearly every digit right
    source = EXAMPLE.read_text()
    assert re.findall(r"^(?:from|import) nano_respo\S*", source, re.M) == ["from nano_respo.kernel"]
    assert len(source.splitlines()) <= 60
