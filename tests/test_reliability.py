"""Reliability matrix: odd file names, whole files or none, one-line errors (issue 22).

The bad-input cases that already worked (missing, empty, truncated, random, foreign and directory
inputs) are ``tests/test_bad_input.py``; the magic's survival of raise/``sys.exit``/``os._exit``,
big output and interrupts is ``tests/magics/test_dlprof.py``; the sidecar's private folder, key
and IPC sockets ``tests/sidecar/test_process.py``; the server's 403s ``tests/server``. Here: the
cases that failed. Each CLI case is one row of ``CASES``: expected exit status, a fragment of the
one error line, files present and absent afterwards, and the input's sha256 unchanged.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import jlprof
from jlprof.cli import main
from tests.fixtures.scenarios import cpu_only_db, rich_db

REPO = Path(__file__).resolve().parents[1]
ODD_NAMES = ("run#1.sqlite", "run%20a.sqlite", "run?x=1.sqlite", "run a é.sqlite", "100%.sqlite")


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative name -> sha256), hidden ones included."""
    return {str(p.relative_to(folder)): sha(p) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rich_db().write(tmp_path_factory.mktemp("good") / "rich.sqlite")


@pytest.fixture(scope="module")
def reference(export: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reports of a clean run, to compare every other run's files with."""
    out = tmp_path_factory.mktemp("reference")
    assert main(cli_args(export, out)) == 0
    return out


def cli_args(db: Path, out: Path, *more: str) -> list[str]:
    return [f"--database={db}", f"--output_path={out}", "--reports=all", "--formats=csv,json",
            "-v", "minimal", *more]  # fmt: skip


def same_as_reference(out: Path, reference: Path) -> list[str]:
    """The final-name report files in ``out``; each must equal the reference byte for byte."""
    names = sorted(p.name for p in out.glob("jlprof_*"))
    for name in names:
        assert sha(out / name) == sha(reference / name), name
    return names


# ---- 1. odd file names -------------------------------------------------------------------


def odd_folder(d: Path, export: Path, name: str) -> Path:
    """``name`` beside decoys an unescaped URI would open instead (``run``, ``run a.sqlite``)."""
    d.mkdir(exist_ok=True)
    cpu_only_db().write(d / "run")
    cpu_only_db().write(d / "run a.sqlite")
    shutil.copyfile(export, d / name)
    return d / name


@pytest.mark.parametrize("fast", [True, False], ids=["connectorx", "sqlite3"])
@pytest.mark.parametrize("name", ODD_NAMES)
def test_odd_file_names_read_that_file(tmp_path, export, name, fast) -> None:
    if fast:
        pytest.importorskip("connectorx")
    path = odd_folder(tmp_path / "in", export, name)
    before = tree(tmp_path / "in")
    got = jlprof.load(path, use_connectorx=fast)
    want = jlprof.load(export, use_connectorx=fast)
    for rep in ("kernel", "iteration"):
        pd.testing.assert_frame_equal(got.report(rep), want.report(rep))
    assert tree(tmp_path / "in") == before  # nothing created beside it, nothing changed


def test_odd_file_name_from_the_command_line(tmp_path, export, reference) -> None:
    """``jlprof --database='run#1.sqlite'`` as a user types it, relative to the working folder."""
    odd_folder(tmp_path, export, "run#1.sqlite")
    before = tree(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "jlprof", "--database=run#1.sqlite", "--output_path=out",
         "--reports=all", "--formats=csv,json", "-v", "quiet"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(same_as_reference(tmp_path / "out", reference)) == 16
    assert {k: v for k, v in tree(tmp_path).items() if not k.startswith("out/")} == before
