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

import pandas as pd
import pytest

from jlprof.engine.windowed import windows
from jlprof.engine.windowed.windowed_run import WindowedRun
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


def test_what_the_run_lets_go_early_comes_back_whole(tmp_path) -> None:
    """The run drops each range's label, thread and (when no op call nests in another) its
    emit_nvtx top before the windows, and each GPU row's launch window; the assembled
    instances and ops are still the whole correlation's, threads of a start/end range ended
    on another thread (the rich scenario's ``handoff``) included."""
    from jlprof.engine.correlate.correlate import correlate
    from jlprof.engine.read.read import read_trace
    from tests.fixtures.scenarios import KEY_NODE, rich_db

    db = rich_db().write(tmp_path / "rich.sqlite")
    whole = correlate(read_trace(db), mode="simple")
    r = WindowedRun(db, key_node=KEY_NODE, mode="simple", calls_per_window=1000)
    assert r.ranges.label is None and r.ranges.global_tid is None and r.plan.window is None
    assert (r.ranges.lanes.lane < 0).any()  # the hand-off range: its thread kept aside
    # the NVTX rows went once the range pass was done, and their texts with them (a PyTorch
    # run has one per call): the frame keeps its columns and kinds, not its categories
    nvtx = r.small.nvtx
    assert nvtx.empty and list(nvtx.columns) == list(read_trace(db).nvtx.columns)
    assert len(nvtx["text"].cat.categories) == 0 and len(nvtx["domain"].cat.categories) == 0
    for _ in r.windows():
        pass
    _trace, c, _m = r.finish()
    assert c.ops.equals(whole.ops)
    pd.testing.assert_frame_equal(c.inst, whole.inst)


def test_the_range_texts_go_once_the_range_pass_is_done(tmp_path, monkeypatch) -> None:
    """From finding the iterations on, nothing of the run holds the NVTX frame or its texts'
    categories (at a 10M-kernel PyTorch run: every distinct text, 0.36 GB of Arrow strings,
    which the run once held through its launch plan and, by a local of the window loop, to
    the last window); ``on_read`` is given them first (DLProf's database writes them from
    there)."""
    import gc
    import weakref

    from jlprof.engine.windowed import windowed_run
    from tests.fixtures.scenarios import KEY_NODE, rich_db

    db = rich_db().write(tmp_path / "rich.sqlite")
    got, alive = [], []

    def find(*a, real=windowed_run.find_iterations, **k):
        gc.collect()
        alive.append(got[0]() is not None)
        return real(*a, **k)

    monkeypatch.setattr(windowed_run, "find_iterations", find)
    r = WindowedRun(
        db,
        key_node=KEY_NODE,
        mode="simple",
        calls_per_window=1000,
        on_read=lambda small: got.append(weakref.ref(small.nvtx["text"].cat.categories)),
    )
    assert len(got) == 1 and alive == [False]
    for _ in r.windows():
        pass
    _trace, c, _m = r.finish()
    assert len(c.inst)
