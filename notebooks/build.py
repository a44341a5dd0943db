"""Write the teaching notebooks from the cell lists in nb01/02/03 and execute them in place.

    python notebooks/build.py            # all four
    python notebooks/build.py 02         # only those whose name contains 02

Executed with nbclient (kernel python3) and saved with their outputs, so they read on a
code host without running. Figures are PNGs at a modest dpi to keep every file small.
"""

from __future__ import annotations

import os
import sys
import time

import nbformat
from nbclient import NotebookClient

HERE = os.path.dirname(os.path.abspath(__file__))

# Every notebook starts with this cell: quiet, single-threaded, small inline PNGs, and the
# repository root on the path so that `nano_respo` and `toy` import from a fresh checkout.
SETUP = """\
import os, sys
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.abspath(".."))
import math
import torch
import matplotlib.pyplot as plt
%matplotlib inline
%config InlineBackend.figure_formats = ["png"]
plt.rcParams.update({"figure.dpi": 70, "font.size": 9})
torch.set_num_threads(1)
torch.set_printoptions(precision=4, sci_mode=False)"""


def notebook(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src)
                for kind, src in cells]
    nb.cells.insert(1, nbformat.v4.new_code_cell(SETUP))
    return nb


def build(name: str, cells: list[tuple[str, str]], timeout: int = 300) -> float:
    nb = notebook(cells)
    started = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": HERE}}).execute()
    nbformat.write(nb, os.path.join(HERE, name))
    return time.perf_counter() - started


def main(argv):
    import importlib

    sys.path.insert(0, HERE)
    for source in ("nb01", "nb02", "nb03", "nb04"):
        if argv and not any(a in source for a in argv):
            continue
        module = importlib.import_module(source)
        seconds = build(module.NAME, module.CELLS)
        size = os.path.getsize(os.path.join(HERE, module.NAME)) / 1024
        print(f"{module.NAME}: executed in {seconds:.1f} s, {size:.0f} KB")


if __name__ == "__main__":
    main(sys.argv[1:])
