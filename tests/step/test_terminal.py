"""What keeps a run alive around train.py's loop (nano_respo/runs.py): Stop and its signals, Unread for output whose
reader has gone, run_command's exit statuses. Whole runs stopped by signals, through a dead pipe and by kill -9
are in tests/run/test_stops.py."""

import io
import os
import signal

import pytest

from nano_respo.checkpoint import STATE_FILE, write_text_atomic
from nano_respo.runs import Stop, Stopped, Unread, run_command


def test_output_whose_reader_exited_drops_every_later_message_instead_of_raising():
    read_end, write_end = os.pipe()
    stream = io.TextIOWrapper(io.FileIO(write_end, "w"), write_through=False)
    output = Unread(stream)
    output.write("read\n")
    output.flush()
    assert os.read(read_end, 100) == b"read\n"
    os.close(read_end)  # the reader exits (Python ignores SIGPIPE, so the write fails with EPIPE)
    with pytest.raises(BrokenPipeError):  # what an unguarded stream does: the test can fail
        stream.write("unguarded\n")
        stream.flush()
    output.write("lost\n")
    output.flush()
    assert os.path.samestat(os.fstat(write_end), os.stat(os.devnull))  # the descriptor now writes to /dev/null
    print("after", file=output)
    output.writelines(["and", "more"])
    output.flush()
    stream.close()  # the buffer's last flush, at exit, goes to /dev/null too


@pytest.mark.parametrize("signum, name", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM"),
                                          (signal.SIGHUP, "SIGHUP")])
def test_in_the_loop_the_first_signal_asks_to_finish_and_a_second_stops_at_once(tmp_path, capsys, signum, name):
    with Stop(tmp_path) as stop:
        stop.in_loop = True
        os.kill(os.getpid(), signum)  # handled here, at the next bytecode: nothing raised
        assert stop.signum == signum
        said = capsys.readouterr().err
        assert said.startswith(f"{name}: finishing this iteration, then saving")
        assert name == "Ctrl-C" or "Ctrl-C" not in said
        with pytest.raises(Stopped) as stopped:
            os.kill(os.getpid(), signum)
    assert str(stopped.value) == f"{name}: stopped at once; nothing was written yet, so the same command starts the run"
    assert stopped.value.exit_code == 128 + signum


def test_outside_the_loop_the_first_signal_stops_at_once_naming_the_checkpoint_resume_takes(tmp_path):
    write_text_atomic(tmp_path / "latest", "checkpoints/iter-000003")
    (tmp_path / "checkpoints" / "iter-000003").mkdir(parents=True)
    (tmp_path / "checkpoints" / "iter-000003" / STATE_FILE).write_bytes(b"")
    with pytest.raises(Stopped) as stopped:
        with Stop(tmp_path):  # loading, the warm start, the first evaluation
            os.kill(os.getpid(), signal.SIGTERM)
    assert str(stopped.value) == "SIGTERM: stopped at once; `--resume` continues from iter-000003"
    assert stopped.value.exit_code == 143


def test_the_handlers_are_restored_when_the_run_ends(tmp_path):
    before = {sig: signal.getsignal(sig) for sig in Stop.SIGNALS}
    with Stop(tmp_path):
        assert all(signal.getsignal(sig) != before[sig] for sig in Stop.SIGNALS)
    assert {sig: signal.getsignal(sig) for sig in Stop.SIGNALS} == before
    with pytest.raises(Stopped):
        with Stop(tmp_path):
            os.kill(os.getpid(), signal.SIGINT)
    assert {sig: signal.getsignal(sig) for sig in Stop.SIGNALS} == before


def test_a_run_started_under_nohup_keeps_ignoring_sighup(tmp_path):
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with Stop(tmp_path):
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    finally:
        signal.signal(signal.SIGHUP, previous)


def failing(error):
    def main():
        raise error
    return main


@pytest.mark.parametrize("error, status, said", [
    (ValueError("lr: must be > 0, got -1"), 2, "error: lr: must be > 0, got -1"),
    (Stopped("stopped after iteration 2 of 4; `--resume` continues", signal.SIGTERM), 143,
     "SIGTERM: stopped after iteration 2 of 4; `--resume` continues"),
    (KeyboardInterrupt(), 130, "Ctrl-C: stopped before the run started"),
])
def test_run_command_exits_with_the_documented_status_and_one_line(error, status, said, monkeypatch):
    monkeypatch.setattr("sys.stdout", io.StringIO())  # run_command wraps both streams in Unread
    monkeypatch.setattr("sys.stderr", io.StringIO())
    import sys

    with pytest.raises(SystemExit) as stop:
        run_command(failing(error))
    assert stop.value.code == status
    assert sys.stderr.getvalue() == said + "\n"
    assert sys.stdout.getvalue() == ""
