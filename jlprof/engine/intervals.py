"""Vectorised interval arithmetic: DLProf's "flattening" (guide §8.5) as sort + cummax.

All functions take parallel arrays (``group``, ``start``, ``end``) and never loop in
Python over intervals; ``group`` lets one call flatten many independent timelines
(one per GPU, per iteration, per group node...) at once.
"""

from __future__ import annotations

import numpy as np


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
    order = np.lexsort((start, group))
    g, s, e = group[order], start[order], end[order]
    # running max of end within each group: offset each group so cummax cannot leak across
    new_group = np.empty(len(g), dtype=bool)
    new_group[0] = True
    new_group[1:] = g[1:] != g[:-1]
    run_end = _group_cummax(e, new_group)
    prev_end = np.empty_like(run_end)
    prev_end[0] = np.iinfo(np.int64).min
    prev_end[1:] = run_end[:-1]
    opens = new_group | (s > prev_end)
    idx = np.flatnonzero(opens)
    out_end = np.maximum.reduceat(run_end, idx) if len(idx) else run_end[:0]
    return g[idx], s[idx], out_end


def _group_cummax(values: np.ndarray, new_group: np.ndarray) -> np.ndarray:
    """Cumulative max that restarts at every ``new_group`` flag."""
    gid = np.cumsum(new_group) - 1
    lo = values.min()
    span = int(values.max()) - int(lo) + 1
    # shift each group above all previous ones, take a global cummax, shift back
    shifted = (values - lo) + gid.astype(np.int64) * span
    if gid[-1] * span < np.iinfo(np.int64).max // 2:
        return np.maximum.accumulate(shifted) - gid * span + lo
    out = np.empty_like(values)  # pragma: no cover - only for absurd spans
    for k in np.unique(gid):
        m = gid == k
        out[m] = np.maximum.accumulate(values[m])
    return out


def union_length(group: np.ndarray, start: np.ndarray, end: np.ndarray, ngroups: int) -> np.ndarray:
    """Total flattened length per group (index ``0..ngroups-1``)."""
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
    count = last - first + 1
    row = np.repeat(np.arange(len(s)), count)
    offset = np.arange(len(row)) - np.repeat(np.cumsum(count) - count, count)
    win = first[row] + offset
    ps = np.maximum(s[row], bounds[win])
    pe = np.minimum(e[row], bounds[win + 1])
    keep = pe > ps
    return row[keep], win[keep], ps[keep], pe[keep]
