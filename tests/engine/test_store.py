"""The jlprof database: a saved trace re-analyses to the same frames and numbers."""

from __future__ import annotations

import pandas as pd
import pytest

import jlprof
from jlprof.engine.read.read import read_trace
from jlprof.engine.read.store import is_jlprof_db, load_trace, save_trace
from jlprof.errors import InputError
from tests.fixtures.loops import small_training_export


def test_round_trip(tmp_path):
    src = small_training_export(tmp_path / "run.sqlite")
    tr = read_trace(src)
    db = save_trace(tr, tmp_path / "run.jlprof")
    assert is_jlprof_db(db) and not is_jlprof_db(src)
    back = load_trace(db)
    for name in ("gpu", "api", "nvtx", "marks", "osrt", "gpus"):
        a, b = getattr(tr, name), getattr(back, name)
        assert list(a.columns) == list(b.columns)
        pd.testing.assert_frame_equal(a.astype(object), b.astype(object), check_dtype=False)
    assert back.meta == tr.meta
    p1 = jlprof.load(src, key_node="optimizer_step")
    p2 = jlprof.load(db, key_node="optimizer_step")
    pd.testing.assert_frame_equal(p1.report("detail"), p2.report("detail"))


def test_damaged_database(tmp_path):
    bad = tmp_path / "x.jlprof"
    bad.write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(InputError):
        jlprof.load(bad)


def test_dldb_sqlite_container_round_trip(tmp_path):
    """``dlprof_dldb.sqlite`` (guide §2.3, §4.3): the same database in an SQLite file, read back
    by ``--database`` to the same reports; an nsys export is never mistaken for one."""
    import sqlite3

    from jlprof.engine.read.store import is_dldb, read_any

    export = small_training_export(tmp_path / "run.sqlite")
    trace = read_trace(export)
    db = save_trace(trace, tmp_path / "dlprof_dldb.sqlite")
    with db.open("rb") as fh:
        assert fh.read(16) == b"SQLite format 3\x00"
    with sqlite3.connect(db) as con:
        names = {r[0] for r in con.execute("SELECT name FROM jlprof_dldb")}
    assert names == {"manifest.json", *(f"{f}.arrow" for f in ("gpu", "api", "nvtx", "marks",
                                                              "osrt", "gpus"))}  # fmt: skip
    assert is_dldb(db) and not is_dldb(export) and not is_jlprof_db(db)
    back = read_any(db)
    for name in ("gpu", "api", "nvtx"):
        pd.testing.assert_frame_equal(
            getattr(back, name).astype(object), getattr(trace, name).astype(object)
        )
    a = jlprof.load(export, key_node="optimizer_step").report("kernel")
    b = jlprof.load(db, key_node="optimizer_step").report("kernel")
    pd.testing.assert_frame_equal(a, b)


def test_damaged_dldb_is_one_clear_error(tmp_path):
    import sqlite3

    db = tmp_path / "dlprof_dldb.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE jlprof_dldb (name TEXT PRIMARY KEY, data BLOB)")
    with pytest.raises(InputError, match="damaged jlprof database"):
        load_trace(db)


def test_dldb_frames_over_one_part_are_split_and_joined(tmp_path, monkeypatch):
    """SQLite refuses a blob over 1e9 bytes (a 10M-kernel ``gpu.arrow``): a frame larger than
    one part is written as rows ``gpu.arrow``, ``gpu.arrow.1``... and read back whole."""
    import json
    import sqlite3

    from jlprof.engine.read import store

    export = small_training_export(tmp_path / "run.sqlite")
    trace = read_trace(export)
    whole = save_trace(trace, tmp_path / "whole_dldb.sqlite")
    monkeypatch.setattr(store, "PART_BYTES", 1000)
    db = save_trace(trace, tmp_path / "dlprof_dldb.sqlite")
    with sqlite3.connect(db) as con:
        rows = dict(con.execute("SELECT name, data FROM jlprof_dldb"))
    with sqlite3.connect(whole) as con:
        ref = dict(con.execute("SELECT name, data FROM jlprof_dldb"))
    parts = sorted(n for n in rows if n.startswith("gpu.arrow"))
    assert len(parts) > 2 and all(len(rows[n]) <= 1000 for n in parts)
    joined = b"".join(rows[f"gpu.arrow{'' if i == 0 else f'.{i}'}"] for i in range(len(parts)))
    assert joined == ref["gpu.arrow"]
    assert json.loads(rows["manifest.json"])["version"] == 2
    assert json.loads(ref["manifest.json"])["version"] == 1  # unsplit: older readers take it
    back = load_trace(db)
    for name in ("gpu", "api", "nvtx", "marks", "osrt", "gpus"):
        pd.testing.assert_frame_equal(
            getattr(back, name).astype(object), getattr(trace, name).astype(object)
        )
    with sqlite3.connect(db) as con:  # a lost part is a damaged database, not a short frame
        con.execute("DELETE FROM jlprof_dldb WHERE name = 'gpu.arrow.1'")
    with pytest.raises(InputError, match="damaged jlprof database"):
        load_trace(db)
