"""The jlprof database: a normalised trace saved for fast re-analysis.

Two containers of the same content — Arrow IPC tables, one per
:class:`~jlprof.engine.trace.Trace` frame, plus a JSON manifest:

* ``.jlprof``: a zip (stored, not compressed) of ``<frame>.arrow`` and ``manifest.json``;
* ``.sqlite`` (the DLProf database's name, ``dlprof_dldb.sqlite``, guide §2.3, §4.3): an SQLite
  file with one table ``jlprof_dldb(name, data)`` holding the same entries as blobs, so a DLProf
  user's ``--database=dlprof_dldb.sqlite`` works. It is jlprof's content, not DLProf's schema.

Reading either skips the nsys export's schema probing entirely; ``--database`` accepts both like
an nsys export, told apart by their first bytes and tables.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from jlprof.engine.trace import Trace
from jlprof.errors import InputError
from jlprof.outputs import written

FORMAT = "jlprof-trace"
VERSION = 1
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


def _entries(trace: Trace) -> Iterator[tuple[str, bytes | memoryview]]:
    """The database's entries: ``manifest.json`` and one ``<frame>.arrow`` per frame, made one
    at a time so only one frame's bytes are in memory."""
    import pyarrow as pa
    import pyarrow.feather as feather

    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "meta": trace.meta,
        "source": str(trace.source or ""),
        "warnings": trace.warnings,
    }
    yield "manifest.json", json.dumps(manifest).encode()
    for name in FRAMES:
        buf = io.BytesIO()
        table = pa.Table.from_pandas(getattr(trace, name), preserve_index=False)
        feather.write_feather(table, buf, compression="uncompressed")
        del table
        with buf.getbuffer() as view:  # no copy of the frame's bytes
            yield f"{name}.arrow", view


def save_trace(trace: Trace, path: str | Path, flag: str = "--save_db") -> Path:
    """Write ``trace`` to ``path``, whole or not at all: an SQLite container when the name ends
    in ``.sqlite`` (``dlprof_dldb.sqlite``), a zip otherwise (``*.jlprof``)."""
    import sqlite3

    path = Path(path)
    with written(path, flag) as tmp:
        entries = _entries(trace)  # inside: a failure here is an OutputError naming the file
        if path.suffix == ".sqlite":
            conn = sqlite3.connect(tmp)
            try:
                conn.execute(f"CREATE TABLE {DLDB_TABLE} (name TEXT PRIMARY KEY, data BLOB)")
                for entry in entries:
                    conn.execute(f"INSERT INTO {DLDB_TABLE} VALUES (?, ?)", entry)
                conn.commit()
            finally:
                conn.close()
        else:
            with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as z:
                for name, data in entries:
                    z.writestr(name, data)
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
            frames[name] = feather.read_table(io.BytesIO(entries[f"{name}.arrow"])).to_pandas()
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
