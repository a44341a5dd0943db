"""The committed notebooks are what their jupytext sources give when executed now.

Each notebook's source is notebooks/<name>.py or notebooks/deeper/<name>.py (percent format);
notebooks/build.py executes it and writes the .ipynb beside it with its outputs and the CPU
setting it ran on. The core and the deeper tier are held alike. These
tests fail when a committed notebook is stale: its cells differ from the source, a cell of a
fresh execution raises (every check cell asserts its property), or, on the CPU setting the
notebook was built on, re-executing it gives different printed output. Text is compared at
its printed precision (a number may differ by one unit in its last printed digit); figures and
live widgets are not compared. On another CPU setting RL runs round differently and diverge,
so there the check cells are what must hold. Notebooks train with the session's shared
warm-start cache (tests/conftest.py), never the user's.
"""

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest
import torch

from nano_respo.models import cache_dir
from nano_respo.sft import cpu_setting

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
spec = importlib.util.spec_from_file_location("notebook_build", NOTEBOOKS_DIR / "build.py")
build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)

SOURCES = build.SOURCES


def listing(path: Path) -> list[tuple[str, float]]:
    return sorted((str(p.relative_to(path)), p.stat().st_mtime) for p in path.rglob("*")) if path.exists() else []


@pytest.fixture(scope="module", autouse=True)
def users_cache_before():
    """The user's cache (NANO_RESPO_CACHE as the session found it, or ~/.cache/nano_respo) before these tests."""
    path = cache_dir()
    return path, listing(path)
IDS = [build.name_of(s) for s in SOURCES]
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
WIDGET = "application/vnd.jupyter.widget-view+json"
# Seconds a cell may take here: every course notebook loads shipped warm starts and the slowest cell takes well
# under a minute on a loaded 2-core machine, so a stalled kernel (a message lost between kernel and client under
# load; build.execute then runs the notebook once more) costs two minutes: it cost five at 300 in a full run.
CELL_TIMEOUT = 120


def test_the_course_is_complete():
    """Five core slots in order, one notebook each; a deeper tier; the exercises; every source built."""
    assert [s.stem[:2] for s in build.CORE] == list(build.CORE_SLOTS), [s.name for s in build.CORE]
    assert {s.stem for s in build.DEEPER} >= {"derivation_details", "branches_explored"}
    assert SOURCES[-2:] == build.EXERCISES and [s.name for s in build.EXERCISES] == ["exercises.py", "exercises_solutions.py"]
    for source in SOURCES:
        assert source.with_suffix(".ipynb").exists(), f"{source.name} has no notebook: run python notebooks/build.py"


def test_no_notebook_edits_sys_path():
    for path in (*NOTEBOOKS_DIR.glob("*.py"), *(NOTEBOOKS_DIR / "deeper").glob("*.py")):
        assert "sys.path" not in path.read_text(), f"{path.name} edits sys.path; pip install -e . instead"


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_notebook_is_small(source):
    assert source.with_suffix(".ipynb").stat().st_size < 1_000_000


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_notebook_cells_match_their_source(source):
    committed = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    fresh = build.from_source(source)
    assert [(c.cell_type, c.source) for c in committed.cells] == [(c.cell_type, c.source) for c in fresh.cells], \
        f"{source.name} changed since its notebook was built: run python notebooks/build.py {build.name_of(source)}"


def printed(cell) -> list[str]:
    """The text a reader sees under a code cell: streams, markdown, plain text (no figures, no widgets)."""
    texts = []
    for out in cell.get("outputs", []):
        kind = out["output_type"]
        if kind == "stream":  # how a stream is cut into messages is timing: join neighbours
            head = f"{out['name']}: "
            if texts and texts[-1].startswith(head):
                texts[-1] += out["text"]
            else:
                texts.append(head + out["text"])
        elif kind == "error":
            texts.append(f"error: {out['ename']}: {out['evalue']}")
        elif WIDGET not in out.get("data", {}) and "image/png" not in out.get("data", {}):
            data = out.get("data", {})
            texts.append(data.get("text/markdown") or data.get("text/plain", ""))
    return texts


def last_digit(token: str) -> float:
    """One unit in the last printed digit of a number as printed (1.23 -> 0.01, 4.5e-07 -> 1e-08)."""
    mantissa, _, exponent = token.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def same_at_printed_precision(committed: str, fresh: str) -> bool:
    if NUMBER.sub("#", committed) != NUMBER.sub("#", fresh):
        return False
    pairs = zip(NUMBER.findall(committed), NUMBER.findall(fresh))
    return all(abs(float(a) - float(b)) <= last_digit(a) * 1.000001 for a, b in pairs)


def built_here(notebook) -> bool:
    """Whether this process runs on the CPU setting and torch the notebook was built with."""
    built = notebook.metadata.get("nano_respo", {})
    return built.get("built_on") == cpu_setting() and built.get("torch") == torch.__version__


def assert_fresh_execution_prints_the_committed(committed, fresh, name: str, rebuild: str) -> None:
    """Every cell of `fresh` ran; on the notebook's own CPU setting each printout is `committed`'s (shared with
    research/tests/test_notebooks.py, whose notebooks `rebuild` names another command)."""
    for index, (old, new) in enumerate(zip(committed.cells, fresh.cells)):
        if old.cell_type != "code":
            continue
        old_text, new_text = printed(old), printed(new)
        assert not any(t.startswith("error:") for t in new_text), f"cell {index} of {name} raised: {new_text}"
        if built_here(committed):
            assert len(old_text) == len(new_text) and all(map(same_at_printed_precision, old_text, new_text)), \
                (f"cell {index} of {name} prints something else now (stale notebook? run {rebuild}):\n"
                 f"committed: {old_text}\nfresh:     {new_text}")


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_notebook_outputs_equal_a_fresh_execution(source, warm_start_cache):
    """Every cell runs (the check cells hold); on the notebook's own CPU setting, every printout is the committed one."""
    committed = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    fresh = build.execute(nbformat.read(source.with_suffix(".ipynb"), as_version=4), timeout=CELL_TIMEOUT)
    assert_fresh_execution_prints_the_committed(committed, fresh, source.stem,
                                                f"python notebooks/build.py {build.name_of(source)}")


def test_a_notebook_runs_with_the_test_cache_not_the_users(warm_start_cache):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from nano_respo.models import cache_dir\nprint(cache_dir())")])
    assert printed(build.execute(nb).cells[0]) == [f"stdout: {warm_start_cache}\n"]


def test_the_users_cache_is_untouched(users_cache_before):
    """Run last in this module: the notebooks above trained and loaded their warm starts elsewhere."""
    path, before = users_cache_before
    assert listing(path) == before, f"the tests wrote to the user's cache {path}"


def test_a_stalled_notebook_runs_once_more_from_its_cells_as_given(monkeypatch, capsys):
    """build.execute: a cell timeout (kernel and client idle, a message lost) runs the notebook again, once, from
    the cells it was given; a second stall raises."""
    from nbclient.exceptions import CellTimeoutError

    seen = []

    def stalls(times):
        def run(nb, timeout, cwd):
            seen.append([len(c.get("outputs", [])) for c in nb.cells])
            nb.cells[0]["outputs"] = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
            if len(seen) <= times:
                raise CellTimeoutError("A cell timed out while it was being executed, after 1 seconds.")
        return run

    monkeypatch.setattr(build, "run_in_kernel", stalls(1))
    nb = build.execute(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('ran')")]), timeout=1)
    assert seen == [[0], [0]] and printed(nb.cells[0]) == ["stdout: ran\n"]
    assert "once more in a fresh kernel" in capsys.readouterr().err
    seen.clear()
    monkeypatch.setattr(build, "run_in_kernel", stalls(2))
    with pytest.raises(CellTimeoutError):
        build.execute(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('ran')")]), timeout=1)
