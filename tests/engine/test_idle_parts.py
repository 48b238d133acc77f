"""The idle causes summed window by window (engine.windowed.idle_parts) against the whole
trace's ``idle_causes``, frame for frame."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.analyses.idle import idle_causes
from jlprof.engine.analysis import Analysis
from jlprof.engine.correlate.ranges import range_pass
from jlprof.engine.read.read import read_trace
from jlprof.engine.windowed.cube_parts import open_ended
from jlprof.engine.windowed.idle_parts import IdleParts
from jlprof.engine.windowed.windowed import WorkPass
from jlprof.engine.windowed.windows import plan_windows
from tests.engine.test_windowed import keyed_exports, windows_of
from tests.fixtures.nsysdb import NsysDb
from tests.fixtures.scenarios import KEY_NODE


def _fed(path, key, size, by="iterations", carry=True):
    """The whole trace's idle frame, and the windows' (windows of ``size`` iterations or
    calls; ``carry=False``: every window promises that nothing later starts before the end
    of time, a broken promise); the most pieces carried past a window but the last."""
    trace = read_trace(path)
    one = Analysis(trace, key_node=key)
    c, it = one.correlated, one.iterations
    r = range_pass(c.nvtx, None)
    wp = WorkPass(r, iterations=it)
    wins = windows_of(trace, c, size, it if by == "iterations" else None)
    plan = plan_windows(path, 1000, device_pairs=True)
    parts = IdleParts(
        open_ended(it),
        trace.gpus,
        plan.device_pairs,
        (r.start_ns, r.end_ns, r.global_tid, r.lanes.parent, r.op),
        r.ops,
        trace.api["name"].cat.categories,
    )
    carried = [0]
    for w in wins:
        res = wp.add(w)
        if not carry:
            w.next_start_ns = np.iinfo(np.int64).max - 1
            parts.promised = np.iinfo(np.int64).min
        parts.add(w, res)
        carried.append(sum(len(p[0]) for p in parts.u.carry))
    return idle_causes(c, it), parts.frame(it), max(carried[:-1])


def test_the_plans_device_pairs_are_the_gpu_rows(tmp_path):
    """The launch plan's (process, device) pairs: every distinct pair of the GPU rows."""
    for path, _key in keyed_exports(tmp_path, real=3):
        g = read_trace(path).gpu
        want = set(zip(g["global_pid"].astype(int), g["device_id"].astype(int), strict=True))
        pid, dev = plan_windows(path, 3, device_pairs=True).device_pairs
        assert len(pid) == len(want) and set(zip(pid.tolist(), dev.tolist(), strict=True)) == want
        assert plan_windows(path, 3).device_pairs is None  # gathered only when asked


def test_every_keyed_export_by_every_window_size(tmp_path):
    cases = 0
    for path, key in keyed_exports(tmp_path, real=2):
        for size, by in ((1, "iterations"), (3, "iterations"), (7, "calls"), (1000, "calls")):
            whole, got, _ = _fed(path, key, size, by)
            try:
                pd.testing.assert_frame_equal(got, whole)
            except AssertionError as e:
                raise AssertionError(f"{path.name} key={key} windows of {size} {by}") from e
            cases += 1
    assert cases >= 16


def _two_processes_db() -> NsysDb:
    """Two processes over two listed GPUs and an unlisted one: process 11 trains (kernels
    that overlap, run across iteration bounds and past their window's horizon; copies under
    kernels; queued work; synchronising calls; data loading; calls outside every range);
    process 12 only reads and waits on the host until iteration 4, then launches work on GPU 1
    and on the unlisted device 5: its earlier host time counts on those GPUs, never on GPU 0."""
    db = NsysDb()
    db.gpu(0, "NVIDIA A100-SXM4-40GB")
    db.gpu(1, "NVIDIA A100-SXM4-40GB")
    t = db.process(11, "python").thread()
    u = db.process(12, "python").thread()
    step = 10_000
    for i in range(7):
        b = i * step
        t.push_pop(KEY_NODE, b, b + step - 100)
        t.push_pop("DataLoader.next", b + 10, b + 400)
        t.launch("k_a", b + 500, b + 520, b + 3_000, b + 4_000, device=0, stream=7)  # queued
        long_end = b + (25_000 if i % 2 else 3_500)
        t.launch("k_long", b + 600, b + 650, b + 3_200, long_end, device=0, stream=8)
        t.memcpy("HtoD", 1 << 20, b + 800, b + 850, b + 3_100, b + 4_500, device=0, stream=9)
        t.launch("k_b", b + 700, b + 720, b + 720, b + 1_200, device=1, stream=7)
        t.api_only("cudaStreamSynchronize", b + 4_100, b + 6_000)
        t.api_only("cudaEventQuery", b + 6_500, b + 6_600)  # outside every range but the step
        u.push_pop("DataLoader.next", b + 1_000, b + 2_000)
        u.api_only("cudaDeviceSynchronize", b + 7_000, b + 7_400)
        if i >= 4:
            u.launch("k_u", b + 7_500, b + 7_510, b + 7_600, b + 8_000, device=1)
            u.launch("k_v", b + 7_520, b + 7_530, b + 7_700, b + 9_000, device=5)
    t.launch("k_tail", 70_000, 70_100, 70_200, 90_000, device=1)
    return db


@pytest.mark.parametrize("size,by", [(1, "iterations"), (2, "iterations"), (3, "calls")])
def test_two_processes_work_in_flight_and_a_late_device(tmp_path, size, by):
    path = _two_processes_db().write(tmp_path / "two.sqlite")
    whole, got, carried = _fed(path, KEY_NODE, size, by)
    pd.testing.assert_frame_equal(got, whole)
    assert carried > 0  # work was carried past a window's horizon
    # the case exercises what it says: every cause, on the three lanes
    assert (whole[["memcpy", "sync", "dataloader", "host_launch", "other"]].sum() > 0).all()
    assert whole.index.get_level_values("lane").max() == 2
    # iteration 1 (10 000..20 000), by hand: process 11's loader (10..400 into it) counts on
    # GPUs 0 and 1, process 12's (1 000..2 000) on GPU 1 and device 5 though its first launch
    # comes in iteration 4, never on GPU 0; on GPU 1 k_b runs until 1 200
    dl = whole["dataloader"].unstack("iteration")[1]
    assert dl.tolist() == [390, 390 + (2_000 - 1_200), 1_000]


def test_the_carry_matters(tmp_path):
    """Finalising every piece at each window (no carry) gives other figures: the cases above
    do exercise the carry."""
    path = _two_processes_db().write(tmp_path / "two.sqlite")
    whole, got, _ = _fed(path, KEY_NODE, 1, carry=False)
    with pytest.raises(AssertionError):
        pd.testing.assert_frame_equal(got, whole)
