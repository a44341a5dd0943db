"""The two wings: the reference (the package, the toy, the course, the entry points train.py and eval.py, the
tools and the tests of all these) never imports research/; research/ imports the reference and registers its
study-only tasks and kernel rows by name; `pip install -e .` installs the reference only."""

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest
from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ["nano_respo", "toy", "notebooks", "tools", "tests", "docs", "examples", "train.py", "eval.py"]


def reference_sources() -> list[Path]:
    found = []
    for name in REFERENCE:
        path = ROOT / name
        found += [path] if path.is_file() else sorted(path.rglob("*.py")) + sorted(path.rglob("*.ipynb"))
    return found


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement of the file names (a notebook: of its code cells)."""
    if path.suffix == ".ipynb":
        cells = nbformat.read(path, as_version=4).cells
        text = "\n".join(c.source for c in cells if c.cell_type == "code" and not c.source.startswith(("%", "!")))
    else:
        text = path.read_text()
    names = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def reads_research(path: Path) -> bool:
    return any(name == "research" or name.startswith("research.") for name in imported_modules(path))


def test_the_rule_finds_an_import_of_research(tmp_path):
    """The check itself: it sees both import forms, in a file and in a notebook's code cell."""
    for line in ("import research.drift", "from research.lab.report import mean_ci", "from research import figures"):
        (tmp_path / "a.py").write_text(f"import torch\n{line}\n")
        assert reads_research(tmp_path / "a.py")
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(line)]), tmp_path / "a.ipynb")
        assert reads_research(tmp_path / "a.ipynb")
    (tmp_path / "a.py").write_text("from nano_respo.kernel import policy_loss  # research/ reads this\n")
    assert not reads_research(tmp_path / "a.py")


def test_the_reference_never_imports_research():
    sources = reference_sources()
    assert len(sources) > 50
    offenders = [str(p.relative_to(ROOT)) for p in sources if reads_research(p)]
    assert not offenders, f"the reference imports research/: {offenders}"


def test_research_reads_the_reference_and_registers_its_rows_and_tasks_by_name():
    code = ("import nano_respo.kernel as k, nano_respo.tasks as t; before = set(k.METHOD_TABLE), set(t.TASKS); "
            "import research; print(sorted(set(k.METHOD_TABLE) - before[0]), sorted(set(t.TASKS) - before[1]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    added_rows, added_tasks = done.stdout.strip().split("] [")
    assert "digit_sum" in added_tasks and "digit_conflict" in added_tasks
    # The reference's own tests pass without research: none calls anything with a row or task that only research
    # registers (the whole suite imports research, which would hide such a dependency; a record's name is fine).
    research_only = set(re.findall(r"'(\w+)'", added_rows + added_tasks))
    assert "respo_wtilt" in research_only
    leaks = [f"{p.relative_to(ROOT)}:{call.lineno}" for p in sorted((ROOT / "tests").rglob("*.py"))
             for call in ast.walk(ast.parse(p.read_text())) if isinstance(call, ast.Call)
             for arg in [*call.args, *(k.value for k in call.keywords)]
             if isinstance(arg, ast.Constant) and arg.value in research_only]
    assert not leaks, f"reference tests that need research's registrations: {leaks}"


def test_pip_install_installs_the_reference_only():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = find_packages(str(ROOT), include=setuptools["packages"]["find"]["include"])
    assert "nano_respo" in packages and "toy" in packages
    assert not [p for p in packages if p == "research" or p.startswith("research.")], packages
    assert setuptools["py-modules"] == ["train", "eval"]  # the entry points, importable as modules


@pytest.mark.parametrize("name", ["nano_respo", "toy", "train", "eval"])
def test_the_reference_imports_without_research_on_the_path(name, tmp_path):
    """As an installed user has it: from another directory, research/ out of reach."""
    code = f"import sys, {name}; assert 'research' not in sys.modules; print({name}.__name__)"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == name, done.stderr
