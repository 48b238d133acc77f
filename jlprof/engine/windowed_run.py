"""One export analysed by windows: the windowed engine's passes in order (issue 18).

docs/windowed-engine.md, "The plan": everything but the API calls and GPU work is read
whole (:func:`~jlprof.engine.read.read_trace` with ``work=False``: NVTX, marks, OS runtime,
GPUs, metadata); the range pass (:mod:`jlprof.engine.ranges`) and the key node's iterations
come from the NVTX ranges alone; the launch plan (:mod:`jlprof.engine.windows`) cuts the API
calls into windows of whole iterations, each with the GPU work its calls launched; the work
pass (:mod:`jlprof.engine.windowed`) correlates them window by window, and :meth:`finish`
assembles the :class:`~jlprof.engine.correlate.Correlated` the cube and the reports read.
Per window the caller gets the window's rows and their correlation (:meth:`windows`), to
write what needs every row (the iteration report) without ever holding every row.

Whatever this path cannot give exactly raises :class:`Unsuitable` before any window is read;
the caller then analyses the whole trace as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from jlprof.engine.aggregate import InstanceMetrics
from jlprof.engine.analysis import resolve_key_node
from jlprof.engine.correlate import Correlated, path_table
from jlprof.engine.iterations import Iterations, find_iterations
from jlprof.engine.narrow import index_dtype
from jlprof.engine.ranges import NONE, Ranges, range_pass
from jlprof.engine.read import read_trace
from jlprof.engine.trace import Trace
from jlprof.engine.windowed import Window, WindowResult, WorkPass, assemble
from jlprof.errors import AnalysisError

#: API calls a window holds at most (more when one iteration alone has more): ~50 MB of
#: window frames and ~0.15 GB of correlation temporaries at 512k
WINDOW_CALLS = 1 << 19
BIG = np.iinfo(np.int64).max
#: rows of the API or GPU table per part of the DLProf database (~30 MB of frame)
DLDB_PART_ROWS = 1 << 18


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
    ) -> None:
        from jlprof.engine.windows import Misplaced, plan_windows

        say = progress or (lambda _m: None)
        self.path = Path(path)
        self.small = read_trace(self.path, use_connectorx=use_connectorx, work=False)
        nv = self.small.nvtx
        if domains:
            keep = nv["domain"].astype(str).isin(domains).to_numpy()
            nv = nv.loc[keep].reset_index(drop=True)
        self.nv = nv
        say("nesting NVTX ranges")
        self.ranges = range_pass(nv, mode)
        if mode is None and self.ranges.markers:
            raise Unsuitable("PyTorch markers: the expert systems' checks read every call")
        if mode not in (None, "simple"):
            raise Unsuitable(f"mode {mode}: its expert checks read every call")
        say("finding iterations")
        c_r = ranges_correlated(self.small, nv, self.ranges)
        try:
            self.key_node = resolve_key_node(c_r, key_node)
        except AnalysisError:
            raise Unsuitable("the key node is not a range: the whole path explains") from None
        self.iterations: Iterations = find_iterations(c_r, self.key_node)
        say("planning windows of API calls")
        try:
            self.plan = plan_windows(
                self.path,
                calls_per_window,
                cuts_ns=self.iterations.bounds_ns[1:-1],
                use_connectorx=use_connectorx,
            )
        except Misplaced as exc:
            raise Unsuitable(str(exc)) from None
        self.work = WorkPass(self.ranges, self.iterations, n_gpu=self.plan.n_gpu)
        self.small.warnings = self._warnings()

    @property
    def n_windows(self) -> int:
        return self.plan.n_windows

    def windows(self) -> Iterator[tuple[Window, WindowResult]]:
        """Each window, read and correlated, in order; its rows are let go when the caller
        moves on."""
        from jlprof.engine.windows import WindowReader

        plan = self.plan
        # no GPU row of a later window starts before its earliest call (GPU work never starts
        # before its launch; the work pass checks it as the windows come)
        later = np.append(np.minimum.accumulate(plan.window_start_ns[::-1])[::-1][1:], BIG)
        with WindowReader(plan) as reader:
            for w in range(plan.n_windows):
                wt = reader.read(w)
                win = Window(
                    api=wt.api,
                    gpu=wt.gpu,
                    api_index=wt.api_index,
                    gpu_index=wt.gpu_index,
                    isolated=wt.isolated,
                    next_start_ns=int(later[w]),
                )
                del wt
                yield win, self.work.add(win)
        # the launch windows are done with (the database's reader needs the tables only)
        plan.window = plan.gpu_order = plan.launched = plan.isolated = None  # type: ignore[assignment]

    def _warnings(self) -> list[str]:
        """What :func:`read_trace` warns about the export, from the plan's counts."""
        from jlprof.engine.read import open_export, trace_warnings

        conn, tabs = open_export(self.path)
        conn.close()
        plan = self.plan
        names = plan.api_template["name"].cat.categories
        return trace_warnings(tabs, plan.n_gpu, len(self.small.nvtx), plan.n_api, names)

    def finish(self) -> tuple[Trace, Correlated, InstanceMetrics]:
        """The trace's small frames (its API and GPU frames empty) and the assembled
        correlation, once every window is in. What only the windows needed is let go here
        (the range lookups, the running sums, the NVTX frame: ~1 GB at 10M kernels), before
        the cube is built: the CLI's reports read none of it."""
        c, m = assemble(self.small, self.nv, self.work)
        self.work = None  # type: ignore[assignment]
        self.ranges = None  # type: ignore[assignment]
        self.nv = None  # type: ignore[assignment]
        c.nvtx = None
        self.small.nvtx = self.small.nvtx.iloc[:0]  # (write_dldb took its own reference)
        return self.small, c, m

    def write_dldb(
        self, target: Path, flag: str = "--output_path", check: Callable[[], None] | None = None
    ) -> Path:
        """DLProf's database of the export (the whole trace, as :func:`~jlprof.engine.store.
        save_trace` writes it, byte for byte), read again part by part in row order on a
        connection of its own: the CLI runs it in a thread beside the windows."""
        from jlprof.engine.store import open_dldb
        from jlprof.engine.windows import WindowReader

        plan, small = self.plan, self.small
        sizes = {"gpu": plan.n_gpu, "api": plan.n_api}  # before the windows let the plan go
        kw = {"meta": small.meta, "source": small.source, "warnings": small.warnings}
        frames = {name: getattr(small, name) for name in ("nvtx", "marks", "osrt", "gpus")}
        with open_dldb(target, flag, check, **kw) as db, WindowReader(plan) as reader:
            # the small frames first (spooled until their turn): then the NVTX frame, 0.3 GB
            # at 10M kernels, need not live until the API and GPU parts are written
            for name in list(frames):
                db.write_frame(name, frames.pop(name))
            for name, read, like in (
                ("gpu", reader.gpu_part, plan.gpu_template),
                ("api", reader.api_part, plan.api_template),
            ):
                n = sizes[name]
                with db.frame(name, like) as part:
                    for a in range(0, n, DLDB_PART_ROWS):
                        part.write(read(a, min(a + DLDB_PART_ROWS, n)))
        return target


def ranges_correlated(trace: Trace, nv: pd.DataFrame, ranges: Ranges) -> Correlated:
    """A :class:`Correlated` of the ranges alone: what finding the key node and iterations
    reads (ops, instances, paths; the path strings of ranges are their final ones)."""
    n = len(nv)
    op = np.asarray(ranges.label_op, np.int64)[ranges.label].astype(index_dtype(len(ranges.ops)))
    parent = np.asarray(ranges.lanes.parent).astype(index_dtype(n))
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
        }
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
        nvtx=nv,
        markers=ranges.markers,
    )


__all__ = ["NONE", "WINDOW_CALLS", "Unsuitable", "WindowedRun", "ranges_correlated"]
