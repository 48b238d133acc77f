"""The jlprof database: a normalised trace saved for fast re-analysis.

Two containers of the same content — Arrow IPC tables, one per
:class:`~jlprof.engine.read.trace.Trace` frame, plus a JSON manifest:

* ``.jlprof``: a zip (stored, not compressed) of ``<frame>.arrow`` and ``manifest.json``;
* ``.sqlite`` (the DLProf database's name, ``dlprof_dldb.sqlite``, guide §2.3, §4.3): an SQLite
  file with one table ``jlprof_dldb(name, data)`` holding the same entries as blobs, so a DLProf
  user's ``--database=dlprof_dldb.sqlite`` works. It is jlprof's content, not DLProf's schema.
  A frame is written in parts of at most ``PART_BYTES`` (rows ``gpu.arrow``, ``gpu.arrow.1``,
  ...; format version 2 when any frame has more than one): SQLite refuses blobs over 1e9 bytes.

Both containers are written by :func:`open_store` (:class:`DldbWriter`, :class:`ZipWriter`),
frame by frame or part by part (:class:`FrameParts`: a frame's rows arriving over time, as the
windowed engine has them), in any order, to the same frames as :func:`save_trace` of the whole
trace (the SQLite file to the same bytes).

Reading either skips the nsys export's schema probing entirely; ``--database`` accepts both like
an nsys export, told apart by their first bytes and tables.
"""

from __future__ import annotations

import errno
import io
import json
import os
import zipfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import IO

import pandas as pd

from jlprof.background import Checked
from jlprof.engine.read.schema import sqlite_uri
from jlprof.engine.read.trace import Trace
from jlprof.errors import InputError
from jlprof.outputs import written

FORMAT = "jlprof-trace"
VERSION = 2  # 2: a dldb frame may span rows name, name.1, ... (_BlobParts)
PART_BYTES = 4 * 1024 * 1024  # each part is copied ~4x on its way into SQLite
FRAMES = ("gpu", "api", "nvtx", "marks", "osrt", "gpus")
ZIP_MAGIC = b"PK\x03\x04"
SQLITE_MAGIC = b"SQLite format 3\x00"
DLDB_TABLE = "jlprof_dldb"
#: How the database is written. It is a new file renamed into place only when whole
#: (:func:`jlprof.outputs.written`), so a rollback journal and its syncs guard nothing: a
#: failure leaves no file at all. Its rows are Feather blobs, and a page is a write call:
#: with 64 KiB pages the 138 MB database of 1M kernels is 2.1k writes, not 33.7k of 4 KiB
#: (``strace -c``); the windowed 10M command's system time went from 8.6-9.6 s to 7.3-8.4 s
#: (BENCHMARKS.md, 2026-11-27, four alternated pairs). Files differ from older jlprof's in
#: their page size only: every row is the same.
DLDB_PRAGMAS = ("page_size = 65536", "journal_mode = OFF", "synchronous = OFF")


def is_dldb(path: Path) -> bool:
    """True when ``path`` is an SQLite file holding a jlprof database (``jlprof_dldb`` table)."""
    import sqlite3

    try:
        with path.open("rb") as fh:
            if fh.read(16) != SQLITE_MAGIC:
                return False
        conn = sqlite3.connect(sqlite_uri(path), uri=True)
        try:
            row = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (DLDB_TABLE,)
            ).fetchone()
        finally:
            conn.close()
        return row is not None
    except (OSError, sqlite3.Error):
        return False


def is_jlprof_db(path: Path) -> bool:
    """True when ``path`` looks like a saved jlprof database (zip with our manifest)."""
    try:
        with path.open("rb") as fh:
            if fh.read(4) != ZIP_MAGIC:
                return False
        with zipfile.ZipFile(path) as z:
            return "manifest.json" in z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def _manifest_bytes(meta: dict, source: object, warnings: list, version: int) -> bytes:
    return json.dumps(
        {
            "format": FORMAT,
            "version": version,
            "meta": meta,
            "source": str(source or ""),
            "warnings": warnings,
        }
    ).encode()


def _write_frames(
    trace: Trace,
    sink: Callable[[str], AbstractContextManager[IO[bytes]]],
    check: Callable[[], None] | None = None,
) -> None:
    """Each frame as Arrow IPC (Feather v2) into ``sink(entry name)``, one frame at a time and
    streamed: no frame's bytes are ever held whole (10M kernels: a 1.3 GB ``gpu.arrow``).
    ``check`` is called before every write (a background save that may be cancelled)."""
    import pyarrow as pa
    import pyarrow.feather as feather

    for name in FRAMES:
        table = pa.Table.from_pandas(getattr(trace, name), preserve_index=False)
        with sink(f"{name}.arrow") as out:
            dest = out if check is None else Checked(out, check)
            feather.write_feather(table, dest, compression="uncompressed")
        del table


class _BlobParts(io.RawIOBase):
    """A write-only stream into rows ``name``, ``name.1``, ``name.2``... of the dldb table,
    each at most :data:`PART_BYTES`: SQLite refuses a blob over 1e9 bytes (SQLITE_MAX_LENGTH),
    which the kernel table of a 10M-kernel trace exceeds, and one part at a time is all the
    memory the write takes."""

    def __init__(self, conn, name: str) -> None:
        super().__init__()
        self.conn, self.name = conn, name
        self.buf = bytearray()
        self.parts = 0
        self.pos = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        n = len(view)
        self.pos += n
        while len(self.buf) + len(view) >= PART_BYTES:
            take = PART_BYTES - len(self.buf)
            self.buf += view[:take]
            view = view[take:]
            self._flush_part()
        self.buf += view
        return n

    def _flush_part(self) -> None:
        key = self.name if self.parts == 0 else f"{self.name}.{self.parts}"
        self.conn.execute(f"INSERT INTO {DLDB_TABLE} VALUES (?, ?)", (key, bytes(self.buf)))
        self.buf = bytearray()
        self.parts += 1

    def close(self) -> None:
        if not self.closed and (self.buf or self.parts == 0):
            self._flush_part()
        super().close()


BATCH_ROWS = 64 * 1024  # write_feather's default chunksize: the record batches of a whole frame
PAD_BYTES = 64  # a sliced string column's data is written up to 64-byte padding (kArrowAlignment)


class FrameParts:
    """One frame's Arrow IPC (Feather v2) file built from parts of its rows, in order: the same
    bytes as ``write_feather(Table.from_pandas(whole, preserve_index=False), uncompressed)``
    for the whole frame = the parts concatenated, with one part in memory at a time.

    write_feather writes ``ipc.new_file`` with ``allow_64bit`` and ``unify_dictionaries`` and
    record batches of :data:`BATCH_ROWS` rows; the parts are re-cut to those boundaries. The
    schema, pandas metadata included (a categorical's ``num_categories``, numpy dtypes), is the
    ``schema_like`` frame's (or the first part's): every part must match it, and a categorical
    column's categories must be the whole frame's, in the same order, or the dictionary written
    once in the file would be wrong for some rows."""

    def __init__(self, out: IO[bytes], name: str, schema_like: pd.DataFrame | None) -> None:
        self.out, self.name = out, name
        self.rows = 0
        self._like = None if schema_like is None else schema_like.iloc[:0]
        self._schema = None if self._like is None else _arrow(self._like).schema
        self._writer = None
        self._pending: list = []  # tables of fewer than BATCH_ROWS rows in all, not written yet
        self._pending_rows = 0

    def write(self, part: pd.DataFrame) -> None:
        """Append ``part``'s rows (the next rows of the frame)."""

        if self._like is None:
            self._like = part.iloc[:0]
        self._check_categories(part)
        table = _arrow(part)
        if self._schema is None:
            self._schema = table.schema
        elif not table.schema.equals(self._schema, check_metadata=True):
            raise ValueError(
                f"dldb frame {self.name!r}: the part at row {self.rows} has another schema "
                f"than the frame's ({_schema_diff(self._schema, table.schema)}); every part "
                "must have the frame's columns, dtypes and categories."
            )
        self.rows += len(part)
        self._pending.append(table)
        self._pending_rows += table.num_rows
        if self._pending_rows > BATCH_ROWS:  # joined once a batch is full, not per part
            self._flush(final=False)

    def close(self) -> None:
        """The last batches and the file's footer."""
        if self._schema is None:  # no part: the schema_like frame's empty file
            self._schema = _arrow(self._like if self._like is not None else pd.DataFrame()).schema
        self._flush(final=True)
        self._open().close()

    def _flush(self, final: bool) -> None:
        """Write the whole batches pending (and at the end the short last one).

        A batch of a whole frame is a slice of its columns, and the IPC writer pads a sliced
        string column's data to 64 bytes with the bytes that follow it (the next rows' text):
        a batch is written as a slice of rows reaching at least 63 bytes into the following rows
        of every such column, so a batch waits until those rows have arrived (or the end)."""
        import pyarrow as pa

        if not self._pending_rows:
            return
        pending = pa.concat_tables(self._pending)
        while pending.num_rows > BATCH_ROWS or (final and pending.num_rows):
            if pending.num_rows <= BATCH_ROWS:  # the last batch, to the frame's end
                self._write_batch(pending.combine_chunks())
                pending = pending.slice(pending.num_rows)
                break
            reach = self._padding_rows(pending.slice(BATCH_ROWS), final)
            if reach is None:
                break  # the following rows' text has not arrived yet
            rows = pending.slice(0, BATCH_ROWS + reach).combine_chunks()
            self._write_batch(rows.slice(0, BATCH_ROWS))
            pending = pending.slice(BATCH_ROWS)
        self._pending, self._pending_rows = [pending], pending.num_rows

    def _padding_rows(self, after, final: bool) -> int | None:
        """How many of the rows ``after`` a batch carry 63 bytes of every string column (all of
        them at the frame's end; None when they are too few yet)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        need = 0
        for i, field in enumerate(after.schema):
            if not (
                pa.types.is_string(field.type)
                or pa.types.is_large_string(field.type)
                or pa.types.is_binary(field.type)
                or pa.types.is_large_binary(field.type)
            ):
                continue
            head = after.column(i).slice(0, 4 * PAD_BYTES)  # most often enough rows
            if (pc.sum(pc.binary_length(head)).as_py() or 0) < PAD_BYTES - 1:
                head = after.column(i)
            lengths = pc.fill_null(pc.binary_length(head), 0).to_numpy()
            reached = (lengths.cumsum() >= PAD_BYTES - 1).argmax() if len(lengths) else 0
            if lengths.sum() < PAD_BYTES - 1:
                if not final:
                    return None
                reached = len(lengths) - 1
            need = max(need, int(reached) + 1)
        return need

    def _open(self):
        import pyarrow as pa

        if self._writer is None:
            options = pa.ipc.IpcWriteOptions(allow_64bit=True, unify_dictionaries=True)
            self._writer = pa.ipc.new_file(self.out, self._schema, options=options)
        return self._writer

    def _write_batch(self, rows) -> None:
        self._open().write_batch(rows.combine_chunks().to_batches()[0])

    def _check_categories(self, part: pd.DataFrame) -> None:
        got_dtypes = part.dtypes
        for col, want in self._like.dtypes.items():
            if not isinstance(want, pd.CategoricalDtype) or col not in got_dtypes.index:
                continue  # a missing column is the schema check's
            got = got_dtypes[col]
            if got is want:
                continue
            same = (
                isinstance(got, pd.CategoricalDtype)
                and got.ordered == want.ordered
                and got.categories.equals(want.categories)
            )
            if not same:
                raise ValueError(
                    f"dldb frame {self.name!r}, column {col!r}: the part at row {self.rows} "
                    "has other categories than the frame's first part or schema; every part "
                    "of a categorical column must carry the whole frame's categories, in the "
                    "same order (pd.Categorical(values, categories=whole_categories))."
                )


def _arrow(df: pd.DataFrame):
    import pyarrow as pa

    return pa.Table.from_pandas(df, preserve_index=False)


def _schema_diff(want, got) -> str:
    if want.names != got.names:
        return f"columns {got.names}, expected {want.names}"
    for a, b in zip(want, got, strict=True):
        if not a.equals(b):
            return f"column {a.name!r}: {b.type}, expected {a.type}"
    return "pandas metadata differs"


class DldbWriter:
    """DLProf's database (``dlprof_dldb.sqlite``) written frame by frame, a frame whole
    (:meth:`write_frame`) or part by part (:meth:`frame`), in whatever order the caller has
    them: byte-identical to :func:`save_trace` of the same trace.

    SQLite's file bytes depend on the order the rows are inserted (row ids, overflow pages), so
    the rows go in :data:`FRAMES` order: a frame whose turn has come streams straight into its
    blobs; one written ahead of its turn (the windowed engine's small frames early, its api parts
    beside the gpu parts) is spooled to an unnamed temporary file beside the database and
    copied in, one :data:`PART_BYTES` part at a time, when the frames before it are done.
    Memory: one part of a frame plus one blob part. Set :attr:`meta`, :attr:`source` and
    :attr:`warnings` any time before the end: the manifest is written last."""

    def __init__(self, conn, spool_dir: Path, check: Callable[[], None] | None) -> None:
        self.conn, self.spool_dir, self.check = conn, spool_dir, check
        self.meta: dict = {}
        self.source: object = None
        self.warnings: list = []
        self._spooled: dict[str, IO[bytes]] = {}  # closed frames waiting for their turn
        self._open: set[str] = set()
        self._live: str | None = None  # the frame streaming straight into its blobs
        self._inserted: list[str] = []
        self._split = False

    def write_frame(self, name: str, frame: pd.DataFrame) -> None:
        """A whole frame, written as :func:`save_trace` writes it."""
        import pyarrow.feather as feather

        with self._sink(name) as out:
            feather.write_feather(_arrow(frame), out, compression="uncompressed")

    @contextmanager
    def frame(self, name: str, schema_like: pd.DataFrame | None = None) -> Iterator[FrameParts]:
        """A frame written part by part: ``part.write(df)`` for each part, in row order."""
        with self._sink(name) as out:
            parts = FrameParts(out, name, schema_like)
            yield parts
            parts.close()

    def entry(self, entry: str) -> AbstractContextManager[IO[bytes]]:
        """The stream of entry ``<frame>.arrow``'s Feather bytes, a sink for
        :func:`_write_frames` (which checks its writes itself)."""
        return self._sink(entry.removesuffix(".arrow"), checked=False)

    @contextmanager
    def _sink(self, name: str, checked: bool = True) -> Iterator[IO[bytes]]:
        import tempfile

        if name not in FRAMES:
            raise ValueError(f"dldb: unknown frame {name!r} (one of {', '.join(FRAMES)})")
        if name in self._open or name in self._spooled or name in self._inserted:
            raise ValueError(f"dldb: frame {name!r} written twice")
        self._open.add(name)
        try:
            if self._live is None and self._next() == name:
                self._live = name
                with self._member(name) as member:
                    yield self._checked(member) if checked else member
                self._inserted.append(name)
            else:
                # unnamed (O_TMPFILE): nothing is left behind whatever happens; closed by
                # _drain or _discard
                spool = tempfile.TemporaryFile(dir=self.spool_dir, prefix=".jlprof-dldb-")  # noqa: SIM115
                try:
                    yield self._checked(spool) if checked else spool
                except BaseException:
                    spool.close()
                    raise
                self._spooled[name] = spool
        finally:
            self._open.discard(name)
            if self._live == name:
                self._live = None
        self._drain()

    def _checked(self, out: IO[bytes]) -> IO[bytes]:
        return out if self.check is None else Checked(out, self.check)  # type: ignore[return-value]

    def _next(self) -> str | None:
        return next((n for n in FRAMES if n not in self._inserted), None)

    @contextmanager
    def _member(self, name: str) -> Iterator[IO[bytes]]:
        """Frame ``name``'s bytes into the container, its turn come: rows ``name.arrow``,
        ``name.arrow.1``... of the database."""
        with _BlobParts(self.conn, f"{name}.arrow") as blob:
            yield blob
        self._split = self._split or blob.parts > 1

    def _version(self) -> int:
        # format 2 only where a frame was split: older readers take every other file
        return VERSION if self._split else 1

    def _put_manifest(self, manifest: bytes) -> None:
        self.conn.execute(f"INSERT INTO {DLDB_TABLE} VALUES (?, ?)", ("manifest.json", manifest))
        self.conn.commit()

    def _drain(self) -> None:
        """Copy in the spooled frames whose turn has come."""
        while self._live is None and (name := self._next()) in self._spooled:
            spool = self._spooled.pop(name)
            try:
                spool.seek(0)
                with self._member(name) as member:
                    out = self._checked(member)
                    while chunk := spool.read(PART_BYTES):
                        out.write(chunk)
                self._inserted.append(name)
            finally:
                spool.close()

    def _finish(self) -> None:
        missing = [n for n in FRAMES if n not in self._inserted]
        if missing or self._open:
            raise ValueError(f"dldb: frames not written: {', '.join(missing)}")
        manifest = _manifest_bytes(self.meta, self.source, self.warnings, self._version())
        if self.check is not None:
            self.check()
        self._put_manifest(manifest)

    def _discard(self) -> None:
        for spool in self._spooled.values():
            spool.close()
        self._spooled.clear()


class ZipWriter(DldbWriter):
    """A jlprof database as a ``.jlprof`` zip written frame by frame, as :class:`DldbWriter`
    writes one: each member's bytes :func:`save_trace`'s (a zip's members are read by name,
    so the manifest goes last; the zip's own bytes carry the members' times, never equal)."""

    def __init__(self, z: zipfile.ZipFile, spool_dir: Path, check: Callable[[], None] | None):
        super().__init__(None, spool_dir, check)
        self.z = z

    @contextmanager
    def _member(self, name: str) -> Iterator[IO[bytes]]:
        with self.z.open(f"{name}.arrow", "w", force_zip64=True) as member:
            yield member

    def _version(self) -> int:
        return 1  # a zip member is never split

    def _put_manifest(self, manifest: bytes) -> None:
        self.z.writestr("manifest.json", manifest)


@contextmanager
def open_store(
    target: str | Path,
    flag: str = "--output_path",
    check: Callable[[], None] | None = None,
    *,
    meta: dict | None = None,
    source: object = None,
    warnings: list | None = None,
) -> Iterator[DldbWriter]:
    """A jlprof database into ``target`` written frame by frame: DLProf's SQLite container
    (:class:`DldbWriter`) when the name ends in ``.sqlite``, a ``.jlprof`` zip
    (:class:`ZipWriter`) otherwise, :func:`save_trace`'s rule. Whole or not at all: the file
    appears at the end of the block, with every frame and the manifest, or not at all (an
    exception, a cancelled ``check``, a frame never written). ``check`` is called before
    every write."""
    sqlite = Path(target).suffix == ".sqlite"
    # a failure inside is an OutputError naming the file
    with written(Path(target), flag) as tmp, _container(tmp, sqlite, check) as db:
        db.meta, db.source, db.warnings = dict(meta or {}), source, list(warnings or [])
        try:
            yield db
            db._finish()
        finally:
            db._discard()


@contextmanager
def _container(tmp: Path, sqlite: bool, check: Callable[[], None] | None) -> Iterator[DldbWriter]:
    """The writer of the temporary file ``tmp``: a zip, or an SQLite database whose full disk
    is raised as any other file's (``written`` makes it the usual one line)."""
    if not sqlite:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
            yield ZipWriter(z, tmp.parent, check)
        return
    import sqlite3

    conn = sqlite3.connect(tmp)
    try:
        for pragma in DLDB_PRAGMAS:
            conn.execute(f"PRAGMA {pragma}")
        conn.execute(f"CREATE TABLE {DLDB_TABLE} (name TEXT PRIMARY KEY, data BLOB)")
        yield DldbWriter(conn, tmp.parent, check)
    except sqlite3.OperationalError as exc:
        code = getattr(exc, "sqlite_errorcode", None)
        if code != sqlite3.SQLITE_FULL and "disk is full" not in str(exc):
            raise
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp)) from exc
    finally:
        conn.close()


def _frame_bytes(entries: dict[str, bytes], name: str) -> bytes:
    """An entry written in parts (:class:`_BlobParts`) joined again; one part as is."""
    parts = [entries[name]]
    while f"{name}.{len(parts)}" in entries:
        parts.append(entries.pop(f"{name}.{len(parts)}"))
    return parts[0] if len(parts) == 1 else b"".join(parts)


def save_trace(
    trace: Trace,
    path: str | Path,
    flag: str = "--save_db",
    check: Callable[[], None] | None = None,
) -> Path:
    """Write ``trace`` to ``path``, whole or not at all: an SQLite container when the name ends
    in ``.sqlite`` (``dlprof_dldb.sqlite``), a zip otherwise (``*.jlprof``). ``check`` is
    called before every write: a save in a thread (:class:`jlprof.background.InThread`) stops
    there when cancelled, leaving no file."""
    path = Path(path)
    with open_store(
        path, flag, check, meta=trace.meta, source=trace.source, warnings=trace.warnings
    ) as db:
        _write_frames(trace, db.entry, check)
    return path


def _read_entries(path: Path) -> dict[str, bytes]:
    import sqlite3

    if is_dldb(path):
        conn = sqlite3.connect(sqlite_uri(path), uri=True)
        try:
            return dict(conn.execute(f"SELECT name, data FROM {DLDB_TABLE}").fetchall())
        finally:
            conn.close()
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def load_trace(path: str | Path) -> Trace:
    """Read a trace written by :func:`save_trace` (either container)."""
    import sqlite3

    import pyarrow.feather as feather

    path = Path(path)
    try:
        entries = _read_entries(path)
        manifest = json.loads(entries["manifest.json"])
        if manifest.get("format") != FORMAT:
            raise InputError(f"{path} is a zip or SQLite file but not a jlprof database.")
        if manifest.get("version", 0) > VERSION:
            raise InputError(
                f"{path} was written by a newer jlprof (format {manifest['version']}); "
                "upgrade jlprof or re-analyse the original nsys export."
            )
        frames = {}
        for name in FRAMES:
            data = _frame_bytes(entries, f"{name}.arrow")
            frames[name] = feather.read_table(io.BytesIO(data)).to_pandas()
            del data
    except (zipfile.BadZipFile, sqlite3.Error, KeyError, OSError, ValueError) as exc:
        raise InputError(
            f"{path}: damaged jlprof database ({exc}). Re-create it with "
            "`jlprof --database EXPORT.sqlite --save_db ...`."
        ) from exc
    for name in ("gpu", "api", "nvtx", "marks", "osrt"):
        df = frames[name]
        for col in df.columns:
            if df[col].dtype == object or str(df[col].dtype).startswith(("str", "string")):
                df[col] = df[col].astype(object).astype("category")
    return Trace(
        gpu=frames["gpu"],
        api=frames["api"],
        nvtx=frames["nvtx"],
        marks=frames["marks"],
        osrt=frames["osrt"],
        gpus=frames["gpus"],
        meta=dict(manifest.get("meta", {})),
        source=Path(manifest.get("source") or path),
        warnings=list(manifest.get("warnings", [])),
    )


def read_any(path: str | Path, **kw) -> Trace:
    """An nsys SQLite export or a jlprof database, told apart by their first bytes."""
    from jlprof.engine.read.read import read_trace

    path = Path(path)
    if path.is_file() and (is_jlprof_db(path) or is_dldb(path)):
        return load_trace(path)
    return read_trace(path, **kw)


__all__ = [
    "DldbWriter",
    "FrameParts",
    "ZipWriter",
    "is_dldb",
    "is_jlprof_db",
    "load_trace",
    "open_store",
    "pd",
    "read_any",
    "save_trace",
]
