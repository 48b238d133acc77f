"""Report columns keep int64 where the trace or cube holds int32 (issue 18: memory).

The reader narrows small-valued trace columns and the cube its iteration arrays to int32;
the iteration report's columns built from them stay int64 (Parquet schemas, DataFrames)."""

from __future__ import annotations

import numpy as np

from jlprof.engine.analysis import Analysis
from jlprof.engine.read import read_trace
from jlprof.reports import tables
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
