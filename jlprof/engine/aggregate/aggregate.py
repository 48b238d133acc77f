"""Per-iteration partial aggregates ("the cube") and range queries over them.

Everything a report shows is additive across iterations once split per iteration:
sums and counts add, minima and maxima combine, and flattened (union) times are
computed inside each iteration window. So the cube is built once per key node, and a new
``--iter_start/--iter_stop`` is a small group-by over the cube, never a re-read
(DESIGN.md: re-aggregation stays in memory).

Attribution (DESIGN.md rule 5): an op instance belongs to the iteration of its NVTX
start; GPU work follows the API call that launched it; time-based figures (utilisation,
the duration breakdown) clip intervals to the iteration windows instead.

Storage: the cube is kept for the whole run (at 10M kernels ~6M ``op_iter`` rows), so each
of its columns is int32 when every value fits and int64 otherwise, decided per column
where the frame is built (``engine.read.narrow``, the reader's rule); the builders sum and
subtract in int64 whatever their inputs hold. Readers go through :func:`combine`, which
sums exactly (int64, or int32 where no group's total can overflow) and gives int64, so
reports never see the narrowed types; a reader of a cube frame's rows widens at the use.

A range-only profile (``load(range_only=True)``: the command line's, read whole or by
windows) writes its reports for one range lo..hi and is never re-ranged, so its cube keeps
``op_iter`` and ``kernel_iter`` for that range alone (``build_cube(only=(lo, hi))``): one
row per op and per (kernel, op), aggregated by chunks of rows whose partials are merged;
:func:`combine` gives lo..hi's figures from them exactly and refuses any other range,
:func:`per_iteration` refuses readers of their rows per iteration (at 10M kernels: 0.6 GB
less kept, the cube's peak 0.65 GB lower).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from jlprof.background import InThread
from jlprof.engine.aggregate import intervals
from jlprof.engine.aggregate.iterations import Iterations
from jlprof.engine.correlate.correlate import NONE, Correlated
from jlprof.engine.memory import release_reader_memory
from jlprof.engine.read.narrow import INT32, index_dtype, narrow
from jlprof.errors import AnalysisError

DATALOADER = re.compile(r"data_?loader|dataloader|DataLoader|data_load", re.I)
# Priority partition of wall time (guide §10.2 "Summary Report"), highest first.
CATEGORIES = ("tc", "non_tc", "memory", "dataloader", "io", "cpu")
# rows per block of an int32 cube column's prefix sums, which :func:`combine` sums it from
# where its sums may not fit int32: 0.25 bytes a row kept; a range gathers < 2 blocks a group
SUM_BLOCK = 32


@dataclass
class InstanceMetrics:
    """Per op-instance figures that do not depend on the key node.

    Each array is int32 when every value fits, else int64 (4 bytes an instance saved on
    each; the figures of an instance are below 2.1 s in most traces): read them as int64
    where they enter a sum, product or difference.
    """

    gpu_ns: np.ndarray
    api_ns: np.ndarray
    overhead_ns: np.ndarray
    idle_ns: np.ndarray
    tc_gpu_ns: np.ndarray
    kernel_ns: np.ndarray
    n_gpu: np.ndarray


def instance_metrics(c: Correlated) -> InstanceMetrics:
    """Accumulate GPU/API time onto op instances (exclusive: innermost range only)."""
    n = len(c.inst)
    g = c.gpu
    g_inst = g["inst"].to_numpy()  # row indices: as held (int32), only indexed and compared
    g_start, g_end = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
    g_dur = g_end - g_start
    ok = g_inst >= 0
    every = bool(ok.all())  # usually: then no 10M-row copies of the associated rows

    def assoc(x: np.ndarray) -> np.ndarray:
        return x if every else x[ok]

    gi = assoc(g_inst)
    gpu_ns = np.bincount(gi, weights=assoc(g_dur), minlength=n).astype(np.int64)
    tc = g["uses_tc"].to_numpy(bool) & ok
    tc_gpu_ns = np.bincount(g_inst[tc], weights=g_dur[tc], minlength=n).astype(np.int64)
    kern = ok & ~g["is_memory"].to_numpy(bool)
    kernel_ns = np.bincount(g_inst[kern], weights=g_dur[kern], minlength=n).astype(np.int64)
    del tc, kern
    n_gpu = np.bincount(gi, minlength=n).astype(np.int64)
    synthetic = c.inst["synthetic"].to_numpy(bool)
    a = c.api
    a_inst = a["inst"].to_numpy()
    a_dur = a["end_ns"].to_numpy(np.int64) - a["start_ns"].to_numpy(np.int64)
    # calls that launched unassociated work are counted through that work's share below
    g_api = g["api"].to_numpy()
    launched_synthetic = np.zeros(len(a), dtype=bool)
    sg = ok & (g_api >= 0) & synthetic[np.maximum(g_inst, 0)]
    launched_synthetic[g_api[sg]] = True
    aok = (a_inst >= 0) & ~launched_synthetic
    # float: np.bincount ignores the weights dtype when it is given no rows (int64 zeros)
    api_ns = np.bincount(a_inst[aok], weights=a_dur[aok], minlength=n).astype(np.float64)
    del a_dur, aok, launched_synthetic
    share = g["api_share_ns"].to_numpy()  # int32*: only weights (float64)
    api_ns += np.bincount(g_inst[sg], weights=share[sg], minlength=n)
    api_ns = api_ns.astype(np.int64)
    cpu = c.inst["cpu_ns"].to_numpy(np.int64)
    overhead = np.maximum(cpu - api_ns, 0)
    # GPU idle inside an instance: its GPU span minus the union of its GPU work
    if ok.any():
        gs, ge = assoc(g_start), assoc(g_end)
        alone = assoc(g["isolated"].to_numpy(bool))
        if alone.all() and bool((g_dur >= 0).all()):  # no overlaps: the union is the sum
            union = gpu_ns  # (what union_length computes then, without its 10M-row copies)
        elif alone.all():
            union = np.bincount(gi, weights=np.maximum(ge, gs) - gs, minlength=n).astype(np.int64)
        else:
            union = intervals.union_length(gi, gs, ge, n, alone)
        first = np.full(n, np.iinfo(np.int64).max)
        last = np.full(n, np.iinfo(np.int64).min)
        np.minimum.at(first, gi, gs)
        np.maximum.at(last, gi, ge)
        span = np.where(n_gpu > 0, last - first, 0)
        idle = np.maximum(span - union, 0)
    else:
        idle = np.zeros(n, dtype=np.int64)
    return InstanceMetrics(
        gpu_ns=narrow(gpu_ns),
        api_ns=narrow(api_ns),
        overhead_ns=narrow(overhead),
        idle_ns=narrow(idle),
        tc_gpu_ns=narrow(tc_gpu_ns),
        kernel_ns=narrow(kernel_ns),
        n_gpu=narrow(n_gpu),
    )


def _group_stats(
    key: np.ndarray, cols: dict[str, np.ndarray], minmax: tuple[str, ...] | None = None
) -> pd.DataFrame:
    """count + sum (and min/max for ``minmax``, default all) of each column per integer key.

    One sort, then reduceat. Only the columns a report shows as Min/Max get them: the
    per-iteration cube is the largest thing a loaded profile keeps in memory.
    """
    key = np.asarray(key, dtype=np.int64)
    mm = set(cols) if minmax is None else set(minmax)
    if len(key) == 0:
        names = [
            f"{c}_{f}" for c in cols for f in (("sum", "min", "max") if c in mm else ("sum",))
        ] + ["calls"]
        return pd.DataFrame(
            {n: pd.Series([], dtype="int64") for n in names},
            index=pd.Index([], dtype="int64", name="key"),
        )
    k, out = _stats_arrays(key, cols, mm)
    return pd.DataFrame(out, index=pd.Index(k, name="key"), copy=False)


def _stats_arrays(
    key: np.ndarray, cols: dict[str, np.ndarray], mm: set[str]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """:func:`_group_stats`' sorted unique keys and columns, for a non-empty ``key``."""
    order = np.argsort(key, kind="stable")  # timsort: fast on the nearly sorted keys we pass
    k = key[order]
    starts, out = _run_stats(k, ((n, np.asarray(v)[order]) for n, v in cols.items()), mm)
    return k[starts], out


def _run_stats(
    key: np.ndarray, values: Iterable[tuple[str, np.ndarray]], mm: set[str]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Sum (and min/max for names in ``mm``) of each column over the runs of a sorted key.

    ``values`` yields (name, column in key order) one at a time, so each gathered column is
    freed before the next is made. Returns the runs' starts and ``{name}_sum``/``_min``/
    ``_max`` plus ``calls`` (run lengths).
    """
    starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
    out: dict[str, np.ndarray] = {}
    for name, v in values:
        vs = np.asarray(v, dtype=np.int64)  # summed in int64 whatever the input holds
        out[f"{name}_sum"] = narrow(np.add.reduceat(vs, starts))
        if name in mm:
            out[f"{name}_min"] = narrow(np.minimum.reduceat(vs, starts))
            out[f"{name}_max"] = narrow(np.maximum.reduceat(vs, starts))
        del v, vs
    out["calls"] = narrow(np.diff(np.append(starts, len(key))))
    return starts, out


def _gather(v: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    return lambda rows: v[rows]


def _inverse(order: np.ndarray) -> np.ndarray:
    """The inverse permutation, in 32 bits when it fits (the cube's largest temporaries)."""
    dt = index_dtype(len(order))
    inv = np.empty(len(order), dt)
    inv[order] = np.arange(len(order), dtype=dt)
    return inv


def _lex_order(major: np.ndarray, minor: np.ndarray, n_minor: int) -> np.ndarray:
    """Stable order of rows by (major, minor), both >= 0 and minor < n_minor.

    Two stable 16-bit sorts (numpy sorts them by radix, in linear time) when both fit,
    instead of a comparison sort of one 64-bit key: rows come in time order, which is
    iteration-major, and a group-major order scatters them.
    """
    small = np.int16 if len(major) == 0 or int(major.max()) < 1 << 15 else None
    if small is not None and n_minor < 1 << 15:
        order = np.argsort(minor.astype(np.int16), kind="stable")
        return order[np.argsort(major[order].astype(np.int16), kind="stable")]
    return np.argsort(major * n_minor + minor, kind="stable")


def _group_major_stats(
    windows: list[tuple[int, int]],
    iter_of_row: np.ndarray,
    group_of: Callable[[np.ndarray | None], np.ndarray],
    take: dict[str, Callable[[np.ndarray], np.ndarray]],
    mm: set[str],
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], tuple]:
    """Count, sums and min/max per (group, iteration) of rows, in (group, iteration) order.

    ``group_of(rows)`` gives the rows' group values (>= 0; None: every row) and
    ``take[name](rows)`` a column's values at rows. Each window of iterations is sorted
    by (group, iteration) and reduced on its own rows, gathering each column once; the
    windows' parts, iteration-disjoint and ascending, then interleave by one stable sort
    on the group alone (runs of whole blocks), which gives the order of one pass over all
    rows. Returns (group, iteration, columns, (unique groups, layout key, span, it0)).
    """
    n_it = windows[-1][1]
    kparts: list[np.ndarray] = []  # group * n_it + iteration: one array per part
    parts: list[dict[str, np.ndarray]] = []
    for (a, b), rows in zip(windows, _window_rows(iter_of_row, windows), strict=True):
        if rows is not None and len(rows) == 0:
            continue
        gv = np.asarray(group_of(rows), dtype=np.int64)
        li = _take(iter_of_row, rows) - a
        order = _lex_order(gv, li, b - a)
        key = gv[order] * (b - a) + li[order]
        del gv, li
        idx = order if rows is None else rows[order]
        del order
        starts, out = _run_stats(key, ((n, f(idx)) for n, f in take.items()), mm)
        k = key[starts]
        del key, idx, starts
        kparts.append(k // (b - a) * n_it + (k % (b - a) + a))
        parts.append(out)
    keys = np.concatenate(kparts)
    del kparts
    if len(parts) > 1:
        grp = keys // n_it
        small = len(grp) == 0 or int(grp.max()) < 1 << 15
        order = np.argsort(grp.astype(np.int16) if small else keys, kind="stable")
        del grp
        dest = _inverse(order)  # where each part row goes
        keys = keys[order]
        del order
        merged = _merge_parts(parts, dest)
        del dest
    else:
        merged = parts[0]
    return _group_major_layout(keys, n_it, merged)


def _group_major_layout(
    keys: np.ndarray, n_it: int, merged: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], tuple]:
    """:func:`_group_major_stats`' result for sorted unique ``group * n_it + iteration``
    keys and their columns."""
    gv = keys // n_it
    iters = keys - gv * n_it
    del keys
    new = np.concatenate([[len(gv) > 0], gv[1:] != gv[:-1]])
    it0 = int(iters.min()) if len(iters) else 0
    span = int(iters.max()) - it0 + 1 if len(iters) else 1
    key = np.cumsum(new)  # group code * span + iteration - it0, in place: 6M rows at 10M
    key -= 1
    key *= span
    key += iters
    key -= it0
    return gv, iters, merged, (gv[new], key, span, it0)


def _ranged_stats(
    iter_of_row: np.ndarray,
    only: tuple[int, int],
    group_of: Callable[[np.ndarray | None], np.ndarray],
    take: dict[str, Callable[[np.ndarray], np.ndarray]],
    mm: set[str],
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], tuple]:
    """:func:`_group_major_stats` for the rows of iterations lo..hi taken as one iteration
    (``lo``): each group's count, sum, min and max over the whole range.

    The rows go by chunks of :data:`RANGE_ROWS`: each chunk's rows in the range are reduced
    per group (one sort of the chunk), then the chunks' partials are merged (sum of sums,
    min of mins, max of maxes, sum of counts). No temporary is longer than a chunk; the
    result is what :func:`combine` of the per-iteration frame gives over lo..hi.
    """
    lo, hi = only
    kparts: list[np.ndarray] = []
    parts: list[dict[str, np.ndarray]] = []
    for at in range(0, len(iter_of_row), RANGE_ROWS):
        its = iter_of_row[at : at + RANGE_ROWS]
        rows = np.flatnonzero((its >= lo) & (its <= hi))
        if len(rows) == 0:
            continue
        rows += at
        gv = np.asarray(group_of(rows), dtype=np.int64)
        order = np.argsort(gv, kind="stable")
        key, idx = gv[order], rows[order]
        del gv, order, rows
        starts, out = _run_stats(key, ((n, f(idx)) for n, f in take.items()), mm)
        kparts.append(key[starts])
        parts.append(out)
        del key, idx, starts
    if not parts:
        keys, merged = _no_stats(take, mm)
    elif len(parts) == 1:
        keys, merged = kparts[0], parts[0]
    else:
        keys, merged = merge_keyed(kparts, parts)
        del kparts
    return ranged_layout(keys, merged, lo)


def _no_stats(take: Iterable[str], mm: set[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """:func:`_run_stats`' keys and columns for no rows (int64, as an empty frame has them)."""
    names = [f"{n}_{f}" for n in take for f in (("sum", "min", "max") if n in mm else ("sum",))]
    return np.zeros(0, np.int64), {n: np.zeros(0, np.int64) for n in [*names, "calls"]}


def merge_keyed(
    kparts: list[np.ndarray], parts: list[dict[str, np.ndarray]]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Partials of (non-empty) parts merged per key: sum of sums and counts, min of mins, max
    of maxes, each column summed in int64 and then narrowed (the value's own dtype, as one
    pass gives it). Returns the sorted unique keys and the columns; both lists are emptied
    (each part freed as soon as it is copied)."""
    keys = np.concatenate(kparts)
    kparts.clear()
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    merged = {}
    for name in list(parts[0]):
        v = np.concatenate([p.pop(name) for p in parts]).astype(np.int64, copy=False)
        agg = _agg_of(name)
        ufunc = np.add if agg == "sum" else np.minimum if agg == "min" else np.maximum
        merged[name] = narrow(ufunc.reduceat(v[order], starts))
        del v
    return keys[starts], merged


def ranged_layout(
    keys: np.ndarray, merged: dict[str, np.ndarray], lo: int
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], tuple]:
    """:func:`_ranged_stats`' result for sorted unique group ``keys`` and their columns
    (also the windowed parts', :mod:`jlprof.engine.windowed.kernel_parts`)."""
    # one row per group, all at iteration lo: the layout's key is the group's code
    iters = np.full(len(keys), lo, np.int64)
    return keys, iters, merged, (keys, np.arange(len(keys)), 1, lo)


RANGE_ATTR = "jlprof_iter_range"


def _ranged(frame: pd.DataFrame, only: tuple[int, int] | None) -> pd.DataFrame:
    """The frame marked as holding iterations ``only`` combined (None: per iteration)."""
    if only is not None:
        frame.attrs[RANGE_ATTR] = (int(only[0]), int(only[1]))
    return frame


def ranged_to(frame: pd.DataFrame) -> tuple[int, int] | None:
    """The iterations lo..hi a cube frame holds combined as one (a range-only profile's
    ``op_iter`` and ``kernel_iter``), or None when it holds each iteration."""
    return frame.attrs.get(RANGE_ATTR)


def refuse_other_range(frame: pd.DataFrame, lo: int, hi: int) -> None:
    """Raise :class:`AnalysisError` when ``frame`` holds another range combined: its figures
    for lo..hi are not in it."""
    check_held_range(ranged_to(frame), lo, hi)


def check_held_range(held: tuple[int, int] | None, lo: int, hi: int) -> None:
    """Raise :class:`AnalysisError` when a cube holding range ``held`` combined (None: per
    iteration, any range) is asked for another range lo..hi."""
    if held is not None and (int(lo), int(hi)) != tuple(held):
        raise AnalysisError(
            f"this profile keeps iterations {held[0]}..{held[1]} only (range_only: a "
            f"command's reports); load it again for another range (asked: {lo}..{hi})."
        )


def per_iteration(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` itself, for a reader of its rows per iteration; :class:`AnalysisError` when it
    holds a range combined (no per-iteration figures to read, only wrong ones)."""
    held = ranged_to(frame)
    if held is not None:
        raise AnalysisError(
            f"this profile keeps iterations {held[0]}..{held[1]} combined, not per "
            "iteration (range_only: a command's reports); load it with jlprof.load for "
            "per-iteration figures."
        )
    return frame


def _merge_parts(parts: list[dict[str, np.ndarray]], dest: np.ndarray) -> dict[str, np.ndarray]:
    """The parts' columns in one, part rows ``at..`` put at ``dest[at..]`` (no concatenated
    copy): int32 where every part's column with rows is (all its values fit), else int64.

    Each column's parts are given back to the system once merged: they are hundreds of
    small blocks between the windows' freed temporaries, so a merged column (one block of
    every row) never fits in what they leave and the C heap would only grow (the cube's
    group frame at a 10M-kernel PyTorch run: 8M rows, +0.3 GB of free heap held at its
    peak, docs/windowed-engine.md)."""
    merged: dict[str, np.ndarray] = {}
    for name in list(parts[0]):
        have = [p[name] for p in parts if len(p[name])]
        dt = np.result_type(*have) if have else np.int64
        col = merged[name] = np.empty(len(dest), dt)
        at = 0
        for p in parts:
            v = p.pop(name)
            col[dest[at : at + len(v)]] = v
            at += len(v)
        v = None  # the last part's too, before the trim
        release_reader_memory()
    return merged


def _narrow_key(key: np.ndarray, n_groups: int, span: int) -> np.ndarray:
    """A layout's key (group code * span + iteration offset) as int32 when ``n_groups *
    span`` fits, so every key a query searches fits too (:func:`intervals.run_bounds`)."""
    return key.astype(index_dtype(n_groups * span), copy=False)


def _framed(
    cols: dict[str, np.ndarray],
    index: pd.MultiIndex,
    level: str | list[str],
    groups: pd.Index,
    key_span_it0: tuple,
) -> pd.DataFrame:
    """The frame of group-major ``cols`` with its :class:`_Layout` attached (:func:`combine`
    then neither sorts nor copies)."""
    frame = pd.DataFrame(cols, index=index, copy=False)
    lay_cols = {col: frame[col].to_numpy() for col in frame.columns}
    key, span, it0 = key_span_it0
    key = _narrow_key(key, len(groups), span)
    frame.__dict__.setdefault("_jlprof_layouts", {})[_level_key(level)] = _Layout(
        groups, key, span, it0, lay_cols
    )
    return frame


# GPU rows per window of iterations: the cube's 10M-row steps run on 250k rows at a time.
# Smaller windows keep each step's temporaries in the CPU's caches: at 1M kernels the cube
# took 0.75 s and +0.19 GB with 250k-row windows, 0.93 s and +0.29 GB with 1M-row ones
# (bench/cube_identity.py proves the frames do not depend on it).
WINDOW_ROWS = 250_000
# rows per chunk of a range-only cube frame (build_cube's ``only``): reduced per group, then
# the chunks' partials merged
RANGE_ROWS = WINDOW_ROWS
# the most GPU rows for which build_cube builds the group-node partials in its second thread
THREAD_GPU_ROWS = 2_000_000


def iteration_windows(gpu_iter: np.ndarray, n_it: int) -> list[tuple[int, int]]:
    """Consecutive iteration ranges ``[a, b)`` holding at most :data:`WINDOW_ROWS` GPU rows
    each (:func:`row_windows`); a small trace is one window (the code path of no windows)."""
    return row_windows(np.bincount(gpu_iter, minlength=n_it), WINDOW_ROWS)  # int32: no copy


def row_windows(counts: np.ndarray, rows: int) -> list[tuple[int, int]]:
    """Consecutive ranges ``[a, b)`` of iterations covering all of ``counts`` (rows per
    iteration), each holding at most ``rows`` rows, or one iteration that alone holds more:
    an iteration is never split. The cube's windows and the iteration report's parts."""
    ends = np.cumsum(counts)
    edges = [0]
    while edges[-1] < len(counts):
        first = edges[-1]
        done = int(ends[first - 1]) if first else 0
        fit = int(np.searchsorted(ends, done + rows, side="right"))  # iterations that fit
        edges.append(max(fit, first + 1))
    return list(itertools.pairwise(edges)) or [(0, len(counts))]


def _window_rows(
    iter_of_row: np.ndarray, windows: list[tuple[int, int]]
) -> list[np.ndarray | None]:
    """Per window ``[a, b)``, the rows whose iteration lies in it, in row order; ``[None]``
    (every row, no copy) for one window. One stable sort by window for all of them, not a
    scan of every row per window (10M rows, 11 windows: 0.85 s of the cube)."""
    if len(windows) == 1:
        return [None]
    starts = np.array([a for a, _ in windows] + [windows[-1][1]], np.int64)
    # window w + 1 (0 / len(starts): outside all), a slice at a time in the smallest type
    group = np.empty(len(iter_of_row), _small_type(len(starts)))
    for lo in range(0, len(group), SORT_ROWS):
        part = slice(lo, lo + SORT_ROWS)
        group[part] = np.searchsorted(starts, iter_of_row[part], side="right")
    return _rows_by_group(group, len(windows), 1)


#: rows sorted at a time by :func:`_rows_by_group` (its temporaries: ~12 bytes a row of it)
SORT_ROWS = 1 << 20


def _small_type(top: int) -> type[np.integer]:
    """The smallest unsigned type holding the values 0..``top`` (numpy sorts it by radix)."""
    return np.uint8 if top < 255 else np.uint16 if top < 65535 else np.int64


def _rows_by_group(group: np.ndarray, n: int, first: int = 0) -> list[np.ndarray]:
    """Per group ``first .. first + n - 1``, the rows whose ``group`` it is, in row order
    (rows of any other group value, at most ``first + n``, in none). Stable sorts of the
    groups in the smallest type that holds them (radix sorts), a slice of rows at a time, not
    a scan per group; the rows as 32-bit indices when they fit. Lists of them are held
    through a whole cube build (every GPU row's: 40 MB at 10M kernels, and no 80 MB sort
    permutation beside them). ``group`` is let go: pass it as a temporary."""
    small = _small_type(first + n)
    dt = index_dtype(len(group))
    keys = np.arange(first, first + n + 1, dtype=small)
    parts: list[list[np.ndarray]] = [[] for _ in range(n)]
    for lo in range(0, len(group), SORT_ROWS):
        g = group[lo : lo + SORT_ROWS].astype(small, copy=False)
        order = np.argsort(g, kind="stable")
        ends = np.searchsorted(g[order], keys)  # each group's run in the sorted values
        for w in np.flatnonzero(ends[1:] > ends[:-1]).tolist():
            parts[w].append((order[ends[w] : ends[w + 1]] + lo).astype(dt))
        del g, order
    del group
    return [np.concatenate(p) if len(p) > 1 else p[0] if p else np.zeros(0, dt) for p in parts]


def _overlap_rows(start: np.ndarray, end: np.ndarray, edges: np.ndarray) -> list[np.ndarray | None]:
    """Per window of time ``[edges[w], edges[w + 1])``, the intervals that overlap it
    (``start < edges[w + 1]`` and ``end > edges[w]``), in row order; ``[None]`` (every row)
    for one window. Each row's first and last window come from two binary searches, so the
    rows are sorted by window once, not scanned once per window (10M rows, 40 windows: ~1 s);
    the few rows across a window's edge are then added to the later windows they reach."""
    if len(edges) <= 2:
        return [None]
    nw = len(edges) - 1
    first = np.searchsorted(edges[1:], start, side="right")  # first window ending after start
    last = np.searchsorted(edges[:-1], end, side="left")  # one past the last starting before end
    last -= 1
    some = first <= last
    out = _rows_by_group(np.where(some, first, nw), nw)  # nw: in no window
    across = np.flatnonzero(some & (last > first))
    del some
    if len(across):  # rows reaching later windows: each one's windows first + 1 .. last
        reach = (last[across] - first[across]).astype(np.int64)
        rows = np.repeat(across, reach)
        step = np.arange(len(rows)) - np.repeat(np.cumsum(reach) - reach, reach)
        wins = np.repeat(first[across].astype(np.int64), reach) + step + 1
        by = np.argsort(wins, kind="stable")  # row order within each window
        rows, wins = rows[by], wins[by]
        cut = np.searchsorted(wins, np.arange(nw + 1))
        for w in np.flatnonzero(np.diff(cut)).tolist():
            extra = rows[cut[w] : cut[w + 1]]
            out[w] = np.insert(out[w], np.searchsorted(out[w], extra), extra)
    return out


def _take(x: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
    return x if rows is None else x[rows]


@dataclass
class Cube:
    """Partial aggregates per iteration for one key node; see the module docstring.

    ``group_iter`` (flattening every subtree per iteration) is built on first use;
    ``Profile`` asks for it at load, when the correlation's freed memory is still at hand,
    and a key-node change builds it when a view needs it.

    Every column of the four frames is int32 when all its values fit, else int64 (at 1M
    kernels all of them: ``op_iter`` 44 MB instead of 85, ``kernel_iter`` 13 instead of
    24, ``group_iter`` 8 instead of 15); their index levels are pandas codes (int8/int16)
    over a few unique values. ``op_iter``, ``kernel_iter`` and ``group_iter`` rows are in
    (group, iteration) order, with :func:`combine`'s layout attached (its key int32 when
    groups x iterations fit). Combine them with :func:`combine`; read their rows as int64
    where they enter a sum, product or difference.

    With ``only`` = (lo, hi) (a range-only profile's, whose reports are written for one
    range), ``op_iter`` and ``kernel_iter`` hold that range combined, one row per group:
    :func:`combine` gives the same figures for lo..hi and refuses any other range, and
    :func:`per_iteration` refuses readers of their rows per iteration. ``group_iter``
    (unions per iteration: they do not add up into a range's union) and ``time_iter``
    (small) stay per iteration, as do ``inst_iter`` and ``gpu_iter``.
    """

    iterations: Iterations
    inst_iter: np.ndarray  # int32 (iteration of each op instance)
    gpu_iter: np.ndarray  # int32 (iteration of each GPU row's launch)
    op_iter: pd.DataFrame  # index (op, iteration); {cpu,gpu,overhead,idle}_{sum,min,max},
    # {api,tc_gpu,kernel,n_gpu}_sum, calls
    kernel_iter: pd.DataFrame  # index (kernel = long_name code, op, iteration)
    time_iter: pd.DataFrame  # index (lane, iteration): union lengths by category
    correlated: Correlated | None = None
    metrics: InstanceMetrics | None = None
    _group_iter: pd.DataFrame | None = None
    # iterations lo..hi that op_iter and kernel_iter hold combined as one row per group (at
    # iteration lo; build_cube's ``only``), None: per iteration
    only: tuple[int, int] | None = None
    # the windowed engine's GPU figures (cube_parts.CubeParts): ``gpu_iter`` is then empty
    # (``Any``: cube_parts builds on this module, which must not import it back)
    parts: Any = None

    @property
    def group_iter(self) -> pd.DataFrame:
        """Flattened figures per (group path, iteration)."""
        if self._group_iter is None:
            assert self.correlated is not None and self.metrics is not None
            if self.parts is not None:
                self._group_iter = self.parts.group_iter(
                    self.correlated, self.metrics, self.iterations, self.inst_iter
                )
            else:
                self._group_iter = _group_iter(
                    self.correlated, self.metrics, self.iterations, self.inst_iter, self.gpu_iter
                )
        return self._group_iter


def build_cube(
    c: Correlated,
    m: InstanceMetrics,
    it: Iterations,
    *,
    groups: bool = False,
    only: tuple[int, int] | None = None,
    gpu_iter: np.ndarray | None = None,
    parts: Any = None,
) -> Cube:
    """Split every figure by iteration for the given key node.

    The steps over all GPU rows or instances run per window of iterations
    (:func:`iteration_windows`) and concatenate or merge their parts: the same frames as
    one pass, with small temporaries instead of 10M-row ones.

    Two cores share the work: a second thread builds the time partition (small working set)
    while this one builds the per-op and per-kernel partials; numpy releases the GIL in its
    sorts, gathers and reductions. ``groups``: build the group-node partials too (else on
    first use); up to :data:`THREAD_GPU_ROWS` GPU rows in the second thread as well, since
    their working set then overlaps the per-op partials' (~50 bytes per GPU row more at the
    peak: +0.06 GB at 1M kernels, +0.45 GB at 10M); past it in this thread, last.
    ``only`` = (lo, hi): ``op_iter`` and ``kernel_iter`` for that range alone, combined
    (:class:`Cube`): at 10M kernels 0.6 GB less kept than per iteration. ``gpu_iter``: each
    GPU row's launch iteration when already found (:func:`launch_iterations`). ``parts``:
    the windowed engine's GPU figures (:class:`~jlprof.engine.windowed.cube_parts.CubeParts`, for
    ``only``), summed as the windows came: ``c.gpu`` then has no rows.
    """
    n_it = it.count
    inst_start = c.inst["start_ns"].to_numpy(np.int64)
    inst_iter = _iterations_of(it, len(inst_start), lambda part: inst_start[part])
    if parts is not None:
        return _cube_of_parts(c, m, it, inst_iter, parts, only, groups)
    if gpu_iter is None:
        gpu_iter = launch_iterations(c, it)
    windows = iteration_windows(gpu_iter, n_it)
    beside = groups and len(gpu_iter) <= THREAD_GPU_ROWS

    def second(_check: Callable[[], None]) -> tuple[pd.DataFrame, pd.DataFrame | None]:
        time_iter = _time_iter(c, it, windows)
        return time_iter, _group_iter(c, m, it, inst_iter, gpu_iter) if beside else None

    job = InThread(second, "jlprof-cube")
    try:
        op_iter = _op_iter(c, m, inst_iter, windows, only)
        kernel_iter = _kernel_iter(c, gpu_iter, n_it, windows, only)
    except BaseException:
        job.cancel()  # joins: nothing runs on once this call has ended
        raise
    time_iter, group_iter = job.wait()
    cube = Cube(
        iterations=it,
        inst_iter=inst_iter,
        gpu_iter=gpu_iter,
        op_iter=op_iter,
        kernel_iter=kernel_iter,
        time_iter=time_iter,
        correlated=c,
        metrics=m,
        _group_iter=group_iter,
        only=only,
    )
    if groups:
        cube.group_iter  # noqa: B018 - built here past the thread's limit
    return cube


def _cube_of_parts(
    c: Correlated,
    m: InstanceMetrics,
    it: Iterations,
    inst_iter: np.ndarray,
    parts: Any,
    only: tuple[int, int] | None,
    groups: bool,
) -> Cube:
    """:func:`build_cube` from the windows' GPU figures: the per-op partials from the
    instances as always, the rest from ``parts``; the time partition in a second thread."""
    if only is None:
        raise AnalysisError("a profile read by windows keeps one range of iterations only")
    if parts.key_node != it.key_node:
        raise AnalysisError(
            f"this profile was read by windows for key node {parts.key_node!r}; load it "
            "again for another key node."
        )
    job = InThread(lambda _check: parts.time_iter(it), "jlprof-cube")
    try:
        op_iter = _op_iter(c, m, inst_iter, [(0, it.count)], only)
        kernel_iter = parts.kernel_iter(len(c.ops))
    except BaseException:
        job.cancel()
        raise
    cube = Cube(
        iterations=it,
        inst_iter=inst_iter,
        gpu_iter=np.zeros(0, np.int32),
        op_iter=op_iter,
        kernel_iter=kernel_iter,
        time_iter=job.wait(),
        correlated=c,
        metrics=m,
        only=only,
        parts=parts,
    )
    if groups:
        cube.group_iter  # noqa: B018
    return cube


def _iterations_of(it: Iterations, n: int, times: Callable[[slice], np.ndarray]) -> np.ndarray:
    """Iteration of each of ``n`` rows, ``times(part)`` giving a slice's times: int32 (the
    cube holds ``inst_iter`` and ``gpu_iter`` for the whole run: 4 bytes a row saved; read
    them as int64 where they enter a product), computed by slices (no trace-long int64
    temporaries)."""
    out = np.empty(n, index_dtype(it.count))
    for lo in range(0, n, WINDOW_ROWS):
        part = slice(lo, lo + WINDOW_ROWS)
        out[part] = it.of(times(part))
    return out


def launch_iterations(c: Correlated, it: Iterations) -> np.ndarray:
    """Iteration of each GPU row's launch (its API call's start; its own start without one):
    the cube's ``gpu_iter``, found without the cube by the iteration report's stream."""
    g = c.gpu  # the windowed engine's has no rows: its cube reads the windows' parts
    g_api = g["api"].to_numpy()  # int32 row indices: no trace-long int64 copy
    g_start = g["start_ns"].to_numpy(np.int64)
    a_start = c.api["start_ns"].to_numpy(np.int64)

    def launched(part: slice) -> np.ndarray:
        ga = g_api[part]
        at = a_start[np.maximum(ga, 0)] if len(a_start) else 0
        return np.where(ga >= 0, at, g_start[part])

    return _iterations_of(it, len(g), launched)


def _op_iter(
    c: Correlated,
    m: InstanceMetrics,
    inst_iter: np.ndarray,
    windows: list[tuple[int, int]],
    only: tuple[int, int] | None = None,
) -> pd.DataFrame:
    """Per (op, iteration) count, sums and min/max of the instances' figures (``only``:
    over iterations lo..hi as one, :func:`_ranged_stats`)."""
    op = c.inst["op"].to_numpy()  # int32 (int64 where it enters a product: group_of)
    n_ops = max(len(c.ops), 1)
    cols = {  # int32* columns: _run_stats sums them as int64
        "cpu": c.inst["cpu_ns"].to_numpy(),
        "gpu": m.gpu_ns,
        "api": m.api_ns,
        "overhead": m.overhead_ns,
        "idle": m.idle_ns,
        "tc_gpu": m.tc_gpu_ns,
        "kernel": m.kernel_ns,
        "n_gpu": m.n_gpu,
    }
    minmax = ("cpu", "gpu", "overhead", "idle")  # the detail/op-type reports' Min/Max
    if len(op) == 0:
        frame = _group_stats(inst_iter * n_ops + op.astype(np.int64), cols, minmax=minmax)
        frame.index = pd.MultiIndex.from_arrays(
            [frame.index.to_numpy() % n_ops, frame.index.to_numpy() // n_ops],
            names=["op", "iteration"],
        )
        return _ranged(group_major(frame, "op"), only)

    def group_of(rows: np.ndarray | None) -> np.ndarray:
        return _take(op, rows)

    take = {name: _gather(v) for name, v in cols.items()}
    if only is None:
        stats = _group_major_stats(windows, inst_iter, group_of, take, set(minmax))
    else:
        stats = _ranged_stats(inst_iter, only, group_of, take, set(minmax))
    gv, iters, out, lay = stats
    index = pd.MultiIndex.from_arrays([gv, iters], names=["op", "iteration"])
    frame = _framed(out, index, "op", pd.Index(lay[0], name="op"), lay[1:])
    return _ranged(frame, only)


def _kernel_iter(
    c: Correlated,
    gpu_iter: np.ndarray,
    n_it: int,
    windows: list[tuple[int, int]] | None = None,
    only: tuple[int, int] | None = None,
) -> pd.DataFrame:
    """Per (kernel, op, iteration) count, sums and min/max of the GPU rows' time and API
    share (``only``: over iterations lo..hi as one, :func:`_ranged_stats`)."""
    g = c.gpu
    if len(g) == 0:
        return _ranged(_empty_kernel_iter(), only)
    codes = g["long_name"].cat.codes.to_numpy()  # kernel identity: the demangled name
    g_inst = g["inst"].to_numpy()  # int32 row indices, as held (no trace-long int64 copies)
    inst_op = c.inst["op"].to_numpy()
    g_start, g_end = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
    share = g["api_share_ns"].to_numpy()  # int32*: _run_stats sums it as int64
    n_ops = len(c.ops) + 1

    def group_of(rows: np.ndarray | None) -> np.ndarray:
        gi = _take(g_inst, rows)
        op = np.where(gi >= 0, inst_op[np.maximum(gi, 0)], NONE)
        return kernel_group(_take(codes, rows), op, n_ops)

    take = {"gpu": lambda i: g_end[i] - g_start[i], "api": _gather(share)}
    if only is None:
        wins = windows or [(0, n_it)]
        stats = _group_major_stats(wins, gpu_iter, group_of, take, {"gpu", "api"})
    else:
        stats = _ranged_stats(gpu_iter, only, group_of, take, {"gpu", "api"})
    return _ranged(_kernel_frame(*stats, n_ops), only)


def kernel_group(kernel: np.ndarray, op: np.ndarray, n_ops: int) -> np.ndarray:
    """The group value of (kernel = long_name code, op row or NONE) pairs, ``n_ops`` the op
    table's length + 1: int64, ascending in (kernel, op) order (``kernel_iter``'s)."""
    return np.asarray(kernel, np.int64) * n_ops + (np.asarray(op, np.int64) + 1)


def ranged_kernel_iter(
    keys: np.ndarray, merged: dict[str, np.ndarray], only: tuple[int, int], n_ops: int
) -> pd.DataFrame:
    """A range-only ``kernel_iter`` from its sorted unique :func:`kernel_group` keys and
    their merged columns (what :func:`_kernel_iter` gives with ``only``, its layout
    attached): shared with the windowed parts (:mod:`jlprof.engine.windowed.kernel_parts`)."""
    return _ranged(_kernel_frame(*ranged_layout(keys, merged, only[0]), n_ops), only)


def _empty_kernel_iter() -> pd.DataFrame:
    idx = pd.MultiIndex.from_arrays([[], [], []], names=["kernel", "op", "iteration"])
    empty = pd.DataFrame(
        index=idx,
        columns=["calls", "gpu_sum", "gpu_min", "gpu_max", "api_sum", "api_min", "api_max"],
        dtype="int64",
    )
    return group_major(empty, ["kernel", "op"])


def _kernel_frame(
    gv: np.ndarray, iters: np.ndarray, out: dict[str, np.ndarray], lay: tuple, n_ops: int
) -> pd.DataFrame:
    """``kernel_iter`` from :func:`_group_major_stats`' result on (kernel, op) groups."""
    names = ["kernel", "op"]
    index = pd.MultiIndex.from_arrays(
        [gv // n_ops, gv % n_ops - 1, iters], names=["kernel", "op", "iteration"]
    )
    u = lay[0]
    groups = pd.MultiIndex.from_arrays([u // n_ops, u % n_ops - 1], names=names)
    return _framed(out, index, names, groups, lay[1:])


def group_edges(c: Correlated) -> tuple[np.ndarray, np.ndarray]:
    """(path, group) pairs: every path with each of its ancestors that is a group node.

    Group nodes are the non-leaf nodes of the hierarchy (guide §10.8): paths that are the
    parent of another path. A path is its own group when it is one.
    """
    return path_group_edges(c.paths["parent"].to_numpy(np.int64))


def path_group_edges(par: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`group_edges` of a path table's ``parent`` column (int64)."""
    is_group = np.zeros(len(par), dtype=bool)
    is_group[par[par >= 0]] = True
    src, dst = [], []
    cur = np.arange(len(par))
    base = np.arange(len(par))
    while len(cur):
        keep = is_group[cur]
        src.append(base[keep])
        dst.append(cur[keep])
        nxt = par[cur]
        alive = nxt >= 0
        cur, base = nxt[alive], base[alive]
    if not src:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(src).astype(np.int64), np.concatenate(dst).astype(np.int64)


def _explode(path_of_row: np.ndarray, src: np.ndarray, dst: np.ndarray):
    """Rows repeated once per group node above them: (row index, group)."""
    order = np.argsort(src, kind="stable")
    d_sorted = dst[order]
    # each path's run of edges, by counting: the paths are small integers
    n = max(
        [int(src.max()) + 1 if len(src) else 0]
        + [int(path_of_row.max()) + 1] * (len(path_of_row) > 0)
    )
    bounds = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=bounds[1:])
    p = np.maximum(path_of_row, 0)
    lo = bounds[p]
    rows, at = intervals.expand_runs(lo, np.where(path_of_row >= 0, bounds[p + 1] - lo, 0))
    return rows, d_sorted[at]


def _flatten_to_groups(
    pair: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    alone: np.ndarray,
    spread: tuple[np.ndarray, np.ndarray],
    n_pairs: int,
    nk: int,
    lane: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Union length, first start and last end of GPU work per (group, iteration) key.

    With ``lane`` (each interval's GPU), the union is taken per GPU and summed across GPUs
    (guide §10.8: on several GPUs a group's GPU time is their sum): each GPU's intervals are
    moved to a time window of their own, so intervals on different GPUs never merge.

    ``pair`` indexes each interval's (path, iteration) pair (-1: none); ``spread`` = (pair
    row, key) lists every pair once per group node above its path. Work is summed per pair
    first and then spread. Intervals that overlap no other (``alone``, see
    :func:`intervals.isolated`) just add their lengths; only the rest is flattened, per
    pair and then per key.
    """
    first = np.full(nk, np.iinfo(np.int64).max)
    last = np.full(nk, np.iinfo(np.int64).min)
    keep = pair >= 0
    if not keep.any() or nk == 0:
        return np.zeros(nk, np.int64), first, last
    if not keep.all():  # usually every interval has a pair: no 10M-row copies then
        pair, start, alone, end = pair[keep], start[keep], alone[keep], end[keep]
        lane = None if lane is None else np.asarray(lane)[keep]
    end = np.maximum(end, start)
    shift = None  # one GPU: no per-interval shift array at all
    if lane is not None and len(start) and int(lane.max()) > 0:
        t0, width = int(start.min()), int(end.max() - start.min()) + 1
        shift = (np.asarray(lane) * width - t0).astype(np.int64)
    if alone.all():  # one stream: every interval; no copies of them
        p_alone = np.bincount(pair, weights=end - start, minlength=n_pairs)
    else:
        p_alone = np.bincount(pair[alone], weights=end[alone] - start[alone], minlength=n_pairs)
    p_first = np.full(n_pairs, np.iinfo(np.int64).max)
    p_last = np.full(n_pairs, np.iinfo(np.int64).min)
    np.minimum.at(p_first, pair, start)
    np.maximum.at(p_last, pair, end)
    r, kinv = spread
    np.minimum.at(first, kinv, p_first[r])
    np.maximum.at(last, kinv, p_last[r])
    gpu = np.bincount(kinv, weights=p_alone[r], minlength=nk)
    rest = ~alone
    if rest.any():
        if shift is None:
            k1, s1, e1 = intervals.merge(pair[rest], start[rest], end[rest])
        else:
            sh = shift[rest]
            k1, s1, e1 = intervals.merge(pair[rest], start[rest] + sh, end[rest] + sh)
            del sh
        # each merged piece once per key of its pair: the spread rows of pair k1 form one run
        bounds = np.searchsorted(r, np.arange(n_pairs + 1))
        piece, row = intervals.expand_runs(bounds[k1], bounds[k1 + 1] - bounds[k1])
        gpu += intervals.union_length(kinv[row], s1[piece], e1[piece], nk)
    return gpu.astype(np.int64), first, last


def _sorted_factorize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(x, return_inverse=True) by hashing, then sorting only the uniques."""
    uniq, inv = _factorize(x)
    order = np.argsort(uniq)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return uniq[order], rank[inv]


# a dense lookup table may have this many slots per row coded, and DENSE_MIN_SLOTS at least
DENSE_SLOTS_PER_ROW = 4
DENSE_MIN_SLOTS = 1 << 20


def _codes(
    key: np.ndarray, size: int, inverse_type: type = np.int64
) -> tuple[np.ndarray, np.ndarray, Callable]:
    """np.unique(key, return_inverse=True) of keys in ``0..size-1``, and a lookup giving
    other keys' positions among the uniques (-1: absent); the inverse as ``inverse_type``
    (int32 where the caller knows the positions fit: 4 bytes a row less).

    A table over the whole range when it is small next to the rows (a window's
    (path, iteration) keys are): counting and gathers, no hashing, sorting or binary search.
    """
    if size <= max(DENSE_SLOTS_PER_ROW * len(key), DENSE_MIN_SLOTS):
        seen = np.zeros(size, bool)
        seen[key] = True
        uniq = np.flatnonzero(seen)
        del seen
        pos = np.full(size, -1, inverse_type)
        pos[uniq] = np.arange(len(uniq))
        return uniq, pos[key], pos.__getitem__
    uniq, inv = _sorted_factorize(key)
    inv = inv.astype(inverse_type, copy=False)

    def lookup(v: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(uniq, v), max(len(uniq) - 1, 0))
        return np.where(uniq[at] == v, at, -1) if len(uniq) else np.full(len(v), -1)

    return uniq, inv, lookup


def _factorize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(uniques, inverse) by hashing: like np.unique without its O(n log n) sort."""
    inv, uniq = pd.factorize(np.asarray(x, dtype=np.int64), sort=False)
    return np.asarray(uniq, dtype=np.int64), inv.astype(np.int64)


_GROUP_COLS = ["calls", "cpu", "gpu", "api", "overhead", "idle", "tc_eligible_ops", "tc_ops"]


def _group_iter(
    c: Correlated, m: InstanceMetrics, it: Iterations, inst_iter: np.ndarray, gpu_iter: np.ndarray
) -> pd.DataFrame:
    """Flattened CPU/GPU/API time per (group node, iteration).

    Counts and sums are taken per (path, iteration) first and then spread to the groups above,
    and an instance adds its CPU interval only to the groups its enclosing instance is not in
    (the enclosing range on the same thread already covers that time), so the work grows with
    the instances, not with instances x depth.

    Every key holds one iteration, with instances by ``inst_iter`` and GPU work by its launch
    (``gpu_iter``): each window of iterations is computed from its own rows and the parts'
    rows are put in key order, the same frame as one pass over all rows.
    """
    windows = iteration_windows(gpu_iter, it.count)
    made: list = []  # each window's GPU rows and the lanes, made once a window asks

    def side_of(w: int) -> GpuSide:
        if not made:
            made.extend([_window_rows(gpu_iter, windows), _LaneTable(c)])
        return _rows_gpu_side(c, gpu_iter, made[0][w], made[1])

    return _group_frame(c, m, it.count, inst_iter, windows, side_of)


# the GPU side of one window of :func:`_group_frame`: given the window (a, b), the number of
# its (path, iteration) pairs, their lookup (``pair_at(path * w + iteration - a)``, -1 when
# absent), the spread (pair row, key) of the pairs to their groups and the window's keys
# (group * w + iteration - a), the union length and the span (last end - first start, 0 where
# that is not positive: :func:`gpu_span`) of the GPU work of each key (0 and 0 where it has none)
GpuSide = Callable[
    [tuple[int, int], int, Callable, tuple[np.ndarray, np.ndarray], np.ndarray],
    tuple[np.ndarray, np.ndarray],
]


def gpu_span(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """A key's GPU span from :func:`_flatten_to_groups`'s first start and last end: their
    difference where positive, else 0 (a key without GPU work: int64 max and min)."""
    return np.where(last > first, last - first, 0)


def _rows_gpu_side(
    c: Correlated,
    gpu_iter: np.ndarray,
    gx: np.ndarray | None,
    lanes: _LaneTable,
) -> GpuSide:
    """The GPU side of a window from the GPU rows ``gx`` (None: all) of ``c.gpu``, which hold
    every row launched in its iterations: the whole-trace cube's."""

    def side(window, n_pairs, pair_at, spread, keys):
        a, b = window
        w = b - a
        g = c.gpu
        gi = _take(g["inst"].to_numpy(), gx)
        gsel = gi >= 0
        gpu_pair = np.full(len(gi), -1, dtype=np.int64)  # GPU work of pairs with no instance
        gp = c.inst["path"].to_numpy()[gi[gsel]].astype(np.int64)
        gpu_pair[gsel] = pair_at(gp * w + (_take(gpu_iter, gx)[gsel] - a))
        del gp, gi, gsel
        gpu, first, last = _flatten_to_groups(
            gpu_pair,
            _take(g["start_ns"].to_numpy(np.int64), gx),
            _take(g["end_ns"].to_numpy(np.int64), gx),
            _take(g["isolated"].to_numpy(bool), gx),
            spread,
            n_pairs,
            len(keys),
            lanes.of(gx),
        )
        return gpu, gpu_span(first, last)

    return side


def _group_frame(
    c: Correlated,
    m: InstanceMetrics,
    n_it: int,
    inst_iter: np.ndarray,
    windows: list[tuple[int, int]],
    side_of: Callable[[int], GpuSide],
) -> pd.DataFrame:
    """:func:`_group_iter`'s frame, window by window of iterations, with window ``w``'s GPU
    side from ``side_of(w)`` (the GPU rows', or figures accumulated window by window before:
    :mod:`jlprof.engine.windowed.group_parts`). The frame does not depend on the windows."""
    src, dst = group_edges(c)
    if len(src) == 0:
        return _no_groups()
    pair_groups: dict[int, list[int]] = {}
    parts = []
    inst_rows = _window_rows(inst_iter, windows)
    for w in range(len(windows)):
        rows, inst_rows[w] = inst_rows[w], None  # a window's rows go once it is done
        part = _group_part(
            c, m, n_it, (src, dst), inst_iter, windows[w], rows, side_of(w), pair_groups
        )
        del rows
        if part is not None:
            parts.append(part)
    del inst_rows
    if not parts:  # no instance in any window
        return _no_groups()
    return _parts_frame(parts, len(c.paths), n_it)


def _no_groups() -> pd.DataFrame:
    """``group_iter`` without a group node or an instance: no rows, int64 columns."""
    idx = pd.MultiIndex.from_arrays([[], []], names=["group", "iteration"])
    return pd.DataFrame(index=idx, columns=_GROUP_COLS, dtype="int64")


def _parts_frame(
    parts: list[tuple[np.ndarray, dict[str, np.ndarray]]], n_groups: int, n_it: int
) -> pd.DataFrame:
    """The frame of :func:`_group_frame`'s parts (taken: the list is emptied), in key
    (group, iteration) order.

    Each part's keys are sorted and hold later iterations than the part before, so a row's
    place is known by counting: its group's first row, plus that group's rows in the parts
    before, plus its rank in its group's run within its part. No sort, no concatenated keys:
    beside the parts (taken apart a column at a time) only a 32-bit destination per row and
    the index codes are made, and the index is built from its levels and codes (what
    ``MultiIndex.from_arrays`` of the keys' groups and iterations gives, without its int64
    arrays and hashing).
    """
    counts = np.zeros(n_groups, np.int64)
    seen_it = np.zeros(n_it, bool)
    for keys, _ in parts:
        counts += np.bincount(keys // n_it, minlength=n_groups)
        seen_it[keys % n_it] = True
    n = int(counts.sum())
    dt = index_dtype(n)
    start = np.zeros(n_groups, np.int64)  # each group's first row
    np.cumsum(counts[:-1], out=start[1:])
    dest = np.empty(n, dt)
    it_code = np.cumsum(seen_it, dtype=np.int64) - 1  # an iteration's code: its rank
    it_codes = np.empty(n, index_dtype(n_it))
    at = 0
    for keys, _ in parts:  # start: where the group's next row goes
        grp = keys // n_it
        run = np.zeros(n_groups + 1, np.int64)  # each group's run in this part
        np.cumsum(np.bincount(grp, minlength=n_groups), out=run[1:])
        d = (start - run[:-1])[grp] + np.arange(len(keys))
        dest[at : at + len(keys)] = d
        it_codes[d] = it_code[keys % n_it]
        start += run[1:] - run[:-1]
        at += len(keys)
        del grp, run, d
    col_parts = [p[1] for p in parts]
    parts.clear()  # the keys go: the index is made from the codes
    cols = _merge_parts(col_parts, dest)
    del dest, col_parts
    present = counts > 0
    index = pd.MultiIndex(
        levels=[
            pd.Index(np.flatnonzero(present).astype(np.int64)),
            pd.Index(np.flatnonzero(seen_it).astype(np.int64)),
        ],
        codes=[np.repeat(np.arange(int(present.sum()), dtype=np.int32), counts[present]), it_codes],
        names=["group", "iteration"],
        verify_integrity=False,
    )
    return pd.DataFrame(cols, index=index, copy=False)


def _group_part(
    c: Correlated,
    m: InstanceMetrics,
    n_it: int,
    edges: tuple[np.ndarray, np.ndarray],
    inst_iter: np.ndarray,
    window: tuple[int, int],
    ix: np.ndarray | None,
    gpu_side: GpuSide,
    pair_groups: dict[int, list[int]],
) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """(sorted keys, columns) of :func:`_group_iter` from instances ``ix`` (None: all), which
    hold every instance of their keys' iterations, and the window's ``gpu_side``."""
    src, dst = edges
    inst_path_all = c.inst["path"].to_numpy()  # int32: no copy per window; int64 in products
    inst_path = _take(inst_path_all, ix).astype(np.int64)
    iit = _take(inst_iter, ix)
    op = _take(c.inst["op"].to_numpy(), ix)
    elig = c.ops["tc_eligible"].to_numpy(bool)[op]
    par = c.paths["parent"].to_numpy(np.int64)
    leaf = np.ones(len(par), dtype=bool)
    leaf[par[par >= 0]] = False  # "No. Calls Aggregated" counts the calls of leaf nodes
    uses = _take(m.tc_gpu_ns, ix) > 0
    # per (path, iteration) sums, then spread to the group nodes above each path
    a, b = window
    w = b - a  # keys below are (path or group) * w + iteration - a: a small dense range
    n_paths = len(c.paths)
    pk, pinv, pair_at = _codes(inst_path * w + (iit - a), n_paths * w)
    if len(pk) == 0 and ix is not None:
        return None  # a window without instances: its GPU work has no (path, iteration) pair
    per_path = {
        "calls": np.bincount(pinv, weights=leaf[inst_path], minlength=len(pk)),
        "api": np.bincount(pinv, weights=_take(m.api_ns, ix), minlength=len(pk)),
        "elig": np.bincount(pinv, weights=elig, minlength=len(pk)),
        "tc": np.bincount(pinv, weights=elig & uses, minlength=len(pk)),
    }
    r, grp = _explode(pk // w, src, dst)
    keys, kinv, key_at = _codes(grp * w + (pk % w)[r], n_paths * w)
    nk = len(keys)
    summed = {k: np.bincount(kinv, weights=v[r], minlength=nk).astype(np.int64)
              for k, v in per_path.items()}  # fmt: skip
    # CPU: each instance covers only the groups its enclosing instance does not
    parent = _take(c.inst["parent"].to_numpy(), ix)
    par_path = np.where(parent >= 0, inst_path_all[np.maximum(parent, 0)], -1)
    pair_codes, pair_inv, _ = _codes(inst_path * (n_paths + 1) + (par_path + 1), (n_paths + 1) ** 2)
    order = np.argsort(src, kind="stable")
    s_sorted, d_sorted = src[order], dst[order]

    def groups_of(path: int) -> set[int]:
        if path < 0:
            return set()
        lo, hi = np.searchsorted(s_sorted, [path, path + 1])
        return set(d_sorted[lo:hi].tolist())

    e_src, e_dst = [], []
    for code_i, pc in enumerate(pair_codes.tolist()):  # unique (path, parent path) pairs only
        if pc not in pair_groups:
            own, parp = divmod(pc, n_paths + 1)
            pair_groups[pc] = sorted(groups_of(own) - groups_of(parp - 1))
        for g in pair_groups[pc]:
            e_src.append(code_i)
            e_dst.append(g)
    cr, cgrp = _explode(pair_inv, np.asarray(e_src, np.int64), np.asarray(e_dst, np.int64))
    cpos = key_at(cgrp * w + (iit[cr] - a))
    ok = cpos >= 0
    rows, cpos = cr[ok], cpos[ok]
    if ix is not None:
        rows = ix[rows]
    # the exploded (instance, group) temporaries go before the union allocates its own
    del cr, cgrp, ok, per_path, pinv, grp, par_path, pair_inv, e_src, e_dst
    del inst_path, iit, op, elig, uses, parent
    # flattened per CPU thread, the threads' (processes', GPUs') times summed (docs/reports.md)
    cpu = intervals.thread_union_length(
        cpos, c.inst["global_tid"].to_numpy()[rows], c.inst["start_ns"].to_numpy(np.int64)[rows],
        c.inst["end_ns"].to_numpy(np.int64)[rows], nk)  # fmt: skip
    del rows, cpos
    # GPU work of the subtree, flattened (by the GPU side: merged per (path, iteration)
    # first, then only the merged pieces spread to the group nodes above)
    gpu, span = gpu_side(window, len(pk), pair_at, (r, kinv), keys)
    # API time of the subtree: the sum of its calls (calls on one thread never overlap, so on
    # one thread this equals their union; see docs/reports.md)
    api = summed["api"]
    cols = {
        "calls": summed["calls"],
        "cpu": cpu,
        "gpu": gpu,
        "api": api,
        "overhead": np.maximum(cpu - api, 0),
        "idle": np.maximum(span - gpu, 0),
        "tc_eligible_ops": summed["elig"],
        "tc_ops": summed["tc"],
    }
    keys = (keys // w * n_it + (keys % w + a)).astype(index_dtype(n_paths * n_it))
    return keys, {k: narrow(v) for k, v in cols.items()}


def flat_cpu_ns(
    c: Correlated, inst_iter: np.ndarray, lo: int, hi: int, op_group: np.ndarray, ngroups: int
) -> np.ndarray:
    """CPU time per group of ops (``op_group``: each op's group, -1: none) over iterations
    lo..hi, nested ranges counted once: :func:`intervals.thread_union_length` of the groups'
    instances. The summary's All Ops and the op type report total their CPU time so (summing
    each op's instances would count a range and every op nested in it again)."""
    it = np.asarray(inst_iter)
    inst = c.inst
    # per instance: its group (32 bits) and whether it counts; the union takes its rows
    # span by span, not as copies of every counted row (the summary's and op type report's
    # peak: 0.4 GB less at 13.5M instances)
    grp = np.asarray(op_group).astype(index_dtype(ngroups))[inst["op"].to_numpy()]
    counted = (it >= lo) & (it <= hi) & (grp >= 0)
    # synthetic (unassociated_*) instances nest in nothing and carry an API call's share
    # as their CPU time, not their interval's length: summed as they are
    synthetic = inst["synthetic"].to_numpy(bool)
    share = counted & synthetic
    out = np.bincount(
        grp[share], weights=inst["cpu_ns"].to_numpy()[share].astype(np.int64), minlength=ngroups
    ).astype(np.int64)
    counted &= ~synthetic
    del share, synthetic
    tid = inst["global_tid"].to_numpy()
    start = inst["start_ns"].to_numpy(np.int64)
    end = inst["end_ns"].to_numpy(np.int64)
    return out + intervals.thread_union_length(grp, tid, start, end, ngroups, keep=counted)


class _LaneTable:
    """:func:`gpu_lanes` as a table of device ids, to give the lanes of some rows only."""

    def __init__(self, c: Correlated) -> None:
        gpus = c.trace.gpus
        known = gpus["cu_device"].to_numpy(np.int64)
        self.dev = c.gpu["device_id"].to_numpy()  # as held (int32: no trace-long int64 copy)
        seen = np.asarray(pd.unique(self.dev), dtype=np.int64)  # hashing: no 10M-row sort
        unknown = np.setdiff1d(seen, known)  # sorted, as np.unique gave them
        self.labels = lane_labels(gpus, unknown)
        devs = np.concatenate([known, unknown]).astype(np.int64)
        lane = np.arange(len(devs), dtype=np.int64)
        order = np.argsort(devs, kind="stable")
        self.devs, self.lane = devs[order], lane[order]

    def of(self, rows: np.ndarray | None) -> np.ndarray:
        """Lane of the GPU rows ``rows`` (None: all)."""
        dev = _take(self.dev, rows)
        if len(self.devs) == 0:
            return np.zeros(len(dev), np.int64)
        return self.lane[np.minimum(np.searchsorted(self.devs, dev), len(self.devs) - 1)]


def gpu_lanes(c: Correlated) -> tuple[np.ndarray, list[str]]:
    """Lane (visible GPU) of every GPU activity, and the lanes' labels.

    Visible GPUs are the export's TARGET_INFO_GPU rows (idle ones included, guide ch. 9);
    kernels on a device the export does not list get a lane of their own.
    """
    gpus = c.trace.gpus
    lane, unknown = device_lanes(gpus["cu_device"], c.gpu["device_id"])
    return lane, lane_labels(gpus, unknown)


def device_lanes(listed: Iterable[int], dev: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
    """Lane of each device ``dev``: its place among the ``listed`` GPUs, else after them by
    id; and those unlisted devices, sorted."""
    known = pd.Index(np.asarray(listed, np.int64))
    dev = np.asarray(dev, np.int64)
    lane = known.get_indexer(dev)
    unknown = np.unique(dev[lane < 0])
    miss = lane < 0
    lane[miss] = len(known) + np.searchsorted(unknown, dev[miss])
    return lane.astype(np.int64), unknown


def lane_labels(gpus: pd.DataFrame, unknown: Iterable[int]) -> list[str]:
    """The lanes' labels: the export's GPUs (``Trace.gpus``) in order, then the devices it
    does not list that GPU work ran on (``unknown``, sorted)."""
    listed = zip(gpus["cu_device"], gpus["name"], strict=True)
    return [f"GPU {int(d)}: {n}" for d, n in listed] + [f"GPU {int(d)}" for d in unknown]


def _host_busy(c: Correlated, real: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals whose union is the host's busy time: NVTX ranges and API calls.

    A nested range lies inside its parent and a call inside the range it is attributed to,
    so the outermost ranges plus the calls outside every range have the same union as all
    of them, at a fraction of the rows to flatten.
    """
    inst = c.inst
    root = real & (inst["parent"].to_numpy() < 0)
    a_inst = c.api["inst"].to_numpy()  # int32 row indices: only compared and indexed
    in_range = (a_inst >= 0) & real[np.maximum(a_inst, 0)]
    return (
        np.concatenate(
            [
                inst["start_ns"].to_numpy(np.int64)[root],
                c.api["start_ns"].to_numpy(np.int64)[~in_range],
            ]
        ),
        np.concatenate(
            [inst["end_ns"].to_numpy(np.int64)[root], c.api["end_ns"].to_numpy(np.int64)[~in_range]]
        ),
    )


_DONE = (np.zeros(0, np.int64),) * 3


def dataloader_ops(ops: pd.DataFrame) -> np.ndarray:
    """Per op row: whether its type or name names a data loader (its real ranges are the
    time partition's ``dataloader`` category; :mod:`jlprof.engine.windowed.time_parts` shares
    it)."""
    return (
        ops["op_type"].astype(str).str.contains(DATALOADER)
        | ops["op_name"].astype(str).str.contains(DATALOADER)
    ).to_numpy(bool)


def _time_iter(
    c: Correlated, it: Iterations, windows: list[tuple[int, int]] | None = None
) -> pd.DataFrame:
    """Priority partition of each iteration's wall time, per lane (GPU).

    Each figure is a union length inside one iteration's window of time, so a window of
    iterations is computed from the GPU rows overlapping its span alone (a row across its
    edge goes to both windows, clipped to each).
    """
    lanes = _LaneTable(c)
    n_lanes = max(len(lanes.labels), 1)  # CPU-only profile: one host lane
    n_it = it.count
    windows = windows or [(0, n_it)]
    g = c.gpu
    gs, ge = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
    # host categories apply to every lane: merge once, then replicate per window
    is_dl = dataloader_ops(c.ops)
    inst = c.inst
    real = ~inst["synthetic"].to_numpy(bool)
    dl = real & is_dl[inst["op"].to_numpy()]  # int32 op rows: no copy
    host = [
        (inst["start_ns"].to_numpy(np.int64)[dl], inst["end_ns"].to_numpy(np.int64)[dl]),
        (c.trace.osrt["start_ns"].to_numpy(np.int64), c.trace.osrt["end_ns"].to_numpy(np.int64)),
        _host_busy(c, real),
    ]
    del dl, real
    host_merged = []
    for hs, he in host:
        _, ms, me = intervals.merge(np.zeros(len(hs), np.int64), hs, he)
        host_merged.append((ms, me))  # sorted and disjoint: a window's are one slice
    del host
    ngroups = n_lanes * n_it
    cum = np.zeros((len(CATEGORIES) + 1, ngroups), dtype=np.int64)
    edges = it.bounds_ns[[a for a, _ in windows] + [windows[-1][1]]]
    for (a, b), rows in zip(windows, _overlap_rows(gs, ge, edges), strict=True):
        lo, hi = int(it.bounds_ns[a]), int(it.bounds_ns[b])
        cats, alone_from = _gpu_categories(g, rows, lanes.of(rows))
        for ms, me in host_merged:
            i0, i1 = (0, len(ms)) if rows is None else (
                int(np.searchsorted(me, lo, side="right")), int(np.searchsorted(ms, hi))
            )  # fmt: skip
            ms_w, me_w = ms[i0:i1], me[i0:i1]
            cats.append(
                (
                    np.repeat(np.arange(n_lanes), len(ms_w)),
                    np.tile(ms_w, n_lanes),
                    np.tile(me_w, n_lanes),
                )
            )
        del rows
        _cumulative_union(cats, it.bounds_ns[a : b + 1], a, n_it, cum, alone_from)
    return time_frame(cum, it.durations_ns(), n_lanes)


def time_frame(cum: np.ndarray, durations_ns: np.ndarray, n_lanes: int) -> pd.DataFrame:
    """``time_iter`` from ``cum[k + 1]``, the union length of categories 0..k per (lane,
    iteration) key ``lane * n_it + iteration`` (``cum[0]`` = 0), and the iterations' lengths
    (shared with the windowed parts, :mod:`jlprof.engine.windowed.time_parts`)."""
    n_it = len(durations_ns)
    parts = np.diff(cum, axis=0)
    wall = np.tile(durations_ns, n_lanes)
    cols = {name: parts[i] for i, name in enumerate(CATEGORIES)}
    cols.update(gpu_busy=cum[3], wall=wall, other=np.maximum(wall - cum[-1], 0))
    out = pd.DataFrame({name: narrow(v) for name, v in cols.items()})
    out.index = pd.MultiIndex.from_arrays(
        [np.repeat(np.arange(n_lanes), n_it), np.tile(np.arange(n_it), n_lanes)],
        names=["lane", "iteration"],
    )
    return out


def _gpu_categories(
    g: pd.DataFrame, rows: np.ndarray | None, lane: np.ndarray
) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], list[int]]:
    """Flattened pieces (lane, start, end) of the Tensor Core, other kernel and memory work of
    the GPU rows ``rows`` (None: all), and per category where its pieces of work that
    overlaps no other GPU work begin (they come last)."""
    gs = _take(g["start_ns"].to_numpy(np.int64), rows)
    ge = _take(g["end_ns"].to_numpy(np.int64), rows)
    tc = _take(g["uses_tc"].to_numpy(bool), rows)
    mem = _take(g["is_memory"].to_numpy(bool), rows)
    alone = _take(g["isolated"].to_numpy(bool), rows)
    cats: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    alone_from: list[int] = []
    for sel in (tc, ~tc & ~mem, mem):
        # work that overlaps nothing is already a flattened piece of its own
        ml, ms, me = intervals.merge(lane[sel & ~alone], gs[sel & ~alone], ge[sel & ~alone])
        one = sel & alone
        alone_from.append(len(ml))
        cats.append(
            (
                np.concatenate([ml, lane[one]]),
                np.concatenate([ms, gs[one]]),
                np.concatenate([me, np.maximum(ge[one], gs[one])]),
            )
        )
    return cats, alone_from


def _clip(
    start: np.ndarray, end: np.ndarray, bounds: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The pieces of :func:`intervals.clip_to_windows`, maybe in another order: intervals
    inside one window (nearly all: kernels are short next to iterations) take one binary
    search and no expansion; only those across a window edge are split by it."""
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    nwin = len(bounds) - 1
    if nwin <= 0 or len(start) == 0:
        return intervals.clip_to_windows(start, end, bounds)
    s = np.clip(start, bounds[0], bounds[-1])
    e = np.clip(end, bounds[0], bounds[-1])
    win = np.searchsorted(bounds, s, side="right") - 1
    np.clip(win, 0, nwin - 1, out=win)
    inside = e <= bounds[win + 1]
    keep = inside & (e > s)
    row = np.flatnonzero(keep)
    out = (row, win[row], s[row], e[row])
    if bool(inside.all()):
        return out
    across = np.flatnonzero(~inside)
    r2, w2, s2, e2 = intervals.clip_to_windows(start[across], end[across], bounds)
    return tuple(  # type: ignore[return-value]
        np.concatenate([a, b]) for a, b in zip(out, (across[r2], w2, s2, e2), strict=True)
    )


def _cumulative_union(
    cats: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    bounds: np.ndarray,
    it0: int,
    n_it: int,
    cum: np.ndarray,
    alone_from: list[int] | None = None,
) -> None:
    """Add to ``cum[k + 1]`` the union length of categories 0..k per (lane, iteration), for
    the iterations ``it0 ..`` whose edges are ``bounds`` (pieces clipped to them).

    ``alone_from[k]``: category k's pieces from there on overlap no other piece of the first
    ``len(alone_from)`` categories (GPU work that overlaps no other GPU work: on one stream,
    all of it). Up to those categories they just add their lengths, and are merged once,
    with the first category after them, not once per category.
    """
    ngroups = cum.shape[1]
    acc: list[list[np.ndarray]] = [[], [], []]  # (key, start, end) pieces to merge
    aside: list[list[np.ndarray]] = [[], [], []]  # alone pieces, not merged yet
    n_alone = len(alone_from) if alone_from is not None else 0
    alone_len = np.zeros(ngroups, np.float64)  # the aside pieces' summed lengths
    for k in range(len(cats)):
        cl, cs, ce = cats[k]
        cats[k] = _DONE  # each category's pieces go once clipped, not at the end
        row, win, ps, pe = _clip(cs, ce, bounds)
        del cs, ce
        lk = cl[row] * n_it + (win + it0)
        del cl, win
        if k < n_alone:
            assert alone_from is not None
            one = row >= alone_from[k]
            alone_len += np.bincount(
                lk[one], weights=(pe[one] - ps[one]).astype(np.float64), minlength=ngroups
            )
            for part, v in zip(aside, (lk, ps, pe), strict=True):
                part.append(v[one])
            rest = ~one
            lk, ps, pe = lk[rest], ps[rest], pe[rest]
            del one, rest
        else:  # this category overlaps the aside pieces: merge them all from here on
            for part, extra in zip(acc, aside, strict=True):
                part.extend(extra)
            aside = [[], [], []]
            alone_len[:] = 0
        for part, v in zip(acc, (lk, ps, pe), strict=True):
            part.append(v)
        del row, lk, ps, pe
        # union of categories 0..k (but the aside pieces), merged again so the arrays stay small
        gk, sk, ek = intervals.merge(*(np.concatenate(part) for part in acc))
        acc = [[gk], [sk], [ek]]
        union = np.bincount(gk, weights=(ek - sk).astype(np.float64), minlength=ngroups)
        cum[k + 1] += (union + alone_len).astype(np.int64)


def _agg_of(col: str) -> str:
    return "min" if col.endswith("_min") else "max" if col.endswith("_max") else "sum"


def combine_reference(
    frame: pd.DataFrame, level: str | list[str], lo: int, hi: int
) -> pd.DataFrame:
    """:func:`combine` by a pandas group-by: the definition, kept for tests (integer
    columns come out int64, as :func:`combine` gives them, whatever the cube holds)."""
    it = frame.index.get_level_values("iteration")
    sub = frame[(it >= lo) & (it <= hi)]
    if sub.empty:
        out = sub.droplevel("iteration") if isinstance(sub.index, pd.MultiIndex) else sub
    else:
        out = sub.groupby(level=level, sort=True).agg({c: _agg_of(c) for c in sub.columns})
    return _wide(out)


def _wide(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with its integer columns as int64 (a combined figure's dtype)."""
    small = {c: np.int64 for c, t in frame.dtypes.items() if t.kind in "iu" and t != np.int64}
    return frame.astype(small) if small else frame


@dataclass
class _Layout:
    """A cube frame's rows in (group, iteration) order, built once per frame.

    With rows grouped this way, a group's iterations lo..hi are one contiguous run, found
    by a binary search, and every column is reduced over all runs by one ``reduceat``.
    """

    groups: pd.Index  # the group labels, sorted (the result's index)
    key: np.ndarray  # group code * span + (iteration - it0), ascending; int32 when all fit
    span: int
    it0: int
    cols: dict[str, np.ndarray]  # each column in that order, as the frame holds it
    # the int32 columns summed in int32 (see :meth:`sums_fit`); None: not decided yet
    sum32: set[str] | None = None
    # the other int32 sum columns' block prefix sums (:func:`intervals.run_sums`)
    prefix: dict[str, np.ndarray] = field(default_factory=dict)

    def sums_fit(self, col: str) -> bool:
        """True when int32 column ``col`` sums in int32 over any run of one group's iterations.

        So when its values are >= 0 and every group's total over all its iterations fits:
        every partial sum fits then too, and numpy sums int32 in int32 (~1 ms at 6M rows);
        else :func:`intervals.run_sums` sums it in int64 from its block prefix sums (kept:
        8 bytes per :data:`SUM_BLOCK` rows). Decided once per layout, on the first combine.
        """
        if self.sum32 is None:
            self.sum32 = set()
            starts = intervals.run_bounds(self.key, len(self.groups), self.span, 0, self.span)[0]
            ends = np.append(starts[1:], len(self.key))
            for c, v in self.cols.items():
                if v.dtype != np.int32 or _agg_of(c) != "sum" or len(v) == 0:
                    continue
                prefix = intervals.block_prefix(v, SUM_BLOCK)
                total = intervals.run_sums(v, starts, ends, prefix, SUM_BLOCK)  # per group
                if int(v.min()) >= 0 and int(total.max()) <= INT32.max:
                    self.sum32.add(c)
                else:
                    self.prefix[c] = prefix
        return col in self.sum32


def _group_codes(frame: pd.DataFrame, level: str | list[str]) -> tuple[np.ndarray, pd.Index]:
    """Integer code per row, ordered as the sorted group labels, and those labels. The codes
    are int32 where the labels' combinations fit (the cube's 8M-row group frame at a 10M-kernel
    PyTorch run: 33 MB, where int64 codes and a hashed factorize took ~0.26 GB at once)."""
    idx = frame.index
    names = [level] if isinstance(level, str) else list(level)
    if isinstance(idx, pd.MultiIndex):
        # the levels of a MultiIndex built from arrays are sorted: their codes order the labels
        pos = [idx.names.index(n) for n in names]
        sizes = [len(idx.levels[i]) for i in pos]
        total = int(np.prod(sizes, dtype=np.float64))
        level_codes = [np.asarray(idx.codes[i]) for i in pos]
        if total < 2**40 and all(len(c) == 0 or int(c.min()) >= 0 for c in level_codes):
            comp = np.zeros(len(idx), dtype=index_dtype(total))
            for c, size in zip(level_codes, sizes, strict=True):
                comp *= size
                comp += c
            del level_codes
            uniq, codes, _ = _codes(comp, total, index_dtype(len(comp)))
            del comp
            labels = []
            rest = uniq
            for i, size in reversed(list(zip(pos, sizes, strict=True))):
                labels.append(idx.levels[i].take(rest % size))
                rest = rest // size
            labels.reverse()
            groups = labels[0] if len(labels) == 1 else pd.MultiIndex.from_arrays(labels)
            return codes, groups
    codes, groups = idx.droplevel("iteration").factorize(sort=True)
    return np.asarray(codes, dtype=np.int64), groups


def _index_iterations(index: pd.Index) -> np.ndarray:
    """The index's iteration of each row, int32 where the iterations fit (no int64 copy of a
    MultiIndex level: its values taken by its codes)."""
    if isinstance(index, pd.MultiIndex):
        k = index.names.index("iteration")
        codes = np.asarray(index.codes[k])
        if len(codes) == 0 or int(codes.min()) >= 0:
            return narrow(index.levels[k].to_numpy(np.int64))[codes]
    return np.asarray(index.get_level_values("iteration"), dtype=np.int64)


def _group_order(
    frame: pd.DataFrame, level: str | list[str]
) -> tuple[pd.Index, np.ndarray, int, int, np.ndarray | None]:
    """(groups, sorted key, span, it0, row order or None when already in that order)."""
    it = _index_iterations(frame.index)
    codes, groups = _group_codes(frame, level)
    it0 = int(it.min()) if len(it) else 0
    span = int(it.max()) - it0 + 1 if len(it) else 1
    # the key built in its final type (int32 when every key fits): no int64 temporaries; a
    # copy (not _narrow_key's, which may be ``codes`` itself): codes are read again below
    key = codes.astype(index_dtype(len(groups) * span))
    key *= span
    np.add(key, it - it0, out=key, casting="unsafe")  # values fit: each key < groups * span
    if len(key) < 2 or bool(np.all(key[1:] >= key[:-1])):
        return groups, key, span, it0, None
    if bool(np.all(it[1:] >= it[:-1])) and len(groups) < 2**15:
        # iteration-major rows (how the cube is built): a stable radix sort by group
        order = np.argsort(codes.astype(np.int16), kind="stable")
    else:
        order = np.argsort(key, kind="stable")
    return groups, key[order], span, it0, order


def _laid_out(frame: pd.DataFrame, level: str | list[str]) -> tuple[pd.DataFrame, _Layout]:
    """The frame in (group, iteration) order (itself when it is) and its cached layout."""
    groups, key, span, it0, order = _group_order(frame, level)
    if order is not None:
        frame = frame.take(order)
    cols = {}
    for col in frame.columns:
        v = frame[col].to_numpy()
        cols[col] = v.astype(np.int64) if v.dtype == bool else v  # group-bys count booleans
    lay = _Layout(groups, key, span, it0, cols)
    frame.__dict__.setdefault("_jlprof_layouts", {})[_level_key(level)] = lay
    return frame, lay


def index_levels(frame: pd.DataFrame) -> tuple[np.ndarray, ...]:
    """A cube frame's index levels as arrays, its group levels first and the iteration last,
    each int32 when its values fit, as the cube holds its columns (for callers that keep
    them: 6M rows of ``op_iter`` at 10M kernels)."""
    names = [n for n in frame.index.names if n != "iteration"] + ["iteration"]
    return tuple(narrow(frame.index.get_level_values(n).to_numpy(np.int64)) for n in names)


def _level_key(level: str | list[str]) -> str | tuple[str, ...]:
    return level if isinstance(level, str) else tuple(level)


def _layout(frame: pd.DataFrame, level: str | list[str]) -> _Layout:
    cache = frame.__dict__.setdefault("_jlprof_layouts", {})
    if _level_key(level) not in cache:
        cache[_level_key(level)] = _laid_out(frame, level)[1]
    return cache[_level_key(level)]


def group_major(frame: pd.DataFrame, level: str | list[str]) -> pd.DataFrame:
    """The frame's rows in (group, iteration) order: :func:`combine` then copies nothing.

    Done once when the cube is built, instead of a reordered copy of every column kept
    beside the frame (~80 MB at 1M kernels). The result carries its layout, so the first
    combine() does not sort again.
    """
    return _laid_out(frame, level)[0]


def combine(frame: pd.DataFrame, level: str | list[str], lo: int, hi: int) -> pd.DataFrame:
    """Combine per-iteration partials over iterations lo..hi (inclusive) by ``level``.

    Same result as a group-by over the rows in range (:func:`combine_reference`), in a
    few ms at 600k rows: a range change in the dashboard combines three such frames. A frame
    that holds one range combined (:class:`Cube`'s ``only``) gives that range alone.
    """
    refuse_other_range(frame, lo, hi)
    lay = _layout(frame, level)
    a, b = intervals.run_bounds(lay.key, len(lay.groups), lay.span, lo - lay.it0, hi - lay.it0)
    keep = np.flatnonzero(b > a)
    if len(keep) == 0:
        return combine_reference(frame, level, lo, hi)
    a, b = a[keep], b[keep]
    idx = intervals.runs_index(a, b, len(lay.key))
    out = {}
    for c, v in lay.cols.items():
        agg = _agg_of(c)
        if agg == "sum" and v.dtype == np.int32 and not lay.sums_fit(c):
            out[c] = intervals.run_sums(v, a, b, lay.prefix[c], SUM_BLOCK)  # exact, int64
            continue
        # an int32 column that cannot overflow is summed in int32: numpy would sum it in
        # int64 by default, converting each row (~8 ms at 6M rows, against ~1 ms); the sums
        # of the gaps between runs, which may wrap, are dropped
        ufunc = np.add if agg == "sum" else np.minimum if agg == "min" else np.maximum
        r = ufunc.reduceat(v, idx, dtype=v.dtype)[0::2]
        out[c] = r.astype(np.int64, copy=False) if r.dtype.kind in "iu" else r
    index = lay.groups[keep]
    if isinstance(level, str):
        index.name = level
    else:
        index.names = list(level)
    return pd.DataFrame(out, index=index, copy=False)
