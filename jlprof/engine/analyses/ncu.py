"""Nsight Compute's measured figures beside the trace's kernels (docs/kernels.md).

:func:`measured_frame` turns the per-launch rows of ``jlprof.nsys.ncu.measured_rows`` into a
frame; :func:`join` gives each profiled launch the trace's GPU row it measured: the k-th
profiled launch of a kernel (demangled name) is the k-th launch of that kernel in the trace,
in start order, counted among the launches inside the profiled launch's NVTX range where ncu
recorded one and the trace has that range. ncu profiles a subset (``--launch-skip``,
``--launch-count``), so a report taken with a skip joins correctly only with that skip given
(``skip``). :func:`per_kernel` averages the joined launches per kernel for the kernel report.

Before / after ``join`` (gpu rows 0..3 of kernels A, B, A, A; ncu profiled A twice)::

    launch kernel            launch kernel gpu_row
    0      A          ->     0      A      0
    1      A                 1      A      2
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

# columns of the kernel report the measured figures become (docs/kernels.md)
REPORT_COLUMNS = {
    "duration_ns": "Measured Duration (ns)",
    "sm_throughput_pct": "SM Throughput (%)",
    "memory_throughput_pct": "Memory Throughput (%)",
    "achieved_occupancy_pct": "Achieved Occupancy (%)",
    "tensor_pipe_pct": "Tensor Pipe (%)",
    "dram_bytes": "DRAM Bytes",
    "flops": "Measured FLOPs",
}
FIGURES = ("duration_ns", "sm_throughput_pct", "memory_throughput_pct",
           "achieved_occupancy_pct", "tensor_hmma_pct", "tensor_imma_pct", "tensor_pipe_pct",
           "dram_bytes", "flops")  # fmt: skip


def measured_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The measured launches as a frame (float figures, NaN where not collected)."""
    cols = ["launch", "kernel", "nvtx", *FIGURES, "grid_size", "block_size"]
    df = pd.DataFrame(list(rows), columns=cols)
    for c in (*FIGURES, "grid_size", "block_size"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    df["launch"] = df["launch"].astype(np.int64)
    return df


def join(
    measured: pd.DataFrame,
    gpu: pd.DataFrame,
    kernel_nvtx: pd.Series | None = None,
    skip: int = 0,
) -> pd.DataFrame:
    """``measured`` with ``gpu_row``: the trace's GPU row (``gpu``'s position) each launch
    measured, -1 where the trace has no such launch. ``kernel_nvtx``: per GPU row, the NVTX
    range names enclosing its launch joined by '/' (optional); ``skip``: launches of each kernel
    ncu skipped before profiling."""
    out = measured.copy()
    is_kernel = (gpu["kind"] == "kernel").to_numpy()
    rows = np.flatnonzero(is_kernel)
    order = rows[np.argsort(gpu["start_ns"].to_numpy()[rows], kind="stable")]
    names = gpu["long_name"].astype(object).to_numpy()[order]
    nvtx = None if kernel_nvtx is None else kernel_nvtx.astype(str).reset_index(drop=True)[order]
    in_range_of: dict[str, np.ndarray] = {}  # range name -> kernels (in order) inside it
    by_key: dict[tuple[str, str], list[int]] = {}
    taken: dict[tuple[str, str], int] = {}
    gpu_row = np.full(len(out), -1, dtype=np.int64)
    for i, (name, rng) in enumerate(zip(out["kernel"], out["nvtx"], strict=False)):
        inner = rng.split(";")[0].split("/")[-1] if rng and nvtx is not None else ""
        key = (name, inner)
        if key not in by_key:
            hit = names == name
            if inner:  # the range where the trace has it, else name and order alone
                if inner not in in_range_of:
                    pat = rf"(?:^|/){re.escape(inner)}(?:/|$)"
                    in_range_of[inner] = nvtx.str.contains(pat, regex=True).to_numpy(bool)
                in_range = hit & in_range_of[inner]
                hit = in_range if in_range.any() else hit
            by_key[key] = order[hit].tolist()
            taken[key] = skip
        k = taken[key]
        if k < len(by_key[key]):
            gpu_row[i] = by_key[key][k]
        taken[key] = k + 1
    out["gpu_row"] = gpu_row
    return out


def per_kernel(joined: pd.DataFrame, gpu: pd.DataFrame) -> pd.DataFrame:
    """Per kernel (``gpu['long_name']``'s category code): the mean of its joined launches'
    figures and ``launches`` (how many ncu measured), indexed by code."""
    j = joined[joined["gpu_row"] >= 0]
    if j.empty:
        return pd.DataFrame(columns=[*FIGURES, "launches"])
    codes = gpu["long_name"].cat.codes.to_numpy()[j["gpu_row"].to_numpy()]
    g = j[list(FIGURES)].groupby(codes)
    out = g.mean()
    out["launches"] = g.size().astype(np.int64)
    return out


COMPARED = ("duration_ns", "sm_throughput_pct", "memory_throughput_pct",
            "achieved_occupancy_pct", "tensor_pipe_pct", "dram_bytes", "flops")  # fmt: skip


def compare(base: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Two reports' measured figures side by side, per kernel (demangled name; base's kernels
    first, in base's order, then those only in new): launches and the mean of each figure in
    each report, and its change in % of base (NaN where either side lacks it or base is 0)."""
    names = list(dict.fromkeys([*base["kernel"], *new["kernel"]]))
    b = base.groupby("kernel", sort=False)[list(COMPARED)].mean().reindex(names)
    n = new.groupby("kernel", sort=False)[list(COMPARED)].mean().reindex(names)
    out = pd.DataFrame({"kernel": names})
    out["launches base"] = base["kernel"].value_counts().reindex(names).fillna(0).to_numpy(int)
    out["launches new"] = new["kernel"].value_counts().reindex(names).fillna(0).to_numpy(int)
    for fig in COMPARED:
        bv, nv = b[fig].to_numpy(float), n[fig].to_numpy(float)
        out[f"{fig} base"] = bv
        out[f"{fig} new"] = nv
        with np.errstate(divide="ignore", invalid="ignore"):
            out[f"{fig} change %"] = np.where(bv != 0, (nv - bv) / bv * 100.0, np.nan)
    return out


def tc_verdict(uses_tc_by_name: bool, tensor_pipe_pct: float | None) -> tuple[bool, str]:
    """Tensor Core use and how it was decided: ncu's tensor pipe (HMMA or IMMA) busy > 0
    ("measured"), else the kernel-name rule ("by name")."""
    if tensor_pipe_pct is None or np.isnan(tensor_pipe_pct):
        return bool(uses_tc_by_name), "by name"
    return bool(tensor_pipe_pct > 0), "measured"


__all__ = ["COMPARED", "FIGURES", "REPORT_COLUMNS", "compare", "join", "measured_frame",
           "per_kernel", "tc_verdict"]  # fmt: skip
