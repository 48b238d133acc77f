"""The launch plan and the windowed reads against the whole read and the one-pass correlation.

Every API row and GPU row must fall in exactly one window; each window's frames must be the
whole :func:`read_trace` frames at the window's indices (values, dtypes, categories, codes),
with connectorx and with ``sqlite3``; a GPU row with a launching call (correlate's) must sit in
its call's window, and ``isolated`` must be correlate's. On the fixtures every window is read;
on the real exports every window of 1000 calls, and for windows of 1 and 7 calls a fixed
sample (the windows holding work without a launching call, the fullest ones, both ends and a
stride), since ~17,000 one-call windows cost minutes to read.
"""

from __future__ import annotations

import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.correlate.correlate import correlate
from jlprof.engine.read.read import read_trace
from jlprof.engine.read.trace import Trace
from jlprof.engine.windowed import windows
from jlprof.engine.windowed.windows import LaunchPlan, WindowReader, plan_windows, read_window
from jlprof.errors import InputError
from tests.fixtures.nsysdb import NsysDb
from tests.fixtures.scenarios import (
    ORPHAN,
    PID_A,
    PID_B,
    cpu_only_db,
    kernel_without_call,
    real_traces,
    rich_db,
)

SIZES = (1, 7, 1000)
SAMPLE = 120  # windows read per (real export, size) for sizes below 1000


@dataclass
class Whole:
    """The one-pass results a plan is checked against."""

    trace: Trace
    g_api: np.ndarray  # correlate's launching call of each GPU row (-1: none)
    isolated: np.ndarray


def whole_of(path: Path) -> Whole:
    trace = read_trace(path, use_connectorx=False)
    cor = correlate(trace)
    return Whole(trace, cor.gpu["api"].to_numpy(np.int64), cor.gpu["isolated"].to_numpy(bool))


def check_plan(plan: LaunchPlan, whole: Whole) -> None:
    """The partition, the launch windows, the fallback rule and ``isolated``."""
    c, api, gpu = plan.calls_per_window, whole.trace.api, whole.trace.gpu
    assert plan.n_api == len(api) and plan.n_gpu == len(gpu)
    assert plan.n_windows == max(1, -(-len(api) // c))
    rows = [np.arange(*plan.api_rows(w)) for w in range(plan.n_windows)]
    assert (np.concatenate(rows) == np.arange(len(api))).all()  # each call once, in order
    seen = np.zeros(len(gpu), np.int64)
    for w in range(plan.n_windows):
        g = plan.gpu_rows(w)
        assert (np.diff(g) > 0).all() and (plan.window[g] == w).all()
        seen[g] += 1
    assert (seen == 1).all()  # each GPU row in exactly one window
    launched = whole.g_api >= 0
    assert (plan.launched == launched).all()
    assert (plan.window[launched] == whole.g_api[launched] // c).all()
    # no launching call: the last window whose calls (so far) start at or before the row
    a_start = api["start_ns"].to_numpy(np.int64)
    first = np.array([a_start[lo:hi].min() for lo, hi in map(plan.api_rows, range(plan.n_windows))
                      if hi > lo] or [0])  # fmt: skip
    reach = np.maximum.accumulate(first)
    for i in np.flatnonzero(~launched):
        s = int(gpu["start_ns"].iat[i])
        at = [w for w in range(1, len(reach)) if reach[w] <= s]
        assert plan.window[i] == (at[-1] if at else 0)
    assert (plan.isolated == whole.isolated).all()


def check_frames(got: pd.DataFrame, whole: pd.DataFrame, index: np.ndarray) -> None:
    """``got`` is ``whole`` at ``index``: values, dtypes, categories and codes."""
    want = whole.iloc[index].reset_index(drop=True)
    assert list(got.dtypes) == list(whole.dtypes)  # categoricals: the same categories too
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    for col in got.columns:
        if isinstance(got[col].dtype, pd.CategoricalDtype):
            assert (got[col].cat.codes.to_numpy() == want[col].cat.codes.to_numpy()).all()


def check_windows(plan: LaunchPlan, whole: Whole, windows, use_cx: bool | None) -> None:
    plan.use_connectorx = use_cx
    with WindowReader(plan) as reader:
        for w in windows:
            got = reader.read(w)
            assert (got.api_index == np.arange(*plan.api_rows(w))).all()
            assert (got.gpu_index == plan.gpu_rows(w)).all()
            check_frames(got.api, whole.trace.api, got.api_index)
            check_frames(got.gpu, whole.trace.gpu, got.gpu_index)
            assert (got.isolated == whole.isolated[got.gpu_index]).all()
        assert reader.gpu_rows_read <= 2 * reader.gpu_rows_kept  # the over-read bound


def sample(plan: LaunchPlan) -> list[int]:
    """Windows worth reading when there are too many to read all."""
    n = plan.n_windows
    if n <= SAMPLE:
        return list(range(n))
    stragglers = np.unique(plan.window[~plan.launched])[: SAMPLE // 4]
    full = np.argsort(-np.diff(plan.gpu_bounds), kind="stable")[: SAMPLE // 4]
    stride = np.linspace(0, n - 1, SAMPLE // 2).astype(int)
    return sorted({0, 1, n - 2, n - 1, *stragglers.tolist(), *full.tolist(), *stride.tolist()})


# ---- fixtures built in code: every window, both readers


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rich_db().write(tmp_path_factory.mktemp("windows") / "rich.sqlite")


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("use_cx", [False, True])
def test_every_window_of_the_rich_export_is_the_whole_read(rich, size, use_cx) -> None:
    whole = whole_of(rich)
    plan = plan_windows(rich, size, use_connectorx=use_cx)
    check_plan(plan, whole)
    check_windows(plan, whole, range(plan.n_windows), use_cx)


def edited(src: Path, dst: Path, *sql: str) -> Path:
    shutil.copyfile(src, dst)
    with sqlite3.connect(dst) as con:
        for s in sql:
            con.execute(s)
    con.close()
    return dst


def test_without_an_api_table_one_window_holds_all_gpu_work(rich, tmp_path) -> None:
    path = edited(rich, tmp_path / "noapi.sqlite", "DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    whole = whole_of(path)
    plan = plan_windows(path, 7)
    assert plan.n_windows == 1 and plan.n_api == 0 and len(whole.trace.gpu)
    assert (plan.window == 0).all() and not plan.launched.any()
    check_plan(plan, whole)
    for cx in (False, True):
        check_windows(plan, whole, [0], cx)


@pytest.mark.parametrize("empty_tables", [False, True])
def test_without_gpu_work(tmp_path, empty_tables) -> None:
    """No CUDA tables at all, or all of them present and empty."""
    path = cpu_only_db().write(tmp_path / "cpu.sqlite", empty_tables=empty_tables)
    if empty_tables:
        with sqlite3.connect(path) as con:
            assert con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone() == (0,)
        con.close()
    whole = whole_of(path)
    plan = plan_windows(path, 1)
    assert plan.n_gpu == 0 and plan.n_windows == 1
    check_plan(plan, whole)
    for cx in (False, True):
        check_windows(plan, whole, [0], cx)


def test_empty_gpu_tables_beside_api_calls(rich, tmp_path) -> None:
    path = edited(
        rich,
        tmp_path / "nogpu.sqlite",
        "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL",
        "DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY",
        "DELETE FROM CUPTI_ACTIVITY_KIND_MEMSET",
    )
    whole = whole_of(path)
    plan = plan_windows(path, 7)
    assert plan.n_gpu == 0 and plan.n_api == len(whole.trace.api) > 0
    check_plan(plan, whole)
    check_windows(plan, whole, range(plan.n_windows), True)


def test_rowid_gaps_keep_rows_and_windows(rich, tmp_path) -> None:
    """Rows deleted from the middle: windows are row ranges, not rowid ranges."""
    path = edited(
        rich,
        tmp_path / "gaps.sqlite",
        "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid IN (2, 5, 6, 11)",
        "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid IN (1, 4, 9)",
    )
    whole = whole_of(path)
    for size in (1, 3):
        plan = plan_windows(path, size)
        assert plan.api.rowids is not None and plan.gpu_tables[0].rows.rowids is not None
        check_plan(plan, whole)
        for cx in (False, True):
            check_windows(plan, whole, range(plan.n_windows), cx)


def cross_process_db() -> NsysDb:
    """Process 200 runs a kernel whose correlation id is one of process 100's calls: it has
    no launching call (correlation ids are unique per process only)."""
    db = NsysDb()
    db.gpu(0, "NVIDIA A100-SXM4-40GB")
    t = db.process(PID_A, "python").thread()
    for i in range(12):
        b = 1_000 * i
        t.launch(f"k{i % 3}", b, b + 50, b + 100, b + 400, correlation_id=i + 1)
    db.process(PID_B, "python").thread().api_only("cudaFree_v3020", 100, 200)
    kernel_without_call(db, 9_500, 9_600, 3, PID_B)  # process 100's third launch's id
    return db


def test_work_without_a_correlation_id_goes_by_its_start(tmp_path) -> None:
    """A NULL correlation id (read as -1) on a call and on a kernel is no launch; a kernel
    starting exactly where a window's first call starts belongs to that window."""
    src = cross_process_db().write(tmp_path / "src.sqlite")
    path = edited(
        src,
        tmp_path / "nullcorr.sqlite",
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = NULL WHERE rowid = 1",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = NULL, start = 7000 WHERE rowid = 5",
    )
    whole = whole_of(path)
    k = 4  # kernel rowid 5: its call (rowid 5) is at 4000, the 8th call at 7000
    assert whole.g_api[k] < 0 and int(whole.trace.gpu["start_ns"].iat[k]) == 7_000
    for size in (1, 7):
        plan = plan_windows(path, size)
        assert not plan.launched[k]
        assert plan.window[k] == 7 // size  # the window of the call starting at 7000
        check_plan(plan, whole)
        check_windows(plan, whole, range(plan.n_windows), False)


def test_work_of_another_process_with_the_same_correlation_id(tmp_path) -> None:
    path = cross_process_db().write(tmp_path / "xproc.sqlite")
    whole = whole_of(path)
    gpu = whole.trace.gpu
    other = np.flatnonzero(gpu["name"].astype(str).to_numpy() == ORPHAN)
    assert len(other) == 1 and whole.g_api[other[0]] < 0
    twin = np.flatnonzero((gpu["correlation_id"].to_numpy() == 3) & (whole.g_api >= 0))
    assert len(twin) == 1  # process 100's kernel of the same id has its call
    for size in (1, 2, 5):
        plan = plan_windows(path, size)
        assert not plan.launched[other[0]] and plan.launched[twin[0]]
        check_plan(plan, whole)  # the orphan goes by its start time (9.5 us: a late window)
        assert plan.window[other[0]] > plan.window[twin[0]]
        for cx in (False, True):
            check_windows(plan, whole, range(plan.n_windows), cx)


def test_bad_input(tmp_path, rich) -> None:
    with pytest.raises(ValueError, match="calls_per_window"):
        plan_windows(rich, 0)
    with pytest.raises(InputError, match="no such file"):
        plan_windows(tmp_path / "missing.sqlite", 10)
    plain = tmp_path / "plain.sqlite"
    with sqlite3.connect(plain) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    con.close()
    with pytest.raises(InputError, match="not an nsys export"):
        plan_windows(plain, 10)


def test_a_changed_export_is_refused(rich, tmp_path) -> None:
    path = edited(rich, tmp_path / "changed.sqlite")
    plan = plan_windows(path, 1000)
    with sqlite3.connect(path) as con:
        con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = 2")
    con.close()
    with pytest.raises(InputError, match="changed since its launch plan"):
        read_window(plan, 0)


# ---- the real exports


@pytest.fixture(scope="module", params=real_traces(), ids=lambda p: p.parent.name)
def real(request) -> tuple[Path, Whole]:
    return request.param, whole_of(request.param)


@pytest.mark.parametrize("size", SIZES)
def test_real_exports(real, size) -> None:
    path, whole = real
    plan = plan_windows(path, size)
    check_plan(plan, whole)
    windows = range(plan.n_windows) if size >= 1000 else sample(plan)
    check_windows(plan, whole, windows, False)
    check_windows(plan, whole, windows if size >= 1000 else windows[:8], True)


@pytest.mark.parametrize("chunk", [1, 3, 16])
def test_narrow_reads_by_small_chunks(rich, tmp_path, monkeypatch, chunk) -> None:
    """The plan reads by rowid chunks (262,144 rows at scale): chunk edges inside windows, inside
    rowid gaps and between processes change nothing."""
    gaps = edited(
        rich,
        tmp_path / "gaps.sqlite",
        "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid IN (2, 3, 4, 5, 6, 11)",
        "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid IN (1, 4, 9, 10)",
    )
    monkeypatch.setattr(windows, "CHUNK_ROWS", chunk)
    for path in (rich, gaps):
        whole = whole_of(path)
        for size in (1, 4, 1000):
            plan = plan_windows(path, size)
            check_plan(plan, whole)
            check_windows(plan, whole, range(plan.n_windows), False)


def test_columns_past_int32_stay_int64_in_every_window(rich, tmp_path) -> None:
    """int32 or int64 is decided from the whole column, also for windows that hold no big
    value."""
    big = 1 << 33
    path = edited(
        rich,
        tmp_path / "big.sqlite",
        f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = {big} WHERE rowid = 2",
        f"UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = {big} WHERE rowid = 1",
        f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET eventClass = {big} WHERE rowid = 1",
    )
    whole = whole_of(path)
    gpu, api = whole.trace.gpu, whole.trace.api
    assert gpu["grid_x"].dtype == gpu["bytes"].dtype == api["event_class"].dtype == np.int64
    assert gpu["grid_y"].dtype == api["correlation_id"].dtype == np.int32
    plan = plan_windows(path, 3)
    check_plan(plan, whole)
    for cx in (False, True):
        check_windows(plan, whole, range(plan.n_windows), cx)


@pytest.mark.parametrize(
    ("value", "dtype"),
    [
        (-(1 << 31), np.int32),
        (-(1 << 31) - 1, np.int64),
        ((1 << 31) - 1, np.int32),
        (1 << 31, np.int64),
        ((1 << 63) - 1, np.int64),  # plus 2^31 overflows int64 in SQL: REAL, cast back
        (-(1 << 63), np.int64),
    ],
)
def test_int32_bounds_of_the_columns_the_plan_does_not_keep(rich, tmp_path, value, dtype) -> None:
    """Whether the GPU columns the plan's narrow read does not keep fit int32 is decided as
    the whole read decides it: at the edges of int32, below as well as above, with the
    value in the last row and NULLs (read as their default) elsewhere."""
    path = edited(
        rich,
        tmp_path / "edge.sqlite",
        f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = {value} "
        "WHERE rowid = (SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphNodeId = NULL WHERE rowid = 1",
    )
    whole = whole_of(path)
    gpu = whole.trace.gpu
    assert gpu["stream_id"].dtype == dtype and gpu["grid_x"].dtype == np.int32
    plan = plan_windows(path, 3)
    check_plan(plan, whole)
    assert plan.gpu_template["stream_id"].dtype == dtype
    check_windows(plan, whole, range(plan.n_windows), True)
