"""Why each GPU is idle: its idle time per iteration split into causes that sum exactly to it.

A GPU is *idle* when no kernel runs on it (compute idle; a copy does not count as compute).
Each idle nanosecond gets the first cause that holds at that instant, in this priority order:

``memcpy``       a memcpy or memset runs on that GPU: a copy on the critical path.
``sync``         a process that uses the GPU is inside a synchronising CUDA call
                 (:data:`SYNC_API`): the host waits, and the GPU has nothing to run.
``dataloader``   a process that uses the GPU is inside a dataloader range (the NVTX
                 ranges the summary's Dataloader category and the Dataloader detector use).
``other``        (part 1) work is queued: a launch call for this GPU has returned but its
                 work has not started (it waits on an event, another stream, a graph...).
``host_launch``  nothing is queued and the host is busy elsewhere (inside an API call or an
                 NVTX range of a process that uses the GPU): the GPU waits for the next launch.
``other``        (part 2) nothing is queued and the host shows no activity (untraced work).

The parts are differences of cumulative interval unions (as the summary's priority categories,
``aggregate._time_iter``), so ``memcpy + sync + dataloader + host_launch + other == idle`` holds
in integers for every (GPU, iteration). Host intervals count for the GPUs their process
launched work on. All of it is sort/merge/searchsorted over arrays: no per-event Python loop.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from jlprof.engine.aggregate import intervals
from jlprof.engine.aggregate.aggregate import _cumulative_union, dataloader_ops, gpu_lanes
from jlprof.engine.aggregate.iterations import Iterations
from jlprof.engine.correlate.correlate import Correlated
from jlprof.engine.read.trace import GLOBAL_PID_MASK

# CUDA runtime/driver calls that block the host until GPU work completes: the explicit
# synchronisations and the synchronous (non-Async) copies and memsets of pageable memory.
SYNC_API = re.compile(
    r"^(cuda(Device|Stream|Event)Synchronize|cu(Ctx|Stream|Event)Synchronize"
    r"|cudaThreadSynchronize|(cudaMemcpy|cuMemcpy)(?!.*Async)\w*)$"
)
CAUSES = ("memcpy", "sync", "dataloader", "host_launch", "other")
CAUSE_LABELS = {
    "memcpy": "Memory Copy",
    "sync": "Synchronization",
    "dataloader": "Data Loading",
    "host_launch": "Host Launch Bound",
    "other": "Other",
}


Pieces = tuple[np.ndarray, np.ndarray, np.ndarray]  # (lane, start, end)


class ProcessLanes:
    """Which lanes (GPUs) each process launched work on: a process's host intervals count
    on every one of them."""

    def __init__(self, pid: np.ndarray, lane: np.ndarray) -> None:
        """``pid``, ``lane``: per GPU row (or per distinct pair) its process and lane."""
        pairs = pd.DataFrame({"pid": np.asarray(pid, np.int64), "lane": np.asarray(lane, np.int64)})
        pairs = pairs.drop_duplicates().sort_values(["pid", "lane"], kind="stable")
        # the pairs sorted by process: each process's lanes are a run of them
        self.pid, self.first = np.unique(pairs["pid"].to_numpy(np.int64), return_index=True)
        self.count = np.diff(np.append(self.first, len(pairs)))
        self.lane = pairs["lane"].to_numpy(np.int64)

    def spread(self, pid: np.ndarray, start: np.ndarray, end: np.ndarray) -> Pieces:
        """Intervals of processes ``pid`` replicated onto every lane their process uses
        (none for a process that launched no GPU work)."""
        pid = np.asarray(pid, np.int64)
        at = np.searchsorted(self.pid, pid)
        at = np.minimum(at, max(len(self.pid) - 1, 0))
        ok = (self.pid[at] == pid) if len(self.pid) else np.zeros(len(pid), bool)
        rows = np.flatnonzero(ok)
        which, pos = intervals.expand_runs(self.first[at[rows]], self.count[at[rows]])
        r = rows[which]
        return self.lane[pos], np.asarray(start, np.int64)[r], np.asarray(end, np.int64)[r]


def gpu_pieces(
    lane: np.ndarray, gpu: pd.DataFrame, call: np.ndarray, call_end: np.ndarray
) -> tuple[Pieces, Pieces, Pieces]:
    """The causes of the GPU rows ``gpu`` (on lanes ``lane``): kernels (busy), copies
    (``memcpy``), and work queued: its launching call (``call``: a row of the calls whose
    ends are ``call_end``, < 0 for none) returned before it started."""
    start = gpu["start_ns"].to_numpy(np.int64)
    end = np.maximum(gpu["end_ns"].to_numpy(np.int64), start)
    is_kernel = (gpu["kind"] == "kernel").to_numpy(bool)
    launched = call >= 0
    returned = np.where(launched, call_end[np.maximum(call, 0)] if len(call_end) else 0, 0)
    queued = launched & (returned < start)
    return (
        (lane[is_kernel], start[is_kernel], end[is_kernel]),
        (lane[~is_kernel], start[~is_kernel], end[~is_kernel]),
        (lane[queued], returned[queued], start[queued]),
    )


def is_sync(names: pd.Index) -> np.ndarray:
    """Per API name (categories of ``Trace.api.name``): whether the call synchronises."""
    return names.to_series().astype(str).str.match(SYNC_API).to_numpy(bool)


def host_ranges(
    op: np.ndarray, parent: np.ndarray, ops: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray]:
    """Per real (NVTX) range: whether it is a data loader range (``dataloader``) and whether
    it is outermost (the host's busy time, with the calls outside every range)."""
    op = np.asarray(op, np.int64)
    dl = dataloader_ops(ops)[op] if len(ops) else np.zeros(len(op), bool)
    return dl, np.asarray(parent) < 0


def cause_order(
    gpu: tuple[Pieces, Pieces, Pieces], sync: Pieces, dl: Pieces, host: Pieces
) -> list[Pieces]:
    """The pieces in :data:`CAUSES`' priority order (``other``'s queued part before
    ``host_launch``), kernels first: prefix ``k``'s union is what causes ``0..k`` explain."""
    kernels, copies, queued = gpu
    return [kernels, copies, sync, dl, queued, host]


def causes_frame(cum: np.ndarray, wall_per_it: np.ndarray, n_lanes: int) -> pd.DataFrame:
    """The frame of :func:`idle_causes` from the prefix unions ``cum`` ((7, lane x
    iteration): ``cum[k + 1]`` the union of :func:`cause_order`'s pieces ``0..k``)."""
    n_it = len(wall_per_it)
    wall = np.tile(np.asarray(wall_per_it, np.int64), n_lanes)
    d = np.diff(cum, axis=0)
    out = pd.DataFrame(
        {
            "wall": wall,
            "busy": cum[1],
            "idle": wall - cum[1],
            "memcpy": d[1],
            "sync": d[2],
            "dataloader": d[3],
            "host_launch": d[5],
            "other": d[4] + (wall - cum[6]),
        }
    )
    out.index = pd.MultiIndex.from_arrays(
        [np.repeat(np.arange(n_lanes), n_it), np.tile(np.arange(n_it), n_lanes)],
        names=["lane", "iteration"],
    )
    return out


def idle_causes(c: Correlated, it: Iterations) -> pd.DataFrame:
    """Per (lane, iteration): ``wall``, ``busy`` (kernel union), ``idle``, :data:`CAUSES` (ns)."""
    lane, labels = gpu_lanes(c)
    n_lanes = max(len(labels), 1)
    g = c.gpu
    lanes = ProcessLanes(g["global_pid"].to_numpy(np.int64), lane)
    api = c.api
    a_s, a_e = api["start_ns"].to_numpy(np.int64), api["end_ns"].to_numpy(np.int64)
    a_pid = api["global_tid"].to_numpy(np.int64) & GLOBAL_PID_MASK
    codes = api["name"].cat.codes.to_numpy()
    sync = is_sync(api["name"].cat.categories)[codes] & (codes >= 0)

    inst = c.inst
    real = ~inst["synthetic"].to_numpy(bool)
    i_s, i_e = inst["start_ns"].to_numpy(np.int64), inst["end_ns"].to_numpy(np.int64)
    i_pid = inst["global_tid"].to_numpy(np.int64) & GLOBAL_PID_MASK
    i_s, i_e, i_pid = i_s[real], i_e[real], i_pid[real]
    dl, root = host_ranges(inst["op"].to_numpy()[real], inst["parent"].to_numpy()[real], c.ops)
    # a call inside a real range adds nothing to the host's busy union (aggregate._host_busy)
    a_inst = api["inst"].to_numpy(np.int64)
    free = ~((a_inst >= 0) & real[np.maximum(a_inst, 0)]) if len(real) else np.ones(len(a_s), bool)
    cats = cause_order(
        gpu_pieces(lane, g, g["api"].to_numpy(np.int64), a_e),
        lanes.spread(a_pid[sync], a_s[sync], a_e[sync]),
        lanes.spread(i_pid[dl], i_s[dl], i_e[dl]),
        lanes.spread(
            np.concatenate([a_pid[free], i_pid[root]]),
            np.concatenate([a_s[free], i_s[root]]),
            np.concatenate([a_e[free], i_e[root]]),
        ),
    )
    n_it = it.count
    cum = np.zeros((len(cats) + 1, n_lanes * n_it), dtype=np.int64)
    _cumulative_union(cats, it.bounds_ns, 0, n_it, cum)
    return causes_frame(cum, it.durations_ns(), n_lanes)


__all__ = [
    "CAUSES",
    "CAUSE_LABELS",
    "SYNC_API",
    "ProcessLanes",
    "cause_order",
    "causes_frame",
    "gpu_pieces",
    "host_ranges",
    "idle_causes",
    "is_sync",
]
