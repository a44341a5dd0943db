"""tools/mutation_check.py as the README runs it: every site is in today's code, every mutant is caught.

The full check is one kernel test run per mutant, each forked from one process that has imported torch, pytest and
hypothesis, the test that catches the mutant first (about 75 s on two busy cores with --fail-fast --workers 2, where
a fresh interpreter per mutant running the tests in file order took about 520 s); the site lookup alone takes no
time, so a mutant the code no longer holds fails here first, by name.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("mutation_check", ROOT / "tools" / "mutation_check.py")
mutation_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mutation_check)


def test_every_mutation_site_is_in_the_code():
    missing = mutation_check.missing_sites()
    assert not missing, "tools/mutation_check.py edits code that is not there any more:\n" + "\n".join(missing)


def test_a_site_the_code_lost_stops_the_check_before_any_test_runs(monkeypatch, capsys):
    lost = ("a mutant of deleted code", mutation_check.KERNEL, "def no_such_function(", "def other(")
    monkeypatch.setattr(mutation_check, "MUTANTS", [*mutation_check.MUTANTS, lost])
    ran = lambda *args: (_ for _ in ()).throw(AssertionError("ran"))  # noqa: E731
    monkeypatch.setattr(mutation_check, "run_mutant", ran)
    monkeypatch.setattr(mutation_check, "verdicts", ran)
    assert mutation_check.main([]) == 2
    assert "a mutant of deleted code: 'def no_such_function(' is not exactly once in nano_respo/kernel.py" \
        in capsys.readouterr().out


def test_each_mutant_names_the_test_that_catches_it_first_and_that_test_exists():
    """--fail-fast runs CATCHER's test first: a stale name would still be sound (the rest of the tier runs after
    it) but slow, so a renamed test or a new mutant without its catcher fails here."""
    assert set(mutation_check.CATCHER) == {name for name, *_ in mutation_check.MUTANTS}
    defined = "".join((ROOT / path).read_text() for path in mutation_check.TESTS)
    missing = {name: test for name, test in mutation_check.CATCHER.items() if f"def {test}(" not in defined}
    assert not missing, missing


def test_every_mutant_is_caught():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "tools/mutation_check.py", "--fail-fast", "--workers", "2"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = [line.split()[0] for line in done.stdout.splitlines()[:-1]]
    assert verdicts == ["caught"] * len(mutation_check.MUTANTS)
    n = len(mutation_check.MUTANTS)
    assert done.stdout.splitlines()[-1] == f"every mutant was caught ({n} of {n})"


def test_the_readme_counts_the_mutants_the_tool_has():
    n = len(mutation_check.MUTANTS)
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"in {n} ways" in readme and f"`every mutant was caught ({n} of {n})`" in readme
