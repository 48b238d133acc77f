"""Kernel launch statistics: how long each kernel waited between its launch call and its start.

Per kernel launched by a traced CUDA call (``gpu.api >= 0``), with nsys' own definitions
(``nsys stats -r kernexectrace``, 2022.4; ``cuda_kern_exec_trace`` in later versions):

``latency_ns``  kernel start - launch call start (the whole launch path, host and queue)
``queue_ns``    kernel start - launch call end, when positive, else 0 (nsys reports no queue
                time when a kernel starts before its call returns)
``api_ns``      the launch call's duration; ``kernel_ns`` the kernel's
``launch_bound``  the kernel ran shorter than its launch call took: the host cannot launch
                such kernels as fast as the GPU finishes them (HTA's "short kernels")
``outlier``     latency above the kernel's median + :data:`OUTLIER_K` scaled MADs of its
                launches in the range (:func:`in_range`)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jlprof.engine.aggregate.iterations import Iterations
from jlprof.engine.analyses.outliers import MAD_SCALE, MIN_SAMPLE, OUTLIER_K
from jlprof.engine.correlate.correlate import Correlated

# A launch is a latency outlier above its kernel's median + OUTLIER_K scaled MADs (the
# iteration rule of ``engine.analyses.outliers``: robust to the outliers themselves).


def launches(c: Correlated, it: Iterations) -> pd.DataFrame:
    """One row per traced kernel launch, in kernel start order: see the module docstring."""
    g_api = c.gpu["api"].to_numpy(np.int64)
    rows = np.arange(len(g_api), dtype=np.int64)
    return in_start_order([launch_rows(c.gpu, c.api, g_api, g_api, rows)], it)


def launch_rows(
    gpu: pd.DataFrame, api: pd.DataFrame, gpu_api: np.ndarray, call: np.ndarray, row: np.ndarray
) -> pd.DataFrame:
    """The traced kernel launches among ``gpu``'s rows, in their order, without iterations:
    the whole trace's, or one window's (the windowed engine keeps no GPU row past its
    window). ``gpu_api``: each GPU row's launching call in the whole trace (< 0: none);
    ``call``: that call's row in ``api``; ``row``: the GPU row's in the whole trace."""
    rows = np.flatnonzero((gpu["kind"] == "kernel").to_numpy(bool) & (gpu_api >= 0))
    gs = gpu["start_ns"].to_numpy(np.int64)[rows]
    ge = gpu["end_ns"].to_numpy(np.int64)[rows]
    ai = call[rows]
    a_s = api["start_ns"].to_numpy(np.int64)[ai]
    a_e = api["end_ns"].to_numpy(np.int64)[ai]
    names = api["name"]
    api_ns, kernel_ns = a_e - a_s, ge - gs
    return pd.DataFrame(
        {
            "gpu_row": row[rows],
            "kernel": gpu["long_name"].cat.codes.to_numpy(np.int64)[rows],
            "device_id": gpu["device_id"].to_numpy(np.int64)[rows],
            "api_start_ns": a_s,
            "start_ns": gs,
            "api_ns": api_ns,
            "kernel_ns": kernel_ns,
            "latency_ns": gs - a_s,
            "queue_ns": np.maximum(gs - a_e, 0),
            "api_name": pd.Categorical.from_codes(
                names.cat.codes.to_numpy()[ai], names.cat.categories
            ),
            "launch_bound": kernel_ns < api_ns,
        }
    )


def in_start_order(parts: list[pd.DataFrame], it: Iterations) -> pd.DataFrame:
    """:func:`launch_rows` parts as one frame in kernel start order (whole-trace row order
    among equal starts), each launch with the iteration it started in."""
    out = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
    order = np.lexsort((out["gpu_row"].to_numpy(), out["start_ns"].to_numpy()))
    out = out.take(order).reset_index(drop=True)
    out.insert(3, "iteration", it.of(out["start_ns"].to_numpy()))
    return out


def in_range(lf: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    """The launches of kernels starting in iterations lo..hi, with the ``outlier`` flag of
    that range: latency above the kernel's own median + k scaled MADs over the range (a
    kernel launched behind a long one always queues; that is its normal, not an outlier).
    Kernels launched fewer than MIN_SAMPLE times are never outliers."""
    it = lf["iteration"].to_numpy()
    out = lf[(it >= lo) & (it <= hi)].reset_index(drop=True)
    lat = out["latency_ns"].astype(np.float64)
    by = out["kernel"].to_numpy()
    med = lat.groupby(by).transform("median")
    mad = MAD_SCALE * (lat - med).abs().groupby(by).transform("median")
    n = lat.groupby(by).transform("size")
    out["outlier"] = ((lat > med + OUTLIER_K * mad) & (n >= MIN_SAMPLE)).to_numpy(bool)
    return out


def launch_summary(lf: pd.DataFrame, long_names: np.ndarray) -> pd.DataFrame:
    """Per kernel (demangled name) over the launches ``lf``: counts, latency and queue stats."""
    cols = [
        "kernel",
        "long_name",
        "launches",
        "latency_avg",
        "latency_med",
        "latency_p95",
        "latency_max",
        "queue_avg",
        "api_avg",
        "kernel_avg",
        "launch_bound",
        "outliers",
    ]
    if lf.empty:
        return pd.DataFrame(columns=cols)
    g = lf.groupby("kernel", sort=True)
    lat = g["latency_ns"]
    out = pd.DataFrame(
        {
            "launches": g.size(),
            "latency_avg": lat.mean(),
            "latency_med": lat.median(),
            "latency_p95": lat.quantile(0.95),
            "latency_max": lat.max(),
            "queue_avg": g["queue_ns"].mean(),
            "api_avg": g["api_ns"].mean(),
            "kernel_avg": g["kernel_ns"].mean(),
            "launch_bound": g["launch_bound"].sum(),
            "outliers": g["outlier"].sum(),
        }
    )
    out.insert(0, "long_name", np.asarray(long_names, object)[out.index.to_numpy()])
    out = out.reset_index()
    return out[cols]


__all__ = ["OUTLIER_K", "in_range", "in_start_order", "launch_rows", "launch_summary", "launches"]
