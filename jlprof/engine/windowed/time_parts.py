"""The cube's time partition (``Cube.time_iter``) summed window by window (issue 18).

``aggregate._time_iter`` computes, per (lane = GPU, iteration), the cumulative union length
of the categories in priority order (Tensor Core kernels, other kernels, memory work of that
lane's GPU rows, then the dataloader ranges, OS runtime calls and the host's busy time, which
apply to every lane), clipped to each iteration. It reads every GPU row at once. Here the
same figures come from the windows' :class:`~jlprof.engine.windowed.windowed.GpuRows`, so no
per-GPU-row column outlives its window.

Why it is exact. For each lane and each category prefix ``k`` (categories ``0..k``) we keep
the union of the pieces fed so far as merged, disjoint intervals. A window promises
(``horizon_ns``) that no GPU row and no API call of a later window starts before the horizon,
and the host pieces known up front (dataloader ranges, OS runtime calls, root ranges) are fed
in start order up to the horizon, so nothing fed later starts before it either. A merged
interval that ends at or before the horizon can therefore never grow (a later piece may only
touch it at the horizon, which adds no length): it is final, and its length inside each
iteration (:func:`aggregate._clip`) is added to the sums now. Only the merged intervals that
end after the horizon are carried to the next window. Merging before clipping gives the same
union length per iteration as the whole-trace path's clipping before merging.

GPU rows that overlap no other GPU work (``isolated``) never join another piece of the GPU
categories, so for the prefixes ``0..2`` their clipped lengths are added directly and never
carried (the whole-trace ``alone`` shortcut); from the first host category on they are merged.

A lane is a device of the export's GPU list (in order, idle ones included), then the devices
seen in GPU rows but not listed, sorted by id (``aggregate._LaneTable``); a CPU-only profile
has one lane, with the host categories alone. An unlisted device is only known when its first
row comes, in window ``w``; it had no GPU piece before window ``w - 1``'s horizon, so until
then its state is that of a lane with host pieces only. One such *host lane* is kept beside
the others and copied (sums and carried pieces) when a device appears.

Held between windows: the sums, ``lanes x 7 x iterations`` int64, and per prefix the carried
merged pieces (lane, start, end: 24 bytes each), which are the work still in flight at the
horizon; plus the host pieces known up front, merged once (16 bytes per merged dataloader
range, OS runtime call and root range: the range pass holds those ranges anyway).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jlprof.engine.aggregate import intervals
from jlprof.engine.aggregate.aggregate import CATEGORIES, _clip, dataloader_ops, time_frame
from jlprof.engine.aggregate.iterations import Iterations
from jlprof.engine.windowed.windowed import CarryBroken, GpuRows

_I64 = np.int64
_EMPTY = np.zeros(0, _I64)
_NONE3 = (_EMPTY, _EMPTY, _EMPTY)
_N_GPU_CATS = 3  # tc, non_tc, memory: the GPU rows' categories; the rest are the host's
_NEVER = np.iinfo(np.int64).max

Pieces = tuple[np.ndarray, np.ndarray, np.ndarray]  # (lane, start, end)


def _merged(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals as their union's disjoint pieces, sorted by start."""
    _, s, e = intervals.merge(np.zeros(len(start), _I64), start, end)
    return s, e


def _cat(parts: list[Pieces]) -> Pieces:
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return _NONE3
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))  # type: ignore[return-value]


def _same(a: Pieces, b: Pieces) -> bool:
    return a is b or all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


class TimeParts:
    """``Cube.time_iter`` fed window by window: :meth:`add` each window's
    :class:`~jlprof.engine.windowed.windowed.GpuRows` in order, then :meth:`time_iter`."""

    def __init__(
        self,
        iterations: Iterations,
        gpu_devices: np.ndarray,
        dataloader: tuple[np.ndarray, np.ndarray],
        osrt: tuple[np.ndarray, np.ndarray],
        roots: tuple[np.ndarray, np.ndarray],
    ) -> None:
        """``gpu_devices``: the export's GPUs (``trace.gpus["cu_device"]``, in order);
        ``dataloader``, ``osrt``, ``roots``: (start, end) of the real ranges of a data
        loader op, of the OS runtime calls and of the root (outermost) ranges. The host's busy
        time is the roots plus each window's calls outside every range (``calls_*_ns``)."""
        self.bounds = np.asarray(iterations.bounds_ns, _I64)
        self.n_it = iterations.count
        self.durations = iterations.durations_ns()
        known = np.asarray(gpu_devices, _I64)
        self.n_known = len(known)
        self.host_lane = self.n_known  # the lane with host pieces only (see the module doc)
        self.unknown: list[int] = []  # unlisted devices, in the order they came (lanes after)
        self._table(known)
        self.n_lanes = self.n_known + 1
        # cum[lane, k + 1, it]: union length of categories 0..k in the iteration (cum[:, 0] = 0)
        self.cum = np.zeros((self.n_lanes, len(CATEGORIES) + 1, self.n_it), _I64)
        self.carry: list[Pieces] = [_NONE3] * len(CATEGORIES)
        self.host = [_merged(*map(np.asarray, p)) for p in (dataloader, osrt, roots)]
        self.fed = [0, 0, 0]  # host pieces fed so far, per host category
        self.promised = np.iinfo(np.int64).min  # no later piece starts before it
        self.done = False

    @classmethod
    def of_ranges(
        cls,
        iterations: Iterations,
        gpus: pd.DataFrame,
        osrt: pd.DataFrame,
        start_ns: np.ndarray,
        end_ns: np.ndarray,
        parent: np.ndarray,
        op: np.ndarray,
        ops: pd.DataFrame,
    ) -> TimeParts:
        """From the range pass: per NVTX range its start, end, parent (< 0 for a root) and
        op (row of ``ops``, the range pass's op table); ``gpus``/``osrt``: the trace's."""
        start_ns = np.asarray(start_ns, _I64)
        end_ns = np.asarray(end_ns, _I64)
        dl = dataloader_ops(ops)[np.asarray(op)] if len(ops) else np.zeros(len(start_ns), bool)
        root = np.asarray(parent) < 0
        return cls(
            iterations,
            gpus["cu_device"].to_numpy(_I64),
            (start_ns[dl], end_ns[dl]),
            (osrt["start_ns"].to_numpy(_I64), osrt["end_ns"].to_numpy(_I64)),
            (start_ns[root], end_ns[root]),
        )

    # ---- lanes -------------------------------------------------------------------------

    def _table(self, devs: np.ndarray) -> None:
        """Devices sorted (stable: a device listed twice takes its first lane), and lanes."""
        lanes = np.arange(len(devs), dtype=_I64)
        lanes[self.n_known :] += 1  # the host lane sits between listed and unlisted devices
        order = np.argsort(devs, kind="stable")
        self.devs, self.lane_of_dev = devs[order], lanes[order]

    def _lanes(self, dev: np.ndarray) -> np.ndarray:
        """Lane of each GPU row's device; a device seen for the first time gets a lane that
        starts as a copy of the host lane."""
        seen = np.asarray(pd.unique(dev), _I64)  # hashing: no sort of the window's rows
        new = np.setdiff1d(seen, self.devs)
        if len(new):
            n_new = len(new)
            h = self.host_lane
            first = self.n_lanes
            self.cum = np.concatenate([self.cum, np.repeat(self.cum[h : h + 1], n_new, 0)])
            for k, (cl, cs, ce) in enumerate(self.carry):
                mine = cl == h
                rep = int(mine.sum())
                if rep:
                    lanes = np.repeat(np.arange(first, first + n_new, dtype=_I64), rep)
                    self.carry[k] = _sorted(
                        _cat(
                            [
                                (cl, cs, ce),
                                (lanes, np.tile(cs[mine], n_new), np.tile(ce[mine], n_new)),
                            ]
                        )
                    )
            self.unknown += [int(d) for d in new]
            self.n_lanes += n_new
            listed = self.devs[np.argsort(self.lane_of_dev, kind="stable")][: self.n_known]
            self._table(np.concatenate([listed, np.asarray(self.unknown, _I64)]))
        if len(self.devs) == 0:
            return np.zeros(len(dev), _I64)
        return self.lane_of_dev[np.searchsorted(self.devs, dev)]

    # ---- windows -----------------------------------------------------------------------

    def add(self, rows: GpuRows) -> None:
        """Add one window's GPU rows and host-busy calls; windows come in order."""
        if self.done:
            raise RuntimeError("TimeParts.add after time_iter")
        gs = np.asarray(rows.start_ns, _I64)
        cs = np.asarray(rows.calls_start_ns, _I64)
        for x in (gs, cs):
            if len(x) and int(x.min()) < self.promised:
                raise CarryBroken("a window's work starts before an earlier window's horizon")
        lane = self._lanes(np.asarray(rows.device_id, _I64))
        self._step(
            lane,
            gs,
            np.asarray(rows.end_ns, _I64),
            np.asarray(rows.uses_tc, bool),
            np.asarray(rows.is_memory, bool),
            np.asarray(rows.isolated, bool),
            cs,
            np.asarray(rows.calls_end_ns, _I64),
            int(rows.horizon_ns),
        )
        self.promised = max(self.promised, int(rows.horizon_ns))

    def _sums(self, pieces: Pieces) -> tuple[int, np.ndarray]:
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

    def _put(self, k: slice, sums: tuple[int, np.ndarray]) -> None:
        """Add :meth:`_sums` to the cumulative rows ``k`` (prefixes) of every lane."""
        lo, got = sums
        self.cum[:, k, lo : lo + got.shape[1]] += got[:, None, :]

    def _step(
        self,
        lane: np.ndarray,
        gs: np.ndarray,
        ge: np.ndarray,
        tc: np.ndarray,
        mem: np.ndarray,
        alone: np.ndarray,
        calls_s: np.ndarray,
        calls_e: np.ndarray,
        horizon: int,
    ) -> None:
        """Merge the window's pieces into each prefix's carried union; add what is final."""
        # host pieces: the up-front ones that start before the horizon, and the window's calls
        new_host: list[tuple[np.ndarray, np.ndarray]] = []
        for j, (ms, me) in enumerate(self.host):
            p = self.fed[j]
            q = len(ms) if horizon == _NEVER else int(np.searchsorted(ms, horizon, "left"))
            q = max(q, p)
            self.fed[j] = q
            new_host.append((ms[p:q], me[p:q]))
        if len(calls_s):
            rs, re_ = new_host[2]
            new_host[2] = _merged(np.concatenate([rs, calls_s]), np.concatenate([re_, calls_e]))
        n_lanes = self.n_lanes
        all_lanes = np.arange(n_lanes, dtype=_I64)

        def on_every_lane(s: np.ndarray, e: np.ndarray) -> Pieces:
            return np.repeat(all_lanes, len(s)), np.tile(s, n_lanes), np.tile(e, n_lanes)

        # GPU pieces per category: the isolated ones apart (never carried below prefix 3)
        gpu: list[Pieces] = []
        lone: list[Pieces] = []
        for sel in (tc, ~tc & ~mem, mem):
            some = sel & ~alone
            gpu.append((lane[some], gs[some], ge[some]))
            one = sel & alone
            lone.append((lane[one], gs[one], np.maximum(ge[one], gs[one])))
        for j, p in enumerate(lone):  # in the prefixes j .. 2
            self._put(slice(j + 1, _N_GPU_CATS + 1), self._sums(p))
        prev: Pieces = _NONE3
        prev_fin = self._sums(_NONE3)
        prev_carry: Pieces = _NONE3
        for k in range(len(CATEGORIES)):
            if k < _N_GPU_CATS:
                fresh = [gpu[k]]
            elif k == _N_GPU_CATS:
                fresh = [*lone, on_every_lane(*new_host[0])]
            else:
                fresh = [on_every_lane(*new_host[k - _N_GPU_CATS])]
            carry = self.carry[k]
            if not any(len(p[0]) for p in fresh) and _same(carry, prev_carry):
                # nothing new in this category: the prefix's union is the previous prefix's
                fin = prev_fin
            else:
                merged = intervals.merge(*_cat([carry, prev, *fresh]))
                final = merged[2] <= horizon
                fin = self._sums(tuple(x[final] for x in merged))  # type: ignore[arg-type]
                self.carry[k] = tuple(x[~final] for x in merged)  # type: ignore[assignment]
                prev = merged
            prev_carry = self.carry[k]
            prev_fin = fin
            self._put(slice(k + 1, k + 2), fin)

    def time_iter(self) -> pd.DataFrame:
        """The partition, frame-equal to ``aggregate._time_iter`` over the whole trace. Adds
        what is still carried (and the host pieces never fed); no window may follow."""
        if not self.done:
            z = np.zeros(0, _I64)
            self._step(z, z, z, z.astype(bool), z.astype(bool), z.astype(bool), z, z, _NEVER)
            self.done = True
        listed = list(range(self.n_known))
        unlisted = [self.host_lane + 1 + i for i in np.argsort(self.unknown, kind="stable")]
        order = listed + unlisted or [self.host_lane]
        # (lanes, prefixes, iterations) -> (prefixes, lane * n_it + iteration)
        cum = self.cum[order].transpose(1, 0, 2).reshape(len(CATEGORIES) + 1, -1)
        return time_frame(cum, self.durations, len(order))


def _sorted(p: Pieces) -> Pieces:
    """Pieces by lane, then start (as ``intervals.merge`` gives them)."""
    order = np.lexsort((p[1], p[0]))
    return tuple(x[order] for x in p)  # type: ignore[return-value]
