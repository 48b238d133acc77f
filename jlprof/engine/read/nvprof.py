"""nvprof databases (``nvprof -o net.sql``, also ``.nvvp``) read into the :class:`Trace` frames.

nvprof (CUDA <= 11, the V100 era; PyProf's first input) writes CUPTI's activity records as
SQLite tables, strings interned in ``StringTable(_id_, value)``:

============================================  =================================================
``CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL``     kernels (``_KERNEL`` when serialised): start, end,
                                              deviceId, streamId, correlationId, grid/block,
                                              ``name`` (string id of the **mangled** name)
``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET``  memory work (copyKind, bytes, srcKind/dstKind)
``CUPTI_ACTIVITY_KIND_RUNTIME`` / ``_DRIVER`` API calls: ``cbid`` (callback id, no name),
                                              processId, threadId, correlationId
``CUPTI_ACTIVITY_KIND_MARKER``                NVTX: one row per event; ``flags`` 2 start, 4
                                              end (paired on ``id``), 1 instant; ``name`` a
                                              string id (start rows); ``objectId`` 12 bytes:
                                              process id, thread id (uint32 LE each), pad
``CUPTI_ACTIVITY_KIND_MARKER_DATA``           an instant mark's payload (``payloadKind``,
                                              8 bytes) by ``id``
``CUPTI_ACTIVITY_KIND_DEVICE``                the GPUs (id, name, SMs, compute capability)
============================================  =================================================

The layout is the one PyProf's ``pyprof/parse/nvvp.py`` reads. A thread is packed as nsys
packs it (``pid << 24 | tid``, the low 24 bits of the thread id; threads whose low bits
collide get consecutive numbers instead, with a warning). API names come from the callback
ids (:data:`RUNTIME_CBIDS`, :data:`DRIVER_CBIDS`: CUPTI's ``cupti_*_cbid.h``); an id not
listed reads ``cudaRuntime_cbid_<n>`` / ``cuDriver_cbid_<n>``.
"""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

import numpy as np
import pandas as pd

from jlprof.engine.analyses.prof import short_name
from jlprof.engine.read import schema
from jlprof.engine.read.trace import (
    GPU_COLUMNS,
    MARK_COLUMNS,
    OSRT_COLUMNS,
    Trace,
    empty_frame,
)
from jlprof.errors import InputError

KERNEL_TABLES = ("CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL", "CUPTI_ACTIVITY_KIND_KERNEL")
MARKER = "CUPTI_ACTIVITY_KIND_MARKER"
START, END, INSTANT = 2, 4, 1  # CUPTI_ACTIVITY_FLAG_MARKER_*
RUNTIME_CBIDS = {
    10: "cudaGetLastError", 11: "cudaPeekAtLastError", 13: "cudaLaunch", 17: "cudaGetDevice",
    31: "cudaMemcpy", 32: "cudaMemcpy2D", 39: "cudaMemcpyToSymbol",
    40: "cudaMemcpyFromSymbol", 41: "cudaMemcpyAsync", 44: "cudaMemcpy2DAsync",
    47: "cudaMemcpyToSymbolAsync", 48: "cudaMemcpyFromSymbolAsync", 49: "cudaMemset",
    50: "cudaMemset2D", 51: "cudaMemsetAsync", 52: "cudaMemset2DAsync",
    126: "cudaThreadSynchronize", 131: "cudaStreamSynchronize", 137: "cudaEventSynchronize",
    144: "cudaMemcpy3D", 145: "cudaMemcpy3DAsync", 147: "cudaStreamWaitEvent",
    160: "cudaMemcpyPeer", 161: "cudaMemcpyPeerAsync", 165: "cudaDeviceSynchronize",
    211: "cudaLaunchKernel", 214: "cudaLaunchKernel_ptsz", 215: "cudaMemcpy_ptds",
    225: "cudaMemcpyAsync_ptsz", 233: "cudaMemset_ptds", 235: "cudaMemsetAsync_ptsz",
    239: "cudaStreamSynchronize_ptsz", 247: "cudaStreamWaitEvent_ptsz",
    269: "cudaLaunchCooperativeKernel", 270: "cudaLaunchCooperativeKernel_ptsz",
    272: "cudaLaunchCooperativeKernelMultiDevice", 284: "cudaLaunchHostFunc",
    310: "cudaGraphInstantiate", 317: "cudaStreamIsCapturing",
}  # fmt: skip
DRIVER_CBIDS = {
    17: "cuCtxSynchronize", 115: "cuLaunch", 116: "cuLaunchGrid", 117: "cuLaunchGridAsync",
    121: "cuEventSynchronize", 126: "cuStreamSynchronize", 216: "cuMemsetD8Async",
    220: "cuMemsetD32Async", 249: "cuMemsetD8_v2", 251: "cuMemsetD32_v2",
    276: "cuMemcpyHtoD_v2", 277: "cuMemcpyHtoDAsync_v2", 278: "cuMemcpyDtoH_v2",
    279: "cuMemcpyDtoHAsync_v2", 280: "cuMemcpyDtoD_v2", 281: "cuMemcpyDtoDAsync_v2",
    295: "cuStreamWaitEvent", 304: "cuCtxGetCurrent", 305: "cuMemcpy", 306: "cuMemcpyAsync",
    307: "cuLaunchKernel", 310: "cuPointerGetAttribute", 318: "cuMemcpyPeer",
    319: "cuMemcpyPeerAsync", 442: "cuLaunchKernel_ptsz", 477: "cuLaunchCooperativeKernel",
    514: "cuGraphLaunch", 652: "cuLaunchKernelEx",
}  # fmt: skip


def is_nvprof(path: Path) -> bool:
    """Whether ``path`` is an nvprof database (False for anything SQLite cannot open)."""
    try:
        if not path.is_file() or not schema.is_sqlite(path):
            return False
        conn = sqlite3.connect(schema.sqlite_uri(path), uri=True)
        try:
            return schema.is_nvprof_tables(schema.tables(conn))
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return False


def _rows(conn: sqlite3.Connection, tabs: set[str], table: str, cols: dict[str, str]) -> dict:
    """``{out: array}`` of ``table``'s columns (``cols``: out name -> SQL, '0' if absent)."""
    if table not in tabs:
        return {k: np.zeros(0, np.int64) for k in cols}
    have = set(schema.columns(conn, table))
    sel = [c if c in have or not c.isidentifier() else "0" for c in cols.values()]
    rows = conn.execute(f"SELECT {', '.join(sel)} FROM {table} ORDER BY _id_").fetchall()
    arr = list(zip(*rows, strict=True)) if rows else [()] * len(cols)
    return {k: np.array(v, dtype=np.int64) for k, v in zip(cols, arr, strict=True)}


def _thread_ids(pid: np.ndarray, tid32: np.ndarray) -> tuple[dict[tuple[int, int], int], bool]:
    """(pid, 32-bit thread id) -> nsys-style global tid; True when low bits collided."""
    keys = sorted(set(zip(pid.tolist(), tid32.tolist(), strict=True)))
    out: dict[tuple[int, int], int] = {}
    collided = False
    for p in sorted({k[0] for k in keys}):
        mine = [t for q, t in keys if q == p]
        low = [t & 0xFFFFFF for t in mine]
        if len(set(low)) < len(low):
            collided = True
            low = list(range(1, len(mine) + 1))
        for t, lo in zip(mine, low, strict=True):
            out[(p, t)] = ((p & 0xFFFFFF) << 24) | lo
    return out, collided


def _cat(values: list[str] | np.ndarray) -> pd.Categorical:
    """Strings as the nsys reader holds them: categories in first-seen order, object dtype."""
    v = np.asarray(values, dtype=object)
    cats = pd.Index(pd.unique(v), dtype=object)
    return pd.Categorical.from_codes(cats.get_indexer(v).astype(np.int32), categories=cats)


def read_nvprof(path: str | Path) -> Trace:
    """Every frame of :class:`Trace` from an nvprof database."""
    path = Path(path)
    try:
        conn = sqlite3.connect(schema.sqlite_uri(path), uri=True)
    except sqlite3.Error as exc:  # pragma: no cover - is_nvprof opened it already
        raise InputError(f"{path}: SQLite cannot open it ({exc}).") from exc
    try:
        return _read(conn, path)
    except sqlite3.DatabaseError as exc:
        raise InputError(
            f"{path} is damaged or truncated: SQLite cannot read it ({exc}). Record it again "
            "with nvprof -o."
        ) from exc
    finally:
        conn.close()


def _read(conn: sqlite3.Connection, path: Path) -> Trace:
    tabs = schema.tables(conn)
    strings = dict(conn.execute("SELECT _id_, value FROM StringTable").fetchall())
    warnings: list[str] = []

    api_cols = {"start": "start", "end": "end", "pid": "processId", "tid": "threadId",
                "corr": "correlationId", "cbid": "cbid"}  # fmt: skip
    rt = _rows(conn, tabs, "CUPTI_ACTIVITY_KIND_RUNTIME", api_cols)
    dr = _rows(conn, tabs, "CUPTI_ACTIVITY_KIND_DRIVER", api_cols)
    cls = np.concatenate(
        [np.zeros(len(rt["start"]), np.int64), np.ones(len(dr["start"]), np.int64)]
    )
    a = {k: np.concatenate([rt[k], dr[k]]) for k in api_cols}
    a_tid32 = a["tid"] & 0xFFFFFFFF

    mk = _rows(conn, tabs, MARKER, {"flags": "flags", "ts": "timestamp", "id": "id",
                                    "kind": "objectKind", "name": "name",
                                    "domain": "domain"})  # fmt: skip
    obj = (
        [r[0] for r in conn.execute(f"SELECT objectId FROM {MARKER} ORDER BY _id_")]
        if MARKER in tabs
        else []
    )
    m_pid = np.zeros(len(obj), np.int64)
    m_tid = np.zeros(len(obj), np.int64)
    for i, blob in enumerate(obj):
        if isinstance(blob, bytes) and len(blob) >= 8:
            m_pid[i], m_tid[i] = struct.unpack_from("<II", blob)

    tids, collided = _thread_ids(np.concatenate([a["pid"], m_pid]),
                                 np.concatenate([a_tid32, m_tid]))  # fmt: skip
    if collided:
        warnings.append("nvprof: two threads share the low 24 bits of their id; threads are "
                        "numbered 1, 2, ... in their process instead.")  # fmt: skip

    def gtid(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
        return np.array([tids[(p, t)] for p, t in zip(pid.tolist(), tid.tolist(), strict=True)],
                        dtype=np.int64)  # fmt: skip

    names = [
        (RUNTIME_CBIDS if c == 0 else DRIVER_CBIDS).get(
            b, f"cudaRuntime_cbid_{b}" if c == 0 else f"cuDriver_cbid_{b}"
        )
        for c, b in zip(cls.tolist(), a["cbid"].tolist(), strict=True)
    ]
    api = pd.DataFrame({
        "start_ns": a["start"], "end_ns": a["end"], "global_tid": gtid(a["pid"], a_tid32),
        "correlation_id": a["corr"], "name": _cat(names), "event_class": cls,
    }).sort_values("start_ns", kind="stable").reset_index(drop=True)  # fmt: skip
    corr_pid = dict(zip(a["corr"].tolist(), (api_pid := (a["pid"] & 0xFFFFFF) << 24).tolist(),
                        strict=True))  # fmt: skip
    default_pid = int(api_pid[0]) if len(api_pid) else 0

    gpu = _gpu(conn, tabs, strings, corr_pid, default_pid)
    nvtx, marks = _markers(conn, tabs, mk, m_pid, m_tid, gtid, strings)
    gpus = _devices(conn, tabs, strings)
    if not len(gpu):
        warnings.append("nvprof: no kernel, memcpy or memset in this database.")
    return Trace(
        gpu=gpu,
        api=api,
        nvtx=nvtx,
        marks=marks,
        osrt=empty_frame(OSRT_COLUMNS, ("name",)),
        gpus=gpus,
        meta={"Profiler": "nvprof"},
        source=path,
        warnings=warnings,
    )


def _gpu(conn, tabs, strings, corr_pid: dict[int, int], default_pid: int) -> pd.DataFrame:
    parts = []
    kcols = {"start": "start", "end": "end", "dev": "deviceId", "stream": "streamId",
             "corr": "correlationId", "gx": "gridX", "gy": "gridY", "gz": "gridZ",
             "bx": "blockX", "by": "blockY", "bz": "blockZ", "name": "name"}  # fmt: skip
    for t in KERNEL_TABLES:
        k = _rows(conn, tabs, t, kcols)
        if len(k["start"]):
            long = [strings.get(i, "") for i in k["name"].tolist()]
            parts.append(pd.DataFrame({
                "kind": "kernel", "start_ns": k["start"], "end_ns": k["end"],
                "device_id": k["dev"], "stream_id": k["stream"], "correlation_id": k["corr"],
                "name": [short_name(n) or n for n in long], "long_name": long,
                "grid_x": k["gx"], "grid_y": k["gy"], "grid_z": k["gz"], "block_x": k["bx"],
                "block_y": k["by"], "block_z": k["bz"], "bytes": 0, "pageable": 0,
            }))  # fmt: skip
            break  # CONCURRENT_KERNEL and KERNEL hold the same kernels when both exist
    m = _rows(conn, tabs, "CUPTI_ACTIVITY_KIND_MEMCPY", {
        "start": "start", "end": "end", "dev": "deviceId", "stream": "streamId",
        "corr": "correlationId", "kind": "copyKind", "bytes": "bytes", "src": "srcKind",
        "dst": "dstKind"})  # fmt: skip
    if len(m["start"]):
        label = [schema.MEMCPY_KIND_NAMES.get(c, "[CUDA memcpy Unknown]")
                 for c in m["kind"].tolist()]  # fmt: skip
        parts.append(pd.DataFrame({
            "kind": "memcpy", "start_ns": m["start"], "end_ns": m["end"], "device_id": m["dev"],
            "stream_id": m["stream"], "correlation_id": m["corr"], "name": label,
            "long_name": label, "bytes": m["bytes"],
            "pageable": ((m["src"] == 1) | (m["dst"] == 1)).astype(np.int64),
        }))  # fmt: skip
    s = _rows(conn, tabs, "CUPTI_ACTIVITY_KIND_MEMSET", {
        "start": "start", "end": "end", "dev": "deviceId", "stream": "streamId",
        "corr": "correlationId", "bytes": "bytes"})  # fmt: skip
    if len(s["start"]):
        parts.append(pd.DataFrame({
            "kind": "memset", "start_ns": s["start"], "end_ns": s["end"], "device_id": s["dev"],
            "stream_id": s["stream"], "correlation_id": s["corr"], "name": schema.MEMSET_NAME,
            "long_name": schema.MEMSET_NAME, "bytes": s["bytes"], "pageable": 0,
        }))  # fmt: skip
    if not parts:
        return empty_frame(GPU_COLUMNS, ("kind", "name", "long_name"))
    g = pd.concat(parts, ignore_index=True).sort_values("start_ns", kind="stable")
    g = g.reset_index(drop=True)
    g["global_pid"] = [corr_pid.get(c, default_pid) for c in g["correlation_id"].tolist()]
    for c in GPU_COLUMNS:
        if c not in g:
            g[c] = 0
    g = g[GPU_COLUMNS].copy()
    for c in GPU_COLUMNS:
        if c in ("kind", "name", "long_name"):
            g[c] = _cat(g[c].tolist())
        else:
            g[c] = g[c].fillna(0).astype(np.int64)
    return g


def _markers(
    conn, tabs, mk: dict, m_pid, m_tid, gtid, strings
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Ranges (start/end rows paired on ``id``) and instant marks."""
    n = len(mk["flags"])
    thread = gtid(m_pid, m_tid) if n else np.zeros(0, np.int64)
    text = np.array([strings.get(i, "") for i in mk["name"].tolist()], dtype=object)
    dom = np.array([strings.get(i, "") if i else "" for i in mk["domain"].tolist()], dtype=object)
    flags = mk["flags"]
    st = np.flatnonzero(flags == START)
    en = np.flatnonzero(flags == END)
    end_of = dict(zip(mk["id"][en].tolist(), en.tolist(), strict=True))
    last = int(mk["ts"].max()) if n else 0
    e_rows = np.array([end_of.get(i, -1) for i in mk["id"][st].tolist()], dtype=np.int64)
    closed = e_rows >= 0
    end_ns = np.where(closed, mk["ts"][np.maximum(e_rows, 0)], last)  # open: closed at the last
    end_tid = np.where(closed, thread[np.maximum(e_rows, 0)], thread[st])
    same = end_tid == thread[st]
    nvtx = pd.DataFrame({
        "start_ns": mk["ts"][st], "end_ns": end_ns, "global_tid": thread[st],
        "end_global_tid": np.where(same, -1, end_tid),
        "event_type": np.where(same, 59, 60).astype(np.int64),  # push/pop unless cross-thread
        "domain": _cat(dom[st].tolist()), "text": _cat(text[st].tolist()),
    }).sort_values("start_ns", kind="stable").reset_index(drop=True)  # fmt: skip
    inst = np.flatnonzero(flags == INSTANT)
    payload = _payloads(conn, tabs)
    ival = [payload.get(i, (np.nan, np.nan))[0] for i in mk["id"][inst].tolist()]
    dval = [payload.get(i, (np.nan, np.nan))[1] for i in mk["id"][inst].tolist()]
    marks = pd.DataFrame({
        "ts_ns": mk["ts"][inst], "global_tid": thread[inst], "domain": _cat(dom[inst].tolist()),
        "text": _cat(text[inst].tolist()), "int64_value": np.array(ival, dtype=np.float64),
        "double_value": np.array(dval, dtype=np.float64),
    })[MARK_COLUMNS]  # fmt: skip
    return nvtx, marks


def _payloads(conn, tabs) -> dict[int, tuple[float, float]]:
    """``id`` -> (integer, double) payload of CUPTI_ACTIVITY_KIND_MARKER_DATA (payloadKind
    0 double, 1 uint64, 4 int64)."""
    t = f"{MARKER}_DATA"
    if t not in tabs or not {"id", "payloadKind", "payload"} <= set(schema.columns(conn, t)):
        return {}
    out: dict[int, tuple[float, float]] = {}
    for i, kind, blob in conn.execute(f"SELECT id, payloadKind, payload FROM {t}"):
        if not isinstance(blob, bytes) or len(blob) < 8:
            continue
        if kind == 0:
            out[i] = (np.nan, struct.unpack_from("<d", blob)[0])
        elif kind in (1, 4):
            out[i] = (float(struct.unpack_from("<q" if kind == 4 else "<Q", blob)[0]), np.nan)
    return out


def _devices(conn, tabs, strings) -> pd.DataFrame:
    d = _rows(conn, tabs, "CUPTI_ACTIVITY_KIND_DEVICE", {
        "id": "id", "name": "name", "sm": "numMultiprocessors",
        "major": "computeCapabilityMajor", "minor": "computeCapabilityMinor"})  # fmt: skip
    return pd.DataFrame({
        "gpu_id": d["id"], "cu_device": d["id"],
        "name": [strings.get(i, "") for i in d["name"].tolist()], "sm_count": d["sm"],
        "compute_major": d["major"], "compute_minor": d["minor"],
    }).drop_duplicates("gpu_id").reset_index(drop=True)  # fmt: skip


__all__ = ["DRIVER_CBIDS", "RUNTIME_CBIDS", "is_nvprof", "read_nvprof"]
