"""nsys sessions (in-place mode): launch once, start/stop captures, timeouts and recovery."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jlprof import nsys
from jlprof.nsys import session as ns
from jlprof.nsys import tool

HANG = textwrap.dedent(
    """\
    #!/bin/sh
    # a stand-in nsys: 'stop' hangs as the real one once did; the rest log and return
    echo "$@" >> "$(dirname "$0")/calls.log"
    case "$1" in
      stop) exec sleep 60 ;;
      sessions) echo "ID TIME STATE LAUNCH NAME"; echo "1 00:01 Collection 1 jlprof-k" ;;
    esac
    exit 0
    """
)


def _fake_nsys(tmp_path: Path) -> Path:
    path = tmp_path / "nsys"
    path.write_text(HANG)
    path.chmod(0o755)
    return path


def test_session_name_is_valid_for_nsys() -> None:
    name = ns.session_name("3f2a-b c/9")
    assert name == "jlprof-3f2a-b-c-9"
    assert ns.launch_argv("nsys", name, ["--trace=nvtx"], ["python", "x.py"]) == [
        "nsys",
        "launch",
        "--session-new=jlprof-3f2a-b-c-9",
        "--trace=nvtx",
        "python",
        "x.py",
    ]
    with pytest.raises(ValueError):
        ns.launch_argv("nsys", "9bad name", [], ["python"])


def test_stop_that_hangs_is_bounded_and_ends_the_agent(tmp_path: Path) -> None:
    """A stop past its timeout: cancel, shutdown, then the agent (found by its argv) is killed."""
    fake = _fake_nsys(tmp_path)
    agent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(60)",
            "--start-agent",
            "--session-name=jlprof-k",
        ]
    )
    try:
        deadline = time.monotonic() + 10
        while ns.agent_pids("jlprof-k") != [agent.pid] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ns.agent_pids("jlprof-k") == [agent.pid]
        sess = ns.Session("jlprof-k", nsys=str(fake), timeout_s=1.0)
        t0 = time.monotonic()
        with pytest.raises(ns.NsysTimeout) as err:
            sess.stop()
        assert time.monotonic() - t0 < 10
        msg = str(err.value)
        assert "nsys stop did not return within 1 s" in msg
        assert f"agent pid {agent.pid} sent SIGTERM" in msg
        assert "run %dlprof enable" in msg
        assert agent.wait(5) != 0  # ended by the signal
        calls = (tmp_path / "calls.log").read_text().splitlines()
        assert [c.split()[0] for c in calls] == ["stop", "cancel", "sessions", "shutdown"]
        assert "--kill=none" in calls[-1]
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def test_missing_session_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ns.SESSION_ENV, raising=False)
    assert ns.Session.from_env() is None
    monkeypatch.setenv(ns.SESSION_ENV, "jlprof-x")
    monkeypatch.setenv(ns.NSYS_ENV, "/opt/nsys")
    assert ns.Session.from_env() == ns.Session("jlprof-x", nsys="/opt/nsys")


def test_old_nsys_gets_one_line_naming_the_version() -> None:
    old = nsys.NsysInfo(Path("/x/nsys"), (2019, 5), "2019.5.1")
    line = ns.version_line(old)
    assert (
        line is not None and "needs nsys 2020.1 or later" in line and "this is nsys 2019.5" in line
    )
    assert "\n" not in line
    assert ns.version_line(nsys.NsysInfo(Path("/x/nsys"), (2022, 4, 2, 1), "")) is None


LOOP = textwrap.dedent(
    """\
    import sys, time, nvtx
    print("ready", flush=True)
    n = 0
    for line in sys.stdin:
        for _ in range(int(line)):
            with nvtx.annotate("step", domain="user"):
                sum(range(1000))
        n += 1
        print("did", n, flush=True)
    """
)


@pytest.mark.nsys
@pytest.mark.slow
def test_real_nsys_three_captures_from_one_launched_process(tmp_path: Path) -> None:
    """One process under ``nsys launch``; three start/stop rounds give three reports, each
    holding exactly the NVTX ranges run between its start and stop."""
    if shutil.which("nsys") is None:
        pytest.skip("nsys is not on PATH")
    info = nsys.find_nsys()
    name = ns.session_name(f"test-{time.time_ns()}")
    (tmp_path / "loop.py").write_text(LOOP)
    argv = ns.launch_argv(
        info.path, name, ["--trace=nvtx", "--show-output=true"], [sys.executable, "loop.py"]
    )
    proc = subprocess.Popen(
        argv,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    sess = ns.Session(name, nsys=str(info.path), timeout_s=60)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert "ready" in proc.stdout.readline()
        assert sess.state() == "Launched"
        counts = [3, 5, 7]
        for k, n in enumerate(counts):
            out = tmp_path / f"cap{k}"
            sess.start(out)
            proc.stdin.write(f"{n}\n")
            proc.stdin.flush()
            while "did" not in proc.stdout.readline():
                pass
            raw = sess.stop(out)
            assert raw is not None and raw.exists(), raw
            db = nsys.ensure_sqlite(raw)
            with sqlite3.connect(db) as con:
                (got,) = con.execute(
                    "SELECT count(*) FROM NVTX_EVENTS e JOIN StringIds s ON e.textId = s.id "
                    "WHERE s.value = 'step'"
                ).fetchone()
            assert got == n
        assert sess.state() == "Launched"
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            sess.recover()
            proc.kill()
    assert ns.agent_pids(name) == [] or sess.state() in (None, "Shutdown")


def test_start_lock_admits_one_nsys_start_at_a_time(tmp_path: Path, monkeypatch) -> None:
    """nsys 2022.4 hangs when two sessions start at the same instant: jlprof's starts take a
    per-user lock that another process cannot take while it is held."""
    monkeypatch.setattr(tool, "LOCK_DIR", str(tmp_path))
    take = (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
        "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)"
    )
    with nsys.start_lock():
        (lock,) = tmp_path.glob("jlprof-nsys-start-*.lock")
        assert oct(lock.stat().st_mode & 0o777) == "0o600"
        held = subprocess.run([sys.executable, "-c", take, str(lock)], capture_output=True)
        assert held.returncode != 0 and b"BlockingIOError" in held.stderr
    free = subprocess.run([sys.executable, "-c", take, str(lock)], capture_output=True)
    assert free.returncode == 0, free.stderr


TAKE = (
    "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
    "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)"
)


def _free(lock: Path) -> bool:
    got = subprocess.run([sys.executable, "-c", TAKE, str(lock)], capture_output=True)
    assert got.returncode == 0 or b"BlockingIOError" in got.stderr, got.stderr
    return got.returncode == 0


def test_an_nsys_profile_start_keeps_the_lock_a_while_then_runs_unlocked(
    tmp_path: Path, monkeypatch
) -> None:
    """``nsys profile`` (jlprof's CLI, ``%%dlprof`` runs of a script) starts inside
    :func:`tool.start_window`: no other start for ``settle_s``, then the run goes on unlocked."""
    monkeypatch.setattr(tool, "LOCK_DIR", str(tmp_path))
    with tool.start_window(settle_s=1.5):
        proc = subprocess.Popen(["sleep", "6"])
    (lock,) = tmp_path.glob("jlprof-nsys-start-*.lock")
    try:
        assert not _free(lock)
        deadline = time.monotonic() + 5
        while not _free(lock):
            assert time.monotonic() < deadline, "the start lock was never let go"
            time.sleep(0.1)
        assert proc.poll() is None  # released while the session still runs
    finally:
        proc.kill()


def test_the_in_place_launch_keeps_the_lock_through_its_exec(tmp_path: Path) -> None:
    """The in-place launcher becomes ``nsys launch`` by exec: a detached process keeps the
    lock ``settle_s`` after it, then the launched program runs unlocked."""
    code = (
        "import os, sys; from jlprof.nsys import tool; tool.LOCK_DIR = sys.argv[1]; "
        "tool.lock_through_exec(1.5); os.execvp('sleep', ['sleep', '6'])"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)])
    try:
        deadline = time.monotonic() + 10
        while not list(tmp_path.glob("jlprof-nsys-start-*.lock")):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        (lock,) = tmp_path.glob("jlprof-nsys-start-*.lock")
        while _free(lock):  # opened, then taken
            assert time.monotonic() < deadline, "the start lock was never taken"
            time.sleep(0.05)
        while not _free(lock):
            assert time.monotonic() < deadline, "the start lock was never let go"
            time.sleep(0.1)
        assert proc.poll() is None  # the exec'd program still runs
    finally:
        proc.kill()


def test_an_in_place_capture_starts_inside_the_start_window(tmp_path: Path, monkeypatch) -> None:
    """``nsys start`` (each in-place capture) takes the start lock as every other start does,
    and lets it go a while after: no other nsys session starts at the same instant."""
    monkeypatch.setattr(tool, "LOCK_DIR", str(tmp_path))
    seen: list[bool] = []

    def started(self, args, timeout, what):
        (lock,) = tmp_path.glob("jlprof-nsys-start-*.lock")
        seen.append(_free(lock))
        return []

    monkeypatch.setattr(ns.Session, "_guarded", started)
    ns.Session(name="jlprof-x").start(tmp_path / "out")
    assert seen == [False]  # nsys start ran with the lock held
    (lock,) = tmp_path.glob("jlprof-nsys-start-*.lock")
    deadline = time.monotonic() + 5
    while not _free(lock):
        assert time.monotonic() < deadline, "the start lock was never let go"
        time.sleep(0.1)


def test_a_failed_start_names_the_nsys_agents_running(tmp_path: Path) -> None:
    """An agent left by a failed nsys 2022.4 start fails every later start with "End of file":
    the error names this user's running agents (pid, session) and how to end them."""
    proc = tmp_path / "proc"
    argvs = {
        "101": ["/opt/nsys", "--start-agent", "--session-name=jlprof-k1"],
        "102": ["/opt/nsys", "--start-agent"],
        "103": ["python", "train.py"],
        "self": ["x"],
    }
    for pid, argv in argvs.items():
        (proc / pid).mkdir(parents=True)
        (proc / pid / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    assert ns.running_agents(proc) == [(101, "jlprof-k1"), (102, "")]
    hint = ns.agents_hint(proc)
    assert "101 (session jlprof-k1), 102." in hint and "kill PID" in hint
    assert ns.agents_hint(tmp_path / "empty") == ""
    # the real /proc: this test's own process is no agent
    assert all(pid != os.getpid() for pid, _ in ns.running_agents())


def test_nsys_profile_that_writes_nothing_names_the_agents(tmp_path: Path, monkeypatch) -> None:
    """The CLI's and the magic's nsys runs carry the hint in their error."""
    from jlprof.nsys import run as nsys_run

    fake = tmp_path / "nsys"
    fake.write_text("#!/bin/sh\necho 'End of file'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(ns, "running_agents", lambda proc=None: [(4242, "stale")])
    monkeypatch.setattr(tool, "LOCK_DIR", str(tmp_path))
    argv = [str(fake), "profile", "-o", str(tmp_path / "out"), "python", "-c", "pass"]
    with pytest.raises(nsys.NsysFailed) as err:
        nsys_run.run_profile(argv, on_output=lambda _line: None)
    assert "End of file" in str(err.value) and "4242 (session stale)" in str(err.value)
