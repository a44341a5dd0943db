"""Regenerate the research notebooks (the record readings) with their outputs, as notebooks/build.py does the course's.

    python -m research.notebooks.build                    # every one
    python -m research.notebooks.build starvation         # those whose name contains the word

Each executes in a fresh kernel whose working directory is research/notebooks/, with the course's helpers
(notebooks/course.py, checks.py) and this repository importable; research/tests/test_notebooks.py re-executes
each committed notebook and fails when its outputs or cells differ from what its source gives now.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SOURCES = sorted(p for p in HERE.glob("*.py") if p.name not in ("build.py", "__init__.py"))

spec = importlib.util.spec_from_file_location("notebook_build", ROOT / "notebooks" / "build.py")
course_build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(course_build)


def kernel_path() -> None:
    """The course's helpers and this repository on the kernel's import path (the kernel inherits the environment)."""
    paths = [str(ROOT), str(ROOT / "notebooks"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))


def execute(nb, timeout: int = 900):
    kernel_path()
    return course_build.execute(nb, timeout, cwd=HERE)


def build(source: Path) -> tuple[Path, float, int]:
    import time

    import nbformat

    nb = course_build.from_source(source)
    started = time.perf_counter()
    nb = execute(nb)
    target = source.with_suffix(".ipynb")
    nbformat.write(nb, target)
    return target, time.perf_counter() - started, target.stat().st_size


def main(argv: list[str]) -> None:
    for source in SOURCES:
        if argv and not any(a in source.stem for a in argv):
            continue
        target, seconds, size = build(source)
        print(f"{target}: executed in {seconds:.1f} s, {size / 1024:.0f} KB", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
