"""A range-only profile's cube: ``op_iter`` and ``kernel_iter`` for its range alone.

A profile for the command line's reports (``load(range_only=True)``, and every profile read
by windows, ``profile.load_windowed``) answers one range lo..hi, so
``build_cube(..., only=(lo, hi))`` aggregates the instances and GPU rows of lo..hi per op
and per (kernel, op) directly, by chunks of rows whose partials are merged, instead of per
iteration. :func:`combine` of it over lo..hi must equal :func:`combine` of the
per-iteration cube exactly, for the whole range, the first iteration, a middle part and
the last, with chunks of 7 rows (a merge at nearly every row: a partial lost, counted
twice or merged by the wrong aggregate changes a figure) and of the default size; every
report of such a profile must equal the whole-trace profile's. Any other range, and the
per-iteration readers (outlier ops, the dashboard's panels), are refused with an error.
"""

from __future__ import annotations

import pandas as pd
import pytest

from jlprof.engine.aggregate import aggregate
from jlprof.engine.aggregate.aggregate import build_cube, combine, per_iteration
from jlprof.engine.read.read import read_trace
from jlprof.errors import AnalysisError
from jlprof.profile import Profile
from jlprof.reports import REPORT_NAMES, catalog
from tests.fixtures.scenarios import cpu_only_db

from .test_windowed import keyed_exports

LEVELS = {"op_iter": "op", "kernel_iter": ["kernel", "op"]}


def _exports(tmp_path):
    yield from keyed_exports(tmp_path)  # fixtures, the FSDP trace by aten::add, every real one
    yield cpu_only_db().write(tmp_path / "cpu.sqlite"), None


def _ranges(count: int) -> list[tuple[int, int]]:
    """All iterations, the first alone, a middle part and the last alone."""
    last = count - 1
    mid = (min(1, last), max(min(1, last), last - 1))
    return list(dict.fromkeys([(0, last), (0, 0), mid, (last, last)]))


def _wide(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.astype({c: "int64" for c, t in frame.dtypes.items() if t.kind in "iu"})


@pytest.mark.parametrize("rows", [7, None])
def test_a_range_only_cube_combines_to_the_per_iteration_cubes(tmp_path, monkeypatch, rows):
    if rows is not None:
        monkeypatch.setattr(aggregate, "RANGE_ROWS", rows)
    split = 0
    for path, key in _exports(tmp_path):
        whole = Profile(read_trace(path), key_node=key)
        it = whole.iterations
        split += it.count > 2
        for lo, hi in _ranges(it.count):
            cube = build_cube(whole.correlated, whole.metrics, it, only=(lo, hi))
            assert cube.only == (lo, hi)
            for name, level in LEVELS.items():
                got, per_it = getattr(cube, name), getattr(whole.cube, name)
                # one row per group that ran in the range, at iteration lo
                want = aggregate.combine_reference(per_it, level, lo, hi)
                assert len(got) == len(want), (path, name, lo, hi)
                assert set(got.index.get_level_values("iteration")) <= {lo}
                pd.testing.assert_frame_equal(
                    _wide(combine(got, level, lo, hi)),
                    _wide(combine(per_it, level, lo, hi)),
                    check_exact=True,
                    obj=f"{path} {name} {lo}..{hi}",
                )
                pd.testing.assert_frame_equal(
                    combine(got, level, lo, hi), want, check_exact=True, check_index_type=False
                )
            for name in ("time_iter", "group_iter"):  # per iteration, as the whole cube's
                pd.testing.assert_frame_equal(getattr(cube, name), getattr(whole.cube, name))
    assert split >= 3  # the key node splits the fixtures and the FSDP trace


@pytest.mark.parametrize("windowed", [True, False])
def test_a_range_only_profiles_reports_are_the_whole_ones(tmp_path, windowed):
    """The windowed profile (given its correlation) and the command line's whole-trace one
    (``load(range_only=True)``, which correlates the trace itself)."""
    for path, key in _exports(tmp_path):
        whole = Profile(read_trace(path), key_node=key)
        for lo, hi in _ranges(whole.iterations.count):
            ranged = Profile(
                whole.trace,
                key_node=key,
                iter_start=lo,
                iter_stop=hi,
                correlated=(whole.correlated, whole.metrics) if windowed else None,
                range_only=True,
            )
            assert ranged.cube.only == (lo, hi)
            assert (ranged.iter_start, ranged.iter_stop) == (lo, hi)
            for name in REPORT_NAMES:
                got = catalog.report(ranged, name)
                want = catalog.report(whole, name, lo, hi)
                pd.testing.assert_frame_equal(got, want, obj=f"{path} {name} {lo}..{hi}")


def test_another_range_and_per_iteration_readers_are_refused(tmp_path):
    from jlprof.widgets import panels_data
    from tests.fixtures.scenarios import KEY_NODE, rich_db

    trace = read_trace(rich_db().write(tmp_path / "rich.sqlite"))
    whole = Profile(trace, key_node=KEY_NODE)
    assert whole.iterations.count == 4
    p = Profile(
        trace,
        key_node=KEY_NODE,
        iter_start=1,
        iter_stop=2,
        correlated=(whole.correlated, whole.metrics),
        range_only=True,
    )
    said = r"keeps iterations 1..2 only \(range_only: .*\); load it again for another range"
    for lo, hi in ((0, 3), (1, 1), (2, 2), (1, 3)):
        with pytest.raises(AnalysisError, match=said):
            combine(p.cube.op_iter, "op", lo, hi)
        with pytest.raises(AnalysisError, match=said):
            combine(p.cube.kernel_iter, ["kernel", "op"], lo, hi)
        with pytest.raises(AnalysisError, match=said):
            p.report("detail", lo, hi)
        with pytest.raises(AnalysisError, match=said):
            p.set_range(lo, hi)
        assert (p.iter_start, p.iter_stop) == (1, 2)
    with pytest.raises(AnalysisError, match="load it again for another key node"):
        p.set_key_node(KEY_NODE)  # a range of one key node's iterations
    assert p.key_node == KEY_NODE
    p.set_range(1, 2)  # its own range is fine
    pd.testing.assert_frame_equal(p.report("kernel"), whole.report("kernel", 1, 2))
    per_it = "keeps iterations 1..2 combined, not per iteration"
    with pytest.raises(AnalysisError, match=per_it):
        p.outlier_ops(1)
    with pytest.raises(AnalysisError, match=per_it):
        per_iteration(p.cube.kernel_iter)
    with pytest.raises(AnalysisError, match=per_it):
        panels_data.iterations_by_op(p, 1, 2, 0)
    with pytest.raises(AnalysisError, match=per_it):
        panels_data.kernel_iterations(p, 1, 2, 0, 0)
    # the whole profile's cube reads per iteration and combines any range
    assert per_iteration(whole.cube.op_iter) is whole.cube.op_iter
    assert len(whole.outlier_ops(1)) > 0


def test_a_range_only_profiles_iteration_report_needs_no_cube(tmp_path):
    """A command's profile builds its cube on first use: its iteration report (the longest
    file) streams from the launch iterations alone while the cube is built beside it. The
    report made before any cube equals the whole profile's, and the cube built afterwards
    holds the very launch iterations the report read (found once, not twice)."""
    from jlprof.reports import tables

    for path, key in _exports(tmp_path):
        whole = Profile(read_trace(path), key_node=key)
        lo, hi = _ranges(whole.iterations.count)[-1]
        p = Profile(whole.trace, key_node=key, iter_start=lo, iter_stop=hi, range_only=True)
        assert p._cubes == {}, "a range-only profile builds no cube at load"
        assert p.iterations.count == whole.iterations.count
        got = pd.concat(list(tables.iteration_parts(p, lo, hi, rows=3)), ignore_index=True)
        assert p._cubes == {}, "the iteration report needs no cube"
        pd.testing.assert_frame_equal(got, catalog.report(whole, "iteration", lo, hi))
        launch = p.gpu_iter
        assert (launch == whole.cube.gpu_iter).all()
        assert p.cube.gpu_iter is launch and p.gpu_iter is launch
        assert p.iterations is p.cube.iterations
