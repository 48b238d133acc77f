"""Beyond DLProf: idle causes, launch statistics, outlier iterations, FLOPs and roofline.

Each report is a function ``(analysis, lo, hi) -> DataFrame`` like DLProf's (``tables``), so the
writers, ``--reports`` and ``Profile.report`` pick them up by name (``catalog.BUILDERS``):

``idle_causes``         per GPU and iteration: idle time and its causes (``engine.analyses.idle``)
``launch_stats``        per kernel: launch latency, queueing, launch-bound share, outliers
``iteration_outliers``  per iteration: duration, partial, robust z, outlier
                        (``engine.analyses.outliers``)
``roofline``            per op with modelled FLOPs: FLOP/s, B/s, intensity, roofline position
``gpu_metrics``         per GPU and iteration: nsys's sampled SM/Tensor active, DRAM bandwidth

The engine frames (whole profile, per key node) are cached on the analysis (``once``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from jlprof.engine.aggregate.aggregate import per_iteration
from jlprof.engine.analyses import flops as fl
from jlprof.engine.analyses.idle import CAUSE_LABELS, CAUSES, idle_causes
from jlprof.engine.analyses.launch import in_range, launch_summary, launches
from jlprof.engine.analyses.outliers import OUTLIER_K, iteration_outliers, partial_mask, steady
from jlprof.reports.roofline import op_roofline, profile_gpu
from jlprof.reports.tables import kernel_frame, op_frame, take_categorical

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis


def gpu_metrics_samples(p: Analysis) -> pd.DataFrame:
    """nsys's GPU metrics samples of the profile's export (``engine.analyses.gpu_metrics``; cached);
    empty for a profile with none, or one loaded from a jlprof database."""
    from jlprof.engine.analyses.gpu_metrics import COLUMNS, read_gpu_metrics

    def build() -> pd.DataFrame:
        src = getattr(p.trace, "source", None)
        if src is None or Path(src).suffix != ".sqlite" or not Path(src).is_file():
            return pd.DataFrame(columns=COLUMNS)
        return read_gpu_metrics(src)

    return p.once("gpu_metrics", build)


def gpu_metrics_report(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """One row per (GPU, iteration) of lo..hi with GPU metrics samples: their count and mean
    SM active, Tensor active and DRAM bandwidth (% of peak); no rows where none were recorded
    (``engine.analyses.gpu_metrics.UNAVAILABLE`` says why)."""
    from jlprof.engine.analyses.gpu_metrics import per_iteration

    return per_iteration(gpu_metrics_samples(p), p.iterations.bounds_ns, lo, hi)


def idle_frame(p: Analysis) -> pd.DataFrame:
    """The engine's per (lane, iteration) idle partition for the current key node (cached);
    a windowed profile's, summed window by window."""
    if p.window_idle is not None:
        return p.window_idle
    p.require_rows("the idle_causes report", ", or by windows with idle_causes=True")
    return p.once(f"idle:{p.key_node}", lambda: idle_causes(p.correlated, p.iterations))


def idle_report(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """One row per (GPU, iteration) of lo..hi; the cause columns sum to GPU Idle Time."""
    f = idle_frame(p)
    it = f.index.get_level_values("iteration").to_numpy()
    f = f[(it >= lo) & (it <= hi)]
    labels = p.gpu_labels or ["host"]
    lane = f.index.get_level_values("lane").to_numpy()
    iters = f.index.get_level_values("iteration").to_numpy()
    cols: dict[str, Any] = {
        "GPU": np.asarray(labels, object)[lane],
        "Iteration": iters.astype(np.int64),
        "Partial Interval": partial_mask(p.iterations)[iters],
        "Wall Time (ns)": f["wall"].to_numpy(np.int64),
        "GPU Busy Time (ns)": f["busy"].to_numpy(np.int64),
        "GPU Idle Time (ns)": f["idle"].to_numpy(np.int64),
    }
    for c in CAUSES:
        cols[f"{CAUSE_LABELS[c]} (ns)"] = f[c].to_numpy(np.int64)
    return pd.DataFrame(cols)


def idle_by_gpu(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """:func:`idle_report` summed over the iterations, one row per GPU, with % of idle time."""
    r = idle_report(p, lo, hi).drop(columns=["Iteration", "Partial Interval"])
    out = r.groupby("GPU", sort=False).sum().reset_index()
    idle = out["GPU Idle Time (ns)"].replace(0, np.nan)
    for c in CAUSES:
        name = CAUSE_LABELS[c]
        out[f"{name} %"] = (100.0 * out[f"{name} (ns)"] / idle).fillna(0.0).round(2)
    return out


def launch_frame(p: Analysis) -> pd.DataFrame:
    """Every traced kernel launch (``engine.analyses.launch.launches``), cached per key node;
    a windowed profile's, kept window by window."""
    if p.window_launches is not None:
        return p.window_launches
    p.require_rows("the launch_stats report", ", or by windows with launch_stats=True")
    return p.once(f"launches:{p.key_node}", lambda: launches(p.correlated, p.iterations))


def launches_in_range(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """The launches of iterations lo..hi with the range's outlier flag, and kernel names."""
    lf = in_range(launch_frame(p), lo, hi)
    names = p.kernel_flags["short_name"].to_numpy(object)
    lf["kernel_name"] = take_categorical(names, lf["kernel"].to_numpy())
    return lf


def launch_report(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Per kernel (demangled name), sorted by total launch latency."""
    lf = launches_in_range(p, lo, hi)
    long_names = p.correlated.gpu["long_name"].cat.categories.to_numpy(object)
    s = launch_summary(lf, long_names)
    short = p.kernel_flags["short_name"].to_numpy(object)
    n = s["launches"].to_numpy(np.float64)
    out = pd.DataFrame(
        {
            "Kernel Name": short[s["kernel"].to_numpy(np.int64)] if len(s) else [],
            "Launches": s["launches"].to_numpy(np.int64),
            "Avg. Launch Latency (ns)": s["latency_avg"].astype(float).round(1).to_numpy(),
            "Median Launch Latency (ns)": s["latency_med"].astype(float).round(1).to_numpy(),
            "P95 Launch Latency (ns)": s["latency_p95"].astype(float).round(1).to_numpy(),
            "Max Launch Latency (ns)": s["latency_max"].astype(np.int64).to_numpy(),
            "Avg. Queue Time (ns)": s["queue_avg"].astype(float).round(1).to_numpy(),
            "Avg. API Time (ns)": s["api_avg"].astype(float).round(1).to_numpy(),
            "Avg. Kernel Time (ns)": s["kernel_avg"].astype(float).round(1).to_numpy(),
            "Launch-Bound Launches": s["launch_bound"].astype(np.int64).to_numpy(),
            "Launch-Bound %": (100.0 * s["launch_bound"].to_numpy(np.float64) / np.maximum(n, 1))
            .round(2)
            .tolist(),
            "Latency Outliers": s["outliers"].astype(np.int64).to_numpy(),
            "Long Kernel Name": s["long_name"].to_numpy(object),
        }
    )
    total = out["Avg. Launch Latency (ns)"] * out["Launches"]
    return out.iloc[np.argsort(-total.to_numpy(), kind="stable")].reset_index(drop=True)


def outliers_report(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Per iteration of lo..hi: the robust outlier test (k and MAD scale in the columns)."""
    o = iteration_outliers(p.iterations, lo, hi)
    return pd.DataFrame(
        {
            "Iteration": o["iteration"],
            "Iteration Time (ns)": o["duration_ns"],
            "Partial Interval": o["partial"],
            "Median Iteration Time (ns)": o["median_ns"].round(1),
            "Scaled MAD (ns)": o["mad_ns"].round(1),
            "Outlier Threshold (ns)": o["threshold_ns"].round(1),
            "Robust Z": o["robust_z"].round(2),
            "Outlier": o["outlier"],
            "Rule": f"Iteration Time > median + {OUTLIER_K:g} x 1.4826 x MAD of the complete "
            "iterations; partial first/last intervals are never outliers",
        }
    )


def iteration_mean_std(p: Analysis, lo: int, hi: int) -> tuple[float, float, list[int]]:
    """Mean and population std of the iteration time over the complete iterations of lo..hi,
    and the partial intervals left out (see ``engine.analyses.outliers``)."""
    idx = steady(p.iterations, lo, hi)
    dur = p.iterations.durations_ns()[idx].astype(np.float64)
    left = sorted(set(range(lo, hi + 1)) - set(idx.tolist()))
    if not len(dur):
        return 0.0, 0.0, left
    return float(dur.mean()), float(dur.std()), left


def _sparse_median(op: np.ndarray, val: np.ndarray, n_ops: int, n: int) -> np.ndarray:
    """Per op 0..n_ops-1: the median of its values in ``val`` padded with zeros to ``n``
    samples (an op absent from an iteration spent 0 there). Sort + index arithmetic: no dense
    op x iteration matrix (pyprof traces have 10^4 ops, long runs 10^4 iterations)."""
    out = np.zeros(n_ops, dtype=np.float64)
    if n == 0 or len(op) == 0:
        return out
    order = np.lexsort((val, op))
    op_s, val_s = op[order], val[order]
    cnt = np.bincount(op_s, minlength=n_ops)
    start = np.concatenate([[0], np.cumsum(cnt)[:-1]])
    zeros = n - cnt  # values are >= 0: the zeros sort first

    def at(k: int) -> np.ndarray:
        j = k - zeros
        ok = (j >= 0) & (cnt > 0)
        v = np.zeros(n_ops, dtype=np.float64)
        v[ok] = val_s[start[ok] + j[ok]]
        return v

    out[:] = (at((n - 1) // 2) + at(n // 2)) / 2.0
    return out


def outlier_ops(p: Analysis, iteration: int, lo: int | None = None, hi: int | None = None):
    """Why ``iteration`` is slow: per op, its GPU and CPU time in that iteration against the
    op's median over the complete iterations of lo..hi (0 where the op did not run), the
    largest delta (GPU or CPU: a slow step may be host-bound) first. The deltas are what the
    iteration spent beyond a typical one."""
    lo, hi = p.range_of(lo, hi)
    ref = steady(p.iterations, lo, hi)
    oi = per_iteration(p.cube.op_iter)  # a range-only profile holds its range combined
    op = oi.index.get_level_values("op").to_numpy(np.int64)
    itn = oi.index.get_level_values("iteration").to_numpy(np.int64)
    in_ref = np.isin(itn, ref)
    in_target = itn == iteration
    ops_u, pos = np.unique(op[in_ref | in_target], return_inverse=True)
    local = np.full(len(op), -1, dtype=np.int64)
    local[in_ref | in_target] = pos
    out: dict[str, Any] = {}
    for name, c in (("GPU", "gpu_sum"), ("CPU", "cpu_sum")):
        v = oi[c].to_numpy(np.float64)
        med = _sparse_median(local[in_ref], v[in_ref], len(ops_u), len(ref))
        cur = np.zeros(len(ops_u), dtype=np.float64)
        cur[local[in_target]] = v[in_target]
        out[f"{name} Time (ns)"] = cur.astype(np.int64)
        out[f"Median {name} Time (ns)"] = med.round(1)
        out[f"Delta {name} Time (ns)"] = (cur - med).round(1)
    ops = p.correlated.ops
    frame = pd.DataFrame(
        {
            "Op ID": ops["op_id"].to_numpy(object)[ops_u],
            "Op Name": ops["op_name"].to_numpy(object)[ops_u],
            **out,
        }
    )
    worst = np.maximum(frame["Delta GPU Time (ns)"], frame["Delta CPU Time (ns)"])
    order = np.lexsort((-frame["Delta GPU Time (ns)"].to_numpy(), -worst.to_numpy()))
    return frame.iloc[order].reset_index(drop=True)


# ---- FLOPs and roofline ----------------------------------------------------------------


def _main_kernels(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Per op: its kernel with the most GPU time in lo..hi (the op's FLOPs are attributed to
    it: a GEMM op's GEMM kernel, not the small kernels around it), and that kernel's time."""
    kf = kernel_frame(p, lo, hi)  # the kernel report's (kernel, op) rows, shared memo
    if kf.empty:
        return pd.DataFrame(columns=["kernel", "gpu_sum"])
    f = pd.DataFrame(
        {
            "op": kf["op"].to_numpy(np.int64),
            "kernel": kf["kernel"].to_numpy(np.int64),
            "gpu_sum": kf["gpu_sum"].to_numpy(np.int64),
        }
    )
    f = f[f["op"] >= 0].sort_values(["op", "gpu_sum"], ascending=[True, False], kind="stable")
    return f.drop_duplicates("op").set_index("op")


def roofline_report(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Ops whose FLOPs or bytes are modelled (``engine.analyses.flops``), with their main kernel's
    rate."""
    df = op_frame(p, lo, hi)
    r = op_roofline(p, df)
    has = ~np.isnan(r["Total FLOPs"].to_numpy())
    df, r = df[has], r[has]
    mk = (
        _main_kernels(p, lo, hi).reindex(df.index)
        if has.any()
        else pd.DataFrame({"kernel": [], "gpu_sum": []}, index=df.index)
    )
    short = p.kernel_flags["short_name"].to_numpy(object)
    kidx = mk["kernel"].fillna(-1).to_numpy(np.int64)
    k_ns = mk["gpu_sum"].fillna(0).to_numpy(np.float64)
    with np.errstate(all="ignore"):
        k_rate = r["Total FLOPs"].to_numpy() / np.where(k_ns > 0, k_ns * 1e-9, np.nan) / 1e12
    out = pd.DataFrame(
        {
            "Op ID": df["op_id"].to_numpy(object),
            "Op Name": df["op_name"].to_numpy(object),
            "Direction": df["direction"].to_numpy(object),
            "Op Type": df["op_type"].to_numpy(object),
            "Model": [fl.op_kind(t) for t in df["op_type"].astype(str)],
            "No. Calls": df["calls"].to_numpy(np.int64),
            "Total GPU Time (ns)": df["gpu_sum"].to_numpy(np.int64),
            "Data Type": df["data_type"].to_numpy(object),
            "Input Shapes": df["input_shapes"].to_numpy(object),
            "GPU": profile_gpu(p),
        }
    )
    for c in r.columns:
        out[c] = r[c].to_numpy()
    out["Main Kernel"] = np.where(kidx >= 0, short[np.maximum(kidx, 0)], "")
    out["Main Kernel GPU Time (ns)"] = k_ns.astype(np.int64)
    out["Main Kernel TFLOP/s"] = k_rate
    out = out.round(4)
    return out.sort_values("Total GPU Time (ns)", ascending=False, kind="stable").reset_index(
        drop=True
    )


__all__ = [
    "idle_by_gpu",
    "idle_report",
    "iteration_mean_std",
    "launch_report",
    "launches_in_range",
    "outlier_ops",
    "outliers_report",
    "roofline_report",
]
