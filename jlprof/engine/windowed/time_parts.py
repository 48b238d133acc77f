"""The cube's time partition (``Cube.time_iter``) summed window by window (issue 18).

``aggregate._time_iter`` computes, per (lane = GPU, iteration), the cumulative union length
of the categories in priority order (Tensor Core kernels, other kernels, memory work of that
lane's GPU rows, then the dataloader ranges, OS runtime calls and the host's busy time, which
apply to every lane), clipped to each iteration. It reads every GPU row at once. Here the
same figures come from the windows' :class:`~jlprof.engine.windowed.windowed.GpuRows`, so no
per-GPU-row column outlives its window.

Why it is exact: :mod:`jlprof.engine.windowed.prefix_unions` (the host pieces known up front,
dataloader ranges, OS runtime calls and root ranges, are fed in start order up to each
window's horizon, so nothing fed later starts before it either).

GPU rows that overlap no other GPU work (``isolated``) never join another piece of the GPU
categories, so for the prefixes ``0..2`` their clipped lengths are added directly and never
carried (the whole-trace ``alone`` shortcut); from the first host category on they are merged.

A lane is a device of the export's GPU list (in order, idle ones included), then the devices
seen in GPU rows but not listed, sorted by id (``aggregate._LaneTable``); a CPU-only profile
has one lane, with the host categories alone. An unlisted device is only known when its first
row comes, in window ``w``; it had no GPU piece before window ``w - 1``'s horizon, so until
then its state is that of a lane with host pieces only. One such *host lane* is kept beside
the others and copied (sums and carried pieces) when a device appears.

Held between windows: :class:`PrefixUnions`'s sums and carried pieces, plus the host pieces
known up front, merged once (16 bytes per merged dataloader range, OS runtime call and root
range: the range pass holds those ranges anyway).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jlprof.engine.aggregate.aggregate import CATEGORIES, dataloader_ops, time_frame
from jlprof.engine.aggregate.iterations import Iterations
from jlprof.engine.windowed.prefix_unions import (
    NEVER,
    ByStart,
    Pieces,
    PrefixUnions,
    by_lane,
    joined,
    merged,
)
from jlprof.engine.windowed.windowed import GpuRows

_I64 = np.int64
_N_GPU_CATS = 3  # tc, non_tc, memory: the GPU rows' categories; the rest are the host's


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
        self.durations = iterations.durations_ns()
        known = np.asarray(gpu_devices, _I64)
        self.n_known = len(known)
        self.host_lane = self.n_known  # the lane with host pieces only (see the module doc)
        self.unknown: list[int] = []  # unlisted devices, in the order they came (lanes after)
        self._table(known)
        self.u = PrefixUnions(self.n_known + 1, len(CATEGORIES), iterations.bounds_ns)
        self.host = [ByStart(*merged(*map(np.asarray, p))) for p in (dataloader, osrt, roots)]
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
            u = self.u
            first = u.n_lanes
            u.cum = np.concatenate([u.cum, np.repeat(u.cum[h : h + 1], n_new, 0)])
            for k, (cl, cs, ce) in enumerate(u.carry):
                mine = cl == h
                rep = int(mine.sum())
                if rep:
                    lanes = np.repeat(np.arange(first, first + n_new, dtype=_I64), rep)
                    u.carry[k] = by_lane(
                        joined(
                            [
                                (cl, cs, ce),
                                (lanes, np.tile(cs[mine], n_new), np.tile(ce[mine], n_new)),
                            ]
                        )
                    )
            self.unknown += [int(d) for d in new]
            u.n_lanes += n_new
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
        lane = self._lanes(np.asarray(rows.device_id, _I64))
        self._step(
            lane,
            np.asarray(rows.start_ns, _I64),
            np.asarray(rows.end_ns, _I64),
            np.asarray(rows.uses_tc, bool),
            np.asarray(rows.is_memory, bool),
            np.asarray(rows.isolated, bool),
            np.asarray(rows.calls_start_ns, _I64),
            np.asarray(rows.calls_end_ns, _I64),
            int(rows.horizon_ns),
        )

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
        new_host = [h.until(horizon) for h in self.host]
        if len(calls_s):
            rs, re_ = new_host[2]
            new_host[2] = merged(np.concatenate([rs, calls_s]), np.concatenate([re_, calls_e]))
        n_lanes = self.u.n_lanes
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
        u = self.u
        for j, p in enumerate(lone):  # in the prefixes j .. 2
            u.put(slice(j + 1, _N_GPU_CATS + 1), u.sums(p))
        fresh = [[p] for p in gpu]
        fresh.append([*lone, on_every_lane(*new_host[0])])
        fresh += [[on_every_lane(*h)] for h in new_host[1:]]
        u.step(fresh, horizon)

    def time_iter(self) -> pd.DataFrame:
        """The partition, frame-equal to ``aggregate._time_iter`` over the whole trace. Adds
        what is still carried (and the host pieces never fed); no window may follow."""
        if not self.done:
            z = np.zeros(0, _I64)
            self._step(z, z, z, z.astype(bool), z.astype(bool), z.astype(bool), z, z, NEVER)
            self.done = True
        listed = list(range(self.n_known))
        unlisted = [self.host_lane + 1 + i for i in np.argsort(self.unknown, kind="stable")]
        order = listed + unlisted or [self.host_lane]
        return time_frame(self.u.flat(order), self.durations, len(order))
