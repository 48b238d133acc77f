"""The magic's side of the reliability matrix (issue 22); no sidecar is started here.

Odd file names, a profile name with a folder part, empty report/format lists and a missing CUDA
API table through ``%dlprof --database``; the CLI and API sides are ``tests/test_reliability.py``.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

import jlprof
from tests.fixtures.scenarios import cpu_only_db, rich_db


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    return rich_db().write(tmp_path_factory.mktemp("good") / "rich.sqlite")


def test_odd_file_name(shell, export) -> None:
    cpu_only_db().write(shell.cwd / "run")  # what the unescaped URI opened
    shutil.copyfile(export, shell.cwd / "run#1.sqlite")
    out = shell.line('--database="run#1.sqlite" --output_path=odd --reports=kernel -o odd')
    assert "Traceback" not in out.stderr, out.stderr
    want = jlprof.load(export).report("kernel")
    pd.testing.assert_frame_equal(shell.ns["odd"].report("kernel"), want)
    assert len(pd.read_csv(shell.cwd / "odd" / "dlprof_kernel.csv")) == len(want)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--profile_name=../../escape", "--profile_name '../../escape' is not a plain file name"),
        ("--reports=bogus", "unknown report 'bogus'"),
        ("--formats=", "--formats is empty"),
        ("--reports=", "--reports is empty; choose from summary"),
        ("--formats=xml", "unknown format 'xml'"),
    ],
)
def test_options_refused_before_anything_runs(shell, export, option, message) -> None:
    before = sorted(p.name for p in shell.cwd.parent.iterdir())
    out = shell.line(f"--database={export} --output_path=refused {option}")
    assert message in out.stderr, out.stderr
    assert not (shell.cwd / "refused").exists()
    assert sorted(p.name for p in shell.cwd.parent.iterdir()) == before
    out = shell.cell(option, "print('never runs')")  # a cell too: refused before the sidecar
    assert message in out.stderr and "never runs" not in out.stdout
    assert shell.magics.session.sidecar is None


def test_no_cuda_api_table_is_a_warning(shell, export, tmp_path) -> None:
    db = Path(shutil.copyfile(export, tmp_path / "nort.sqlite"))
    with sqlite3.connect(db) as con:
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    con.close()
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    out = shell.line(f"--database={db} -o nort")
    assert "no CUDA API table (CUPTI_ACTIVITY_KIND_RUNTIME)" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and shell.ns["nort"].report("kernel") is not None
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest


def test_kernel_status_network_line() -> None:
    from jlprof.magics.dlprof import network_line

    assert "private network namespace" in network_line({"private_network": True})
    st = {"private_network": False, "listeners": [("0.0.0.0", 41937, 20652, "nsys"),
                                                  ("127.0.0.1", 54931, 20652, "nsys")]}  # fmt: skip
    line = network_line(st)
    assert "listens on 0.0.0.0:41937 (pid 20652 nsys)" in line and "54931" not in line
    assert "no option to bind it to loopback" in line
    only_local = {"private_network": False, "listeners": [("127.0.0.1", 5, 1, "nsys")]}
    assert "no TCP port of the sidecar listens beyond loopback" in network_line(only_local)


def test_output_folder_held_by_another_run(shell, export) -> None:
    """A folder another run is writing (here: held by this test) is refused with one line and
    left as it was; the notebook cell fails. Free again, the same line writes the reports."""
    from jlprof import outputs

    folder = shell.cwd / "held"
    folder.mkdir()
    with outputs.folder_lock(folder):
        shell.line(f"--database={export} --output_path=held --reports=kernel -o held")
        assert shell.failure == (
            "jlprof: another jlprof run is writing held: wait for it to end, or choose another "
            "--output_path"
        )
        assert list(folder.iterdir()) == []
    shell.line(f"--database={export} --output_path=held --reports=kernel -o held")
    assert shell.failure is None and (folder / "dlprof_kernel.csv").is_file()


def test_failed_line_magic_fails_the_cell(shell) -> None:
    """A jlprof error fails the notebook cell (Run All stops) with its one line, shown once."""
    out = shell.line("--database=nowhere.sqlite")
    assert shell.failure == (
        "jlprof: nowhere.sqlite: no such file (give the .sqlite, .nsys-rep or .jlprof)"
    )
    assert "nowhere" not in out.stderr  # not printed besides
