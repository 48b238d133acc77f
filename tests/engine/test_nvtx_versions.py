"""Exports of newer nsys (issue 43, item 9): the NVTX table under a version suffix
(``NVTX_EVENTS_V2``/``_V3``) is found from the schema, never by its literal name, in the reader,
the windowed engine and the "is this an export" rule the Profiles sidebar shares; domain
creations (type 75, NULL end) only name domains; the log says which schema was read."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

import jlprof
from jlprof.cli import main
from jlprof.engine.read import schema
from jlprof.engine.read.read import read_trace
from jlprof.engine.read.trace import Trace
from jlprof.profile import REPORTS
from tests.fixtures.scenarios import real_data_dir, rich_db

FRAMES = ("gpu", "api", "nvtx", "marks", "osrt", "gpus")
RANGE_TYPES = ",".join(str(t) for t in schema.NVTX_RANGE_TYPES)


def versioned(src: Path, dst: Path, suffix: str) -> Path:
    """A copy of ``src`` whose NVTX table carries ``suffix`` (as newer exports name it)."""
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    con.execute(f"ALTER TABLE NVTX_EVENTS RENAME TO NVTX_EVENTS{suffix}")
    con.commit()
    con.close()
    return dst


def sql(path: Path, q: str) -> tuple:
    con = sqlite3.connect(schema.sqlite_uri(path), uri=True)
    try:
        return con.execute(q).fetchone()
    finally:
        con.close()


def same_frames(a: Trace, b: Trace) -> None:
    for name in FRAMES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), obj=name)


def test_the_newest_version_of_a_table_is_picked() -> None:
    tabs = {"StringIds", "NVTX_EVENTS", "NVTX_EVENTS_V2", "NVTX_EVENTS_V3", "NVTX_EVENTS_VX"}
    assert schema.table_name(tabs, "NVTX_EVENTS") == "NVTX_EVENTS_V3"
    assert schema.table_name({"NVTX_EVENTS_V9", "NVTX_EVENTS_V10"}, "NVTX_EVENTS") == (
        "NVTX_EVENTS_V10"
    )
    assert schema.table_name({"NVTX_EVENTS"}, "NVTX_EVENTS") == "NVTX_EVENTS"
    assert schema.table_name({"NVTX_EVENTS_VX", "NVTX_EVENTSX"}, "NVTX_EVENTS") is None


@pytest.mark.parametrize("flavor", ["2024.2", "2025.1"])
@pytest.mark.parametrize("suffix", ["_V2", "_V3"])
@pytest.mark.parametrize("use_cx", [False, True])
def test_a_versioned_nvtx_table_reads_like_the_plain_one(tmp_path, flavor, suffix, use_cx):
    plain = rich_db().write(tmp_path / "plain.sqlite", flavor=flavor)
    path = versioned(plain, tmp_path / "v.sqlite", suffix)
    table = f"NVTX_EVENTS{suffix}"
    # the export's domain creations have no end (raw SQL): they name domains, are no ranges
    n_dom, null_end = sql(
        path, f"SELECT count(*), sum(end IS NULL) FROM {table} WHERE eventType = 75"
    )
    assert n_dom > 0 and null_end == n_dom
    got, want = read_trace(path, use_connectorx=use_cx), read_trace(plain, use_connectorx=use_cx)
    same_frames(got, want)
    (n_ranges,) = sql(path, f"SELECT count(*) FROM {table} WHERE eventType IN ({RANGE_TYPES})")
    assert len(got.nvtx) == n_ranges > 0
    assert {"Forward", "Backward", "Lib"} <= set(got.nvtx["domain"].astype(str))
    assert got.nvtx_table == table and want.nvtx_table == "NVTX_EVENTS"
    assert schema.export_error(path) is None


def test_an_nvtx_only_export_under_a_versioned_name_is_an_export(tmp_path):
    """The sidebar's rule (schema.export_error): StringIds and a marker table, any version."""
    path = tmp_path / "nvtx_only.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("CREATE TABLE NVTX_EVENTS_V3 (start INTEGER NOT NULL, end INTEGER)")
    con.commit()
    con.close()
    assert schema.export_error(path) is None
    from jlprof.server.listing import list_profiles

    listed = list_profiles(tmp_path)
    (entry,) = [e for e in listed["items"] if e["name"] == path.name]
    assert entry["error"] is None


@pytest.fixture(scope="module")
def real_2026(tmp_path_factory) -> tuple[Path, Path]:
    """The real nsys 2026.2 export (schema 3.25) and a copy with NVTX_EVENTS_V3 and one more
    domain creation (type 75, NULL end) that names no range."""
    src = real_data_dir() / "nsysai-fastvideo-wan-train-fsdp-2gpu"
    src = next(src.glob("*.sqlite"))
    out = tmp_path_factory.mktemp("v3")
    path = versioned(src, out / "train_v3.sqlite", "_V3")
    con = sqlite3.connect(path)
    tid, t0 = con.execute("SELECT globalTid, min(start) FROM NVTX_EVENTS_V3").fetchone()
    con.execute(
        "INSERT INTO NVTX_EVENTS_V3 (start, end, eventType, text, globalTid, domainId) "
        "VALUES (?, NULL, 75, 'unused domain', ?, 4242)",
        (t0, tid),
    )
    con.commit()
    con.close()
    return src, path


def test_the_real_2026_export_under_nvtx_events_v3_gives_the_same_reports(real_2026):
    src, path = real_2026
    a, b = jlprof.load(src), jlprof.load(path)
    (n_ranges,) = sql(
        path, f"SELECT count(*) FROM NVTX_EVENTS_V3 WHERE eventType IN ({RANGE_TYPES})"
    )
    assert len(b.trace.nvtx) == n_ranges == len(a.trace.nvtx) > 0
    same_frames(a.trace, b.trace)
    for r in REPORTS:
        pd.testing.assert_frame_equal(a.report(r), b.report(r), obj=r)


@pytest.mark.parametrize("windowed", ["false", "true"])
def test_the_cli_says_which_schema_it_read(real_2026, tmp_path, capsys, windowed):
    src, path = real_2026
    args = ["--reports", "summary", "--formats", "json", "--windowed", windowed, "-v", "normal"]
    assert main(["--database", str(src), *args, "--output_path", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    assert main(["--database", str(path), *args, "--output_path", str(tmp_path / "b")]) == 0
    err = capsys.readouterr().err
    (version,) = sql(
        path, "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_SCHEMA_VERSION'"
    )
    line = f"nsys export schema {version} (Nsight Systems 2026.2.1.210); NVTX table NVTX_EVENTS_V3"
    assert version == "3.25.0" and sum(line in ln for ln in err.splitlines()) == 1
    a = json.loads((tmp_path / "a" / "dlprof_summary.json").read_text())
    b = json.loads((tmp_path / "b" / "dlprof_summary.json").read_text())
    assert a == b
