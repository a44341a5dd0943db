"""Each core notebook within its reading budgets, the rule's counts and its calibration, and the README's reading
times the ones tools/course_length.py computes."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("course_length", ROOT / "tools" / "course_length.py")
course_length = importlib.util.module_from_spec(spec)
spec.loader.exec_module(course_length)
build = course_length.build


def reading_path() -> str:
    """The README's reading-path section."""
    text = (ROOT / "README.md").read_text()
    return text.split("## Reading path", 1)[1].split("\n## ", 1)[0]


def test_the_tool_prints_every_notebook_and_passes_its_check():
    done = subprocess.run([sys.executable, "tools/course_length.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(prose + printed words) / 150 + 6 s a maths span + 3 s a code line + 1 a figure" in done.stdout
    for source in build.SOURCES:
        assert build.name_of(source) in done.stdout


@pytest.mark.parametrize("source", build.CORE, ids=[s.stem for s in build.CORE])
def test_a_core_notebook_is_within_its_budgets(source):
    length = course_length.measure(source.with_suffix(".ipynb"))
    assert not course_length.over_budget(length), f"{source.name}: {', '.join(course_length.over_budget(length))}"


def test_the_rule_counts_as_stated():
    Length = course_length.Length
    assert Length(prose=1000, maths=20, code=40, printed=500, figures=3).minutes == 17  # 1500 / 150 + 2 + 2 + 3
    assert Length(prose=1000, maths=20, code=40, printed=500, figures=3).skim == 13  # 1500 / 150 + 3
    assert Length(prose=150, maths=0, code=10, printed=75, figures=0).minutes == 2  # 1.5 + 0.5
    assert Length(prose=0, maths=5, code=0, printed=0, figures=0).minutes == 1  # 0.5 rounds half up
    assert Length(prose=100, maths=0, code=0, printed=0, figures=1).minutes == 2  # 0.67 + 1


def test_a_notebook_is_counted_as_stated(tmp_path):
    """Maths spans and fenced code leave the prose words; every output a reader sees as text is printed words."""
    markdown = "The weight $w$ and\n$$w = \\pi / \\mu$$ drift, `w` too.\n\n```python\nx = 1\n\ny = 2\n```"
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(markdown),
        nbformat.v4.new_code_cell("x = 1\n\n# a comment\nx", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="two words\n"),
            nbformat.v4.new_output("display_data", data={"image/png": "", "text/plain": "<Figure>"}),
            nbformat.v4.new_output("display_data", data={"text/markdown": "**three** rendered words",
                                                         "text/plain": "x"}),
            nbformat.v4.new_output("display_data", data={"application/vnd.jupyter.widget-view+json": {},
                                                         "text/plain": "interactive(children=...)"}),
            nbformat.v4.new_output("execute_result", data={"text/plain": "1"}, execution_count=1)])])
    nbformat.write(nb, tmp_path / "n.ipynb")
    assert course_length.measure(tmp_path / "n.ipynb") == course_length.Length(prose=6, maths=2, code=5, printed=6,
                                                                                 figures=1)


def test_the_calibration_reproduces_the_readings():
    """The rule on a034ad5's core (its recorded counts) lands within a quarter of both readings' midpoints."""
    core = sum(length.minutes for length in course_length.A034AD5_CORE.values())
    kernel = course_length.A034AD5_CORE["03_where_the_kernel_comes_from"].minutes
    for minutes, (low, high) in ((core, course_length.READINGS["core"]),
                                 (kernel, course_length.READINGS["03_where_the_kernel_comes_from"])):
        assert abs(minutes - (low + high) / 2) <= (low + high) / 2 / 4, f"{minutes} min against {low}-{high}"
        assert low <= minutes <= high
    assert (core, kernel) == (157, 36), "the tool's docstring states these"


def test_the_readme_states_the_tools_times():
    """Every notebook of the course is in the reading-path table, with the times the rule gives; the rule is stated."""
    section = reading_path()
    rule = ["150 words a minute", f"{course_length.SECONDS_A_MATHS_SPAN} s a maths span",
            f"{course_length.SECONDS_A_CODE_LINE} s a code line", "a minute a figure", "skim"]
    assert all(words in " ".join(section.split()) for words in rule), "the reading path states the rule"
    stated = {}
    for row in section.splitlines():
        link = re.search(r"\]\(notebooks/([^)]+)\.ipynb\)", row)
        if row.startswith("|") and link:
            minutes = [re.findall(r"(\d+) min", cell) for cell in row.rsplit("|", 3)[-3:-1]]
            assert [len(m) for m in minutes] == [1, 1], f"one time in each of the last two columns of: {row}"
            stated[link.group(1)] = (int(minutes[0][0]), int(minutes[1][0]))
    assert set(stated) == {build.name_of(s) for s in build.SOURCES}, "the table lists every notebook once"
    for source in build.SOURCES:
        length = course_length.measure(source.with_suffix(".ipynb"))
        assert stated[build.name_of(source)] == (length.skim, length.minutes), \
            f"README says {stated[build.name_of(source)]} min (skim, reading) for {build.name_of(source)}, " \
            f"the rule gives {(length.skim, length.minutes)}"
