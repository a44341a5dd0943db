"""Every committed notebook executes top to bottom without a cell error (kernel python3).

The notebooks are executed in memory from their committed JSON; nothing is written back.
"""

import glob
import os

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "notebooks", "*.ipynb")))


def test_there_are_four_notebooks():
    assert [os.path.basename(p)[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_executes(path):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=240, kernel_name="python3",
                            resources={"metadata": {"path": os.path.dirname(path)}})
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
