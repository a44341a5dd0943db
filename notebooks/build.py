"""Regenerate the .ipynb notebooks, with their outputs, from their jupytext sources.

    python notebooks/build.py                   # every notebook
    python notebooks/build.py 02 exer deeper    # those whose path under notebooks/ (deeper/x.py) contains 02, exer or deeper
    python notebooks/build.py 01 --out /tmp/b   # write the built notebook under /tmp/b instead of beside its source

The course has two tiers. The core (notebooks/NN_*.py) is five slots, one question each, read in
order; each core notebook has a reading budget (tools/course_length.py). The deeper tier
(notebooks/deeper/*.py) holds the controls, sweeps, record readings and side topics the core links to.

Each notebook's source is a percent-format .py file beside its .ipynb, real Python that also runs
as a script. This reads it, executes it top to bottom in a fresh python3 kernel (one thread, working
directory notebooks/ for every tier, so `from course import ...` works), and writes the .ipynb with
its outputs, so that it reads on a code host without running. tests/course/test_notebooks.py
re-executes each committed .ipynb and fails when its outputs or its cells differ from what the
source gives now. The same path by hand: jupytext --to ipynb --execute notebooks/<name>.py
"""

from __future__ import annotations

import copy
import os
import sys
import time
from pathlib import Path

import jupytext
import nbformat
import torch
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError

from nano_respo.sft import cpu_setting

HERE = Path(__file__).resolve().parent
CORE_SLOTS = ("01", "02", "03", "04", "05")
CORE = sorted(HERE.glob("[0-9][0-9]_*.py"))  # one notebook a slot, in reading order
DEEPER = sorted((HERE / "deeper").glob("*.py"))
EXERCISES = [HERE / "exercises.py", HERE / "exercises_solutions.py"]
SOURCES = CORE + DEEPER + EXERCISES


def name_of(source: Path) -> str:
    """The source's path under notebooks/ without its suffix: 01_reuse_makes_data_off_policy, deeper/branches_explored."""
    return source.relative_to(HERE).with_suffix("").as_posix()


def run_in_kernel(nb: nbformat.NotebookNode, timeout: int, cwd: Path = HERE) -> None:
    NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(cwd)}}).execute()


def execute(nb: nbformat.NotebookNode, timeout: int = 900, cwd: Path = HERE) -> nbformat.NotebookNode:
    """Run every cell in a python3 kernel whose working directory is `cwd` (notebooks/).

    timeout: seconds per cell; a tiny-Qwen3 notebook's first cell trains the warm start when it is
    neither shipped nor cached yet (minutes on a loaded 2-core CPU).
    """
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # progress bars print timings: not a reproducible output
    untouched = copy.deepcopy(nb)
    try:
        run_in_kernel(nb, timeout, cwd)
    except CellTimeoutError as stall:
        # The kernel and its client both idle, each waiting on the other: a message lost between them (seen here
        # under load). The notebook runs once more, from its cells as given, in a fresh kernel; a second stall raises.
        print(f"{stall.__class__.__name__}: {str(stall).splitlines()[0]} - running the notebook once more in a fresh "
              "kernel", file=sys.stderr)
        nb = untouched
        run_in_kernel(nb, timeout, cwd)
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


def build(source: Path, out: Path | None = None) -> tuple[Path, float, int]:
    """Execute one source and write its .ipynb (beside it, or under `out` at the same path); returns
    (the .ipynb written, seconds, bytes)."""
    nb = from_source(source)
    started = time.perf_counter()
    nb = execute(nb)
    seconds = time.perf_counter() - started
    target = source.with_suffix(".ipynb") if out is None else out / f"{name_of(source)}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)
    return target, seconds, target.stat().st_size


def main(argv: list[str]) -> None:
    out = None
    if "--out" in argv:
        at = argv.index("--out")
        out, argv = Path(argv[at + 1]).resolve(), argv[:at] + argv[at + 2:]
    for source in SOURCES:
        if argv and not any(a in source.relative_to(HERE).as_posix() for a in argv):
            continue
        target, seconds, size = build(source, out)
        print(f"{target}: executed in {seconds:.1f} s, {size / 1024:.0f} KB", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
