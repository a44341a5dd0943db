"""The run tier's session machinery: the shipped warm starts' retraining starts as the session does.

Retraining both shipped warm starts takes a few minutes of one core per model. Started when the session
knows a collected test will read them (tests/run/test_shipped_warm_starts.py), the two processes run beside
the tests before that one instead of alone while the main process waits.
"""

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nano_respo.shipped import manifests

ROOT = Path(__file__).resolve().parents[2]
RETRAINING = pytest.StashKey[tuple]()  # (folder, [(process, log path)])


def pytest_collection_finish(session):
    if not any(item.path.name == "test_shipped_warm_starts.py" for item in session.items):
        return
    out = Path(tempfile.mkdtemp(prefix="nano-respo-retrained-"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    runs = []
    for path, manifest in manifests():  # each by the command that made it, into `out`
        python, *command = shlex.split(manifest["command"])
        log = out / f"{path.name}.log"
        with open(log, "w") as stream:  # a file, not a pipe: nobody reads it until the test does
            runs.append((subprocess.Popen([sys.executable, *command, "--out", str(out)], env=env, cwd=ROOT,
                                          stdout=stream, stderr=subprocess.STDOUT), log))
    session.config.stash[RETRAINING] = (out, runs)


def pytest_sessionfinish(session):
    out, runs = session.config.stash.get(RETRAINING, (None, []))
    for process, _ in runs:
        if process.poll() is None:  # the session ended before the test that waits for it
            process.kill()
            process.wait()
    if out is not None:
        shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def retrained(request):
    """The folder every shipped warm start was retrained into by the command in its manifest, once all finished."""
    out, runs = request.config.stash[RETRAINING]
    for process, log in runs:
        assert process.wait() == 0, log.read_text()[-3000:]
    return out
