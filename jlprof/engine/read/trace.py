"""The normalised trace: what the reader hands to the correlator.

Every nsys version is read into these frames (see ``jlprof.engine.read.schema`` for the
version differences), so nothing downstream ever looks at SQLite again. Times are
integer nanoseconds on the nsys session clock; strings are pandas categoricals.
Small-valued columns (marked ``int32*``) are int32 when the read finds every value in
range and int64 otherwise (a jlprof database saved before, or an out-of-range value): they
are held for the whole run, 4 bytes a row each saved. Read them with ``to_numpy(np.int64)``
where they enter arithmetic or a report (a report's column stays int64).

``gpu`` (one row per kernel, memcpy or memset)
    kind            category: ``kernel`` | ``memcpy`` | ``memset``
    start_ns, end_ns  int64
    device_id       int32* CUDA device ordinal as CUPTI saw it
    stream_id       int32*
    correlation_id  int32* unique per process only
    global_pid      int64 ``globalTid & 0xFFFFFFFFFF000000`` of the launching process
    name            category short kernel name (memcpy: ``[CUDA memcpy HtoD]`` as nsys names it)
    long_name       category demangled name (falls back to ``name``)
    grid_x … block_z  int32* (0 for memory work)
    bytes           int32* (0 for kernels)
    graph_node_id   int32* (0 when not launched from a CUDA graph)
    pageable        int32* 1 for a memcpy from/to pageable (unpinned) host memory, else 0

``api`` (CUDA runtime and driver calls)
    start_ns, end_ns, global_tid  int64
    correlation_id  int32*
    name            category, CUPTI version suffix (``_v7000``) stripped
    event_class     int32* 0 runtime, 1 driver

``nvtx`` (ranges: push/pop, start/end, NVTXT)
    start_ns, end_ns  int64 (open ranges closed at the last NVTX timestamp, as nsys stats does)
    global_tid      int64 thread that opened the range
    end_global_tid  int64 thread that closed it (-1 when the same / unknown)
    event_type      int32* 59 push/pop, 60 start/end, 70/71 NVTXT
    domain          category domain name ('' = default domain)
    text            category range text (``textId`` resolved through StringIds); read alone by
                    the windowed engine, its categories are Arrow strings (:func:`arrow_strings`)

``marks`` (NVTX instant markers, eventType 34): ts_ns, global_tid, domain, text, payload columns
``osrt`` (OS runtime calls, for the I/O category): start_ns, end_ns, global_tid, name
``gpus`` (TARGET_INFO_GPU, idle visible GPUs included): gpu_id, cu_device, name, …
``meta``: string facts (nsys versions, driver, CUDA, CPU model) for the System Config table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

GLOBAL_PID_MASK = -(1 << 24)  # 0xFFFFFFFFFF000000 as a signed int64, for numpy

GPU_COLUMNS = [
    "kind",
    "start_ns",
    "end_ns",
    "device_id",
    "stream_id",
    "correlation_id",
    "global_pid",
    "name",
    "long_name",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "bytes",
    "graph_node_id",
    "pageable",
]
API_COLUMNS = ["start_ns", "end_ns", "global_tid", "correlation_id", "name", "event_class"]
NVTX_COLUMNS = [
    "start_ns",
    "end_ns",
    "global_tid",
    "end_global_tid",
    "event_type",
    "domain",
    "text",
]
MARK_COLUMNS = ["ts_ns", "global_tid", "domain", "text", "int64_value", "double_value"]
OSRT_COLUMNS = ["start_ns", "end_ns", "global_tid", "name"]
GPU_INFO_COLUMNS = ["gpu_id", "cu_device", "name", "sm_count", "compute_major", "compute_minor"]


def arrow_strings(index: pd.Index):  # -> pyarrow.Array | None
    """The Arrow strings behind ``index`` when it holds them (``string[pyarrow]``: the range
    texts of the windowed engine's read, never a Python string per text), else None."""
    dtype = index.dtype
    if not isinstance(dtype, pd.ArrowDtype) or str(dtype.pyarrow_dtype) != "string":
        return None
    import pyarrow as pa

    return pa.array(index.array)  # its one chunk as it is (combined where more)


def empty_frame(columns: list[str], categorical: tuple[str, ...] = ()) -> pd.DataFrame:
    """A zero-row frame with the contract's columns and dtypes (missing table = no events)."""
    data = {
        c: pd.Categorical([]) if c in categorical else pd.Series([], dtype="int64") for c in columns
    }
    return pd.DataFrame(data)


@dataclass
class Trace:
    """All events of one nsys export, normalised; built by ``jlprof.engine.read.read``."""

    gpu: pd.DataFrame
    api: pd.DataFrame
    nvtx: pd.DataFrame
    marks: pd.DataFrame
    osrt: pd.DataFrame
    gpus: pd.DataFrame
    meta: dict[str, str] = field(default_factory=dict)
    source: Path | None = None
    warnings: list[str] = field(default_factory=list)
    #: the export's NVTX table as read (``NVTX_EVENTS_V3`` ...), "" when it has none; None when
    #: not read from an export (a saved database). Not saved: the log's, not the numbers'.
    nvtx_table: str | None = None
