"""Tiny hand-built Trace frames for unit tests of the stages after the reader."""

from __future__ import annotations

import numpy as np
import pandas as pd

from jlprof.engine.read.trace import (
    API_COLUMNS,
    GPU_COLUMNS,
    GPU_INFO_COLUMNS,
    MARK_COLUMNS,
    NVTX_COLUMNS,
    OSRT_COLUMNS,
    Trace,
    empty_frame,
)


def gtid(pid: int, tid: int | None = None) -> int:
    """globalTid as nsys packs it (vmId 1)."""
    return (1 << 48) | (pid << 24) | (pid if tid is None else tid)


def gpid(pid: int) -> int:
    return (1 << 48) | (pid << 24)


def _frame(rows: list[dict], columns: list[str], cats: tuple[str, ...], defaults: dict):
    if not rows:
        return empty_frame(columns, cats)
    df = pd.DataFrame([{**defaults, **r} for r in rows])
    for c in columns:
        if c in cats:
            df[c] = df[c].astype("category")
        else:
            df[c] = df[c].astype(np.int64)
    return df[columns]


def kernel(start, end, corr, pid=1, device=0, name="k", stream=7, kind="kernel", **kw) -> dict:
    return {
        "kind": kind,
        "start_ns": start,
        "end_ns": end,
        "correlation_id": corr,
        "global_pid": gpid(pid),
        "device_id": device,
        "name": name,
        "long_name": name,
        "stream_id": stream,
        **kw,
    }


def call(start, end, corr, pid=1, tid=None, name="cudaLaunchKernel") -> dict:
    return {
        "start_ns": start,
        "end_ns": end,
        "correlation_id": corr,
        "global_tid": gtid(pid, tid),
        "name": name,
    }


def rng(text, start, end, pid=1, tid=None, domain="", event_type=59, end_tid=-1) -> dict:
    return {
        "text": text,
        "start_ns": start,
        "end_ns": end,
        "global_tid": gtid(pid, tid),
        "domain": domain,
        "event_type": event_type,
        "end_global_tid": end_tid,
    }


def make_trace(gpu=(), api=(), nvtx=(), gpus=(), osrt=()) -> Trace:
    g = _frame(
        list(gpu),
        GPU_COLUMNS,
        ("kind", "name", "long_name"),
        {
            "grid_x": 1,
            "grid_y": 1,
            "grid_z": 1,
            "block_x": 1,
            "block_y": 1,
            "block_z": 1,
            "bytes": 0,
            "graph_node_id": 0,
            "pageable": 0,
            "stream_id": 7,
        },
    )
    a = _frame(list(api), API_COLUMNS, ("name",), {"event_class": 0})
    n = _frame(list(nvtx), NVTX_COLUMNS, ("domain", "text"), {})
    o = _frame(list(osrt), OSRT_COLUMNS, ("name",), {})
    gi = (
        pd.DataFrame(list(gpus), columns=GPU_INFO_COLUMNS)
        if gpus
        else empty_frame(GPU_INFO_COLUMNS)
    )
    return Trace(
        gpu=g, api=a, nvtx=n, marks=empty_frame(MARK_COLUMNS, ("domain", "text")), osrt=o, gpus=gi
    )


def gpu_info(cu_device: int, name: str = "NVIDIA A100") -> dict:
    return {
        "gpu_id": cu_device,
        "cu_device": cu_device,
        "name": name,
        "sm_count": 108,
        "compute_major": 8,
        "compute_minor": 0,
    }


def int64_layout(monkeypatch) -> None:
    """Make correlation and instance metrics keep every per-row column int64 (the layout
    before issue 18 narrowed them), to compare a narrowed run with."""
    from jlprof.engine.aggregate import aggregate
    from jlprof.engine.correlate import correlate, ranges

    monkeypatch.setattr(correlate, "index_dtype", lambda _n: np.int64)
    monkeypatch.setattr(ranges, "index_dtype", lambda _n: np.int64)  # range lanes, row indices
    monkeypatch.setattr(correlate, "narrow", lambda x: x)
    monkeypatch.setattr(aggregate, "narrow", lambda x: x)
