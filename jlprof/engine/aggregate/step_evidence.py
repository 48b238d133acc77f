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
#: GPU rows read at a time from one batch
CHUNK = 1 << 20


class Counts:
    """A multiset of integers as sorted distinct values and their counts, merged batch by
    batch: an exact median without keeping every value."""

    def __init__(self) -> None:
        self.values = np.zeros(0, np.int64)
        self.counts = np.zeros(0, np.int64)

    def add(self, values: np.ndarray) -> None:
        v, c = np.unique(np.asarray(values, np.int64), return_counts=True)
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
        them is in ``api`` (``Trace.api``'s columns), with its instance (``api_inst``). The
        GPU rows are read :data:`CHUNK` at a time (a whole trace's batch: no 10M-row
        temporaries)."""
        self.n_gpu += len(gpu)
        is_sync = self._sync_names(api)
        launched = np.zeros(len(api), bool)  # each launching call once
        kind = gpu["kind"]
        if not isinstance(kind.dtype, pd.CategoricalDtype):
            kind = kind.astype("category")
        codes = kind.cat.codes.to_numpy() if len(gpu) else np.zeros(0, np.int8)
        cats = list(kind.cat.categories) if len(gpu) else []
        kernel = cats.index("kernel") if "kernel" in cats else -2
        memcpy = cats.index("memcpy") if "memcpy" in cats else -2
        start_all = gpu["start_ns"].to_numpy()
        end_all = gpu["end_ns"].to_numpy()
        for a in range(0, len(gpu), CHUNK):
            part = slice(a, a + CHUNK)
            it = np.asarray(gpu_iter[part], np.int64)
            sel = (it >= self.lo) & (it <= self.hi)
            start = np.asarray(start_all[part], np.int64)
            end = np.asarray(end_all[part], np.int64)
            at = it[sel] - self.lo
            np.minimum.at(self.first_ns, at, start[sel])
            np.maximum.at(self.last_ns, at, end[sel])
            key = np.asarray(gpu_key[part], np.int64)
            call = np.asarray(gpu_call[part], np.int64)
            kern = sel & (codes[part] == kernel)
            self.kernel_ns.add((end - start)[kern])
            self._kernel_keys.append(pd.Series(key[kern]).value_counts(sort=False))
            c = call[kern]
            launched[c[c >= 0]] = True
            copy = sel & (codes[part] == memcpy)
            if copy.any():
                rows = np.flatnonzero(copy)
                self._add_copies(gpu, rows + a, key[rows], call[rows], is_sync,
                                 (end - start)[rows])  # fmt: skip
        a_start = api["start_ns"].to_numpy()
        if len(api):
            called = np.flatnonzero(launched)
            self.launch_ns.add(api["end_ns"].to_numpy()[called].astype(np.int64) - a_start[called])
        for a in range(0, len(api), CHUNK):
            part = slice(a, a + CHUNK)
            a_it = self.it.of(a_start[part])
            asel = np.flatnonzero(is_sync[part] & (a_it >= self.lo) & (a_it <= self.hi))
            if len(asel):
                self.sync_iter[a_it[asel] - self.lo] = True
                self.sync_calls += len(asel)
                self.sync_names |= set(api["name"].iloc[asel + a].astype(str))
                inst = np.asarray(api_inst[part], np.int64)[asel]
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

    def _add_copies(self, gpu, rows, key, call, is_sync, dur) -> None:
        """The range's memcpy ``rows`` of ``gpu``, with their op keys, launching calls and
        durations."""
        self.n_memcpy += len(rows)
        if "pageable" in gpu:  # not in .jlprof files saved by jlprof 0.1.0
            pageable = gpu["pageable"].iloc[rows].to_numpy(np.int64) == 1
        else:
            pageable = np.zeros(len(rows), bool)
        sync = np.zeros(len(rows), bool)
        if len(is_sync):
            sync[call >= 0] = is_sync[call[call >= 0]]
        slow = pageable | sync
        self.pageable += int(pageable.sum())
        self.synchronous += int(sync.sum())
        name = gpu["name"].iloc[rows].astype(str).to_numpy(object)
        dtoh, htod = name == DTOH, name == HTOD
        nbytes = gpu["bytes"].iloc[rows].to_numpy(np.int64)
        zero = np.zeros(len(rows), np.int64)
        frame = pd.DataFrame(
            {
                "key": key,
                "slow_n": slow.astype(np.int64),
                "slow_bytes": np.where(slow, nbytes, zero),
                "slow_ns": np.where(slow, dur, zero),
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
            return np.where(keys >= 0, np.asarray(op_of_key)[np.maximum(keys, 0)], -1)

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
            return np.where(inst >= 0, np.asarray(inst_op)[np.maximum(inst, 0)], -1)

        self.sync_ops = by_op(self._sync_inst, inst_to_op)
        self._kernel_keys, self._copies, self._sync_inst = [], [], []
        return self


__all__ = ["COPY_SUMS", "DTOH", "HTOD", "SYNC_APIS", "Counts", "StepEvidence"]
