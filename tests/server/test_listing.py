"""Profile discovery and path confinement (jlprof.server.listing) on real files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jlprof.server import listing
from tests.server.profiles import make_run, nsys_export_bytes


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return nsys_export_bytes(tmp_path_factory.mktemp("export"))


def test_confine_refuses_escapes(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (root / "out").symlink_to(tmp_path / "secret")
    (root / "inner").symlink_to(root / "a")
    assert listing.confine(root, "a") == (root / "a").resolve()
    assert listing.confine(root, "inner") == (root / "a").resolve()  # link inside the root: fine
    assert listing.confine(root, "") == root.resolve()
    for bad in ("../secret", "a/../../secret", "a/..", "/etc", str(tmp_path / "secret"), "out"):
        with pytest.raises(listing.PathRefused):
            listing.confine(root, bad)
    with pytest.raises(listing.PathMissing):
        listing.confine(root, "nope")
    (root / ".hid").mkdir()
    assert listing.confine(root, ".hid") == (root / ".hid").resolve()
    with pytest.raises(listing.PathMissing):
        listing.confine(root, ".hid", allow_hidden=False)


def test_lists_runs_and_raw_files_with_headlines(tmp_path: Path, export: bytes) -> None:
    root = tmp_path
    run = make_run(root / "proj", "20261123-180000-ab12", export, mtime=1_000_000)
    (root / "traces").mkdir()
    (root / "traces" / "big.nsys-rep").write_bytes(b"x" * 10)
    (root / "traces" / "big.sqlite").write_bytes(export)  # export of big.nsys-rep: one entry
    (root / "traces" / "alone.sqlite").write_bytes(export)
    (root / "reports_out").mkdir()
    (root / "reports_out" / "dlprof_summary.csv").write_text("a,b\n")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "x.nsys-rep").write_bytes(b"x")
    page = listing.list_profiles(root)
    by_path = {e["path"]: e for e in page["items"]}
    assert set(by_path) == {
        "proj/jlprof_runs/20261123-180000-ab12",
        "traces/big.nsys-rep",
        "traces/alone.sqlite",
        "reports_out",
    }
    assert page["total"] == 4 and not page["truncated"]
    r = by_path["proj/jlprof_runs/20261123-180000-ab12"]
    assert r["kind"] == "run" and r["error"] is None
    assert r["database"] == "proj/jlprof_runs/20261123-180000-ab12/nsys_profile.sqlite"
    assert r["open_dir"] == "proj"  # where the profiled notebook ran
    assert r["created"] == "2026-11-23T18:00:00Z" and r["key_node"] == "global_step"
    assert r["headline"] == {
        "iterations": 3,
        "wall_ns": 30450,
        "gpu_util_pct": 41.5,
        "tc_util_pct": 12.25,
        "avg_iter_ns": 10000.0,
    }
    assert r["size_bytes"] == sum(f.stat().st_size for f in run.iterdir())
    big = by_path["traces/big.nsys-rep"]
    assert big["database"] == "traces/big.sqlite" and big["size_bytes"] == 10
    assert big["open_dir"] == "traces"
    assert by_path["traces/alone.sqlite"]["error"] is None
    rep = by_path["reports_out"]
    assert rep["kind"] == "reports" and rep["database"] is None
    assert "no .sqlite or .nsys-rep" in rep["error"]
    # the run (oldest mtime) comes last: newest first
    assert page["items"][-1]["path"] == "proj/jlprof_runs/20261123-180000-ab12"


def test_bad_files_are_reported_not_fatal(tmp_path: Path, export: bytes) -> None:
    root = tmp_path
    broken = make_run(root, "broken", export)
    (broken / "jlprof_run.json").write_text("{not json")
    partial = make_run(root, "partial", export)
    (partial / "jlprof_run.json").write_text(
        json.dumps({"format": "jlprof-run/1", "iterations": "three", "gpu_util_pct": 7})
    )
    make_run(root, "failed", export, status="analysis_failed", error="no kernels")
    (root / "garbage.sqlite").write_bytes(b"this is not a database at all")
    (root / "other.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    import sqlite3

    conn = sqlite3.connect(root / "app.sqlite")
    conn.execute("CREATE TABLE users (id INTEGER)")
    conn.commit()
    conn.close()
    by_path = {e["path"]: e for e in listing.list_profiles(root)["items"]}
    assert "not readable JSON" in by_path["jlprof_runs/broken"]["error"]
    assert by_path["jlprof_runs/broken"]["database"] == "jlprof_runs/broken/nsys_profile.sqlite"
    p = by_path["jlprof_runs/partial"]
    assert p["error"] is None and p["headline"] == {"gpu_util_pct": 7.0}  # wrong types dropped
    assert p["database"] == "jlprof_runs/partial/nsys_profile.sqlite"  # found without the key
    f = by_path["jlprof_runs/failed"]
    assert f["status"] == "analysis_failed" and f["error"] == "no kernels"
    assert by_path["garbage.sqlite"]["error"] == "not a SQLite database"
    assert by_path["other.sqlite"]["error"].startswith("unreadable SQLite file")
    assert "not an nsys export" in by_path["app.sqlite"]["error"]


def test_manifest_cannot_point_outside_its_folder(tmp_path: Path, export: bytes) -> None:
    root = tmp_path / "root"
    (tmp_path / "outside.sqlite").write_bytes(export)
    run = make_run(root, "r1", export, database="../../../outside.sqlite", nsys_report="/etc/x")
    (run / "nsys_profile.sqlite").unlink()
    (run / "link.sqlite").symlink_to(tmp_path / "outside.sqlite")
    entry = listing.list_profiles(root)["items"][0]
    assert entry["database"] is None and "no .sqlite" in entry["error"]
    # a manifest that is a link (to a JSON file anywhere) is not read
    (tmp_path / "other.json").write_text('{"iterations": 99}')
    (run / "jlprof_run.json").unlink()
    (run / "jlprof_run.json").symlink_to(tmp_path / "other.json")
    entry = listing.list_profiles(root)["items"][0]
    assert "symbolic link" in entry["error"] and entry["headline"] == {}


def test_symlinks_out_of_root_are_not_listed(tmp_path: Path, export: bytes) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "outside"
    make_run(outside, "secret", export)
    (outside / "t.nsys-rep").write_bytes(b"x")
    (root / "escape").symlink_to(outside)
    (root / "t.nsys-rep").symlink_to(outside / "t.nsys-rep")
    assert listing.list_profiles(root)["items"] == []


def test_pagination_is_stable_and_complete(tmp_path: Path, export: bytes) -> None:
    root = tmp_path
    for i in range(23):
        make_run(root, f"run{i:02d}", export, mtime=1_000_000 + i)
    seen = []
    for offset in range(0, 30, 10):
        page = listing.list_profiles(root, offset=offset, limit=10)
        assert page["total"] == 23 and page["offset"] == offset and page["limit"] == 10
        seen += [e["name"] for e in page["items"]]
    assert seen == [f"run{i:02d}" for i in reversed(range(23))]
    assert listing.list_profiles(root, limit=10**6)["limit"] == listing.MAX_LIMIT


def test_describe_path(tmp_path: Path, export: bytes) -> None:
    (tmp_path / "a.sqlite").write_bytes(export)
    (tmp_path / "notes.txt").write_text("x")
    assert listing.describe_path(tmp_path, "a.sqlite")["database"] == "a.sqlite"
    with pytest.raises(listing.NotAProfile):
        listing.describe_path(tmp_path, "notes.txt")
    with pytest.raises(listing.PathRefused):
        listing.describe_path(tmp_path, "../a.sqlite")


def test_walk_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deep = tmp_path.joinpath(*[f"d{i}" for i in range(listing.MAX_DEPTH + 3)])
    deep.mkdir(parents=True)
    (deep / "t.nsys-rep").write_bytes(b"x")
    page = listing.list_profiles(tmp_path)
    assert page["truncated"] and page["items"] == []
    assert os.path.exists(deep / "t.nsys-rep")


def test_fifo_is_not_opened(tmp_path: Path) -> None:
    """A FIFO named like an export is refused without opening it (a read would wait forever)."""
    from jlprof.engine.read.schema import is_sqlite

    os.mkfifo(tmp_path / "x.sqlite")
    assert listing.nsys_sqlite_error(tmp_path / "x.sqlite") == "not a regular file"
    assert is_sqlite(tmp_path / "x.sqlite") is False
    with pytest.raises(listing.NotAProfile, match="not a regular file"):
        listing.describe_path(tmp_path, "x.sqlite")


def test_not_an_export_names_the_missing_table(tmp_path: Path) -> None:
    """CUPTI and NVTX tables but no StringIds: the message names StringIds (issue 46)."""
    import sqlite3

    con = sqlite3.connect(tmp_path / "x.sqlite")
    con.execute("CREATE TABLE NVTX_EVENTS (start INT)")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT)")
    con.commit()
    con.close()
    assert (
        listing.nsys_sqlite_error(tmp_path / "x.sqlite")
        == "not an nsys export (no StringIds table)"
    )
