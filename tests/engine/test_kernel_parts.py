"""The kernel parts summed window by window equal the whole-trace cube's, frame for frame.

:class:`~jlprof.engine.windowed.kernel_parts.KernelParts` is fed the windowed work pass's GPU rows
(``tests/engine/gpu_rows.py``: every keyed export by windows of 1 and 3 iterations and of 7
and 1000 calls, which cut iterations and put GPU work in a later window than its launch)
and must give ``aggregate._kernel_iter(..., only=(lo, hi))`` and ``Analysis.kernel_flags``
of the whole-trace correlation: index, dtypes, column order and :func:`combine`'s layout.
Synthetic streams then check what the exports do not reach: sums past int32, a group split
over windows whose rows come out of global order, op keys that share a final op.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.aggregate import aggregate
from jlprof.engine.analysis import Analysis
from jlprof.engine.correlate.kernel_names import telling_names
from jlprof.engine.windowed import kernel_parts
from jlprof.engine.windowed.kernel_parts import KernelParts
from jlprof.engine.windowed.windowed import GpuRows
from tests.engine.gpu_rows import stream, streams
from tests.fixtures.scenarios import cpu_only_db, long_db

LIM = np.iinfo(np.int32).max


def _ranges(n_it: int) -> list[tuple[int, int]]:
    """Whole, a middle part, a single iteration, the first and last, and empty parts."""
    mid = (n_it // 3, max(n_it // 3, 2 * n_it // 3 - 1))
    return [(0, n_it - 1), mid, (n_it // 2, n_it // 2), (0, 0), (n_it - 1, n_it - 1),
            (n_it + 1, n_it + 3), (-5, -1)]  # fmt: skip


def _check_kernel_iter(got: pd.DataFrame, want: pd.DataFrame, lo: int, hi: int) -> None:
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert aggregate.ranged_to(got) == aggregate.ranged_to(want) == (lo, hi)
    level = ["kernel", "op"]
    pd.testing.assert_frame_equal(
        aggregate.combine(got, level, lo, hi), aggregate.combine(want, level, lo, hi)
    )


def _feed(windows: list[GpuRows], ranges: list[tuple[int, int]]) -> list[KernelParts]:
    parts = [KernelParts(only=r) for r in ranges]
    for w in windows:
        for p in parts:
            p.add(w)
    return parts


def _check_stream(s) -> None:
    one = s.one
    c, n_it = one.correlated, one.iterations.count
    gpu = one.trace.gpu
    op_of_key = s.wp.op_of_keys(s.c.ops, gpu["name"].cat.categories)
    ranges = _ranges(n_it)
    for (lo, hi), p in zip(ranges, _feed(s.windows, ranges), strict=True):
        want = aggregate._kernel_iter(c, one.gpu_iter, n_it, only=(lo, hi))
        got = p.kernel_iter(op_of_key, len(s.c.ops))
        _check_kernel_iter(got, want, lo, hi)
        flags = p.kernel_flags(gpu["name"].cat.categories, len(gpu["long_name"].cat.categories))
        # Analysis.kernel_flags then shows "Kernel"/"kernel" by what tells them (both paths)
        long_names = gpu["long_name"].cat.categories.to_numpy(object)
        flags["short_name"] = telling_names(flags["short_name"].to_numpy(object), long_names)
        pd.testing.assert_frame_equal(flags, one.kernel_flags)


def test_the_windowed_kernel_parts_equal_the_whole_trace_cube(tmp_path, monkeypatch) -> None:
    """Every window's partials merged into the table as soon as they outnumber it (at the
    default threshold, these small traces would merge once, at the end)."""
    monkeypatch.setattr(kernel_parts, "_MERGE_ROWS", 0)
    seen = 0
    for _path, _key, _size, _by, s in streams(tmp_path):
        _check_stream(s)
        seen += 1
    assert seen >= 16


@pytest.mark.parametrize("size,by", [(1, "iterations"), (7, "calls")])
def test_long_figures_and_no_gpu_rows(tmp_path, size, by) -> None:
    """Kernels and API shares past int32 (long_db), and a profile without GPU rows (the
    reference's empty frame: its columns in another order)."""
    s = stream(long_db().write(tmp_path / "long.sqlite"), "optimizer_step", size, by)
    assert len(s.one.trace.gpu) and int(s.one.gpu_iter.max()) > 0
    _check_stream(s)
    s = stream(cpu_only_db().write(tmp_path / "cpu.sqlite"), None, size, by)
    assert len(s.one.trace.gpu) == 0
    _check_stream(s)


# --- synthetic streams: the reference from the concatenated rows -------------------------


def _rows(rng: np.random.Generator, at: int, n: int, *, n_keys: int, dur_hi: int) -> GpuRows:
    """``n`` random GPU rows with global rows ``at..at + n - 1``."""
    start = rng.integers(0, 10**12, n)
    z = np.zeros(0, np.int64)
    return GpuRows(
        rows=np.arange(at, at + n, dtype=np.int64),
        start_ns=start,
        end_ns=start + rng.integers(0, dur_hi, n),
        device_id=np.zeros(n, np.int64),
        name=rng.integers(0, 5, n),
        long_name=rng.integers(0, 6, n),
        inst=np.zeros(n, np.int64),
        op_key=rng.integers(0, n_keys, n),
        api_share_ns=rng.integers(0, dur_hi, n),
        uses_tc=rng.random(n) < 0.1,
        is_memory=rng.random(n) < 0.1,
        isolated=np.ones(n, bool),
        launch_iter=rng.integers(0, 6, n),
        horizon_ns=0,
        calls_start_ns=z,
        calls_end_ns=z,
    )


def _stream(seed: int, dur_hi: int, sizes: list[int], n_keys: int = 7) -> list[GpuRows]:
    """Windows of ``sizes`` rows, handed in an order that is not their global rows' (the
    first row of a kernel may come in a later window)."""
    rng = np.random.default_rng(seed)
    wins, at = [], 0
    for n in sizes:
        wins.append(_rows(rng, at, n, n_keys=n_keys, dur_hi=dur_hi))
        at += n
    order = rng.permutation(len(wins))
    return [wins[i] for i in order]


def _reference(windows: list[GpuRows], op_of_key: np.ndarray, n_ops: int, only):
    """``_kernel_iter`` and ``kernel_flags`` of the whole run's rows (one instance per op
    key, of op ``op_of_key[key]``), in global row order."""
    per_row = ("rows", "start_ns", "end_ns", "name", "long_name", "op_key", "api_share_ns",
               "uses_tc", "is_memory", "launch_iter")  # fmt: skip
    cat = {k: np.concatenate([getattr(w, k) for w in windows]) for k in per_row}
    order = np.argsort(cat["rows"])
    cat = {k: v[order] for k, v in cat.items()}
    long_names = pd.Index([f"kernel_{i}" for i in range(8)])
    names = pd.Index([f"k{i}" for i in range(6)])
    gpu = pd.DataFrame(
        {
            "long_name": pd.Categorical.from_codes(cat["long_name"], long_names),
            "name": pd.Categorical.from_codes(cat["name"], names),
            "inst": cat["op_key"].astype(np.int32),
            "start_ns": cat["start_ns"],
            "end_ns": cat["end_ns"],
            "api_share_ns": cat["api_share_ns"],
            "uses_tc": cat["uses_tc"],
            "is_memory": cat["is_memory"],
        }
    )
    c = SimpleNamespace(
        gpu=gpu, inst=pd.DataFrame({"op": op_of_key.astype(np.int32)}), ops=range(n_ops)
    )
    n_it = int(cat["launch_iter"].max()) + 1
    ki = aggregate._kernel_iter(c, cat["launch_iter"].astype(np.int32), n_it, only=only)
    whole = SimpleNamespace(correlated=c, parts=None, once=lambda _k, f: f())
    flags = Analysis.kernel_flags.fget(whole)
    return ki, flags, names, len(long_names)


MERGE_ROWS = [0, 5, kernel_parts._MERGE_ROWS]  # table merges: each window, some, at the end


@pytest.mark.parametrize("merge_rows", MERGE_ROWS)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("only", [(0, 5), (2, 3), (4, 4), (7, 9)])
def test_a_stream_whose_sums_pass_int32(seed, only, merge_rows, monkeypatch) -> None:
    """Kernels up to 1.9 s (each fits int32, the groups' sums do not): gpu_sum and api_sum
    int64, the min/max and counts int32, as the whole-run cube has them. Op keys 5 and 6
    share op 1 (an unassociated op that is also a range's), key 4 has none (-1)."""
    monkeypatch.setattr(kernel_parts, "_MERGE_ROWS", merge_rows)
    windows = _stream(seed, 1_900_000_000, [40, 1, 0, 25, 60, 3, 17])
    op_of_key = np.array([0, 1, 2, 3, -1, 1, 1], np.int64)
    want, flags, names, n_long = _reference(windows, op_of_key, 4, only)
    p = KernelParts(only=only)
    for w in windows:
        p.add(w)
    _check_kernel_iter(p.kernel_iter(op_of_key, 4), want, *only)
    pd.testing.assert_frame_equal(p.kernel_flags(names, n_long), flags)
    if only == (0, 5):
        assert int(want["gpu_sum"].max()) > LIM and want["gpu_sum"].dtype == np.int64
        assert want["gpu_max"].dtype == np.int32 and want["calls"].dtype == np.int32


@pytest.mark.parametrize("merge_rows", MERGE_ROWS)
def test_a_group_split_over_windows_merges_exactly(merge_rows, monkeypatch) -> None:
    """Each group's rows spread over many one- and two-row windows, handed out of global
    order: a carry that kept one window's partial, a min or max merged as a sum, or a first
    row taken from the first window handed rather than the least global row fails here."""
    monkeypatch.setattr(kernel_parts, "_MERGE_ROWS", merge_rows)
    windows = _stream(7, 1000, [1, 2] * 60, n_keys=2)
    op_of_key = np.arange(2, dtype=np.int64)
    want, flags, names, n_long = _reference(windows, op_of_key, 2, (0, 5))
    assert (want["calls"] > 1).all()
    p = KernelParts(only=(0, 5))
    for w in windows:
        p.add(w)
    _check_kernel_iter(p.kernel_iter(op_of_key, 2), want, 0, 5)
    pd.testing.assert_frame_equal(p.kernel_flags(names, n_long), flags)
    # the table held between windows is one row per (kernel, op key) met, no more
    p._merge()
    assert len(p._keys) == len(want)


def _more_real():
    """The real exports ``streams`` leaves out: the 2-GPU inference trace split by a key
    node (many short iterations), the others whole."""
    from tests.fixtures.scenarios import real_traces

    for p in real_traces():
        name = p.parent.name
        if name == "nsysai-fastvideo-wan-infer-sp2-2gpu":
            yield p, "aten::add"
        elif name not in ("centerformer-trt-nvtx-titanrtx", "mmagic-pyprof-a100") and (
            "train-fsdp" not in name
        ):
            yield p, None


@pytest.mark.parametrize("size,by", [(1, "iterations"), (3, "iterations"), (7, "calls")])
def test_the_other_real_traces(size, by) -> None:
    seen = 0
    for path, key in _more_real():
        s = stream(path, key, size, by)
        _check_stream(s)
        seen += 1
    assert seen == 4
