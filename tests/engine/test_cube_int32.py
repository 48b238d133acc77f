"""The cube's columns are int32 where every value fits, int64 where one does not (issue 18:
memory), and every range sum over them is exact either way.

Kernels of 1.2 s and 1.5 s: an instance's or a kernel's time fits int32 (< 2.147 s), a
per-iteration sum of two of them does not, and neither does a sum over iterations of one.
Expected figures are summed from the fixture's own kernel list in Python integers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.aggregate import aggregate, intervals
from jlprof.engine.aggregate.aggregate import combine, combine_reference
from jlprof.engine.analysis import Analysis
from jlprof.engine.read.read import read_trace
from jlprof.reports import tables
from tests.fixtures.nsysdb import NsysDb

LIM = np.iinfo(np.int32).max
STEPS = 3
CONV_NS = 1_200_000_000  # one per iteration: 3.6 s over the run
BIG_NS = 1_500_000_000  # "big": two instances of one kernel each per iteration: 3 s


def _export(path: Path, big: bool) -> tuple[Path, dict[str, list[int]]]:
    """``STEPS`` iterations of conv (one long kernel) [and big (two)] then optimizer_step;
    returns the export and each op's kernel durations (ns)."""
    db = NsysDb()
    db.gpu(cu_device=0, name="NVIDIA A100-SXM4-40GB")
    t = db.process(pid=4242, name="python").thread()
    now, gpu_at = 1_000_000, 2_000_000
    kernels: dict[str, list[int]] = {"/model/conv": [], "/model/big": []}

    def op(name: str, kernel: str, dur: int) -> None:
        nonlocal now, gpu_at
        t.launch(kernel, now + 1_000, now + 5_000, gpu_at, gpu_at + dur)
        t.push_pop(name, now, now + 10_000)
        kernels[name].append(dur)
        now += 20_000
        gpu_at += dur + 1_000

    for _ in range(STEPS):
        op("/model/conv", "volta_sgemm_128x64_nn", CONV_NS)
        if big:
            op("/model/big", "void big_kernel(int)", BIG_NS)
            op("/model/big", "void big_kernel(int)", BIG_NS)
        t.push_pop("optimizer_step", now, now + 10_000)
        now = max(now + 20_000, gpu_at)  # the next step once the GPU is done: 1.2-4.2 s
    return db.write(path), kernels


def _analysis(tmp_path: Path, big: bool) -> tuple[Analysis, dict[str, list[int]]]:
    path, kernels = _export(tmp_path / f"long{int(big)}.sqlite", big)
    return Analysis(read_trace(path), key_node="optimizer_step"), kernels


def _int32(frame: pd.DataFrame) -> set[str]:
    return {c for c in frame.columns if frame[c].dtype == np.int32}


def test_columns_that_fit_are_int32_and_their_range_sums_exact(tmp_path) -> None:
    p, kernels = _analysis(tmp_path, big=False)
    cube = p.cube
    oi, ki = cube.op_iter, cube.kernel_iter
    assert _int32(oi) == set(oi.columns) and _int32(ki) == set(ki.columns)
    assert _int32(cube.group_iter) == set(cube.group_iter.columns)
    assert int(oi["gpu_sum"].max()) == CONV_NS  # per iteration: fits
    lo, hi = p.range_of(None, None)
    comb = combine(oi, "op", lo, hi)
    conv = int(p.correlated.ops.index[p.correlated.ops["op_name"] == "/model/conv"][0])
    # over the run the sum does not fit int32: summed in int64, exact
    n = sum(1 for i in range(lo, hi + 1) if i < len(kernels["/model/conv"]))
    assert comb.loc[conv, "gpu_sum"] == CONV_NS * n > LIM
    assert all(t == np.int64 for t in comb.dtypes)
    wide = oi.astype(np.int64)  # the int64 computation the int32 cube must equal
    for a, b in [(lo, hi), (lo, lo), (hi, hi), (lo + 1, hi)]:
        pd.testing.assert_frame_equal(combine(oi, "op", a, b), combine(wide, "op", a, b))
        pd.testing.assert_frame_equal(
            combine(oi, "op", a, b), combine_reference(wide, "op", a, b), check_exact=True
        )


def test_a_column_with_a_sum_past_int32_is_int64_and_exact(tmp_path) -> None:
    p, kernels = _analysis(tmp_path, big=True)
    cube = p.cube
    oi, ki = cube.op_iter, cube.kernel_iter
    # a per-iteration sum of two 1.5 s instances / kernels: int64; their min/max fit
    for f in (oi, ki):
        assert f["gpu_sum"].dtype == np.int64, f.dtypes
        assert f["gpu_max"].dtype == np.int32 and f["calls"].dtype == np.int32
    assert int(oi["gpu_sum"].max()) == 2 * BIG_NS
    ops = p.correlated.ops
    for name, durs in kernels.items():
        code = int(ops.index[ops["op_name"] == name][0])
        sel = oi.xs(code, level="op")
        for it in sel.index:  # each iteration's partial, against the fixture's kernels
            per = len(durs) // STEPS
            assert int(sel.loc[it, "gpu_sum"]) == sum(durs[it * per : (it + 1) * per])
    lo, hi = p.range_of(None, None)
    for frame, level in [(oi, "op"), (ki, ["kernel", "op"])]:
        for a, b in [(lo, hi), (lo, lo), (hi - 1, hi)]:
            got = combine(frame, level, a, b)
            want = combine_reference(frame.astype(np.int64), level, a, b)
            pd.testing.assert_frame_equal(got, want, check_exact=True)
    detail = tables.detail(p, lo, hi)
    by_name = detail.set_index("Op Name")["Total GPU Time (ns)"]
    assert detail["Total GPU Time (ns)"].dtype == np.int64
    for name, durs in kernels.items():
        per = len(durs) // STEPS
        assert by_name[name] == sum(durs[lo * per : (hi + 1) * per])


@pytest.mark.parametrize("rows", [1_000_000, 1])
def test_windows_give_the_same_dtypes(tmp_path, monkeypatch, rows) -> None:
    """Per-window parts are narrowed on their own; the merged column is int32 only where
    every part's is, as one pass over all rows decides it."""
    p, _ = _analysis(tmp_path, big=True)
    one = {n: getattr(p.cube, n) for n in ("op_iter", "kernel_iter", "group_iter")}
    monkeypatch.setattr(aggregate, "WINDOW_ROWS", rows)
    cube = aggregate.build_cube(p.correlated, p.metrics, p.cube.iterations, groups=True)
    for n, want in one.items():
        pd.testing.assert_frame_equal(getattr(cube, n), want, check_exact=True)


def test_combine_sums_int32_exactly_near_the_limit() -> None:
    """Group totals past int32 are summed in int64; those that fit, in int32: both exact."""
    it = np.tile(np.arange(4), 3)
    grp = np.repeat(np.arange(3), 4)
    vals = {
        "gpu_sum": [LIM, LIM, 5, 7, 1, 2, 3, 4, LIM - 10, 3, 3, 3],  # group totals > LIM
        "n_sum": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, LIM - 100],  # every total fits
        "gpu_min": [-(2**31), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        "gpu_max": [LIM, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
    }
    idx = pd.MultiIndex.from_arrays([grp, it], names=["op", "iteration"])
    small = pd.DataFrame({c: np.array(v, np.int32) for c, v in vals.items()}, index=idx)
    wide = small.astype(np.int64)
    for lo, hi in [(0, 3), (0, 1), (1, 2), (3, 3), (2, 9)]:
        got = combine(small, "op", lo, hi)
        assert all(t == np.int64 for t in got.dtypes)
        pd.testing.assert_frame_equal(got, combine_reference(wide, "op", lo, hi))
    lay = aggregate._layout(small, "op")
    assert not lay.sums_fit("gpu_sum") and lay.sums_fit("n_sum")
    assert lay.key.dtype == np.int32


@pytest.mark.parametrize("block", [32, 5, 1, 1000])
def test_run_sums_are_exact_int64_sums(block) -> None:
    """Runs across block edges and inside one block, touching runs (b == next a), empty
    ones, one reaching the end: each sum against Python's, values near the int32 limit."""
    rng = np.random.default_rng(7)
    for n in (1, 2, 17, 300):
        x = rng.integers(-(2**31), 2**31, n).astype(np.int32)
        x[rng.random(n) < 0.5] = LIM
        edges = np.sort(rng.integers(0, n + 1, 2 * int(rng.integers(1, 9))))
        edges[-1] = n if n % 2 else edges[-1]
        a, b = edges[0::2], edges[1::2]
        want = [sum(int(v) for v in x[i:j]) for i, j in zip(a, b, strict=True)]
        prefix = intervals.block_prefix(x, block)
        assert prefix.tolist() == [sum(int(v) for v in x[: j * block]) for j in range(len(prefix))]
        got = intervals.run_sums(x, a, b, prefix, block)
        assert got.dtype == np.int64 and got.tolist() == want


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("block", [32, 3])
def test_combine_of_random_int32_frames_is_the_int64_group_by(monkeypatch, seed, block) -> None:
    """Columns whose group totals pass int32 (summed from block prefixes) and columns that
    fit (summed in int32), over many ranges, against the group-by of the int64 frame."""
    monkeypatch.setattr(aggregate, "SUM_BLOCK", block)
    rng = np.random.default_rng(seed)
    n_groups, n_it = int(rng.integers(1, 9)), int(rng.integers(1, 80))
    keys = [(g, i) for g in range(n_groups) for i in range(n_it) if rng.random() < 0.7]
    if not keys:
        keys = [(0, 0)]
    g, it = np.array(keys).T
    n = len(keys)
    small = pd.DataFrame(
        {
            "gpu_sum": rng.integers(LIM // 2 + 1, LIM + 1, n).astype(np.int32),  # 2 pass
            "calls": rng.integers(1, 5, n).astype(np.int32),  # totals fit
            "gpu_min": rng.integers(-(2**31), LIM + 1, n).astype(np.int32),
            "gpu_max": rng.integers(-(2**31), LIM + 1, n).astype(np.int32),
        },
        index=pd.MultiIndex.from_arrays([g, it], names=["op", "iteration"]),
    )
    wide = small.astype(np.int64)
    for _ in range(20):
        lo = int(rng.integers(-3, n_it + 2))
        hi = int(rng.integers(lo - 1, n_it + 3))
        got = combine(small, "op", lo, hi)
        pd.testing.assert_frame_equal(got, combine_reference(wide, "op", lo, hi))
    assert aggregate._layout(small, "op").sums_fit("calls")
    two = np.bincount(g).max() >= 2  # a group total of two or more rows passes int32
    assert aggregate._layout(small, "op").sums_fit("gpu_sum") != two
