"""``group_iter``'s GPU figures accumulated window by window
(:mod:`jlprof.engine.windowed.group_parts`) equal the whole-trace cube's, frame for frame."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.correlate.ranges import range_pass
from jlprof.engine.windowed.group_parts import GroupParts, GroupPartsInexact
from jlprof.engine.windowed.windowed import GpuRows
from jlprof.engine.windowed.windowed_run import ranges_correlated
from tests.engine.gpu_rows import Streamed, stream, streams
from tests.fixtures.nsysdb import NsysDb


def parts_of(s: Streamed) -> GroupParts:
    """A :class:`GroupParts` made from the range pass alone, as the windowed run has it."""
    c1 = s.one.correlated
    ranges = range_pass(c1.nvtx, None)
    rc = ranges_correlated(c1.trace, ranges)
    return GroupParts(
        rc.paths,
        rc.inst["path"].to_numpy(),
        ranges.start_ns,
        s.one.iterations,
        ranges.ops,
        ranges.op_abs,
    )


def windowed_group_iter(
    s: Streamed, windows: list[GpuRows] | None = None, seen: list[int] | None = None
) -> pd.DataFrame:
    """The frame from the windows (``seen``: the carried rows after each window), read with
    an assembled correlation whose GPU rows are gone (the frame must not read them)."""
    gp = parts_of(s)
    for w in s.windows if windows is None else windows:
        gp.add(w, s.wp.gpu_names)
        carried = gp.carry.get("iter", np.zeros(0, np.int64))
        assert (carried >= gp.done).all()  # only rows of iterations still open are held
        if seen is not None:
            seen.append(len(carried))
    gp.finish()
    it = s.one.iterations
    c = dataclasses.replace(s.c, gpu=s.c.gpu.iloc[:0])
    return gp.group_iter(c, s.m, it, it.of(s.c.inst["start_ns"].to_numpy(np.int64)))


def split_iterations(windows: list[GpuRows]) -> int:
    """How many iterations have GPU rows in more than one window."""
    pairs = np.unique(
        np.concatenate([w.launch_iter * len(windows) + k for k, w in enumerate(windows)])
    )
    return int((np.bincount(pairs // len(windows)) > 1).sum())


def test_every_stream_gives_the_whole_trace_group_iter(tmp_path):
    split = carried = 0
    for _path, _key, _size, by, s in streams(tmp_path):
        seen: list[int] = []
        got = windowed_group_iter(s, seen=seen)
        pd.testing.assert_frame_equal(got, s.one.cube.group_iter)
        if by == "calls" and len(s.one.cube.group_iter):
            split += split_iterations(s.windows)
            carried += max(seen)
    assert split > 0 and carried > 0  # some iterations' work came in two windows, carried


def odd_export(path, call_takes_a_range_path: bool = False):
    """Two GPUs; a root range named like the unassociated op of kernel ``kx``, with a child
    (a group node) and crossing into the next iteration, launches ``ka`` (GPU 0) there: only
    the unassociated ``kx`` (GPU 1, overlapping ``ka`` in time) gives that work's (path,
    iteration) pair an instance. ``call_takes_a_range_path``: the same with an unassociated
    call (``cudaFree``) and a range named ``unassociated_cudaFree``."""
    db = NsysDb()
    db.gpu(cu_device=0, name="NVIDIA A100-SXM4-40GB")
    db.gpu(cu_device=1, name="NVIDIA A100-SXM4-40GB")
    p = db.process(pid=77, name="python")
    t, side, worker = p.thread(), p.thread(78, "side"), p.thread(79, "worker")
    for i in range(3):
        b = 1_000 + 10_000 * i
        t.push_pop("step", b, b + 8_000)
        t.launch("kmain", b + 100, b + 200, b + 300, b + 2_000)
    side.start_end("unassociated_kx", 500, 12_000)
    side.push_pop("inner", 600, 800)
    side.launch("ka", 11_500, 11_550, 11_600, 11_900, device=0)
    worker.launch("kx", 11_700, 11_750, 11_800, 12_200, device=1)
    if call_takes_a_range_path:
        side.start_end("unassociated_cudaFree", 13_000, 25_000)
        side.push_pop("inner2", 13_100, 13_200)
        side.launch("kb", 21_400, 21_450, 21_500, 21_700)
        worker.api_only("cudaFree", 21_450, 21_460)
    return db.write(path)


def one_device(windows: list[GpuRows]) -> list[GpuRows]:
    return [dataclasses.replace(w, device_id=np.zeros_like(w.device_id)) for w in windows]


@pytest.mark.parametrize("size,by", [(1, "iterations"), (1, "calls"), (2, "calls")])
def test_work_on_two_gpus_and_a_pair_only_unassociated_work_brings(tmp_path, size, by):
    s = stream(odd_export(tmp_path / "odd.sqlite"), "step", size, by)
    ref = s.one.cube.group_iter
    assert int(ref["gpu"].max()) == 700  # ka 300 ns on GPU 0 + kx 400 ns on GPU 1, overlapping
    pd.testing.assert_frame_equal(windowed_group_iter(s), ref)
    # the same work on one GPU would merge: a union across GPUs would not give the frame
    assert not windowed_group_iter(s, one_device(s.windows)).equals(ref)
    if by == "calls" and size == 1:
        assert split_iterations(s.windows) > 0


def test_a_pair_only_an_unassociated_call_brings_is_refused(tmp_path):
    s = stream(odd_export(tmp_path / "odd.sqlite", True), "step", 2, "calls")
    with pytest.raises(GroupPartsInexact, match="unassociated call"):
        windowed_group_iter(s)


def test_work_launched_before_an_earlier_horizon_is_refused(tmp_path):
    """A window that says every later launch comes after the end of the trace, when one does
    not: the iterations computed then were incomplete, and the next window says so."""
    s = stream(odd_export(tmp_path / "odd.sqlite"), "step", 1, "calls")
    big = np.iinfo(np.int64).max
    wrong = [dataclasses.replace(w, horizon_ns=big) for w in s.windows]
    with pytest.raises(GroupPartsInexact, match="horizon"):
        windowed_group_iter(s, wrong)


def test_what_only_the_windows_read_goes_and_the_frame_is_made_once(tmp_path):
    """Once the windows are in, the ranges' paths and pairs go; once the frame is made, the
    windows' parts go too (they were held through every report after the cube's frame), and
    a second frame is refused rather than made from nothing."""
    s = stream(odd_export(tmp_path / "odd.sqlite"), "step", 1, "calls")
    gp = parts_of(s)
    for w in s.windows:
        gp.add(w, s.wp.gpu_names)
    assert len(gp.parts) and len(gp.range_path) and len(gp.range_pairs)
    gp.finish()
    assert gp.range_path is None and gp.range_pairs is None
    it = s.one.iterations
    c = dataclasses.replace(s.c, gpu=s.c.gpu.iloc[:0])
    inst_iter = it.of(s.c.inst["start_ns"].to_numpy(np.int64))
    pd.testing.assert_frame_equal(gp.group_iter(c, s.m, it, inst_iter), s.one.cube.group_iter)
    assert gp.parts is None
    with pytest.raises(AssertionError, match="once"):
        gp.group_iter(c, s.m, it, inst_iter)
