"""The launch plan and windowed reads: API calls by rowid windows, each with its GPU work.

The windowed engine (docs/windowed-engine.md) works on the CUDA API calls window by window,
each window with the GPU rows its calls launched, so no pass holds every row of every column.
:func:`plan_windows` makes one narrow pass over the export and fixes, for the whole run:

* **API windows**: window ``w`` is the API table's rows ``w * calls_per_window`` up to the
  next window's first row, in read (rowid) order: plain row ranges, whatever the calls' times.
  An export without API calls has one window, holding no calls.
* **Each GPU row's launch window** (``LaunchPlan.window``, in ``Trace.gpu``'s row order:
  kernels, then memcpy, then memset rows, each table in read order): the window of its
  launching call, by correlate's rule (the first call in read order with the same
  correlation id, masked to 40 bits, in the same process; GPU rows with a negative
  correlation id have none). A GPU row with no launching call goes to the window whose
  calls' time span holds its start: the last window whose earliest call starts at or before
  it (the first window when it starts before every window's calls).
* ``isolated`` per GPU row (:func:`intervals.isolated` over all GPU rows: a global property,
  exactly what correlate computes), one byte a row.
* The frames' dtypes and categories: the whole read decides int32 against int64 from a whole
  column and orders categories by first sight in the whole table, so the plan decides both
  (``api_template``, ``gpu_template``: empty frames) and every window's frames carry them.

:class:`WindowReader` (:func:`read_window` for one window) then reads window ``w``: its API
rows by one rowid range and the GPU rows of its launch window with every column of
``Trace.api`` / ``Trace.gpu``, plus their rows' indices in the whole read. Frames equal the
whole :func:`~jlprof.engine.read.read.read_trace` frames at those indices: values, dtypes,
categories and codes, with connectorx or ``sqlite3`` alike.

GPU rows are read by rowid spans and filtered: a window's GPU rows are nearly contiguous in
their table (GPU work runs shortly after its launch). A window's rows of one table are split
where two are more than :data:`SPAN_GAP` rows apart; a piece of at least :data:`SPAN_MIN` rows
that fills at least half of its rowid span is read as that span, every other row (stragglers:
work without a launching call, late copies) by one ``rowid IN (...)`` list. So no window reads
more than twice the GPU rows it keeps; ``WindowReader.gpu_rows_read`` / ``gpu_rows_kept``
give the measured ratio.

The plan's narrow reads go by rowid chunks of :data:`CHUNK_ROWS` (ids, correlation ids,
processes, times; kernel name ids and copy kinds for the categories), the GPU tables' in a
thread beside the API table's; whether a narrowed GPU column fits int32 comes from a SQL
scan of the columns not read that looks for a row where one does not (:func:`_fits_int32`),
in a third thread. At 10M kernels the plan peaks at ~0.7 GB (``intervals.isolated`` over
every GPU row's times) and keeps ~0.1 GB: per GPU row its window (int32), ``launched``,
``isolated`` and its place in ``gpu_order`` (int32). A window's read holds one window's
frames (~0.35 GB at 1M calls). Within a window the API calls are read in a thread of their
own while the GPU rows are read.
"""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from jlprof.engine.aggregate import intervals
from jlprof.engine.memory import release_reader_memory, small_pages
from jlprof.engine.read import schema
from jlprof.engine.read.narrow import INT32, index_dtype
from jlprof.engine.read.read import (
    _API,
    _GPU_TABLES,
    _NARROW,
    _NVTX,
    API_CATEGORICAL,
    GPU_CATEGORICAL,
    UNKNOWN_KERNEL,
    StringTable,
    _api_names,
    _concat_cats,
    _connect,
    _const_cat,
    _event_selects,
    _Fetcher,
    _gpu_frame,
    _gpu_part,
    _int,
    _memcpy_names,
    _memset_names,
    _read_api,
    _read_strings,
    _Select,
    damaged,
    open_export,
    rowid_range,
)
from jlprof.engine.read.trace import API_COLUMNS, GLOBAL_PID_MASK, GPU_COLUMNS, empty_frame
from jlprof.errors import InputError

CHUNK_ROWS = 1 << 18  # rowids a narrow read of the plan covers (~10 MB a column at most)
SPAN_GAP = 32  # a window's GPU rows further apart than this are read by separate pieces
SPAN_MIN = 8  # fewer of a window's rows than this in a piece: read by rowid list
LIST_MAX = 20_000  # rowids in one ``IN (...)`` list
_CORR_MASK = (1 << 40) - 1  # correlation ids as correlate compares them


@dataclass(frozen=True)
class TableRows:
    """One table's rows in read order: the rowid of each row position."""

    table: str
    n: int
    base: int  # rowid of row 0
    rowids: np.ndarray | None = None  # every row's rowid; None when they are base, base + 1, ...

    def rowid(self, pos: np.ndarray | int) -> np.ndarray:
        """Rowids of row positions ``pos``."""
        if self.rowids is None:
            return np.asarray(pos, np.int64) + self.base
        return self.rowids[pos]

    def position(self, rowid: np.ndarray) -> np.ndarray:
        """Row positions of the table's ``rowid`` values."""
        rowid = np.asarray(rowid, np.int64)
        if self.rowids is None:
            return rowid - self.base
        return np.searchsorted(self.rowids, rowid)


@dataclass(frozen=True)
class GpuTable:
    """A GPU activity table of the plan: its rows, its kind and its first row in ``Trace.gpu``."""

    rows: TableRows
    kind: str
    offset: int


@dataclass
class LaunchPlan:
    """What the windowed reads need, fixed once for the whole export (see the module doc)."""

    path: Path
    use_connectorx: bool | None
    calls_per_window: int
    n_windows: int
    api: TableRows | None  # None: no CUDA API table
    gpu_tables: list[GpuTable]
    window: np.ndarray | None  # per GPU row (Trace.gpu order): its launch window, int32
    # (None once the windows' order is all a run reads: WindowedRun lets it go)
    n_gpu: int  # GPU rows of the export (Trace.gpu's)
    launched: np.ndarray  # per GPU row: True when a call launched it (bool)
    isolated: np.ndarray  # per GPU row: intervals.isolated over all GPU rows (bool)
    window_start_ns: np.ndarray  # per window: its earliest call's start (int64; none: max)
    api_template: pd.DataFrame  # zero rows, Trace.api's dtypes and categories
    gpu_template: pd.DataFrame  # zero rows, Trace.gpu's dtypes and categories
    strings: StringTable
    selects: dict[str, _Select]
    gpu_order: np.ndarray = field(repr=False)  # GPU rows sorted by window (stable)
    gpu_bounds: np.ndarray = field(repr=False)  # window w's rows: gpu_order[b[w]:b[w+1]]
    api_edges: np.ndarray | None = None  # windows of whole iterations: window w's API rows
    # are api_edges[w] .. api_edges[w + 1] - 1 (None: windows of calls_per_window calls)
    # with device_pairs: every distinct (process, device) among the GPU rows (int64 each)
    device_pairs: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def n_api(self) -> int:
        return 0 if self.api is None else self.api.n

    def api_rows(self, w: int) -> tuple[int, int]:
        """Window ``w``'s API row positions ``[lo, hi)``."""
        if self.api_edges is not None:
            return int(self.api_edges[w]), int(self.api_edges[w + 1])
        c = self.calls_per_window
        return min(w * c, self.n_api), min((w + 1) * c, self.n_api)

    def gpu_rows(self, w: int) -> np.ndarray:
        """Window ``w``'s GPU rows (indices into ``Trace.gpu``), ascending."""
        return self.gpu_order[self.gpu_bounds[w] : self.gpu_bounds[w + 1]]


@dataclass
class WindowTrace:
    """One window's rows: ``Trace.api`` / ``Trace.gpu`` frames and their whole-read indices."""

    window: int
    api: pd.DataFrame
    gpu: pd.DataFrame
    api_index: np.ndarray  # int64, ascending
    gpu_index: np.ndarray  # int64, ascending
    isolated: np.ndarray  # the plan's ``isolated`` of these GPU rows


def plan_windows(
    path: str | Path,
    calls_per_window: int,
    *,
    cuts_ns: np.ndarray | None = None,
    use_connectorx: bool | None = None,
    device_pairs: bool = False,
) -> LaunchPlan:
    """The launch plan of ``path`` with windows of ``calls_per_window`` API calls; with
    ``cuts_ns`` (iteration bounds, :attr:`Iterations.bounds_ns` ``[1:-1]``) windows of whole
    iterations instead, of at most ``calls_per_window`` calls unless one iteration alone has
    more (see :class:`Misplaced`). ``device_pairs``: also gather which processes ran work on
    which devices (the idle causes' lanes, :mod:`jlprof.engine.windowed.idle_parts`)."""
    if calls_per_window < 1:
        raise ValueError(f"calls_per_window must be at least 1, not {calls_per_window}")
    cuts = None if cuts_ns is None else np.asarray(cuts_ns, np.int64)
    with small_pages():  # as read_trace: no huge-page stalls on first touch
        return _plan_windows(Path(path), calls_per_window, use_connectorx, cuts, device_pairs)


class Misplaced(Exception):
    """Windows of whole iterations cannot hold this export: a call stored among the calls of
    a later window (nsys stores a few calls late) launched GPU work, which then belongs to
    neither window's iterations."""


def _plan_windows(
    path: Path,
    calls_per_window: int,
    use_connectorx: bool | None,
    cuts: np.ndarray | None,
    device_pairs: bool,
) -> LaunchPlan:
    conn, tabs = open_export(path)
    try:
        f = _Fetcher(path, conn, use_connectorx)
        strings = _read_strings(conn)
        selects = _event_selects(conn, tabs)
        selects.pop(_NVTX, None)
        # the GPU tables' narrow read and their int32 scans run beside the API table's read
        # (connectorx and SQLite work outside the GIL), each on its own connection
        pids = _Pids()
        with ThreadPoolExecutor(max_workers=2) as pool:
            gpu_read = pool.submit(_read_gpu, path, use_connectorx, selects, pids, device_pairs)
            fits = pool.submit(_gpu_fits, path, selects)
            api = _plan_api(f, selects.get(_API), strings, calls_per_window, pids, cuts)
            gpu_rows = gpu_read.result()
            pairs = gpu_rows.pairs()
            release_reader_memory()  # the narrow reads' Arrow buffers, before isolated's peak
            gpu = _plan_gpu(gpu_rows, strings, api, fits.result(), cuts)
            del gpu_rows
    except sqlite3.DatabaseError as exc:
        raise damaged(path, exc) from exc
    finally:
        conn.close()
    release_reader_memory()  # the narrow reads' Arrow buffers and the scan thread's arena
    order = np.argsort(gpu.window, kind="stable").astype(index_dtype(len(gpu.window)))
    counts = np.bincount(gpu.window, minlength=api.n_windows)
    bounds = np.zeros(api.n_windows + 1, np.int64)
    np.cumsum(counts, out=bounds[1:])
    return LaunchPlan(
        path=path,
        use_connectorx=use_connectorx,
        calls_per_window=calls_per_window,
        n_windows=api.n_windows,
        api=api.rows,
        gpu_tables=gpu.tables,
        window=gpu.window,
        n_gpu=len(gpu.window),
        launched=gpu.launched,
        isolated=gpu.isolated,
        window_start_ns=api.window_start,
        api_template=api.template,
        gpu_template=gpu.template,
        strings=strings,
        selects=selects,
        gpu_order=order,
        gpu_bounds=bounds,
        api_edges=api.edges,
        device_pairs=pairs,
    )


def events_at_most(path: str | Path) -> int:
    """Rows of the export's event tables (GPU activities, API calls, NVTX events) from their
    rowid ranges: two b-tree descents each, no scan (how big an analysis will be)."""
    conn, tabs = open_export(Path(path))
    try:
        total = 0
        nvtx = schema.table_name(tabs, _NVTX)  # NVTX_EVENTS, or a versioned one
        for table in (*(t for t, _ in _GPU_TABLES), _API, nvtx):
            span = rowid_range(conn, table) if table in tabs else None
            if span is not None:
                total += span[1] - span[0] + 1
        return total
    except sqlite3.DatabaseError as exc:
        raise damaged(Path(path), exc) from exc
    finally:
        conn.close()


# ---- the plan's narrow pass


def _chunks(f: _Fetcher, q: _Select):
    """``q``'s rows (with their ``row_id``) by rowid ranges of CHUNK_ROWS, in rowid order."""
    span = rowid_range(f.conn, q.table)
    if span is None:
        return
    lo, hi = span
    q = _with_rowid(q)
    for a in range(lo, hi + 1, CHUNK_ROWS):
        b = min(a + CHUNK_ROWS - 1, hi)
        df = f.frame(q.where(f"WHERE rowid BETWEEN {a} AND {b} ORDER BY rowid"))
        if len(df):
            yield df


class _RowIds:
    """Collects a table's rowids chunk by chunk; keeps them only when they are not
    consecutive (nsys writes consecutive ones)."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.parts: list[np.ndarray] = []
        self.n = 0
        self.base = 0
        self.consecutive = True

    def add(self, rid: np.ndarray) -> None:
        if self.n == 0:
            self.base = int(rid[0])
        end = self.base + self.n
        if self.consecutive and not (
            int(rid[0]) == end and int(rid[-1]) == end + len(rid) - 1
        ):  # the first gap: the rowids so far were base, base + 1, ...
            self.consecutive = False
            self.parts = [np.arange(self.base, end, dtype=np.int64)]
        if not self.consecutive:
            self.parts.append(rid)
        self.n += len(rid)

    def rows(self) -> TableRows:
        if self.consecutive:
            return TableRows(self.table, self.n, self.base)
        return TableRows(self.table, self.n, self.base, np.concatenate(self.parts))


class _Pids:
    """Small codes of processes (``globalTid & GLOBAL_PID_MASK``) in the order met."""

    def __init__(self) -> None:
        self.codes: dict[int, int] = {}
        self.lock = threading.Lock()  # the API and the GPU reads add codes at once

    def code(self, pid: int) -> int:
        with self.lock:
            return self.codes.setdefault(pid, len(self.codes))

    def keys(self, pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
        """(process, correlation id) as one int64 key, equal in both tables' reads."""
        if len(pid) and pid.min() == pid.max():  # one process (the usual case): no sort
            return (corr & _CORR_MASK) | (self.code(int(pid[0])) << 40)
        uniq, inv = np.unique(pid, return_inverse=True)
        at = np.asarray([self.code(int(u)) for u in uniq], np.int64)[inv.reshape(-1)]
        return (at << 40) | (corr & _CORR_MASK)


class _Extremes:
    """Each column's min and max over the chunks: whether it fits int32 (narrow's rule)."""

    def __init__(self) -> None:
        self.lo: dict[str, int] = {}
        self.hi: dict[str, int] = {}

    def add(self, name: str, x: np.ndarray) -> None:
        if len(x):
            self.lo[name] = min(self.lo.get(name, int(x.min())), int(x.min()))
            self.hi[name] = max(self.hi.get(name, int(x.max())), int(x.max()))

    def fits(self, name: str) -> bool:
        """True when rows were seen and all fit int32 (no rows: int64, as narrow has it)."""
        return name in self.lo and self.lo[name] >= INT32.min and self.hi[name] <= INT32.max


@dataclass
class _ApiPlan:
    rows: TableRows | None
    calls_per_window: int
    n_windows: int
    window_start: np.ndarray
    keys: np.ndarray  # the calls' (process, correlation id) keys, sorted, each once
    key_window: np.ndarray | None  # the window of the first call with each key (None:
    # ``keys`` is every call's key, in row order: the window is the key's position // c)
    pids: _Pids
    template: pd.DataFrame
    edges: np.ndarray | None = None  # windows of whole iterations: their first API rows
    pos_window: np.ndarray | None = None  # and each call's window (row order)
    it_window: np.ndarray | None = None  # and each iteration's window
    misplaced: np.ndarray | None = None  # per key (as ``keys``): its call is misplaced


def _plan_api(
    f: _Fetcher,
    q: _Select | None,
    strings: StringTable,
    calls_per_window: int,
    pids: _Pids,
    cuts: np.ndarray | None = None,
) -> _ApiPlan:
    """API windows, their start times, the launch keys and ``Trace.api``'s dtypes."""
    if q is None:
        return _ApiPlan(
            None,
            calls_per_window,
            1,
            np.full(1, np.iinfo(np.int64).max),
            np.zeros(0, np.int64),
            np.zeros(0, np.int32),
            pids,
            empty_frame(API_COLUMNS, API_CATEGORICAL),
            *_no_calls(cuts),
        )
    c = calls_per_window
    rid, ext = _RowIds(q.table), _Extremes()
    keys = np.empty(f.rows_at_most(q.table) or 0, np.int64)  # filled up to rid.n
    name_ids, starts = [], []
    n_max = len(keys)
    its = _Iterations(cuts, n_max) if cuts is not None else None
    narrow_q = q.only("start_ns", "global_tid", "correlation_id", "name_id", "event_class")
    for df in _chunks(f, narrow_q):
        pos = rid.n
        rid.add(_int(df, "row_id"))
        if its is not None:
            its.add(pos, _int(df, "start_ns"))
        corr = _int(df, "correlation_id")
        ext.add("correlation_id", corr)
        ext.add("event_class", _int(df, "event_class"))
        keys[pos : pos + len(df)] = pids.keys(_int(df, "global_tid") & GLOBAL_PID_MASK, corr)
        name_ids.append(pd.unique(_int(df, "name_id")))
        # the earliest start of each window met in this chunk
        start = _int(df, "start_ns")
        w0, w1 = pos // c, (pos + len(df) - 1) // c
        cuts = np.maximum(np.arange(w0, w1 + 1, dtype=np.int64) * c - pos, 0)
        starts.append((w0, np.minimum.reduceat(start, cuts)))
    rows = rid.rows()
    if its is not None:
        edges, pos_window, it_window, window_start, wrong = its.windows(rows.n, c)
        n_windows = len(edges) - 1
    else:
        n_windows = max(1, -(-rows.n // c))
        window_start = np.full(n_windows, np.iinfo(np.int64).max)
        for w0, mins in starts:
            np.minimum.at(window_start, np.arange(w0, w0 + len(mins)), mins)
        edges = pos_window = it_window = wrong = None
    all_keys = keys[: rows.n]
    del keys
    pos_dtype = index_dtype(max(n_windows, 1))
    misplaced = None
    if len(all_keys) < 2 or bool((all_keys[1:] > all_keys[:-1]).all()):
        uniq = all_keys  # one call per key, in key order (one process: the usual case)
        key_window = pos_window
        misplaced = wrong
    else:  # the first call of each key, as correlate's stable search finds it
        order = np.argsort(all_keys, kind="stable")
        sk = all_keys[order]
        del all_keys
        head = np.ones(len(sk), bool)
        head[1:] = sk[1:] != sk[:-1]
        uniq, first = sk[head], order[head]
        del sk, order, head
        key_window = (first // c).astype(pos_dtype) if pos_window is None else pos_window[first]
        misplaced = None if wrong is None else wrong[first]
        del first
    seen = pd.unique(np.concatenate(name_ids)) if name_ids else np.zeros(0, np.int64)
    dtypes = {c_: np.int64 for c_ in API_COLUMNS}
    for col in ("correlation_id", "event_class"):
        dtypes[col] = np.int32 if ext.fits(col) else np.int64
    template = _template(API_COLUMNS, dtypes, {"name": _api_names(seen, strings)})
    return _ApiPlan(
        rows, c, n_windows, window_start, uniq, key_window, pids, template,
        edges, pos_window, it_window, misplaced,
    )  # fmt: skip


def _no_calls(cuts: np.ndarray | None) -> tuple:
    """The iteration fields of an export without API calls: one window of every iteration."""
    if cuts is None:
        return (None, None, None, None)
    return (np.zeros(2, np.int64), np.zeros(0, np.int32), np.zeros(len(cuts) + 1, np.int32), None)


class _Iterations:
    """Each call's iteration (``searchsorted(cuts, start)``) met chunk by chunk, then the
    windows of whole iterations. Calls are stored in start order but for a few stored late
    (started earlier): a call goes with the latest iteration met so far in row order (its
    running maximum), so windows stay row ranges; a late call whose own iteration then falls
    in an earlier window is *misplaced* (harmless unless it launched GPU work)."""

    def __init__(self, cuts: np.ndarray, n: int) -> None:
        self.cuts = cuts
        self.it = np.empty(n, np.int32)
        self.run = np.empty(n, np.int32)
        self.top = 0
        self.low = np.full(len(cuts) + 1, np.iinfo(np.int64).max)  # earliest start per run it

    def add(self, pos: int, start: np.ndarray) -> None:
        it = np.searchsorted(self.cuts, start, side="right").astype(np.int32)
        run = np.maximum.accumulate(np.maximum(it, self.top))
        self.it[pos : pos + len(it)] = it
        self.run[pos : pos + len(it)] = run
        if len(run):
            self.top = int(run[-1])
        np.minimum.at(self.low, run, start)

    def windows(self, n: int, calls: int) -> tuple:
        """(first API row of each window and the end, each call's window, each iteration's
        window, each window's earliest call start, each call misplaced or None)."""
        from jlprof.engine.aggregate.aggregate import row_windows

        run, it = self.run[:n], self.it[:n]
        counts = np.bincount(run, minlength=len(self.cuts) + 1)
        wins = row_windows(counts, calls)
        it_window = np.zeros(len(counts), np.int32)
        for k, (a, b) in enumerate(wins):
            it_window[a:b] = k
        ends = np.concatenate([[0], np.cumsum(counts)])
        edges = np.array([ends[a] for a, _ in wins] + [n], np.int64)
        pos_window = it_window[run]
        start = np.array([self.low[a:b].min(initial=np.iinfo(np.int64).max) for a, b in wins])
        wrong = it_window[it] != pos_window
        return edges, pos_window, it_window, start, (wrong if wrong.any() else None)


@dataclass
class _GpuPlan:
    tables: list[GpuTable]
    window: np.ndarray
    launched: np.ndarray
    isolated: np.ndarray
    template: pd.DataFrame


@dataclass
class _GpuRead:
    """The GPU tables' narrow columns, read beside the API table's."""

    tables: list[GpuTable]
    n: int
    start: np.ndarray  # int64, per GPU row (the first ``n``)
    end: np.ndarray
    key: np.ndarray  # (process, correlation id) keys; -1: no correlation id
    ext: _Extremes
    names: dict[str, list[np.ndarray]]  # kernel name ids, first seen per chunk
    copy_kinds: list[np.ndarray]
    devices: list[pd.DataFrame] | None = None  # distinct (pid, device) per chunk, if asked

    def pairs(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Every distinct (process, device) of the GPU rows, or None when not gathered."""
        if self.devices is None:
            return None
        both = pd.concat(self.devices, ignore_index=True).drop_duplicates()
        return both["pid"].to_numpy(np.int64), both["device"].to_numpy(np.int64)


def _read_gpu(
    path: Path,
    use_cx: bool | None,
    selects: dict[str, _Select],
    pids: _Pids,
    device_pairs: bool = False,
) -> _GpuRead:
    """Times, launch keys and category inputs of every GPU row, on a connection of its own."""
    conn = _connect(path)
    try:
        f = _Fetcher(path, conn, use_cx)
        present = [(t, k) for t, k in _GPU_TABLES if t in selects]
        cap = sum(f.rows_at_most(t) or 0 for t, _ in present)
        g = _GpuRead(
            [],
            0,
            np.empty(cap, np.int64),
            np.empty(cap, np.int64),
            np.empty(cap, np.int64),
            _Extremes(),
            {"name": [], "long_name": []},
            [],
            [pd.DataFrame({"pid": [], "device": []}, dtype=np.int64)] if device_pairs else None,
        )
        for table, kind in present:
            extra = ("short_id", "demangled_id") if kind == "kernel" else ()
            extra += ("copy_kind",) if kind == "memcpy" else ()
            extra += ("device_id",) if device_pairs else ()
            q = selects[table].only("start_ns", "end_ns", "correlation_id", "global_pid", *extra)
            rid = _RowIds(table)
            for df in _chunks(f, q):
                n, k = g.n, len(df)
                rid.add(_int(df, "row_id"))
                g.start[n : n + k] = _int(df, "start_ns")
                g.end[n : n + k] = _int(df, "end_ns")
                corr = _int(df, "correlation_id")
                g.ext.add(f"{table}.correlation_id", corr)
                pid = _int(df, "global_pid")
                if g.devices is not None:
                    dev = _int(df, "device_id")
                    g.devices.append(pd.DataFrame({"pid": pid, "device": dev}).drop_duplicates())
                key = pids.keys(pid & GLOBAL_PID_MASK, corr)
                key[corr < 0] = -1  # no correlation id: no launching call (as correlate)
                g.key[n : n + k] = key
                if kind == "kernel":
                    short, long_ = _int(df, "short_id"), _int(df, "demangled_id")
                    g.names["name"].append(pd.unique(np.where(short >= 0, short, long_)))
                    g.names["long_name"].append(pd.unique(np.where(long_ >= 0, long_, short)))
                elif kind == "memcpy":
                    g.copy_kinds.append(np.unique(_int(df, "copy_kind")))
                g.n += k
            rows = rid.rows()
            if rows.n:
                g.tables.append(GpuTable(rows, kind, g.n - rows.n))
        return g
    finally:
        conn.close()


def _plan_gpu(
    g: _GpuRead,
    strings: StringTable,
    api: _ApiPlan,
    fits: dict[str, dict[str, bool]],
    cuts: np.ndarray | None = None,
) -> _GpuPlan:
    """Each GPU row's launch window and ``isolated``, and ``Trace.gpu``'s dtypes."""
    n = g.n
    window = np.empty(n, np.int32)
    launched = np.empty(n, bool)
    # the fallback: the last window whose earliest call starts at or before the row
    edges = np.maximum.accumulate(api.window_start[1:]) if api.n_windows > 1 else np.zeros(0)
    for i in range(0, n, CHUNK_ROWS):  # chunks: small temporaries
        stop = min(i + CHUNK_ROWS, n)
        key, start = g.key[i:stop], g.start[i:stop]
        hit = key >= 0
        w = np.zeros(len(key), np.int64)
        if len(api.keys):
            at = np.searchsorted(api.keys, key)
            np.minimum(at, len(api.keys) - 1, out=at)
            hit &= api.keys[at] == key
            kw = at // api.calls_per_window if api.key_window is None else api.key_window[at]
            w[hit] = kw[hit]
            if api.misplaced is not None and bool(api.misplaced[at[hit]].any()):
                raise Misplaced("a call stored among a later window's calls launched GPU work")
            del at, kw
        else:
            hit[:] = False
        miss = ~hit
        if cuts is not None and api.it_window is not None:  # by the iteration of its start
            w[miss] = api.it_window[np.searchsorted(cuts, start[miss], side="right")]
        else:
            w[miss] = np.searchsorted(edges, start[miss], side="right")
        window[i:stop] = w
        launched[i:stop] = hit
        del key, start, hit, miss, w  # views of g.key and g.start: they must not outlive them
    g.key = api.keys = api.key_window = None  # the launch keys are done with: free them first
    api.pos_window = api.misplaced = None
    isolated = intervals.isolated(g.start[:n], g.end[:n])
    g.start = g.end = None
    template = _gpu_template(fits, strings, g.tables, g.ext, g.names, g.copy_kinds)
    return _GpuPlan(g.tables, window, launched, isolated, template)


def _gpu_template(
    table_fits: dict[str, dict[str, bool]],
    strings: StringTable,
    tables: list[GpuTable],
    ext: _Extremes,
    names: dict[str, list[np.ndarray]],
    copy_kinds: list[np.ndarray],
) -> pd.DataFrame:
    """``Trace.gpu``'s dtypes (read.py's ``_stack`` rule over the whole tables) and
    categories (each part's, concatenated as read.py's ``_gpu_frame`` does)."""
    if not tables:
        return empty_frame(GPU_COLUMNS, GPU_CATEGORICAL)
    fits = dict.fromkeys(_NARROW, True)
    for t in tables:
        fits["correlation_id"] &= ext.fits(f"{t.rows.table}.correlation_id")
        for c, ok in table_fits[t.rows.table].items():
            fits[c] &= ok
    dtypes = {c: np.int32 if fits.get(c, False) else np.int64 for c in GPU_COLUMNS}
    cats: dict[str, list[pd.Categorical]] = {c: [] for c in GPU_CATEGORICAL}
    for t in tables:
        cats["kind"].append(_const_cat(t.kind, 1))
        for col in ("name", "long_name"):
            if t.kind == "kernel":
                seen = pd.unique(np.concatenate(names[col]))
                cats[col].append(strings.categorical(seen, UNKNOWN_KERNEL))
            elif t.kind == "memcpy":
                cats[col].append(_memcpy_names(np.unique(np.concatenate(copy_kinds))))
            else:
                cats[col].append(_memset_names(1))
    return _template(GPU_COLUMNS, dtypes, {c: _concat_cats(v) for c, v in cats.items()})


def _gpu_fits(path: Path, selects: dict[str, _Select]) -> dict[str, dict[str, bool]]:
    """Per GPU table, whether each narrowed column the narrow reads skip fits int32."""
    conn = _connect(path)  # its own: a connection stays in its thread
    try:
        out = {}
        for table, _kind in _GPU_TABLES:
            if table in selects:
                q = selects[table]
                cols = [c for c in q.names if c in _NARROW and c != "correlation_id"]
                out[table] = _fits_int32(conn, q, cols)
        return out
    finally:
        conn.close()


def _fits_int32(conn: sqlite3.Connection, q: _Select, cols: list[str]) -> dict[str, bool]:
    """Whether each of ``cols`` (read as ``q`` reads them, NULL as its default) fits int32
    in every row of ``q``'s table (a table without rows: all do; :func:`_gpu_template`
    reads only tables with rows).

    First one scan that looks for a row with any value that does not (the usual answer:
    none, ~2.1 s at 10M kernels against ~3.1 s for the columns' min and max): per row, the
    bitwise OR of each value plus 2^31 lies in [0, 2^32) exactly when all of them fit (a
    value below -2^31 sets the sign bit, one above 2^31 - 1 a bit from 2^32 up; a sum past
    int64 turns REAL and casts back to the largest integer: still too big). Where a row
    does not, each column's min and max tell which."""
    if not cols:
        return {}
    exprs = [f"coalesce({q.exprs[q.names.index(c)]}, {q.fill.get(c, 0)!r})" for c in cols]
    offset = " | ".join(f"({e} + {-INT32.min})" for e in exprs)
    (wide,) = conn.execute(
        f"SELECT EXISTS(SELECT 1 FROM {q.table} WHERE ({offset}) >> 32 != 0)"
    ).fetchone()
    if not wide:
        return dict.fromkeys(cols, True)
    aggs = ", ".join(f"min({e}), max({e})" for e in exprs)
    got = conn.execute(f"SELECT {aggs} FROM {q.table}").fetchone()
    out = {}
    for i, c in enumerate(cols):
        lo, hi = got[2 * i], got[2 * i + 1]
        out[c] = lo is not None and INT32.min <= lo and hi <= INT32.max
    return out


def _template(
    columns: list[str], dtypes: dict[str, type], cats: dict[str, pd.Categorical]
) -> pd.DataFrame:
    """A zero-row frame of ``columns``: ``cats``' categories, else ``dtypes``."""
    data = {}
    for c in columns:
        if c in cats:
            data[c] = pd.Categorical.from_codes(
                np.zeros(0, np.int32), dtype=pd.CategoricalDtype(cats[c].categories)
            )
        else:
            data[c] = np.zeros(0, dtypes[c])
    return pd.DataFrame(data, copy=False)


# ---- the windowed reads


class WindowReader:
    """Reads the plan's windows through one open connection (``with`` closes it)."""

    def __init__(self, plan: LaunchPlan) -> None:
        self.plan = plan
        self.conn = _connect(plan.path)
        self.f = _Fetcher(plan.path, self.conn, plan.use_connectorx)
        self.gpu_rows_read = 0  # GPU rows SQLite handed back, kept or not
        self.gpu_rows_kept = 0
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jlprof-window-api")

    def __enter__(self) -> WindowReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.pool.shutdown()
        self.conn.close()

    def read(self, w: int) -> WindowTrace:
        """Window ``w``'s API calls and the GPU rows of its launch window."""
        plan = self.plan
        if not 0 <= w < plan.n_windows:
            raise IndexError(f"window {w} of {plan.n_windows}")
        try:
            with small_pages():
                # the calls on a connection of their own, in a thread, while this one reads
                # the GPU rows (connectorx and SQLite read outside the GIL)
                api_read = self.pool.submit(self._api, w)
                gpu_index = plan.gpu_rows(w).astype(np.int64)
                try:
                    gpu = self._gpu(gpu_index)
                finally:
                    api_index, api = api_read.result()
        except sqlite3.DatabaseError as exc:
            raise damaged(plan.path, exc) from exc
        return WindowTrace(
            window=w,
            api=api,
            gpu=gpu,
            api_index=api_index,
            gpu_index=gpu_index,
            isolated=plan.isolated[gpu_index],
        )

    def api_part(self, lo: int, hi: int) -> pd.DataFrame:
        """``Trace.api``'s rows ``lo..hi-1`` (the DLProf database is written by such parts)."""
        try:
            return self._api_rows(lo, hi)[1]
        except sqlite3.DatabaseError as exc:
            raise damaged(self.plan.path, exc) from exc

    def gpu_part(self, lo: int, hi: int) -> pd.DataFrame:
        """``Trace.gpu``'s rows ``lo..hi-1``."""
        try:
            with small_pages():
                return self._gpu(np.arange(lo, hi, dtype=np.int64))
        except sqlite3.DatabaseError as exc:
            raise damaged(self.plan.path, exc) from exc

    def _api(self, w: int) -> tuple[np.ndarray, pd.DataFrame]:
        return self._api_rows(*self.plan.api_rows(w))

    def _api_rows(self, lo: int, hi: int) -> tuple[np.ndarray, pd.DataFrame]:
        plan = self.plan
        index = np.arange(lo, hi, dtype=np.int64)
        if plan.api is None or lo == hi:
            return index, plan.api_template.copy()
        a, b = plan.api.rowid(lo), plan.api.rowid(hi - 1)
        q = plan.selects[_API].where(f"WHERE rowid BETWEEN {a} AND {b} ORDER BY rowid")
        conn = _connect(plan.path)  # this thread's own (a connection stays in its thread)
        try:
            df = _read_api(_Fetcher(plan.path, conn, plan.use_connectorx), {_API: q}, plan.strings)
        finally:
            conn.close()
        if len(df) != hi - lo:
            raise _changed(plan.path, _API)
        return index, _conform(df, plan.api_template)

    def _gpu(self, index: np.ndarray) -> pd.DataFrame:
        plan = self.plan
        parts = []
        for t in plan.gpu_tables:
            mine = index[(index >= t.offset) & (index < t.offset + t.rows.n)] - t.offset
            if len(mine):
                df = self._rows(t.rows, mine)
                parts.append(_gpu_part(df, t.kind, plan.strings))
        if not parts:
            return plan.gpu_template.copy()
        return _conform(_gpu_frame(parts), plan.gpu_template)

    def _rows(self, rows: TableRows, want: np.ndarray) -> pd.DataFrame:
        """The raw select's rows at positions ``want`` (ascending) of ``rows``' table."""
        q = _with_rowid(self.plan.selects[rows.table])
        spans, singles = _pieces(want)
        frames = []
        for a, b in spans:
            ra, rb = rows.rowid(a), rows.rowid(b)
            frames.append(
                self.f.frame(q.where(f"WHERE rowid BETWEEN {ra} AND {rb} ORDER BY rowid"))
            )
        for i in range(0, len(singles), LIST_MAX):
            ids = ",".join(str(int(r)) for r in rows.rowid(singles[i : i + LIST_MAX]))
            frames.append(self.f.frame(q.where(f"WHERE rowid IN ({ids}) ORDER BY rowid")))
        df = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        self.gpu_rows_read += len(df)
        pos = rows.position(_int(df, "row_id"))
        if len(frames) > 1:
            order = np.argsort(pos, kind="stable")
            df, pos = df.take(order).reset_index(drop=True), pos[order]
        keep = np.zeros(len(pos), bool)
        at = np.searchsorted(want, pos)
        inside = at < len(want)
        keep[inside] = want[at[inside]] == pos[inside]
        if keep.sum() != len(want):
            raise _changed(self.plan.path, rows.table)
        self.gpu_rows_kept += len(want)
        return df if keep.all() else df[keep].reset_index(drop=True)


def read_window(plan: LaunchPlan, w: int) -> WindowTrace:
    """Window ``w`` of ``plan`` (a :class:`WindowReader` keeps its connection for many)."""
    with WindowReader(plan) as reader:
        return reader.read(w)


def _with_rowid(q: _Select) -> _Select:
    """A copy of ``q`` that also reads each row's rowid (as ``row_id``)."""
    return q.where("").raw("rowid", "row_id")


def _pieces(want: np.ndarray) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Rowid spans ``(first, last)`` and single rows that read the row positions ``want``
    (ascending) with at most twice their number of rows (see the module doc)."""
    if not len(want):
        return [], want
    cut = np.flatnonzero(np.diff(want) > SPAN_GAP) + 1
    lo = np.concatenate([[0], cut])
    hi = np.concatenate([cut, [len(want)]])
    members = hi - lo
    length = want[hi - 1] - want[lo] + 1
    dense = (members >= SPAN_MIN) & (length <= 2 * members)
    spans = [(int(want[a]), int(want[b - 1])) for a, b in zip(lo[dense], hi[dense], strict=True)]
    sparse = np.repeat(~dense, members)
    return spans, want[sparse]


def _conform(df: pd.DataFrame, template: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``template``'s dtypes: categoricals recoded to its categories."""
    cols = {}
    for c in template.columns:
        want = template[c].dtype
        if isinstance(want, pd.CategoricalDtype):
            cat = df[c].array
            at = want.categories.get_indexer(cat.categories)
            if (at < 0).any():
                raise _changed_categories(c)
            codes = np.asarray(cat.codes)
            cols[c] = pd.Categorical.from_codes(
                np.where(codes >= 0, at[np.maximum(codes, 0)], -1), dtype=want
            )
        else:
            cols[c] = df[c].to_numpy().astype(want, copy=False)
    return pd.DataFrame(cols, copy=False)


def _changed(path: Path, table: str) -> InputError:
    return InputError(
        f"{path} changed since its launch plan was made ({table} has other rows): "
        "plan it again (plan_windows) and do not write to an export while it is read."
    )


def _changed_categories(col: str) -> InputError:
    return InputError(
        f"a window holds a {col} the launch plan did not see: the export changed since it "
        "was planned; plan it again (plan_windows)."
    )
