"""How long each course notebook takes to read, counted on its committed .ipynb by one stated rule.

    python tools/course_length.py           # the table: every notebook of the course, core first
    python tools/course_length.py --check   # also exit 1 when a core notebook is over its budgets

The rule counts what a careful reader reads: reading minutes = (prose words + printed words) / 150
+ 6 s a maths span + 3 s a code line + 1 minute a figure, rounded to the nearest minute (a half up).
- prose words: the words of the markdown cells (the answers of the quick questions included), less
  their maths spans and fenced code blocks; words are what str.split() finds;
- a maths span: an inline $...$ or a display $$...$$ of a markdown cell, each one span;
- a code line: a non-blank line of a code cell or of a fenced code block in a markdown cell;
- printed words: the words of what the code shows as text: stream outputs, rendered markdown
  outputs, the value of a cell's last expression; a table's numbers are its words;
- a figure: an image output.
The skim time is the same sum without code and maths: (prose + printed words) / 150 + 1 a figure.

Calibration, done once, on commit a034ad5 (its committed core notebooks, counted by measure() here:
A034AD5_CORE). Two careful readers of that core reported 2 h 10 to 3 h for it (the midpoint, 155 min,
is the target) and 30 to 50 min for core 03. The words-only rule (150 words a minute and a minute a
figure, kept here) gave 74 min and 13 min. Holding the core at 155 min leaves one choice between the
code and the maths constants, and core 03's 30-50 min bounds it: anywhere from 0 to 5.5 s a code line
(core 03 then reads 42 to 30 min). The middle, 2.8 s, rounds to 3 s a code line; the maths time that
then makes the core 155 min, 5.8 s, rounds to 6 s a maths span.
On a034ad5 the rule gives the core 157 min and core 03 36 min.

A core notebook (notebooks/NN_*.py: notebooks/build.py) answers one question within these budgets:
prose at most PROSE_BUDGET words, printed at most PRINTED_BUDGET words, at least MIN_FIGURES figures.
The README's reading path states every notebook's times by this rule. The tool is advisory: it prints,
and fails only when --check is asked for (.ci/run prints the table; nothing holds a length).
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path
from typing import NamedTuple

import nbformat

ROOT = Path(__file__).resolve().parents[1]
WORDS_PER_MINUTE = 150
SECONDS_A_MATHS_SPAN, SECONDS_A_CODE_LINE, MINUTES_A_FIGURE = 6, 3, 1
PROSE_BUDGET, PRINTED_BUDGET, MIN_FIGURES = 2000, 800, 2

FENCED = re.compile(r"^```.*?^```", re.S | re.M)
DISPLAY_MATHS = re.compile(r"\$\$.+?\$\$", re.S)
INLINE_MATHS = re.compile(r"\$[^$]+\$")  # once the display spans are out

spec = importlib.util.spec_from_file_location("notebook_build", ROOT / "notebooks" / "build.py")
build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)


class Length(NamedTuple):
    prose: int
    maths: int
    code: int
    printed: int
    figures: int

    @property
    def minutes(self) -> int:
        """The stated rule, to the nearest minute (a half up)."""
        return math.floor((self.prose + self.printed) / WORDS_PER_MINUTE + self.maths * SECONDS_A_MATHS_SPAN / 60
                          + self.code * SECONDS_A_CODE_LINE / 60 + self.figures * MINUTES_A_FIGURE + 0.5)

    @property
    def skim(self) -> int:
        """Words and figures only, code and maths skipped, to the nearest minute (a half up)."""
        return math.floor((self.prose + self.printed) / WORDS_PER_MINUTE + self.figures * MINUTES_A_FIGURE + 0.5)


# The committed core of commit a034ad5, as measure() counts it (git show a034ad5:notebooks/<name>.ipynb):
# the notebooks the two readings of the calibration were taken on. Kept as numbers so that the test of the
# calibration runs on a clone without that history.
A034AD5_CORE = {
    "01_reuse_makes_data_off_policy": Length(prose=1338, maths=81, code=142, printed=233, figures=3),
    "02_every_method_is_a_coefficient": Length(prose=1355, maths=87, code=174, printed=597, figures=4),
    "03_where_the_kernel_comes_from": Length(prose=1268, maths=162, code=145, printed=332, figures=2),
    "04_starvation_watched": Length(prose=1450, maths=76, code=227, printed=607, figures=3),
    "05_off_policy_in_production": Length(prose=1273, maths=48, code=84, printed=368, figures=2),
}
READINGS = {"core": (130, 180), "03_where_the_kernel_comes_from": (30, 50)}  # minutes, the two readers' range


def markdown_counts(source: str) -> tuple[int, int, int]:
    """(prose words, maths spans, code lines) of one markdown cell."""
    fenced = FENCED.findall(source)
    text = FENCED.sub(" ", source)
    display = DISPLAY_MATHS.findall(text)
    text = DISPLAY_MATHS.sub(" ", text)
    inline = INLINE_MATHS.findall(text)
    text = INLINE_MATHS.sub(" ", text)
    code = sum(bool(line.strip()) for block in fenced for line in block.splitlines()[1:-1])
    return len(text.split()), len(display) + len(inline), code


def shown_text(output: nbformat.NotebookNode) -> str:
    """The text an output shows a reader; empty for an image (a figure) and a widget."""
    if output["output_type"] == "stream":
        return output["text"]
    data = output.get("data", {})
    if "image/png" in data:
        return ""
    if "text/markdown" in data:
        return data["text/markdown"]
    return data.get("text/plain", "") if output["output_type"] == "execute_result" else ""


def measure(notebook: Path) -> Length:
    """Prose words, maths spans, code lines, printed words and figures of a built notebook, as committed."""
    nb = nbformat.read(notebook, as_version=4)
    markdown = [markdown_counts(cell.source) for cell in nb.cells if cell.cell_type == "markdown"]
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    outputs = [out for cell in code_cells for out in cell.get("outputs", [])]
    return Length(prose=sum(prose for prose, _, _ in markdown),
                  maths=sum(maths for _, maths, _ in markdown),
                  code=sum(code for _, _, code in markdown)
                  + sum(bool(line.strip()) for cell in code_cells for line in cell.source.splitlines()),
                  printed=sum(len(shown_text(out).split()) for out in outputs),
                  figures=sum("image/png" in out.get("data", {}) for out in outputs))


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


def rule() -> str:
    return (f"reading minutes = (prose + printed words) / {WORDS_PER_MINUTE} + {SECONDS_A_MATHS_SPAN} s a maths span "
            f"+ {SECONDS_A_CODE_LINE} s a code line + {MINUTES_A_FIGURE} a figure, to the nearest minute; "
            "skim: words and figures only")


def main(argv: list[str]) -> int:
    rows = table()
    print(rule())
    print(f"core budgets: prose <= {PROSE_BUDGET}, printed <= {PRINTED_BUDGET}, figures >= {MIN_FIGURES}")
    print(f"{'notebook':<36} {'tier':<9} {'prose':>6} {'maths':>6} {'code':>5} {'printed':>8} {'figures':>8} "
          f"{'skim':>5} {'minutes':>8}  budgets")
    failed = False
    for source, kind, length in rows:
        verdict = ", ".join(over_budget(length)) or "within" if kind == "core" else "-"
        failed |= kind == "core" and verdict != "within"
        print(f"{build.name_of(source):<36} {kind:<9} {length.prose:>6} {length.maths:>6} {length.code:>5} "
              f"{length.printed:>8} {length.figures:>8} {length.skim:>5} {length.minutes:>8}  {verdict}")
    core = [length for _, kind, length in rows if kind == "core"]
    print(f"the core path: {sum(length.minutes for length in core)} minutes "
          f"(skimmed: {sum(length.skim for length in core)} minutes)")
    return int(failed and "--check" in argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
