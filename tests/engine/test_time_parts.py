"""The time partition window by window (:class:`jlprof.engine.windowed.time_parts.TimeParts`) equals
the whole-trace ``Cube.time_iter`` frame for frame, whatever the windows."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.aggregate import intervals
from jlprof.engine.aggregate.aggregate import _time_iter
from jlprof.engine.aggregate.iterations import Iterations
from jlprof.engine.correlate.ranges import range_pass
from jlprof.engine.windowed.time_parts import TimeParts
from jlprof.engine.windowed.windowed import GpuRows
from tests.engine.gpu_rows import stream, streams
from tests.fixtures.nsysdb import NsysDb
from tests.fixtures.scenarios import KEY_NODE, cpu_only_db

TC_KERNEL = "volta_h884gemm_256x128_ldg8_nn"


#: GpuRows fields the time partition does not read
UNREAD = ("name", "long_name", "inst", "op_key", "api_share_ns", "launch_iter")


def _parts(s) -> TimeParts:
    """What the windowed run passes: its range pass, the trace's GPUs and OS runtime calls."""
    r = range_pass(s.one.correlated.nvtx, None)
    trace = s.one.trace
    return TimeParts.of_ranges(
        s.one.iterations, trace.gpus, trace.osrt, r.start_ns, r.end_ns, r.lanes.parent, r.op, r.ops
    )


def _fed(s, carried: list[int] | None = None) -> pd.DataFrame:
    tp = _parts(s)
    for w in s.windows:
        tp.add(w)
        if carried is not None:
            carried.append(sum(len(p[0]) for p in tp.u.carry))
    return tp.time_iter()


def test_every_export_by_every_window_size(tmp_path):
    cases = 0
    for path, key, size, by, s in streams(tmp_path):
        got = _fed(s)
        try:
            pd.testing.assert_frame_equal(got, s.one.cube.time_iter)
        except AssertionError as e:
            raise AssertionError(f"{path.name} key={key} windows of {size} {by}") from e
        cases += 1
    assert cases >= 16


def _spanning_db() -> NsysDb:
    """GPU work on two streams that overlaps, runs across iteration bounds and long past its
    window's horizon; memory copies under kernels; data loading, file reads and calls outside
    every range on the host; two devices the export does not list, the larger id first seen
    earlier (device 9 from iteration 2, device 4 from iteration 4), and an idle listed GPU."""
    db = NsysDb()
    db.gpu(1, "NVIDIA A100-SXM4-40GB")
    db.gpu(0, "NVIDIA A100-SXM4-40GB")  # listed second: lanes follow the list, not the ids
    db.gpu(6, "NVIDIA A100-SXM4-40GB")  # idle
    t = db.process(11, "python").thread()
    step = 10_000
    for i in range(7):
        b = i * step
        t.push_pop(KEY_NODE, b, b + step - 100)
        t.push_pop("DataLoader.next", b + 10, b + 400)
        t.osrt("fread", b + 50, b + 700)
        t.api_only("cudaStreamSynchronize_v3020", b + 9_000, b + 9_700)  # inside the step
        t.launch(TC_KERNEL, b + 500, b + 600, b + 700, b + 2_000, device=0, stream=7)
        # overlaps the next kernel, and (every other step) runs two iterations on
        long_end = b + (25_000 if i % 2 else 3_000)
        t.launch("k_long", b + 600, b + 650, b + 1_500, long_end, device=0, stream=8)
        t.launch("k_short", b + 700, b + 720, b + 2_500, b + 2_600, device=1, stream=7)
        t.memcpy("HtoD", 1 << 20, b + 800, b + 850, b + 1_800, b + 2_700, device=0, stream=9)
        if i >= 2:
            t.launch("k_late", b + 900, b + 950, b + 1_000, b + 14_000, device=9, stream=7)
            t.launch(TC_KERNEL, b + 960, b + 990, b + 13_000, b + 13_500, device=9, stream=8)
        if i >= 4:
            t.launch("k_later", b + 1_000, b + 1_050, b + 5_000, b + 31_000, device=4)
    # work and host time past the last iteration's key node, and before the first
    t.osrt("fopen", 69_950, 80_000)
    t.launch("k_tail", 70_000, 70_100, 70_200, 90_000, device=1)
    return db


@pytest.mark.parametrize("size,by", [(1, "iterations"), (2, "iterations"), (3, "calls")])
def test_work_in_flight_across_windows_and_late_devices(tmp_path, size, by):
    path = _spanning_db().write(tmp_path / "spanning.sqlite")
    s = stream(path, KEY_NODE, size, by)
    ref = s.one.cube.time_iter
    assert len(s.windows) > 2
    carried: list[int] = []
    pd.testing.assert_frame_equal(_fed(s, carried), ref)
    assert max(carried[:-1]) > 0  # work was carried past a window's horizon
    # the unlisted devices come after the listed ones, by id, though 9 came first
    assert ref.index.get_level_values("lane").max() == 4
    assert ref.loc[3, "gpu_busy"].sum() > 0 and ref.loc[4, "gpu_busy"].sum() > 0


def test_a_cpu_only_export_has_one_host_lane(tmp_path):
    path = cpu_only_db().write(tmp_path / "cpu.sqlite")
    for size, by in [(1, "iterations"), (7, "calls")]:
        s = stream(path, KEY_NODE, size, by)
        got = _fed(s)
        pd.testing.assert_frame_equal(got, s.one.cube.time_iter)
        assert got["cpu"].sum() > 0
        # no window at all: the host pieces known up front are the whole partition
        pd.testing.assert_frame_equal(_parts(s).time_iter(), got)


# ---- a randomised case against _time_iter itself: many overlaps, windows by launch --------


def _random_case(seed: int, n_gpu: int = 400, n_win: int = 9):
    """GPU rows, host pieces and windows that keep the horizon's promise, with long work that
    overlaps and runs far past its window; device 5 (not listed) only from the middle on."""
    rng = np.random.default_rng(seed)
    t_end = 100_000
    bounds = np.concatenate([[5_000], np.sort(rng.integers(5_000, 90_000, 6)), [90_000]])
    launch = np.sort(rng.integers(0, t_end, n_gpu))
    lag = np.where(
        rng.random(n_gpu) < 0.2, rng.integers(0, 30_000, n_gpu), rng.integers(0, 50, n_gpu)
    )
    gs = launch + lag
    dur = np.where(
        rng.random(n_gpu) < 0.1, rng.integers(1_000, 20_000, n_gpu), rng.integers(1, 300, n_gpu)
    )
    ge = gs + dur
    back = rng.random(n_gpu) < 0.02
    ge[back] = gs[back] - 5  # a few ending before they start
    dev = rng.choice([0, 2], n_gpu)
    late = launch > t_end // 2
    dev[late & (rng.random(n_gpu) < 0.3)] = 5
    tc = rng.random(n_gpu) < 0.3
    mem = ~tc & (rng.random(n_gpu) < 0.3)
    # host: ranges (roots, some nested, some of a data loader), OS runtime calls, calls
    n_r = 40
    rs = np.sort(rng.integers(0, t_end, n_r))
    re_ = rs + rng.integers(10, 3_000, n_r)
    parent = np.full(n_r, -1)
    nested = rng.random(n_r) < 0.3
    nested[0] = False
    parent[nested] = np.flatnonzero(nested) - 1
    rs[nested] = rs[parent[nested]] + 1
    re_[nested] = np.minimum(re_[nested], re_[parent[nested]])
    op = rng.integers(0, 3, n_r)
    ops = pd.DataFrame({"op_name": ["fwd", "DataLoader.next", "x"], "op_type": ["a", "b", "c"]})
    os_s = np.sort(rng.integers(0, t_end, 30))
    os_e = os_s + rng.integers(0, 2_000, 30)
    n_c = 60
    cs = np.sort(rng.integers(0, t_end, n_c))
    ce = cs + rng.integers(0, 500, n_c)
    # windows by launch (GPU rows) and start (calls); the horizon is later windows' least start
    cuts = np.concatenate([[0], np.sort(rng.integers(0, t_end, n_win - 1)), [t_end + 1]])
    g_win = np.searchsorted(cuts, launch, "right") - 1
    c_win = np.searchsorted(cuts, cs, "right") - 1
    low = np.full(n_win + 1, np.iinfo(np.int64).max)
    np.minimum.at(low, g_win, gs)
    np.minimum.at(low, c_win, cs)
    horizon = np.minimum.accumulate(low[::-1])[::-1][1:]
    isolated = intervals.isolated(gs, ge)
    z = np.zeros(n_gpu, np.int64)
    windows = []
    for w in range(n_win):
        g, c = g_win == w, c_win == w
        windows.append(
            GpuRows(
                rows=np.flatnonzero(g),
                start_ns=gs[g],
                end_ns=ge[g],
                device_id=dev[g],
                uses_tc=tc[g],
                is_memory=mem[g],
                isolated=isolated[g],
                horizon_ns=int(horizon[w]),
                calls_start_ns=cs[c],
                calls_end_ns=ce[c],
                **{k: z[g] for k in UNREAD},
            )
        )
    it = Iterations(key_node="k", bounds_ns=bounds.astype(np.int64), instances=len(bounds) - 2)
    gpus = pd.DataFrame({"cu_device": [2, 0, 7], "name": ["A", "B", "C"]})
    osrt = pd.DataFrame({"start_ns": os_s, "end_ns": os_e})
    c = SimpleNamespace(  # what _time_iter reads of a Correlated
        trace=SimpleNamespace(gpus=gpus, osrt=osrt),
        gpu=pd.DataFrame(
            {
                "start_ns": gs,
                "end_ns": ge,
                "device_id": dev,
                "uses_tc": tc,
                "is_memory": mem,
                "isolated": isolated,
            }
        ),
        ops=ops,
        inst=pd.DataFrame(
            {"start_ns": rs, "end_ns": re_, "parent": parent, "op": op, "synthetic": False}
        ),
        api=pd.DataFrame({"start_ns": cs, "end_ns": ce, "inst": np.full(n_c, -1)}),
    )
    parts = TimeParts.of_ranges(it, gpus, osrt, rs, re_, parent, op, ops)
    return _time_iter(c, it), parts, windows


@pytest.mark.parametrize("seed", range(6))
def test_random_overlapping_work_against_the_whole_trace(seed):
    ref, parts, windows = _random_case(seed)
    carried = []
    for w in windows:
        parts.add(w)
        carried.append(sum(len(p[0]) for p in parts.u.carry))
    pd.testing.assert_frame_equal(parts.time_iter(), ref)
    assert max(carried[:-1]) > 0
    assert ref.index.get_level_values("lane").max() == 3  # 2, 0, 7 listed; 5 not


def test_the_carry_matters():
    """Finalising every piece at each window (no carry) gives other figures: the cases above
    do exercise the carry."""
    ref, parts, windows = _random_case(0)
    for w in windows:
        w.horizon_ns = np.iinfo(np.int64).max  # a broken promise: nothing carried
        parts.u.promised = np.iinfo(np.int64).min
        parts.add(w)
    with pytest.raises(AssertionError):
        pd.testing.assert_frame_equal(parts.time_iter(), ref)
