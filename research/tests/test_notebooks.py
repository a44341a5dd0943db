"""The committed research notebooks are what their sources give when executed now, held as the course's are
(tests/course/test_notebooks.py): cells equal to the source, every cell runs, and on the CPU setting a notebook was
built on, every printout equal at its printed precision."""

import nbformat
import pytest

from research.notebooks import build
from tests.course.test_notebooks import CELL_TIMEOUT, assert_fresh_execution_prints_the_committed

IDS = [source.stem for source in build.SOURCES]


def test_the_record_readings_are_here():
    assert {s.stem for s in build.SOURCES} == {"starvation_controls", "tiny_qwen3_records", "three_sources"}


@pytest.mark.parametrize("source", build.SOURCES, ids=IDS)
def test_notebook_cells_match_their_source(source):
    committed = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    fresh = build.course_build.from_source(source)
    assert [(c.cell_type, c.source) for c in committed.cells] == [(c.cell_type, c.source) for c in fresh.cells], \
        f"{source.name} changed since its notebook was built: run python -m research.notebooks.build {source.stem}"


@pytest.mark.parametrize("source", build.SOURCES, ids=IDS)
def test_notebook_outputs_equal_a_fresh_execution(source, warm_start_cache):
    committed = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    fresh = build.execute(nbformat.read(source.with_suffix(".ipynb"), as_version=4), timeout=CELL_TIMEOUT)
    assert_fresh_execution_prints_the_committed(committed, fresh, source.stem,
                                                f"python -m research.notebooks.build {source.stem}")
