"""Vectorised interval arithmetic: DLProf's "flattening" (guide §8.5) as sort + cummax.

All functions take parallel arrays (``group``, ``start``, ``end``) and never loop in
Python over intervals; ``group`` lets one call flatten many independent timelines
(one per GPU, per iteration, per group node...) at once.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jlprof.engine.read.narrow import index_dtype


def merge(
    group: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Union of intervals within each group: overlapping or touching intervals are joined.

    >>> merge(np.array([0, 0, 0]), np.array([0, 5, 20]), np.array([10, 12, 30]))
    (array([0, 0]), array([ 0, 20]), array([12, 30]))
    """
    group = np.asarray(group, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    if len(start) == 0:
        return group[:0], start[:0], end[:0]
    g0 = int(group.min())
    t0 = int(start.min())
    span = max(int(end.max()), int(start.max())) - t0 + 1  # ends clipped to their starts
    if (int(group.max()) - g0 + 1) * span >= 2**62:  # pragma: no cover - absurd spans
        return _merge_lexsort(group, start, np.maximum(end, start))
    # one int64 key per interval: group-major, then time. Keys of a later group are all
    # larger than any key of an earlier one, so one global cummax never leaks across groups.
    # Each temporary goes once used: at 13.5M ranges every one is 108 MB
    skey = group - g0
    skey *= span
    skey -= t0
    ek = np.maximum(end, start)
    ek += skey
    skey += start
    # the order among equal keys does not matter for a union, but timsort ("stable") is the
    # fastest here: events arrive nearly time-ordered, often already grouped
    order = np.argsort(skey, kind="stable")
    sk = skey[order]
    del skey
    run_end = ek[order]
    del ek
    np.maximum.accumulate(run_end, out=run_end)
    opens = np.empty(len(sk), dtype=bool)
    opens[0] = True
    np.greater(sk[1:], run_end[:-1], out=opens[1:])
    idx = np.flatnonzero(opens)
    del opens
    out_end_key = np.maximum.reduceat(run_end, idx)
    del run_end
    first = order[idx]  # gather only the runs' first rows, not whole permuted columns
    del order
    g = group[first]
    out_start = start[first]
    return g, out_start, out_end_key - (sk[idx] - out_start)


def _merge_lexsort(group, start, end):  # pragma: no cover - fallback for huge spans
    order = np.lexsort((start, group))
    g, s, e = group[order], start[order], end[order]
    out_g, out_s, out_e = [], [], []
    for gg, ss, ee in zip(g.tolist(), s.tolist(), e.tolist(), strict=True):
        if out_g and out_g[-1] == gg and ss <= out_e[-1]:
            out_e[-1] = max(out_e[-1], ee)
        else:
            out_g.append(gg)
            out_s.append(ss)
            out_e.append(ee)
    return np.array(out_g, np.int64), np.array(out_s, np.int64), np.array(out_e, np.int64)


def isolated(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Intervals that overlap no other interval of the set (touching ones do not overlap).

    Within any subset, such an interval adds its whole length to the union and never
    joins another, so unions over subsets need to flatten only the rest. On a GPU running
    one stream at a time that is every kernel, and flattening then costs no sort at all.

    >>> isolated(np.array([0, 5, 20, 30]), np.array([10, 12, 30, 31]))
    array([False, False,  True,  True])
    """
    start = np.asarray(start, dtype=np.int64)
    n = len(start)
    out = np.zeros(n, dtype=bool)
    if n == 0:
        return out
    order = np.argsort(start, kind="stable")  # timsort: GPU work arrives in time order
    s = start[order]
    e = np.asarray(end, dtype=np.int64)[order]
    np.maximum(e, s, out=e)
    # three row-long int64 arrays at a time, not five (the launch plan's peak at 10M rows)
    alone = np.ones(n, dtype=bool)
    alone[:-1] = s[1:] >= e[:-1]  # the next start (the earliest later one) is past its end
    np.maximum.accumulate(e, out=e)  # each row's running end
    alone[1:] &= s[1:] >= e[:-1]  # no earlier interval reaches past its start
    out[order] = alone
    return out


def busy_ns_per_device(
    device: np.ndarray, start: np.ndarray, end: np.ndarray, rows: int = 1 << 20
) -> dict[int, int]:
    """Summed GPU-work time per device, exact (int ns), 1M rows at a time: at 10M kernels a
    whole-trace duration array and ``np.unique`` of the device column were ~0.5 GB. Sums of
    parts (windows) add up to the whole's."""
    busy: dict[int, int] = {}
    for a in range(0, len(device), rows):
        d, dur = device[a : a + rows], end[a : a + rows] - start[a : a + rows]
        for k in np.unique(d).tolist():  # a handful of devices, not rows
            busy[k] = busy.get(k, 0) + int(dur[d == k].sum())
    return busy


def union_length(
    group: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    ngroups: int,
    alone: np.ndarray | None = None,
) -> np.ndarray:
    """Total flattened length per group (index ``0..ngroups-1``).

    ``alone`` marks intervals known to overlap no other (:func:`isolated`): their lengths
    are summed and only the rest is merged.
    """
    if alone is not None and alone.any():
        group = np.asarray(group, dtype=np.int64)
        start = np.asarray(start, dtype=np.int64)
        end = np.maximum(np.asarray(end, dtype=np.int64), start)
        out = np.bincount(group[alone], weights=(end - start)[alone], minlength=ngroups)
        rest = ~alone
        if rest.any():
            out += union_length(group[rest], start[rest], end[rest], ngroups)
        return out.astype(np.int64)
    g, s, e = merge(group, start, end)
    return np.bincount(g, weights=(e - s).astype(np.float64), minlength=ngroups).astype(np.int64)


def clip_to_windows(
    start: np.ndarray, end: np.ndarray, bounds: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split intervals at window bounds; return (row, window, start, end) of the pieces.

    ``bounds`` are sorted window edges ``b0 < b1 < … < bK``; window k is ``[b_k, b_k+1)``.
    Pieces outside ``[b0, bK]`` are dropped; ``row`` indexes the input interval.
    """
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    nwin = len(bounds) - 1
    if nwin <= 0 or len(start) == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z, z
    s = np.clip(start, bounds[0], bounds[-1])
    e = np.clip(end, bounds[0], bounds[-1])
    first = np.clip(np.searchsorted(bounds, s, side="right") - 1, 0, nwin - 1)
    last = np.clip(np.searchsorted(bounds, e, side="left") - 1, 0, nwin - 1)
    last = np.maximum(last, first)
    row, win = expand_runs(first, last - first + 1)
    ps = np.maximum(s[row], bounds[win])
    pe = np.minimum(e[row], bounds[win + 1])
    keep = pe > ps
    return row[keep], win[keep], ps[keep], pe[keep]


# ---- runs of rows: contiguous index ranges [a, b) of a sorted array ------------------------


def run_bounds(
    key: np.ndarray, n_groups: int, width: int, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per group g, the run of rows whose ``key`` lies in ``g*width + [lo, hi]``.

    ``key`` (group * width + offset, offsets in 0..width-1) is ascending. Returns (a, b)
    with b >= a; an empty range gives empty runs. An int32 ``key`` is searched with int32
    values when ``n_groups * width`` fits: numpy would otherwise convert the whole
    key to int64 on each search.
    """
    base = np.arange(n_groups, dtype=np.int64) * width
    if key.dtype == np.int32 and index_dtype(n_groups * width) == np.int32:
        base = base.astype(np.int32)
    lo, hi = min(max(lo, 0), width), min(hi, width - 1)
    a = np.searchsorted(key, base + lo, side="left")
    if hi < lo:
        return a, a
    b = np.searchsorted(key, base + hi, side="right")
    return a, np.maximum(b, a)


def runs_index(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """``ufunc.reduceat`` indices for the non-empty ascending runs [a, b) of an n-row array.

    Take every other result: ``np.add.reduceat(x, runs_index(a, b, len(x)))[0::2]``.
    """
    idx = np.empty(2 * len(a), dtype=np.int64)
    idx[0::2], idx[1::2] = a, b
    return idx[:-1] if len(idx) and idx[-1] == n else idx  # the last run reaches the end


def block_prefix(x: np.ndarray, block: int) -> np.ndarray:
    """``P[j] = sum(x[:j * block])`` in int64, for j = 0 .. len(x) // block: what
    :func:`run_sums` needs besides ``x`` (8 bytes per ``block`` rows)."""
    nb = len(x) // block
    prefix = np.zeros(nb + 1, np.int64)
    if nb:
        np.cumsum(x[: nb * block].reshape(nb, block).sum(axis=1, dtype=np.int64), out=prefix[1:])
    return prefix


def run_sums(
    x: np.ndarray, a: np.ndarray, b: np.ndarray, prefix: np.ndarray, block: int
) -> np.ndarray:
    """Exact int64 sums of ``x`` over the runs [a, b), given ``prefix = block_prefix(x,
    block)``: for an int32 ``x`` whose sums may not fit int32.

    A run's whole blocks come from two prefix entries; only the rows before its first and
    after its last block boundary (< ``block`` each) are gathered and summed in int64. At
    6M rows and 400 runs that reads ~13k rows instead of all of them, where
    ``np.add.reduceat(x, idx, dtype=np.int64)`` converts every row (~8 ms).
    """
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    first = -(-a // block)  # the first block boundary at or after a
    last = b // block  # the last one at or before b
    whole = first <= last
    mid = np.where(whole, prefix[last] - prefix[np.minimum(first, len(prefix) - 1)], 0)
    head_end = np.where(whole, first * block, b)
    tail_start = np.where(whole, last * block, b)
    starts = np.concatenate([a, tail_start])
    lens = np.concatenate([head_end - a, b - tail_start])
    offs = np.cumsum(lens) - lens
    rows = np.repeat(starts - offs, lens) + np.arange(int(lens.sum()))
    cum = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(x[rows], dtype=np.int64, out=cum[1:])
    pieces = cum[offs + lens] - cum[offs]
    return pieces[: len(a)] + pieces[len(a) :] + mid


def expand_runs(lo: np.ndarray, cnt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every row of the runs [lo, lo+cnt): (which run, row index), run by run."""
    which = np.repeat(np.arange(len(lo)), cnt)
    offs = np.arange(len(which)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    return which, np.repeat(lo, cnt) + offs


#: intervals merged at a time by :func:`thread_union_length` (~0.13 GB of sort temporaries;
#: twice as many held the summary's and the op type report's peaks ~0.1 GB higher at 13.5M ranges)
BUCKET_ROWS = 1 << 20


def _time_spans(start: np.ndarray, end: np.ndarray, k: int) -> list[tuple[int, int]]:
    """``k`` spans ``[a, b)`` that tile every interval's time, with about as many interval
    starts each (quantiles of a sample)."""
    lo = int(start.min())
    hi = max(int(end.max()), int(start.max())) + 1
    sample = np.sort(start[:: max(1, len(start) // (64 * k))])
    cuts = sample[(np.arange(1, k) * len(sample)) // k]
    edges = np.unique(np.concatenate([[lo], cuts, [hi]]))
    return list(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True))


def thread_union_length(
    group: np.ndarray,
    thread: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    ngroups: int,
    keep: np.ndarray | None = None,
) -> np.ndarray:
    """Per group: the union of its intervals on each thread, summed over the threads.

    The one rule for a total of CPU ranges (docs/reports.md): ranges nested on one thread
    are counted once (flattened, guide §8.5), ranges of different threads or processes (one
    per GPU) add up (guide ch. 9: totals are summed over the GPUs). ``keep``: a mask of the
    rows counted, so that whole columns can be passed: past :data:`BUCKET_ROWS` rows each span
    of time takes its own rows, and no column is copied for every row.
    """
    n = len(group) if keep is None else int(np.count_nonzero(keep))
    if n == 0:
        return np.zeros(ngroups, dtype=np.int64)
    k = -(-n // BUCKET_ROWS)
    if k <= 1 and keep is None:  # every row, merged at once: the columns as they are
        return _pairs_union(group, thread, start, end, ngroups)
    if k <= 1:
        rows = np.flatnonzero(keep)
        return _pairs_union(group[rows], thread[rows], start[rows], end[rows], ngroups)
    # by spans of time, each merged alone: the sort's temporaries are a span's; the spans
    # tile every row's time (a union does not depend on where the spans fall)
    out = np.zeros(ngroups, np.int64)
    start = np.asarray(start, np.int64)
    end = np.asarray(end, np.int64)
    for a, b in _time_spans(start, end, k):
        at = (start < b) & (end > a)
        if keep is not None:
            at &= keep
        rows = np.flatnonzero(at)
        del at
        s = np.maximum(start[rows], a)
        e = np.minimum(end[rows], b)  # the pieces in [a, b): the spans' unions add up
        out += _pairs_union(group[rows], thread[rows], s, e, ngroups)
        del rows, s, e
    return out


def _pairs_union(
    group: np.ndarray, thread: np.ndarray, start: np.ndarray, end: np.ndarray, ngroups: int
) -> np.ndarray:
    """:func:`thread_union_length` of rows merged at once."""
    # codes by hashing, not sorting: any numbering of the (group, thread) pairs sums the same
    tid, tcode = pd.factorize(np.asarray(thread))
    pair = np.asarray(group).astype(index_dtype(ngroups * len(tcode)))  # 32 bits where it fits
    pair *= len(tcode)
    pair += tid
    del tid
    inv, pairs = pd.factorize(pair)
    del pair
    per_pair = union_length(inv.astype(np.int64, copy=False), start, end, len(pairs))
    pairs = np.asarray(pairs, np.int64)
    return np.bincount(pairs // len(tcode), weights=per_pair, minlength=ngroups).astype(np.int64)
