"""Each core notebook within its reading budgets, and the README's reading times the ones tools/course_length.py computes."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

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
    assert "(prose + printed words) / 150 + 1 a figure" in done.stdout
    for source in build.SOURCES:
        assert build.name_of(source) in done.stdout


@pytest.mark.parametrize("source", build.CORE, ids=[s.stem for s in build.CORE])
def test_a_core_notebook_is_within_its_budgets(source):
    length = course_length.measure(source.with_suffix(".ipynb"))
    assert not course_length.over_budget(length), f"{source.name}: {', '.join(course_length.over_budget(length))}"


def test_the_rule_counts_as_stated():
    assert course_length.Length(prose=1000, printed=500, figures=3).minutes == 13  # 1500 / 150 + 3
    assert course_length.Length(prose=150, printed=75, figures=0).minutes == 2  # 1.5 rounds half up
    assert course_length.Length(prose=100, printed=0, figures=1).minutes == 2  # 0.67 + 1


def test_the_readme_states_the_tools_times():
    """Every notebook of the course is in the reading-path table, with the time the rule gives, and the rule is stated."""
    section = reading_path()
    assert "150 words a minute" in section and "a minute a figure" in section, "the reading path states the rule"
    stated = {}
    for row in section.splitlines():
        link = re.search(r"\]\(notebooks/([^)]+)\.ipynb\)", row)
        if row.startswith("|") and link:
            minutes = re.findall(r"(\d+) min", row.rsplit("|", 2)[-2])
            assert len(minutes) == 1, f"one time in the last column of: {row}"
            stated[link.group(1)] = int(minutes[0])
    assert set(stated) == {build.name_of(s) for s in build.SOURCES}, "the table lists every notebook once"
    for source in build.SOURCES:
        computed = course_length.measure(source.with_suffix(".ipynb")).minutes
        assert stated[build.name_of(source)] == computed, \
            f"README says {stated[build.name_of(source)]} min for {build.name_of(source)}, the rule gives {computed}"
