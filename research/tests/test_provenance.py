"""research/README.md's "Which commit each study's records ran on": every folder of committed records is in its
table, and each commit the table names is an ancestor of the commit the records rerun at (read from git where the
history is here). A run at HEAD does not reproduce a record bit for bit; these are what still holds at HEAD."""

import fnmatch
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RERUN_AT = "9561567"


def section() -> str:
    text = (ROOT / "research" / "README.md").read_text()
    return text.split("## Which commit each study's records ran on\n", 1)[1].split("\n## ", 1)[0]


def rows() -> list[list[str]]:
    lines = [line for line in section().splitlines() if line.startswith("| ") and not line.startswith("| study")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_every_folder_of_records_is_named_in_the_table():
    named = [path for _, records, _ in rows() for path in re.findall(r"`([^`]+)`", records)]
    for entry in sorted((ROOT / "research" / "results").iterdir()):
        path = f"results/{entry.name}" + ("/" if entry.is_dir() else "")
        assert any(fnmatch.fnmatch(path, pattern) for pattern in named), f"{path} is in no row of the table"
    assert {"toy/results/", "bench/results/"} <= set(named)
    assert f"git worktree add ../nano-respo-{RERUN_AT} {RERUN_AT}" in section()


def git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def test_each_commit_named_made_its_records_before_the_one_they_rerun_at():
    if git("cat-file", "-e", f"{RERUN_AT}^{{commit}}").returncode:
        pytest.skip(f"this clone does not hold commit {RERUN_AT}")
    before = [made for *_, made in rows() if not made.startswith("ran at ")]
    named = [sha for made in before for sha in re.findall(r"\b[0-9a-f]{7}\b", made)]
    assert len(named) >= len(before)
    for sha in named:
        assert git("merge-base", "--is-ancestor", sha, RERUN_AT).returncode == 0, f"{sha} is after {RERUN_AT}"
    assert git("merge-base", "--is-ancestor", RERUN_AT, "HEAD").returncode == 0


def test_a_study_that_names_its_commit_ran_every_record_there():
    """The table study's row says "ran at <sha>": each of its records names that commit, an ancestor of HEAD."""
    import json
    ran_at = [(records, made) for _, records, made in rows() if made.startswith("ran at ")]
    assert ran_at, "the table study's row is missing"
    for records, made in ran_at:
        sha = re.findall(r"\b[0-9a-f]{7}\b", made)[0]
        for folder in re.findall(r"`([^`]+)`", records):
            for path in (ROOT / "research" / folder).rglob("*.json"):
                assert json.loads(path.read_text())["commit"].startswith(sha), path
        if git("cat-file", "-e", f"{sha}^{{commit}}").returncode == 0:
            assert git("merge-base", "--is-ancestor", sha, "HEAD").returncode == 0, f"{sha} is not in HEAD's history"
