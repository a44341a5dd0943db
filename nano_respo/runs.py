"""What keeps a run alive around train.py's loop, and its metrics log.

    with Stop(run_dir) as stop, run_lock(run_dir):   signals caught; one process per run directory
        for iteration in progress(range(...), stop, ...):   a progress bar that ends after a stop request
            ...; log.write(record)                     metrics.jsonl, one JSON record a line, flushed at once

Exit statuses (run_command): 0 finished; 1 failed (a traceback); 2 refused (a flag, a value, a file or the run
directory's state, in one line); 128 + N stopped by signal N: 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP. A stop's last
line says what `--resume` continues from. Checkpoints are atomic (nano_respo/checkpoint.py), so a kill at any
moment, kill -9 included, leaves the run resumable from its last save.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import signal
import sys
from pathlib import Path

from .checkpoint import latest_checkpoint, write_text_atomic


class Stopped(KeyboardInterrupt):
    """A run stopped by a signal; the entry point prints its message and exits with 128 + the signal's number."""

    def __init__(self, message: str, signum: int):
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        super().__init__(f"{name}: {message}")
        self.exit_code = 128 + signum


class Stop:
    """Ctrl-C (SIGINT), SIGTERM (schedulers, `docker stop`) and SIGHUP (a closed terminal).

    Inside the loop (`in_loop`) the first one sets `signum`: the loop finishes its iteration, saves and stops.
    Anywhere else, or a second time, it stops at once: saves are atomic, so nothing is damaged.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, run_dir: Path):
        self.run_dir, self.signum, self.in_loop = Path(run_dir), None, False
        self.previous = {}

    def __enter__(self):
        with contextlib.suppress(ValueError):  # not the main thread: signals keep their meaning
            for sig in self.SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup's SIGHUP stays ignored
                    self.previous[sig] = signal.signal(sig, self.handle)
        return self

    def handle(self, signum, frame):
        if self.in_loop and self.signum is None:
            self.signum = signum
            print(f"{'Ctrl-C' if signum == signal.SIGINT else signal.Signals(signum).name}: finishing this "
                  f"iteration, then saving (again to stop at once)", file=sys.stderr)
            return
        self.previous, previous = {}, self.previous
        for sig, handler in previous.items():  # a third signal during the unwinding takes its default
            signal.signal(sig, handler)
        checkpoint = latest_checkpoint(self.run_dir)
        if checkpoint is not None:
            hint = f"`--resume` continues from {checkpoint.name}"
        elif (self.run_dir / "metrics.jsonl").exists():
            hint = "no checkpoint yet, so `--resume` starts the run over"
        else:
            hint = "nothing was written yet, so the same command starts the run"
        raise Stopped(f"stopped at once; {hint}", signum)

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def progress(iterations: range, stop: Stop, heldout):
    """The iterations under a progress bar (reward and held-out pass@1), ending after a stop request."""
    from tqdm import tqdm

    bar = tqdm(iterations, initial=iterations.start, total=iterations.stop, desc="rl", dynamic_ncols=True)
    stop.in_loop = True
    try:
        for iteration in bar:
            yield iteration
            bar.set_postfix(heldout=f"{heldout():.2f}")
            if stop.signum:
                break
    finally:
        stop.in_loop = False
        bar.close()


@contextlib.contextmanager
def run_lock(run_dir: Path):
    """One process per run directory: an flock on run.lock, which the kernel releases however the holder ends."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / "run.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(f"run lock: {run_dir} is in use by another run; wait for it or pass another --name") from None
    try:
        yield
    finally:
        os.close(fd)


# --- metrics.jsonl ---------------------------------------------------------------------------------------------

def read_metrics(run_dir: Path) -> list[dict]:
    """The records of run_dir/metrics.jsonl; a last line cut off by a kill (no newline yet) is dropped."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    lines = path.read_text(errors="replace").split("\n")  # the last item follows the last newline
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise ValueError(f"metrics: {path}:{number} is not a JSON record; repair or delete that line") from None
    return records


class MetricsLog:
    """Appends one JSON record per line, flushed at once. On resume it first keeps only what the checkpoint it
    resumes from had seen, so nothing is lost or repeated. write=False (FSDP ranks but 0) keeps them in memory."""

    def __init__(self, run_dir: Path, keep_until_iteration: int | None = None, write: bool = True):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.records = []
        if keep_until_iteration is not None:
            self.records = [r for r in read_metrics(run_dir) if r["iteration"] < keep_until_iteration
                            or (r["kind"] == "eval" and r["iteration"] == keep_until_iteration)]
            if write:
                write_text_atomic(self.path, "".join(json.dumps(r) + "\n" for r in self.records))
        self.file = open(self.path, "a") if write else None

    def write(self, record: dict) -> None:
        record = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()}
        self.records.append(record)
        if self.file is not None:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()

    def last_eval(self) -> dict | None:
        return next((r for r in reversed(self.records) if r["kind"] == "eval"), None)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


# --- the terminal ----------------------------------------------------------------------------------------------

class Unread:
    """sys.stdout / sys.stderr whose writes stop failing once nobody reads them.

    `python train.py | tee log` and Ctrl-C: tee ends too, and the next print would raise BrokenPipeError inside
    the iteration being finished, before the save. The first failed write points the descriptor at /dev/null.
    """

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError:
            self.lose_reader()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError:
            self.lose_reader()

    def lose_reader(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())  # the flush at exit goes there too
            os.close(devnull)
            self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def run_command(main) -> None:
    """main() with the exit statuses above; a ValueError is a refusal, printed in one line."""
    sys.stdout, sys.stderr = Unread(sys.stdout), Unread(sys.stderr)
    try:
        main()
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt as stop:  # Stopped, or a bare Ctrl-C while the imports load
        print(str(stop) or "Ctrl-C: stopped before the run started", file=sys.stderr)
        raise SystemExit(getattr(stop, "exit_code", 130)) from None
