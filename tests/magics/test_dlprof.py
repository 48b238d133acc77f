"""``%%dlprof`` in an in-process IPython shell with the real sidecar under the real nsys.

One sidecar serves the whole module (nsys start-up and every capture cost seconds), so the
tests run in file order and some build on the state the earlier ones left, as a notebook would.
Numbers are checked against the SQLite export itself (NVTX rows counted with sqlite3).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import tempfile
import threading
from pathlib import Path

import pytest

from jlprof.magics import run
from jlprof.profile import Profile

pytestmark = [pytest.mark.nsys, pytest.mark.slow]

SETUP = """
import nvtx, time
def step(i):
    with nvtx.annotate("train_step"):
        with nvtx.annotate("/model/fc/linear"):
            s = sum(range(2000))
        with nvtx.annotate("optimizer_step"):
            time.sleep(0.002)
    return s
with nvtx.annotate("setup_marker"):
    counter = 0
print("setup ran")
"""


def nvtx_count(db: Path, text: str) -> int:
    """Ranges named ``text`` in an nsys export, counted straight from SQLite."""
    with sqlite3.connect(db) as con:
        return con.execute(
            "SELECT COUNT(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
            "WHERE e.eventType = 59 AND COALESCE(e.text, s.value) = ?",
            (text,),
        ).fetchone()[0]


def run_folders(cwd: Path) -> list[Path]:
    return sorted((cwd / "jlprof_runs").glob("*")) if (cwd / "jlprof_runs").exists() else []


@pytest.fixture(scope="module")
def prepared(shell, need_nsys):
    shell.magics.session.shutdown()
    out = shell.cell("--setup", SETUP)
    assert "setup ran" in out.stdout, out.stderr
    # information, not an error: JupyterLab paints stderr red
    assert "jlprof: starting the sidecar kernel under nsys 20" in out.stdout
    assert out.stderr == "", out.stderr
    return shell


def test_notes_on_stdout_problems_on_stderr(shell, capsys: pytest.CaptureFixture[str]) -> None:
    shell.magics._say("after the cell: analysing 0.30 s")
    shell.magics._say(run.Problem("the previous sidecar kernel died: starting a fresh one"))
    out = capsys.readouterr()
    assert out.out == "jlprof: after the cell: analysing 0.30 s\n"
    assert out.err == "jlprof: the previous sidecar kernel died: starting a fresh one\n"


def test_setup_cell_is_not_captured_and_profiled_cell_is(prepared):
    shell = prepared
    out = shell.cell(
        "--key_node=optimizer_step --reports=summary,detail --formats=csv,json",
        "for i in range(7):\n    step(i)\n    counter += 1\nprint('counter', counter)",
    )
    assert "counter 7" in out.stdout, out.stderr  # streamed from the sidecar; setup state used
    prof = shell.ns["_dlprof"]
    assert isinstance(prof, Profile)
    [folder] = run_folders(shell.cwd)
    db = folder / "nsys_profile.sqlite"
    assert db.exists() and (folder / "nsys_profile.nsys-rep").exists()
    assert (folder / "nsys_profile.qdstrm").exists()  # raw recording kept
    sidecar_dir = shell.magics.session.sidecar.dir
    assert not list(sidecar_dir.glob("capture*")), list(sidecar_dir.iterdir())  # moved, not copied
    assert not list(folder.glob(".*"))  # no temporary files left in the run folder
    # independent counts from the export: 7 key-node ranges, the setup cell not recorded
    assert nvtx_count(db, "optimizer_step") == 7 == prof.iterations.instances
    assert nvtx_count(db, "setup_marker") == 0
    assert prof.key_node == "optimizer_step"
    ops = set(prof.report("detail")["Op Name"].astype(str))
    assert "/model/fc/linear" in ops and "jlprof_capture" not in ops  # jlprof's range hidden
    names = {p.name for p in folder.iterdir()}
    assert {"dlprof_summary.csv", "dlprof_summary.json", "dlprof_detailed.csv"} <= names
    manifest = json.loads((folder / "jlprof_run.json").read_text())
    head = prof.headline()
    assert manifest["status"] == "ok" and manifest["error"] is None
    assert manifest["database"] == "nsys_profile.sqlite"
    assert manifest["nsys_report"] == "nsys_profile.nsys-rep"
    assert manifest["iterations"] == head["iterations"] == 8  # 7 key nodes: 8 intervals
    assert manifest["wall_ns"] == head["wall_ns"] > 0
    assert manifest["key_node"] == "optimizer_step"
    assert f"jlprof_runs/{folder.name}/" in out.stdout
    assert "stopping the capture (1/6)" in out.stdout and "analysing (5/6)" in out.stdout
    shell.ns["first_db"] = db


def test_rerun_gets_a_new_folder_and_state_persists(prepared):
    shell = prepared
    before = run_folders(shell.cwd)
    out = shell.cell("-o second", "for i in range(3):\n    step(i)\ncounter += 3\nprint(counter)")
    assert "10" in out.stdout.split()  # counter kept from the previous cell (7 + 3)
    after = run_folders(shell.cwd)
    assert len(after) == len(before) + 1
    new = next(iter(set(after) - set(before)))
    assert nvtx_count(new / "nsys_profile.sqlite", "optimizer_step") == 3
    assert shell.ns["second"].iterations.instances == 3
    assert nvtx_count(before[0] / "nsys_profile.sqlite", "optimizer_step") == 7  # untouched


def test_cell_that_raises_is_still_analysed_and_sidecar_lives(prepared):
    shell = prepared
    pid = shell.magics.session.sidecar.kernel_pid
    out = shell.cell("-o failed", "for i in range(4):\n    step(i)\nraise ValueError('boom')")
    assert "ValueError" in out.stderr and "boom" in out.stderr  # the traceback is shown
    assert (out.stdout + out.stderr).count("the cell raised") == 1  # the error shown once
    # the notebook cell fails (Run All stops), after the analysis of what ran was shown
    assert shell.failure == "jlprof: the cell raised ValueError: boom; the profile covers what ran"
    assert "profile ok" in out.stdout and out.outputs
    assert shell.ns["failed"].iterations.instances == 4
    assert shell.magics.session.sidecar.kernel_pid == pid
    assert shell.magics.session.sidecar.alive()


def test_sys_exit_and_big_output_leave_the_sidecar_running(prepared):
    """``sys.exit`` in a cell is an exception there (as in any kernel); 20 MB of output arrive."""
    shell = prepared
    pid = shell.magics.session.sidecar.kernel_pid
    out = shell.cell("-o exited", "for i in range(2):\n    step(i)\nimport sys\nsys.exit(3)")
    assert "SystemExit" in out.stderr and "3" in out.stderr
    assert shell.failure.startswith("jlprof: the cell raised SystemExit: 3")
    assert shell.ns["exited"].iterations.instances == 2
    out = shell.cell("--setup", "for _ in range(20):\n    print('x' * (1 << 20))")
    assert out.stdout.count("x") == 20 << 20
    assert shell.magics.session.sidecar.kernel_pid == pid and shell.magics.session.sidecar.alive()
    assert shell.failure is None
    shell.cell("--setup", "raise KeyError('k')")  # a failed setup cell fails too
    assert shell.failure == "jlprof: the setup cell raised KeyError: 'k'"


def test_interrupting_the_notebook_kernel_stops_capture_cleanly(prepared):
    shell = prepared
    pid = shell.magics.session.sidecar.kernel_pid
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
    # An interrupt that reached the sidecar before its cell started used to be lost (ipykernel
    # ignores SIGINT between requests) and this cell then ran forever; tests/sidecar's
    # test_an_interrupt_before_the_cell_starts_still_stops_it pins the fix. Should it come back,
    # the watchdog ends the run (as `%dlprof kernel restart` would) and fails instead of hanging.
    stuck = threading.Event()

    def rescue() -> None:
        stuck.set()
        os.kill(pid, signal.SIGKILL)

    watchdog = threading.Timer(90.0, rescue)
    timer.start()
    watchdog.start()
    try:
        out = shell.cell("-o stopped", "while True:\n    step(0)")
    finally:
        timer.cancel()
        watchdog.cancel()
    if stuck.is_set():
        shell.cell("--setup", SETUP)  # a fresh sidecar with the module's state for later tests
        pytest.fail("the sidecar did not stop on the interrupt (watchdog killed it after 90 s)")
    assert "KeyboardInterrupt" in out.stderr, (out.stdout[-2000:], out.stderr, shell.failure)
    assert shell.failure.startswith("jlprof: interrupted: the capture was stopped")
    prof = shell.ns["stopped"]
    db = Path(prof.trace.source)
    assert prof.iterations.instances == nvtx_count(db, "optimizer_step") > 10
    sidecar = shell.magics.session.sidecar
    assert sidecar.alive() and sidecar.kernel_pid == pid
    out = shell.cell("--setup", "print('still here', counter)")
    assert "still here 10" in out.stdout


def test_health_checks_name_the_problem(prepared):
    shell = prepared
    out = shell.cell("--key_node=no_such_op -o h1", "for i in range(2):\n    step(i)")
    assert "no key node instances" in out.stderr and "no_such_op" in out.stderr
    assert "Candidates" in out.stderr
    assert "using the default key node 'optimizer_step' instead" in out.stderr  # never silently
    out = shell.cell("-o h2", "x = sum(range(10000))")
    assert "no NVTX ranges in the capture" in out.stderr
    before = set(run_folders(shell.cwd))
    out = shell.cell("--delay 30 -o h3", "pass")
    assert "nothing was captured" in out.stderr and "--delay 30" in out.stderr
    [folder] = set(run_folders(shell.cwd)) - before
    manifest = json.loads((folder / "jlprof_run.json").read_text())
    assert manifest["status"] == "capture_empty" and manifest["database"] is None


def test_duration_stops_the_capture_not_the_cell(prepared):
    shell = prepared
    out = shell.cell(
        "--duration 1 -o timed",
        "t0, n = time.time(), 0\nwhile time.time() - t0 < 3:\n    step(0)\n    n += 1\n"
        "for _ in range(20):\n    step(0)\n    n += 1\nprint('ran', n)",
    )
    ran = int(out.stdout.split("ran ")[1].split()[0])
    prof = shell.ns["timed"]
    with sqlite3.connect(prof.trace.source) as con:
        [(start, end)], (captured,) = (
            con.execute(
                "SELECT e.start, e.end FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
                "WHERE s.value = 'jlprof_capture'"
            ).fetchall(),
            con.execute(
                "SELECT COUNT(*) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
                "WHERE s.value = 'optimizer_step' AND e.start <= (SELECT e2.end "
                "FROM NVTX_EVENTS e2 JOIN StringIds s2 ON s2.id = e2.textId "
                "WHERE s2.value = 'jlprof_capture')"
            ).fetchone(),
        )
    assert 1.0e9 <= end - start < 1.5e9  # the capture range lasted --duration
    assert prof.iterations.instances == captured  # nothing after the range's end is analysed
    # the cell ran on after the capture: at least the last 20 steps, 2 s after it ended (nsys
    # stalls NVTX calls while it flushes, ~2 s here, so the timed loop may add none)
    assert 0 < captured <= ran - 20


def test_output_path_keeps_files_unless_forced(prepared):
    shell = prepared
    shell.cell("--output_path=out --nsys_base_name=r1 -o o1", "step(0)")
    assert (shell.cwd / "out" / "r1.sqlite").exists() and (shell.cwd / "out" / "jlprof_run.json")
    shell.cell("--output_path=out --nsys_base_name=r1 -o o2", "step(0)")
    assert "already exists: pass -f true" in shell.failure
    assert "o2" not in shell.ns


def test_failed_analysis_keeps_the_raw_files(prepared, monkeypatch):
    from jlprof.magics import run

    def broken(*_a, **_k):
        raise ValueError("engine bug")

    monkeypatch.setattr(run, "analyse", broken)  # the engine cannot be made to fail for real
    shell = prepared
    shell.ns.pop("broken", None)
    before = set(run_folders(shell.cwd))
    out = shell.cell("-o broken", "step(0)")
    assert "analysis failed (ValueError: engine bug)" in out.stderr
    assert "%dlprof --database" in out.stderr and "broken" not in shell.ns
    [folder] = set(run_folders(shell.cwd)) - before
    assert (folder / "nsys_profile.nsys-rep").exists() and (folder / "nsys_profile.sqlite").exists()
    manifest = json.loads((folder / "jlprof_run.json").read_text())
    assert manifest["status"] == "analysis_failed" and "engine bug" in manifest["error"]
    assert manifest["database"] == "nsys_profile.sqlite"


def test_database_reanalysis_without_profiling(prepared):
    shell = prepared
    captures = shell.magics.session.sidecar.captures
    db = shell.ns["first_db"]
    shell.line(
        f"--database {db} --key_node=optimizer_step --iter_start 2 --iter_stop 4 "
        "--reports=summary,iteration --output_path=again -o re"
    )
    prof = shell.ns["re"]
    assert (prof.iter_start, prof.iter_stop) == (2, 4)
    assert prof.iterations.instances == nvtx_count(db, "optimizer_step")
    assert (shell.cwd / "again" / "dlprof_iteration.csv").exists()
    assert shell.magics.session.sidecar.captures == captures  # nothing profiled
    shell.line("--database nowhere.sqlite")
    assert "nowhere.sqlite: no such file" in shell.failure


def test_kernel_status_restart_shutdown(prepared):
    shell = prepared
    out = shell.line("kernel status")
    pid = shell.magics.session.sidecar.kernel_pid
    assert f"kernel pid {pid}" in out.stdout and "capture nvtx" in out.stdout
    assert "network: nsys runs in a private network namespace" in out.stdout or (
        "nsys's agent listens on" in out.stdout and "no option to bind it" in out.stdout
    )
    out = shell.line("kernel restart")
    assert "restarted" in out.stdout, out.stderr
    assert shell.magics.session.sidecar.kernel_pid != pid
    out = shell.cell("--setup", "print('counter' in globals())")
    assert "False" in out.stdout
    out = shell.line("kernel shutdown")
    assert "shut down" in out.stdout, out.stderr
    assert "not running" in shell.line("kernel status").stdout


def test_sidecar_death_is_reported_and_a_fresh_one_starts(shell, need_nsys):
    shell.cell("--setup", "import os\nkept = 1")
    old = shell.magics.session.sidecar
    before = set(run_folders(shell.cwd))
    shell.ns["notebook_var"] = 42
    out = shell.cell("-o dead", "os._exit(3)")
    assert "the sidecar kernel died" in shell.failure and "lost" in shell.failure
    assert shell.ns["notebook_var"] == 42  # this kernel is untouched
    assert not old.alive()
    [folder] = set(run_folders(shell.cwd)) - before
    manifest = json.loads((folder / "jlprof_run.json").read_text())
    assert manifest["status"] == "analysis_failed" and "died" in manifest["error"]
    # the capture open at the crash is kept (nsys writes it when the kernel exits), nothing else
    assert sorted(p.name for p in folder.iterdir()) == ["jlprof_run.json", "nsys_profile.qdstrm"]
    assert manifest["nsys_report"] == "nsys_profile.qdstrm"
    assert "%dlprof --database=" in shell.failure
    raw = folder / "nsys_profile.qdstrm"
    digest = hashlib.sha256(raw.read_bytes()).hexdigest()
    shell.line(f"--database={raw} -o after_crash")
    assert shell.ns["after_crash"].trace.source.name == "nsys_profile.sqlite"
    # QdstrmImporter rewrites what it imports (+29 bytes here): it got a copy
    assert hashlib.sha256(raw.read_bytes()).hexdigest() == digest
    assert not list(folder.glob(".*"))  # and the copy is gone
    out = shell.cell("--setup", "print('kept' in globals())")
    assert "previous sidecar kernel died" in out.stderr
    assert "False" in out.stdout
    assert "not running" not in shell.line("kernel status").stdout


def test_nsys_opts_that_break_capture_are_refused_before_starting(shell, need_nsys, tmp_path):
    shell.magics.session.shutdown()
    # a temp folder of this test's own: other pytest workers start sidecars meanwhile
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tempfile, "tempdir", str(tmp_path))
        out = shell.cell("--nsys_opts='--capture-range=none'", "print('never runs')")
    assert "conflicts with jlprof's own --capture-range" in shell.failure  # the cell fails
    assert "never runs" not in out.stdout and shell.magics.session.sidecar is None
    assert not list(tmp_path.glob("jlprof-sidecar-*"))  # nothing left
    out = shell.cell("--nsys_opts='--trace=nvtx,osrt --sample=none' -o opts", "step = 1")
    assert "profile ok" in out.stdout, out.stderr
    out = shell.cell("--nsys_opts='--trace=nvtx'", "pass")
    assert "already runs with --nsys_opts" in shell.failure and "kernel shutdown" in shell.failure


def test_missing_or_old_nsys_gives_the_install_hint(shell, tmp_path, monkeypatch):
    shell.magics.session.shutdown()
    monkeypatch.setenv("JLPROF_NSYS", str(tmp_path / "no-nsys"))
    out = shell.cell("", "print('never runs')")
    assert "install Nsight Systems" in shell.failure and "never runs" not in out.stdout
    old = tmp_path / "nsys"
    old.write_text("#!/bin/sh\necho 'NVIDIA Nsight Systems version 2020.3.1.72-9c4a5dd'\n")
    old.chmod(0o755)
    monkeypatch.setenv("JLPROF_NSYS", str(old))
    out = shell.cell("", "print('never runs')")
    assert "too old" in shell.failure and "install Nsight Systems" in shell.failure
    assert shell.magics.session.sidecar is None
