"""``Profile``: the one object the CLI, the notebook magic and the widgets all use.

It holds the correlated trace (read once) and caches one per-iteration cube per key
node, so changing the key node costs one cube build and changing the iteration range
costs a small group-by (see ``aggregate``).
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from jlprof.engine.aggregate import Cube, InstanceMetrics, build_cube, instance_metrics
from jlprof.engine.correlate import Correlated, correlate
from jlprof.engine.iterations import (
    DEFAULT_KEY_NODE,
    Iterations,
    find_iterations,
    key_node_instances,
    suggest_key_nodes,
)
from jlprof.engine.memory import heavy_stage
from jlprof.engine.trace import Trace
from jlprof.errors import AnalysisError, InputError, OptionError

# Tried in order when no key node is given: DLProf's default, then jlprof.torch's range.
DEFAULT_KEY_NODES = (DEFAULT_KEY_NODE, "optimizer_step")
MODES = ("simple", "pytorch", "tensorflow1", "tensorflow2", "tensorrt")
REPORTS = (
    "summary",
    "detail",
    "iteration",
    "kernel",
    "tensor",
    "op_type",
    "group_node",
    "expert_systems",
)


T = TypeVar("T")


def check_options(key_node: Any, iter_start: Any, iter_stop: Any, domains: Any, mode: Any) -> None:
    """Types and values of the analysis options, checked before any trace is read; raises
    :class:`OptionError` (:class:`AnalysisError` for an unknown mode) instead of a raw
    ``TypeError`` later, and never truncates ``iter_start=1.7`` silently. ``mode`` None: from
    the trace (:class:`Profile`)."""
    if mode is not None and mode not in MODES:
        raise AnalysisError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}.")
    if key_node is not None and not isinstance(key_node, str):
        raise OptionError(f"key_node is an op name or op ID (a str), got {key_node!r}.")
    _whole(iter_start, "iter_start")
    _whole(iter_stop, "iter_stop")
    if domains is not None and (
        isinstance(domains, str)
        or not isinstance(domains, (list, tuple))
        or not all(isinstance(d, str) for d in domains)
    ):
        raise OptionError(
            f"domains is a list of NVTX domain names, e.g. ['my_domain'] ('' = the default "
            f"domain), got {domains!r}."
        )


def _whole(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise OptionError(f"{name} is an iteration number (a whole number), got {value!r}.")
    return int(value)


class Profile:
    """A correlated profile with DLProf's reports; re-aggregates without re-reading."""

    def __init__(
        self,
        trace: Trace,
        *,
        key_node: str | None = None,
        iter_start: int | None = None,
        iter_stop: int | None = None,
        domains: list[str] | None = None,
        mode: str | None = None,
        profile_name: str = "jlprof",
        progress: Callable[[str], None] | None = None,
    ) -> None:
        check_options(key_node, iter_start, iter_stop, domains, mode)
        say = progress or (lambda _m: None)
        self.trace = trace
        self.mode = mode or "simple"
        self.profile_name = profile_name
        self.domains = domains
        say("correlating GPU work, API calls and NVTX ranges")
        with heavy_stage():  # correlation and the first cube reuse each other's memory
            self.correlated: Correlated = correlate(trace, domains)
            if mode is None and self.correlated.markers:  # PyTorch markers: DLProf's default
                self.mode = "pytorch"
            self.metrics: InstanceMetrics = instance_metrics(self.correlated)
            self._cubes: dict[str | None, Cube] = {}
            # per (what, key node, range): small frames; str keys: per-profile orderings
            self._memo: dict[tuple | str, Any] = {}
            self.key_node_given = key_node is not None
            say("finding iterations")
            self.key_node: str | None = self._resolve_key_node(key_node)
            self.iter_start, self.iter_stop = self._check_range(iter_start, iter_stop)
            # the group-node partials too: the summary's dashboard and the group_node report
            # need them, and built here they reuse the correlation's freed memory
            self.cube.group_iter  # noqa: B018

    # ---- key node and range -------------------------------------------------------------
    def _resolve_key_node(self, key_node: str | None) -> str | None:
        if key_node is not None:
            if len(key_node_instances(self.correlated, key_node)) == 0:
                cands = ", ".join(suggest_key_nodes(self.correlated)["op_name"].head(3))
                hint = f" Candidates: {cands}." if cands else ""
                raise AnalysisError(
                    f"key node {key_node!r} is not an op name or op ID in this profile.{hint} "
                    "See the detail report's Op Name / Op ID columns."
                )
            return key_node
        for name in DEFAULT_KEY_NODES:
            if len(key_node_instances(self.correlated, name)):
                return name
        return None

    def set_key_node(self, key_node: str | None) -> None:
        """Switch the key node (None: DLProf's default); resets the range to all iterations."""
        self.key_node_given = key_node is not None
        self.key_node = self._resolve_key_node(key_node)
        self.iter_start, self.iter_stop = self._check_range(None, None)

    def set_range(self, iter_start: int | None, iter_stop: int | None) -> None:
        """Aggregate over iterations ``iter_start..iter_stop`` (inclusive)."""
        self.iter_start, self.iter_stop = self._check_range(iter_start, iter_stop)

    def _check_range(self, start: int | None, stop: int | None) -> tuple[int, int]:
        last = self.iterations.count - 1
        s = 0 if start is None else _whole(start, "iter_start")
        e = last if stop is None else _whole(stop, "iter_stop")
        if s < 0:
            raise AnalysisError(f"--iter_start {s} is negative; iterations are numbered from 0.")
        if s > last:
            raise AnalysisError(
                f"--iter_start {s} is past the last iteration ({last}); use 0..{last}."
            )
        if e < s:
            raise AnalysisError(
                f"--iter_stop {e} is before --iter_start {s}; the stop must be >= the start."
            )
        if e > last:
            raise AnalysisError(
                f"--iter_stop {e} is past the last iteration ({last}); use at most {last}."
            )
        return s, e

    def range_of(self, iter_start: int | None, iter_stop: int | None) -> tuple[int, int]:
        """The effective inclusive range: the arguments, else the profile's current range."""
        if iter_start is None and iter_stop is None:
            return self.iter_start, self.iter_stop
        return self._check_range(
            self.iter_start if iter_start is None else iter_start,
            self.iter_stop if iter_stop is None else iter_stop,
        )

    @property
    def cube(self) -> Cube:
        """Per-iteration partial aggregates for the current key node (cached)."""
        cube = self._cubes.get(self.key_node)
        if cube is None:
            with heavy_stage():
                it = find_iterations(self.correlated, self.key_node)
                cube = build_cube(self.correlated, self.metrics, it)
            self._cubes[self.key_node] = cube
        return cube

    def memo(self, what: str, lo: int, hi: int, build: Callable[[], Any]) -> Any:
        """Cache a range's intermediate frame (reports share them; a range change is cheap)."""
        key = (what, self.key_node, lo, hi)
        if key not in self._memo:
            ranged = [k for k in self._memo if isinstance(k, tuple)]
            if len(ranged) > 64:  # forget old ranges, keep the per-profile entries (str keys)
                for k in ranged:
                    del self._memo[k]
            self._memo[key] = build()
        return self._memo[key]

    def once(self, key: str, build: Callable[[], T]) -> T:
        """Cache a value derived from the whole profile (orderings, lookups), built on first
        use; one that depends on the key node carries it in ``key``. Kept when old ranges
        are forgotten (:meth:`memo`)."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    @property
    def gpu_labels(self) -> list[str]:
        """Visible GPUs (lanes of the timeline), idle ones included."""
        from jlprof.engine.aggregate import gpu_lanes

        return self.once("labels", lambda: gpu_lanes(self.correlated)[1])

    @property
    def kernel_flags(self) -> pd.DataFrame:
        """Per distinct kernel (demangled-name code, as ``nsys stats -r gpukernsum`` tells
        kernels apart): uses_tc, is_memory and the short name shown beside it. Computed once,
        not per report; a verdict is never shared between namesakes."""

        def build() -> pd.DataFrame:
            g = self.correlated.gpu
            codes = g["long_name"].cat.codes.to_numpy()
            n = len(g["long_name"].cat.categories)
            tc = np.bincount(codes, weights=g["uses_tc"].to_numpy(bool), minlength=n) > 0
            mem = np.bincount(codes, weights=g["is_memory"].to_numpy(bool), minlength=n) > 0
            names = np.full(n, "", dtype=object)
            seen, first = np.unique(codes, return_index=True)  # each kernel's first row
            ok = seen >= 0
            short = g["name"].cat.categories.to_numpy(object)
            names[seen[ok]] = short[g["name"].cat.codes.to_numpy()[first[ok]]]
            return pd.DataFrame({"uses_tc": tc, "is_memory": mem, "short_name": names})

        return self.once("kflags", build)

    @property
    def iterations(self) -> Iterations:
        return self.cube.iterations

    def suggest_key_nodes(self, limit: int = 5) -> pd.DataFrame:
        """Ops that look like iteration markers, best first (guide §12.3)."""
        return suggest_key_nodes(self.correlated, limit)

    def framework(self) -> str:
        """Framework seen in the annotations (System Config's Framework row)."""
        found = self.correlated.markers
        if "pyprof" in found:
            return "PyTorch (pyprof annotations)"
        if "jlprof" in found:
            return "PyTorch (jlprof.torch annotations)"
        if "emit_nvtx" in found:
            return "PyTorch (emit_nvtx)"
        if self.mode == "pytorch":
            return "PyTorch"
        return ""

    # ---- reports -----------------------------------------------------------------------
    def report(
        self, name: str, iter_start: int | None = None, iter_stop: int | None = None
    ) -> pd.DataFrame:
        """One DLProf report as a DataFrame (the summary: one tidy frame of all its tables)."""
        from jlprof.reports import tables

        if name not in REPORTS:
            raise AnalysisError(f"unknown report {name!r}; choose from {', '.join(REPORTS)}.")
        lo, hi = self.range_of(iter_start, iter_stop)
        with heavy_stage():
            return tables.build(self, name, lo, hi)

    def summary(self, iter_start: int | None = None, iter_stop: int | None = None) -> dict:
        """The summary report's five tables, keyed by the guide's table names."""
        from jlprof.reports import tables

        lo, hi = self.range_of(iter_start, iter_stop)
        return tables.summary_tables(self, lo, hi)

    def write_reports(
        self,
        output_path: str | Path = ".",
        reports: list[str] | tuple[str, ...] = REPORTS,
        formats: list[str] | tuple[str, ...] = ("csv",),
        force: bool = False,
    ) -> list[Path]:
        """Write ``<profile_name>_<report>.<ext>`` files; existing files kept unless force."""
        from jlprof.reports.writers import write_reports

        return write_reports(self, Path(output_path), reports, formats, force)

    def save(self, path: str | Path) -> Path:
        """Save the normalised trace as a jlprof database for fast re-analysis."""
        from jlprof.engine.store import save_trace

        return save_trace(self.trace, path)

    # ---- display -----------------------------------------------------------------------
    def headline(self) -> dict[str, Any]:
        """The few numbers a person looks at first (used by the text/HTML reprs)."""
        s = self.summary()
        rep = s["Summary Report"]
        its = s["Iterations"]
        return {
            "source": str(self.trace.source or ""),
            "key_node": self.key_node,
            "iterations": int(its["Total Iterations"]),
            "range": (self.iter_start, self.iter_stop),
            "wall_ns": int(rep["Wall Clock Time (ns)"]),
            "gpu_util_pct": float(rep["GPU Utilization %"]),
            "tc_util_pct": float(rep["Tensor Core Kernel Utilization %"]),
            "avg_iter_ns": float(its["Average Iteration Time (ns)"]),
            "gpu_count": int(s["System Config"]["GPU Count"]),
        }

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
        # imported here: the engine never imports Jupyter at module level
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
    profile_name: str = "jlprof",
    progress: Callable[[str], None] | None = None,
    use_connectorx: bool | None = None,
) -> Profile:
    """Load an nsys export (.sqlite/.nsys-rep/.qdrep/.qdstrm) or a jlprof database.

    ``mode`` None: ``pytorch`` when the trace holds PyTorch markers (emit_nvtx, DLProf/PyProf
    plugin, ``jlprof.torch``), else ``simple``; a mode given always wins.
    """
    from jlprof.engine.store import read_any

    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"path must be a file path (str or Path), got {path!r}.")
    check_options(key_node, iter_start, iter_stop, domains, mode)  # before the (long) read
    path = Path(path)
    if path.suffix in (".nsys-rep", ".qdrep", ".qdstrm"):
        from jlprof.nsys import ensure_sqlite

        path = ensure_sqlite(path)
    # not a heavy stage: the reader's threads must trim their heaps as they free
    trace = read_any(path, use_connectorx=use_connectorx, progress=progress)
    return Profile(
        trace,
        key_node=key_node,
        iter_start=iter_start,
        iter_stop=iter_stop,
        domains=domains,
        mode=mode,
        profile_name=profile_name,
        progress=progress,
    )


__all__ = ["DEFAULT_KEY_NODES", "MODES", "REPORTS", "Profile", "load", "np"]
