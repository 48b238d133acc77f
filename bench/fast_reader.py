"""Which SQLite -> Arrow reader should a default install carry: connectorx or ADBC SQLite?

    python bench/gen_export.py /tmp/b.sqlite --kernels 1000000
    python bench/fast_reader.py /tmp/b.sqlite --repeat 3

Times ``read_trace`` (every table jlprof reads, the columns it needs, four threads) with each
fetch path: connectorx, the ADBC SQLite driver (``adbc-driver-sqlite``, through a shim with
connectorx's ``read_sql`` signature) and the pure-Python ``sqlite3`` fallback, interleaved,
and checks that the three give the same frames. Prints the median seconds of each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import ClassVar

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jlprof.engine.read import read
from jlprof.engine.read.trace import Trace


class AdbcShim:
    """``connectorx.read_sql(uri, sql, return_type="arrow")`` on the ADBC SQLite driver."""

    failures: ClassVar[list[str]] = []  # read.py would fall back to sqlite3 silently

    @staticmethod
    def read_sql(uri: str, sql: str, return_type: str = "arrow"):
        import adbc_driver_sqlite.dbapi as dbapi

        path = uri.removeprefix("sqlite://")
        try:
            with dbapi.connect(f"file:{path}?mode=ro") as conn, conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetch_arrow_table()
        except Exception as exc:
            AdbcShim.failures.append(f"{exc}: {sql}")
            raise


def run(path: Path, how: str) -> tuple[float, Trace]:
    if how == "adbc":
        import connectorx

        real, read_sql = connectorx, connectorx.read_sql
        real.read_sql = AdbcShim.read_sql
    t0 = time.perf_counter()
    try:
        trace = read.read_trace(path, use_connectorx=how != "sqlite3")
    finally:
        if how == "adbc":
            real.read_sql = read_sql
    return time.perf_counter() - t0, trace


def same(a: Trace, b: Trace, what: str) -> None:
    for name in ("gpu", "api", "nvtx", "marks", "osrt"):
        fa, fb = getattr(a, name), getattr(b, name)
        pd.testing.assert_frame_equal(
            fa, fb, check_dtype=False, check_categorical=False, obj=f"{what}: {name}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("export", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"connectorx": [], "adbc": [], "sqlite3": []}
    first: dict[str, Trace] = {}
    for _ in range(args.repeat):
        for how in times:
            s, trace = run(args.export, how)
            times[how].append(s)
            first.setdefault(how, trace)
    same(first["connectorx"], first["adbc"], "adbc vs connectorx")
    same(first["connectorx"], first["sqlite3"], "sqlite3 vs connectorx")
    assert not AdbcShim.failures, AdbcShim.failures
    print(f"{args.export}: {len(first['connectorx'].gpu)} GPU rows, medians of {args.repeat}")
    for how, ts in times.items():
        print(f"{how:10s} {statistics.median(ts):6.2f} s  (runs {[round(t, 2) for t in ts]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
