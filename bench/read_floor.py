"""What reading the three big tables costs, by reader, next to SQLite's own decoding (issue 18).

    python bench/read_floor.py EXPORT.sqlite [--repeat N]

For each of the kernel, runtime-API and NVTX tables, the exact SELECT the engine reads
(``jlprof.engine.read.read``) timed (wall and this process's CPU, medians of ``--repeat``) with:

* ``connectorx``: what the engine uses (SQLite -> Arrow, one thread per table);
* ``adbc``: Apache Arrow's ADBC SQLite driver (``pip install adbc-driver-sqlite``; skipped
  when it is not installed), another SQLite -> Arrow reader written in C;
* ``sqlite-decode``: SQLite alone decoding every selected column of every row
  (``SELECT max(col), ...``: each value is read from its record, no row leaves SQLite). It is
  the floor of any reader that goes through SQLite's API: the rest of a reader's time is the
  per-row step and per-value calls, and building the columns.

Why: the 10M-kernel command spends about half its CPU in the read (docs/windowed-engine.md,
"Time"); this says how much of that any SQLite-based reader could save.
"""

from __future__ import annotations

import argparse
import resource
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jlprof.engine.read import read, schema

TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _connectorx(path: Path, q: read._Select) -> int:
    import connectorx

    return connectorx.read_sql(schema.connectorx_uri(path), q.sql, return_type="arrow").num_rows


def _adbc(path: Path, q: read._Select) -> int:
    import adbc_driver_sqlite.dbapi as adbc

    with adbc.connect(str(path)) as conn, conn.cursor() as cur:
        cur.execute(q.sql)
        return cur.fetch_arrow_table().num_rows


def _decode(path: Path, q: read._Select) -> int:
    """SQLite decoding every selected expression of every row, nothing handed out."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        aggs = ", ".join(f"max({e})" for e in q.exprs)
        conn.execute(f"SELECT {aggs} FROM {q.table}{q.tail}").fetchone()
        return conn.execute(f"SELECT count(*) FROM {q.table}{q.tail}").fetchone()[0]
    finally:
        conn.close()


def _readers() -> dict[str, Callable[[Path, read._Select], int]]:
    readers: dict[str, Callable[[Path, read._Select], int]] = {"connectorx": _connectorx}
    try:
        import adbc_driver_sqlite.dbapi  # noqa: F401
    except ImportError:
        print("adbc-driver-sqlite is not installed: its column is skipped", file=sys.stderr)
    else:
        readers["adbc"] = _adbc
    readers["sqlite-decode"] = _decode
    return readers


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("export", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    conn, tabs = read.open_export(args.export)
    selects = read._event_selects(conn, tabs)
    conn.close()
    readers = _readers()
    total = {name: [0.0, 0.0] for name in readers}
    print(f"{args.export} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}), medians of "
          f"{args.repeat}: wall / CPU seconds")  # fmt: skip
    print("| table | rows | " + " | ".join(readers) + " |")
    print("|---|---|" + "---|" * len(readers))
    for table in TABLES:
        if table not in selects:
            continue
        q = selects[table]
        cells, rows = [], 0
        for name, fn in readers.items():
            walls, cpus = [], []
            for _ in range(args.repeat):
                t0, c0 = time.perf_counter(), _cpu()
                rows = fn(args.export, q)
                walls.append(time.perf_counter() - t0)
                cpus.append(_cpu() - c0)
            w, c = statistics.median(walls), statistics.median(cpus)
            total[name][0] += w
            total[name][1] += c
            cells.append(f"{w:.2f} / {c:.2f}")
        print(f"| {table} | {rows:,} | " + " | ".join(cells) + " |", flush=True)
    print("| all three | | " + " | ".join(f"{w:.2f} / {c:.2f}" for w, c in total.values()) + " |")


if __name__ == "__main__":
    main()
