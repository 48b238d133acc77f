"""Per-rank reduction: one rank's profile → a few small per-iteration arrays.

This is what a Dask worker runs on each rank's file (``jlprof.distributed``); only the
returned :class:`RankAggregates` (a few numbers per iteration) travels back to the driver,
never the trace. Iterations are the rank's own key-node intervals: ranks are aligned by
key-node instance (iteration k on every rank), never by absolute time, because each node
has its own clock.

Communication kernels are those whose name starts with ``nccl`` (NCCL's ``ncclKernel_*`` /
``ncclDevKernel_*``); every other kernel is compute. Memcpy/memset are neither.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from jlprof.engine.aggregate.intervals import union_length

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

COMM_PREFIX = "nccl"
# launchers' rank variables, first found wins: torchrun/PyTorch, Open MPI, MPICH/PMIx, Slurm
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
_RANK_ASSIGN = re.compile(r"^\s*(" + "|".join(RANK_VARS) + r")=(\d+)\s*$")


@dataclass
class RankAggregates:
    """One rank's figures per iteration (index = iteration number), in ns."""

    database: str
    rank: int  # the trace's own rank (trace_rank), else its position in the given order
    trace_rank: int | None  # the rank the capture environment carries, if any
    key_node: str | None
    iter_start: int  # the range the rank's reports aggregate (--iter_start/--iter_stop)
    iter_stop: int
    iteration_ns: np.ndarray  # duration of each key-node interval
    compute_ns: np.ndarray  # non-NCCL kernel time launched in the iteration (sum)
    comm_ns: np.ndarray  # NCCL kernel time (sum)
    exposed_comm_ns: np.ndarray  # NCCL time not overlapped by compute on the same GPU

    @property
    def iterations(self) -> int:
        return len(self.iteration_ns)


def trace_rank(meta: dict[str, str]) -> int | None:
    """The rank a trace carries in its capture environment (nsys export metadata): an entry
    named like a launcher's rank variable (``RANK``…, see ``RANK_VARS``) with a whole-number
    value, or an entry whose value is ``RANK=<n>``. None when the trace carries none."""
    found: dict[str, int] = {}
    for name, value in meta.items():
        v = str(value).strip()
        if name in RANK_VARS and v.isdigit():
            found.setdefault(name, int(v))
        m = _RANK_ASSIGN.match(v)
        if m:
            found.setdefault(m.group(1), int(m.group(2)))
    return next((found[k] for k in RANK_VARS if k in found), None)


def reduce_profile(prof: Analysis, database: str | Path, position: int = 0) -> RankAggregates:
    """Split this rank's kernel time by iteration into compute, communication and exposed
    communication (vectorised; kernels follow the API call that launched them, as every
    other report does)."""
    g = prof.correlated.gpu
    n_it = prof.iterations.count
    kern = (g["kind"] == "kernel").to_numpy()
    it = np.asarray(prof.cube.gpu_iter, np.int64)[kern]
    start = g["start_ns"].to_numpy(np.int64)[kern]
    end = np.maximum(g["end_ns"].to_numpy(np.int64)[kern], start)
    comm = g["name"].astype(str).str.lower().str.startswith(COMM_PREFIX).to_numpy(bool)[kern]
    dur = (end - start).astype(np.float64)
    compute_ns = np.bincount(it[~comm], weights=dur[~comm], minlength=n_it).astype(np.int64)
    comm_ns = np.bincount(it[comm], weights=dur[comm], minlength=n_it).astype(np.int64)
    # exposed = |comm ∪ compute| − |compute| per (GPU, iteration), summed over the rank's GPUs
    dev = np.unique(g["device_id"].to_numpy(np.int64)[kern], return_inverse=True)[1]
    group = dev.astype(np.int64) * n_it + it
    ngroups = (int(dev.max()) + 1 if len(dev) else 1) * n_it
    both = union_length(group, start, end, ngroups)
    compute_only = union_length(group[~comm], start[~comm], end[~comm], ngroups)
    exposed = (both - compute_only).reshape(-1, n_it).sum(axis=0)
    carried = trace_rank(prof.trace.meta)
    return RankAggregates(
        database=str(database),
        rank=position if carried is None else carried,
        trace_rank=carried,
        key_node=prof.key_node,
        iter_start=prof.iter_start,
        iter_stop=prof.iter_stop,
        iteration_ns=prof.iterations.durations_ns().astype(np.int64),
        compute_ns=compute_ns,
        comm_ns=comm_ns,
        exposed_comm_ns=exposed.astype(np.int64),
    )
