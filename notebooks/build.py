"""Regenerate the .ipynb notebooks, with their outputs, from their jupytext sources.

    python notebooks/build.py             # every notebook
    python notebooks/build.py 02 exer     # only those whose name contains 02 or exer

Each notebook's source is a percent-format .py file beside it (01_alpha_divergence_objective.py
...), real Python that also runs as a script. This reads it, executes it top to bottom in a
fresh python3 kernel (one thread), and writes the .ipynb with its outputs, so that it reads
on a code host without running. tests/course/test_notebooks.py re-executes each committed .ipynb
and fails when its outputs or its cells differ from what the source gives now.
The same path by hand: jupytext --to ipynb --execute notebooks/01_alpha_divergence_objective.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import jupytext
import nbformat
import torch
from nbclient import NotebookClient

from nano_respo.sft import cpu_setting

HERE = Path(__file__).resolve().parent
SOURCES = sorted(HERE.glob("[0-9][0-9]_*.py")) + [HERE / "exercises.py", HERE / "exercises_solutions.py"]


def execute(nb: nbformat.NotebookNode, timeout: int = 900) -> nbformat.NotebookNode:
    """Run every cell in a python3 kernel whose working directory is notebooks/.

    timeout: seconds per cell; notebook 04's first cell trains the warm start when it is not
    cached yet (minutes on a loaded 2-core CPU).
    """
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # progress bars print timings: not a reproducible output
    NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(HERE)}}).execute()
    # Where its numbers come from: RL runs round differently on another CPU setting, so a fresh execution can
    # be compared digit by digit only on this one (tests/course/test_notebooks.py).
    nb.metadata["nano_respo"] = {"built_on": cpu_setting(), "torch": torch.__version__}
    # The sliders' state (and the figures drawn inside them) is live-kernel business: a code
    # host shows the static figures instead, so the file does not carry it.
    nb.metadata.pop("widgets", None)
    return nb


def from_source(source: Path) -> nbformat.NotebookNode:
    nb = jupytext.read(source)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata.pop("jupytext", None)
    for index, cell in enumerate(nb.cells):  # stable ids: a rebuild changes only what changed
        cell.id = f"{source.stem[:8]}-{index:02d}"
    return nb


def build(source: Path) -> tuple[float, int]:
    """Execute one source and write its .ipynb; returns (seconds, bytes)."""
    nb = from_source(source)
    started = time.perf_counter()
    execute(nb)
    seconds = time.perf_counter() - started
    target = source.with_suffix(".ipynb")
    nbformat.write(nb, target)
    return seconds, target.stat().st_size


def main(argv: list[str]) -> None:
    for source in SOURCES:
        if argv and not any(a in source.name for a in argv):
            continue
        seconds, size = build(source)
        print(f"{source.with_suffix('.ipynb').name}: executed in {seconds:.1f} s, {size / 1024:.0f} KB", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
