"""The cube's per-kernel parts summed window by window (issue 18: no per-GPU-row column
outlives its window).

:class:`KernelParts` is fed each window's :class:`~jlprof.engine.windowed.windowed.GpuRows` in order
and gives, after the last one, exactly what the whole-trace path builds from per-GPU-row
columns: the range-only ``kernel_iter`` (``aggregate._kernel_iter(c, gpu_iter, n_it,
only=(lo, hi))``) and ``Analysis.kernel_flags``.

What it holds between windows, and why that is exact:

* ``kernel_iter``: one row per distinct (long_name code, ``op_key``) met in lo..hi, with its
  count, sum/min/max of GPU time (end - start) and of API share (8 bytes its key, 4 or 8
  each of its 7 columns: 36 to 64 bytes a group). Each window's rows of lo..hi are reduced
  per group (a window partial) and merged into the table (sum of sums and counts, min of
  mins, max of maxes, summed in int64): associative and commutative, so the windows' order
  and cuts do not matter, and a row counts once, in the window that holds it, whichever
  iteration it was launched in. The partials wait unmerged until they hold more rows than
  the table (and at least :data:`_MERGE_ROWS`): each then costs O(log windows) merges, and
  what waits is bounded by the table plus one window's groups. A row's group is final when
  it is seen but for its op: ``op_key`` is final for ranges' rows and names the unassociated
  op of a GPU name for the others, whose op row is known only at the end
  (:meth:`WorkPass.op_of_keys`); the keys are mapped then and groups that map to one
  (kernel, op) are merged again. Nothing is carried in flight: a GPU row's figures are its
  own (no interval crosses a window), so none waits for a later window.
* ``kernel_flags``: per long_name code seen, uses_tc any, is_memory any, its smallest
  global GPU row so far and that row's short-name code (18 bytes a kernel name). The first
  row of a kernel over the whole trace is the least of each window's first rows, whatever
  order the windows' rows come in.

So it holds at most ~2 x 64 bytes per (kernel, op key) group met in lo..hi (+ up to 64k
waiting partial rows, 4 MB) and 18 per kernel name, whatever the trace's length; a window's
temporaries are a few of its own rows' columns. Dtypes: every column is narrowed at the end
from its final values (int32 when all fit, :func:`~jlprof.engine.read.narrow.narrow`), as the
whole-trace path narrows its merged columns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jlprof.engine.aggregate.aggregate import (
    _empty_kernel_iter,
    _no_stats,
    _ranged,
    _run_stats,
    kernel_group,
    merge_keyed,
    ranged_kernel_iter,
)
from jlprof.engine.windowed.windowed import GpuRows

# (long_name code, op_key) as one int64 while the op is not final: code * 2**32 + op_key,
# ascending in (kernel, op_key) order (op keys are row numbers, < 2**32)
_OP_BITS = 32
_MM = {"gpu", "api"}  # the columns with min/max, as _kernel_iter's
_COLS = ("gpu", "api")
# window partial rows held unmerged at least (a small table merges every few windows)
_MERGE_ROWS = 1 << 16


class KernelParts:
    """The range-only ``kernel_iter`` and the kernel flags, from the windows' GPU rows."""

    def __init__(self, only: tuple[int, int]) -> None:
        """``only`` = (lo, hi): the command's iterations (the windowed run is range-only)."""
        self.lo, self.hi = int(only[0]), int(only[1])
        self.n_rows = 0  # GPU rows seen (none at all: the reference's empty frame)
        # per (kernel, op_key) of lo..hi: sorted unique keys and their merged columns
        self._keys = np.zeros(0, np.int64)
        self._cols: dict[str, np.ndarray] = _no_stats(_COLS, _MM)[1]
        # windows' partials not merged in yet (:meth:`_merge`), and their rows
        self._pending: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []
        self._pending_rows = 0
        # per long_name code (grown to the largest code seen + 1)
        self._tc = np.zeros(0, bool)
        self._mem = np.zeros(0, bool)
        self._first_row = np.zeros(0, np.int64)  # smallest global row; max int64: none yet
        self._first_name = np.zeros(0, np.int64)  # that row's name code

    def add(self, rows: GpuRows) -> None:
        """Fold one window's GPU rows in (windows in order; none may come twice)."""
        n = len(rows.rows)
        if n == 0:
            return
        self.n_rows += n
        self._add_flags(rows)
        it = rows.launch_iter
        sel = np.flatnonzero((it >= self.lo) & (it <= self.hi))
        if len(sel) == 0:
            return
        op_key = rows.op_key[sel]
        if int(op_key.min()) < 0 or int(op_key.max()) >> _OP_BITS:
            raise ValueError("op keys are rows of an op table: 0 <= op_key < 2**32")
        key = (rows.long_name[sel].astype(np.int64) << _OP_BITS) | op_key
        del op_key
        order = np.argsort(key, kind="stable")
        key, idx = key[order], sel[order]
        del order, sel
        gpu = rows.end_ns[idx].astype(np.int64) - rows.start_ns[idx]
        share = rows.api_share_ns[idx]
        starts, out = _run_stats(key, (("gpu", gpu), ("api", share)), _MM)
        self._pending.append((key[starts], out))
        self._pending_rows += len(starts)
        if self._pending_rows > max(len(self._keys), _MERGE_ROWS):
            self._merge()

    def _merge(self) -> None:
        """Fold the pending window partials into the table (one sort): merging only once they
        outnumber its rows costs each partial row O(log) merges instead of one per window,
        and holds at most about twice the table."""
        if not self._pending:
            return
        kparts = [k for k, _ in self._pending]
        parts = [c for _, c in self._pending]
        if len(self._keys):
            kparts.insert(0, self._keys)
            parts.insert(0, self._cols)
        self._pending, self._pending_rows = [], 0
        self._keys = np.zeros(0, np.int64)
        self._cols = {}
        self._keys, self._cols = merge_keyed(kparts, parts)

    def _add_flags(self, rows: GpuRows) -> None:
        codes = rows.long_name.astype(np.int64, copy=False)
        ok = codes >= 0
        if not ok.all():  # no long name: no kernel to flag (Analysis.kernel_flags' ``ok``)
            codes, r = codes[ok], _Sub(rows, ok)
        else:
            r = _Sub(rows, None)
        if len(codes) == 0:
            return
        m = int(codes.max()) + 1
        if m > len(self._tc):
            self._grow(m)
        self._tc[codes[r.uses_tc]] = True
        self._mem[codes[r.is_memory]] = True
        first = np.full(m, np.iinfo(np.int64).max)
        np.minimum.at(first, codes, r.rows)  # the window's first row of each kernel
        at = r.rows == first[codes]  # those rows (global rows are unique)
        name = np.zeros(m, np.int64)
        name[codes[at]] = r.name[at]
        better = first < self._first_row[:m]
        self._first_row[:m][better] = first[better]
        self._first_name[:m][better] = name[better]

    def _grow(self, m: int) -> None:
        k = len(self._tc)
        self._tc = np.concatenate([self._tc, np.zeros(m - k, bool)])
        self._mem = np.concatenate([self._mem, np.zeros(m - k, bool)])
        none = np.full(m - k, np.iinfo(np.int64).max)
        self._first_row = np.concatenate([self._first_row, none])
        self._first_name = np.concatenate([self._first_name, np.zeros(m - k, np.int64)])

    def kernel_iter(self, op_of_key: np.ndarray, n_ops: int) -> pd.DataFrame:
        """``kernel_iter`` for lo..hi, as ``aggregate._kernel_iter(c, gpu_iter, n_it,
        only=(lo, hi))`` gives it. ``op_of_key``: each op key's row in the final op table
        (:meth:`WorkPass.op_of_keys`; -1: none); ``n_ops``: that table's length."""
        only = (self.lo, self.hi)
        if self.n_rows == 0:
            return _ranged(_empty_kernel_iter(), only)
        n_groups = n_ops + 1  # _kernel_iter's: the op's row + 1 (0: NONE)
        self._merge()
        if len(self._keys) == 0:
            keys, cols = _no_stats(_COLS, _MM)
            return ranged_kernel_iter(keys, cols, only, n_groups)
        kernel = self._keys >> _OP_BITS
        op = np.asarray(op_of_key, np.int64)[self._keys & ((1 << _OP_BITS) - 1)]
        key = kernel_group(kernel, op, n_groups)
        # op keys that share an op (or have none) merge again; copies: the held table stays
        cols = {n: v.copy() for n, v in self._cols.items()}
        keys, merged = merge_keyed([key], [cols])
        return ranged_kernel_iter(keys, merged, only, n_groups)

    def kernel_flags(self, name_categories: pd.Index, n_long_names: int) -> pd.DataFrame:
        """``Analysis.kernel_flags``: per long_name code 0..n_long_names - 1 uses_tc any,
        is_memory any and the short name (``name_categories``: ``Trace.gpu.name``'s
        categories) of its first GPU row in global row order; "" for names never seen."""
        n = int(n_long_names)
        if len(self._tc) > n:
            raise ValueError(f"a GPU row has long_name code {len(self._tc) - 1} >= {n}")
        k = len(self._tc)
        tc, mem = np.zeros(n, bool), np.zeros(n, bool)
        tc[:k], mem[:k] = self._tc, self._mem
        names = np.full(n, "", dtype=object)
        seen = np.flatnonzero(self._first_row < np.iinfo(np.int64).max)
        short = name_categories.to_numpy(object)
        names[seen] = short[self._first_name[seen]]
        return pd.DataFrame({"uses_tc": tc, "is_memory": mem, "short_name": names})


class _Sub:
    """The few flag columns of a window's rows, at the rows ``keep`` (None: all)."""

    def __init__(self, rows: GpuRows, keep: np.ndarray | None) -> None:
        def pick(v: np.ndarray) -> np.ndarray:
            return v if keep is None else v[keep]

        self.rows = pick(rows.rows)
        self.name = pick(rows.name)
        self.uses_tc = pick(rows.uses_tc).astype(bool, copy=False)
        self.is_memory = pick(rows.is_memory).astype(bool, copy=False)
