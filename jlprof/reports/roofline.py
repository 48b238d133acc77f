"""FLOPs and roofline columns of DLProf's op rows (``engine.analyses.flops``,
``engine.analyses.gpu_peaks``).

Shared by the detail report (columns appended after DLProf's) and the roofline report; it
imports no other report module, so ``tables`` can use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jlprof.engine.analyses import flops as fl
from jlprof.engine.analyses.gpu_peaks import gpu_peaks

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis


def profile_gpu(p: Analysis) -> str:
    """The CUDA device name the roofline uses: the GPU that ran the most GPU time."""
    return p.once("roofline_gpu", lambda: _busiest_gpu(p))


def _busiest_gpu(p: Analysis) -> str:
    gpus = p.trace.gpus
    if not len(gpus):
        return ""
    busy = p.busy_ns_per_device()
    if busy:
        hit = gpus[gpus["cu_device"].to_numpy(np.int64) == _busiest(busy)]
        if len(hit):
            return str(hit["name"].iloc[0])
    return str(gpus["name"].iloc[0])


def _busiest(busy: dict[int, int]) -> int:
    """The device with the most GPU-work time; a tie goes to the lowest device ID."""
    return max(sorted(busy), key=busy.__getitem__)


def op_roofline(p: Analysis, df: pd.DataFrame) -> pd.DataFrame:
    """FLOPs/bytes and roofline columns for the rows of an ``op_frame`` (same index)."""
    # per op, not per range: computed once for every op of the profile
    # the conv ops' stride, padding...: from their first range's text (the range pass's)
    ops = p.correlated.ops
    every = p.once("op_costs", lambda: fl.op_costs(ops, ops["conv_params"].to_numpy(object)))
    costs = every.iloc[df.index.to_numpy(np.int64)].set_axis(df.index)
    calls = df["calls"].to_numpy(np.float64)
    tflops = costs["flops"].to_numpy() * calls
    tbytes = costs["bytes"].to_numpy() * calls
    gpu_ns = df["gpu_sum"].to_numpy(np.float64)
    found = gpu_peaks(profile_gpu(p))
    tc = (df["tc_gpu_sum"] > 0).to_numpy(bool)
    dtype = costs["dtype"].to_numpy(object)
    # an fp32 op on Tensor Cores ran as TF32; an op off Tensor Cores gets the CUDA-core rate
    dt = np.where(tc & (dtype == "fp32"), "tf32", np.where(tc, dtype, "fp32"))
    if found is None:
        peak = np.full(len(df), np.nan)
        bw = np.nan
    else:
        table = {d: found[1].get(d, np.nan) for d in set(dt.tolist())}  # a few types
        peak = np.array([table[d] for d in dt], dtype=np.float64)
        bw = found[2]
    peak = np.where(np.isnan(costs["flops"].to_numpy()), np.nan, peak)
    r = fl.roofline(tflops, tbytes, gpu_ns, peak, bw)
    return pd.DataFrame(
        {
            "FLOPs per Call": costs["flops"].to_numpy(),
            "Bytes per Call": costs["bytes"].to_numpy(),
            "Total FLOPs": tflops,
            "Total Bytes": tbytes,
            "Achieved TFLOP/s": r["flops_per_s"].to_numpy() / 1e12,
            "Achieved GB/s": r["bytes_per_s"].to_numpy() / 1e9,
            "Arithmetic Intensity (FLOP/B)": r["intensity"].to_numpy(),
            "Roofline Data Type": np.where(np.isnan(costs["flops"].to_numpy()), "", dt),
            "Peak TFLOP/s": peak / 1e12,
            "Peak GB/s": np.where(np.isnan(peak), np.nan, bw / 1e9),
            "Roofline Bound": r["bound"].to_numpy(object),
            "Roofline %": r["roofline_pct"].to_numpy(),
        },
        index=df.index,
    )


def roofline_columns(p: Analysis, df: pd.DataFrame) -> dict[str, np.ndarray]:
    """The FLOPs/roofline columns the detail report appends after DLProf's (``op_frame`` rows)."""
    r = op_roofline(p, df).round(4)
    return {c: r[c].to_numpy() for c in r.columns}


__all__ = ["op_roofline", "profile_gpu", "roofline_columns"]
