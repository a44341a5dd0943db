"""The committed research notebooks are what their sources give when executed now, held as the course's are
(tests/course/test_notebooks.py): cells equal to the source, every cell runs, and on the CPU setting a notebook was
built on, every printout equal at its printed precision."""

import nbformat
import pytest

from research.notebooks import build
from tests.course.test_notebooks import CELL_TIMEOUT, built_here, printed, same_at_printed_precision

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
    for index, (old, new) in enumerate(zip(committed.cells, fresh.cells)):
        if old.cell_type != "code":
            continue
        old_text, new_text = printed(old), printed(new)
        assert not any(t.startswith("error:") for t in new_text), f"cell {index} of {source.stem} raised: {new_text}"
        if built_here(committed):
            assert len(old_text) == len(new_text) and all(map(same_at_printed_precision, old_text, new_text)), \
                (f"cell {index} of {source.stem} prints something else now (stale notebook? run python -m "
                 f"research.notebooks.build {source.stem}):\ncommitted: {old_text}\nfresh:     {new_text}")
