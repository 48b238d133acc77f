"""``Profile``: the one object the CLI, the notebook magic and the widgets all use.

The facade where the layers meet: the engine's :class:`~jlprof.engine.analysis.Analysis`
(read once, re-aggregated per key node and iteration range) plus DLProf's reports, the report
files and the notebook display. Only this module and the layers above it (magics, CLI) import
both the engine and the reports/widgets; the widgets are imported on first display, so a script
never loads Jupyter.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from jlprof.engine.analysis import (
    DEFAULT_KEY_NODES,
    DEFAULT_PROFILE_NAME,
    MODES,
    Analysis,
    check_options,
)
from jlprof.engine.read.trace import Trace
from jlprof.errors import InputError
from jlprof.reports import REPORTS, catalog
from jlprof.reports.diff import THRESHOLD_PCT, DiffResult, compare


class Comparison(DiffResult):
    """:class:`~jlprof.reports.diff.DiffResult` plus its notebook view (docs/diff.md)."""

    def view(self, **kwargs: Any) -> Any:
        """The diff view: waterfall of the biggest op deltas, both iteration timelines."""
        from jlprof.widgets.diff import diff_view

        return diff_view(self, **kwargs)

    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    def _ipython_display_(self) -> None:
        from jlprof.widgets.diff import display_diff

        display_diff(self)


class Profile(Analysis):
    """A correlated profile with DLProf's reports; re-aggregates without re-reading."""

    # the launches of a joined Nsight Compute report, with ``gpu_row`` (``attach_ncu``)
    ncu_launches: pd.DataFrame | None = None

    # ---- reports -----------------------------------------------------------------------
    def report(
        self, name: str, iter_start: int | None = None, iter_stop: int | None = None
    ) -> pd.DataFrame:
        """One DLProf report as a DataFrame (the summary: one tidy frame of all its tables)."""
        return catalog.report(self, name, iter_start, iter_stop)

    def attach_ncu(
        self, path: str | Path, *, skip: int = 0, via: str | None = None
    ) -> pd.DataFrame:
        """Join an Nsight Compute report's measured launches to this trace's kernels (docs/
        kernels.md): the kernel report gains the measured columns and says how its Tensor Core
        verdict was made. Returns the launches with ``gpu_row`` (-1: not in this trace)."""
        from jlprof.engine.analyses import ncu as engine_ncu
        from jlprof.nsys import ncu

        self.require_rows("joining an ncu report")
        launches = ncu.read_ncu_report(path, via=via)
        c = self.correlated
        gpu = c.gpu
        inst = gpu["inst"].to_numpy(np.int64)
        path = np.full(len(gpu), -1, dtype=np.int64)  # -1: the "" appended below
        path[inst >= 0] = c.inst["path"].to_numpy(np.int64)[inst[inst >= 0]]
        texts = np.append(c.paths["path"].astype(object).to_numpy(), "")
        nvtx = pd.Series(texts[path], dtype=object)
        joined = engine_ncu.join(engine_ncu.measured_frame(ncu.measured_rows(launches)), gpu,
                                 nvtx, skip=skip)  # fmt: skip
        self.ncu_launches = joined
        self.ncu_kernels = engine_ncu.per_kernel(joined, gpu)
        return joined

    def top_kernels(self, n: int) -> list[str]:
        """The ``n`` kernels (demangled names) with most total GPU time in the current range:
        what ``jlprof ncu --kernels topN`` profiles under ncu."""
        k = self.report("kernel")
        if k.empty:
            return []
        total = k.groupby("Long Kernel Name", sort=False)["Total GPU Time (ns)"].sum()
        return total.sort_values(ascending=False, kind="stable").head(n).index.tolist()

    def ncu_command(self, app: list[str], kernels: str = "top5", **options: Any) -> Any:
        """The ``ncu`` command line that profiles ``app``'s kernels chosen from this profile
        (``topN`` or a regex; ``options``: ``jlprof.nsys.ncu.capture_command``'s). ncu's
        replay slows the profiled kernels 10-100x (docs/kernels.md)."""
        import re

        from jlprof.nsys.ncu import capture_command

        output = options.pop("output", "jlprof_ncu")
        m = re.fullmatch(r"top(\d+)", kernels)
        if m is not None:
            names = self.top_kernels(int(m.group(1)))
            return capture_command(app, output, kernels=names, **options)
        return capture_command(app, output, regex=kernels, **options)

    # ---- analyses beyond DLProf (docs/analyses.md) ------------------------------------------
    def idle_causes(
        self, iter_start: int | None = None, iter_stop: int | None = None, by: str = "iteration"
    ) -> pd.DataFrame:
        """GPU idle time split by cause, per GPU and iteration (``by="gpu"``: per GPU, with %)."""
        from jlprof.reports.analyses import idle_by_gpu

        if by == "gpu":
            return idle_by_gpu(self, *self.range_of(iter_start, iter_stop))
        return self.report("idle_causes", iter_start, iter_stop)

    def launch_stats(
        self, iter_start: int | None = None, iter_stop: int | None = None, per_launch: bool = False
    ) -> pd.DataFrame:
        """Kernel launch latency, queueing, launch-bound share and outliers per kernel
        (``per_launch=True``: one row per launch)."""
        from jlprof.reports.analyses import launches_in_range

        if per_launch:
            return launches_in_range(self, *self.range_of(iter_start, iter_stop))
        return self.report("launch_stats", iter_start, iter_stop)

    def iteration_outliers(
        self, iter_start: int | None = None, iter_stop: int | None = None
    ) -> pd.DataFrame:
        """Iterations slower than median + k scaled MADs (partial intervals marked, not flagged)."""
        return self.report("iteration_outliers", iter_start, iter_stop)

    def outlier_ops(
        self, iteration: int, iter_start: int | None = None, iter_stop: int | None = None
    ) -> pd.DataFrame:
        """Why ``iteration`` is slow: each op's time in it against its median iteration time."""
        from jlprof.reports.analyses import outlier_ops

        return outlier_ops(self, iteration, iter_start, iter_stop)

    def roofline(self, iter_start: int | None = None, iter_stop: int | None = None) -> pd.DataFrame:
        """FLOPs, bytes, achieved rates and roofline position of the ops with recorded shapes."""
        return self.report("roofline", iter_start, iter_stop)

    def summary(self, iter_start: int | None = None, iter_stop: int | None = None) -> dict:
        """The summary report's five tables, keyed by the guide's table names."""
        return catalog.summary(self, iter_start, iter_stop)

    def write_reports(
        self,
        output_path: str | Path = ".",
        reports: list[str] | tuple[str, ...] = REPORTS,
        formats: list[str] | tuple[str, ...] = ("csv",),
        force: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> list[Path]:
        """Write ``<profile_name>_<report>.<ext>`` files; existing files kept unless force.
        ``progress`` is told each stage ("building iteration", "writing iteration.csv")."""
        from jlprof.reports.writers import write_reports

        return write_reports(self, Path(output_path), reports, formats, force, progress)

    def save(self, path: str | Path) -> Path:
        """Save the normalised trace as a jlprof database for fast re-analysis."""
        from jlprof.engine.read.store import save_trace

        return save_trace(self.trace, path)

    def compare(
        self,
        other: Profile,
        *,
        iter_start: int | None = None,
        iter_stop: int | None = None,
        other_iter_start: int | None = None,
        other_iter_stop: int | None = None,
        threshold_pct: float = THRESHOLD_PCT,
    ) -> Comparison:
        """Diff ``other`` (new) against this profile (base): per op, kernel and op type, both
        iteration-time distributions and a CI verdict (docs/diff.md). Ranges default to each
        profile's current one; times are per iteration when the iteration counts differ."""
        if not isinstance(other, Analysis):
            raise InputError(f"compare() takes another jlprof Profile, got {type(other).__name__}.")
        r = compare(
            self,
            other,
            base_range=(iter_start, iter_stop),
            new_range=(other_iter_start, other_iter_stop),
            threshold_pct=threshold_pct,
        )
        return Comparison(**vars(r))

    # ---- display -----------------------------------------------------------------------
    def headline(self) -> dict[str, Any]:
        """The few numbers a person looks at first (used by the text/HTML reprs)."""
        return catalog.headline(self)

    def __repr__(self) -> str:
        h = self.headline()
        kn = h["key_node"] or "none found"
        return (
            f"<jlprof.Profile {Path(h['source']).name}: key node {kn}, {h['iterations']} "
            f"iterations, range {h['range'][0]}..{h['range'][1]}, "
            f"wall {h['wall_ns'] / 1e6:.1f} ms, "
            f"GPU util {h['gpu_util_pct']:.1f}%, TC util {h['tc_util_pct']:.1f}%>"
        )

    def _repr_html_(self) -> str:
        from jlprof.reports.html import profile_html

        return profile_html(self)

    def dashboard(self, **kwargs: Any) -> Any:
        """The interactive dashboard (an ipywidgets widget; needs the 'notebook' extra)."""
        from jlprof.widgets.dashboard import Dashboard

        return Dashboard(self, **kwargs)

    def _ipython_display_(self) -> None:
        # imported here: a script that never displays a profile never imports Jupyter
        from jlprof.widgets.display import display_profile

        display_profile(self)


def load(
    path: str | Path,
    *,
    key_node: str | None = None,
    iter_start: int | None = None,
    iter_stop: int | None = None,
    domains: list[str] | None = None,
    mode: str | None = None,
    profile_name: str = DEFAULT_PROFILE_NAME,
    progress: Callable[[str], None] | None = None,
    use_connectorx: bool | None = None,
    on_read: Callable[[Trace], Any] | None = None,
    range_only: bool = False,
    ncu_report: str | Path | None = None,
) -> Profile:
    """Load an nsys export (.sqlite/.nsys-rep/.qdrep/.qdstrm) or a jlprof database.

    ``mode`` None: ``pytorch`` when the trace holds PyTorch markers (emit_nvtx, DLProf/PyProf
    plugin, ``jlprof.torch``), else ``simple``; a mode given always wins. ``on_read`` is
    called with the trace as soon as it is read, before the analysis (the CLI starts writing
    the DLProf database then, in a thread). ``range_only``: the profile answers
    ``iter_start..iter_stop`` alone (the command line's reports): its cube keeps that range's
    op and kernel figures combined, not per iteration (no range slider, no other key node).
    ``ncu_report``: an Nsight Compute report joined to the kernels (:meth:`Profile.attach_ncu`).
    """
    from jlprof.engine.read.store import read_any

    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"path must be a file path (str or Path), got {path!r}.")
    check_options(key_node, iter_start, iter_stop, domains, mode)  # before the (long) read
    path = Path(path)
    if path.suffix in (".nsys-rep", ".qdrep", ".qdstrm"):
        from jlprof.nsys import ensure_sqlite

        path = ensure_sqlite(path)
    # not a heavy stage: the reader's threads must trim their heaps as they free
    trace = read_any(path, use_connectorx=use_connectorx, progress=progress)
    if on_read is not None:
        on_read(trace)
    p = Profile(
        trace,
        key_node=key_node,
        iter_start=iter_start,
        iter_stop=iter_stop,
        domains=domains,
        mode=mode,
        profile_name=profile_name,
        progress=progress,
        range_only=range_only,
    )
    if ncu_report is not None:
        p.attach_ncu(ncu_report)
    return p


def load_windowed(
    path: str | Path,
    *,
    key_node: str | None = None,
    iter_start: int | None = None,
    iter_stop: int | None = None,
    domains: list[str] | None = None,
    mode: str | None = None,
    profile_name: str = DEFAULT_PROFILE_NAME,
    progress: Callable[[str], None] | None = None,
    use_connectorx: bool | None = None,
    iteration_files: Callable[[], Any] | None = None,
    calls_per_window: int | None = None,
    on_read: Callable[[Any], Any] | None = None,
    on_run: Callable[[Any], Any] | None = None,
    launch_stats: bool = False,
    idle_causes: bool = False,
) -> Profile:
    """:func:`load` for an nsys SQLite export too big to hold: the API calls and GPU work are
    read and correlated window by window (docs/windowed-engine.md) and only the aggregates
    are kept, so memory does not grow with the trace's rows. ``iteration_files``: a context
    manager factory (:func:`jlprof.reports.writers.iteration_files`) into which the iteration
    report, which needs every GPU row, is written window by window; the returned profile
    then has it in ``written_early``. ``on_read`` is called with the trace's frames but the
    API calls and GPU work as soon as they are read (the run then lets go its NVTX frame
    once its range pass is done). ``on_run`` is called with the
    :class:`~jlprof.engine.windowed.windowed_run.WindowedRun` once it is planned, before its
    windows, and returns the sinks each window is given to (``put(k, window)``, then ``done()``).
    ``launch_stats``: the kernel launches are kept, window by window, for the launch_stats
    report (about 100 bytes a launch); else the profile refuses that report.
    ``idle_causes``: the idle_causes report is summed as the windows come (it is the only
    key node's; else the profile refuses that report).
    The profile's reports equal :func:`load`'s; it has no per-row frames (no dashboard
    timeline, no ``save``).

    Raises :class:`jlprof.engine.windowed.windowed_run.Unsuitable` before reading any window when
    the export needs the whole-trace path (a key node that is not a range, an nvprof database,
    ranges named like unassociated work that hold other ranges).
    """
    from contextlib import nullcontext

    from jlprof.engine.analysis import check_range
    from jlprof.engine.windowed.group_parts import GroupPartsInexact
    from jlprof.engine.windowed.windowed import CarryBroken
    from jlprof.engine.windowed.windowed_run import WINDOW_CALLS, Unsuitable, WindowedRun

    check_options(key_node, iter_start, iter_stop, domains, mode)
    run = WindowedRun(
        path,
        key_node=key_node,
        domains=domains,
        mode=mode,
        calls_per_window=calls_per_window or WINDOW_CALLS,
        use_connectorx=use_connectorx,
        progress=progress,
        on_read=on_read,
        device_pairs=idle_causes,
    )
    lo, hi = check_range(run.iterations.count, iter_start, iter_stop)
    parts = run.start_parts(lo, hi)  # the cube's GPU figures, summed as the windows come
    # the CLI starts DLProf's database now: sinks given each window's rows (WindowsDldb)
    sinks = list(on_run(run) or []) if on_run is not None else []
    say = progress or (lambda _m: None)
    files = iteration_files() if iteration_files is not None else nullcontext((None, []))
    launches: list | None = [] if launch_stats else None
    idle = run.idle_parts() if idle_causes else None
    try:
        early = _windows(run, files, lo, hi, say, sinks, launches, idle)
    except (CarryBroken, GroupPartsInexact) as exc:  # no file kept: the whole path again
        raise Unsuitable(str(exc)) from exc
    trace, c, m = run.finish()
    prof = Profile(
        trace,
        key_node=key_node,
        iter_start=iter_start,
        iter_stop=iter_stop,
        domains=domains,
        mode=mode,
        profile_name=profile_name,
        progress=progress,
        correlated=(c, m),
        range_only=True,  # its reports are for lo..hi alone: the cube keeps that range
        parts=parts,
    )
    prof.written_early = early
    if launches is not None:
        from jlprof.engine.analyses.launch import in_start_order

        prof.window_launches = in_start_order(launches, prof.iterations)
    if idle is not None:
        prof.window_idle = idle.frame(prof.iterations)
    return prof


def _windows(
    run, files, lo: int, hi: int, say, sinks: list, launches: list | None, idle=None
) -> dict:
    """Read and correlate every window of ``run``, writing the iteration report's rows
    (iterations ``lo..hi``) into ``files`` as they come, giving each window to ``sinks``
    (``put(k, window)``, then ``done()``), its kernel launches to ``launches`` and it to
    ``idle`` (:class:`~jlprof.engine.windowed.idle_parts.IdleParts`; each unless None); the
    reports written, by name."""
    from jlprof.engine.analyses.launch import launch_rows
    from jlprof.reports import tables

    early: dict[str, list] = {}
    with files as (write, paths):
        ops = None
        for k, (win, res) in enumerate(run.windows()):
            say(f"correlating window {k + 1} of {run.n_windows}")
            for sink in sinks:
                sink.put(k, win)
            if launches is not None:
                launches.append(
                    launch_rows(win.gpu, win.api, res.gpu_api, res.gpu_call, win.gpu_index)
                )
            if idle is not None:
                idle.add(win, res)
            if write is not None:
                if ops is None:
                    ops = run.work.report_ops(win.gpu["name"].cat.categories)
                g = win.gpu.assign(uses_tc=res.uses_tc)
                write(
                    tables.iteration_window(
                        ops,
                        res.gpu_op,
                        res.gpu_iter,
                        g,
                        win.api,
                        res.gpu_call,
                        lo,
                        hi,
                        run.mode == "pytorch",
                    )
                )
            del win, res
        for sink in sinks:
            sink.done()
        if paths:
            early["iteration"] = paths
    return early


__all__ = [
    "DEFAULT_KEY_NODES",
    "MODES",
    "REPORTS",
    "Comparison",
    "Profile",
    "check_options",
    "load",
    "load_windowed",
]
