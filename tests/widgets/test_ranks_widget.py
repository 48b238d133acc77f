"""The ranks dashboard: heatmap cells per rank × iteration, a click opens that rank's views."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("distributed")

import jlprof
from jlprof.widgets.ranks import RanksDashboard
from tests.fixtures.ranks import rank_exports


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    files = rank_exports(tmp_path_factory.mktemp("job"), 4, straggler=2, steps=5)
    return jlprof.load_ranks(files, progress=False)


def test_heatmap_marks_the_straggler_and_a_click_opens_its_views(ranks):
    dash = RanksDashboard(ranks)
    d = dash.src.data
    assert len(d["rank"]) == 4 * 6  # 5 steps: 6 key-node intervals per rank
    steps = d["iteration"] < 5
    slow = d["ratio"][(d["rank"] == 2) & steps]
    others = d["ratio"][(d["rank"] != 2) & steps]
    assert np.all(slow > 1.4) and np.all(np.abs(others - 1) < 0.05)
    # a box selection of rank 2's cells 1..3, as BokehJS reports it
    pick = np.flatnonzero((d["rank"] == 2) & (d["iteration"] >= 1) & (d["iteration"] <= 3))
    dash.src.selected.indices = [int(i) for i in pick]
    prof = dash.dashboard.profile
    assert prof.trace.source.name == ranks.paths[2].name
    assert (prof.iter_start, prof.iter_stop) == (1, 3)
    assert "rank 2" in dash.status.value and "Straggler" in dash.table.value
