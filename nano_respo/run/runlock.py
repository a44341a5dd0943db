"""One process per run directory: a lock taken before anything is loaded, held until exit.

    with run_lock(run_dir):
        ... load, train, save ...

Two runs writing one directory interleave their metrics and overwrite each other's
checkpoints, so the second one must stop before it loads anything. The lock is an
advisory `flock` on runs/<name>/run.lock: the kernel releases it when its process ends,
however it ends (exit, exception, kill -9), so a lock can never be held by a dead process.
The file also records the holder's pid, which the refusal names; a file left behind by a
process that no longer holds it is a stale lock, taken over with a note.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_FILE = "run.lock"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        return True
    return True


def recorded_pid(fd: int) -> int | None:
    """The pid a lock file holds, or None when it is empty or unreadable (a writer cut short)."""
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 64).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None


def acquire(path: Path) -> int:
    """An open descriptor of `path` holding its exclusive flock; ValueError naming the holder if busy."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = recorded_pid(fd)
            os.close(fd)
            raise ValueError(f"run lock: {path.parent} is in use by another run (pid {holder}); wait for it to "
                             f"finish or pass another --name") from None
        # The holder before us may have unlinked the file after we opened it: then our lock is on
        # a file nobody else will see, so start again on the path's current file.
        try:
            same_file = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same_file = False
        if same_file:
            return fd
        os.close(fd)


@contextlib.contextmanager
def run_lock(run_dir: Path):
    """Hold run_dir's lock for the body; ValueError at once if another live process holds it."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_FILE
    fd = acquire(path)
    try:
        stale = recorded_pid(fd)
        if stale is not None and stale != os.getpid():
            state = "no longer running" if not pid_alive(stale) else "running, but no longer holding it"
            print(f"run lock: took over a stale lock of {run_dir} left by pid {stale} ({state})")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        # Unlink before unlocking: a process waiting on this file then sees that it changed.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)
        with contextlib.suppress(OSError):  # a run that wrote nothing (it failed or stopped at start-up) leaves no trace
            run_dir.rmdir()
