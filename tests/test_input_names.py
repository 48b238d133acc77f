"""Odd file names: a name that exists is that file (never a glob), and no run creates or
changes anything beside the user's input (issue 43, items 10 and 11)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import jlprof
from jlprof.cli import main
from jlprof.distributed import rank_paths, several
from jlprof.engine.read import schema
from jlprof.engine.read.read import read_trace
from jlprof.engine.read.store import is_dldb, save_trace
from jlprof.options import OPTIONS
from tests.fixtures.loops import small_training_export

# '#' and '?' end an unescaped URI's path; '%20' decodes to a space; the rest must pass as is
ODD = ("run#1.sqlite", "run?x=1.sqlite", "x%20y.sqlite", "a b.sqlite", "é&;=+'.sqlite")


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    return small_training_export(tmp_path_factory.mktemp("names") / "run.sqlite")


def folder_state(folder: Path) -> dict[str, tuple[int, int]]:
    """Every entry of ``folder``: size and modification time (ns)."""
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


def odd_copy(export: Path, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    dst = folder / name
    shutil.copyfile(export, dst)
    return dst


def test_a_name_that_exists_is_that_file_not_a_glob(export, tmp_path):
    src = odd_copy(export, tmp_path / "odd", "run?x=1.sqlite")
    assert not several(str(src)) and rank_paths(str(src)) == [src]
    out = tmp_path / "out"
    args = ["--database", str(src), "--reports", "summary", "--formats", "json"]
    assert main([*args, "--output_path", str(out), "-v", "quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["dlprof_dldb.sqlite", "dlprof_summary.json"]
    summary = json.loads((out / "dlprof_summary.json").read_text())
    assert summary["Iterations"]["Total Iterations"] == 6  # the one export's own summary
    # where no file has the name, the same characters are a pattern
    (tmp_path / "odd" / "run_b.sqlite").write_bytes(src.read_bytes())
    pattern = str(tmp_path / "odd" / "run?b.sqlite")
    assert several(pattern) and rank_paths(pattern) == [tmp_path / "odd" / "run_b.sqlite"]
    (db_opt,) = [o for o in OPTIONS if o.name == "database"]
    assert "a name that exists is that file" in db_opt.help


@pytest.mark.parametrize("windowed", ["false", "true"])
@pytest.mark.parametrize("name", ODD)
def test_no_file_is_created_beside_the_input(export, tmp_path, name, windowed):
    src = odd_copy(export, tmp_path / "odd", name)
    before = folder_state(src.parent)
    out = tmp_path / "out"
    args = ["--database", str(src), "--reports", "summary,kernel", "--formats", "json",
            "--windowed", windowed]  # fmt: skip
    assert main([*args, "--output_path", str(out), "-v", "quiet"]) == 0
    assert (out / "dlprof_summary.json").is_file()
    assert folder_state(src.parent) == before
    # both readers: connectorx's URI opens that very file, read-only
    import connectorx

    rows = connectorx.read_sql(
        schema.connectorx_uri(src), "SELECT count(*) AS n FROM StringIds", return_type="arrow"
    )
    assert rows.column("n")[0].as_py() == _strings(src)
    read_trace(src, use_connectorx=False)
    jlprof.load(src)
    assert folder_state(src.parent) == before


def _strings(path: Path) -> int:
    import sqlite3

    con = sqlite3.connect(schema.sqlite_uri(path), uri=True)
    try:
        return con.execute("SELECT count(*) FROM StringIds").fetchone()[0]
    finally:
        con.close()


@pytest.mark.parametrize("name", ["x%20y.sqlite", "s#1_dldb.sqlite", "q?x=1_dldb.sqlite"])
def test_a_dldb_under_an_odd_name_is_read(export, tmp_path, name):
    (tmp_path / "db").mkdir()
    db = save_trace(read_trace(export), tmp_path / "db" / name)
    before = folder_state(db.parent)
    assert is_dldb(db)
    a = jlprof.load(export, key_node="optimizer_step").report("kernel")
    b = jlprof.load(db, key_node="optimizer_step").report("kernel")
    assert a.equals(b)
    assert folder_state(db.parent) == before
