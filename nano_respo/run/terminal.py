"""What train.py and eval.py do at the terminal around their work: the exit status, and output that outlives its
reader. Imports nothing heavy, so the entry points can use it before torch and transformers load.

Exit statuses (docs/training.md, "Exit statuses"):

    0         finished
    1         failed: an unexpected error, printed with its traceback
    2         refused: a flag, a value, a file it names or the run directory's state, in one line
    128 + N   stopped by signal N, the shell's convention: 130 Ctrl-C (SIGINT), 143 SIGTERM, 129 SIGHUP (the
              terminal closed), 141 SIGPIPE (the reader of the output exited); the last line says what
              `--resume` continues from
"""

from __future__ import annotations

import os
import signal
import sys

FINISHED, FAILED, REFUSED = 0, 1, 2


def stopped_status(signum: int) -> int:
    return 128 + signum


def signal_name(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


class OutputThatOutlivesItsReader:
    """sys.stdout or sys.stderr whose writes stop failing once nobody reads them.

    `python train.py 2>&1 | tee log` and Ctrl-C: the interrupt ends tee too, and the next message raises
    BrokenPipeError wherever it is written (in a signal handler mid-backward, say), which would end the run
    before it saves. A closed terminal fails writes with EIO the same way. The first failed write points the
    stream's descriptor at /dev/null: every later message, the flush at exit included, goes nowhere instead.
    """

    def __init__(self, stream):
        self.stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self.stream.write(text)
            except OSError:
                self.lose_reader()
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self.stream.flush()
            except OSError:
                self.lose_reader()

    def lose_reader(self) -> None:
        self.reader_gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
            self.stream.flush()  # the text that failed leaves the buffer, into /dev/null
        except (OSError, ValueError):  # a stream without a descriptor: its buffer is dropped at exit
            pass

    def __getattr__(self, name):  # fileno, isatty, encoding, ...: the stream's own
        return getattr(self.stream, name)


def run_command(main, stopped_at_start: str) -> None:
    """main() with train.py's exit statuses; its messages survive a dead pipe or terminal.

    A ValueError is a refusal, printed in one line. A KeyboardInterrupt is a stop: session.Stopped carries its
    message and status, a bare one (Ctrl-C while the imports load) prints stopped_at_start."""
    sys.stdout, sys.stderr = OutputThatOutlivesItsReader(sys.stdout), OutputThatOutlivesItsReader(sys.stderr)
    try:
        main()
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(REFUSED) from None
    except KeyboardInterrupt as stop:
        print(str(stop) or stopped_at_start, file=sys.stderr)
        raise SystemExit(getattr(stop, "exit_code", stopped_status(signal.SIGINT))) from None
