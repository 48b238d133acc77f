"""``jlprof.outputs``' background work: a file written in a thread while the caller goes on,
stopped within one write when the caller gives up, its errors raised in the caller."""

from __future__ import annotations

import threading

import pytest

from jlprof import outputs


def test_in_thread_returns_the_work_s_value_from_another_thread():
    seen = []

    def work(check):
        check()
        seen.append(threading.current_thread().name)
        return 42

    job = outputs.InThread(work, "jlprof-test")
    assert job.wait() == 42
    assert seen == ["jlprof-test"] != [threading.current_thread().name]


def test_in_thread_raises_the_work_s_error_in_the_caller():
    def work(_check):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        outputs.InThread(work, "jlprof-test").wait()


def test_cancel_stops_the_work_at_its_next_write_and_leaves_no_file(tmp_path):
    """The work writes through ``Checked``: after cancel() its next write raises
    ``Cancelled``, so ``written_file`` removes the temporary file and no target appears."""
    target = tmp_path / "big.bin"
    began, writes = threading.Event(), []

    def work(check):
        with outputs.written_file(target, background=True) as f:
            out = outputs.Checked(f, check)
            while True:
                out.write(b"x" * 1024)
                writes.append(1)
                began.set()

    job = outputs.InThread(work, "jlprof-test")
    assert began.wait(10)
    job.cancel()  # returns once the thread ended
    assert not job._thread.is_alive()
    assert len(writes) > 0
    assert not target.exists() and not list(tmp_path.iterdir())


def test_checked_passes_everything_else_to_the_file(tmp_path):
    calls = []
    with open(tmp_path / "f", "wb") as f:
        out = outputs.Checked(f, lambda: calls.append(1))
        out.write(b"ab")
        out.write(b"c")
        assert out.name == f.name and out.tell() == 3
    assert calls == [1, 1] and (tmp_path / "f").read_bytes() == b"abc"
