"""The jlprof database: a normalised trace saved for fast re-analysis.

Two containers of the same content — Arrow IPC tables, one per
:class:`~jlprof.engine.trace.Trace` frame, plus a JSON manifest:

* ``.jlprof``: a zip (stored, not compressed) of ``<frame>.arrow`` and ``manifest.json``;
* ``.sqlite`` (the DLProf database's name, ``dlprof_dldb.sqlite``, guide §2.3, §4.3): an SQLite
  file with one table ``jlprof_dldb(name, data)`` holding the same entries as blobs, so a DLProf
  user's ``--database=dlprof_dldb.sqlite`` works. It is jlprof's content, not DLProf's schema.
  A frame is written in parts of at most ``PART_BYTES`` (rows ``gpu.arrow``, ``gpu.arrow.1``,
  ...; format version 2 when any frame has more than one): SQLite refuses blobs over 1e9 bytes.

Reading either skips the nsys export's schema probing entirely; ``--database`` accepts both like
an nsys export, told apart by their first bytes and tables.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import IO

import pandas as pd

from jlprof.engine.trace import Trace
from jlprof.errors import InputError
from jlprof.outputs import Checked, written

FORMAT = "jlprof-trace"
VERSION = 2  # 2: a dldb frame may span rows name, name.1, ... (_BlobParts)
PART_BYTES = 4 * 1024 * 1024  # each part is copied ~4x on its way into SQLite
FRAMES = ("gpu", "api", "nvtx", "marks", "osrt", "gpus")
ZIP_MAGIC = b"PK\x03\x04"
SQLITE_MAGIC = b"SQLite format 3\x00"
DLDB_TABLE = "jlprof_dldb"


def is_dldb(path: Path) -> bool:
    """True when ``path`` is an SQLite file holding a jlprof database (``jlprof_dldb`` table)."""
    import sqlite3

    try:
        with path.open("rb") as fh:
            if fh.read(16) != SQLITE_MAGIC:
                return False
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
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


def _manifest(trace: Trace, version: int = VERSION) -> bytes:
    return json.dumps(
        {
            "format": FORMAT,
            "version": version,
            "meta": trace.meta,
            "source": str(trace.source or ""),
            "warnings": trace.warnings,
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
    called before every write: a save in a thread (:class:`jlprof.outputs.InThread`) stops
    there when cancelled, leaving no file."""
    import sqlite3

    path = Path(path)
    with written(path, flag) as tmp:  # a failure inside is an OutputError naming the file
        if path.suffix == ".sqlite":
            conn = sqlite3.connect(tmp)
            try:
                conn.execute(f"CREATE TABLE {DLDB_TABLE} (name TEXT PRIMARY KEY, data BLOB)")
                split = []

                @contextmanager
                def blob(name: str) -> Iterator[IO[bytes]]:
                    with _BlobParts(conn, name) as out:
                        yield out
                    split.append(out.parts > 1)

                _write_frames(trace, blob, check)
                # format 2 only where a frame was split: older readers take every other file
                manifest = _manifest(trace, VERSION if any(split) else 1)
                conn.execute(f"INSERT INTO {DLDB_TABLE} VALUES (?, ?)", ("manifest.json", manifest))
                conn.commit()
            finally:
                conn.close()
        else:
            with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as z:
                z.writestr("manifest.json", _manifest(trace, 1))

                def member(name: str) -> AbstractContextManager[IO[bytes]]:
                    return z.open(name, "w", force_zip64=True)

                _write_frames(trace, member, check)
    return path


def _read_entries(path: Path) -> dict[str, bytes]:
    import sqlite3

    if is_dldb(path):
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
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
    from jlprof.engine.read import read_trace

    path = Path(path)
    if path.is_file() and (is_jlprof_db(path) or is_dldb(path)):
        return load_trace(path)
    return read_trace(path, **kw)


__all__ = ["is_dldb", "is_jlprof_db", "load_trace", "pd", "read_any", "save_trace"]
