"""The work pass, window by window of API calls, equals the whole-trace correlation.

Windows of 1, 7 and 1000 calls cut nearly every range's work apart: a call attributed to
the wrong instance, an unassociated instance numbered out of order, a GPU union counted
twice or lost across an edge, or a sum split wrong changes a compared array. The traces
hold unassociated calls and GPU work, graph-like launches (several GPU rows per call),
overlapping GPU work on several streams, two processes and every real export.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.aggregate.aggregate import instance_metrics
from jlprof.engine.correlate.correlate import NONE, correlate
from jlprof.engine.correlate.ranges import range_pass
from jlprof.engine.read.read import read_trace
from jlprof.engine.windowed.windowed import Window, WorkPass
from tests.fixtures.loops import small_training_export
from tests.fixtures.scenarios import cpu_only_db, real_traces, rich_db

METRICS = ("gpu_ns", "api_ns", "overhead_ns", "idle_ns", "tc_gpu_ns", "kernel_ns", "n_gpu")


def windows_of(trace, c, calls: int, it=None) -> list[Window]:
    """The windows of ``calls`` API calls each (rows in order), with the GPU rows they
    launched (the one-pass launching calls) and the GPU rows no call launched, by their
    start. ``it``: windows of whole iterations instead (calls by their start's iteration,
    ``calls`` iterations a window), as the iteration report needs them."""
    api, gpu = trace.api, trace.gpu
    n_api = len(api)
    a_start = api["start_ns"].to_numpy(np.int64)
    g_start = gpu["start_ns"].to_numpy(np.int64)
    g_api = c.gpu["api"].to_numpy(np.int64)
    if it is None:
        edges = np.append(np.arange(0, n_api, calls), n_api) if n_api else np.array([0, 0])
        k = len(edges) - 1
        first = a_start[edges[:-1]] if n_api else np.zeros(1, np.int64)
        by_start = np.clip(np.searchsorted(first, g_start, side="right") - 1, 0, k - 1)
        a_win = np.searchsorted(edges, np.arange(n_api), side="right") - 1
    else:
        k = -(-it.count // calls)
        a_win = it.of(a_start) // calls
        by_start = it.of(g_start) // calls
    g_win = np.where(g_api >= 0, a_win[np.maximum(g_api, 0)] if n_api else 0, by_start)
    big = np.iinfo(np.int64).max
    low = np.full(k, big)
    np.minimum.at(low, a_win, a_start)
    np.minimum.at(low, g_win, g_start)
    after = np.minimum.accumulate(low[::-1])[::-1]  # earliest start of window j or later
    isolated = c.gpu["isolated"].to_numpy(bool)
    out = []
    for j in range(k):
        a_rows = np.flatnonzero(a_win == j)
        g_rows = np.flatnonzero(g_win == j)
        out.append(
            Window(
                api=api.iloc[a_rows].reset_index(drop=True),
                gpu=gpu.iloc[g_rows].reset_index(drop=True),
                api_index=a_rows,
                gpu_index=g_rows,
                isolated=isolated[g_rows],
                next_start_ns=int(after[j + 1]) if j + 1 < k else big,
            )
        )
    return out


def run_windows(trace, c, calls: int):
    """The work pass over the windows; the per-row results gathered into global arrays."""
    wp = WorkPass(range_pass(c.nvtx, None))
    a_inst = np.full(len(trace.api), -99, np.int64)
    g_api = np.full(len(trace.gpu), -99, np.int64)
    g_inst = np.full(len(trace.gpu), -99, np.int64)
    share = np.full(len(trace.gpu), -99, np.int64)
    for w in windows_of(trace, c, calls):
        r = wp.add(w)
        a_inst[w.api_index] = r.api_inst
        g_api[w.gpu_index] = r.gpu_api
        g_inst[w.gpu_index] = r.gpu_inst
        share[w.gpu_index] = r.api_share_ns
    res = wp.finish()
    return res, res.resolve(a_inst), g_api, res.resolve(g_inst), share


def _traces(tmp_path):
    yield read_trace(rich_db().write(tmp_path / "rich.sqlite"))
    yield read_trace(cpu_only_db().write(tmp_path / "cpu.sqlite"))
    yield read_trace(small_training_export(tmp_path / "loop.sqlite", steps=5))
    for path in real_traces():
        yield read_trace(path)


def check_equal(trace, calls: int) -> None:
    c = correlate(trace)
    m = instance_metrics(c)
    res, a_inst, g_api, g_inst, share = run_windows(trace, c, calls)
    src = trace.source
    np.testing.assert_array_equal(a_inst, c.api["inst"].to_numpy(np.int64), err_msg=f"{src}")
    np.testing.assert_array_equal(g_api, c.gpu["api"].to_numpy(np.int64), err_msg=f"{src}")
    np.testing.assert_array_equal(g_inst, c.gpu["inst"].to_numpy(np.int64), err_msg=f"{src}")
    np.testing.assert_array_equal(share, c.gpu["api_share_ns"].to_numpy(np.int64))
    n_r = len(c.nvtx)
    syn = c.inst.iloc[n_r:]
    assert res.n_un_api + len(res.un_gpu_rank) == len(syn), src
    for col in ("start_ns", "end_ns", "cpu_ns", "global_tid"):
        np.testing.assert_array_equal(
            getattr(res, col), syn[col].to_numpy(np.int64), err_msg=f"{src} {col}"
        )
    for name in METRICS:
        got, want = getattr(res.metrics, name), getattr(m, name)
        np.testing.assert_array_equal(got, want, err_msg=f"{src} {name}")
        assert got.dtype == want.dtype, (src, name)
    # the synthetic instances' names: the ops correlate gives them
    ops = c.ops["op_type"].to_numpy(object)
    inst_op = c.inst["op"].to_numpy(np.int64)[n_r:]
    names = (
        np.concatenate(
            [
                trace.api["name"].cat.categories.to_numpy(object)[res.un_api_name],
                trace.gpu["name"].cat.categories.to_numpy(object)[res.un_gpu_name],
            ]
        )
        if len(syn)
        else np.zeros(0, object)
    )
    np.testing.assert_array_equal(ops[inst_op].astype(str), names.astype(str))


@pytest.mark.parametrize("calls", [1, 7, 1000])
def test_windows_give_the_whole_trace_correlation(tmp_path, calls):
    for trace in _traces(tmp_path):
        check_equal(trace, calls)


def test_the_union_carries_overlapping_work_across_windows(tmp_path):
    """A range whose overlapping GPU work (two streams) is launched from two windows: its
    idle time needs the union of both windows' work, not the sum of their unions."""
    from .frames import call, kernel, make_trace, rng

    trace = make_trace(
        nvtx=[rng("step", 0, 1000)],
        api=[call(10, 20, 1), call(30, 40, 2)],
        gpu=[kernel(100, 400, 1, stream=7), kernel(200, 500, 2, stream=8)],
    )
    c = correlate(trace)
    assert not c.gpu["isolated"].any()
    for calls in (1, 2):
        res, *_ = run_windows(trace, c, calls)
        assert res.metrics.idle_ns[0] == instance_metrics(c).idle_ns[0] == 0
        assert res.metrics.gpu_ns[0] == 600
    assert NONE == -1


def test_a_ranges_gpu_work_far_past_its_start_is_exact(tmp_path):
    """A range whose GPU work runs seconds after it starts (offsets past int32 ns): its first
    and last GPU times, kept as offsets from its start, widen to int64 and its idle time is
    still the whole correlation's, whatever the windows."""
    from .frames import call, kernel, make_trace, rng

    s = 3_000_000_000  # 3 s: past int32
    trace = make_trace(
        nvtx=[rng("step", 0, 4 * s), rng("short", 10, 2_000)],
        api=[call(20, 30, 1), call(40, 50, 2), call(100, 110, 3)],
        gpu=[kernel(200, 300, 1), kernel(s, s + 500, 2), kernel(400, 900, 3)],
    )
    c = correlate(trace)
    want = instance_metrics(c)
    assert want.idle_ns.max() > np.iinfo(np.int32).max
    for calls in (1, 2, 3):
        res, *_ = run_windows(trace, c, calls)
        for name in METRICS:
            np.testing.assert_array_equal(getattr(res.metrics, name), getattr(want, name))


def keyed_exports(tmp_path, real: int | None = None):
    """(export, key node): fixtures and the two-GPU FSDP trace split by a key node, then
    the real traces whole (the first ``real`` of them)."""
    from tests.fixtures.scenarios import KEY_NODE, real_data_dir

    yield rich_db().write(tmp_path / "rich.sqlite"), KEY_NODE
    yield small_training_export(tmp_path / "loop.sqlite", steps=7), "optimizer_step"
    for p in sorted((real_data_dir() / "nsysai-fastvideo-wan-train-fsdp-2gpu").glob("*.sqlite")):
        yield p, "aten::add"
    for p in real_traces()[:real]:
        yield p, None


def windowed_analysis(trace, key, calls: int, lo: int | None = None, hi: int | None = None):
    """A command's Analysis (iterations ``lo..hi``) whose correlation and cube came from the
    windows (the CLI's windowed path: the cube's GPU figures summed window by window), and
    the whole-trace one."""
    from jlprof.engine.analysis import Analysis
    from jlprof.engine.windowed.cube_parts import CubeParts
    from jlprof.engine.windowed.windowed import assemble
    from jlprof.engine.windowed.windowed_run import ranges_correlated

    one = Analysis(trace, key_node=key, iter_start=lo, iter_stop=hi, range_only=True)
    c, it = one.correlated, one.iterations
    ranges = range_pass(c.nvtx, None)
    c_r = ranges_correlated(trace, ranges)
    wp = WorkPass(ranges, iterations=it)
    parts = CubeParts(
        it,
        (one.iter_start, one.iter_stop),
        ranges=ranges,
        range_op=wp.range_op,
        range_path=c_r.inst["path"].to_numpy(),
        paths=c_r.paths,
        small=trace,
        n_gpu=len(trace.gpu),
        gpu_names=trace.gpu["name"].cat.categories,
    )
    for w in windows_of(trace, c, calls):
        parts.add(wp.add(w).rows)
    c2, m2 = assemble(trace, c.nvtx, wp)
    parts.finish(wp.op_of_keys(c2.ops, trace.gpu["name"].cat.categories))
    win = Analysis(
        trace,
        key_node=key,
        iter_start=lo,
        iter_stop=hi,
        correlated=(c2, m2),
        range_only=True,
        parts=parts,
    )
    return one, win


@pytest.mark.parametrize("calls", [7, 1000])
def test_the_windowed_correlation_gives_the_same_cube_and_reports(tmp_path, calls):
    from jlprof.reports import catalog

    for path, key in keyed_exports(tmp_path):
        trace = read_trace(path)
        n_it = iteration_count(trace, key)
        for lo, hi in {(None, None), (min(1, n_it - 1), max(min(1, n_it - 1), n_it - 2))}:
            one, win = windowed_analysis(trace, key, calls, lo, hi)
            pd.testing.assert_frame_equal(win.correlated.ops, one.correlated.ops)
            pd.testing.assert_frame_equal(win.correlated.paths, one.correlated.paths)
            for col in win.correlated.inst.columns:
                pd.testing.assert_series_equal(win.correlated.inst[col], one.correlated.inst[col])
            for name in ("op_iter", "kernel_iter", "time_iter", "group_iter"):
                pd.testing.assert_frame_equal(getattr(win.cube, name), getattr(one.cube, name))
            assert len(win.correlated.gpu) == 0  # no GPU row outlived its window
            assert win.gpu_labels == one.gpu_labels
            pd.testing.assert_frame_equal(win.kernel_flags, one.kernel_flags)
            reps = ["summary", "detail", "kernel", "tensor", "op_type", "group_node"]
            if one.mode == "simple":  # PyTorch's expert checks read every call (not windowed)
                reps.append("expert_systems")
            for rep in reps:
                pd.testing.assert_frame_equal(
                    catalog.report(win, rep), catalog.report(one, rep), obj=f"{path} {rep}"
                )


def iteration_count(trace, key) -> int:
    """The key node's iterations in ``trace``."""
    from jlprof.engine.analysis import Analysis

    return Analysis(trace, key_node=key, range_only=True).iterations.count


@pytest.mark.parametrize("iters", [1, 3])
def test_windows_of_whole_iterations_give_the_iteration_report(tmp_path, iters):
    """The iteration report written window by window (each window every GPU row of its
    iterations, sorted on its own) is the one-pass report, for the whole range and a part."""
    from jlprof.engine.analysis import Analysis
    from jlprof.reports import tables

    for path, key in keyed_exports(tmp_path, real=2):
        trace = read_trace(path)
        one = Analysis(trace, key_node=key)
        c, it = one.correlated, one.iterations
        last = it.count - 1
        for lo, hi in {(0, last), (min(1, last), max(min(1, last), last - 1))}:
            wp = WorkPass(range_pass(c.nvtx, None), iterations=it)
            parts = []
            for w in windows_of(trace, c, iters, it):
                r = wp.add(w)
                ops = wp.report_ops(trace.gpu["name"].cat.categories)
                g = w.gpu.assign(uses_tc=r.uses_tc)
                parts.append(
                    tables.iteration_window(
                        ops,
                        r.gpu_op,
                        r.gpu_iter,
                        g,
                        w.api,
                        r.gpu_call,
                        lo,
                        hi,
                        one.mode == "pytorch",
                    )
                )
            got = pd.concat(parts, ignore_index=True)
            want = tables.iteration(one, lo, hi)
            for col in want.columns:  # values (CSV/JSON); categories' order may differ
                np.testing.assert_array_equal(
                    np.asarray(got[col], object),
                    np.asarray(want[col], object),
                    err_msg=f"{path} {lo}..{hi} {col}",
                )
            assert list(got.columns) == list(want.columns)
