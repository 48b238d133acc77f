"""The cube built per window of iterations equals the cube built in one pass.

``build_cube`` runs its 10M-row steps per window of iterations (``WINDOW_ROWS`` GPU rows
each) and merges the parts. With tiny windows (1 and 7 rows: an edge between nearly every
iteration), every frame must equal the one-window build exactly: a GPU interval across a
window edge lost or counted twice, a (group, iteration) key split, or a part put out of
order changes a frame. The exports hold kernels running past iteration ends (rich_db's
``long_kernel``), two processes on two GPUs, idle GPUs, unassociated work and host ranges.
"""

import itertools
import threading

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.aggregate import aggregate
from jlprof.engine.aggregate.aggregate import build_cube, combine, iteration_windows
from jlprof.engine.analysis import Analysis
from jlprof.engine.read.read import read_trace
from tests.fixtures.loops import small_training_export
from tests.fixtures.scenarios import KEY_NODE, real_data_dir, rich_db

from .frames import call, kernel, make_trace, rng
from .interrupts import interrupt_beside_slow_work

FRAMES = ("time_iter", "op_iter", "kernel_iter", "group_iter")


def _exports(tmp_path):
    yield rich_db().write(tmp_path / "rich.sqlite"), KEY_NODE
    yield small_training_export(tmp_path / "loop.sqlite", steps=7), "optimizer_step"
    two_gpus = real_data_dir() / "nsysai-fastvideo-wan-train-fsdp-2gpu"
    for path in sorted(two_gpus.glob("*.sqlite")):
        yield path, "aten::add"  # 2 processes, 2 GPUs


def _frames(a: Analysis) -> dict:
    cube = build_cube(a.correlated, a.metrics, a.cube.iterations)
    out = {n: getattr(cube, n) for n in FRAMES}
    out["inst_iter"], out["gpu_iter"] = cube.inst_iter, cube.gpu_iter
    return out


@pytest.mark.parametrize("rows", [1, 7])
def test_small_windows_give_the_one_pass_frames(tmp_path, monkeypatch, rows):
    checked = 0
    for path, key in _exports(tmp_path):
        a = Analysis(read_trace(path), key_node=key)
        it = a.cube.iterations
        assert it.count > 2, path  # the key node splits the trace
        one = _frames(a)
        assert len(iteration_windows(one["gpu_iter"], it.count)) == 1
        default = aggregate.WINDOW_ROWS
        monkeypatch.setattr(aggregate, "WINDOW_ROWS", rows)
        windows = iteration_windows(one["gpu_iter"], it.count)
        assert len(windows) > 2, path
        # consecutive ranges covering every iteration once
        assert windows[0][0] == 0 and windows[-1][1] == it.count
        assert all(b0 == a1 for (_, b0), (a1, _) in itertools.pairwise(windows))
        got = _frames(a)
        monkeypatch.setattr(aggregate, "WINDOW_ROWS", default)
        for n in FRAMES:
            pd.testing.assert_frame_equal(got[n], one[n], check_exact=True, obj=f"{path} {n}")
        for n in ("inst_iter", "gpu_iter"):
            assert np.array_equal(got[n], one[n]), (path, n)
        # the layouts the windowed build caches answer range queries like the one-pass ones
        lo, hi = 1, it.count - 2
        pd.testing.assert_frame_equal(
            combine(got["op_iter"], "op", lo, hi), combine(one["op_iter"], "op", lo, hi)
        )
        pd.testing.assert_frame_equal(
            combine(got["kernel_iter"], ["kernel", "op"], lo, hi),
            combine(one["kernel_iter"], ["kernel", "op"], lo, hi),
        )
        assert one["time_iter"]["gpu_busy"].sum() > 0
        checked += 1
    assert checked == 3


def test_a_kernel_across_window_edges_is_clipped_into_each_iteration(monkeypatch):
    # iterations [5, 100), [100, 200), [200, 600): a kernel from 50 to 500 crosses both edges
    t = make_trace(
        gpu=[kernel(50, 500, 1), kernel(120, 130, 2), kernel(250, 260, 3)],
        api=[call(10, 20, 1), call(110, 115, 2), call(210, 215, 3)],
        nvtx=[rng("fwd", 5, 30), rng("global_step", 90, 100), rng("fwd", 105, 190),
              rng("global_step", 195, 200), rng("fwd", 205, 600)],
    )  # fmt: skip
    a = Analysis(t, key_node="global_step")
    monkeypatch.setattr(aggregate, "WINDOW_ROWS", 1)
    cube = build_cube(a.correlated, a.metrics, a.cube.iterations)
    assert len(iteration_windows(cube.gpu_iter, 3)) == 3
    assert a.cube.iterations.bounds_ns.tolist() == [5, 100, 200, 600]
    busy = cube.time_iter["gpu_busy"].to_numpy()
    assert busy[:3].tolist() == [50, 100, 300]  # 50..100, 100..200, 200..500


@pytest.mark.parametrize("sort_rows", [None, 1, 97])  # rows sorted a slice at a time
@pytest.mark.parametrize("n_it", [1, 3, 40, 600])  # 600: over 255 windows
def test_window_rows_are_each_windows_rows_in_row_order(monkeypatch, n_it, sort_rows):
    """One sort for every window gives what a scan per window gives, rows outside every
    window (before the first iteration, past the last) in none; the same when the rows are
    sorted by slices (``SORT_ROWS``), and as 32-bit row indices."""
    if sort_rows is not None:
        monkeypatch.setattr(aggregate, "SORT_ROWS", sort_rows)
    it = np.random.default_rng(n_it).integers(-2, n_it + 2, size=2000)
    for rows in (1, 50, 400):
        windows = aggregate.row_windows(np.bincount(np.clip(it, 0, n_it - 1)), rows)
        got = aggregate._window_rows(it, windows)
        if len(windows) == 1:
            assert got == [None]
            continue
        assert len(got) == len(windows)
        for (a, b), g in zip(windows, got, strict=True):
            np.testing.assert_array_equal(g, np.flatnonzero((it >= a) & (it < b)))
            assert g.dtype == np.int32


@pytest.mark.parametrize("sort_rows", [None, 1, 97])
@pytest.mark.parametrize("n_windows", [1, 2, 40, 300])  # 300: over 255 windows
def test_overlap_rows_are_the_rows_each_window_of_time_overlaps_in_row_order(
    monkeypatch, n_windows, sort_rows
):
    """Two binary searches and one sort give what a scan per window gives: every interval
    that overlaps a window's span (``start < hi`` and ``end > lo``), in row order, intervals
    across edges in every window they reach, empty and inverted intervals by the same rule."""
    if sort_rows is not None:
        monkeypatch.setattr(aggregate, "SORT_ROWS", sort_rows)
    rng = np.random.default_rng(n_windows)
    edges = np.sort(rng.choice(np.arange(-50, 20_000), size=n_windows + 1, replace=False))
    start = rng.integers(-100, 20_100, size=5000)
    length = rng.integers(0, 3000, size=5000) * (rng.random(5000) < 0.9)  # 10 % empty
    end = start + length - rng.integers(0, 5, size=5000) * (rng.random(5000) < 0.05)
    got = aggregate._overlap_rows(start, end, edges)
    if n_windows == 1:
        assert got == [None]
        return
    assert len(got) == n_windows
    across = 0
    for w, rows in enumerate(got):
        want = np.flatnonzero((start < edges[w + 1]) & (end > edges[w]))
        np.testing.assert_array_equal(rows, want)
        across += int(np.count_nonzero(start[rows] < edges[w]))
    assert across > 0  # some intervals reached windows after the one they start in


@pytest.mark.parametrize(("rows", "thread_rows"), [(7, None), (None, None), (None, 0)])
def test_group_partials_built_beside_the_cube_equal_the_ones_built_on_use(
    tmp_path, monkeypatch, rows, thread_rows
):
    """``build_cube(groups=True)`` builds the group-node partials in its second thread (past
    ``THREAD_GPU_ROWS``: in its own, after the rest); they must be the frame the lazy build
    gives, windows or not."""
    if rows is not None:
        monkeypatch.setattr(aggregate, "WINDOW_ROWS", rows)
    if thread_rows is not None:
        monkeypatch.setattr(aggregate, "THREAD_GPU_ROWS", thread_rows)
    ran_in = []  # the thread each group-node build ran in
    group_iter = aggregate._group_iter

    def recorded(*args):
        ran_in.append(threading.current_thread().name)
        return group_iter(*args)

    monkeypatch.setattr(aggregate, "_group_iter", recorded)
    checked = 0
    for path, key in _exports(tmp_path):
        a = Analysis(read_trace(path), key_node=key)
        it = a.cube.iterations
        ran_in.clear()
        beside = build_cube(a.correlated, a.metrics, it, groups=True)
        assert ran_in == ["MainThread" if thread_rows == 0 else "jlprof-cube"]
        assert beside._group_iter is not None  # built, not left to first use
        on_use = build_cube(a.correlated, a.metrics, it)
        assert on_use._group_iter is None
        pd.testing.assert_frame_equal(beside.group_iter, on_use.group_iter, check_exact=True)
        for n in ("time_iter", "op_iter", "kernel_iter"):
            pd.testing.assert_frame_equal(getattr(beside, n), getattr(on_use, n))
        assert len(beside.group_iter) > 0
        checked += 1
    assert checked == 3


def test_a_failing_cube_step_waits_for_the_second_thread(tmp_path, monkeypatch):
    """An error (or Ctrl-C) in the cube's own steps ends the call only once its second thread
    (time partition, group-node partials) has ended too: nothing keeps computing on the trace
    behind the caller's back."""
    path = small_training_export(tmp_path / "loop.sqlite", steps=7)
    a = Analysis(read_trace(path), key_node="optimizer_step")
    ended = interrupt_beside_slow_work(monkeypatch, aggregate, "_group_iter", "_op_iter")
    with pytest.raises(KeyboardInterrupt):
        build_cube(a.correlated, a.metrics, a.cube.iterations, groups=True)
    assert ended.is_set()
    assert not [t for t in threading.enumerate() if t.name == "jlprof-cube"]
