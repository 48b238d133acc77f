"""``Analysis``: the engine's answer to a query (key node, iteration range, domains).

It holds the correlated trace (read once) and caches one per-iteration cube per key
node, so changing the key node costs one cube build and changing the iteration range
costs a small group-by (see ``aggregate``). Reports are functions of an ``Analysis``;
:class:`jlprof.profile.Profile` adds the reports, files and widgets on top of it.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pandas as pd

from jlprof.engine.aggregate.aggregate import (
    Cube,
    InstanceMetrics,
    build_cube,
    check_held_range,
    instance_metrics,
    launch_iterations,
)
from jlprof.engine.aggregate.intervals import busy_ns_per_device
from jlprof.engine.aggregate.iterations import (
    DEFAULT_KEY_NODE,
    Iterations,
    find_iterations,
    key_node_instances,
    suggest_key_nodes,
)
from jlprof.engine.aggregate.step_evidence import StepEvidence
from jlprof.engine.correlate.correlate import Correlated, correlate
from jlprof.engine.correlate.kernel_names import telling_names
from jlprof.engine.memory import heavy_stage
from jlprof.engine.read.read import NO_NVTX_TABLE
from jlprof.engine.read.trace import Trace
from jlprof.errors import AnalysisError, OptionError

if TYPE_CHECKING:
    from jlprof.engine.windowed.cube_parts import CubeParts

# Tried in order when no key node is given: DLProf's default, then jlprof.torch's range.
DEFAULT_KEY_NODES = (DEFAULT_KEY_NODE, "optimizer_step")
MODES = ("simple", "pytorch", "tensorflow1", "tensorflow2", "tensorrt")
DEFAULT_PROFILE_NAME = "dlprof"  # DLProf's (guide §10.1.3): dlprof_summary.csv, ...


T = TypeVar("T")


def effective_mode(mode: str | None, markers: frozenset[str]) -> str:
    """The analysis mode: the one given, else ``pytorch`` where the trace holds PyTorch
    markers (DLProf's default), else ``simple``."""
    if mode is not None:
        return mode
    return "pytorch" if markers else "simple"


def check_options(key_node: Any, iter_start: Any, iter_stop: Any, domains: Any, mode: Any) -> None:
    """Types and values of the analysis options, checked before any trace is read; raises
    :class:`OptionError` (:class:`AnalysisError` for an unknown mode) instead of a raw
    ``TypeError`` later, and never truncates ``iter_start=1.7`` silently. ``mode`` None: from
    the trace (:class:`Analysis`)."""
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


def check_range(count: int, start: int | None, stop: int | None) -> tuple[int, int]:
    """The inclusive iteration range ``start..stop`` of ``count`` iterations (None: the
    first / the last), or an :class:`AnalysisError` saying what is wrong and what is allowed."""
    last = count - 1
    s = 0 if start is None else _whole(start, "iter_start")
    e = last if stop is None else _whole(stop, "iter_stop")
    if s < 0:
        raise AnalysisError(f"--iter_start {s} is negative; iterations are numbered from 0.")
    if s > last:
        raise AnalysisError(f"--iter_start {s} is past the last iteration ({last}); use 0..{last}.")
    if e < s:
        raise AnalysisError(
            f"--iter_stop {e} is before --iter_start {s}; the stop must be >= the start."
        )
    if e > last:
        raise AnalysisError(
            f"--iter_stop {e} is past the last iteration ({last}); use at most {last}."
        )
    return s, e


def resolve_key_node(c: Correlated, key_node: str | None) -> str | None:
    """The key node to split ``c`` at: ``key_node`` when some range is it (else an
    :class:`AnalysisError` naming candidates), or the first of :data:`DEFAULT_KEY_NODES`
    present, or None (the whole profile is one iteration)."""
    if key_node is not None:
        if len(key_node_instances(c, key_node)) == 0:
            cands = ", ".join(suggest_key_nodes(c)["op_name"].head(3))
            hint = f" Candidates: {cands}." if cands else ""
            if NO_NVTX_TABLE in c.trace.warnings:  # said here: this error ends the run
                hint = f" {NO_NVTX_TABLE[0].upper()}{NO_NVTX_TABLE[1:]}."
            raise AnalysisError(
                f"key node {key_node!r} is not an op name or op ID in this profile.{hint} "
                "See the detail report's Op Name / Op ID columns."
            )
        return key_node
    for name in DEFAULT_KEY_NODES:
        if len(key_node_instances(c, name)):
            return name
    return None


class Analysis:
    """A correlated trace aggregated per iteration; re-aggregates without re-reading."""

    # Nsight Compute's measured figures per kernel (``engine.analyses.ncu.per_kernel``), once a
    # report is joined (``Profile.attach_ncu``); the kernel report shows them
    ncu_kernels: pd.DataFrame | None = None

    def __init__(
        self,
        trace: Trace,
        *,
        key_node: str | None = None,
        iter_start: int | None = None,
        iter_stop: int | None = None,
        domains: list[str] | None = None,
        mode: str | None = None,
        profile_name: str = DEFAULT_PROFILE_NAME,
        progress: Callable[[str], None] | None = None,
        correlated: tuple[Correlated, InstanceMetrics] | None = None,
        range_only: bool = False,
        parts: CubeParts | None = None,
    ) -> None:
        """``correlated``: the correlation and instance figures when already computed (the
        windowed engine's, :mod:`jlprof.engine.windowed.windowed`), else computed here from
        ``trace``. ``range_only``: the reports are for ``iter_start..iter_stop`` alone (a
        command's), so the cube keeps that range's op and kernel figures combined instead of per
        iteration (``build_cube``'s ``only``: at 10M kernels 0.6 GB and 3 s less); the
        profile then answers that range alone and refuses any other. ``parts``: the cube's
        GPU figures summed by the windowed engine (with ``correlated``, whose GPU frame then
        has no rows, and ``range_only``)."""
        check_options(key_node, iter_start, iter_stop, domains, mode)
        say = progress or (lambda _m: None)
        self._cube_range: tuple[int, int] | None = None
        self.parts = parts
        self.trace = trace
        self.mode_given = mode is not None  # -m simple given: only the kernel report
        self.profile_name = profile_name
        self.domains = domains
        say("correlating GPU work, API calls and NVTX ranges")
        with heavy_stage():  # correlation and the first cube reuse each other's memory
            if correlated is None:
                self.correlated: Correlated = correlate(trace, domains, mode)
                self.metrics: InstanceMetrics = instance_metrics(self.correlated)
            else:
                self.correlated, self.metrics = correlated
            self.mode = effective_mode(mode, self.correlated.markers)
            self._cubes: dict[str | None, Cube] = {}
            # per (what, key node, range): small frames; str keys: per-profile orderings
            self._memo: dict[tuple | str, Any] = {}
            # reports already written while the trace was read (the windowed engine's
            # iteration report): their paths, by report name
            self.written_early: dict[str, list] = {}
            # the kernel launches the windowed engine kept for the launch_stats report
            # (engine.analyses.launch.launch_rows, window by window); None: not kept
            self.window_launches: pd.DataFrame | None = None
            # the idle_causes figures the windowed engine summed (engine.windowed.idle_parts),
            # for its one key node; None: not summed
            self.window_idle: pd.DataFrame | None = None
            self.key_node_given = key_node is not None
            say("finding iterations")
            self.key_node: str | None = self._resolve_key_node(key_node)
            if range_only:  # the range, from the key node's iterations, before the cube
                count = self.iterations.count
                self._cube_range = check_range(count, iter_start, iter_stop)
            else:
                # with the group-node partials: the summary's dashboard and the group_node
                # report need them, and built here they reuse the correlation's freed
                # memory. A command's (range_only) builds its cube on first use instead:
                # its iteration report then streams on one core from the start while the
                # cube and the other reports are built on the other
                self._build_cube(groups=True)
            self.iter_start, self.iter_stop = self._check_range(iter_start, iter_stop)

    # ---- key node and range -------------------------------------------------------------
    def _resolve_key_node(self, key_node: str | None) -> str | None:
        return resolve_key_node(self.correlated, key_node)

    def set_key_node(self, key_node: str | None) -> None:
        """Switch the key node (None: DLProf's default); resets the range to all iterations."""
        if self._cube_range is not None:
            lo, hi = self._cube_range
            raise AnalysisError(
                f"this profile keeps iterations {lo}..{hi} of key node {self.key_node!r} only "
                "(range_only: a command's reports); load it again for another key node."
            )
        self.key_node_given = key_node is not None
        self.key_node = self._resolve_key_node(key_node)
        self.iter_start, self.iter_stop = self._check_range(None, None)

    def set_range(self, iter_start: int | None, iter_stop: int | None) -> None:
        """Aggregate over iterations ``iter_start..iter_stop`` (inclusive)."""
        self.iter_start, self.iter_stop = self._check_range(iter_start, iter_stop)

    def _check_range(self, start: int | None, stop: int | None) -> tuple[int, int]:
        lo, hi = check_range(self.iterations.count, start, stop)
        check_held_range(self._cube_range, lo, hi)  # a range-only profile answers its own
        return lo, hi

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
        return self._cubes.get(self.key_node) or self._build_cube(groups=False)

    def ensure_cube(self, groups: bool = False) -> None:
        """Build the key node's cube now if it is not built (``groups``: its group-node
        partials too, beside its other parts on a small trace): a writer that knows which
        reports come calls this before them, rather than let the first report build it
        and the group-node report build its partials alone, last."""
        self._build_cube(groups)

    def _build_cube(self, groups: bool) -> Cube:
        """The current key node's cube, built once; ``groups``: its group-node partials too."""
        key = self.key_node
        cube = self._cubes.get(key)
        if cube is None:
            with heavy_stage():
                cube = build_cube(
                    self.correlated,
                    self.metrics,
                    self.iterations,  # found once: before the cube, or now
                    groups=groups,
                    only=self._cube_range,
                    # when the iteration report found them first (it may be reading them)
                    gpu_iter=self._memo.get(f"gpu_iter:{key}"),
                    parts=self.parts,
                )
            self._cubes[key] = cube
        elif groups:
            cube.group_iter  # noqa: B018
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
        from jlprof.engine.aggregate.aggregate import gpu_lanes

        if self.parts is not None:
            return self.parts.gpu_labels
        return self.once("labels", lambda: gpu_lanes(self.correlated)[1])

    @property
    def n_gpu_rows(self) -> int:
        """GPU activities in the profile (kernels, copies, memsets)."""
        return self.parts.n_gpu if self.parts is not None else len(self.correlated.gpu)

    def require_rows(self, what: str, other_way: str = "") -> None:
        """Refuse ``what`` on a profile read by windows (``parts``): it reads every GPU row,
        which such a profile does not keep. ``other_way``: a further way out, after the one
        every refusal names."""
        if self.parts is not None:
            raise AnalysisError(
                f"{what} reads every GPU row, which a profile read by windows does not keep: "
                f"load the trace whole (jlprof.load) for it{other_way}."
            )

    def busy_ns_per_device(self) -> dict[int, int]:
        """Summed GPU-work time per device id (int ns): the GPU rows', or the windows' sums
        when the rows are gone (``parts``). No rows: empty."""
        if self.parts is not None:
            return dict(self.parts.busy_ns)
        g = self.correlated.gpu
        return busy_ns_per_device(
            g["device_id"].to_numpy(np.int64),
            g["start_ns"].to_numpy(np.int64),
            g["end_ns"].to_numpy(np.int64),
        )

    @property
    def kernel_flags(self) -> pd.DataFrame:
        """Per distinct kernel (demangled-name code, as ``nsys stats -r gpukernsum`` tells
        kernels apart): uses_tc, is_memory and the short name shown beside it (one that tells
        the kernel, :mod:`~jlprof.engine.correlate.kernel_names`). Computed once, not per report; a
        verdict is never shared between namesakes."""

        def build() -> pd.DataFrame:
            g = self.correlated.gpu
            flags = raw(g)
            long_names = g["long_name"].cat.categories.to_numpy(object)
            flags["short_name"] = telling_names(flags["short_name"].to_numpy(object), long_names)
            return flags

        def raw(g: pd.DataFrame) -> pd.DataFrame:
            if self.parts is not None:  # the windows' partials: the rows are gone
                return self.parts.kernel_flags(g)
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

    def step_evidence(self, lo: int, hi: int) -> StepEvidence:
        """What the PyTorch checks read of iterations ``lo..hi``' GPU rows and calls
        (:mod:`~jlprof.engine.aggregate.step_evidence`): the windows' sums, or the whole
        trace's frames added as one batch."""
        if self.parts is not None:  # the windows': for the profile's one range
            ev = self.parts.evidence
            if (ev.lo, ev.hi) != (lo, hi):
                raise AnalysisError(
                    f"this profile was read by windows for iterations {ev.lo}..{ev.hi} alone"
                )
            return ev

        def build() -> StepEvidence:
            c = self.correlated
            g, a = c.gpu, c.api
            inst_op = c.inst["op"].to_numpy()  # narrow columns as they are: no 10M int64s
            inst = g["inst"].to_numpy()
            key = np.where(inst >= 0, inst_op[np.maximum(inst, 0)], -1)
            del inst
            ev = StepEvidence(self.iterations, lo, hi)
            ev.add(g, self.cube.gpu_iter, key, g["api"].to_numpy(), a, a["inst"].to_numpy())
            return ev.finish(None, inst_op)

        return self.memo("step_evidence", lo, hi, build)

    @property
    def iterations(self) -> Iterations:
        """The key node's iterations: the cube's, or found alone while it is not built."""
        cube = self._cubes.get(self.key_node)
        if cube is not None:
            return cube.iterations
        key = self.key_node
        return self.once(f"iterations:{key}", lambda: find_iterations(self.correlated, key))

    @property
    def gpu_iter(self) -> np.ndarray:
        """Each GPU row's launch iteration (the cube's ``gpu_iter``), found without building
        the cube when it is not built yet: the iteration report needs no more, and streams
        while the cube is built. The writers read it on their own thread before the stream
        starts, so the stream and the cube's builder never both compute it."""
        cube = self._cubes.get(self.key_node)
        if cube is not None:
            return cube.gpu_iter
        self.require_rows("each GPU row's launch iteration")
        it = self.iterations
        return self.once(
            f"gpu_iter:{self.key_node}", lambda: launch_iterations(self.correlated, it)
        )

    def suggest_key_nodes(self, limit: int = 5) -> pd.DataFrame:
        """Ops that look like iteration markers, best first (guide §12.3), by how they
        partition the instances' GPU time; ranked once per profile, cut per ``limit``."""
        ranked = self.once(
            "suggest_key_nodes",
            lambda: suggest_key_nodes(self.correlated, 1 << 30, self.metrics.gpu_ns),
        )
        return ranked.head(limit).reset_index(drop=True)

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


__all__ = [
    "DEFAULT_KEY_NODES",
    "DEFAULT_PROFILE_NAME",
    "MODES",
    "Analysis",
    "check_options",
    "check_range",
    "resolve_key_node",
]
