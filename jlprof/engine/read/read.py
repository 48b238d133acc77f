"""Read an nsys SQLite export into a normalised :class:`~jlprof.engine.read.trace.Trace`.

Reading is the slowest stage, so event tables go through connectorx (SQLite -> Arrow in
Rust; a core dependency, ~10x faster than ``sqlite3`` on 1M kernels, see
``bench/fast_reader.py``) and through ``sqlite3`` when it cannot be imported (with a one-line
notice); both give the same frames. connectorx reads all event tables at once, each in its own
thread and as one Arrow batch, so its columns become the frames' columns without a copy
(``_Fetcher``; ``bench/read_identity.py`` checks the frames against an older reader).
Columns are selected by name (see ``schema``) and strings are resolved once through
``StringIds`` into categoricals.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from jlprof.engine.memory import release_arrow_memory, release_reader_memory, small_pages
from jlprof.engine.read import schema
from jlprof.engine.read.narrow import fits_int32, narrow
from jlprof.engine.read.trace import (
    API_COLUMNS,
    GLOBAL_PID_MASK,
    GPU_COLUMNS,
    GPU_INFO_COLUMNS,
    MARK_COLUMNS,
    NVTX_COLUMNS,
    OSRT_COLUMNS,
    Trace,
    arrow_strings,
    empty_frame,
)
from jlprof.errors import InputError

IO_CALLS = (
    "fread",
    "fwrite",
    "read",
    "write",
    "pread",
    "pwrite",
    "pread64",
    "pwrite64",
    "readv",
    "writev",
    "preadv",
    "pwritev",
    "fgets",
    "fputs",
    "getc",
    "putc",
)
_IO_NAME = re.compile(r"^(" + "|".join(IO_CALLS) + r")(_unlocked)?$")

Progress = Callable[[str], None]
# leading columns every GPU activity table shares, and the kernel launch dimensions
_LAUNCH_DIMS = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
# GPU activity columns whose values are usually small (ordinals, ids, launch dimensions,
# flags, copy sizes): :func:`_stack` holds them as int32 when every value fits (see trace.py),
# 4 bytes a row each for the whole run; the API calls' correlation_id and event_class and the
# NVTX event_type are narrowed (engine/read/narrow.py) where they are read (at 1M kernels ~60 MB
# of the gpu, api and nvtx frames in all; 10x that at 10M)
_NARROW = frozenset(
    [
        "device_id",
        "stream_id",
        "correlation_id",
        *_LAUNCH_DIMS,
        "bytes",
        "graph_node_id",
        "pageable",
    ]
)


class StringTable:
    """``StringIds`` as arrays, so id columns turn into categoricals without Python loops."""

    def __init__(self, ids: np.ndarray, values: np.ndarray) -> None:
        order = np.argsort(ids, kind="stable")
        self.ids = ids[order].astype(np.int64)
        self.values = values[order]

    def lookup(self, ids: np.ndarray, default: str = "") -> np.ndarray:
        """Strings for integer ids (``default`` for -1/unknown ids), as an object array."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(self.ids) == 0:
            return np.full(len(ids), default, dtype=object)
        pos = np.clip(np.searchsorted(self.ids, ids), 0, len(self.ids) - 1)
        found = self.ids[pos] == ids
        out = self.values[pos].astype(object)
        out[~found] = default
        return out

    def categorical(self, ids: np.ndarray, default: str = "") -> pd.Categorical:
        """Like :meth:`lookup` but hashing the few unique ids first (fast for 1M rows)."""
        codes, uniq = pd.factorize(np.asarray(ids, dtype=np.int64), sort=False)
        names = self.lookup(np.asarray(uniq, dtype=np.int64), default)
        name_codes, cats = pd.factorize(names.astype(object), sort=False)
        return pd.Categorical.from_codes(
            np.asarray(name_codes, dtype=np.int32)[codes],
            categories=pd.Index(np.asarray(cats, dtype=object), dtype=object),
        )


def check_database(path: Path) -> None:
    """Fail early, in one line, when ``path`` cannot be an nsys SQLite export."""
    if not path.exists():
        raise InputError(f"{path}: no such file. Check the path given to --database.")
    if path.is_dir():
        raise InputError(f"{path} is a directory; give the .sqlite or .nsys-rep file inside it.")
    with path.open("rb") as fh:
        head = fh.read(16)
    if len(head) == 0:
        raise InputError(f"{path} is empty (0 bytes): the profile was not written. Re-run nsys.")
    if head != schema.SQLITE_MAGIC:
        raise InputError(
            f"{path} is not a SQLite database. Export it first "
            "(`nsys export --type sqlite FILE.nsys-rep`) or pass the .nsys-rep to jlprof."
        )
    want = _header_size(path)
    have = path.stat().st_size
    if want is not None and have < want:
        raise InputError(
            f"{path} is truncated ({have} of {want} bytes): the copy or export did not finish. "
            f"{REEXPORT}"
        )


REEXPORT = "Copy it again or re-export it: `nsys export --type sqlite -f true FILE.nsys-rep`."


def _header_size(path: Path) -> int | None:
    """File size the SQLite header promises (page size x page count), or None when unknown.

    The in-header page count is valid when its change counter equals the
    version-valid-for number (SQLite >= 3.7.0 always writes it so), see sqlite.org/fileformat.
    """
    with path.open("rb") as fh:
        hdr = fh.read(100)
    if len(hdr) < 100:
        return 100  # shorter than the header itself
    page = int.from_bytes(hdr[16:18], "big")
    page = 65536 if page == 1 else page
    count = int.from_bytes(hdr[28:32], "big")
    valid = hdr[24:28] == hdr[92:96]
    return page * count if valid and count and page >= 512 else None


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(schema.sqlite_uri(path), uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")  # invalid UTF-8 seen in 2022.1
    return conn


_SLOW_READER_NOTICE = (
    "jlprof: connectorx is not importable, reading with Python's sqlite3 instead "
    "(about 10x slower on large exports; pip install connectorx)"
)
_said_slow_reader = False


def _say_slow_reader() -> None:
    """Once per process: a plain install has connectorx, so its absence is worth a line."""
    global _said_slow_reader
    if not _said_slow_reader:
        _said_slow_reader = True
        print(_SLOW_READER_NOTICE, file=sys.stderr)


def rowid_range(conn: sqlite3.Connection, table: str) -> tuple[int, int] | None:
    """``table``'s first and last rowid (two b-tree descents, no scan); None when empty."""
    lo, hi = conn.execute(
        f"SELECT (SELECT min(rowid) FROM {table}), (SELECT max(rowid) FROM {table})"
    ).fetchone()
    return None if lo is None or hi is None else (int(lo), int(hi))


class _Fetcher:
    """Runs SELECTs on the export: connectorx when available, ``sqlite3`` otherwise.

    With connectorx >= 0.4 the big tables are read as Arrow streams of one batch each,
    started together (:meth:`start`) and taken in turn (:meth:`frame`): connectorx reads
    each in a thread of its own, and each column arrives as one buffer that pandas uses as
    is. Its default batches of 64K rows made ``to_pandas`` copy every column into fresh
    memory (~0.25 GB at 1M kernels). Waiting for a stream holds the GIL (connectorx does not
    release it there), so streams are waited for from one thread, never from a pool; other
    Python threads pause meanwhile. A table connectorx cannot read (invalid UTF-8 text, a
    value of another type than its column's) is read again with ``sqlite3``, alone; in a
    stream that failure is a Rust panic, whose message goes to stderr.
    """

    def __init__(self, path: Path, conn: sqlite3.Connection, use_connectorx: bool | None) -> None:
        self.conn = conn
        self.path = path
        self.cx = None
        # table -> connectorx's RecordBatchReaders, one per run of rowids, in rowid order
        self.streams: dict[str, list] = {}
        if use_connectorx is not False:
            try:
                import connectorx

                self.cx = connectorx
            except ImportError:
                if use_connectorx:
                    raise InputError(
                        "connectorx is not installed: pip install connectorx"
                    ) from None
                _say_slow_reader()

    def rows_at_most(self, table: str) -> int | None:
        """How many rows ``table`` can hold, from its rowid range (two b-tree descents, no scan).

        None when unknown (no rows, no rowid). Capped at one row per 16 bytes of the file
        (an event row takes more), so a sparse rowid range cannot reserve absurd memory;
        more rows than this would still be read, as a second batch.
        """
        try:
            span = rowid_range(self.conn, table)
        except sqlite3.DatabaseError:
            return None
        if span is None:
            return None
        return max(1, min(span[1] - span[0] + 1, self.path.stat().st_size // 16))

    def start(self, q: _Select, rows: int | None, parts: int = 1) -> bool:
        """Start reading ``q`` (at most ``rows`` rows) as one Arrow batch; False if it can't.

        connectorx runs the query in its own thread; :meth:`frame` takes the result.
        ``parts`` > 1: that many runs of the table's rowids, each read in a thread of its own
        and put back in rowid order (a table read alone then uses more than one core).
        """
        if self.cx is None or not rows:
            return False
        queries = [q]
        span = rowid_range(self.conn, q.table) if parts > 1 and not q.tail else None
        if span is not None:
            lo, hi = span
            step = -(-(hi - lo + 1) // parts)
            queries = [
                q.where(f"WHERE rowid BETWEEN {a} AND {min(a + step - 1, hi)}")
                for a in range(lo, hi + 1, step)
            ]
        try:
            # one more than the rows: connectorx flushes a full batch and then an empty one
            self.streams[q.table] = [
                self.cx.read_sql(
                    schema.connectorx_uri(self.path),
                    part.sql,
                    return_type="arrow_stream",
                    batch_size=rows + 1,
                )
                for part in queries
            ]
        except Exception:  # connectorx < 0.4 has no arrow_stream: batches of 64K rows then
            self.streams.pop(q.table, None)
            return False
        return True

    def _arrow(self, q: _Select) -> list:
        """connectorx's Arrow tables of ``q``: the stream's runs of rowids, in order, or one
        plain read."""
        streams = self.streams.pop(q.table, None)
        if streams is not None:
            return [s.read_all() for s in streams]
        return [self.cx.read_sql(schema.connectorx_uri(self.path), q.sql, return_type="arrow")]

    def frame(self, q: _Select, arrow_text: bool = False) -> pd.DataFrame:
        """Rows of ``q`` as its columns ``q.names``; NULLs of its ``q.fill`` columns replaced;
        ``arrow_text``: text columns' categories as Arrow strings (:func:`_arrow_frame`).

        Filling after reading instead of ``coalesce()`` in the SELECT: SQLite then hands
        the declared column types straight through, ~20-40 % faster per 1M-row table.
        """
        names, fill = q.names, q.fill
        if self.cx is not None:
            try:
                defaults = [fill.get(n) for n in names]
                tables = self._arrow(q)
                if len(tables) > 1 and _numbers(tables, defaults):
                    return _numbers_frame(tables, defaults, names)
                import pyarrow as pa

                # no local holds the table: _arrow_frame lets each column go once converted
                return _arrow_frame(
                    _fill_arrow(pa.concat_tables(tables) if len(tables) > 1 else tables.pop(),
                                defaults),
                    names,
                    arrow_text,
                )  # fmt: skip
            except Exception:  # odd text encodings or types: the portable path still works
                pass
            except BaseException as exc:  # the same, met in connectorx's reading thread
                if type(exc).__name__ != "PanicException":  # pyo3's; Ctrl-C etc. go through
                    raise
        # this table only: the other tables' streams still read with connectorx
        cur = self.conn.execute(q.sql)
        records = cur.fetchall()
        if not records:
            kinds = {n: "float64" if isinstance(fill.get(n), float) else "int64" for n in names}
            return pd.DataFrame({n: pd.Series([], dtype=k) for n, k in kinds.items()})
        df = pd.DataFrame.from_records(records, columns=names)
        for col, default in fill.items():
            if df[col].isna().any() or df[col].dtype == object:
                df[col] = df[col].fillna(default).astype(type(default))
        for col in df.columns:  # text columns as categoricals, as the Arrow path gives them
            if df[col].dtype == object or pd.api.types.is_string_dtype(df[col]):
                df[col] = df[col].astype(object).astype("category")
        return _first_seen_categories(df)


def _fill_arrow(tbl, defaults: list[int | float | None]):  # pyarrow.Table, imported lazily
    """Replace NULLs column by column (``None``: keep); an all-NULL column gets its type."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for i, default in enumerate(defaults):
        col = tbl.column(i)
        if default is None or col.null_count == 0:
            continue
        typ = pa.float64() if isinstance(default, float) else pa.int64()
        if pa.types.is_null(col.type):
            new = pa.array(np.full(len(col), default), type=typ)
        else:
            new = _zeros_under_nulls(col) if default == 0 else None
            if new is None:
                new = pc.fill_null(col, pa.scalar(default, type=col.type))
        tbl = tbl.set_column(i, tbl.field(i).name, new)
    return tbl


def _zeros_under_nulls(col):  # pyarrow.ChunkedArray -> pyarrow.ChunkedArray | None
    """``col`` without its NULL bitmap when every NULL slot already holds 0 bits, else None.

    connectorx writes 0 under its NULLs (checked here, not assumed: Arrow leaves them
    undefined), so a column filled with 0 (graph node ids, NVTX payloads: all NULL in most
    exports) needs no new buffer: 80 MB each at 10M rows, ~20K page faults.
    """
    import pyarrow as pa

    if col.type not in (pa.int64(), pa.float64()):
        return None
    chunks = []
    for ch in col.chunks:
        if ch.null_count:
            data = ch.buffers()[1]
            bits = np.frombuffer(data, dtype=np.int64, count=len(ch), offset=ch.offset * 8)
            if ch.null_count < len(ch):
                bits = bits[~ch.is_valid().to_numpy(zero_copy_only=False)]
            if bits.any():  # a value, or -0.0 or NaN: not what a fill with 0 writes
                return None
            ch = pa.Array.from_buffers(ch.type, len(ch), [None, data], offset=ch.offset)
        chunks.append(ch)
    return pa.chunked_array(chunks, type=col.type)


def unique_categories(cats: pd.Index) -> pd.CategoricalDtype:
    """The dtype of ``cats``, known to be unique: pandas' public constructors check by
    hashing every category, 0.1-0.2 s and a hash table per call at the 745,629 distinct
    range texts of a 1M-kernel PyTorch run (each call its own text)."""
    return pd.CategoricalDtype._from_fastpath(cats, ordered=False)


def _arrow_frame(tbl, names: list[str], arrow_text: bool = False) -> pd.DataFrame:
    """``tbl`` (a pyarrow.Table) as columns ``names``, text columns as categoricals with
    object categories in order of first appearance (Arrow's dictionaries, one across chunks),
    numbers as they are. ``arrow_text``: the categories stay Arrow strings (``string[pyarrow]``)
    instead of becoming Python strings: 0.41 GB instead of 0.71 GB for the 7.45M distinct
    range texts of a 10M-kernel PyTorch run, and no conversion when DLProf's database writes
    them (Arrow again: +0.88 GB for a moment).

    Each Arrow column is let go once converted, a text column's strings before its
    dictionary becomes Python strings (the caller holds no other reference to ``tbl``): at
    the NVTX table of a 10M-kernel PyTorch run the read's peak is ~0.6 GB lower."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kinds = (pa.types.is_string, pa.types.is_large_string)
    cols: list = []  # by position: the table's own names may repeat
    while tbl.num_columns:
        if not any(k(tbl.schema.field(0).type) for k in kinds):
            cols.append(tbl.column(0).to_pandas(self_destruct=True))
            tbl = tbl.remove_column(0)
            release_arrow_memory()  # mimalloc keeps freed pages for Arrow alone: give them back
            continue
        enc = pc.dictionary_encode(tbl.column(0))
        tbl = tbl.remove_column(0)  # the strings go: the dictionary holds each once
        release_arrow_memory()
        if not _one_dictionary(enc):  # Arrow gives its chunks one: unify only if not
            enc = enc.unify_dictionaries()  # (+1.4 GB for a moment at 7.45M texts)
        index_type = enc.type.index_type
        dictionary = enc.chunk(0).dictionary if enc.num_chunks else pa.array([], pa.string())
        indices = pa.chunked_array([c.indices for c in enc.chunks], index_type)
        del enc
        codes = pc.fill_null(indices, -1).to_numpy().astype(np.int32, copy=False)
        del indices
        if arrow_text and pa.types.is_string(dictionary.type):
            cats = unique_categories(pd.Index(pd.arrays.ArrowExtensionArray(dictionary)))
        else:
            values = dictionary.to_numpy(zero_copy_only=False).astype(object, copy=False)
            del dictionary
            release_arrow_memory()
            cats = unique_categories(pd.Index(values, dtype=object))
        cols.append(pd.Categorical.from_codes(codes, dtype=cats))
    return pd.DataFrame(dict(zip(names, cols, strict=True)), copy=False)


def _numbers(tables: list, defaults: list[int | float | None]) -> bool:
    """Whether runs of a table (pyarrow.Tables) are all int64 or double columns, each of the
    same type in every run, with no NULL left once ``defaults`` fill theirs."""
    import pyarrow as pa

    def kinds(t) -> list | None:
        out = []
        for i, field in enumerate(t.schema):
            typ, default = field.type, defaults[i]
            if t.column(i).null_count and default is None:
                return None  # NULLs kept: pandas' conversion decides what they become
            if pa.types.is_null(typ):  # all NULL: _fill_arrow gives the default's type
                typ = pa.float64() if isinstance(default, float) else pa.int64()
            out.append(typ)
        return out

    first = kinds(tables[0])
    numeric = first is not None and all(k in (pa.int64(), pa.float64()) for k in first)
    return numeric and all(kinds(t) == first for t in tables[1:])


def _numbers_frame(tables: list, defaults: list[int | float | None], names: list[str]):
    """Runs of a table of numbers (:func:`_numbers`) as one frame of numpy columns, each run
    copied into place and let go (connectorx frees a run's columns together, when the last
    goes) before the next: 1.25x the numbers at most with four runs, not 2x as converting
    the joined table column by column (the NVTX table's 13.4M ranges: ~0.6 GB less)."""
    n = sum(t.num_rows for t in tables)
    cols: list[np.ndarray | None] = [None] * len(names)
    pos = 0
    for k in range(len(tables)):
        t = _fill_arrow(tables[k], defaults)
        tables[k] = None
        for i in range(t.num_columns):
            values = t.column(i).to_numpy()
            if cols[i] is None:
                cols[i] = np.empty(n, values.dtype)
            cols[i][pos : pos + len(values)] = values
            del values
        pos += t.num_rows
        del t
        release_arrow_memory()
    return pd.DataFrame(dict(zip(names, cols, strict=True)), copy=False)


def _one_dictionary(enc) -> bool:  # enc: pyarrow.ChunkedArray of dictionaries
    """Whether every chunk holds the same dictionary (the same buffers)."""
    if enc.num_chunks < 2:
        return True
    first = [b.address if b is not None else 0 for b in enc.chunk(0).dictionary.buffers()]
    return all(
        [b.address if b is not None else 0 for b in c.dictionary.buffers()] == first
        for c in enc.chunks[1:]
    )


def _first_seen_categories(df: pd.DataFrame) -> pd.DataFrame:
    """The sqlite3 path's categories in order of first appearance, as connectorx's path has
    them (:func:`_arrow_frame`: Arrow's dictionaries).

    ``astype("category")`` sorts; ops and report rows with equal keys follow category order,
    so both paths must give the same one.
    """
    for col in df.columns:
        if isinstance(df[col].dtype, pd.CategoricalDtype):
            cat = df[col].array
            if len(cat.categories) == 0:  # all NULL (e.g. NVTX text only via textId)
                continue
            cats = np.asarray(cat.categories, dtype=object)
            seen = pd.unique(np.asarray(cat.codes))  # small codes as they are (int8/int16)
            seen = seen[seen >= 0]
            if len(seen) == len(cats) and (seen == np.arange(len(cats))).all():
                # Arrow's dictionaries: already in order; only the categories' dtype changes
                df[col] = pd.Categorical.from_codes(
                    cat.codes, categories=pd.Index(cats, dtype=object)
                )
                continue
            codes = np.asarray(cat.codes, dtype=np.int64)
            remap = np.full(len(cat.categories), -1, dtype=np.int32)
            remap[seen] = np.arange(len(seen), dtype=np.int32)
            new = np.where(codes >= 0, remap[np.maximum(codes, 0)], -1).astype(np.int32)
            df[col] = pd.Categorical.from_codes(new, categories=pd.Index(cats[seen], dtype=object))
    return df


def _as_int64(x: pd.Series, na: int) -> np.ndarray:
    """int64 values with NULL as ``na``; no copy when the column is int64 already.

    ``Series.to_numpy(na_value=...)`` always copies (and scans for NA); at 1M rows that was
    ~15 ms and 8 MB of fresh memory per column, for the ~30 columns of an export.
    """
    if x.dtype == np.int64:
        return x.to_numpy(copy=False)
    return x.to_numpy(dtype=np.int64, na_value=na)


def _int(df: pd.DataFrame, col: str) -> np.ndarray:
    return _as_int64(df[col], -1)


class _Select:
    """A SELECT of bare columns of ``table`` whose NULLs (and absence) become defaults after
    reading.

    Columns move and disappear across nsys versions; a missing one is selected as its
    default literal. See :meth:`_Fetcher.frame` for why not ``coalesce()``. Built once per
    table (:func:`_event_selects`): the stream started for it and its reader share it.
    """

    def __init__(self, table: str, avail: list[str]) -> None:
        self.table = table
        self.avail = avail
        self.exprs: list[str] = []
        self.names: list[str] = []
        self.fill: dict[str, int | float] = {}

    def col(self, name: str, out: str, default: int | float = 0, *alts: str) -> _Select:
        col = schema.pick(self.avail, name, *alts)
        self.exprs.append(col or repr(default))
        self.names.append(out)
        self.fill[out] = default
        return self

    def raw(self, sql: str, out: str) -> _Select:
        """An expression read as is (text columns: NULL stays NULL)."""
        self.exprs.append(sql)
        self.names.append(out)
        return self

    @property
    def sql(self) -> str:
        return f"SELECT {', '.join(self.exprs)} FROM {self.table}{self.tail}"

    tail = ""  # a WHERE/ORDER BY clause (:meth:`where`); the whole read has none

    def only(self, *names: str) -> _Select:
        """A copy with the columns ``names`` alone: the same expressions and NULL defaults."""
        out = _Select(self.table, self.avail)
        for n in names:
            i = self.names.index(n)
            out.exprs.append(self.exprs[i])
            out.names.append(n)
            if n in self.fill:
                out.fill[n] = self.fill[n]
        return out

    def where(self, clause: str) -> _Select:
        """A copy reading the rows of ``clause`` (``WHERE ...``, ``ORDER BY ...``) only."""
        out = _Select(self.table, self.avail)
        out.exprs, out.names, out.fill = list(self.exprs), list(self.names), dict(self.fill)
        out.tail = f" {clause}"
        return out


def _activity(table: str, avail: list[str]) -> _Select:
    """The columns every GPU activity table starts with: times, device, stream, launch."""
    q = _Select(table, avail).raw("start", "start_ns").raw("end", "end_ns")
    q.col("deviceId", "device_id").col("streamId", "stream_id")
    return q.col("correlationId", "correlation_id", -1).col("globalPid", "global_pid")


def _sel(avail: list[str], name: str, default: str = "0", *alts: str) -> str:
    """SQL for a column that may be missing or NULL in some nsys versions."""
    col = schema.pick(avail, name, *alts)
    return f"coalesce({col}, {default})" if col else default


def _read_strings(conn: sqlite3.Connection) -> StringTable:
    rows = conn.execute("SELECT id, value FROM StringIds").fetchall()
    if not rows:
        return StringTable(np.zeros(0, np.int64), np.zeros(0, object))
    ids, values = zip(*rows, strict=True)
    return StringTable(np.asarray(ids, np.int64), np.asarray(values, dtype=object))


_KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
_COPIES = (("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"), ("CUPTI_ACTIVITY_KIND_MEMSET", "memset"))
_API = "CUPTI_ACTIVITY_KIND_RUNTIME"
_NVTX = "NVTX_EVENTS"
# the GPU tables in ``Trace.gpu``'s row order, each with its rows' kind
_GPU_TABLES = ((_KERNELS, "kernel"), *_COPIES)
GPU_CATEGORICAL = ("kind", "name", "long_name")
API_CATEGORICAL = ("name",)
UNKNOWN_KERNEL = "<unknown kernel>"
UNKNOWN_API = "<unknown api>"


def _kernel_select(conn: sqlite3.Connection) -> _Select:
    q = _activity(_KERNELS, schema.columns(conn, _KERNELS))
    q.col("shortName", "short_id", -1).col("demangledName", "demangled_id", -1)
    dims = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
    for c, out in zip(dims, _LAUNCH_DIMS, strict=True):
        q.col(c, out)
    return q.col("graphNodeId", "graph_node_id")


def _copy_select(conn: sqlite3.Connection, table: str, kind: str) -> _Select:
    a = schema.columns(conn, table)
    q = _activity(table, a).col("bytes", "bytes")
    if kind == "memcpy":
        # CUPTI memory kind 0 = pageable host memory: such copies stall the host
        pageable_sql = f"({_sel(a, 'srcKind', '-1')} = 0 OR {_sel(a, 'dstKind', '-1')} = 0)"
        q.col("copyKind", "copy_kind")
    else:
        pageable_sql = "0"
        q.raw("-1", "copy_kind")
    return q.col("graphNodeId", "graph_node_id").raw(pageable_sql, "pageable")


def _api_select(conn: sqlite3.Connection) -> _Select:
    q = _Select(_API, schema.columns(conn, _API)).raw("start", "start_ns").raw("end", "end_ns")
    q.col("globalTid", "global_tid").col("correlationId", "correlation_id", -1)
    return q.col("nameId", "name_id", -1).col("eventClass", "event_class")


def _nvtx_select(conn: sqlite3.Connection, table: str) -> _Select:
    """``table``: the export's NVTX table (``NVTX_EVENTS`` or a versioned ``NVTX_EVENTS_V<n>``,
    :func:`schema.table_name`); selected as ``_NVTX`` whatever its name."""
    a = schema.columns(conn, table)
    # every row, filtered by type below: a WHERE on eventType cost SQLite more than reading
    # the few rows of other types (thread names, categories) and dropping them; rows of no
    # range or mark type (domain creations, type 75, whose end is NULL) are used for names only
    q = _Select(table, a).raw("start", "start_ns").col("end", "end_ns", -1)
    q.col("globalTid", "global_tid").col("endGlobalTid", "end_global_tid", -1)
    q.col("eventType", "event_type", -1).col("domainId", "domain_id")
    q.col("textId", "text_id", -1).raw("text" if "text" in a else "NULL", "text_inline")
    return q.col("int64Value", "int64_value").col("doubleValue", "double_value", 0.0)


def _event_selects(conn: sqlite3.Connection, tabs: set[str]) -> dict[str, _Select]:
    """The SELECT of each event table the export has, built once, largest last: streams
    start in this order and the readers take them in it, working on the smaller ones while
    connectorx still reads the kernels."""
    selects = [_copy_select(conn, t, k) for t, k in _COPIES if t in tabs]
    selects += [_api_select(conn)] if _API in tabs else []
    nvtx = schema.table_name(tabs, _NVTX)
    selects += [_nvtx_select(conn, nvtx)] if nvtx else []
    selects += [_kernel_select(conn)] if _KERNELS in tabs else []
    # keyed by the table's plain name: the NVTX table's own may carry a version suffix
    return {(_NVTX if q.table == nvtx else q.table): q for q in selects}


def _start_event_tables(f: _Fetcher, selects: dict[str, _Select]) -> bool:
    """Start connectorx on every event table at once; False when it cannot stream them."""
    started = [f.start(q, f.rows_at_most(q.table)) for q in selects.values()]
    return any(started)


def _read_gpu_work(f: _Fetcher, selects: dict[str, _Select], strings: StringTable) -> pd.DataFrame:
    parts = []
    for table, kind in _GPU_TABLES:
        if table in selects:
            df = f.frame(selects[table])
            if len(df):
                parts.append(_gpu_part(df, kind, strings))
    return _gpu_frame(parts)


def _gpu_part(df: pd.DataFrame, kind: str, strings: StringTable) -> pd.DataFrame:
    """One GPU activity table's rows (``kind``: kernel, memcpy, memset) with names and kind."""
    if kind == "kernel":
        short, long_ = _int(df, "short_id"), _int(df, "demangled_id")
        # the short name for display, the demangled one for evidence; each the other's
        # fallback (an export may lack one of them)
        name_id = np.where(short >= 0, short, long_)
        long_id = np.where(long_ >= 0, long_, short)
        del short, long_  # views of the columns dropped next: let their memory go
        df = df.drop(columns=["short_id", "demangled_id"])
        df["name"] = strings.categorical(name_id, UNKNOWN_KERNEL)
        df["long_name"] = strings.categorical(long_id, UNKNOWN_KERNEL)
        del name_id, long_id
        df["kind"] = _const_cat("kernel", len(df))
        return df  # bytes and pageable: 0 (see _stack)
    name = _memcpy_names(_int(df, "copy_kind")) if kind == "memcpy" else _memset_names(len(df))
    df["name"] = name
    df["long_name"] = name
    df["kind"] = _const_cat(kind, len(df))
    return df.drop(columns=["copy_kind"])  # launch dimensions: 0 (see _stack)


def _memcpy_names(ck: np.ndarray) -> pd.Categorical:
    """nsys's memcpy names of copy kinds ``ck``; categories in copy kind order."""
    kinds = np.unique(ck)
    labels = np.array(
        [schema.MEMCPY_KIND_NAMES.get(int(k), "[CUDA memcpy Unknown]") for k in kinds],
        dtype=object,
    )
    return pd.Categorical.from_codes(
        np.searchsorted(kinds, ck).astype(np.int32), categories=pd.Index(labels, dtype=object)
    )


def _memset_names(n: int) -> pd.Categorical:
    return _const_cat(schema.MEMSET_NAME, n)


def _gpu_frame(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The GPU parts (kernels, memcpy, memset, each non-empty) as one ``Trace.gpu`` frame."""
    if not parts:
        return empty_frame(GPU_COLUMNS, GPU_CATEGORICAL)
    cols = {}
    for c in GPU_COLUMNS:
        if c in GPU_CATEGORICAL:
            cols[c] = _concat_cats([p[c].array for p in parts])
        else:
            cols[c] = _stack(parts, c)
    return pd.DataFrame({c: cols[c] for c in GPU_COLUMNS}, copy=False)  # no consolidation copy


def _stack(parts: list[pd.DataFrame], col: str) -> np.ndarray:
    """Column ``col`` of the parts end to end as int64, 0 for a part without it; int32 for
    the :data:`_NARROW` columns whose values all fit.

    Each part gives its column up (``pop``) as it is copied, so a kernel column's memory
    goes before the next is copied: the read's peak holds one column twice, not all of
    them (1.2 GB at 10M kernels). A single int64 part's column is used as is (no copy).
    """
    sizes = [len(p) for p in parts]
    have = [None if col not in p.columns else _as_int64(p.pop(col), 0) for p in parts]
    small = col in _NARROW and all(h is None or fits_int32(h) for h in have)
    dtype = np.int32 if small else np.int64
    if len(parts) == 1:
        return np.zeros(sizes[0], dtype) if have[0] is None else have[0].astype(dtype, copy=False)
    out = np.empty(sum(sizes), dtype)
    start = 0
    for i, n in enumerate(sizes):
        out[start : start + n] = 0 if have[i] is None else have[i]
        have[i] = None
        start += n
    return out


def _const_cat(value: str, n: int) -> pd.Categorical:
    """A categorical of one repeated string (no per-row string objects)."""
    return pd.Categorical.from_codes(
        np.zeros(n, np.int32), categories=pd.Index([value], dtype=object)
    )


def _concat_cats(cats: list[pd.Categorical]) -> pd.Categorical:
    """Concatenate categoricals with different categories through their codes.

    Each part's codes are mapped straight into one array of pandas' own code dtype (int8 for
    few categories), without a concatenated int64 copy and its conversion.
    """
    both = np.concatenate([np.asarray(c.categories, dtype=object) for c in cats])
    remap, uniq = pd.factorize(both, sort=False)
    categories = pd.Index(np.asarray(uniq, object), dtype=object)
    dtype = pd.CategoricalDtype(categories)
    codes = np.empty(sum(len(c) for c in cats), pd.Categorical([], dtype=dtype).codes.dtype)
    off, start = 0, 0
    for c in cats:
        k, n = len(c.categories), len(c)
        np.take(
            remap[off : off + k].astype(codes.dtype),
            np.asarray(c.codes),
            out=codes[start : start + n],
        )
        off += k
        start += n
    return pd.Categorical.from_codes(codes, dtype=dtype)


def _read_api(f: _Fetcher, selects: dict[str, _Select], strings: StringTable) -> pd.DataFrame:
    if _API not in selects:
        return empty_frame(API_COLUMNS, API_CATEGORICAL)
    df = f.frame(selects[_API])
    # a new frame of the columns as they are: assigning them back to ``df`` copied each
    cols = {c: _int(df, c) for c in API_COLUMNS if c != "name"}
    cols["event_class"] = narrow(cols["event_class"])  # 0 runtime, 1 driver
    cols["correlation_id"] = narrow(cols["correlation_id"])
    cols["name"] = _api_names(_int(df, "name_id"), strings)
    return pd.DataFrame({c: cols[c] for c in API_COLUMNS}, copy=False)


def _api_names(name_id: np.ndarray, strings: StringTable) -> pd.Categorical:
    """API call names of StringIds ``name_id``, CUPTI's version suffix stripped; categories
    in first-seen order."""
    codes, uniq = pd.factorize(name_id, sort=False)
    stripped = np.array(
        [
            schema.strip_api_suffix(str(x))
            for x in strings.lookup(np.asarray(uniq, np.int64), UNKNOWN_API)
        ],
        dtype=object,
    )
    name_codes, cats = pd.factorize(stripped, sort=False)
    return pd.Categorical.from_codes(
        np.asarray(name_codes, np.int32)[codes],
        categories=pd.Index(np.asarray(cats, object), dtype=object),
    )


def _read_nvtx(
    f: _Fetcher, selects: dict[str, _Select], strings: StringTable, parts: int = 0
) -> tuple[pd.DataFrame, ...]:
    """The NVTX ranges and marks. ``parts`` > 0: the table is not being read yet; its texts
    are read first and then its numbers, each as ``parts`` runs of rowids, so the texts'
    dictionary is built before the numbers arrive (the read's peak: 0.8 GB less at the
    13.4M ranges of a 10M-kernel PyTorch run)."""
    empty = (
        empty_frame(NVTX_COLUMNS, ("domain", "text")),
        empty_frame(MARK_COLUMNS, ("domain", "text")),
    )
    if _NVTX not in selects:
        return empty
    q = selects[_NVTX]
    if parts:
        texts = q.only("text_inline")
        f.start(texts, f.rows_at_most(q.table), parts)
        inline = f.frame(texts, arrow_text=True)["text_inline"]  # the range pass, the dldb
        # the numbers (the texts' ids among them) by twice as many runs, each copied into
        # the frame's columns and let go before the next (:meth:`_Fetcher.frame`): the
        # numbers' phase then holds 1.25x their size at most, not 2x
        q = q.only(*[n for n in q.names if n not in texts.names])
        f.start(q, len(inline), 2 * parts)
    df = f.frame(q)
    if not len(df):
        return empty
    ints = ("start_ns", "end_ns", "global_tid", "end_global_tid", "event_type", "domain_id")
    col = {c: _int(df, c) for c in ints}  # as they are (no copy) when int64
    col["int64_value"] = df["int64_value"].to_numpy()
    col["double_value"] = df["double_value"].to_numpy()
    text = _nvtx_text(inline if parts else df["text_inline"], _int(df, "text_id"), strings)
    del df  # ``col`` holds what is left: each column's memory goes once it is split below
    etype = col["event_type"]
    # domains: eventType-75 rows, matched on domainId AND process (as nsys stats does)
    proc = (col["global_tid"] & 0x0000FFFFFF000000) >> 24
    dom_key = proc * (1 << 32) + col["domain_id"]
    is_dom = etype == schema.NVTX_DOMAIN_CREATE
    # the few domain rows' texts, not every row's (an object array of 10M strings at 10M)
    domain_names = np.asarray(text[is_dom].astype(object)) if is_dom.any() else np.zeros(0, object)
    uniq_keys, first = np.unique(dom_key[is_dom], return_index=True)
    dom_lookup = (
        pd.Index(uniq_keys).get_indexer(dom_key) if len(uniq_keys) else np.full(len(etype), -1)
    )
    del proc, dom_key
    dom_cats = np.concatenate([[""], domain_names[first]]).astype(object)
    dom_codes, dom_uniq = pd.factorize(dom_cats, sort=False)
    domain = pd.Categorical.from_codes(
        np.asarray(dom_codes, np.int32)[dom_lookup + 1],
        categories=pd.Index(np.asarray(dom_uniq, object), dtype=object),
    )
    is_range = np.isin(etype, schema.NVTX_RANGE_TYPES)
    is_mark = etype == schema.NVTX_MARK
    # open ranges end at the last time of the event kinds read (not of thread names etc.)
    known = is_range | is_mark | is_dom
    last = int(max(col["start_ns"][known].max(initial=0), col["end_ns"][known].max(initial=0)))
    del col["domain_id"], known, is_dom, dom_lookup
    # each read column split into its range and mark rows, then let go (at 10M kernels the
    # NVTX table's columns held ~0.5 GB more at the read's peak)
    out_rng = {"event_type": narrow(etype[is_range]), "domain": _used(domain, is_range)}
    out_marks = {"domain": _used(domain, is_mark)}
    del etype, col["event_type"], domain
    out_rng["text"], out_marks["text"] = _used(text, is_range), _objects(_used(text, is_mark))
    del text
    release_arrow_memory()  # the texts' Arrow codes (see _split)
    out_rng["start_ns"], out_marks["ts_ns"] = _split(col, "start_ns", is_range, is_mark)
    out_rng["global_tid"], out_marks["global_tid"] = _split(col, "global_tid", is_range, is_mark)
    out_rng["end_ns"] = _split(col, "end_ns", is_range)[0]  # a copy
    out_rng["end_ns"][out_rng["end_ns"] < 0] = last  # open ranges closed at the last NVTX time
    out_rng["end_global_tid"] = _split(col, "end_global_tid", is_range)[0]
    out_marks["int64_value"] = _split(col, "int64_value", is_mark)[0]
    out_marks["double_value"] = _split(col, "double_value", is_mark)[0]
    rng = pd.DataFrame({c: out_rng[c] for c in NVTX_COLUMNS}, copy=False)
    return rng, pd.DataFrame({c: out_marks[c] for c in MARK_COLUMNS}, copy=False)


def _split(col: dict[str, np.ndarray], name: str, *rows: np.ndarray) -> list[np.ndarray]:
    """Column ``name`` at each of ``rows`` (boolean masks); the column leaves ``col``, and
    what Arrow's pool kept of it goes back at once: it was read into Arrow's memory, and
    the copies would stack on it (the read's peak at 13.4M ranges, 1.1 GB over its end)."""
    values = col.pop(name)
    out = [values[r] for r in rows]
    del values
    release_arrow_memory()
    return out


def _used(cat: pd.Categorical, rows: np.ndarray) -> pd.Categorical:
    """``cat[rows].remove_unused_categories()``: same categories in the same order.

    pandas finds the used categories with ``np.unique`` of every code (a sort); counting
    them is ~5x faster on 1M rows.
    """
    codes = np.asarray(cat.codes)[rows]
    n = len(cat.categories)
    # code -1 (missing) is not a category; int32: the smallest codes (int8) would overflow
    used = np.bincount(np.add(codes, 1, dtype=np.int32), minlength=n + 1)[1:] > 0
    if used.all():  # the same categories: no new Index to hash (7M unique PyTorch texts)
        return pd.Categorical.from_codes(codes, dtype=cat.dtype)
    remap = np.append(np.cumsum(used, dtype=np.int32) - 1, np.int32(-1))  # [-1] -> -1
    return pd.Categorical.from_codes(remap[codes], dtype=unique_categories(cat.categories[used]))


def _objects(cat: pd.Categorical) -> pd.Categorical:
    """``cat`` with object categories (Python strings), as every reader but the range pass
    and the dldb writer expects them."""
    if cat.categories.dtype == object:
        return cat
    cats = pd.Index(np.asarray(cat.categories, dtype=object), dtype=object)
    return pd.Categorical.from_codes(np.asarray(cat.codes), dtype=unique_categories(cats))


def _objcat(values: pd.Series | pd.Categorical) -> pd.Categorical:
    """A categorical with object-dtype (or Arrow string, :func:`_arrow_frame`: they stay so)
    categories and no missing values ('' instead)."""
    cat = values.array if isinstance(values, pd.Series) else values
    if not isinstance(cat, pd.Categorical):
        cat = pd.Categorical(np.asarray(values, dtype=object))
    codes = np.asarray(cat.codes)
    arrow = arrow_strings(cat.categories)
    if (arrow is not None or cat.categories.dtype == object) and not (codes < 0).any():
        return cat  # already so: no new Index to hash
    codes = codes.astype(np.int32)
    if arrow is not None:
        return _arrow_categorical(*_blank_for_missing(codes, arrow))
    cats = np.asarray(cat.categories, dtype=object)
    codes, cats = _blank_for_missing(codes, cats)
    return pd.Categorical.from_codes(codes, dtype=unique_categories(pd.Index(cats, dtype=object)))


def _arrow_categorical(codes: np.ndarray, values) -> pd.Categorical:  # values: pyarrow.Array
    cats = pd.Index(pd.arrays.ArrowExtensionArray(values))
    return pd.Categorical.from_codes(codes, dtype=unique_categories(cats))


def _blank_for_missing(codes: np.ndarray, cats):  # cats: object ndarray or pyarrow.Array
    """``codes`` with missing (-1) as the first '' category (one appended where none is)."""
    if not (codes < 0).any():
        return codes, cats
    if isinstance(cats, np.ndarray):
        blank = np.flatnonzero(cats == "")  # no hash table of every category for one
        if not len(blank):
            blank, cats = [len(cats)], np.append(cats, np.array([""], dtype=object))
    else:
        import pyarrow as pa
        import pyarrow.compute as pc

        blank = np.flatnonzero(pc.equal(cats, "").to_numpy(zero_copy_only=False))
        if not len(blank):
            blank, cats = [len(cats)], pa.concat_arrays([cats, pa.array([""], cats.type)])
    return np.where(codes < 0, np.int32(blank[0]), codes), cats


def _nvtx_text(inline: pd.Series, text_id: np.ndarray, strings: StringTable) -> pd.Categorical:
    """coalesce(StringIds[textId], text), exactly as nsys stats resolves range names."""
    cat = _objcat(inline)
    has_id = text_id >= 0
    if not has_id.any():
        return cat
    reg = strings.categorical(text_id[has_id])
    arrow = arrow_strings(cat.categories)
    reg_cats = np.asarray(reg.categories, dtype=object)
    if arrow is not None:  # both in first-seen order, as pd.factorize numbers them
        import pyarrow as pa
        import pyarrow.compute as pc

        enc = pc.dictionary_encode(pa.concat_arrays([arrow, pa.array(reg_cats, arrow.type)]))
        remap = enc.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    else:
        remap, cats = pd.factorize(
            np.concatenate([np.asarray(cat.categories, dtype=object), reg_cats]), sort=False
        )
    codes = remap[: len(cat.categories)][np.asarray(cat.codes)]
    codes[has_id] = remap[len(cat.categories) :][np.asarray(reg.codes)]
    if arrow is not None:
        return _arrow_categorical(codes.astype(np.int32), enc.dictionary)
    return pd.Categorical.from_codes(
        codes.astype(np.int32),
        dtype=unique_categories(pd.Index(np.asarray(cats, object), dtype=object)),
    )


def _read_osrt(f: _Fetcher, tabs: set[str], strings: StringTable) -> pd.DataFrame:
    """Only the file I/O calls of OSRT_API: the rest can be millions of rows we never use."""
    t = "OSRT_API"
    if t not in tabs or len(strings.ids) == 0:
        return empty_frame(OSRT_COLUMNS, ("name",))
    io_ids = [
        int(i)
        for i, v in zip(strings.ids, strings.values, strict=True)
        if isinstance(v, str) and _IO_NAME.match(v)
    ]
    if not io_ids:
        return empty_frame(OSRT_COLUMNS, ("name",))
    marks = ",".join("?" * len(io_ids))
    rows = f.conn.execute(
        f"SELECT start, end, globalTid, nameId FROM {t} WHERE nameId IN ({marks})", io_ids
    ).fetchall()
    if not rows:
        return empty_frame(OSRT_COLUMNS, ("name",))
    df = pd.DataFrame.from_records(rows, columns=["start_ns", "end_ns", "global_tid", "name_id"])
    df["name"] = strings.categorical(df["name_id"].to_numpy())
    return df[OSRT_COLUMNS]


def _read_gpus(conn: sqlite3.Connection, tabs: set[str]) -> pd.DataFrame:
    t = "TARGET_INFO_GPU"
    if t not in tabs:
        return empty_frame(GPU_INFO_COLUMNS, ())
    a = schema.columns(conn, t)
    sql = (
        f"SELECT id, {_sel(a, 'cuDevice', 'id')}, coalesce(name, ''), {_sel(a, 'smCount', '-1')}, "
        f"{_sel(a, 'computeMajor', '-1')}, {_sel(a, 'computeMinor', '-1')} FROM {t} ORDER BY id"
    )
    df = pd.DataFrame.from_records(conn.execute(sql).fetchall(), columns=GPU_INFO_COLUMNS)
    df = df.drop_duplicates("gpu_id")
    if "TARGET_INFO_CUDA_DEVICE" in tabs:
        # 2025.1+: which GPUs the profiled processes could see, and their CUDA ordinals
        seen = conn.execute("SELECT DISTINCT gpuId, cudaId FROM TARGET_INFO_CUDA_DEVICE").fetchall()
        if seen:
            m = dict(seen)
            df = df[df["gpu_id"].isin(m)].copy()
            df["cu_device"] = df["gpu_id"].map(m)
    return df.reset_index(drop=True)


def _read_meta(conn: sqlite3.Connection, tabs: set[str]) -> dict[str, str]:
    meta: dict[str, str] = {}
    for t in (*schema.META_TABLES, "TARGET_INFO_SYSTEM_ENV"):
        if t in tabs and {"name", "value"} <= set(schema.columns(conn, t)):
            for name, value in conn.execute(f"SELECT name, value FROM {t}"):
                meta.setdefault(str(name), "" if value is None else str(value))
    return meta


def _in_thread(
    fn, path: Path, selects: dict[str, _Select], strings: StringTable, use_cx: bool | None
):
    """Run a table reader on its own connection (sqlite3 connections stay in one thread)."""
    conn = _connect(path)
    try:
        return fn(_Fetcher(path, conn, use_cx), selects, strings)
    finally:
        conn.close()


NO_NVTX_TABLE = (
    "the export has no NVTX table (NVTX_EVENTS): jlprof finds ops and iterations from NVTX "
    "ranges; capture with `nsys profile -t cuda,nvtx` and annotate the training loop"
)


def trace_warnings(
    tabs: set[str], n_gpu: int, n_nvtx: int, n_api: int, api_names: pd.Index
) -> list[str]:
    """The read's warnings: no events at all; a capture whose CUDA API or kernel table is
    missing reads, but its numbers are partial. From the tables' row counts and the API
    calls' names (the windowed engine has no whole frames)."""
    out = []
    if not n_gpu and not n_nvtx and not n_api:
        out.append("the export holds no CUDA, NVTX or API events")
    if n_gpu and "CUPTI_ACTIVITY_KIND_RUNTIME" not in tabs:
        out.append(
            "the export has GPU work but no CUDA API table (CUPTI_ACTIVITY_KIND_RUNTIME): kernels "
            "are not attributed to ops and API times are 0; capture with `nsys profile -t cuda`"
        )
    if "NVTX_EVENTS" not in tabs and (n_gpu or n_api):
        out.append(NO_NVTX_TABLE)
    launches = api_names.astype(str).str.contains("Launch") if n_api else []
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tabs and any(launches):
        out.append(
            "the export has kernel launches but no kernel table (CUPTI_ACTIVITY_KIND_KERNEL): "
            "GPU times are missing; re-export the report (`nsys export --type sqlite -f true`)"
        )
    return out


def read_trace(
    path: str | Path,
    *,
    use_connectorx: bool | None = None,
    progress: Progress | None = None,
    work: bool = True,
) -> Trace:
    """Read every table the engine needs from an nsys SQLite export. ``work=False``: all but
    the API calls and GPU work (empty frames; no warnings about them), which the windowed
    engine reads window by window (:mod:`jlprof.engine.windowed.windows`). An nvprof database is
    read whole by :mod:`jlprof.engine.read.nvprof`."""
    from jlprof.engine.read.nvprof import is_nvprof, read_nvprof

    if is_nvprof(Path(path)):
        return read_nvprof(path)
    with small_pages():
        return _read_trace(Path(path), use_connectorx, progress, work)


def damaged(path: Path, exc: sqlite3.DatabaseError) -> InputError:
    """The one error for an export SQLite cannot read; a column the reader expects and the
    file lacks is a table layout jlprof does not know, not damage (issue 46)."""
    if str(exc).startswith("no such column"):
        return InputError(
            f"{path} has a table whose columns jlprof does not know (SQLite: {exc}): not the "
            "layout of an nsys export (2021.1 or later). Give the file written by `nsys export "
            "--type sqlite` unchanged."
        )
    return InputError(f"{path} is damaged or truncated: SQLite cannot read it ({exc}). {REEXPORT}")


def open_export(path: Path) -> tuple[sqlite3.Connection, set[str]]:
    """A connection to the nsys export ``path`` and its tables; one clear error otherwise."""
    check_database(path)
    try:
        conn = _connect(path)
        tabs = schema.tables(conn)
    except sqlite3.DatabaseError as exc:
        raise damaged(path, exc) from exc
    missing = schema.missing_export_tables(tabs)
    if missing:
        conn.close()
        raise InputError(
            f"{path} is a SQLite database but not an nsys export ({missing}). Give the file "
            "written by `nsys export --type sqlite`."
        )
    return conn, tabs


def _read_trace(
    path: Path, use_connectorx: bool | None, progress: Progress | None, work: bool = True
) -> Trace:
    say = progress or (lambda _msg: None)
    conn, tabs = open_export(path)
    try:
        f = _Fetcher(path, conn, use_connectorx)
        strings = _read_strings(conn)
        say("reading GPU activities, CUDA API calls and NVTX ranges")
        selects = _event_selects(conn, tabs)
        if not work:
            selects = {k: v for k, v in selects.items() if k == _NVTX}
        # connectorx reads them all at once, in threads; read alone (the windowed engine's
        # first read), the NVTX table is read as two runs of rowids at once, its texts first
        if not work:
            api, gpu = _read_api(f, selects, strings), _read_gpu_work(f, selects, strings)
            nvtx, marks = _read_nvtx(f, selects, strings, parts=2)
        elif _start_event_tables(f, selects):
            api = _read_api(f, selects, strings)
            nvtx, marks = _read_nvtx(f, selects, strings)
            gpu = _read_gpu_work(f, selects, strings)
        else:  # the three big tables load concurrently (connectorx reads outside the GIL)
            with ThreadPoolExecutor(max_workers=2) as pool:
                args = (path, selects, strings, use_connectorx)
                fut_api = pool.submit(_in_thread, _read_api, *args)
                fut_nvtx = pool.submit(_in_thread, _read_nvtx, *args)
                gpu = _read_gpu_work(f, selects, strings)
                api = fut_api.result()
                nvtx, marks = fut_nvtx.result()
        osrt = _read_osrt(f, tabs, strings)
        gpus = _read_gpus(conn, tabs)
        meta = _read_meta(conn, tabs)
    except sqlite3.DatabaseError as exc:
        raise damaged(path, exc) from exc
    finally:
        conn.close()
    release_reader_memory()  # the Arrow buffers and the reader threads' heaps
    warnings = (
        trace_warnings(tabs, len(gpu), len(nvtx), len(api), api["name"].cat.categories)
        if work
        else []
    )
    return Trace(
        gpu=gpu,
        api=api,
        nvtx=nvtx,
        marks=marks,
        osrt=osrt,
        gpus=gpus,
        meta=meta,
        source=path,
        warnings=warnings,
        nvtx_table=selects[_NVTX].table if _NVTX in selects else "",
    )


__all__ = ["GLOBAL_PID_MASK", "StringTable", "check_database", "read_trace"]
