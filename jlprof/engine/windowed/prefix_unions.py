"""Priority partitions summed window by window: per (lane, iteration), the union length of
categories ``0..k`` for every prefix ``k``, from pieces that come in horizon order.

Both per-lane time partitions of the whole-trace path are such cumulative unions (the cube's
``aggregate._time_iter``, the idle causes' ``analyses.idle.idle_causes``): the parts of a
partition are differences of prefix unions. :class:`PrefixUnions` computes them from
windows. Why it is exact: a window promises (its horizon) that nothing fed later starts
before the horizon. So for each prefix we keep the union fed so far as merged, disjoint
pieces; a merged piece that ends at or before the horizon can never grow (a later piece may
only touch it at the horizon, which adds no length): it is final, and its length inside each
iteration (:func:`aggregate._clip`) is added now. Only the pieces that end after the horizon
are carried. Merging before clipping gives the same union length per iteration as the
whole-trace path's clipping before merging.

Held between windows: the sums, ``lanes x (categories + 1) x iterations`` int64, and per
prefix the carried pieces (lane, start, end: 24 bytes each), the work in flight at the
horizon.
"""

from __future__ import annotations

import numpy as np

from jlprof.engine.aggregate import intervals
from jlprof.engine.aggregate.aggregate import _clip
from jlprof.engine.windowed.windowed import CarryBroken

_I64 = np.int64
_EMPTY = np.zeros(0, _I64)
NO_PIECES = (_EMPTY, _EMPTY, _EMPTY)
NEVER = np.iinfo(np.int64).max  # the horizon after the last window: every piece is final

Pieces = tuple[np.ndarray, np.ndarray, np.ndarray]  # (lane, start, end)


def merged(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals as their union's disjoint pieces, sorted by start."""
    _, s, e = intervals.merge(np.zeros(len(start), _I64), start, end)
    return s, e


def joined(parts: list[Pieces]) -> Pieces:
    """The pieces of ``parts`` together (no copy for one part)."""
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return NO_PIECES
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))  # type: ignore[return-value]


def by_lane(p: Pieces) -> Pieces:
    """Pieces by lane, then start (as ``intervals.merge`` gives them)."""
    order = np.lexsort((p[1], p[0]))
    return tuple(x[order] for x in p)  # type: ignore[return-value]


class ByStart:
    """Pieces known up front (host intervals from the ranges or the trace's small tables),
    handed to the windows in start order: each call of :meth:`until` gives those that start
    before the horizon and were not given yet, so nothing given later starts before it."""

    def __init__(self, start: np.ndarray, *columns: np.ndarray) -> None:
        """``start``, and columns beside it (ends, processes...), in any order."""
        start = np.asarray(start, _I64)
        order = np.argsort(start, kind="stable")
        self.columns = [start[order], *(np.asarray(c)[order] for c in columns)]
        self.fed = 0

    def until(self, horizon: int) -> list[np.ndarray]:
        """``[start, *columns]`` of the pieces starting before ``horizon`` not given yet."""
        start = self.columns[0]
        p = self.fed
        q = len(start) if horizon == NEVER else int(np.searchsorted(start, horizon, "left"))
        self.fed = q = max(p, q)
        return [c[p:q] for c in self.columns]


def _same(a: Pieces, b: Pieces) -> bool:
    return a is b or all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


class PrefixUnions:
    """``cum[lane, k + 1, iteration]``: the union length of categories ``0..k`` (``cum[:, 0]``
    is 0), fed by :meth:`step` in horizon order; ``bounds``: the iterations' edges."""

    def __init__(self, n_lanes: int, n_categories: int, bounds: np.ndarray) -> None:
        self.bounds = np.asarray(bounds, _I64)
        self.n_it = len(self.bounds) - 1
        self.n_lanes = n_lanes
        self.cum = np.zeros((n_lanes, n_categories + 1, self.n_it), _I64)
        self.carry: list[Pieces] = [NO_PIECES] * n_categories
        self.promised = np.iinfo(np.int64).min  # the last horizon: no piece starts before it

    def sums(self, pieces: Pieces) -> tuple[int, np.ndarray]:
        """Length of the pieces inside each (lane, iteration) of the iterations they touch:
        the first of them and a ``(lanes, touched)`` block (a window touches a few
        iterations: its cost does not grow with the run's)."""
        pl, ps, pe = pieces
        row, win, s, e = _clip(ps, pe, self.bounds)
        if len(row) == 0:
            return 0, np.zeros((self.n_lanes, 0), _I64)
        lo = int(win.min())
        span = int(win.max()) + 1 - lo
        # float64 sums of int64 lengths are exact below 2**53 ns (104 days) a window
        got = np.bincount(
            pl[row] * span + (win - lo),
            weights=(e - s).astype(np.float64),
            minlength=self.n_lanes * span,
        )
        return lo, got.astype(_I64).reshape(self.n_lanes, span)

    def put(self, k: slice, sums: tuple[int, np.ndarray]) -> None:
        """Add :meth:`sums` to the cumulative rows ``k`` (prefixes) of every lane."""
        lo, got = sums
        self.cum[:, k, lo : lo + got.shape[1]] += got[:, None, :]

    def step(self, fresh: list[list[Pieces]], horizon: int) -> None:
        """Merge each category's new pieces (``fresh[k]``, none starting before the last
        horizon) into each prefix's carried union; add what ends by ``horizon``. Raises
        :class:`CarryBroken` when a piece starts before the last horizon (what the carry
        relies on does not hold)."""
        for new in fresh:
            for _, s, _ in new:
                if len(s) and int(s.min()) < self.promised:
                    raise CarryBroken("a window's work starts before an earlier window's horizon")
        prev: Pieces = NO_PIECES
        prev_fin = self.sums(NO_PIECES)
        prev_carry: Pieces = NO_PIECES
        for k, new in enumerate(fresh):
            carry = self.carry[k]
            if not any(len(p[0]) for p in new) and _same(carry, prev_carry):
                # nothing new in this category: the prefix's union is the previous prefix's
                fin = prev_fin
            else:
                m = intervals.merge(*joined([carry, prev, *new]))
                final = m[2] <= horizon
                fin = self.sums(tuple(x[final] for x in m))  # type: ignore[arg-type]
                self.carry[k] = tuple(x[~final] for x in m)  # type: ignore[assignment]
                prev = m
            prev_carry = self.carry[k]
            prev_fin = fin
            self.put(slice(k + 1, k + 2), fin)
        self.promised = max(self.promised, horizon)

    def flat(self, order: list[int]) -> np.ndarray:
        """The sums of lanes ``order`` as ``(prefixes, lane * iterations + iteration)``, the
        whole-trace path's layout."""
        n = self.cum.shape[1]
        return self.cum[order].transpose(1, 0, 2).reshape(n, -1)


__all__ = [
    "NEVER",
    "NO_PIECES",
    "ByStart",
    "Pieces",
    "PrefixUnions",
    "by_lane",
    "joined",
    "merged",
]
