"""The work pass of the windowed engine: API calls and GPU work correlated window by window.

Issue 18 asks for 10M-kernel exports analysed in bounded memory (docs/windowed-engine.md,
"The plan"). The NVTX ranges are processed whole (the range pass); the API calls and GPU
work, the bulk of a trace, are read and correlated a window at a time. A window is a run of
API calls with every GPU row they launched (GPU work never starts before its launching call)
and the GPU rows no call launched, by their start. What the whole-trace :func:`correlate` and
:func:`~jlprof.engine.aggregate.aggregate.instance_metrics` compute per call, per GPU row and per op
instance is accumulated here exactly, whatever the windows (tests/engine/test_windowed.py):

- per call its instance (the innermost range, from the range pass's lookup, else a synthetic
  one); per GPU row its launching call, its instance and its share of the call's time;
- the synthetic instances, numbered as :func:`correlate` numbers them: the ranges, then every
  unassociated call, then every unassociated GPU row, each in global row order (a window's GPU
  rows come in global row order; windows may interleave GPU rows of the kernel, memcpy and
  memset tables, so the GPU ones are ranked by global row at the end);
- every instance's seven :class:`~jlprof.engine.aggregate.aggregate.InstanceMetrics` figures. Sums
  are added window by window (integers, exact). A range whose GPU work comes from several windows
  gets its GPU union (for ``idle_ns``) exactly too: the merged intervals of its GPU work that
  may still meet later work (those ending after the next window's earliest start) are carried
  to the next window, the others are final.

Synthetic GPU instances get their final numbers only once every window is in (they come after
all unassociated calls, in global GPU row order): until :meth:`WorkPass.finish`, results hold
them as *provisional* ids, ``-2 - k`` for the k-th unassociated GPU row met, which
:meth:`WorkResult.resolve` maps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from jlprof.engine.aggregate import intervals
from jlprof.engine.aggregate.aggregate import InstanceMetrics
from jlprof.engine.aggregate.iterations import Iterations
from jlprof.engine.correlate.correlate import (
    NONE,
    Correlated,
    launching_calls,
    pick,
    unassociated_ops,
)
from jlprof.engine.correlate.ranges import Ranges, append_ops, calls_in_ranges
from jlprof.engine.correlate.tensorcore import kernel_uses_tc
from jlprof.engine.read.narrow import fits_int32, index_dtype, narrow_joined, smallest
from jlprof.engine.read.trace import Trace


class CarryBroken(Exception):
    """A window's GPU work starts before an earlier window said later work would: the trace
    breaks the rule windows rely on (GPU work never starts before its launching call)."""


@dataclass
class Window:
    """One window's rows, with every column of ``Trace.api`` / ``Trace.gpu``."""

    api: pd.DataFrame
    gpu: pd.DataFrame
    api_index: np.ndarray  # global row (of the whole ``Trace.api``) of each call
    gpu_index: np.ndarray  # global row of each GPU row
    isolated: np.ndarray  # per GPU row: overlaps no other GPU work of the whole trace
    next_start_ns: int  # no GPU row of a later window starts before this time


@dataclass
class WindowResult:
    """Per row of one window: what :func:`correlate` adds to ``api`` and ``gpu``, with
    instance ids that may be provisional (:meth:`WorkResult.resolve`)."""

    api_inst: np.ndarray  # int64 per call
    gpu_api: np.ndarray  # int64 per GPU row: global row of its launching call, NONE if none
    gpu_inst: np.ndarray  # int64 per GPU row
    api_share_ns: np.ndarray  # int64 per GPU row
    gpu_call: np.ndarray  # int64 per GPU row: its launching call's row in the window, or NONE
    uses_tc: np.ndarray  # bool per GPU row
    gpu_op: np.ndarray | None = None  # per GPU row, row of :meth:`WorkPass.report_ops` (with
    gpu_iter: np.ndarray | None = None  # ``iterations``: its launch iteration)
    rows: GpuRows | None = None  # with ``iterations``: what the cube's windowed parts read


@dataclass
class GpuRows:
    """One window's GPU rows as the cube's windowed parts read them (issue 18: the cube's
    GPU figures summed window by window, so no per-GPU-row column outlives its window).

    Instance ids may be provisional (``<= -2``: an unassociated GPU row's instance, final
    only after the last window, :meth:`WorkResult.resolve`); ``op_key`` is final for the
    rows of ranges (the range's op row) and ``n_range_ops + name code`` for the others
    (their op is the unassociated op of their name, :meth:`WorkPass.op_of_keys`)."""

    rows: np.ndarray  # int64: global row (``Trace.gpu``'s), ascending
    start_ns: np.ndarray  # int64
    end_ns: np.ndarray  # int64
    device_id: np.ndarray  # int64
    name: np.ndarray  # int64 codes of ``Trace.gpu.name`` (the same categories every window)
    long_name: np.ndarray  # int64 codes of ``Trace.gpu.long_name``
    inst: np.ndarray  # int64: a range's row (0 .. n_ranges - 1) or a provisional id (<= -2)
    op_key: np.ndarray  # int64: see above
    api_share_ns: np.ndarray  # int64
    uses_tc: np.ndarray  # bool
    is_memory: np.ndarray  # bool
    isolated: np.ndarray  # bool: overlaps no other GPU work of the whole trace
    launch_iter: np.ndarray  # int64: the iteration of its launch (``Iterations.of``)
    horizon_ns: int  # no GPU row and no API call of a later window starts before it
    calls_start_ns: np.ndarray  # int64: this window's calls of synthetic instances (the
    calls_end_ns: np.ndarray  # host's busy time outside every range, ``_host_busy``)


@dataclass
class _Synthetic:
    """Columns of one kind of synthetic instance, appended window by window."""

    parts: dict[str, list[np.ndarray]] = field(default_factory=dict)
    count: int = 0

    def add(self, **cols: np.ndarray) -> None:
        for name, v in cols.items():
            self.parts.setdefault(name, []).append(np.asarray(v))
        self.count += len(next(iter(cols.values())))

    def column(self, name: str, dtype) -> np.ndarray:
        got = self.parts.get(name)
        return np.concatenate(got).astype(dtype, copy=False) if got else np.zeros(0, dtype)


@dataclass
class WorkResult:
    """The whole trace's instance figures after the last window."""

    n_ranges: int
    n_un_api: int
    metrics: InstanceMetrics  # ranges, then unassociated calls, then unassociated GPU rows
    start_ns: np.ndarray  # of the synthetic instances (calls, then GPU rows), as ``inst``
    end_ns: np.ndarray
    cpu_ns: np.ndarray
    global_tid: np.ndarray
    un_api_name: np.ndarray  # category code of each unassociated call's name (``api.name``)
    un_gpu_name: np.ndarray  # category code of each unassociated GPU row's name (``gpu.name``)
    un_gpu_rank: np.ndarray  # final place among the unassociated GPU rows of the k-th met

    def resolve(self, inst: np.ndarray) -> np.ndarray:
        """Final instance ids for ids a :class:`WindowResult` holds (provisional ones mapped)."""
        inst = np.asarray(inst, np.int64)
        prov = inst <= -2
        if not prov.any():
            return inst
        k = np.where(prov, -2 - inst, 0)
        return np.where(prov, self.n_ranges + self.n_un_api + self.un_gpu_rank[k], inst)


class WorkPass:
    """Feed it the windows in order (:meth:`add`), then :meth:`finish`."""

    def __init__(
        self,
        ranges: Ranges,
        iterations: Iterations | None = None,
    ) -> None:
        """``iterations``: also give each GPU row's op and launch iteration (the iteration
        report's, :attr:`WindowResult.gpu_op`) and what the cube's windowed parts read
        (:attr:`WindowResult.rows`)."""
        self.ranges = ranges
        n_ranges = len(ranges.start_ns)
        self.n_r = n_ranges
        self.range_op = smallest(ranges.op_narrow())  # read where it is indexed only
        self.it = iterations
        self.n_range_ops = len(ranges.ops)
        self._report_ops: tuple[pd.DataFrame, np.ndarray] | None = None
        n = n_ranges
        # per range, for the whole run: the sums, and the first start and last end of its
        # GPU work as offsets from its start (GPU work runs after the call that launched it,
        # inside the range: small offsets), start as int32 and widen only when one passes it
        # (_Sums); a window updates only the ranges it meets
        names = ("gpu_ns", "tc_gpu_ns", "kernel_ns", "n_gpu", "api_ns", "union", "first", "last")
        self.sums = _Sums(n, names)
        self.tail = (np.zeros(0, np.int64),) * 3  # merged GPU work that may meet later work
        self.un_api = _Synthetic()
        self.un_gpu = _Synthetic()
        self.calls = _Synthetic()  # calls of synthetic instances: the host's busy time
        self.api_names = pd.Index([], dtype=object)
        self.gpu_names = pd.Index([], dtype=object)
        self.promised = np.iinfo(np.int64).min  # no later GPU row starts before it
        self.t_first = np.iinfo(np.int64).max
        self.t_last = np.iinfo(np.int64).min
        # after finish(): the windows' provisional instance ids made final (WorkResult's)
        self.resolve: Callable[[np.ndarray], np.ndarray] | None = None

    def add(self, w: Window) -> WindowResult:
        """Correlate one window's calls and GPU rows and add their figures."""
        api, gpu = w.api, w.gpu
        if len(gpu) and int(gpu["start_ns"].min()) < self.promised:
            raise CarryBroken(
                "GPU work starts before the calls of an earlier window: the union of a range's "
                "GPU work cannot be carried between windows"
            )
        self.promised = max(self.promised, w.next_start_ns)
        a_tid = api["global_tid"].to_numpy(np.int64)
        a_start = api["start_ns"].to_numpy(np.int64)
        a_end = api["end_ns"].to_numpy(np.int64)
        g_start = gpu["start_ns"].to_numpy(np.int64)
        g_end = gpu["end_ns"].to_numpy(np.int64)
        a_inst = np.asarray(calls_in_ranges(self.ranges, a_tid, a_start, a_end), np.int64)
        g_api = launching_calls(api, gpu, a_tid).astype(np.int64)
        n_work = np.bincount(g_api[g_api >= 0], minlength=len(api)) if len(api) else np.zeros(0)
        a_dur = a_end - a_start
        share_ns = pick(a_dur / np.maximum(n_work, 1), g_api, 0.0).astype(np.int64)
        g_inst = pick(a_inst, g_api, NONE)
        un_api = np.flatnonzero((a_inst < 0) & (n_work == 0)) if len(api) else np.zeros(0, int)
        un_gpu = np.flatnonzero(g_inst < 0)
        a_inst[un_api] = self.n_r + self.un_api.count + np.arange(len(un_api))
        g_inst[un_gpu] = -2 - (self.un_gpu.count + np.arange(len(un_gpu)))
        launched_un = g_api[un_gpu]
        has = launched_un >= 0
        a_inst[launched_un[has][::-1]] = g_inst[un_gpu][has][::-1]  # first work's instance

        ug_api = g_api[un_gpu]
        ug_has = ug_api >= 0
        self.un_api.add(
            start=a_start[un_api],
            end=a_end[un_api],
            cpu=a_dur[un_api],
            tid=a_tid[un_api],
            name=api["name"].cat.codes.to_numpy()[un_api],
            api_ns=a_dur[un_api],
        )
        g_dur = g_end - g_start
        is_kernel = (gpu["kind"] == "kernel").to_numpy()
        tc = is_kernel & _uses_tc(gpu)
        self.un_gpu.add(
            start=pick(a_start, ug_api, g_start[un_gpu]),
            end=pick(a_end, ug_api, g_end[un_gpu]),
            cpu=np.where(ug_has, share_ns[un_gpu], 0),
            tid=pick(a_tid, ug_api, -1),
            name=gpu["name"].cat.codes.to_numpy()[un_gpu],
            row=np.asarray(w.gpu_index, np.int64)[un_gpu],
            gpu_ns=g_dur[un_gpu],
            tc_gpu_ns=np.where(tc[un_gpu], g_dur[un_gpu], 0),
            kernel_ns=np.where(is_kernel[un_gpu], g_dur[un_gpu], 0),
            api_ns=share_ns[un_gpu],
        )

        # ranges: sums of their calls and GPU work, and the GPU union for idle_ns
        n = self.n_r
        sums = self.sums
        in_r = (a_inst >= 0) & (a_inst < n)
        sums.add("api_ns", *_per_group(a_inst[in_r], a_dur[in_r]))
        gr = (g_inst >= 0) & (g_inst < n)
        gi = g_inst[gr]
        gs, ge, dur = g_start[gr], g_end[gr], g_dur[gr]
        u, inv = np.unique(gi, return_inverse=True)  # the ranges this window's work is of
        seen = sums.get("n_gpu", u) > 0
        sums.add("gpu_ns", u, np.bincount(inv, weights=dur))
        sums.add("tc_gpu_ns", u, np.bincount(inv, weights=np.where(tc[gr], dur, 0)))
        sums.add("kernel_ns", u, np.bincount(inv, weights=np.where(is_kernel[gr], dur, 0)))
        sums.add("n_gpu", u, np.bincount(inv))
        lo = np.full(len(u), np.iinfo(np.int64).max)
        hi = np.full(len(u), np.iinfo(np.int64).min)
        np.minimum.at(lo, inv, gs)
        np.maximum.at(hi, inv, ge)
        base = self.ranges.start_ns[u]
        lo -= base
        hi -= base
        sums.put("first", u, np.where(seen, np.minimum(sums.get("first", u), lo), lo))
        sums.put("last", u, np.where(seen, np.maximum(sums.get("last", u), hi), hi))
        del u, inv, seen, lo, hi, base
        alone = np.asarray(w.isolated, bool)[gr]
        sums.add("union", *_per_group(gi[alone], np.maximum(ge[alone], gs[alone]) - gs[alone]))
        self._add_union(gi[~alone], gs[~alone], ge[~alone], w.next_start_ns)

        # each GPU row's launch: its call's start, its own without one; and its iteration
        launch = np.where(g_api >= 0, a_start[np.maximum(g_api, 0)], g_start)
        launch_iter = None if self.it is None else self.it.of(launch)
        syn = a_inst >= self.n_r
        syn |= a_inst <= -2
        self.calls.add(start=a_start[syn], end=a_end[syn], inst=a_inst[syn])
        self.api_names = api["name"].cat.categories  # the same in every window
        self.gpu_names = gpu["name"].cat.categories
        for x in (a_start, a_end, g_start, g_end):
            if len(x):
                self.t_first = min(self.t_first, int(x.min()))
                self.t_last = max(self.t_last, int(x.max()))
        gpu_api = np.where(
            g_api >= 0, np.asarray(w.api_index, np.int64)[np.maximum(g_api, 0)], NONE
        )
        res = WindowResult(
            api_inst=a_inst,
            gpu_api=gpu_api,
            gpu_inst=g_inst,
            api_share_ns=share_ns,
            gpu_call=g_api,
            uses_tc=tc,
        )
        if launch_iter is not None:
            res.gpu_iter = launch_iter
            op_key = self._op_key(gpu, g_inst)
            res.rows = GpuRows(
                rows=np.asarray(w.gpu_index, np.int64),
                start_ns=g_start,
                end_ns=g_end,
                device_id=gpu["device_id"].to_numpy(np.int64),
                name=gpu["name"].cat.codes.to_numpy().astype(np.int64),
                long_name=gpu["long_name"].cat.codes.to_numpy().astype(np.int64),
                inst=g_inst,
                op_key=op_key,
                api_share_ns=share_ns,
                uses_tc=tc,
                is_memory=~is_kernel,
                isolated=np.asarray(w.isolated, bool),
                launch_iter=np.asarray(launch_iter, np.int64),
                horizon_ns=int(w.next_start_ns),
                calls_start_ns=a_start[syn],
                calls_end_ns=a_end[syn],
            )
            un = op_key >= self.n_range_ops
            res.gpu_op = op_key
            if un.any():
                name_row = self._ops_of_names(gpu["name"].cat.categories)[1]
                res.gpu_op = np.where(
                    un, name_row[np.where(un, op_key - self.n_range_ops, 0)], op_key
                )
        return res

    def _op_key(self, gpu: pd.DataFrame, g_inst: np.ndarray) -> np.ndarray:
        """Per GPU row: its range's op, or for unassociated work ``n_range_ops + name code``
        (its op is known by its name; :meth:`_ops_of_names` gives its row)."""
        in_r = g_inst >= 0  # a range; else a provisional unassociated GPU instance
        names = gpu["name"].cat.codes.to_numpy().astype(np.int64)
        if self.n_r == 0:
            return self.n_range_ops + names
        return np.where(in_r, self.range_op[np.where(in_r, g_inst, 0)], self.n_range_ops + names)

    def _ops_of_names(self, gpu_names: pd.Index) -> tuple[pd.DataFrame, np.ndarray]:
        """The ranges' ops with the unassociated op of every GPU name appended as the op
        table appends them (``append_ops``), and each name's row there (cached: the names are
        the same in every window)."""
        if self._report_ops is None:
            names = np.asarray(gpu_names.astype(str), dtype=object)
            self._report_ops = append_ops(self.ranges.ops, unassociated_ops(names))
        return self._report_ops

    def op_of_keys(self, ops: pd.DataFrame, gpu_names: pd.Index) -> np.ndarray:
        """Row in the final op table ``ops`` (the assembly's) of every ``op_key``
        (:class:`GpuRows`): the ranges' ops keep their rows; ``n_range_ops + code`` is the
        unassociated op of GPU name ``code`` (-1 where ``ops`` has no such op: no GPU row of
        that name was unassociated)."""
        from jlprof.engine.correlate.ranges import OP_KEY

        names = np.asarray(gpu_names.astype(str), dtype=object)
        un = unassociated_ops(names)
        at = pd.MultiIndex.from_frame(ops[OP_KEY]).get_indexer(pd.MultiIndex.from_frame(un[OP_KEY]))
        return np.concatenate([np.arange(self.n_range_ops, dtype=np.int64), at.astype(np.int64)])

    def report_ops(self, gpu_names: pd.Index) -> pd.DataFrame:
        """The ops that :attr:`WindowResult.gpu_op` rows index (the iteration report's op
        columns): the ranges' ops, then the unassociated op of each GPU name."""
        return self._ops_of_names(gpu_names)[0]

    def _add_union(self, gi: np.ndarray, gs: np.ndarray, ge: np.ndarray, cut: int) -> None:
        """Add the union of the ranges' overlapping GPU work, carrying the merged pieces that
        end after ``cut`` (later work starts at or after it, so the others are final)."""
        tg, ts, te = self.tail
        if len(gi) == 0 and len(tg) == 0:
            return
        mg, ms, me = intervals.merge(
            np.concatenate([tg, gi]), np.concatenate([ts, gs]), np.concatenate([te, ge])
        )
        self.sums.add("union", *_per_group(np.concatenate([mg, tg]),
                                           np.concatenate([me - ms, ts - te])))  # fmt: skip
        keep = me > cut
        self.tail = (mg[keep], ms[keep], me[keep])

    def release(self) -> None:
        """Let the running sums and the range lookups go (after :meth:`finish`)."""
        self.sums = _Sums(0, ())
        self.range_op = None  # type: ignore[assignment]
        self.un_api = self.un_gpu = _Synthetic()
        rl = self.ranges.lanes  # calls_in_ranges is done with: only the parents are read on
        rl.nest_rows = rl.n_lane = rl.n_start = rl.n_end = rl.n_order = None  # type: ignore
        rl.sorted_keys = None

    def finish(self) -> WorkResult:
        """The instance figures, once every window has been added."""
        ua, ug = self.un_api, self.un_gpu
        order = np.argsort(ug.column("row", np.int64), kind="stable")  # global GPU row order
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        for name, parts in ug.parts.items():
            ug.parts[name] = [np.concatenate(parts)[order]]
        r = self.sums.cols
        zeros_a = np.zeros(ua.count, np.int64)
        # one figure at a time, each narrowed as it is joined: at most one range-long int64
        span = r.pop("last").astype(np.int64)
        span -= r.pop("first")
        span[r["n_gpu"] <= 0] = 0
        span -= r["union"]
        np.maximum(span, 0, out=span)
        idle_ns = narrow_joined(span, zeros_a, np.zeros(ug.count, np.int64))
        del span
        rng = self.ranges
        over = [rng.end_ns - rng.start_ns, ua.column("cpu", np.int64), ug.column("cpu", np.int64)]
        api = [r.pop("api_ns"), ua.column("api_ns", np.int64), ug.column("api_ns", np.int64)]
        for o, a in zip(over, api, strict=True):
            o -= a
            np.maximum(o, 0, out=o)
        overhead_ns = narrow_joined(*over)
        del over
        api_ns = narrow_joined(*api)
        del api

        def per_inst(name: str, un_gpu: np.ndarray) -> np.ndarray:
            return narrow_joined(r.pop(name), zeros_a, un_gpu)

        metrics = InstanceMetrics(
            gpu_ns=per_inst("gpu_ns", ug.column("gpu_ns", np.int64)),
            api_ns=api_ns,
            overhead_ns=overhead_ns,
            idle_ns=idle_ns,
            tc_gpu_ns=per_inst("tc_gpu_ns", ug.column("tc_gpu_ns", np.int64)),
            kernel_ns=per_inst("kernel_ns", ug.column("kernel_ns", np.int64)),
            n_gpu=per_inst("n_gpu", np.ones(ug.count, np.int64)),
        )
        result = WorkResult(
            n_ranges=self.n_r,
            n_un_api=ua.count,
            metrics=metrics,
            start_ns=np.concatenate([ua.column("start", np.int64), ug.column("start", np.int64)]),
            end_ns=np.concatenate([ua.column("end", np.int64), ug.column("end", np.int64)]),
            cpu_ns=np.concatenate([ua.column("cpu", np.int64), ug.column("cpu", np.int64)]),
            global_tid=np.concatenate([ua.column("tid", np.int64), ug.column("tid", np.int64)]),
            un_api_name=ua.column("name", np.int64),
            un_gpu_name=ug.column("name", np.int64),
            un_gpu_rank=rank,
        )
        self.resolve = result.resolve
        return result


def _per_group(group: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The groups met and the sums of ``values`` over each (float64 bincount, exact below
    2**53, as instance_metrics): a window's few groups, not one slot per range."""
    u, inv = np.unique(group, return_inverse=True)
    return u, np.bincount(inv, weights=values, minlength=len(u))


class _Sums:
    """Integer running figures per range (sums, extents), each held as int32 until one of
    its values passes it (then int64).

    At 7.5M ranges each such array is 30 MB instead of 60, for the whole windowed run, and
    a window updates only the ranges it meets (no range-long temporaries per window)."""

    def __init__(self, n: int, names: tuple[str, ...]) -> None:
        self.cols = {name: np.zeros(n, np.int32) for name in names}

    def get(self, name: str, at: np.ndarray) -> np.ndarray:
        return self.cols[name][at]

    def put(self, name: str, at: np.ndarray, values: np.ndarray) -> None:
        """Set ``values`` (int64) at the unique rows ``at``, widening the column first when
        one of them does not fit int32."""
        if len(at) == 0:
            return
        col = self.cols[name]
        if col.dtype != np.int64 and not fits_int32(values):
            col = self.cols[name] = col.astype(np.int64)
        col[at] = values

    def add(self, name: str, at: np.ndarray, sums: np.ndarray) -> None:
        """Add ``sums`` (integers, maybe as float64) at the unique rows ``at``."""
        if len(at):
            self.put(name, at, self.cols[name][at] + np.asarray(sums).astype(np.int64))


def _uses_tc(gpu: pd.DataFrame) -> np.ndarray:
    return kernel_uses_tc(gpu["long_name"]) if len(gpu) else np.zeros(0, bool)


def assemble(
    trace: Trace,
    nv: pd.DataFrame | None,
    wp: WorkPass,
    event_type: np.ndarray | None = None,
    gpu_template: pd.DataFrame | None = None,
) -> tuple[Correlated, InstanceMetrics]:
    """The :class:`Correlated` the cube and the reports read, from the range pass (``nv``:
    the ranges it read, ``wp.ranges``; or None and their ``event_type``: then the result has
    no NVTX frame) and the windows: every op and path, the instances, and the calls of the
    synthetic instances (the host's busy time). Its GPU frame has no rows: the windows gave
    their GPU figures to the cube's parts (:mod:`jlprof.engine.windowed.cube_parts`); it keeps
    ``Trace.gpu``'s columns and categories (``gpu_template``, default ``trace.gpu``'s). The
    trace's own API and GPU frames are not needed: ``trace`` gives the rest (osrt, GPUs,
    meta). ``wp`` is spent: its running sums go as soon as the figures are made."""
    from jlprof.engine.correlate.correlate import op_table, path_table

    ranges = wp.ranges
    range_op = wp.range_op  # each range's op, made once (the ranges' labels may be gone)
    res = wp.finish()
    wp.release()
    n_r = wp.n_r
    if event_type is None:
        assert nv is not None
        event_type = nv["event_type"].to_numpy()
    un_names = np.concatenate(
        [
            np.asarray(wp.api_names, object)[res.un_api_name],
            np.asarray(wp.gpu_names, object)[res.un_gpu_name],
        ]
    ).astype(str)
    ops, inst_op = op_table(ranges, un_names, range_op)
    del range_op
    n_inst = n_r + len(un_names)
    idx = index_dtype(n_inst)
    parent = np.full(n_inst, NONE, dtype=idx)
    parent[:n_r] = ranges.lanes.parent
    ranges.lanes.parent = None  # type: ignore[assignment]
    op_abs = np.full(len(ops), "", dtype=object)
    op_abs[: len(ranges.op_abs)] = ranges.op_abs
    path, paths = path_table(inst_op, ops["op_name"].to_numpy(object), op_abs, parent)
    times = [wp.t_first, wp.t_last]
    for x in (ranges.start_ns, ranges.end_ns, trace.osrt["start_ns"].to_numpy(),
              trace.osrt["end_ns"].to_numpy()):  # fmt: skip
        if len(x):
            times += [int(x.min()), int(x.max())]
    synthetic = np.zeros(n_inst, dtype=bool)
    synthetic[n_r:] = True
    # the instance columns one at a time, each range array let go once copied (the run's
    # ranges are spent): the assembly's peak holds the instances, not them and the ranges
    cols: dict[str, np.ndarray] = {
        "cpu_ns": narrow_joined(ranges.end_ns - ranges.start_ns, res.cpu_ns)
    }
    for name, part in (("start_ns", res.start_ns), ("end_ns", res.end_ns),
                       ("global_tid", res.global_tid)):  # fmt: skip
        cols[name] = np.concatenate([getattr(ranges, name), part])
        setattr(ranges, name, None)
    cols.update(op=inst_op, parent=parent, path=path, synthetic=synthetic)
    del inst_op, parent, path
    cols["event_type"] = narrow_joined(np.asarray(event_type), np.zeros(n_inst - n_r, np.int8))
    del event_type
    instance_no = np.asarray(ranges.instance_no)
    ranges.text_code = ranges.top = ranges.label = None  # type: ignore[assignment]
    ranges.instance_no = None  # type: ignore[assignment]
    cols["instance_no"] = narrow_joined(instance_no, np.full(n_inst - n_r, -1, np.int8))
    del instance_no
    order = ["start_ns", "end_ns", "cpu_ns", "global_tid", "op", "parent", "path", "synthetic",
             "event_type", "instance_no"]  # fmt: skip
    inst = pd.DataFrame({k: cols.pop(k) for k in order}, copy=False)
    calls = pd.DataFrame(
        {
            "start_ns": wp.calls.column("start", np.int64),
            "end_ns": wp.calls.column("end", np.int64),
            "inst": res.resolve(wp.calls.column("inst", np.int64)).astype(idx),
        }
    )
    gpu = (trace.gpu if gpu_template is None else gpu_template).iloc[:0].copy()
    real = [t for t in times if abs(t) < np.iinfo(np.int64).max]
    rl = ranges.lanes
    c = Correlated(
        trace=trace,
        inst=inst,
        ops=ops,
        paths=paths,
        api=calls,
        gpu=gpu,
        t_first_ns=min(real) if real else 0,
        t_last_ns=max(real) if real else 0,
        nvtx=nv,
        range_lane=rl.lane,
        lane_tid=np.asarray(rl.lane_tid, np.int64),
        lane_dom=np.asarray(rl.lane_dom, np.int64),
        markers=ranges.markers,
    )
    return c, res.metrics
