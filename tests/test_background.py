"""``jlprof.background``: work in a thread while the caller goes on, stopped within one write
when the caller gives up, its errors raised in the caller."""

from __future__ import annotations

import threading

import pytest

from jlprof import background, outputs


def test_in_thread_returns_the_work_s_value_from_another_thread():
    seen = []

    def work(check):
        check()
        seen.append(threading.current_thread().name)
        return 42

    job = background.InThread(work, "jlprof-test")
    assert job.wait() == 42
    assert seen == ["jlprof-test"] != [threading.current_thread().name]


def test_in_thread_raises_the_work_s_error_in_the_caller():
    def work(_check):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        background.InThread(work, "jlprof-test").wait()


def test_cancel_stops_the_work_at_its_next_write_and_leaves_no_file(tmp_path):
    """The work writes through ``Checked``: after cancel() its next write raises
    ``Cancelled``, so ``written_file`` removes the temporary file and no target appears."""
    target = tmp_path / "big.bin"
    began, writes = threading.Event(), []

    def work(check):
        with outputs.written_file(target, background=True) as f:
            out = background.Checked(f, check)
            while True:
                out.write(b"x" * 1024)
                writes.append(1)
                began.set()

    job = background.InThread(work, "jlprof-test")
    assert began.wait(10)
    job.cancel()  # returns once the thread ended
    assert not job._thread.is_alive()
    assert len(writes) > 0
    assert not target.exists() and not list(tmp_path.iterdir())


def test_checked_passes_everything_else_to_the_file(tmp_path):
    calls = []
    with open(tmp_path / "f", "wb") as f:
        out = background.Checked(f, lambda: calls.append(1))
        out.write(b"ab")
        out.write(b"c")
        assert out.name == f.name and out.tell() == 3
    assert calls == [1, 1] and (tmp_path / "f").read_bytes() == b"abc"


def test_fed_work_gets_the_items_in_order_in_its_own_thread():
    got, names = [], set()

    def work(items, check):
        for item in items:
            check()
            names.add(threading.current_thread().name)
            got.append(item)
        return len(got)

    feed = background.Fed(work, "jlprof-fed", depth=1)
    for i in range(50):
        feed.put(i)
    assert feed.close() == 50
    assert got == list(range(50))
    assert names == {"jlprof-fed"}


def test_fed_raises_the_work_s_error_at_the_next_put_or_close():
    def work(items, _check):
        for item in items:
            if item == 3:
                raise OSError(28, "No space left on device")

    feed = background.Fed(work, "jlprof-fed", depth=1)
    with pytest.raises(OSError, match="No space left"):
        for i in range(1000):  # the producer does not wait forever on a dead consumer
            feed.put(i)
        feed.close()


def test_fed_cancel_stops_the_work_between_items():
    handled, started = [], threading.Event()

    def work(items, _check):
        for item in items:
            handled.append(item)
            started.set()

    feed = background.Fed(work, "jlprof-fed", depth=1)
    feed.put(0)
    assert started.wait(10)
    feed.cancel()
    assert not feed.job._thread.is_alive()
    assert handled == [0]
