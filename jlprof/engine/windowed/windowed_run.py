"""One export analysed by windows: the windowed engine's passes in order (issue 18).

docs/windowed-engine.md, "The plan": everything but the API calls and GPU work is read
whole (:func:`~jlprof.engine.read.read.read_trace` with ``work=False``: NVTX, marks, OS runtime,
GPUs, metadata); the range pass (:mod:`jlprof.engine.correlate.ranges`) and the key node's
iterations come from the NVTX ranges alone; the launch plan (:mod:`jlprof.engine.windowed.windows`)
cuts the API calls into windows of whole iterations, each with the GPU work its calls launched; the
work pass (:mod:`jlprof.engine.windowed.windowed`) correlates them window by window, and
:meth:`finish` assembles the :class:`~jlprof.engine.correlate.correlate.Correlated` the cube and the
reports read. Per window the caller gets the window's rows and their correlation (:meth:`windows`),
to write what needs every row (the iteration report) without ever holding every row.

Whatever this path cannot give exactly raises :class:`Unsuitable` before any window is read;
the caller then analyses the whole trace as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from jlprof.engine.aggregate.aggregate import InstanceMetrics
from jlprof.engine.aggregate.iterations import Iterations, find_iterations
from jlprof.engine.analysis import effective_mode, resolve_key_node
from jlprof.engine.correlate.correlate import Correlated, path_table
from jlprof.engine.correlate.ranges import Ranges, in_domains, range_pass
from jlprof.engine.memory import release_reader_memory
from jlprof.engine.read.narrow import index_dtype, smallest
from jlprof.engine.read.read import read_trace
from jlprof.engine.read.trace import Trace
from jlprof.engine.windowed.cube_parts import CubeParts, open_ended
from jlprof.engine.windowed.idle_parts import IdleParts
from jlprof.engine.windowed.windowed import Window, WindowResult, WorkPass, assemble
from jlprof.errors import AnalysisError

#: API calls a window holds at most (more when one iteration alone has more): ~50 MB of
#: window frames and ~0.15 GB of correlation temporaries at 512k
WINDOW_CALLS = 1 << 18
BIG = np.iinfo(np.int64).max
#: free C heap the windows keep between them: a window frees and then allocates about as
#: much as the last (~0.15 GB at 256k calls), which as fresh pages faulted in again cost
#: ~1M page faults and ~3 s of system time at 10M kernels (docs/windowed-engine.md, "Less
#: CPU for the same work")
WINDOW_SLACK = 256 << 20


class Unsuitable(Exception):
    """The windowed path cannot analyse this export exactly; analyse the whole trace."""


class WindowedRun:
    """The passes of one windowed analysis: construct (reads all but the work, range pass,
    iterations, launch plan), iterate :meth:`windows`, then :meth:`finish`."""

    def __init__(
        self,
        path: str | Path,
        *,
        key_node: str | None = None,
        domains: list[str] | None = None,
        mode: str | None = None,
        calls_per_window: int = WINDOW_CALLS,
        use_connectorx: bool | None = None,
        progress: Callable[[str], None] | None = None,
        on_read: Callable[[Trace], None] | None = None,
        device_pairs: bool = False,
    ) -> None:
        """``on_read`` is given the trace's small frames as soon as they are read (DLProf's
        database starts writing them then, :class:`WindowsDldb`): the run lets its NVTX frame
        go once its range pass is done. ``device_pairs``: the plan gathers which processes
        ran work on which GPUs (:meth:`idle_parts` needs them)."""
        from jlprof.engine.read.nvprof import is_nvprof
        from jlprof.engine.windowed.windows import Misplaced, plan_windows

        say = progress or (lambda _m: None)
        self.path = Path(path)
        if is_nvprof(self.path):
            raise Unsuitable("an nvprof database is read whole (jlprof.engine.read.nvprof)")
        self.small = read_trace(self.path, use_connectorx=use_connectorx, work=False)
        if on_read is not None:
            on_read(self.small)
        nv = in_domains(self.small.nvtx, domains)
        say("nesting NVTX ranges")
        self.ranges = range_pass(nv, mode)
        # the profile's mode (the iteration report written by windows shows its columns)
        self.mode = effective_mode(mode, self.ranges.markers)
        # what the windows and the assembly still read of the NVTX frame; the frame itself
        # goes now (~0.7 GB at a 10M-kernel PyTorch run, every distinct text among it) but for
        # its columns and kinds (the ranges' times are the range pass's)
        self.event_type = smallest(nv["event_type"].to_numpy())  # the instances' (finish)
        self._n_ranges = len(self.small.nvtx)
        del nv
        self.small.nvtx = _without_categories(self.small.nvtx)
        say("finding iterations")
        c_r = ranges_correlated(self.small, self.ranges)
        try:
            self.key_node = resolve_key_node(c_r, key_node)
        except AnalysisError:
            raise Unsuitable("the key node is not a range: the whole path explains") from None
        self.iterations: Iterations = find_iterations(c_r, self.key_node)
        # the ranges' final path codes and the path table (group nodes): what the cube's
        # group-node parts need of the ranges' hierarchy (start_parts)
        self._range_path, self._range_paths = c_r.inst["path"].to_numpy().copy(), c_r.paths
        del c_r
        say("planning windows of API calls")
        try:
            self.plan = plan_windows(
                self.path,
                calls_per_window,
                cuts_ns=self.iterations.bounds_ns[1:-1],
                use_connectorx=use_connectorx,
                device_pairs=device_pairs,
            )
        except Misplaced as exc:
            raise Unsuitable(str(exc)) from None
        self.work = WorkPass(self.ranges, self.iterations)
        self.parts: CubeParts | None = None  # start_parts: before the windows
        self.small.warnings = self._warnings()
        self._odd_tids = self._trim()

    def _trim(self) -> tuple[np.ndarray, np.ndarray]:
        """Let go what the windows and the assembly do not read of the range pass and the
        plan (~160 MB at 7.5M ranges and 10M GPU rows, held through every window): each
        range's label (the work pass holds its op), its emit_nvtx top when no op call nests
        in another (then every call's range is its own top), its thread (its lane's, but for
        the start/end ranges ended elsewhere: returned, to be put back by :meth:`finish`),
        and each GPU row's launch window (the windows read by the plan's order)."""
        r = self.ranges
        r.label = None  # type: ignore[assignment]
        r.text_code = smallest(r.text_code)  # read once more, by the assembly
        top = r.top
        if not ((top >= 0) & (top != np.arange(len(top), dtype=top.dtype))).any():
            r.top = top[:0].copy()  # calls_in_ranges: no top to move a call to
        odd = np.flatnonzero(r.lanes.lane < 0)
        kept = (odd, r.global_tid[odd])
        r.global_tid = None  # type: ignore[assignment]
        self.plan.window = None
        return kept

    def _range_tids(self, ranges: Ranges) -> np.ndarray:
        """Each range's thread, as the range pass had it: its lane's, and the few kept by
        :meth:`_trim`."""
        rl = ranges.lanes
        lane_tid = np.append(np.asarray(rl.lane_tid, np.int64), 0)  # NONE: the last, put back
        tid = lane_tid[rl.lane]
        odd, odd_tid = self._odd_tids
        tid[odd] = odd_tid
        return tid

    def start_parts(self, lo: int, hi: int) -> CubeParts:
        """The cube's GPU figures for iterations ``lo..hi``, to be summed as the windows come
        (before :meth:`windows`); :meth:`finish`'s profile reads them instead of GPU rows.
        Raises :class:`Unsuitable` where they could not be exact."""
        from jlprof.engine.windowed.group_parts import GroupPartsInexact

        try:
            self.parts = CubeParts(
                self.iterations,
                (lo, hi),
                ranges=self.ranges,
                range_op=self.work.range_op,
                range_path=self._range_path,
                paths=self._range_paths,
                small=self.small,
                n_gpu=self.plan.n_gpu,
                gpu_names=self.plan.gpu_template["name"].cat.categories,
            )
        except GroupPartsInexact as exc:
            raise Unsuitable(str(exc)) from None
        self._range_path = self._range_paths = None  # type: ignore[assignment]
        return self.parts

    def idle_parts(self) -> IdleParts:
        """The idle_causes report's figures, to be fed each window and its result (before
        :meth:`finish`; the run must be planned with ``device_pairs``)."""
        pairs = self.plan.device_pairs
        if pairs is None:
            raise ValueError("idle_parts needs a run planned with device_pairs=True")
        r = self.ranges
        return IdleParts(
            open_ended(self.iterations),
            self.small.gpus,
            pairs,
            (r.start_ns, r.end_ns, self._range_tids(r), r.lanes.parent, self.work.range_op),
            r.ops,
            self.plan.api_template["name"].cat.categories,
        )

    @property
    def n_windows(self) -> int:
        return self.plan.n_windows

    def windows(self) -> Iterator[tuple[Window, WindowResult]]:
        """Each window, read and correlated, in order; its rows are let go when the caller
        moves on."""
        from jlprof.engine.windowed.windows import WindowReader

        plan = self.plan
        # no GPU row of a later window starts before its earliest call (GPU work never starts
        # before its launch; the work pass checks it as the windows come)
        later = np.append(np.minimum.accumulate(plan.window_start_ns[::-1])[::-1][1:], BIG)
        # window w + 1 is read in a thread while the caller works on window w (connectorx
        # and SQLite read outside the GIL); the reader lives in that thread (its connection
        # stays there)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jlprof-window-read")
        try:
            reader = pool.submit(WindowReader, plan).result()
        except BaseException:
            pool.shutdown()
            raise
        ahead = pool.submit(reader.read, 0) if plan.n_windows else None
        try:
            for w in range(plan.n_windows):
                wt = ahead.result()
                ahead = pool.submit(reader.read, w + 1) if w + 1 < plan.n_windows else None
                win = Window(
                    api=wt.api,
                    gpu=wt.gpu,
                    api_index=wt.api_index,
                    gpu_index=wt.gpu_index,
                    isolated=wt.isolated,
                    next_start_ns=int(later[w]),
                )
                del wt
                res = self.work.add(win)
                if self.parts is not None:
                    self.parts.add(res.rows)
                    self.parts.evidence.add(
                        win.gpu, res.gpu_iter, res.rows.op_key, res.gpu_call, win.api,
                        res.api_inst,
                    )  # fmt: skip
                res.rows = None  # its window's: the caller's iteration report reads the rest
                yield win, res
                del win, res
                # the window's Arrow buffers; the C heap only past WINDOW_SLACK of free
                # memory (the next window's allocations reuse what stays)
                release_reader_memory(WINDOW_SLACK)
        finally:
            if ahead is not None:  # the caller stopped early: the read in flight ends first
                ahead.cancel() or ahead.exception()
            pool.submit(reader.close).result()
            pool.shutdown()
        # the windows' order and flags are done with (the database's reader needs the tables
        # only; each GPU row's launch window went before the first window, :meth:`_trim`)
        plan.gpu_order = plan.launched = plan.isolated = None  # type: ignore[assignment]

    def _warnings(self) -> list[str]:
        """What :func:`read_trace` warns about the export, from the plan's counts."""
        from jlprof.engine.read.read import open_export, trace_warnings

        conn, tabs = open_export(self.path)
        conn.close()
        plan = self.plan
        names = plan.api_template["name"].cat.categories
        return trace_warnings(tabs, plan.n_gpu, self._n_ranges, plan.n_api, names)

    def finish(self) -> tuple[Trace, Correlated, InstanceMetrics]:
        """The trace's small frames (its API and GPU frames empty) and the assembled
        correlation, once every window is in. What only the windows needed is let go here
        (the range lookups, the running sums: ~0.7 GB at 10M kernels; the NVTX frame went
        once the range pass was done), before
        the cube is built: the CLI's reports read none of it."""
        work, self.work = self.work, None
        work.ranges.global_tid = self._range_tids(work.ranges)
        self.ranges = None  # type: ignore[assignment]
        event_type, self.event_type = self.event_type, None
        template = self.plan.gpu_template
        c, m = assemble(self.small, None, work, event_type, template)
        if self.parts is not None:
            op_of_key = work.op_of_keys(c.ops, template["name"].cat.categories)
            self.parts.finish(op_of_key)
            self.parts.evidence.finish(op_of_key, c.inst["op"].to_numpy(), work.resolve)
        del work
        release_reader_memory()
        return self.small, c, m


class WindowsDldb:
    """DLProf's database written from the windows' own frames, in a thread: no second read.
    Byte for byte what :func:`~jlprof.engine.read.store.save_trace` writes of the whole trace.

    The API parts go as they come (a window's calls are a run of the API table's rows, in
    order); the GPU parts in the whole read's row order: a window's GPU rows may interleave
    with a later window's (work of two streams), so the rows at or past the first GPU row of
    any later window wait in a small reorder buffer (none on one stream). The small frames
    are written first, as soon as they are read (spooled: their turn comes after the GPU and
    API rows), so the run need not hold the NVTX frame past its range pass.
    """

    def __init__(self, small: Trace, target: Path, flag: str = "--output_path") -> None:
        """Starts writing ``small``'s frames (``WindowedRun``'s ``on_read``): the run need not
        hold its NVTX frame for the database; :meth:`planned` follows, then the windows."""
        from jlprof.background import Fed

        self.target, self.flag = target, flag
        self.meta = {"meta": small.meta, "source": small.source}
        self.frames = {n: getattr(small, n) for n in ("nvtx", "marks", "osrt", "gpus")}
        self.feed = Fed(self._write, "jlprof-dldb", depth=2)
        self.job = self.feed.job

    def planned(self, run: WindowedRun) -> None:
        """The run's launch plan: the frames' kinds, the trace's warnings, the GPU rows' order."""
        plan = run.plan
        self.feed.put(("plan", (plan.gpu_template, plan.api_template, run.small.warnings)))
        n, k = plan.n_gpu, plan.n_windows
        first = np.full(k + 1, n, np.int64)  # each window's first GPU row (none: n)
        has = plan.gpu_bounds[1:] > plan.gpu_bounds[:-1]
        first[:k][has] = plan.gpu_order[plan.gpu_bounds[:-1][has]]
        # rows below horizon[w] are all in windows 0..w: whole once window w is in
        self.horizon = np.minimum.accumulate(first[::-1])[::-1][1:]
        self.rows = np.zeros(0, np.int64)  # the reorder buffer's GPU rows and frame
        self.buf: pd.DataFrame | None = None

    def put(self, w: int, win: Window) -> None:
        """Window ``w``'s rows (after the windows before it)."""
        self.feed.put(("api", win.api))
        rows, frame = win.gpu_index, win.gpu
        if self.buf is not None:
            rows = np.concatenate([self.rows, rows])
            frame = pd.concat([self.buf, frame], ignore_index=True)
            order = np.argsort(rows, kind="stable")
            rows, frame = rows[order], frame.take(order).reset_index(drop=True)
        cut = int(np.searchsorted(rows, self.horizon[w]))
        if cut:
            self.feed.put(("gpu", frame.iloc[:cut]))
        self.rows = rows[cut:]
        self.buf = frame.iloc[cut:].reset_index(drop=True) if cut < len(rows) else None

    def done(self) -> None:
        """Every window is in: the buffer goes, then the end."""
        if self.buf is not None:
            self.feed.put(("gpu", self.buf))
            self.buf = None
        self.feed.end()

    def _write(self, parts: Iterator[tuple[str, pd.DataFrame]], check: Callable[[], None]) -> Path:
        from jlprof.engine.read.store import open_store

        with open_store(self.target, self.flag, check, **self.meta) as db:
            for name in list(self.frames):  # ahead of their turn: spooled to a file
                db.write_frame(name, self.frames.pop(name))
            kind, plan = next(parts, ("end", None))
            if kind != "plan":
                raise RuntimeError(f"WindowsDldb: {kind} before the plan")
            gpu_template, api_template, db.warnings = plan
            with (
                db.frame("gpu", gpu_template) as gpu,
                db.frame("api", api_template) as api,
            ):
                for kind, frame in parts:
                    (gpu if kind == "gpu" else api).write(frame)
        return self.target


def _without_categories(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame``'s columns with no rows, its categorical ones with no categories (object, as
    every reader expects). A function of its own: a local of :meth:`WindowedRun.windows`
    holding the first empty copy kept every category through the windows (the NVTX texts'
    dictionary: 0.36 GB of Arrow strings at a 10M-kernel PyTorch run)."""
    empty = frame.iloc[:0].copy()
    return empty.assign(
        **{
            k: pd.Categorical([], categories=pd.Index([], dtype=object))
            for k in empty.columns
            if isinstance(empty[k].dtype, pd.CategoricalDtype)
        }
    )


def ranges_correlated(trace: Trace, ranges: Ranges) -> Correlated:
    """A :class:`Correlated` of the ranges alone: what finding the key node and iterations
    reads (ops, instances, paths; the path strings of ranges are their final ones). Its
    ``nvtx`` is ``trace.nvtx`` (the windowed run's: no rows by then)."""
    n = len(ranges.start_ns)
    op = ranges.op_narrow()
    parent = np.asarray(ranges.lanes.parent).astype(index_dtype(n), copy=False)
    path, paths = path_table(op, ranges.ops["op_name"].to_numpy(object), ranges.op_abs, parent)
    inst = pd.DataFrame(
        {
            "start_ns": ranges.start_ns,
            "end_ns": ranges.end_ns,
            "global_tid": ranges.global_tid,
            "op": op,
            "parent": parent,
            "path": path,
            "synthetic": np.zeros(n, bool),
        },
        copy=False,  # the range pass's arrays as they are: no 2D block of three int64 columns
    )
    times = [x for x in (ranges.start_ns, ranges.end_ns) if len(x)]
    empty = trace.api.iloc[:0]
    return Correlated(
        trace=trace,
        inst=inst,
        ops=ranges.ops,
        paths=paths,
        api=empty,
        gpu=trace.gpu.iloc[:0],
        t_first_ns=int(min(x.min() for x in times)) if times else 0,
        t_last_ns=int(max(x.max() for x in times)) if times else 0,
        nvtx=trace.nvtx,
        markers=ranges.markers,
    )


__all__ = ["WINDOW_CALLS", "Unsuitable", "WindowedRun", "WindowsDldb", "ranges_correlated"]
