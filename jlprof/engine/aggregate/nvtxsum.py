"""Inclusive per-range kernel totals: NVIDIA's ``nsys stats -r nvtxkernsum``, vectorised.

A kernel counts for *every* NVTX range on its launching thread that contains the launch
call (not only the innermost), exactly as NVIDIA's report does; ranges that ended on
another thread are left out, as there. This is the independent check of the engine's
correlation (DESIGN.md) and the group-node view's raw material.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jlprof.engine.correlate.correlate import NONE, Correlated
from jlprof.engine.correlate.ranges import _innermost, _local_parent
from jlprof.engine.read import schema


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
    # the next container of a call after container ``cur`` is open at cur's start: jump to the
    # nearest earlier range still open there, then skip ranges that end too early
    l_lane, l_start, l_end = lane[rows], r_start[rows], r_end[rows]
    opened = _open_before(l_lane, l_start, l_end, local_parent)
    out_k, out_r = [], []
    for d in np.unique(c.lane_dom):
        sel = np.flatnonzero(c.lane_dom == d)
        hit = pd.Index(c.lane_tid[sel]).get_indexer(a_tid)
        q_lane = np.where(hit >= 0, sel[np.maximum(hit, 0)], NONE)
        cur = _innermost(l_lane, l_start, l_end, local_parent, q_lane, a_start, a_end)
        idx = np.arange(len(kern))
        while True:
            ok = cur >= 0
            if not ok.any():
                break
            idx, cur = idx[ok], cur[ok]
            out_k.append(kern[idx])
            out_r.append(rows[cur])
            cur = _climb(opened[cur], a_end[idx], l_end, local_parent)
    if not out_k:
        z = np.zeros(0, np.int64)
        return z, z
    return np.concatenate(out_k), np.concatenate(out_r)


def _climb(x: np.ndarray, need_end: np.ndarray, end: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """From ranges ``x``, the nearest range at or before each (in nesting order) that ends at
    or after ``need_end``; ``parent`` must be :func:`~jlprof.engine.correlate.ranges._nest`'s
    pointer (every range strictly between ``parent[p]`` and ``p`` ends before ``end[p]``)."""
    x = x.copy()
    act = np.flatnonzero(x >= 0)
    while len(act):
        act = act[end[x[act]] < need_end[act]]
        x[act] = parent[x[act]]
        act = act[x[act] >= 0]
    return x


def _open_before(
    lane: np.ndarray, start: np.ndarray, end: np.ndarray, parent: np.ndarray
) -> np.ndarray:
    """Nearest earlier range of the same lane (order lane, start, -end) that is still open at
    each range's start (``end >= start``); -1 when none. For properly nested ranges this is
    the parent; with crossing start/end ranges it also finds containers that are not
    ancestors (A=[0,100], B=[50,150]: a call at 60 lies in both)."""
    n = len(lane)
    prev = np.full(n, NONE, dtype=np.int64)
    if n < 2:
        return prev
    order = np.lexsort((-end, start, lane))
    same = lane[order[1:]] == lane[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    return _climb(prev, start, end, parent)


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
    # names per unique (domain, text): pyprof texts are ~1 kB and pairs can be millions
    dom_cat, text_cat = nv["domain"].array, nv["text"].array
    n_text = len(text_cat.categories) + 1
    combo, uniq = pd.factorize(
        np.asarray(dom_cat.codes, np.int64)[r] * n_text + np.asarray(text_cat.codes, np.int64)[r]
    )
    doms = np.asarray(dom_cat.categories, dtype=object)[np.asarray(uniq) // n_text]
    texts = np.asarray(text_cat.categories, dtype=object)[np.asarray(uniq) % n_text]
    labels = [f"{d}:{t}" if d else str(t) for d, t in zip(doms, texts, strict=True)]
    lab_codes, lab_uniq = pd.factorize(np.asarray(labels, dtype=object))  # "a:b" may come twice
    name = pd.Categorical.from_codes(
        np.asarray(lab_codes, np.int32)[combo], categories=pd.Index(lab_uniq, dtype=object)
    )
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
            "Kernel Name": g["long_name"].array.take(k),
        }
    )
    grp = df.groupby(
        ["PID", "TID", "NVTX Range", "Style", "Kernel Name"], sort=False, observed=True
    )
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
    for col in ("NVTX Range", "Kernel Name"):
        out[col] = out[col].astype(object)
    out = out.sort_values(
        ["NVTX Range", "PID", "TID", "Total Time (ns)"],
        ascending=[True, True, True, False],
        kind="stable",
    )
    return out[cols].reset_index(drop=True)
