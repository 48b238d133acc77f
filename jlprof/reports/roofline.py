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
    g = p.correlated.gpu
    gpus = p.trace.gpus
    if not len(gpus):
        return ""
    if len(g):
        busy = _busy_ns_per_device(
            g["device_id"].to_numpy(np.int64),
            g["start_ns"].to_numpy(np.int64),
            g["end_ns"].to_numpy(np.int64),
        )
        busiest = _busiest(busy)
        hit = gpus[gpus["cu_device"].to_numpy(np.int64) == busiest]
        if len(hit):
            return str(hit["name"].iloc[0])
    return str(gpus["name"].iloc[0])


def _busy_ns_per_device(
    dev: np.ndarray, start: np.ndarray, end: np.ndarray, rows: int = 1 << 20
) -> dict[int, int]:
    """Summed GPU-work time per device, exact (int ns), 1M rows at a time: at 10M kernels a
    whole-trace duration array and ``np.unique`` of the device column were ~0.5 GB."""
    busy: dict[int, int] = {}
    for a in range(0, len(dev), rows):
        d, dur = dev[a : a + rows], end[a : a + rows] - start[a : a + rows]
        for k in np.unique(d).tolist():  # a handful of devices, not rows
            busy[k] = busy.get(k, 0) + int(dur[d == k].sum())
    return busy


def _busiest(busy: dict[int, int]) -> int:
    """The device with the most GPU-work time; a tie goes to the lowest device ID."""
    return max(sorted(busy), key=busy.__getitem__)


def _conv_texts(p: Analysis) -> np.ndarray:
    """Per op: :func:`flops.conv_params` of its first instance's range text, for the conv ops
    only (a handful of texts decoded, not one per call)."""
    c = p.correlated
    ops = c.ops
    out = np.full(len(ops), "", dtype=object)
    conv = np.array([fl.op_kind(t) == "conv" for t in ops["op_type"].astype(str)], dtype=bool)
    if not conv.any() or c.nvtx is None or not len(c.nvtx):
        return out
    inst_op = c.inst["op"].to_numpy(np.int64)[: len(c.nvtx)]
    op_u, first = np.unique(inst_op, return_index=True)
    keep = (op_u >= 0) & conv[np.maximum(op_u, 0)]
    texts = c.nvtx["text"].to_numpy(object)
    for op, row in zip(op_u[keep].tolist(), first[keep].tolist(), strict=True):
        out[op] = fl.conv_params(str(texts[row]))
    return out


def op_roofline(p: Analysis, df: pd.DataFrame) -> pd.DataFrame:
    """FLOPs/bytes and roofline columns for the rows of an ``op_frame`` (same index)."""
    # per op, not per range: computed once for every op of the profile
    every = p.once("op_costs", lambda: fl.op_costs(p.correlated.ops, _conv_texts(p)))
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
