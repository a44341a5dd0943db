"""How long each course notebook takes to read, counted on its committed .ipynb by one stated rule.

    python tools/course_length.py           # the table: every notebook of the course, core first
    python tools/course_length.py --check   # also exit 1 when a core notebook is over its budgets

The rule: reading minutes = (prose words + printed words) / 150 + 1 minute a figure, rounded to the
nearest minute (a half up). Prose words are the words of the markdown cells (formulas and the
answers of the quick questions included); printed words are the words of the stream outputs, what
the code prints; a figure is an image output. Code is not counted: a reader who steps through it
takes longer. Words are what str.split() finds.

A core notebook (notebooks/NN_*.py: notebooks/build.py) answers one question within these budgets: prose at most PROSE_BUDGET words, printed at most PRINTED_BUDGET
words, at least MIN_FIGURES figures. The README's reading path states every notebook's time by this
rule; tests/course/test_course_length.py holds both.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import NamedTuple

import nbformat

ROOT = Path(__file__).resolve().parents[1]
WORDS_PER_MINUTE = 150
PROSE_BUDGET, PRINTED_BUDGET, MIN_FIGURES = 2000, 800, 2

spec = importlib.util.spec_from_file_location("notebook_build", ROOT / "notebooks" / "build.py")
build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)


class Length(NamedTuple):
    prose: int
    printed: int
    figures: int

    @property
    def minutes(self) -> int:
        """The stated rule: (prose + printed) / 150 + one a figure, to the nearest minute (a half up)."""
        return math.floor((self.prose + self.printed) / WORDS_PER_MINUTE + self.figures + 0.5)


def measure(notebook: Path) -> Length:
    """Prose words, printed words and figures of a built notebook, as committed."""
    nb = nbformat.read(notebook, as_version=4)
    prose = sum(len(cell.source.split()) for cell in nb.cells if cell.cell_type == "markdown")
    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])]
    printed = sum(len(out["text"].split()) for out in outputs if out["output_type"] == "stream")
    figures = sum("image/png" in out.get("data", {}) for out in outputs)
    return Length(prose, printed, figures)


def over_budget(length: Length) -> list[str]:
    """What a core notebook exceeds, in words a reader of the table understands; empty when within budget."""
    return ([f"prose {length.prose} > {PROSE_BUDGET}"] * (length.prose > PROSE_BUDGET)
            + [f"printed {length.printed} > {PRINTED_BUDGET}"] * (length.printed > PRINTED_BUDGET)
            + [f"figures {length.figures} < {MIN_FIGURES}"] * (length.figures < MIN_FIGURES))


def tier(source: Path) -> str:
    if source in build.CORE:
        return "core"
    return "deeper" if source in build.DEEPER else "exercises"


def reading_order(sources: list[Path]) -> list[Path]:
    """The core slots in order, then the deeper tier, then the exercises."""
    order = {"core": 0, "deeper": 1, "exercises": 2}
    return sorted(sources, key=lambda s: (order[tier(s)], build.name_of(s)))


def table() -> list[tuple[Path, str, Length]]:
    """(source, tier, length) of every notebook of the course, in reading order: core, deeper, exercises."""
    return [(source, tier(source), measure(source.with_suffix(".ipynb"))) for source in reading_order(build.SOURCES)]


def main(argv: list[str]) -> int:
    rows = table()
    print(f"reading minutes = (prose + printed words) / {WORDS_PER_MINUTE} + 1 a figure, to the nearest minute; "
          f"core budgets: prose <= {PROSE_BUDGET}, printed <= {PRINTED_BUDGET}, figures >= {MIN_FIGURES}")
    print(f"{'notebook':<36} {'tier':<17} {'prose':>6} {'printed':>8} {'figures':>8} {'minutes':>8}  budgets")
    failed = False
    for source, kind, length in rows:
        verdict = ", ".join(over_budget(length)) or "within" if kind == "core" else "-"
        failed |= kind == "core" and verdict != "within"
        print(f"{build.name_of(source):<36} {kind:<17} {length.prose:>6} {length.printed:>8} {length.figures:>8} "
              f"{length.minutes:>8}  {verdict}")
    core = [length for _, kind, length in rows if kind == "core"]
    print(f"the core path: {sum(length.minutes for length in core)} minutes")
    return int(failed and "--check" in argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
