"""tools/course_length.py is advisory: it runs and prints every notebook's figures, and counts as its rule says.
No reading time, budget or length of the course is held here."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("course_length", ROOT / "tools" / "course_length.py")
course_length = importlib.util.module_from_spec(spec)
spec.loader.exec_module(course_length)
build = course_length.build


def test_the_tool_prints_every_notebook():
    """Advisory: it runs and prints every notebook's figures and its rule; no length is held here."""
    done = subprocess.run([sys.executable, "tools/course_length.py"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(prose + printed words) / 150 + 6 s a maths span + 3 s a code line + 1 a figure" in done.stdout
    for source in build.SOURCES:
        assert build.name_of(source) in done.stdout


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
