"""The idle_causes report (``analyses.idle.idle_causes``) summed window by window.

The idle partition is a priority partition like the cube's time partition: per (lane,
iteration) the union length of the causes ``0..k`` in :func:`~jlprof.engine.analyses.idle.
cause_order`, kernels first. :class:`~jlprof.engine.windowed.prefix_unions.PrefixUnions` sums
it from the windows (exact: the reasons are in that module). Per window: its kernels,
copies and queued work (a launch call of the window returned, its work has not started), its
synchronising calls and its calls outside every range; the NVTX ranges the causes read (data
loader ranges, outermost ranges) are known up front and fed in start order up to each
window's horizon.

A process's host intervals count on every GPU it launched work on, anywhere in the trace:
the launch plan gathers those (process, device) pairs from every GPU row
(``plan_windows(device_pairs=True)``), so each lane's causes are known from the first window.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jlprof.engine.aggregate.aggregate import device_lanes
from jlprof.engine.aggregate.intervals import merge
from jlprof.engine.aggregate.iterations import Iterations
from jlprof.engine.analyses.idle import (
    ProcessLanes,
    cause_order,
    causes_frame,
    gpu_pieces,
    host_ranges,
    is_sync,
)
from jlprof.engine.read.trace import GLOBAL_PID_MASK
from jlprof.engine.windowed.prefix_unions import NEVER, ByStart, Pieces, PrefixUnions
from jlprof.engine.windowed.windowed import Window, WindowResult

_I64 = np.int64


class IdleParts:
    """``idle_causes`` fed window by window: :meth:`add` each window with its result, in
    order, then :meth:`frame`."""

    def __init__(
        self,
        iterations: Iterations,
        gpus: pd.DataFrame,
        device_pairs: tuple[np.ndarray, np.ndarray],
        ranges: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
        ops: pd.DataFrame,
        api_names: pd.Index,
    ) -> None:
        """``iterations``: the key node's, edges open (the profile's first and last events
        are known at the end, :meth:`frame`); ``gpus``: the export's GPU list;
        ``device_pairs``: every distinct (process, device) of the GPU rows; ``ranges``: per
        NVTX range its start, end, thread, parent and op (row of ``ops``, the range pass's);
        ``api_names``: the API frames' name categories."""
        pair_pid, pair_dev = (np.asarray(x, _I64) for x in device_pairs)
        self.devs = np.unique(pair_dev)
        self.dev_lane, unknown = device_lanes(gpus["cu_device"], self.devs)
        self.n_lanes = max(len(gpus) + len(unknown), 1)
        pair_lane = self.dev_lane[np.searchsorted(self.devs, pair_dev)]
        self.lanes = ProcessLanes(pair_pid, pair_lane)
        start, end, tid, parent, op = ranges
        dl, root = host_ranges(op, parent, ops)
        pid = np.asarray(tid, _I64) & GLOBAL_PID_MASK
        start, end = np.asarray(start, _I64), np.asarray(end, _I64)
        self.dl, self.roots = (_by_start(pid[x], start[x], end[x]) for x in (dl, root))
        self.n_ranges = len(start)
        self.sync = is_sync(api_names)
        self.u = PrefixUnions(self.n_lanes, 6, iterations.bounds_ns)  # cause_order's 6 pieces
        self.done = False

    def add(self, w: Window, res: WindowResult) -> None:
        """One window's calls and GPU rows, with what the work pass made of them."""
        if self.done:
            raise RuntimeError("IdleParts.add after frame")
        api, gpu = w.api, w.gpu
        a_s, a_e = api["start_ns"].to_numpy(_I64), api["end_ns"].to_numpy(_I64)
        a_pid = api["global_tid"].to_numpy(_I64) & GLOBAL_PID_MASK
        codes = api["name"].cat.codes.to_numpy()
        sync = self.sync[codes] & (codes >= 0)
        a_inst = np.asarray(res.api_inst, _I64)
        free = ~((a_inst >= 0) & (a_inst < self.n_ranges))  # outside every (real) range
        dev = gpu["device_id"].to_numpy(_I64)
        lane = self.dev_lane[np.searchsorted(self.devs, dev)] if len(dev) else dev
        gpu_cats = gpu_pieces(lane, gpu, np.asarray(res.gpu_call, _I64), a_e)
        self._step(gpu_cats, (a_pid[sync], a_s[sync], a_e[sync]),
                   (a_pid[free], a_s[free], a_e[free]), int(w.next_start_ns))  # fmt: skip

    def _step(self, gpu_cats, sync: Pieces, calls: Pieces, horizon: int) -> None:
        spread = self.lanes.spread
        r_start, r_end, r_pid = self.roots.until(horizon)
        dl_start, dl_end, dl_pid = self.dl.until(horizon)
        host = [np.concatenate(x) for x in zip(calls, (r_pid, r_start, r_end), strict=True)]
        cats = cause_order(gpu_cats, spread(*sync), spread(dl_pid, dl_start, dl_end), spread(*host))
        self.u.step([[p] for p in cats], horizon)

    def frame(self, it: Iterations) -> pd.DataFrame:
        """``idle_causes(c, it)`` of the whole trace, ``it`` the profile's iterations (the
        windows' with their outer edges at the first and last events). No window may follow."""
        if not np.array_equal(self.u.bounds[1:-1], it.bounds_ns[1:-1]):
            raise ValueError("the windows' iterations are not the profile's")
        if not self.done:
            z = np.zeros(0, _I64)
            none = (z, z, z)
            self._step((none, none, none), none, none, NEVER)
            self.done = True
        return causes_frame(self.u.flat(list(range(self.n_lanes))), it.durations_ns(),
                            self.n_lanes)  # fmt: skip


def _by_start(pid: np.ndarray, start: np.ndarray, end: np.ndarray) -> ByStart:
    """Host intervals of processes, merged per process, to be fed in start order."""
    pid, start, end = merge(pid, start, end)
    return ByStart(start, end, pid)


__all__ = ["IdleParts"]
