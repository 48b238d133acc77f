"""Inclusive per-range kernel totals: NVIDIA's ``nsys stats -r nvtxkernsum``, vectorised.

A kernel counts for *every* NVTX range on its launching thread that contains the launch
call (not only the innermost), exactly as NVIDIA's report does; ranges that ended on
another thread are left out, as there. This is the independent check of the engine's
correlation (DESIGN.md) and the group-node view's raw material.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jlprof.engine import schema
from jlprof.engine.correlate import NONE, Correlated, _innermost, _local_parent


def kernel_range_pairs(c: Correlated) -> tuple[np.ndarray, np.ndarray]:
    """(gpu row, range row) for every kernel and every same-thread range containing its call."""
    nv = c.nvtx
    g = c.gpu
    if nv is None or len(nv) == 0 or len(g) == 0:
        z = np.zeros(0, np.int64)
        return z, z
    lane = c.range_lane
    r_start = nv["start_ns"].to_numpy(np.int64)
    r_end = nv["end_ns"].to_numpy(np.int64)
    rows = np.flatnonzero(lane >= 0)
    parent_all = c.inst["parent"].to_numpy(np.int64)[: len(nv)]
    local_parent = _local_parent(parent_all, rows)
    kern = np.flatnonzero((g["kind"] == "kernel").to_numpy() & (g["api"].to_numpy() >= 0))
    api = g["api"].to_numpy(np.int64)[kern]
    a_tid = c.api["global_tid"].to_numpy(np.int64)[api]
    a_start = c.api["start_ns"].to_numpy(np.int64)[api]
    a_end = c.api["end_ns"].to_numpy(np.int64)[api]
    out_k, out_r = [], []
    tids = pd.Index(c.lane_tid)
    for d in np.unique(c.lane_dom):
        sel = np.flatnonzero(c.lane_dom == d)
        hit = pd.Index(c.lane_tid[sel]).get_indexer(a_tid)
        q_lane = np.where(hit >= 0, sel[np.maximum(hit, 0)], NONE)
        cand = _innermost(
            lane[rows], r_start[rows], r_end[rows], local_parent, q_lane, a_start, a_end
        )
        cur = cand
        idx = np.arange(len(kern))
        while True:
            ok = cur >= 0
            if not ok.any():
                break
            idx, cur = idx[ok], cur[ok]
            # ancestors in a lane contain their children; keep only true containers anyway
            inside = (r_start[rows[cur]] <= a_start[idx]) & (a_end[idx] <= r_end[rows[cur]])
            out_k.append(kern[idx[inside]])
            out_r.append(rows[cur[inside]])
            cur = local_parent[cur]
    del tids
    if not out_k:
        z = np.zeros(0, np.int64)
        return z, z
    return np.concatenate(out_k), np.concatenate(out_r)


def range_kernel_summary(c: Correlated) -> pd.DataFrame:
    """Rows like nvtxkernsum: NVTX Range, Style, PID, TID, NVTX Inst, Kern Inst, Total Time …"""
    cols = [
        "NVTX Range",
        "Style",
        "PID",
        "TID",
        "NVTX Inst",
        "Kern Inst",
        "Total Time (ns)",
        "Avg (ns)",
        "Med (ns)",
        "Min (ns)",
        "Max (ns)",
        "StdDev (ns)",
        "Kernel Name",
    ]
    k, r = kernel_range_pairs(c)
    nv = c.nvtx
    if len(k) == 0:
        return pd.DataFrame(columns=cols)
    same_thread_end = nv["end_global_tid"].to_numpy(np.int64)[r] < 0
    k, r = k[same_thread_end], r[same_thread_end]
    g = c.gpu
    dom = nv["domain"].astype(object).to_numpy()[r]
    text = nv["text"].astype(object).to_numpy()[r]
    name = np.where(dom != "", dom + ":" + text.astype(str), text)
    etype = nv["event_type"].to_numpy(np.int64)[r]
    style = np.where(
        np.isin(etype, (schema.NVTX_PUSH_POP, schema.NVTXT_PUSH_POP)), "PushPop", "StartEnd"
    )
    tid = nv["global_tid"].to_numpy(np.int64)[r]
    df = pd.DataFrame(
        {
            "NVTX Range": name,
            "Style": style,
            "PID": (tid >> 24) & 0xFFFFFF,
            "TID": tid & 0xFFFFFF,
            "range": r,
            "kernel": k,
            "dur": (g["end_ns"] - g["start_ns"]).to_numpy(np.int64)[k],
            "Kernel Name": g["long_name"].astype(object).to_numpy()[k],
        }
    )
    grp = df.groupby(["PID", "TID", "NVTX Range", "Style", "Kernel Name"], sort=False)
    out = grp.agg(
        nvtx_inst=("range", "nunique"),
        kern_inst=("kernel", "nunique"),
        total=("dur", "sum"),
        avg=("dur", "mean"),
        med=("dur", "median"),
        mn=("dur", "min"),
        mx=("dur", "max"),
        sd=("dur", "std"),
    ).reset_index()
    keys = ["PID", "TID", "NVTX Range", "Style", "Kernel Name"]
    out.columns = keys + [c for c in cols if c not in keys]
    out["StdDev (ns)"] = out["StdDev (ns)"].fillna(0.0)
    out = out.sort_values(
        ["NVTX Range", "PID", "TID", "Total Time (ns)"],
        ascending=[True, True, True, False],
        kind="stable",
    )
    return out[cols].reset_index(drop=True)
