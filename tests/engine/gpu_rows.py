"""The windowed work pass's :class:`~jlprof.engine.windowed.windowed.GpuRows`, window by window,
beside the whole-trace analysis they must reproduce: for the tests of the cube's windowed parts."""

from __future__ import annotations

from dataclasses import dataclass

from jlprof.engine.aggregate.aggregate import InstanceMetrics
from jlprof.engine.analysis import Analysis
from jlprof.engine.correlate.correlate import Correlated
from jlprof.engine.correlate.ranges import range_pass
from jlprof.engine.read.read import read_trace
from jlprof.engine.windowed.windowed import GpuRows, WorkPass, assemble
from tests.engine.test_windowed import keyed_exports, windows_of


@dataclass
class Streamed:
    one: Analysis  # the whole-trace analysis (its cube: what the parts must give)
    wp: WorkPass  # spent by the assembly; its op_of_keys, n_r and n_range_ops still answer
    windows: list[GpuRows]  # in order
    c: Correlated  # the assembled correlation (final ids, ops, paths)
    m: InstanceMetrics


def stream(path, key: str | None, size: int, by: str = "iterations") -> Streamed:
    """Windows of ``size`` iterations (``by="iterations"``: whole iterations, as the windowed
    run cuts them) or of ``size`` API calls (``by="calls"``: windows that cut iterations)."""
    trace = read_trace(path)
    one = Analysis(trace, key_node=key)
    c, it = one.correlated, one.iterations
    wp = WorkPass(range_pass(c.nvtx, None), iterations=it)
    wins = windows_of(trace, c, size, it if by == "iterations" else None)
    got = [wp.add(w).rows for w in wins]
    c2, m2 = assemble(trace, c.nvtx, wp)
    return Streamed(one, wp, got, c2, m2)


def streams(tmp_path, sizes=((1, "iterations"), (3, "iterations"), (7, "calls"), (1000, "calls"))):
    """Every keyed export of ``keyed_exports`` (fixtures, the FSDP trace, two real traces) by
    each window size."""
    for path, key in keyed_exports(tmp_path, real=2):
        for size, by in sizes:
            yield path, key, size, by, stream(path, key, size, by)
