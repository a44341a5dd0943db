"""What train.py's messages and signals do when the terminal or the pipe they go to is gone (run/terminal.py,
run/session.StopRequest); whole runs stopped through a dead pipe are in tests/run/test_stops.py."""

import io
import os
import signal

import pytest

from nano_respo.run.session import StopRequest, Stopped
from nano_respo.run.terminal import OutputThatOutlivesItsReader


def test_output_whose_reader_exited_drops_every_later_message_instead_of_raising():
    read_end, write_end = os.pipe()
    stream = io.TextIOWrapper(io.FileIO(write_end, "w"), write_through=False)
    output = OutputThatOutlivesItsReader(stream)
    output.write("read\n")
    output.flush()
    assert os.read(read_end, 100) == b"read\n"
    os.close(read_end)  # the reader exits (Python ignores SIGPIPE, so the write fails with EPIPE)
    with pytest.raises(BrokenPipeError):
        stream.write("unguarded\n")
        stream.flush()
    output.write("lost\n")
    output.flush()
    assert output.reader_gone
    print("after", file=output)
    output.writelines(["and", "more"])
    stream.close()  # the buffer's last flush, at exit, goes to /dev/null


def test_a_lost_pipe_or_terminal_asks_the_loop_to_stop_once_and_never_counts_as_a_second_ctrl_c():
    with StopRequest() as stop:
        stop.finish_iteration = True
        for _ in range(3):  # a dead pipe signals at every write
            os.kill(os.getpid(), signal.SIGPIPE)
        os.kill(os.getpid(), signal.SIGHUP)
        assert stop.requested and stop.signum == signal.SIGPIPE and not stop.stopping
        with pytest.raises(Stopped) as stopped:  # the user's Ctrl-C still stops at once
            os.kill(os.getpid(), signal.SIGINT)
    assert str(stopped.value) == "Ctrl-C: stopped at once; nothing was saved"
    assert stopped.value.exit_code == 130


def test_a_run_started_under_nohup_keeps_ignoring_sighup():
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with StopRequest():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    finally:
        signal.signal(signal.SIGHUP, previous)
