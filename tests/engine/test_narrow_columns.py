"""Per-row columns of the correlation and per-instance figures: int32 while they fit (issue
18: memory), int64 past 2**31, the same figures either way."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.aggregate.aggregate import InstanceMetrics
from jlprof.engine.analysis import Analysis
from jlprof.engine.read.read import read_trace
from tests.fixtures import scenarios as sc

from .frames import int64_layout

# the columns correlation adds (frame, column) and how they are held
INDEX_COLUMNS = [("gpu", "api"), ("gpu", "inst"), ("api", "inst")] + [
    ("inst", c) for c in ("op", "parent", "path")
]
VALUE_COLUMNS = [("inst", c) for c in ("event_type", "instance_no", "cpu_ns")] + [
    ("gpu", "api_share_ns")
]
WIDE = [("inst", c) for c in ("start_ns", "end_ns", "global_tid")]
METRICS = [f.name for f in dataclasses.fields(InstanceMetrics)]
CUBE = ("op_iter", "kernel_iter", "group_iter", "time_iter")


def _analysis(path, key_node: str) -> Analysis:
    return Analysis(read_trace(path), key_node=key_node)


def _pair(tmp_path, monkeypatch, db, key_node: str) -> tuple[Analysis, Analysis]:
    """The analysis of ``db`` as built, and with every per-row array int64."""
    path = db.write(tmp_path / "t.sqlite")
    narrow = _analysis(path, key_node)
    with monkeypatch.context() as m:
        int64_layout(m)
        wide = _analysis(path, key_node)
    return narrow, wide


def _assert_same_figures(narrow: Analysis, wide: Analysis) -> None:
    """Correlation, metrics and cube of the narrowed analysis equal the int64 one's."""
    cn, cw = narrow.correlated, wide.correlated
    for frame, col in INDEX_COLUMNS + VALUE_COLUMNS + WIDE:
        assert getattr(cw, frame)[col].dtype == np.int64, (frame, col)
        got = getattr(cn, frame)[col].to_numpy(np.int64)
        assert np.array_equal(got, getattr(cw, frame)[col].to_numpy()), (frame, col)
    assert np.array_equal(cn.range_lane, cw.range_lane)
    for name in METRICS:
        assert getattr(wide.metrics, name).dtype == np.int64
        assert np.array_equal(getattr(narrow.metrics, name), getattr(wide.metrics, name)), name
    for name in CUBE:  # values: the cube holds int32 columns where they fit (the wide one
        pd.testing.assert_frame_equal(  # does not narrow), and combine() gives int64 either way
            getattr(narrow.cube, name),
            getattr(wide.cube, name),
            check_exact=True,
            check_dtype=False,
        )


def test_columns_that_fit_are_int32_with_the_same_figures(tmp_path, monkeypatch) -> None:
    narrow, wide = _pair(tmp_path, monkeypatch, sc.rich_db(), sc.KEY_NODE)
    c = narrow.correlated
    for frame, col in INDEX_COLUMNS + VALUE_COLUMNS:
        assert getattr(c, frame)[col].dtype == np.int32, (frame, col)
    for frame, col in WIDE:
        assert getattr(c, frame)[col].dtype == np.int64, (frame, col)
    assert c.range_lane.dtype == np.int32
    for name in METRICS:
        assert getattr(narrow.metrics, name).dtype == np.int32, name
    # the -1 sentinels survive: a kernel without its call, roots, un-numbered ranges
    assert (c.gpu["api"] == -1).any() and (c.inst["parent"] == -1).any()
    assert (c.inst["instance_no"] == -1).all() and (c.range_lane == -1).any()
    _assert_same_figures(narrow, wide)


def _rows_of(a: Analysis, op_name: str) -> np.ndarray:
    names = a.correlated.ops["op_name"].to_numpy(object)[a.correlated.inst["op"].to_numpy()]
    return np.flatnonzero(names == op_name)


def test_figures_past_int32_are_int64_and_exact(tmp_path, monkeypatch) -> None:
    narrow, wide = _pair(tmp_path, monkeypatch, sc.long_db(), "optimizer_step")
    c, m = narrow.correlated, narrow.metrics
    for frame, col in INDEX_COLUMNS:  # row indices fit whatever the durations
        assert getattr(c, frame)[col].dtype == np.int32, (frame, col)
    for frame, col in [("inst", "cpu_ns"), ("inst", "instance_no"), ("gpu", "api_share_ns")]:
        assert getattr(c, frame)[col].dtype == np.int64, (frame, col)
    for name in ("gpu_ns", "api_ns", "overhead_ns", "idle_ns", "tc_gpu_ns", "kernel_ns"):
        assert getattr(m, name).dtype == np.int64, name
    assert m.n_gpu.dtype == np.int32  # counts still fit

    big, sparse = _rows_of(narrow, "big_op"), _rows_of(narrow, "sparse")
    assert len(big) == len(sparse) == sc.LONG_ITERS
    big_cpu = sc.BIG_RANGE[1] - sc.BIG_RANGE[0]
    big_gpu = sc.BIG_KERNEL[1] - sc.BIG_KERNEL[0]
    big_api = sc.BIG_CALL[1] - sc.BIG_CALL[0]
    assert min(big_cpu, big_gpu, big_api) > np.iinfo(np.int32).max  # what the fixture is for
    assert c.inst["cpu_ns"].to_numpy()[big].tolist() == [big_cpu] * sc.LONG_ITERS
    for name, want in [
        ("gpu_ns", big_gpu),
        ("tc_gpu_ns", big_gpu),
        ("kernel_ns", big_gpu),
        ("api_ns", big_api),
        ("overhead_ns", big_cpu - big_api),
        ("idle_ns", 0),
    ]:
        assert getattr(m, name)[big].tolist() == [want] * sc.LONG_ITERS, name
    gemm = (c.gpu["long_name"] == sc.GEMM).to_numpy()
    assert c.gpu["api_share_ns"].to_numpy()[gemm].tolist() == [big_api] * sc.LONG_ITERS
    (k1s, k1e), (k2s, k2e) = sc.SPARSE_KERNELS
    assert m.idle_ns[sparse].tolist() == [k2e - k1s - (k1e - k1s) - (k2e - k2s)] * sc.LONG_ITERS
    sync = _rows_of(narrow, "unassociated_cudaDeviceSynchronize")
    assert c.inst["cpu_ns"].to_numpy()[sync].tolist() == [sc.LONG_SYNC[1] - sc.LONG_SYNC[0]]
    batch = _rows_of(narrow, "Batch #")
    assert c.inst["instance_no"].to_numpy()[batch].tolist() == [sc.BATCH_NO] * sc.LONG_ITERS

    # the cube sums them in int64: per-op totals over all iterations, exact
    ops = narrow.correlated.ops["op_name"].to_numpy(object)
    tot = narrow.cube.op_iter.groupby(level="op").sum()
    big_op = int(np.flatnonzero(ops == "big_op")[0])
    assert tot.loc[big_op, "cpu_sum"] == sc.LONG_ITERS * big_cpu
    assert tot.loc[big_op, "gpu_sum"] == sc.LONG_ITERS * big_gpu
    assert tot.loc[big_op, "api_sum"] == sc.LONG_ITERS * big_api
    _assert_same_figures(narrow, wide)


def test_int32_figures_sum_in_int64(tmp_path, monkeypatch) -> None:
    narrow, wide = _pair(tmp_path, monkeypatch, sc.wide_sums_db(), "optimizer_step")
    c, m = narrow.correlated, narrow.metrics
    assert c.inst["cpu_ns"].dtype == c.gpu["api_share_ns"].dtype == np.int32
    assert all(getattr(m, name).dtype == np.int32 for name in METRICS)
    per_iter = len(sc.MEDIUM_STARTS)
    cpu, api = sc.MEDIUM_NS, sc.MEDIUM_CALL[1] - sc.MEDIUM_CALL[0]
    gpu = sc.MEDIUM_KERNEL[1] - sc.MEDIUM_KERNEL[0]
    assert per_iter * min(cpu, api, gpu) > np.iinfo(np.int32).max  # what the fixture is for
    medium = int(np.flatnonzero(c.ops["op_name"].to_numpy(object) == "medium")[0])
    op = narrow.cube.op_iter.xs(medium, level="op")
    assert op["calls"].tolist() == [per_iter] * sc.LONG_ITERS
    for col, want in [("cpu", cpu), ("gpu", gpu), ("api", api), ("overhead", cpu - api)]:
        assert op[f"{col}_sum"].tolist() == [per_iter * want] * sc.LONG_ITERS, col
        past = per_iter * want > np.iinfo(np.int32).max  # the cube's int32 only where all fit
        assert op[f"{col}_sum"].dtype == (np.int64 if past else np.int32), col
    kern = narrow.cube.kernel_iter.xs(medium, level="op")
    assert kern["api_sum"].tolist() == [per_iter * api] * sc.LONG_ITERS
    assert kern["gpu_sum"].tolist() == [per_iter * gpu] * sc.LONG_ITERS
    _assert_same_figures(narrow, wide)


@pytest.mark.parametrize("n, dtype", [(0, np.int32), (2**31 - 1, np.int32), (2**31, np.int64)])
def test_row_indices_are_int32_below_2_31_rows(n, dtype) -> None:
    from jlprof.engine.read.narrow import index_dtype

    assert index_dtype(n) is dtype


@pytest.mark.parametrize("seed", range(20))
def test_narrow_joined_is_narrow_of_the_concatenation(seed: int) -> None:
    """``narrow_joined(*parts)`` equals ``narrow(np.concatenate(parts as int64))``, values and
    dtype: int32 when every value of every part fits, int64 otherwise (one value past int32,
    no rows at all), whatever the parts' own types."""
    from jlprof.engine.read.narrow import narrow, narrow_joined

    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(rng.integers(0, 4)):
        n = int(rng.integers(0, 50))
        kind = rng.choice(["int8", "int32", "int64"])
        values = rng.integers(-100, 100, n).astype(kind)
        if kind == "int64" and n and rng.random() < 0.3:
            values[rng.integers(0, n)] = rng.choice([2**31, -(2**31) - 1, 2**40])
        parts.append(values)
    want = narrow(
        np.concatenate([np.asarray(p, np.int64) for p in parts] or [np.zeros(0, np.int64)])
    )
    got = narrow_joined(*parts)
    assert got.dtype == want.dtype and np.array_equal(got, want)
