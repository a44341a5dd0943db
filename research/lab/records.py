"""Measurement records: what a benchmark or experiment printed, with the command and machine that made it.

The prose reads its measured numbers from such records (research/figures.py --check), never
typed in by hand.
"""

from __future__ import annotations

import json
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from nano_respo.sft import cpu_setting


def measurement(module: str, figures: dict, argv=None) -> dict:
    """A record of one measurement: the command as run (python -m module ...), the CPU setting, torch, when it
    finished, the figures."""
    return {"command": shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)]),
            "cpu_setting": cpu_setting(), "torch": torch.__version__,
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"), **figures}


def write_record(record: dict, out: str | None) -> None:
    """The record as JSON at `out` (folders made); nothing when out is None."""
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {out}")
