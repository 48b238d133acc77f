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
from jlprof.engine.aggregate.aggregate import dataloader_ops, gpu_lanes
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


def _per_lane(
    pid: np.ndarray, start: np.ndarray, end: np.ndarray, pairs: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host intervals of process ``pid`` replicated onto every lane that process uses."""
    if len(pid) == 0 or pairs.empty:
        z = np.zeros(0, np.int64)
        return z, z, z
    rows = pd.DataFrame({"pid": pid, "row": np.arange(len(pid))}).merge(pairs, on="pid")
    r = rows["row"].to_numpy(np.int64)
    return rows["lane"].to_numpy(np.int64), start[r], end[r]


def idle_causes(c: Correlated, it: Iterations) -> pd.DataFrame:
    """Per (lane, iteration): ``wall``, ``busy`` (kernel union), ``idle``, :data:`CAUSES` (ns)."""
    lane, labels = gpu_lanes(c)
    n_lanes = max(len(labels), 1)
    g = c.gpu
    gs, ge = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
    ge = np.maximum(ge, gs)
    is_kernel = (g["kind"] == "kernel").to_numpy(bool)
    g_pid = g["global_pid"].to_numpy(np.int64)
    pairs = pd.DataFrame({"pid": g_pid, "lane": lane}).drop_duplicates()

    api = c.api
    a_s, a_e = api["start_ns"].to_numpy(np.int64), api["end_ns"].to_numpy(np.int64)
    a_pid = api["global_tid"].to_numpy(np.int64) & GLOBAL_PID_MASK
    names = api["name"].cat.categories.to_series().astype(str)
    is_sync = names.str.match(SYNC_API).to_numpy(bool)[api["name"].cat.codes.to_numpy()]
    is_sync &= api["name"].cat.codes.to_numpy() >= 0

    inst = c.inst
    real = ~inst["synthetic"].to_numpy(bool)
    i_s, i_e = inst["start_ns"].to_numpy(np.int64), inst["end_ns"].to_numpy(np.int64)
    i_pid = inst["global_tid"].to_numpy(np.int64) & GLOBAL_PID_MASK
    is_dl = dataloader_ops(c.ops)
    dl = real & is_dl[inst["op"].to_numpy(np.int64)] if len(inst) else real

    # queued: the launch call returned, the work has not started
    g_api = g["api"].to_numpy(np.int64)
    has = g_api >= 0
    q_s = np.zeros(len(g_api), np.int64)  # no API table: nothing is ever seen queued
    q_s[has] = a_e[g_api[has]]
    queued = has & (q_s < gs)
    host = real & (inst["parent"].to_numpy(np.int64) < 0)  # outermost ranges cover the rest
    # a call inside a real range adds nothing to the host's busy union (aggregate._host_busy)
    a_inst = api["inst"].to_numpy(np.int64)
    free = ~((a_inst >= 0) & real[np.maximum(a_inst, 0)]) if len(real) else np.ones(len(a_s), bool)

    cats = [
        (lane[is_kernel], gs[is_kernel], ge[is_kernel]),
        (lane[~is_kernel], gs[~is_kernel], ge[~is_kernel]),
        _per_lane(a_pid[is_sync], a_s[is_sync], a_e[is_sync], pairs),
        _per_lane(i_pid[dl], i_s[dl], i_e[dl], pairs),
        (lane[queued], q_s[queued], gs[queued]),
        _per_lane(
            np.concatenate([a_pid[free], i_pid[host]]),
            np.concatenate([a_s[free], i_s[host]]),
            np.concatenate([a_e[free], i_e[host]]),
            pairs,
        ),
    ]
    n_it = it.count
    ngroups = n_lanes * n_it
    cum = np.zeros((len(cats) + 1, ngroups), dtype=np.int64)
    acc: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    for k, (cl, cs, ce) in enumerate(cats):
        cl, cs, ce = intervals.merge(cl, cs, ce)  # fewer, longer pieces to split and re-merge
        row, win, ps, pe = intervals.clip_to_windows(cs, ce, it.bounds_ns)
        parts = [cl[row] * n_it + win, ps, pe]
        if acc is not None:
            parts = [np.concatenate([a, b]) for a, b in zip(acc, parts, strict=True)]
        acc = intervals.merge(*parts)
        gk, sk, ek = acc
        cum[k + 1] = np.bincount(gk, weights=(ek - sk).astype(np.float64), minlength=ngroups)
    wall = np.tile(it.durations_ns(), n_lanes).astype(np.int64)
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


__all__ = ["CAUSES", "CAUSE_LABELS", "SYNC_API", "idle_causes"]
