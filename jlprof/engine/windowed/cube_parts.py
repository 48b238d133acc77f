"""The cube's GPU figures summed window by window: no per-GPU-row column outlives its window.

The windowed engine (docs/windowed-engine.md) reads the API calls and GPU work a window at a
time. Everything the cube reads of the GPU rows is summed here as each window comes
(:meth:`CubeParts.add`, fed :class:`~jlprof.engine.windowed.windowed.GpuRows`), each part exact
against the whole-trace cube (its own tests):

- the per-kernel partials of the command's range, and the kernels' flags
  (:mod:`jlprof.engine.windowed.kernel_parts`);
- the group nodes' GPU unions per iteration (:mod:`jlprof.engine.windowed.group_parts`);
- the time partition per GPU and iteration (:mod:`jlprof.engine.windowed.time_parts`).

What each holds between windows is its aggregate and the work still in flight at the
window's horizon, never a row per GPU activity. The per-op partials are built from the
instances as before (:func:`~jlprof.engine.aggregate.aggregate.build_cube`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jlprof.engine.aggregate.aggregate import InstanceMetrics, lane_labels
from jlprof.engine.aggregate.intervals import busy_ns_per_device
from jlprof.engine.aggregate.iterations import Iterations
from jlprof.engine.aggregate.step_evidence import StepEvidence
from jlprof.engine.correlate.correlate import Correlated
from jlprof.engine.correlate.ranges import Ranges
from jlprof.engine.read.trace import Trace
from jlprof.engine.windowed.windowed import GpuRows
from jlprof.errors import AnalysisError


class CubeParts:
    """The cube's GPU parts for one key node and one range ``only`` = (lo, hi)."""

    def __init__(
        self,
        it: Iterations,
        only: tuple[int, int],
        *,
        ranges: Ranges,
        range_op: np.ndarray,
        range_path: np.ndarray,
        paths: pd.DataFrame,
        small: Trace,
        n_gpu: int,
        gpu_names: pd.Index,
    ) -> None:
        """``ranges``, ``range_op``: the range pass's (each range's op); ``range_path`` and
        ``paths``: each range's path in the range pass's path table, and that table
        (``windowed_run.ranges_correlated``); ``small``: the trace's frames but the API calls
        and GPU work (its OS runtime calls and GPUs are read); ``n_gpu``: the export's GPU
        rows; ``gpu_names``: ``Trace.gpu.name``'s categories (what the rows' codes index).

        Raises :class:`~jlprof.engine.windowed.group_parts.GroupPartsInexact` when the ranges' names
        could make the group nodes' windowed figures inexact (ranges named like jlprof's
        unassociated ops, ``unassociated_*``, with children): read the whole trace then."""
        from jlprof.engine.windowed.group_parts import GroupParts, GroupPartsInexact
        from jlprof.engine.windowed.kernel_parts import KernelParts
        from jlprof.engine.windowed.time_parts import TimeParts

        self.key_node = it.key_node
        self.n_gpu = n_gpu
        self.evidence = StepEvidence(it, *only)  # the PyTorch checks' (fed by the run)
        self.kernels = KernelParts(only=only)
        self.groups = GroupParts(paths, range_path, ranges.start_ns, it, ranges.ops, ranges.op_abs)
        if len(self.groups.risky):
            raise GroupPartsInexact(
                "ranges named like unassociated work (unassociated_*) hold other ranges"
            )
        self.gpu_names = gpu_names
        self.times = TimeParts.of_ranges(
            open_ended(it),
            small.gpus,
            small.osrt,
            ranges.start_ns,
            ranges.end_ns,
            ranges.lanes.parent,
            range_op,
            ranges.ops,
        )
        self.gpus = small.gpus
        self.busy_ns: dict[int, int] = {}  # per device id: its GPU rows' summed time
        self._op_of_key: np.ndarray | None = None

    def add(self, rows: GpuRows) -> None:
        """One window's GPU rows, in order."""
        self.kernels.add(rows)
        self.groups.add(rows, self.gpu_names)
        self.times.add(rows)
        for dev, ns in busy_ns_per_device(rows.device_id, rows.start_ns, rows.end_ns).items():
            self.busy_ns[dev] = self.busy_ns.get(dev, 0) + ns

    # ---- at the end (the cube's builder) ------------------------------------------------
    def kernel_iter(self, n_ops: int) -> pd.DataFrame:
        assert self._op_of_key is not None, "finish() first"
        return self.kernels.kernel_iter(self._op_of_key, n_ops)

    def kernel_flags(self, gpu: pd.DataFrame) -> pd.DataFrame:
        """``Analysis.kernel_flags`` (``gpu``: the profile's GPU frame, for its categories)."""
        return self.kernels.kernel_flags(
            gpu["name"].cat.categories, len(gpu["long_name"].cat.categories)
        )

    def time_iter(self, it: Iterations) -> pd.DataFrame:
        """The time partition over the profile's iterations ``it``: the windows' with the
        first and last iterations' outer edges at the profile's first and last event (known
        only now: the run found its iterations from the ranges alone, and GPU work or calls
        may lie outside every range). Every piece lies between those two events, so the
        windows' open-ended edges clipped nothing that these would keep."""
        inner = self.times.u.bounds[1:-1]
        if not np.array_equal(inner, it.bounds_ns[1:-1]):
            raise AnalysisError("the windows' iterations are not the profile's")
        self.times.durations = it.durations_ns()
        return self.times.time_iter()

    @property
    def gpu_labels(self) -> list[str]:
        """``Analysis.gpu_labels``: the export's GPUs, then the devices it does not list that
        GPU rows ran on, by id (``aggregate.gpu_lanes``)."""
        return lane_labels(self.gpus, sorted(self.times.unknown))

    def group_iter(
        self, c: Correlated, m: InstanceMetrics, it: Iterations, inst_iter: np.ndarray
    ) -> pd.DataFrame:
        return self.groups.group_iter(c, m, it, inst_iter)

    def finish(self, op_of_key: np.ndarray) -> None:
        """Every window is in: ``op_of_key`` maps the GPU rows' op keys to the final op rows
        (:meth:`~jlprof.engine.windowed.windowed.WorkPass.op_of_keys`)."""
        self._op_of_key = op_of_key
        self.groups.finish()


def open_ended(it: Iterations) -> Iterations:
    """``it`` with its first and last edges pushed out of any trace's times (kept apart from
    int64's ends, so that their differences do not overflow)."""
    bounds = np.asarray(it.bounds_ns, np.int64).copy()
    bounds[0] = min(int(bounds[0]), -(1 << 61))
    bounds[-1] = max(int(bounds[-1]), 1 << 61)
    return Iterations(key_node=it.key_node, bounds_ns=bounds, instances=it.instances)


__all__ = ["CubeParts", "open_ended"]
