"""The cube's fast paths against independent computations (issue 18: 10M kernels).

``op_iter`` and ``kernel_iter`` (reduced per window in (group, iteration) order) against a
pandas group-by of the instances and GPU rows; the group partials' table coding against
its hashing fallback and ``np.unique``; the time partition's clipping and its handling of
GPU work that overlaps nothing against ``intervals.clip_to_windows`` and a merge of every
piece; ``instance_metrics`` against sums, unions and spans per instance.
"""

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.aggregate import aggregate, intervals
from jlprof.engine.aggregate.aggregate import build_cube, instance_metrics
from jlprof.engine.analysis import Analysis
from jlprof.engine.correlate.correlate import NONE
from jlprof.engine.read.read import read_trace
from tests.fixtures.loops import small_training_export
from tests.fixtures.scenarios import KEY_NODE, real_data_dir, rich_db


def _analyses(tmp_path):
    yield Analysis(read_trace(rich_db().write(tmp_path / "rich.sqlite")), key_node=KEY_NODE)
    loop = small_training_export(tmp_path / "loop.sqlite", steps=7)
    yield Analysis(read_trace(loop), key_node="optimizer_step")
    two_gpus = real_data_dir() / "nsysai-fastvideo-wan-train-fsdp-2gpu"
    for path in sorted(two_gpus.glob("*.sqlite")):
        yield Analysis(read_trace(path), key_node="aten::add")  # 2 processes, 2 GPUs


def _by_group(keys: dict[str, np.ndarray], cols: dict[str, np.ndarray], mm) -> pd.DataFrame:
    """count, sums and min/max per key, sorted by key: a pandas group-by."""
    df = pd.DataFrame({**keys, **cols})
    agg = {}
    for c in cols:
        agg[f"{c}_sum"] = (c, "sum")
        if c in mm:
            agg[f"{c}_min"] = (c, "min")
            agg[f"{c}_max"] = (c, "max")
    first = next(iter(cols))
    agg["calls"] = (first, "size")
    return _held(df.groupby(list(keys), sort=True).agg(**agg).astype(np.int64))


def _held(frame: pd.DataFrame) -> pd.DataFrame:
    """Each int64 column as the cube holds it: int32 when it has rows that all fit."""
    lim = np.iinfo(np.int32)
    fits = {c: np.int32 for c in frame if len(frame) and frame[c].between(lim.min, lim.max).all()}
    return frame.astype(fits)


@pytest.mark.parametrize("rows", [1_000_000, 7])
def test_op_and_kernel_iter_are_the_group_by_of_their_rows(tmp_path, monkeypatch, rows):
    monkeypatch.setattr(aggregate, "WINDOW_ROWS", rows)
    checked = 0
    for a in _analyses(tmp_path):
        c, m = a.correlated, a.metrics
        cube = build_cube(c, m, a.cube.iterations)
        cols = {
            "cpu": c.inst["cpu_ns"].to_numpy(np.int64),
            "gpu": m.gpu_ns,
            "api": m.api_ns,
            "overhead": m.overhead_ns,
            "idle": m.idle_ns,
            "tc_gpu": m.tc_gpu_ns,
            "kernel": m.kernel_ns,
            "n_gpu": m.n_gpu,
        }
        keys = {"op": c.inst["op"].to_numpy(np.int64), "iteration": cube.inst_iter}
        want = _by_group(keys, cols, ("cpu", "gpu", "overhead", "idle"))
        pd.testing.assert_frame_equal(
            cube.op_iter, want, check_exact=True, check_names=False, check_index_type=False
        )
        g = c.gpu
        gi = g["inst"].to_numpy(np.int64)
        keys = {
            "kernel": g["long_name"].cat.codes.to_numpy(np.int64),
            "op": np.where(gi >= 0, c.inst["op"].to_numpy(np.int64)[np.maximum(gi, 0)], NONE),
            "iteration": cube.gpu_iter,
        }
        cols = {
            "gpu": (g["end_ns"] - g["start_ns"]).to_numpy(np.int64),
            "api": g["api_share_ns"].to_numpy(np.int64),
        }
        want = _by_group(keys, cols, ("gpu", "api"))
        want = want[["calls", "gpu_sum", "gpu_min", "gpu_max", "api_sum", "api_min", "api_max"]]
        got = cube.kernel_iter[want.columns]
        pd.testing.assert_frame_equal(
            got, want, check_exact=True, check_names=False, check_index_type=False
        )
        checked += 1
    assert checked == 3


def test_group_iter_by_hashing_equals_by_table(tmp_path, monkeypatch):
    for rows in (1_000_000, 7):
        monkeypatch.setattr(aggregate, "WINDOW_ROWS", rows)
        for a in _analyses(tmp_path):
            cube = build_cube(a.correlated, a.metrics, a.cube.iterations)
            table = cube.group_iter
            monkeypatch.setattr(aggregate, "DENSE_SLOTS_PER_ROW", 0)
            monkeypatch.setattr(aggregate, "DENSE_MIN_SLOTS", 0)
            cube = build_cube(a.correlated, a.metrics, a.cube.iterations)
            pd.testing.assert_frame_equal(cube.group_iter, table, check_exact=True)
            assert len(table) and table["gpu"].sum() > 0
            monkeypatch.undo()
            monkeypatch.setattr(aggregate, "WINDOW_ROWS", rows)


@pytest.mark.parametrize("dense", [True, False])
def test_codes_are_np_unique_and_look_up_others(monkeypatch, dense):
    if not dense:
        monkeypatch.setattr(aggregate, "DENSE_SLOTS_PER_ROW", 0)
        monkeypatch.setattr(aggregate, "DENSE_MIN_SLOTS", 0)
    r = np.random.default_rng(3)
    for size in (1, 50, 5000):
        key = r.integers(0, size, 300)
        uniq, inv, at = aggregate._codes(key, size)
        want_u, want_inv = np.unique(key, return_inverse=True)
        np.testing.assert_array_equal(uniq, want_u)
        np.testing.assert_array_equal(inv, want_inv)
        probe = r.integers(0, size, 100)
        want = np.array([np.flatnonzero(want_u == p)[0] if p in want_u else -1 for p in probe])
        np.testing.assert_array_equal(at(probe), want)


def test_clip_gives_clip_to_windows_pieces():
    r = np.random.default_rng(5)
    bounds = np.array([100, 150, 160, 400, 1000, 1001, 1500])
    for n in (0, 1, 50, 2000):
        start = r.integers(0, 1700, n)
        end = start + r.choice([0, 1, 5, 30, 400, 1600], n)
        end[: n // 10] = start[: n // 10] - 3  # ends before their starts
        got = np.column_stack(aggregate._clip(start, end, bounds))
        want = np.column_stack(intervals.clip_to_windows(start, end, bounds))
        assert len(want) or n == 0
        got = got[np.lexsort(got.T[::-1])]
        want = want[np.lexsort(want.T[::-1])]
        np.testing.assert_array_equal(got, want)


def test_pieces_that_overlap_nothing_are_counted_as_merging_all_gives():
    """Categories 0..2 hold GPU work, some of it alone; 3.. are host work overlapping it."""
    r = np.random.default_rng(11)
    bounds = np.array([0, 300, 700, 1000])
    n_it, n_lanes = 3, 2
    for _ in range(20):
        lane = r.integers(0, n_lanes, 60)
        start = r.integers(0, 1000, 60)
        end = start + r.integers(1, 80, 60)
        # alone as the engine marks it: overlapping no other GPU work on the lane
        alone = np.zeros(60, bool)
        for ln in range(n_lanes):
            on = lane == ln
            alone[on] = intervals.isolated(start[on], end[on])
        assert alone.any() and not alone.all()
        cat = r.integers(0, 3, 60)
        gpu, alone_from = [], []
        for k in range(3):
            rest, one = (cat == k) & ~alone, (cat == k) & alone
            ml, ms, me = intervals.merge(lane[rest], start[rest], end[rest])
            alone_from.append(len(ml))
            gpu.append(
                (
                    np.concatenate([ml, lane[one]]),
                    np.concatenate([ms, start[one]]),
                    np.concatenate([me, end[one]]),
                )
            )
        host = []
        for _h in range(3):
            hs = r.integers(0, 1000, 8)
            host.append((r.integers(0, n_lanes, 8), hs, hs + r.integers(1, 200, 8)))
        cum_fast = np.zeros((7, n_lanes * n_it), np.int64)
        cum_all = np.zeros((7, n_lanes * n_it), np.int64)
        aggregate._cumulative_union(list(gpu + host), bounds, 0, n_it, cum_fast, alone_from)
        aggregate._cumulative_union(list(gpu + host), bounds, 0, n_it, cum_all)
        np.testing.assert_array_equal(cum_fast, cum_all)
        # and the definition: the union length of categories 0..k per (lane, iteration)
        cats = gpu + host
        for k in range(6):
            ls = np.concatenate([cats[j][0] for j in range(k + 1)])
            ss = np.concatenate([cats[j][1] for j in range(k + 1)])
            es = np.concatenate([cats[j][2] for j in range(k + 1)])
            row, win, ps, pe = intervals.clip_to_windows(ss, es, bounds)
            want = intervals.union_length(ls[row] * n_it + win, ps, pe, n_lanes * n_it)
            np.testing.assert_array_equal(cum_fast[k + 1], want)


def test_instance_metrics_are_sums_unions_and_spans_per_instance(tmp_path):
    idle, all_alone = [], []
    for a in _analyses(tmp_path):
        c, m = a.correlated, a.metrics
        got = instance_metrics(c)
        g = c.gpu
        gi = g["inst"].to_numpy(np.int64)
        gs, ge = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
        n = len(c.inst)
        ok = gi >= 0
        dur = pd.Series(ge - gs)[ok].groupby(gi[ok]).sum()
        want_gpu = np.zeros(n, np.int64)
        want_gpu[dur.index.to_numpy()] = dur.to_numpy()
        np.testing.assert_array_equal(got.gpu_ns, want_gpu)
        np.testing.assert_array_equal(got.n_gpu, np.bincount(gi[ok], minlength=n))
        union = intervals.union_length(gi[ok], gs[ok], ge[ok], n)  # every row merged
        span = pd.DataFrame({"i": gi[ok], "s": gs[ok], "e": ge[ok]}).groupby("i")
        want_span = np.zeros(n, np.int64)
        first, last = span["s"].min(), span["e"].max()
        want_span[first.index.to_numpy()] = (last - first).to_numpy()
        np.testing.assert_array_equal(got.idle_ns, np.maximum(want_span - union, 0))
        for f in ("gpu_ns", "api_ns", "overhead_ns", "idle_ns", "tc_gpu_ns", "kernel_ns"):
            np.testing.assert_array_equal(getattr(got, f), getattr(m, f))
        idle.append(int(got.idle_ns.sum()))
        all_alone.append(bool(g["isolated"].all()))
    # both ways to the union taken (no overlaps: the sum), and idle time found
    assert any(all_alone) and not all(all_alone) and max(idle) > 0
