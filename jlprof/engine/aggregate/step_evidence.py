"""What the PyTorch expert checks read of the GPU rows and API calls, summed batch by batch.

The checks (``jlprof.reports.expert_pytorch``: host-bound gaps, launch-bound steps, slow
copies, copies in the step, device syncs) judge the GPU work and calls launched in the
iterations ``lo..hi``. :class:`StepEvidence` holds what they need as sums per iteration, per
op and per distinct duration, never a row per GPU activity: the whole-trace analysis adds its
frames as one batch, the windowed engine (docs/windowed-engine.md) one batch per window, and
both give the same figures. A row's iteration is its launch's (the cube's ``gpu_iter``; a
call's, its start's); a row's op is given as a *key*, mapped to the op table's row at
:meth:`StepEvidence.finish` (the windowed engine knows the unassociated ops only then).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from jlprof.engine.aggregate.iterations import Iterations

#: CUDA calls that make the host wait for the device (the checks' "synchronous" calls)
SYNC_APIS = re.compile(
    r"^(cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize|cudaMemcpy|"
    r"cudaMemcpy[23]D|cuCtxSynchronize|cuStreamSynchronize|cuEventSynchronize|cuMemcpyDtoH|"
    r"cuMemcpyHtoD)(_v\d+)?$"
)
DTOH, HTOD = "[CUDA memcpy DtoH]", "[CUDA memcpy HtoD]"
#: per op key, over the range's memcpy rows: (count, bytes, ns) of the slow ones (pageable
#: or launched by a synchronous call), and (count, bytes) device-to-host and host-to-device
COPY_SUMS = ("slow_n", "slow_bytes", "slow_ns", "dtoh_n", "dtoh_bytes", "htod_n", "htod_bytes")
_MIN, _MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


class Counts:
    """A multiset of integers as sorted distinct values and their counts, merged batch by
    batch: an exact median without keeping every value."""

    def __init__(self) -> None:
        self.values = np.zeros(0, np.int64)
        self.counts = np.zeros(0, np.int64)

    def add(self, values: np.ndarray, counts: np.ndarray | None = None) -> None:
        v, inv = np.unique(np.asarray(values, np.int64), return_inverse=True)
        c = np.bincount(inv, weights=counts, minlength=len(v)).astype(np.int64)
        if len(self.values):
            v, inv = np.unique(np.concatenate([self.values, v]), return_inverse=True)
            c = np.bincount(inv, weights=np.concatenate([self.counts, c]), minlength=len(v))
            c = c.astype(np.int64)
        self.values, self.counts = v, c

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    def total(self) -> int:
        return int((self.values * self.counts).sum())

    def median(self) -> float:
        """``np.median`` of the values (the mean of the two middle ones for an even count)."""
        n = self.n
        cum = np.cumsum(self.counts)
        at = np.searchsorted(cum, [(n - 1) // 2, n // 2], side="right")
        a, b = self.values[at]
        return (float(a) + float(b)) / 2


class StepEvidence:
    """Feed it batches of rows (:meth:`add`), then :meth:`finish`; then read its fields."""

    def __init__(self, it: Iterations, lo: int, hi: int) -> None:
        self.it, self.lo, self.hi = it, lo, hi
        n = hi - lo + 1
        self.n_gpu = 0  # GPU rows seen, in any iteration
        # host-bound gaps: each iteration's first GPU start and last GPU end
        self.first_ns = np.full(n, _MAX, np.int64)
        self.last_ns = np.full(n, _MIN, np.int64)
        # launch-bound steps: the kernels and the calls that launched them
        self.kernel_ns = Counts()
        self.launch_ns = Counts()
        self._kernel_keys: list[pd.Series] = []
        # copies: how many memcpy rows, their sums per op key, pageable and synchronous ones
        self.n_memcpy = self.pageable = self.synchronous = 0
        self._copies: list[pd.DataFrame] = []
        # device syncs: the synchronising calls
        self.sync_iter = np.zeros(n, bool)
        self.sync_calls = 0
        self.sync_names: set[str] = set()
        self._sync_inst: list[pd.Series] = []
        # after finish(): per op row
        self.kernel_ops: pd.Series | None = None
        self.copies: pd.DataFrame | None = None
        self.sync_ops: pd.Series | None = None

    def add(
        self,
        gpu: pd.DataFrame,
        gpu_iter: np.ndarray,
        gpu_key: np.ndarray,
        gpu_call: np.ndarray,
        api: pd.DataFrame,
        api_inst: np.ndarray,
    ) -> None:
        """One batch: ``gpu`` rows (``Trace.gpu``'s columns) with their launch iteration, op
        key and launching call (row of ``api``, < 0: none); every call that launched any of
        them is in ``api`` (``Trace.api``'s columns), with its instance (``api_inst``)."""
        self.n_gpu += len(gpu)
        lo, hi = self.lo, self.hi
        it = np.asarray(gpu_iter, np.int64)
        sel = (it >= lo) & (it <= hi)
        start = gpu["start_ns"].to_numpy(np.int64)
        end = gpu["end_ns"].to_numpy(np.int64)
        at = it[sel] - lo
        np.minimum.at(self.first_ns, at, start[sel])
        np.maximum.at(self.last_ns, at, end[sel])
        key = np.asarray(gpu_key, np.int64)
        call = np.asarray(gpu_call, np.int64)
        a_dur = (api["end_ns"] - api["start_ns"]).to_numpy(np.int64)
        kind = gpu["kind"]
        kern = sel & (kind == "kernel").to_numpy(bool)
        self.kernel_ns.add((end - start)[kern])
        self._kernel_keys.append(pd.Series(key[kern]).value_counts(sort=False))
        if len(api):  # each launching call once
            launched = np.zeros(len(api), bool)
            c = call[kern]
            launched[c[c >= 0]] = True
            self.launch_ns.add(a_dur[launched])
        is_sync = self._sync_names(api)
        copy = sel & (kind == "memcpy").to_numpy(bool)
        if copy.any():
            self._add_copies(gpu, copy, key, call, is_sync, start, end)
        a_it = self.it.of(api["start_ns"].to_numpy(np.int64))
        asel = is_sync & (a_it >= lo) & (a_it <= hi)
        if asel.any():
            self.sync_iter[a_it[asel] - lo] = True
            self.sync_calls += int(asel.sum())
            self.sync_names |= set(api["name"].astype(str).to_numpy(object)[asel])
            inst = np.asarray(api_inst, np.int64)[asel]
            self._sync_inst.append(pd.Series(inst).value_counts(sort=False))

    @staticmethod
    def _sync_names(api: pd.DataFrame) -> np.ndarray:
        """Per call: a synchronising CUDA call (by its name's category)."""
        if not len(api):
            return np.zeros(0, bool)
        names = api["name"]
        if not isinstance(names.dtype, pd.CategoricalDtype):
            names = names.astype(str).astype("category")
        ok = np.array([bool(SYNC_APIS.match(str(n))) for n in names.cat.categories], bool)
        codes = names.cat.codes.to_numpy()
        return np.append(ok, False)[np.where(codes >= 0, codes, len(ok))]

    def _add_copies(self, gpu, copy, key, call, is_sync, start, end) -> None:
        rows = np.flatnonzero(copy)
        self.n_memcpy += len(rows)
        if "pageable" in gpu:  # not in .jlprof files saved by jlprof 0.1.0
            pageable = gpu["pageable"].to_numpy(np.int64)[rows] == 1
        else:
            pageable = np.zeros(len(rows), bool)
        c = call[rows]
        sync = np.zeros(len(rows), bool)
        if len(is_sync):
            sync[c >= 0] = is_sync[c[c >= 0]]
        slow = pageable | sync
        self.pageable += int(pageable.sum())
        self.synchronous += int(sync.sum())
        name = gpu["name"].iloc[rows].astype(str).to_numpy(object)
        dtoh, htod = name == DTOH, name == HTOD
        nbytes = gpu["bytes"].to_numpy(np.int64)[rows]
        zero = np.zeros(len(rows), np.int64)
        frame = pd.DataFrame(
            {
                "key": key[rows],
                "slow_n": slow.astype(np.int64),
                "slow_bytes": np.where(slow, nbytes, zero),
                "slow_ns": np.where(slow, (end - start)[rows], zero),
                "dtoh_n": dtoh.astype(np.int64),
                "dtoh_bytes": np.where(dtoh, nbytes, zero),
                "htod_n": htod.astype(np.int64),
                "htod_bytes": np.where(htod, nbytes, zero),
            }
        )
        self._copies.append(frame.groupby("key").sum())

    def finish(
        self,
        op_of_key: np.ndarray | None,
        inst_op: np.ndarray,
        resolve: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> StepEvidence:
        """Once every batch is in: op keys mapped to op rows (``op_of_key[key]``; None: the
        keys are op rows already; -1 stays no op), and the calls' instances (``resolve``d
        first, where provisional) to their op (``inst_op``; -1 where none)."""

        def to_op(keys: np.ndarray) -> np.ndarray:
            keys = np.asarray(keys, np.int64)
            if op_of_key is None:
                return keys
            return np.where(keys >= 0, np.asarray(op_of_key, np.int64)[np.maximum(keys, 0)], -1)

        def by_op(parts: list, index_to_op: Callable[[np.ndarray], np.ndarray]):
            if not parts:
                return None
            s = pd.concat(parts)
            s.index = index_to_op(s.index.to_numpy(np.int64))
            return s.groupby(level=0).sum()

        kernels = by_op(self._kernel_keys, to_op)
        self.kernel_ops = kernels if kernels is not None else pd.Series(dtype=np.int64)
        copies = by_op(self._copies, to_op)
        self.copies = copies if copies is not None else pd.DataFrame(columns=list(COPY_SUMS))

        def inst_to_op(inst: np.ndarray) -> np.ndarray:
            inst = resolve(inst) if resolve is not None else inst
            return np.where(inst >= 0, np.asarray(inst_op, np.int64)[np.maximum(inst, 0)], -1)

        self.sync_ops = by_op(self._sync_inst, inst_to_op)
        self._kernel_keys, self._copies, self._sync_inst = [], [], []
        return self


__all__ = ["COPY_SUMS", "DTOH", "HTOD", "SYNC_APIS", "Counts", "StepEvidence"]
