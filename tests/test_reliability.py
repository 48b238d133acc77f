"""Reliability matrix: odd file names, whole files or none, one-line errors (issue 22).

The bad-input cases that already worked (missing, empty, truncated, random, foreign and directory
inputs) are ``tests/test_bad_input.py``; the magic's survival of raise/``sys.exit``/``os._exit``,
big output and interrupts is ``tests/magics/test_dlprof.py``; the sidecar's private folder, key
and IPC sockets ``tests/sidecar/test_process.py``; the server's 403s ``tests/server``. Here: the
cases that failed. Each CLI case is one row of ``CASES``: expected exit status, a fragment of the
one error line, files present and absent afterwards, and the input's sha256 unchanged.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

import jlprof
from jlprof import outputs
from jlprof.cli import main
from jlprof.errors import InputError, JlprofError, OptionError, OutputError
from jlprof.options import DEFAULT_PROFILE_NAME
from jlprof.reports import REPORTS
from tests.fixtures.scenarios import cpu_only_db, rich_db

ALL_FILES = 2 * len(REPORTS)  # --reports=all --formats=csv,json

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
    names = sorted(
        p.name for p in out.glob(f"{DEFAULT_PROFILE_NAME}_*") if not p.name.endswith("_dldb.sqlite")
    )
    for name in names:
        assert sha(out / name) == sha(reference / name), name
    return names


def no_partials(folder: Path) -> None:
    assert not list(folder.rglob(f"*{outputs.PARTIAL}")), list(folder.rglob("*"))


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
    assert len(same_as_reference(tmp_path / "out", reference)) == ALL_FILES
    assert {k: v for k, v in tree(tmp_path).items() if not k.startswith("out/")} == before


# ---- the CLI matrix --------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One CLI run: ``setup(case dir, export copy)`` returns the extra arguments."""

    setup: Callable[[Path, Path], list[str]]
    status: int
    message: str  # a fragment of stderr (the error line, or the warning for status 0)
    present: tuple[str, ...] = ()  # paths relative to the case dir
    absent: tuple[str, ...] = ()
    before_load: bool = field(default=True)  # errors: reported before the trace is read


def out_is_file(d: Path, _db: Path) -> list[str]:
    (d / "out").write_text("a file, not a folder")
    return [f"--output_path={d / 'out'}"]


def out_under_file(d: Path, _db: Path) -> list[str]:
    (d / "out").write_text("a file, not a folder")
    return [f"--output_path={d / 'out' / 'sub'}"]


def save_db_under_file(d: Path, _db: Path) -> list[str]:
    (d / "out").write_text("a file, not a folder")
    return [f"--output_path={d / 'o'}", f"--save_db={d / 'out' / 'x.jlprof'}"]


def drop(table: str) -> Callable[[Path, Path], list[str]]:
    def setup(d: Path, db: Path) -> list[str]:
        with sqlite3.connect(db) as con:
            con.execute(f"DROP TABLE {table}")
        con.close()
        return [f"--output_path={d / 'out'}"]

    return setup


def replace_nvtx(db: Path) -> list[str]:
    """NVTX_EVENTS replaced by a table of other columns (a layout the reader does not know)."""
    with sqlite3.connect(db) as con:
        con.execute("DROP TABLE NVTX_EVENTS")
        con.execute("CREATE TABLE NVTX_EVENTS (foo INTEGER, bar TEXT)")
        con.execute("INSERT INTO NVTX_EVENTS VALUES (1, 'x')")
    con.close()
    return []


def args(*extra: str) -> Callable[[Path, Path], list[str]]:
    return lambda d, _db: [f"--output_path={d / 'out'}", *[a.format(d=d) for a in extra]]


CASES = {
    "profile_name_escapes": Case(
        args("--profile_name=../../escape"),
        2,
        "--profile_name '../../escape' is not a plain",
        absent=("escape_summary.csv", "../escape_summary.csv", "out"),
    ),
    "profile_name_empty": Case(args("--profile_name="), 2, "--profile_name is empty"),
    "formats_empty": Case(args("--formats="), 2, "--formats is empty; choose from csv"),
    "format_unknown_before_load": Case(
        lambda d, _db: [
            f"--output_path={d / 'out'}",
            "--formats=xml",
            f"--database={d / 'missing.sqlite'}",
        ],
        2,
        "unknown format 'xml'; choose from csv, json and parquet",
    ),
    "output_path_is_a_file": Case(out_is_file, 2, "out is a file, not a folder; choose another"),
    "output_path_under_a_file": Case(out_under_file, 2, "out is a file, not a folder"),
    "save_db_new_folder": Case(
        args("--save_db={d}/nodir/x.jlprof"), 0, "", present=("nodir/x.jlprof",)
    ),
    "save_db_under_a_file": Case(
        save_db_under_file,
        2,
        "out is a file, not a folder; choose another --save_db",
    ),
    "no_cuda_api_table": Case(
        drop("CUPTI_ACTIVITY_KIND_RUNTIME"),
        0,
        "no CUDA API table (CUPTI_ACTIVITY_KIND_RUNTIME)",
        present=("out/dlprof_kernel.csv",),
        before_load=False,
    ),
    "no_nvtx_table": Case(
        drop("NVTX_EVENTS"),
        0,
        "warning: the export has no NVTX table (NVTX_EVENTS): jlprof finds ops and iterations",
        present=("out/dlprof_kernel.csv",),
        before_load=False,
    ),
    "no_nvtx_table_key_node": Case(
        lambda d, db: [*drop("NVTX_EVENTS")(d, db), "--key_node=global_step"],
        2,
        "is not an op name or op ID in this profile. The export has no NVTX table (NVTX_EVENTS)",
        before_load=False,
    ),
    "nvtx_table_of_unknown_columns": Case(
        lambda d, db: [*replace_nvtx(db), f"--output_path={d / 'out'}"],
        2,
        "input.sqlite has a table whose columns jlprof does not know (SQLite: no such column",
        before_load=False,
    ),
    "no_string_ids": Case(
        drop("StringIds"),
        2,
        "input.sqlite is a SQLite database but not an nsys export (no StringIds table)",
        before_load=False,
    ),
    "reports_empty": Case(args("--reports="), 2, "--reports is empty; choose from"),
    "no_kernel_table": Case(
        drop("CUPTI_ACTIVITY_KIND_KERNEL"),
        0,
        "no kernel table (CUPTI_ACTIVITY_KIND_KERNEL)",
        present=("out/dlprof_kernel.csv",),
        before_load=False,
    ),
}


def error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert "Traceback" not in err, err
    assert lines and lines[-1].startswith("jlprof: error: "), err
    return lines[-1]


@pytest.mark.parametrize("name", list(CASES))
def test_cli_matrix(name, tmp_path, export, capsys) -> None:
    case = CASES[name]
    d = tmp_path / "case"
    d.mkdir()
    db = Path(shutil.copyfile(export, tmp_path / "input.sqlite"))
    extra = case.setup(d, db)
    digest = sha(db)
    rc = main([f"--database={db}", "--reports=all", "-v", "normal", *extra])
    err = capsys.readouterr().err
    assert rc == case.status, err
    if case.status:
        assert case.message in error_line(err), err
        if case.before_load:
            assert "loading" not in err, err  # checked before the trace was read
    else:
        assert "Traceback" not in err and case.message in err, err
    for rel in case.present:
        assert (d / rel).is_file(), rel
    for rel in case.absent:
        assert not (d / rel).exists(), rel
    assert not (tmp_path / "escape_summary.csv").exists()
    assert sha(db) == digest  # the input is never modified
    no_partials(tmp_path)


def test_database_starting_with_a_dash(tmp_path, export, reference, monkeypatch) -> None:
    """``--database=-lead.sqlite`` names that file (argparse took it for an option)."""
    monkeypatch.chdir(tmp_path)
    shutil.copyfile(export, tmp_path / "-lead.sqlite")
    assert (
        main(["--database=-lead.sqlite", "--output_path=out", "--reports=kernel", "-v", "quiet"])
        == 0
    )
    assert sha(tmp_path / "out" / "dlprof_kernel.csv") == sha(reference / "dlprof_kernel.csv")


def test_empty_file_among_ranks_is_one_line(tmp_path, export) -> None:
    """A folder of ranks holding a 0-byte ``.sqlite``: exit 2 and the one line, no Dask
    "Compute Failed" report with its traceback (at the default verbosity)."""
    pytest.importorskip("distributed")
    (tmp_path / "job").mkdir()
    shutil.copyfile(export, tmp_path / "job" / "a.sqlite")
    (tmp_path / "job" / "empty.sqlite").write_bytes(b"")
    proc = subprocess.run(
        [sys.executable, "-m", "jlprof", "--database=job", "--output_path=out"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Compute Failed" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (
        f"jlprof: error: rank 1 (job/empty.sqlite): {tmp_path / 'job' / 'empty.sqlite'} is empty "
        "(0 bytes): the profile was not written. Re-run nsys."
    ), proc.stderr


def test_profiled_program_failure_is_the_exit_status(tmp_path, export, monkeypatch) -> None:
    """Like nsys: the reports are written, and the program's exit status is jlprof's."""
    import jlprof.profiling

    monkeypatch.setattr(jlprof.profiling, "profile_run", lambda *_a, **_k: (export, 3))
    rc = main(
        [f"--output_path={tmp_path}", "-v", "quiet", "--reports=summary", "python", "fails.py"]
    )
    assert rc == 3
    assert (tmp_path / "dlprof_summary.csv").is_file()


# ---- 2./3. whole files or none: injected and real write failures ---------------------------


def test_write_error_midway_leaves_no_file(tmp_path, export, reference, monkeypatch, capsys):
    """ENOSPC after half of a JSON report (injected): one line, exit 2, no cut file."""
    from jlprof.reports import encoders

    class FullDisk(encoders.JsonRecords):  # the iteration report is streamed part by part
        def write(self, df):
            self.out.write(b'[{"Iteration": 0, ')
            raise OSError(errno.ENOSPC, "No space left on device", str(self.out.name))

    monkeypatch.setitem(encoders.STREAMS, "json", FullDisk)
    rc = main(cli_args(export, tmp_path / "out"))
    assert rc == 2
    line = error_line(capsys.readouterr().err)
    assert "dlprof_iteration.json: no space left on the device" in line
    assert "free some space or choose another --output_path" in line
    assert not (tmp_path / "out" / "dlprof_iteration.json").exists()
    same_as_reference(tmp_path / "out", reference)
    no_partials(tmp_path)


@pytest.fixture
def tmpfs(tmp_path) -> Iterator[Callable[[str], Path]]:
    """Mount small tmpfs file systems (root only; skipped where mounting is not allowed)."""
    mounted: list[Path] = []

    def mount(opts: str) -> Path:
        where = tmp_path / f"fs{len(mounted)}"
        where.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)],
                              capture_output=True, text=True)  # fmt: skip
        if proc.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="mounting needs root")
def test_disk_full_on_a_tiny_tmpfs(tmpfs, tmp_path, export, reference, capsys) -> None:
    fs = tmpfs("size=32k")
    rc = main(cli_args(export, fs / "out"))
    assert rc == 2
    assert "no space left on the device" in error_line(capsys.readouterr().err)
    written = same_as_reference(fs / "out", reference)  # whole files only ...
    assert len(written) < ALL_FILES  # ... and not all of them fitted
    no_partials(fs)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="mounting needs root")
def test_disk_full_on_the_dldb_alone(tmpfs, tmp_path, export, capsys) -> None:
    """The summary fits, DLProf's database (~190 KB) does not: SQLite's "database or disk is
    full" is a full disk like any other file's, exit 2 and the usual line (issue 46 item 8)."""
    fs = tmpfs("size=64k")
    rc = main([f"--database={export}", f"--output_path={fs}", "--reports=summary",
               "--formats=csv", "-v", "minimal"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2, err
    line = error_line(err)
    assert f"{fs / DEFAULT_PROFILE_NAME}_dldb.sqlite: no space left on the device of {fs}" in line
    assert "free some space or choose another --output_path" in line
    assert sorted(p.name for p in fs.iterdir()) == [f"{DEFAULT_PROFILE_NAME}_summary.csv"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="mounting needs root")
def test_read_only_output_folder(tmpfs, export, capsys, monkeypatch) -> None:
    fs = tmpfs("size=1m,ro")
    monkeypatch.chdir(fs.parent)
    rc = main(cli_args(export, Path(fs.name)))  # relative, as typed: --output_path=ro
    assert rc == 2
    err = capsys.readouterr().err
    line = error_line(err)
    assert f"cannot write {fs.name}: {fs.name} is on a read-only file system" in line, line
    assert "choose a writable --output_path" in line
    assert "loading" not in err  # found before the analysis


def test_read_only_output_folder_injected(tmp_path, export, monkeypatch, capsys) -> None:
    def refuse(*_a, **_k):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "x"))

    monkeypatch.setattr(outputs.tempfile, "mkstemp", refuse)
    assert main(cli_args(export, tmp_path)) == 2
    assert "read-only file system" in error_line(capsys.readouterr().err)


SLOW_WRITER = """
import sys, time
from jlprof.reports import encoders

def slow(df, out, *a, **k):  # streams a little, then hangs mid-report
    out.write(b"Kernel Name,")
    out.flush()
    print("WRITING", out.name, flush=True)
    time.sleep(120)

encoders.WRITERS["csv"] = slow
from jlprof.cli import main
sys.exit(main(sys.argv[1:]))
"""


def start_slow(export: Path, out: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_WRITER, f"--database={export}", f"--output_path={out}",
         "--reports=kernel", "--formats=csv", "-v", "quiet"],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the write has begun
    assert line.startswith("WRITING"), (line, proc.stderr.read() if proc.stderr else "")
    assert outputs.PARTIAL in line  # the writer got the temporary name, not the final one
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_interrupted_write_leaves_no_file(sig, tmp_path, export, reference, capsys) -> None:
    out = tmp_path / "out"
    proc = start_slow(export, out)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert not (out / "dlprof_kernel.csv").exists()
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        assert list(out.glob(f".*{outputs.PARTIAL}"))  # the killed writer's temporary file
    else:
        assert proc.returncode == 130, err
        assert err.strip().splitlines()[-1] == "jlprof: interrupted"
        no_partials(out)
    # a rerun without -f writes every file whole (nothing "kept") and clears the leftovers
    assert main(cli_args(export, out)) == 0
    assert "kept" not in capsys.readouterr().err
    assert len(same_as_reference(out, reference)) == ALL_FILES
    no_partials(out)


def test_two_runs_into_one_folder(tmp_path, export, reference, capsys) -> None:
    """While run A writes a folder, run B (another range, no -f) refuses with one line and
    writes nothing: one run's files are one run's (issue 46: both said "wrote", and the folder
    ended with A's summary beside B's kernel report). Once A is gone (even killed), B runs."""
    out = tmp_path / "out"
    slow = start_slow(export, out)
    try:
        before = tree(out)
        assert main(cli_args(export, out, "--iter_start=1")) == 2
        line = error_line(capsys.readouterr().err)
        assert f"another jlprof run is writing {out}: wait for it to end" in line, line
        assert tree(out) == before
    finally:
        slow.kill()
        slow.communicate(timeout=60)
    assert main(cli_args(export, out)) == 0
    assert len(same_as_reference(out, reference)) == ALL_FILES


def test_stale_partials_of_dead_processes_only(tmp_path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    mine = outputs.partial_path(tmp_path / "a.csv")
    theirs = mine.with_name(mine.name.replace(f".{os.getpid()}.", f".{dead.stdout.strip()}."))
    mine.write_text("still being written")
    theirs.write_text("left by a killed run")
    assert outputs.remove_stale_partials(tmp_path) == [theirs]
    assert mine.exists()


def test_atomic_writer_keeps_the_old_file_on_failure(tmp_path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old, whole")
    with pytest.raises(KeyboardInterrupt), outputs.written(target) as tmp:
        tmp.write_text("new, cut")
        raise KeyboardInterrupt
    assert target.read_text() == "old, whole"
    no_partials(tmp_path)


def test_save_db_whole_or_nothing(tmp_path, export, monkeypatch) -> None:
    prof = jlprof.load(export)
    import pyarrow.feather as feather

    def boom(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(feather, "write_feather", boom)
    with pytest.raises(OutputError, match=r"x\.jlprof: no space left .* --save_db"):
        prof.save(tmp_path / "x.jlprof")
    assert list(tmp_path.iterdir()) == []


def test_dldb_written_while_the_engine_works_fails_as_one_line(
    tmp_path, export, reference, monkeypatch, capsys
) -> None:
    """The DLProf database is written in a thread from the moment the trace is read: its full
    disk is still one line naming the file and exit 2, the reports are whole, nothing cut."""
    import pyarrow.feather as feather

    real = feather.write_feather

    def full_after_a_bit(table, dest, *a, **k):
        dest.write(b"ARROW1")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(feather, "write_feather", full_after_a_bit)
    out = tmp_path / "out"
    assert main(cli_args(export, out)) == 2
    line = error_line(capsys.readouterr().err)
    assert f"{DEFAULT_PROFILE_NAME}_dldb.sqlite: no space left on the device" in line
    assert not (out / f"{DEFAULT_PROFILE_NAME}_dldb.sqlite").exists()
    assert len(same_as_reference(out, reference)) == ALL_FILES
    no_partials(out)
    monkeypatch.setattr(feather, "write_feather", real)
    assert main(cli_args(export, out, "-f", "true")) == 0  # and it reads back after a rerun
    assert jlprof.load(out / f"{DEFAULT_PROFILE_NAME}_dldb.sqlite").iterations.count > 0


def test_a_failed_analysis_leaves_no_dldb(tmp_path, export, monkeypatch, capsys) -> None:
    """An unknown key node is found after the read, when the database's thread already
    writes: the thread is stopped and its file removed (no database of a failed run)."""
    from jlprof.engine.read import store

    started = []
    real = store._write_frames

    def slow_frames(trace, sink, check=None):
        started.append(check)
        import time

        for _ in range(200):  # until cancelled: the analysis fails meanwhile
            time.sleep(0.01)
            check()
        real(trace, sink, check)

    monkeypatch.setattr(store, "_write_frames", slow_frames)
    out = tmp_path / "out"
    assert main(cli_args(export, out, "--key_node", "no_such_op")) == 2
    assert "no_such_op" in error_line(capsys.readouterr().err)
    assert started and started[0] is not None  # it had begun, in its thread
    assert not (out / f"{DEFAULT_PROFILE_NAME}_dldb.sqlite").exists()
    no_partials(out)


# ---- 3. the Python API raises jlprof's own, documented exception types -----------------------


API_CASES = {
    "iter_start_text": ({"iter_start": "abc"}, OptionError, "iter_start is an iteration number"),
    "iter_start_fraction": ({"iter_start": 1.7}, OptionError, "got 1.7"),
    "iter_stop_bool": ({"iter_stop": True}, OptionError, "iter_stop is an iteration number"),
    "domains_text": ({"domains": "abc"}, OptionError, "domains is a list of NVTX domain names"),
    "key_node_number": ({"key_node": 5}, OptionError, "key_node is an op name"),
    "path_none": ({"path": None}, InputError, "path must be a file path"),
}


@pytest.mark.parametrize("name", list(API_CASES))
def test_api_errors(name, export) -> None:
    kw, kind, fragment = API_CASES[name]
    kw = {"path": export, **kw}
    with pytest.raises(kind) as info:
        jlprof.load(kw.pop("path"), **kw)
    assert isinstance(info.value, JlprofError)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_api_write_reports_errors(export, tmp_path) -> None:
    prof = jlprof.load(export)
    with pytest.raises(OptionError, match="not a plain file name"):
        jlprof.load(export, profile_name="../x").write_reports(tmp_path)
    with pytest.raises(OptionError, match="lists of names"):
        prof.write_reports(tmp_path, reports="summary")
    with pytest.raises(OutputError, match="is a file, not a folder"):
        prof.write_reports(Path(export) / "sub")
    assert list(tmp_path.iterdir()) == []


def test_no_cuda_api_table_through_the_api(tmp_path, export) -> None:
    db = Path(shutil.copyfile(export, tmp_path / "nort.sqlite"))
    with sqlite3.connect(db) as con:
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    con.close()
    prof = jlprof.load(db)
    full = jlprof.load(export)
    assert any("CUPTI_ACTIVITY_KIND_RUNTIME" in w for w in prof.trace.warnings)
    k, kf = prof.report("kernel"), full.report("kernel")
    # the GPU side is the same kernels and times (now under unassociated ops); no API side
    gpu = "Total GPU Time (ns)"
    pd.testing.assert_series_equal(
        k.groupby("Kernel Name")[gpu].sum(), kf.groupby("Kernel Name")[gpu].sum()
    )
    assert (k["Total API Time (ns)"] == 0).all()


def test_summary_json_is_valid_after_the_matrix(reference) -> None:
    """The reference itself: every JSON report parses (a cut one would not)."""
    for p in reference.glob("*.json"):
        json.loads(p.read_text())
