"""nsys GPU metrics sampling (``--gpu-metrics-device``): SM active, Tensor active and DRAM
bandwidth sampled on the GPU itself, per iteration (docs/kernels.md, "GPU metrics").

Two export layouts exist, read by :func:`read_gpu_metrics` into one frame:

* up to nsys 2023.3: one row per sample in ``GENERIC_EVENTS`` (``data``: a JSON object of
  metric name → value), its ``typeId`` a type of the source named ``GpuMetrics`` in
  ``GENERIC_EVENT_SOURCES`` (``data``: JSON with ``Name``); one type per GPU;
* from 2023.4: ``GPU_METRICS(timestamp, typeId, metricId, value)``, the names in
  ``TARGET_INFO_GPU_METRICS(typeId, sourceId, typeName, metricId, metricName)``.

Metric names differ by nsys version and GPU (``SM Active`` / ``SMs Active [Throughput %]``,
``Tensor Active`` / ``Tensor Active / FP16 Active``, ``DRAM Read Bandwidth`` /
``DRAM Read Bandwidth [Throughput %]``): :data:`WANTED` matches them. All are percentages of
peak; DRAM bandwidth is read + write. A GPU is its ``typeId``: GPUs in the order their type
first appears (0, 1, ...), named by the type's name where the export has one.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

# jlprof's figure -> the metric names it is read from (a figure summed over several: DRAM)
WANTED = {
    "sm_active": (re.compile(r"SMs? Active( \[Throughput %\])?"),),
    "tensor_active": (re.compile(r"Tensor Active( / FP16 Active)?( \[Throughput %\])?"),),
    "dram_bw": (
        re.compile(r"DRAM Read Bandwidth( \[Throughput %\])?"),
        re.compile(r"DRAM Write Bandwidth( \[Throughput %\])?"),
    ),
}
LABELS = {"sm_active": "SM Active (%)", "tensor_active": "Tensor Active (%)",
          "dram_bw": "DRAM Bandwidth (%)"}  # fmt: skip
COLUMNS = ["gpu", "gpu_name", "ts_ns", "metric", "value"]
UNAVAILABLE = (
    "no GPU metrics in this profile: nsys samples them only when asked (--gpu_metrics true: "
    "nsys --gpu-metrics-device=all), on a Turing or newer GPU whose counters it may read"
)


def figure_of(name: str) -> tuple[str, int] | None:
    """(figure, part) a metric name feeds, or None for metrics jlprof does not show."""
    for fig, pats in WANTED.items():
        for i, pat in enumerate(pats):
            if pat.fullmatch(name.strip()):
                return fig, i
    return None


def read_gpu_metrics(path: str | Path) -> pd.DataFrame:
    """Every sample of the metrics in :data:`WANTED` (``COLUMNS``; ``metric`` is the export's
    name), either layout; empty when the export has none. Timestamps as nsys wrote them (ns)."""
    con = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if {"GPU_METRICS", "TARGET_INFO_GPU_METRICS"} <= tables:
            df = _new_layout(con)
        elif {"GENERIC_EVENTS", "GENERIC_EVENT_SOURCES", "GENERIC_EVENT_TYPES"} <= tables:
            df = _old_layout(con)
        else:
            df = pd.DataFrame(columns=COLUMNS)
    finally:
        con.close()
    return df


def _new_layout(con: sqlite3.Connection) -> pd.DataFrame:
    names = con.execute(
        "SELECT DISTINCT typeId, metricId, metricName, typeName FROM TARGET_INFO_GPU_METRICS"
    ).fetchall()
    keep = {(t, m): (n, tn) for t, m, n, tn in names if figure_of(n) is not None}
    if not keep:
        return pd.DataFrame(columns=COLUMNS)
    rows = con.execute(
        "SELECT typeId, timestamp, metricId, value FROM GPU_METRICS "
        "WHERE timestamp IS NOT NULL ORDER BY timestamp"
    ).fetchall()
    types = _type_order([t for t, *_ in names])
    out = [(types[t], keep[(t, m)][1], ts, keep[(t, m)][0], float(v))
           for t, ts, m, v in rows if (t, m) in keep]  # fmt: skip
    return pd.DataFrame(out, columns=COLUMNS)


def _old_layout(con: sqlite3.Connection) -> pd.DataFrame:
    sources = [sid for sid, data in con.execute("SELECT sourceId, data FROM GENERIC_EVENT_SOURCES")
               if _json(data).get("Name") == "GpuMetrics"]  # fmt: skip
    types = {tid: _json(data).get("Name", "") for tid, sid, data in
             con.execute("SELECT typeId, sourceId, data FROM GENERIC_EVENT_TYPES")
             if sid in sources}  # fmt: skip
    if not types:
        return pd.DataFrame(columns=COLUMNS)
    order = _type_order(list(types))
    out = []
    q = ("SELECT typeId, coalesce(timestamp, rawTimestamp), data FROM GENERIC_EVENTS WHERE "
         f"typeId IN ({','.join('?' * len(types))}) ORDER BY 2")  # fmt: skip
    for tid, ts, data in con.execute(q, list(types)):
        for name, v in _json(data).items():
            if figure_of(name) is None:
                continue
            try:
                out.append((order[tid], types[tid], ts, name, float(v)))
            except (TypeError, ValueError):
                continue
    return pd.DataFrame(out, columns=COLUMNS)


def _json(text: str) -> dict:
    try:
        v = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return v if isinstance(v, dict) else {}


def _type_order(type_ids: list[int]) -> dict[int, int]:
    """typeId → GPU index, in the order the types first appear."""
    return {t: i for i, t in enumerate(dict.fromkeys(type_ids))}


def per_iteration(samples: pd.DataFrame, bounds_ns: np.ndarray, lo: int, hi: int) -> pd.DataFrame:
    """Per GPU and iteration lo..hi (``bounds_ns``: the K+1 iteration edges): the number of
    samples and the mean of each figure over the samples taken in the iteration (uniform
    sampling: the time average), DRAM as read + write. A figure with no sample: NaN."""
    cols = ["GPU", "Iteration", "Samples", *LABELS.values()]
    if samples.empty:
        return pd.DataFrame(columns=cols)
    s = samples.copy()
    fig = [figure_of(m) for m in s["metric"]]
    s["figure"] = [f[0] for f in fig]
    s["iteration"] = np.searchsorted(bounds_ns[1:-1], s["ts_ns"].to_numpy(np.int64), "right")
    inside = (s["ts_ns"] >= bounds_ns[0]) & (s["ts_ns"] <= bounds_ns[-1])
    s = s[inside & (s["iteration"] >= lo) & (s["iteration"] <= hi)]
    # one value per (GPU, timestamp, figure): DRAM read and write summed
    per_ts = s.groupby(["gpu", "iteration", "ts_ns", "figure"], sort=True)["value"].sum()
    means = per_ts.groupby(level=["gpu", "iteration", "figure"]).mean().unstack("figure")
    counts = s.groupby(["gpu", "iteration"])["ts_ns"].nunique()
    out = pd.DataFrame({"GPU": means.index.get_level_values(0).astype(np.int64),
                        "Iteration": means.index.get_level_values(1).astype(np.int64),
                        "Samples": counts.reindex(means.index).to_numpy(np.int64)})  # fmt: skip
    for key, label in LABELS.items():
        out[label] = means[key].to_numpy(float) if key in means else np.nan
    return out.reset_index(drop=True)


__all__ = ["COLUMNS", "LABELS", "UNAVAILABLE", "WANTED", "figure_of", "per_iteration",
           "read_gpu_metrics"]  # fmt: skip
