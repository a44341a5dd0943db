"""train.py with the study-only tasks and kernel rows registered: python -m research.train <train.py's flags>.

The studies launch their runs through this, so that `--task digit_conflict` or `--method respo_wtilt`
resolve; everything else is train.py itself, run as a user runs it.
"""

import runpy
from pathlib import Path

import research  # noqa: F401  (registers the study-only tasks and rows)

if __name__ == "__main__":
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "train.py"), run_name="__main__")
