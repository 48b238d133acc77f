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
from tests.engine.test_time_parts import _spanning_db
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
            parts.u.promised = np.iinfo(np.int64).min
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
    """The time partition's spanning case (process 11: overlapping work across iteration
    bounds and past its window's horizon, copies, queued work, data loading, GPUs listed and
    not, an idle one) and process 12, which only loads data and waits on the host until
    iteration 4, then launches work on GPU 1 and on the unlisted device 5 and copies to GPU 1
    while it is idle: its earlier host time counts on those GPUs, never on the others."""
    db = _spanning_db()
    u = db.process(12, "python").thread()
    for i in range(7):
        b = i * 10_000
        u.push_pop("DataLoader.next", b + 410, b + 690)
        u.api_only("cudaDeviceSynchronize", b + 7_000, b + 7_400)
        if i >= 4:
            u.launch("k_u", b + 7_500, b + 7_510, b + 7_600, b + 8_000, device=1)
            u.launch("k_v", b + 7_520, b + 7_530, b + 7_700, b + 9_000, device=5)
            u.memcpy("HtoD", 1 << 20, b + 2_900, b + 2_950, b + 3_000, b + 3_300, device=1)
    return db


@pytest.mark.parametrize("size,by", [(1, "iterations"), (2, "iterations"), (3, "calls")])
def test_two_processes_work_in_flight_and_a_late_device(tmp_path, size, by):
    path = _two_processes_db().write(tmp_path / "two.sqlite")
    whole, got, carried = _fed(path, KEY_NODE, size, by)
    pd.testing.assert_frame_equal(got, whole)
    assert carried > 0  # work was carried past a window's horizon
    # the case exercises what it says: every cause, on the three lanes
    assert (whole[["memcpy", "sync", "dataloader", "host_launch", "other"]].sum() > 0).all()
    # lanes: the listed GPUs 0, 1, 6 (idle), then the unlisted 4, 5, 9 by id. Iteration 1
    # (10 000..20 000) by hand: every GPU is idle 10..690 into it; process 11's loader
    # (10..400) counts on its GPUs 1, 0, 4, 9 (4 and 9 first used in iterations 4 and 2),
    # process 12's (410..690) on its GPUs 1 and 5 though its first launch comes in iteration
    # 4; none on the idle GPU 6
    dl = whole["dataloader"].unstack("iteration")[1]
    assert dl.tolist() == [390, 390 + 280, 0, 390, 280, 390]


def test_the_carry_matters(tmp_path):
    """Finalising every piece at each window (no carry) gives other figures: the cases above
    do exercise the carry."""
    path = _two_processes_db().write(tmp_path / "two.sqlite")
    whole, got, _ = _fed(path, KEY_NODE, 1, carry=False)
    with pytest.raises(AssertionError):
        pd.testing.assert_frame_equal(got, whole)
