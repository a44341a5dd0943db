"""tools/step_lines.py is advisory: it runs one default iteration and prints its figures. No line count is held here."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_tool_prints_the_default_path_and_the_package():
    done = subprocess.run([sys.executable, "tools/step_lines.py"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for shown in ("train.py (whole)", "kernel.py", "policy_loss", "rollout.py", "decode", "diagnostics",
                  "lines from `python train.py` to kernel.policy_loss", "lines of `python train.py --help`",
                  "lines of nano_respo/", "without them"):
        assert shown in done.stdout, shown
