"""Kernel launches gathered part by part (the windowed engine's windows): the whole trace's
launch frame, row for row, whatever GPU rows each part holds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.analyses.launch import in_start_order, launch_rows, launches
from jlprof.profile import load
from tests.fixtures.scenarios import real_traces


@pytest.mark.parametrize("path", real_traces(), ids=lambda p: p.parent.name)
def test_launches_by_parts_are_the_whole_traces(path):
    """Each real trace's GPU rows dealt at random into 1, 3 and 17 parts (each part's rows in
    ascending order, as a window holds them): the parts' launches put back in start order are
    the whole trace's frame, columns, dtypes and order (equal starts by row)."""
    p = load(path)
    c, it = p.correlated, p.iterations
    whole = launches(c, it)
    g_api = c.gpu["api"].to_numpy(np.int64)
    rng = np.random.default_rng(3)
    for k in (1, 3, 17):
        deal = rng.integers(0, k, len(c.gpu))
        parts = []
        for w in range(k):
            rows = np.flatnonzero(deal == w)
            g = c.gpu.iloc[rows].reset_index(drop=True)
            parts.append(launch_rows(g, c.api, g_api[rows], g_api[rows], rows))
        pd.testing.assert_frame_equal(in_start_order(parts, it), whole)
    # the frame is in start order, equal starts by row: what the parts had to restore
    start, row = whole["start_ns"].to_numpy(), whole["gpu_row"].to_numpy()
    assert (np.diff(start) >= 0).all()
    assert ((np.diff(start) > 0) | (np.diff(row) > 0)).all()
