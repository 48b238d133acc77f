"""Report columns keep int64 where the trace or cube holds int32 (issue 18: memory).

The reader narrows small-valued trace columns, the correlation its per-row indices and
durations, the instance metrics their figures, and the cube its iteration arrays to int32;
the report columns built from them stay int64 (Parquet schemas, DataFrames)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.analysis import Analysis
from jlprof.engine.read.read import read_trace
from jlprof.reports import REPORT_NAMES, catalog, tables
from tests.engine.frames import int64_layout
from tests.fixtures import scenarios as sc
from tests.fixtures.scenarios import KEY_NODE, rich_db

NARROWED = ["Iteration", "Device ID", "Grid X", "Grid Y", "Grid Z", "Block X", "Block Y", "Block Z"]


def test_iteration_report_columns_from_int32_arrays_are_int64(tmp_path) -> None:
    p = Analysis(read_trace(rich_db().write(tmp_path / "rich.sqlite")), key_node=KEY_NODE)
    assert p.correlated.gpu["grid_x"].dtype == np.int32 and p.cube.gpu_iter.dtype == np.int32
    lo, hi = p.range_of(None, None)
    whole = tables.iteration(p, lo, hi)  # every row in order: the slice path
    part = tables.iteration(p, hi, hi)  # some rows: the gathered path
    for df in (whole, part, *tables.iteration_parts(p, lo, hi, rows=5)):
        assert all(df[c].dtype == np.int64 for c in NARROWED), df.dtypes[NARROWED]
    g = p.correlated.gpu
    order = np.lexsort((g["start_ns"].to_numpy(), p.cube.gpu_iter))  # (iteration, start)
    assert whole["Iteration"].tolist() == p.cube.gpu_iter[order].tolist()
    for col, name in [("Grid X", "grid_x"), ("Block Z", "block_z"), ("Device ID", "device_id")]:
        assert whole[col].tolist() == g[name].to_numpy()[order].tolist()


CUBE_REPORTS = ["detail", "op_type", "kernel", "tensor", "group_node", "all_ops", "all_kernels"]


def _widened(p: Analysis) -> None:
    """``p``'s cube frames as int64 (how the cube held them before it narrowed them)."""
    cube = p.cube
    cube.op_iter = cube.op_iter.astype(np.int64)
    cube.kernel_iter = cube.kernel_iter.astype(np.int64)
    cube.time_iter = cube.time_iter.astype(np.int64)
    cube._group_iter = cube.group_iter.astype(np.int64)


def test_reports_from_an_int32_cube_equal_those_from_an_int64_one(tmp_path) -> None:
    path = rich_db().write(tmp_path / "rich.sqlite")
    held = Analysis(read_trace(path), key_node=KEY_NODE)
    wide = Analysis(read_trace(path), key_node=KEY_NODE)
    assert {t.name for t in held.cube.op_iter.dtypes} == {"int32"}  # the fixture's all fit
    _widened(wide)
    lo, hi = held.range_of(None, None)
    for a, b in [(lo, hi), (hi, hi), (lo, max(lo, hi - 1))]:
        for name in CUBE_REPORTS:
            got, want = getattr(tables, name)(held, a, b), getattr(tables, name)(wide, a, b)
            assert len(want) or (a, b) != (lo, hi), name
            pd.testing.assert_frame_equal(got, want, check_exact=True, obj=name)
            ints = [c for c, t in got.dtypes.items() if t.kind in "iu"]
            assert all(got[c].dtype == np.int64 for c in ints), (name, got.dtypes)
        pd.testing.assert_frame_equal(
            tables.duration_breakdown(held, a, b), tables.duration_breakdown(wide, a, b)
        )
        assert tables.summary_report(held, a, b) == tables.summary_report(wide, a, b)


def _long_detail() -> dict[str, dict[str, int]]:
    """The detail report's totals for long_db's ops, by construction (past int32)."""
    big_cpu = sc.BIG_RANGE[1] - sc.BIG_RANGE[0]
    big_api = sc.BIG_CALL[1] - sc.BIG_CALL[0]
    (k1s, k1e), (k2s, k2e) = sc.SPARSE_KERNELS
    n = sc.LONG_ITERS
    return {
        "big_op": {
            "Total CPU Time (ns)": n * big_cpu,
            "Total GPU Time (ns)": n * (sc.BIG_KERNEL[1] - sc.BIG_KERNEL[0]),
            "Total CPU Overhead Time (ns)": n * (big_cpu - big_api),
        },
        "sparse": {"Total GPU Idle Time (ns)": n * (k2e - k1s - (k1e - k1s) - (k2e - k2s))},
    }


def _wide_sums_detail() -> dict[str, dict[str, int]]:
    """The detail report's totals for wide_sums_db's op "medium", by construction."""
    n = sc.LONG_ITERS * len(sc.MEDIUM_STARTS)
    return {
        "medium": {
            "Total CPU Time (ns)": n * sc.MEDIUM_NS,
            "Total GPU Time (ns)": n * (sc.MEDIUM_KERNEL[1] - sc.MEDIUM_KERNEL[0]),
            "Max CPU Time (ns)": sc.MEDIUM_NS,
        }
    }


@pytest.mark.parametrize(
    "db, key_node, detail",
    [
        (sc.rich_db, KEY_NODE, dict),
        (sc.long_db, "optimizer_step", _long_detail),
        (sc.wide_sums_db, "optimizer_step", _wide_sums_detail),
    ],
    ids=["rich", "past_int32", "int32_sums_past_int32"],
)
def test_reports_equal_the_int64_layouts(tmp_path, monkeypatch, db, key_node, detail) -> None:
    """Correlation's per-row columns and the per-instance figures held as int32 (where they
    fit) give every report the same values and column dtypes as all-int64 arrays, and the
    figures past int32 exact."""
    path = db().write(tmp_path / "t.sqlite")
    narrow = Analysis(read_trace(path), key_node=key_node)
    with monkeypatch.context() as m:
        int64_layout(m)
        wide = Analysis(read_trace(path), key_node=key_node)
    assert narrow.correlated.gpu["inst"].dtype == np.int32
    assert wide.correlated.gpu["inst"].dtype == np.int64
    for name in REPORT_NAMES:
        got, want = catalog.report(narrow, name), catalog.report(wide, name)
        pd.testing.assert_frame_equal(got, want, check_exact=True, obj=name)
    assert catalog.summary(narrow) == catalog.summary(wide)
    rows = catalog.report(narrow, "detail").set_index("Op Name")
    for op, want in detail().items():
        for col, value in want.items():
            assert rows.loc[op, col] == value, (op, col)
    lo, hi = narrow.range_of(None, None)
    for got, want in zip(
        tables.iteration_parts(narrow, lo, hi, rows=2),
        tables.iteration_parts(wide, lo, hi, rows=2),
        strict=True,
    ):
        pd.testing.assert_frame_equal(got, want, check_exact=True)
