"""A DLProf report by name, and the headline figures: what :class:`jlprof.profile.Profile`,
the writers and the notebook summary ask for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from jlprof.engine.memory import heavy_stage
from jlprof.errors import AnalysisError
from jlprof.reports import ALIASES, REPORT_NAMES, analyses, prof, tables
from jlprof.reports.expert import run_all

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

BUILDERS = {
    "summary": tables.summary,
    "detail": tables.detail,
    "iteration": tables.iteration,
    "kernel": tables.kernel,
    "tensor": tables.tensor,
    "op_type": tables.op_type,
    "group_node": tables.group_node,
    "expert_systems": run_all,
    "idle_causes": analyses.idle_report,
    "launch_stats": analyses.launch_report,
    "iteration_outliers": analyses.outliers_report,
    "roofline": analyses.roofline_report,
    "gpu_metrics": analyses.gpu_metrics_report,
    "prof": prof.prof_report,
}


def report(
    p: Analysis, name: str, iter_start: int | None = None, iter_stop: int | None = None
) -> pd.DataFrame:
    """One DLProf report as a DataFrame (the summary: one tidy frame of all its tables)."""
    name = ALIASES.get(name, name)
    if name not in REPORT_NAMES:
        raise AnalysisError(f"unknown report {name!r}; choose from {', '.join(REPORT_NAMES)}.")
    lo, hi = p.range_of(iter_start, iter_stop)
    with heavy_stage():
        return BUILDERS[name](p, lo, hi)


def summary(p: Analysis, iter_start: int | None = None, iter_stop: int | None = None) -> dict:
    """The summary report's five tables, keyed by the guide's table names."""
    lo, hi = p.range_of(iter_start, iter_stop)
    return tables.summary_tables(p, lo, hi)


def headline(p: Analysis) -> dict[str, Any]:
    """The few numbers a person looks at first (used by the text/HTML reprs)."""
    s = summary(p)
    rep = s["Summary Report"]
    its = s["Iterations"]
    return {
        "source": str(p.trace.source or ""),
        "key_node": p.key_node,
        "iterations": int(its["Total Iterations"]),
        "range": (p.iter_start, p.iter_stop),
        "wall_ns": int(rep["Wall Clock Time (ns)"]),
        "gpu_util_pct": float(rep["GPU Utilization %"]),
        "tc_util_pct": float(rep["Tensor Core Kernel Utilization %"]),
        "avg_iter_ns": float(its["Average Iteration Time (ns)"]),
        "gpu_count": int(s["System Config"]["GPU Count"]),
    }
