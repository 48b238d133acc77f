"""Bad input: one line ``jlprof: error: ...`` naming the problem and the fix, exit status 2.

Each case goes through the Python API (``jlprof.load``) and the CLI in process
(``jlprof.cli.main``); one case per error source also through a real ``python -m jlprof``
subprocess. Only ``-v diagnostic`` may show a traceback.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import jlprof
from jlprof.cli import main
from jlprof.errors import JlprofError
from tests.fixtures.scenarios import rich_db

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    make: Callable[[Path, Path], Path]  # (case dir, good export) -> path given to --database
    args: tuple[str, ...]  # extra CLI flags
    load_kw: dict  # the same options for jlprof.load
    problem: str  # regex: what is wrong
    fix: str  # regex: what to do about it


def good(_d: Path, export: Path) -> Path:
    return export


def missing(d: Path, _e: Path) -> Path:
    return d / "no_such_profile.sqlite"


def directory(d: Path, _e: Path) -> Path:
    (d / "run").mkdir()
    return d / "run"


def zero_bytes(d: Path, _e: Path) -> Path:
    (d / "empty.sqlite").write_bytes(b"")
    return d / "empty.sqlite"


def random_bytes(d: Path, _e: Path) -> Path:
    (d / "noise.sqlite").write_bytes(os.urandom(4096))
    return d / "noise.sqlite"


def text_file(d: Path, _e: Path) -> Path:
    (d / "notes.sqlite").write_text("Generating SQLite file report1.sqlite from report1.nsys-rep\n")
    return d / "notes.sqlite"


def truncated(d: Path, export: Path) -> Path:
    data = export.read_bytes()
    (d / "cut.sqlite").write_bytes(data[: len(data) // 2])
    return d / "cut.sqlite"


def plain_sqlite(d: Path, _e: Path) -> Path:
    con = sqlite3.connect(d / "other.sqlite")
    con.execute("create table measurements (t integer, value real)")
    con.execute("insert into measurements values (1, 2.5)")
    con.commit()
    con.close()
    return d / "other.sqlite"


CASES = {
    "missing": Case(missing, (), {}, r"no_such_profile\.sqlite: no such file", r"Check the path"),
    "directory": Case(directory, (), {}, r"run is a directory", r"give the \.sqlite"),
    "zero_bytes": Case(zero_bytes, (), {}, r"empty \(0 bytes\)", r"Re-run nsys"),
    "random_bytes": Case(
        random_bytes, (), {}, r"noise\.sqlite is not a SQLite database", r"nsys export"
    ),
    "text_file": Case(text_file, (), {}, r"notes\.sqlite is not a SQLite database", r"nsys export"),
    "truncated": Case(truncated, (), {}, r"cut\.sqlite is truncated", r"re-export it"),
    "not_nsys": Case(plain_sqlite, (), {}, r"not an nsys export", r"nsys export --type sqlite"),
    "unknown_key_node": Case(
        good,
        ("--key_node=no_such_op",),
        {"key_node": "no_such_op"},
        r"key node 'no_such_op' is not an op name",
        r"Candidates: .*global_step|detail report",
    ),
    "stop_before_start": Case(
        good,
        ("--iter_start=2", "--iter_stop=1"),
        {"iter_start": 2, "iter_stop": 1},
        r"--iter_stop 1 is before --iter_start 2",
        r"must be >= the start",
    ),
    "stop_past_last": Case(
        good,
        ("--iter_stop=9",),
        {"iter_stop": 9},
        r"--iter_stop 9 is past the last iteration \(3\)",
        r"use at most 3",
    ),
    "start_past_last": Case(
        good,
        ("--iter_start=4",),
        {"iter_start": 4},
        r"--iter_start 4 is past the last iteration \(3\)",
        r"use 0\.\.3",
    ),
    "unknown_report": Case(
        good,
        ("--reports=summary,kernels",),
        {},
        r"unknown report 'kernels'",
        r"choose from .*kernel",
    ),
}


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rich_db().write(tmp_path_factory.mktemp("good") / "rich.sqlite")


@pytest.fixture
def case_path(request, tmp_path: Path, export: Path) -> tuple[Case, Path]:
    case = CASES[request.param]
    return case, case.make(tmp_path, export)


def check_message(case: Case, text: str) -> None:
    assert re.search(case.problem, text), text
    assert re.search(case.fix, text), text


def error_line(err: str) -> str:
    """The one error line; anything before it may only be progress lines ``[jlprof  0.01s] …``."""
    lines = err.strip().splitlines()
    assert "Traceback" not in err, err
    assert lines and lines[-1].startswith("jlprof: error: "), err
    assert all(line.startswith("[jlprof ") for line in lines[:-1]), err
    return lines[-1]


@pytest.mark.parametrize("case_path", list(CASES), indirect=True)
def test_python_api(case_path) -> None:
    case, path = case_path
    with pytest.raises(JlprofError) as info:
        prof = jlprof.load(path, **case.load_kw)
        prof.report("kernels")  # the unknown-report case fails here, the others never get here
    msg = str(info.value)
    assert "\n" not in msg
    check_message(case, msg)


@pytest.mark.parametrize("case_path", list(CASES), indirect=True)
def test_cli_in_process(case_path, tmp_path: Path, capsys) -> None:
    case, path = case_path
    before = path.read_bytes() if path.is_file() else None
    rc = main([f"--database={path}", *case.args, f"--output_path={tmp_path / 'out'}"])
    err = capsys.readouterr().err
    assert rc == 2
    assert (path.read_bytes() if path.is_file() else None) == before  # inputs never modified
    check_message(case, error_line(err))


def test_cli_diagnostic_shows_the_traceback(tmp_path: Path, capsys) -> None:
    rc = main([f"--database={tmp_path / 'nope.sqlite'}", "-v", "diagnostic"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "Traceback (most recent call last)" in err and "InputError" in err
    assert err.strip().splitlines()[-1].startswith("jlprof: error: ")


# one case per place an error can come from (file check, SQLite, analysis options, CLI flags);
# every case already runs through ``main`` above, each subprocess costs a second of imports
SUBPROCESS_CASES = ("missing", "truncated", "stop_past_last", "unknown_report")


def test_cli_subprocess(tmp_path: Path, export: Path) -> None:
    """``python -m jlprof`` as a user runs it; the processes run side by side to stay fast."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    procs = {}
    for name in SUBPROCESS_CASES:
        case = CASES[name]
        d = tmp_path / name
        d.mkdir()
        path = case.make(d, export)
        cmd = [
            sys.executable,
            "-m",
            "jlprof",
            f"--database={path}",
            *case.args,
            f"--output_path={d / 'out'}",
        ]
        procs[name] = subprocess.Popen(
            cmd, env=env, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (name, err)
        check_message(CASES[name], error_line(err))
        assert out == "", (name, out)
    # and the first-import path a user sees is this checkout's jlprof
    probe = subprocess.run(
        [sys.executable, "-c", "import jlprof; print(jlprof.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(probe.stdout.strip()).resolve().is_relative_to(REPO)
