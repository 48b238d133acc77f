"""The windowed run's window loop: window w + 1 is read in a thread while the caller works on
window w, and that thread never outlives the loop.

What is checked: the reads happen in the reader's own thread, one window ahead; a caller
that stops early (an exception in its loop, ``CarryBroken``) waits for the read in flight
and leaves no thread or connection behind; a window that cannot be read raises its error
when the caller reaches it, after every window before it was handed over whole.
"""

from __future__ import annotations

import threading
import time

import pytest

from jlprof.engine import windows
from jlprof.engine.windowed_run import WindowedRun
from jlprof.errors import InputError
from tests.fixtures.loops import small_training_export


def _readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("jlprof-window-read")]


@pytest.fixture
def run(tmp_path) -> WindowedRun:
    db = small_training_export(tmp_path / "loop.sqlite", steps=9)
    r = WindowedRun(db, key_node="optimizer_step", calls_per_window=3)
    assert r.n_windows >= 4
    return r


def test_the_next_window_is_read_ahead_in_the_readers_thread(run, monkeypatch) -> None:
    seen: list[tuple[int, str]] = []
    read = windows.WindowReader.read

    def spy(self, w):
        seen.append((w, threading.current_thread().name))
        return read(self, w)

    monkeypatch.setattr(windows.WindowReader, "read", spy)
    got = []
    for w, (win, _res) in enumerate(run.windows()):
        # the caller holds window w and asks for nothing: window w + 1 is read meanwhile
        want = list(range(min(w + 2, run.n_windows)))
        deadline = time.monotonic() + 10
        while [k for k, _ in seen] != want and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [k for k, _ in seen] == want
        got.append(len(win.api))
    assert [k for k, _ in seen] == list(range(run.n_windows))
    assert {name.rsplit("_", 1)[0] for _, name in seen} == {"jlprof-window-read"}
    assert sum(got) == run.plan.n_api
    assert not _readers()


def test_a_caller_that_stops_early_leaves_no_reader_behind(run, monkeypatch) -> None:
    closed = []
    close = windows.WindowReader.close

    def spy(self):
        closed.append(threading.current_thread().name)
        close(self)

    monkeypatch.setattr(windows.WindowReader, "close", spy)
    it = run.windows()
    next(it)
    assert _readers()  # reading window 1 while the caller holds window 0
    it.close()  # what an exception in the caller's loop does
    assert len(closed) == 1 and closed[0].startswith("jlprof-window-read")
    assert not _readers()


def test_a_window_that_cannot_be_read_fails_when_it_is_reached(run, monkeypatch) -> None:
    read = windows.WindowReader.read

    def broken(self, w):
        if w == 2:
            raise InputError("window 2 is damaged")
        return read(self, w)

    monkeypatch.setattr(windows.WindowReader, "read", broken)
    handed = []
    with pytest.raises(InputError, match="window 2 is damaged"):
        for w, _ in enumerate(run.windows()):
            handed.append(w)
    assert handed == [0, 1]
    assert not _readers()


def test_a_reader_that_cannot_open_leaves_no_thread(run, monkeypatch) -> None:
    def refused(self, plan):
        raise InputError("the export went away")

    monkeypatch.setattr(windows.WindowReader, "__init__", refused)
    with pytest.raises(InputError, match="went away"):
        next(run.windows())
    assert not _readers()


# ---- the plan's narrow reads, made while the NVTX ranges are read and nested


def _plan_readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("jlprof-plan-read")]


def test_the_plans_reads_run_beside_the_range_pass(tmp_path, monkeypatch) -> None:
    """The launch plan's narrow reads need no iterations: they run in a thread of their own
    from the start, and the plan cut from them is the one a plan made afterwards gives."""
    from jlprof.engine import windowed_run

    db = small_training_export(tmp_path / "loop.sqlite", steps=9)
    began: dict[str, float] = {}
    read_plan, range_pass = windows.read_plan, windowed_run.range_pass

    def spy_read(*a, **k):
        began["reads"] = time.monotonic()
        began["reads_thread"] = threading.current_thread().name
        return read_plan(*a, **k)

    def spy_ranges(*a, **k):
        # the reads began on their own thread before the ranges are nested
        deadline = time.monotonic() + 10
        while "reads" not in began and time.monotonic() < deadline:
            time.sleep(0.01)
        began["ranges"] = time.monotonic()
        return range_pass(*a, **k)

    monkeypatch.setattr(windows, "read_plan", spy_read)
    monkeypatch.setattr(windowed_run, "range_pass", spy_ranges)
    run = WindowedRun(db, key_node="optimizer_step", calls_per_window=3)
    assert began["reads"] <= began["ranges"]
    assert began["reads_thread"].startswith("jlprof-plan-read")
    after = windows.plan_windows(db, 3, cuts_ns=run.iterations.bounds_ns[1:-1])
    for name in ("window", "launched", "isolated", "window_start_ns", "gpu_order", "api_edges"):
        assert (getattr(run.plan, name) == getattr(after, name)).all(), name
    assert not _plan_readers()


def test_an_unsuitable_export_stops_the_plans_reads(tmp_path, monkeypatch) -> None:
    """When the range pass finds the export unsuitable (here a key node that is no range),
    the plan's reads stop at their next chunk and their thread is gone when the error
    reaches the caller."""
    from jlprof.engine.windowed_run import Unsuitable

    db = small_training_export(tmp_path / "loop.sqlite", steps=9)
    monkeypatch.setattr(windows, "CHUNK_ROWS", 1)  # a chunk per row: many chances to stop
    chunks = []
    frame = windows._Fetcher.frame

    def slow(self, q):
        chunks.append(q.table)
        time.sleep(0.01)
        return frame(self, q)

    monkeypatch.setattr(windows._Fetcher, "frame", slow)
    with pytest.raises(Unsuitable, match="not a range"):
        WindowedRun(db, key_node="no_such_op", calls_per_window=3)
    assert not _plan_readers()
    n = len(chunks)
    time.sleep(0.1)
    assert len(chunks) == n  # nothing reads on
    windows.read_plan(db)  # a whole read, for its count of chunks
    assert n < len(chunks) - n  # the stopped one read fewer: it did not run to the end


def test_read_plan_stops_when_told(tmp_path) -> None:
    db = small_training_export(tmp_path / "loop.sqlite", steps=3)
    stop = threading.Event()
    stop.set()
    with pytest.raises(windows.Stopped):
        windows.read_plan(db, stop=stop)
    reads = windows.read_plan(db)
    windows.plan_windows(db, 3, reads=reads)
    with pytest.raises(ValueError, match="spent"):
        windows.plan_windows(db, 3, reads=reads)
    with pytest.raises(ValueError, match="another export"):
        windows.plan_windows(tmp_path / "other.sqlite", 3, reads=windows.read_plan(db))
