"""What each dashboard view shows, as plain frames computed from the Profile's reports and cube.

No Bokeh here: every function takes a Profile and an inclusive iteration range and returns
pandas/numpy data, so the numbers a view draws are tested against the engine's reports
without a browser. ``views`` only turns these frames into ColumnDataSource dicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from jlprof.engine.aggregate.aggregate import CATEGORIES
from jlprof.engine.aggregate.timeline import (  # the engine's timelines: re-exported for the views
    BINS_PER_LANE,
    MAX_KERNEL_GLYPHS,
    MAX_NVTX_GLYPHS,
    _first_hits,
    gpu_timeline,
    nvtx_timeline,
)
from jlprof.engine.analyses.outliers import excluded, iteration_outliers
from jlprof.reports import catalog
from jlprof.reports.expert import findings
from jlprof.reports.tables import (
    iterations_table,
    kernel_frame,
    measured_columns,
    op_frame,
    summary_report,
)

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

# Duration categories of the summary (guide §10.2), in the summary's priority order.
ITER_CATEGORIES = (*CATEGORIES, "other")
CATEGORY_LABELS = {
    "tc": "Tensor Core kernels",
    "non_tc": "non-TC kernels",
    "memory": "memory",
    "dataloader": "dataloader",
    "io": "I/O",
    "cpu": "CPU",
    "other": "other",
}


NO_KERNELS = "no GPU kernels in this capture — no CUDA on this machine?"


def why_no_kernels(p: Analysis) -> str:
    """Why every kernel view will be empty whatever the selection (``""``: kernels exist)."""
    gpu = p.correlated.gpu
    return "" if (gpu["kind"] == "kernel").any() else NO_KERNELS


def iterations(p: Analysis) -> pd.DataFrame:
    """One row per iteration: window, duration, the summary's categories (ns), outlier flag.

    Categories are the per-GPU priority partition of the iteration's wall time averaged over
    the visible GPUs, exactly as the summary's "... Duration %" rows average them, so the
    selected rows' sums over their wall time reproduce the summary's percentages.
    Outliers: slower than median + k scaled MADs of the complete iterations
    (``engine.analyses.outliers``); the partial first/last intervals are marked, never outliers.
    """
    it = p.iterations
    ti = p.cube.time_iter
    per_iter = ti.groupby(level="iteration", sort=True)[list(ITER_CATEGORIES)].mean()
    dur = it.durations_ns()
    out = pd.DataFrame(
        {
            "iteration": np.arange(it.count, dtype=np.int64),
            "start_ns": it.bounds_ns[:-1],
            "end_ns": it.bounds_ns[1:],
            "duration_ns": dur,
        }
    )
    for c in ITER_CATEGORIES:
        out[f"{c}_ns"] = per_iter[c].reindex(out["iteration"]).fillna(0.0).to_numpy()
    flags = iteration_outliers(it, 0, max(it.count - 1, 0))
    out["outlier"] = flags["outlier"].to_numpy(bool)
    out["partial"] = flags["partial"].to_numpy(bool)
    return out


@dataclass
class Headline:
    """The four cards: GPU util, TC util, mean ± std iteration time, iterations found."""

    gpu_util_pct: float
    tc_util_pct: float
    iter_mean_ns: float
    iter_std_ns: float
    iterations_found: int
    aggregated: int
    key_node: str | None
    partial_excluded: tuple[int, ...] = ()  # the partial intervals left out of mean ± std


def headline(p: Analysis, lo: int, hi: int) -> Headline:
    # the summary's own rows, without the three other tables it builds (~6 ms at 1M kernels)
    rep = summary_report(p, lo, hi)
    its = iterations_table(p, lo, hi)
    return Headline(
        gpu_util_pct=float(rep["GPU Utilization %"]),
        tc_util_pct=float(rep["Tensor Core Kernel Utilization %"]),
        iter_mean_ns=float(its["Average Iteration Time (ns)"]),
        iter_std_ns=float(its["Iteration Time Standard Deviation (ns)"]),
        iterations_found=int(its["Total Iterations"]),
        aggregated=int(its["Aggregated Iterations"]),
        key_node=p.key_node,
        partial_excluded=tuple(excluded(p.iterations, lo, hi)),
    )


def op_tree(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """The group-node hierarchy (guide §10.8) in depth-first order, with TC figures.

    Columns: path, name, depth, parent (path or ''), calls, gpu_ns, cpu_ns, tc_eligible_ops,
    tc_ops (from the group-node report), ordered so that each node follows its parent.
    """
    gn = catalog.report(p, "group_node", lo, hi)
    cols = ["path", "name", "depth", "parent", "calls", "gpu_ns", "cpu_ns"]
    cols += ["tc_eligible_ops", "tc_ops"]
    if gn.empty:
        return pd.DataFrame(columns=cols)
    info, parent_path = _path_info(p)
    row = info.index.get_indexer(gn["Name"])
    par = info["parent"].to_numpy(np.int64)[row]
    out = pd.DataFrame(
        {
            "path": gn["Name"].to_numpy(object),
            "name": info["name"].to_numpy(object)[row],
            "depth": info["depth"].to_numpy(np.int64)[row],
            "parent": np.where(par >= 0, parent_path[np.maximum(par, 0)], ""),
            "calls": gn["No. Calls Aggregated"].to_numpy(np.int64),
            "gpu_ns": gn["Total GPU Time (ns)"].to_numpy(np.int64),
            "cpu_ns": gn["Total CPU Time (ns)"].to_numpy(np.int64),
            "tc_eligible_ops": gn["No. TC Eligibility Ops"].to_numpy(np.int64),
            "tc_ops": gn["No. Node Ops Using TC"].to_numpy(np.int64),
        }
    )
    # paths sort depth-first when '/' sorts before every other character
    key = out["path"].str.replace("/", "\x00", regex=False)
    return out.iloc[np.argsort(key.to_numpy(), kind="stable")].reset_index(drop=True)


def _path_info(p: Analysis) -> tuple[pd.DataFrame, np.ndarray]:
    """Name, depth and parent row per path text (a path text may repeat: first kept), and
    every path row's text; once per profile (the hierarchy does not change with the range)."""
    paths = p.correlated.paths
    return p.once(
        "widgets.path_info",
        lambda: (paths.drop_duplicates("path").set_index("path"), paths["path"].to_numpy(object)),
    )


def ops_under(p: Analysis, node: str) -> set[str]:
    """Op IDs with an instance at ``node`` or below it in the hierarchy."""
    paths = p.correlated.paths["path"].astype(str)
    under = np.flatnonzero(((paths == node) | paths.str.startswith(node + "/")).to_numpy())
    inst = p.correlated.inst
    ops = np.unique(inst["op"].to_numpy(np.int64)[np.isin(inst["path"].to_numpy(), under)])
    return set(p.correlated.ops["op_id"].to_numpy(object)[ops].tolist())


def kernels(p: Analysis, lo: int, hi: int, node: str | None = None) -> pd.DataFrame:
    """The kernel report's rows (guide §10.5) with the columns the table shows, plus Calls;
    only ops under ``node`` if given.

    Built from the range's (kernel, op) frame directly: the full report also computes the API
    statistics and a second index to attach the call counts (~10 ms at 1M kernels), and the
    table shows neither; tests check these rows against the kernel report.
    """
    kf = kernel_frame(p, lo, hi)
    if kf.empty:
        return pd.DataFrame(columns=KERNEL_TABLE_COLUMNS)
    out = kernel_table_rows(kf)
    if p.ncu_kernels is not None:  # ncu measured: its verdict and figures (docs/kernels.md)
        m = measured_columns(p.ncu_kernels, kf)
        out["Uses TC"], out["TC Verdict"] = m["Uses TC"], m["TC Verdict"]
        for label in MEASURED_TABLE_COLUMNS:
            out[label] = m[label]
    if node:
        out = out[out["Op ID"].isin(ops_under(p, node))]
    order = np.argsort(-out["Total GPU Time (ns)"].to_numpy(), kind="stable")
    return out.iloc[order].reset_index(drop=True)


def kernel_table_rows(kf: pd.DataFrame) -> pd.DataFrame:
    """The kernel table's columns (guide §10.5 names) of a (kernel, op) frame, in its order."""
    calls = kf["calls"].to_numpy(np.int64)
    gpu = kf["gpu_sum"].to_numpy(np.int64)
    return pd.DataFrame(
        {
            "Kernel Name": kf["kernel_name"].to_numpy(object),
            "Op ID": kf["op_id"].to_numpy(object),
            "Op Name": kf["op_name"].to_numpy(object),
            "Uses TC": kf["uses_tc"].to_numpy(bool),
            "Calls": calls,
            "Total GPU Time (ns)": gpu,
            "Avg. GPU Time (ns)": np.round(gpu / np.maximum(calls, 1), 1),
            "Long Kernel Name": kf["long_kernel_name"].to_numpy(object),  # the identity
        }
    )


# the kernel report's measured columns the table shows when an ncu report is joined
MEASURED_TABLE_COLUMNS = [
    "Measured Duration (ns)", "SM Throughput (%)", "Memory Throughput (%)",
    "Achieved Occupancy (%)", "Tensor Pipe (%)", "DRAM Bytes",
]  # fmt: skip

KERNEL_TABLE_COLUMNS = [
    "Kernel Name", "Op ID", "Op Name", "Uses TC", "Calls", "Total GPU Time (ns)",
    "Avg. GPU Time (ns)", "Long Kernel Name",
]  # fmt: skip


def tensor_core(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """TC-eligible ops (and ops running TC kernels): TC / non-TC GPU time, TC utilisation.

    The tensor report's rows and figures without its kernel-name lists (which the chart does
    not show and which cost most of the report's time at 1M kernels), sorted by GPU time.
    """
    ops = op_frame(p, lo, hi)
    sel = ops[ops["tc_eligible"].to_numpy(bool) | (ops["tc_gpu_sum"] > 0).to_numpy()]
    gpu = sel["kernel_sum"].to_numpy(np.int64)
    tc = sel["tc_gpu_sum"].to_numpy(np.int64)
    out = pd.DataFrame(
        {
            "op": sel["op_id"].astype(str).to_numpy(object),
            "op_type": sel["op_type"].astype(str).to_numpy(object),
            "uses_tc": tc > 0,
            "gpu_ns": gpu,
            "tc_ns": tc,
            "non_tc_ns": gpu - tc,
            "tc_util_pct": np.round(np.where(gpu > 0, 100.0 * tc / np.maximum(gpu, 1), 0.0), 2),
        }
    )
    return out.sort_values("gpu_ns", ascending=False, kind="stable").reset_index(drop=True)


def hints(p: Analysis, lo: int, hi: int) -> list[dict[str, Any]]:
    """Expert findings (problem, recommendation, evidence, action) for the range."""
    return [
        {
            "detector": f.detector,
            "problem": f.problem,
            "recommendation": f.recommendation,
            "evidence": f.evidence,
            "action": f.action,
        }
        for f in findings(p, lo, hi)
    ]


#: most points of the GPU-metrics lane: samples beyond it are averaged into time bins
MAX_METRIC_POINTS = 2_000


def gpu_metrics_lane(p: Analysis, window_ns: tuple[int, int]) -> pd.DataFrame:
    """The timeline's GPU-metrics lane: nsys's samples in ``window_ns``, averaged over GPUs
    and into at most :data:`MAX_METRIC_POINTS` equal time bins (``ts_ns`` each bin's middle;
    SM active, Tensor active, DRAM read + write, % of peak). Empty without GPU metrics."""
    from jlprof.engine.analyses.gpu_metrics import figure_of
    from jlprof.reports.analyses import gpu_metrics_samples

    cols = ["ts_ns", "sm_active", "tensor_active", "dram_bw"]
    s = gpu_metrics_samples(p)
    a, b = int(window_ns[0]), int(window_ns[1])
    s = s[(s["ts_ns"] >= a) & (s["ts_ns"] <= b)]
    if s.empty:
        return pd.DataFrame(columns=cols)
    fig = np.array([figure_of(m)[0] for m in s["metric"]], dtype=object)
    one = (s.assign(figure=fig).groupby(["gpu", "ts_ns", "figure"])["value"].sum()
           .unstack("figure").reset_index())  # fmt: skip
    edges = np.linspace(a, b, MAX_METRIC_POINTS + 1)
    one["bin"] = np.clip(np.searchsorted(edges, one["ts_ns"].to_numpy(), "right") - 1, 0,
                         MAX_METRIC_POINTS - 1)  # fmt: skip
    means = one.groupby("bin").mean(numeric_only=True)
    out = pd.DataFrame({"ts_ns": (edges[means.index] + edges[means.index + 1]) / 2})
    for c in cols[1:]:
        out[c] = means[c].to_numpy(float) if c in means else np.nan
    return out


__all__ = [
    "BINS_PER_LANE",
    "MAX_KERNEL_GLYPHS",
    "MAX_NVTX_GLYPHS",
    "_first_hits",
    "gpu_timeline",
    "nvtx_timeline",
]
