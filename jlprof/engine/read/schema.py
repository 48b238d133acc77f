"""Everything that differs between nsys export versions lives here.

Readers ask this module which tables and columns exist and select by name, never by
position (``greenContextId`` was inserted after ``contextId`` in 2024.2; tables are
created lazily; metadata moved from ``EXPORT_META_DATA`` to ``META_DATA_EXPORT``).
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
from pathlib import Path
from urllib.parse import quote

# Tables that mark a file as an nsys export (any one of them is enough with StringIds).
NSYS_MARKER_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "TARGET_INFO_GPU",
    "TARGET_INFO_SYSTEM_ENV",
    "EXPORT_META_DATA",
    "META_DATA_EXPORT",
)


SQLITE_MAGIC = b"SQLite format 3\x00"


def is_sqlite(path: Path) -> bool:
    """The file is a regular file starting with SQLite's header (read 16 bytes; it exists).

    Opened without blocking: a FIFO named ``x.sqlite`` would otherwise wait for a writer.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC


def has_export_tables(tabs: set[str]) -> bool:
    """Whether a SQLite file with these tables is an nsys export: the one rule the reader, the
    Profiles sidebar and :func:`export_error` share (a marker table under any version suffix,
    :func:`table_name`)."""
    return "StringIds" in tabs and any(table_name(tabs, t) for t in NSYS_MARKER_TABLES)


def table_name(tabs: set[str], base: str) -> str | None:
    """The export's table for ``base`` (``NVTX_EVENTS``): newer exports may carry it with a
    version suffix (``NVTX_EVENTS_V2``, ``_V3``). The highest version wins, the plain name
    counting as version 1; None when the export has neither."""
    best, best_v = None, 0
    for t in tabs:
        if t == base:
            v = 1
        elif t.startswith(f"{base}_V") and t[len(base) + 2 :].isdigit():
            v = int(t[len(base) + 2 :])
        else:
            continue
        if v > best_v:
            best, best_v = t, v
    return best


def version_line(meta: dict[str, str], nvtx_table: str | None = None) -> str:
    """One line naming the export schema read (``META_DATA_EXPORT``'s, ``EXPORT_META_DATA``'s
    before 2024.2) and the NVTX table it was read from, for the CLI's log."""
    version = meta.get("EXPORT_SCHEMA_VERSION") or "not recorded"
    product = meta.get("EXPORT_PRODUCT_VERSION")
    line = f"nsys export schema {version}" + (f" (Nsight Systems {product})" if product else "")
    if nvtx_table is None:  # not read from the export here (a saved database)
        return line
    return line + (f"; NVTX table {nvtx_table}" if nvtx_table else "; no NVTX table")


def is_nvprof_tables(tabs: set[str]) -> bool:
    """An nvprof database (``nvprof -o``, read by :mod:`jlprof.engine.read.nvprof`): ``StringTable``
    (nsys has ``StringIds``) and CUPTI activity tables."""
    return "StringTable" in tabs and any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in tabs)


def missing_export_tables(tabs: set[str]) -> str | None:
    """What keeps a SQLite file with these tables from being an nsys export (by
    :func:`has_export_tables`' rule), naming the missing table; None when it is one."""
    if "StringIds" not in tabs:
        return "no StringIds table"
    if not any(table_name(tabs, t) for t in NSYS_MARKER_TABLES):
        return f"no CUPTI, NVTX or TARGET_INFO table ({', '.join(NSYS_MARKER_TABLES)})"
    return None


def export_error(path: Path) -> str | None:
    """None when ``path`` is an nsys SQLite export, else why not (one line)."""
    try:
        if not path.is_file():
            return "not a regular file"
        if not is_sqlite(path):
            return "not a SQLite database"
        conn = sqlite3.connect(sqlite_uri(path), uri=True)
        try:
            names = tables(conn)
        finally:
            conn.close()
    except (OSError, sqlite3.Error) as err:
        return f"unreadable SQLite file: {err}"
    missing = missing_export_tables(names)
    if missing and not is_nvprof_tables(names):
        return f"not an nsys export ({missing})"
    return None


def sqlite_uri(path: Path) -> str:
    """Read-only SQLite URI of ``path``, percent-escaped: unescaped, ``#`` or ``?`` in a file name
    ends the path (``run#1.sqlite`` opens, even creates, ``run``) and ``%20`` becomes a space."""
    return f"{path.resolve().as_uri()}?mode=ro"


def connectorx_uri(path: Path) -> str:
    """connectorx's ``sqlite://`` URI of ``path``, read-only: connectorx percent-decodes what
    follows ``sqlite://`` once and hands the rest to SQLite, which reads a ``file:`` name as a
    URI of its own. So the read-only :func:`sqlite_uri` goes in escaped once more; a plain path
    opened read-write, and an unescaped one could open, even create, another file
    (``run%20a.sqlite`` -> ``run a.sqlite``; ``run#1.sqlite`` -> ``run``)."""
    return "sqlite://" + quote(sqlite_uri(path), safe="")


# Metadata tables by exporter version: <= 2023.1 and >= 2024.2.
META_TABLES = ("EXPORT_META_DATA", "META_DATA_EXPORT")

NVTX_MARK = 34
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTXT_PUSH_POP = 70
NVTXT_START_END = 71
NVTX_DOMAIN_CREATE = 75
NVTX_RANGE_TYPES = (NVTX_PUSH_POP, NVTX_START_END, NVTXT_PUSH_POP, NVTXT_START_END)

# CUPTI copyKind codes (ENUM_CUDA_MEMCPY_OPER, identical 2022.4-2025.1) -> nsys display names.
MEMCPY_KIND_NAMES = {
    0: "[CUDA memcpy Unknown]",
    1: "[CUDA memcpy HtoD]",
    2: "[CUDA memcpy DtoH]",
    3: "[CUDA memcpy HtoA]",
    4: "[CUDA memcpy AtoH]",
    5: "[CUDA memcpy AtoA]",
    6: "[CUDA memcpy AtoD]",
    7: "[CUDA memcpy DtoA]",
    8: "[CUDA memcpy DtoD]",
    9: "[CUDA memcpy HtoH]",
    10: "[CUDA memcpy PtoP]",
    11: "[CUDA Unified Memory memcpy HtoD]",
    12: "[CUDA Unified Memory memcpy DtoH]",
    13: "[CUDA Unified Memory memcpy DtoD]",
}
MEMSET_NAME = "[CUDA memset]"

# CUPTI appends the CUDA version that introduced the call's signature: _v3020 ... _v12000, so
# four digits or more. Shorter ones belong to the API's own name (cuGetProcAddress_v2, and
# cudaGetDeviceProperties_v2_v12000 is cudaGetDeviceProperties_v2 of CUDA 12.0).
_API_SUFFIX = re.compile(r"_v\d{4,}$")


def strip_api_suffix(name: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``, ``cudaGraphLaunch_v10000`` ->
    ``cudaGraphLaunch`` (nsys 2022.4 stats strips only four digits); ``cuGetProcAddress_v2``
    stays as it is."""
    return _API_SUFFIX.sub("", name)


def tables(conn: sqlite3.Connection) -> set[str]:
    """Names of all tables in the export."""
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """Column names of ``table`` in file order (empty when the table is missing)."""
    # table names come from sqlite_master or our own constants, never from user input
    return [r[1] for r in conn.execute(f"PRAGMA table_info('{table}')")]


def pick(available: list[str], *candidates: str) -> str | None:
    """The first candidate column that exists, for columns renamed across versions."""
    for c in candidates:
        if c in available:
            return c
    return None
