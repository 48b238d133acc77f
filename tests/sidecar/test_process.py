"""The sidecar kernel under the real nsys: private IPC, one report per capture, isolation."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from jlprof import nsys
from jlprof.sidecar import Sidecar, SidecarBusy, netns
from jlprof.sidecar.capture import NVTX_CAPTURE
from jlprof.sidecar.process import NETNS_ENV, remove_stale_folders

pytestmark = [pytest.mark.nsys, pytest.mark.slow]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Two sidecars at once, as two notebooks profiling side by side would have."""
    if shutil.which("nsys") is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH")
    cars = [Sidecar(cwd=tmp_path_factory.mktemp(f"nb{i}")) for i in range(2)]
    try:
        for car in cars:
            car.start()
        yield cars
    finally:
        for car in cars:
            car.shutdown()


def capture(car: Sidecar, code: str) -> Path:
    car.drain_lines()
    assert car.execute("_jlprof_capture.CAPTURE.begin('nvtx')", silent=True).status == "ok"
    assert car.execute(code).status == "ok"
    end = car.execute("pass", silent=True, user_expressions={"r": "_jlprof_capture.CAPTURE.end()"})
    assert "'captured': True" in end.expression("r")
    raw = car.wait_for_capture()
    assert raw is not None
    return raw


def test_reachable_only_by_this_user(pair):
    car = pair[0]
    mode = stat.S_IMODE(car.dir.stat().st_mode)
    assert mode & 0o777 == 0o700  # (jupyter_client adds the sticky bit against tmp cleaners)
    conn = json.loads((car.dir / "kernel.json").read_text())
    assert conn["transport"] == "ipc" and conn["ip"].startswith(str(car.dir))
    assert len(conn["key"]) >= 32  # messages are signed
    assert stat.S_IMODE((car.dir / "kernel.json").stat().st_mode) & 0o077 == 0
    kernel = psutil.Process(car.kernel_pid)
    listening = [c for c in kernel.net_connections(kind="inet") if c.status == "LISTEN"]
    assert listening == []  # no TCP port (nsys's own agent link is an outgoing connection)
    sockets = [p for p in car.dir.iterdir() if p.is_socket()]
    assert sockets, "the kernel's IPC sockets live in the private folder"
    # the kernel runs under nsys, with jlprof's capture range configured
    args = psutil.Process(car.proc.pid).cmdline()
    assert any(a.endswith("nsys") for a in args)
    assert f"--nvtx-capture={NVTX_CAPTURE}" in args and "--capture-range-end=repeat" in args
    env = car.execute(
        "pass",
        user_expressions={
            "e": "(__import__('tempfile').gettempdir(), "
            "__import__('os').environ.get('LD_PRELOAD', ''))"
        },
    ).expression("e")
    assert str(car.dir) not in env  # the user's TMPDIR is back (nsys's temp files stay private)
    assert "libstdbuf" not in env


def nsys_ports_seen_by_ss(car: Sidecar) -> list[str]:
    """``ss -ltnp`` lines (what the issue's user ran) of the sidecar's processes, any address."""
    pids = {p.pid for p in netns.session_processes([car.proc.pid])}
    assert len(pids) >= 3  # nsys, its launcher, its agent
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if any(f"pid={pid}," in line for pid in pids)]


@pytest.mark.skipif(shutil.which("ss") is None, reason="ss (iproute2) is not installed")
def test_no_listener_reachable_from_the_network(pair):
    """nsys's agent listens on 0.0.0.0; in the private namespace nobody outside sees that port."""
    car = pair[0]
    if not netns.available():
        pytest.skip("this system refuses unprivileged network namespaces")
    assert car.private_network and car.status()["listeners"] == []
    assert nsys_ports_seen_by_ss(car) == []


@pytest.mark.skipif(shutil.which("ss") is None, reason="ss (iproute2) is not installed")
def test_without_the_namespace_the_agent_port_is_named(tmp_path, monkeypatch):
    """The evidence for nsys's own limit, and what ``%dlprof kernel status`` then says."""
    if shutil.which("nsys") is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH")
    from jlprof.magics.dlprof import network_line

    monkeypatch.setenv(NETNS_ENV, "0")
    car = Sidecar(cwd=tmp_path)
    car.start()
    try:
        st = car.status()
        assert not st["private_network"]
        wide = [(a, port, name) for a, port, _pid, name in st["listeners"] if a == "0.0.0.0"]
        assert wide and all(name == "nsys" for _a, _p, name in wide), st["listeners"]
        assert any(f"0.0.0.0:{wide[0][1]}" in line for line in nsys_ports_seen_by_ss(car))
        line = network_line(st)
        assert f"nsys's agent listens on 0.0.0.0:{wide[0][1]}" in line
        assert "no option to bind it to loopback" in line
    finally:
        car.shutdown()


def test_two_sidecars_capture_their_own_cells_at_once(pair):
    raws: dict[int, Path] = {}

    def work(i: int) -> None:
        code = f"import nvtx\nfor k in range({3 + i}):\n    with nvtx.annotate('mine_{i}'): pass"
        raws[i] = capture(pair[i], code)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert set(raws) == {0, 1} and raws[0] != raws[1]
    assert raws[0].is_relative_to(pair[0].dir) and raws[1].is_relative_to(pair[1].dir)
    for i, raw in raws.items():
        copy = pair[i].cwd / raw.name
        shutil.copyfile(raw, copy)
        db = nsys.ensure_sqlite(copy)
        with sqlite3.connect(db) as con:
            rows = dict(
                con.execute(
                    "SELECT s.value, COUNT(*) FROM NVTX_EVENTS e JOIN StringIds s "
                    "ON s.id = e.textId WHERE e.eventType = 59 GROUP BY s.value"
                ).fetchall()
            )
        assert rows.get(f"mine_{i}") == 3 + i and f"mine_{1 - i}" not in rows


def test_each_capture_is_a_new_report(pair):
    car = pair[0]
    first = capture(car, "x = 1")
    second = capture(car, "x = 2")
    assert first != second and first.exists() and second.exists()
    assert car.captures >= 2


def test_shutdown_removes_the_private_folder(tmp_path):
    if shutil.which("nsys") is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH")
    car = Sidecar(cwd=tmp_path)
    car.start()
    folder, nsys_proc = car.dir, car.proc
    car.shutdown()
    assert not folder.exists() and nsys_proc.poll() is not None
    assert not car.alive()
    car.shutdown()  # twice is fine


def test_sidecar_ends_when_its_notebook_kernel_is_killed(tmp_path):
    """A notebook kernel killed with -9 runs no clean-up: the sidecar must notice by itself."""
    if shutil.which("nsys") is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH")
    owner = subprocess.Popen(
        [sys.executable, "-c",
         "import time\nfrom jlprof.sidecar import Sidecar\ns = Sidecar()\ns.start()\n"
         "print(s.kernel_pid, s.proc.pid, s.dir, flush=True)\ntime.sleep(300)"],
        cwd=tmp_path, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        kernel_pid, nsys_pid, folder = owner.stdout.readline().split()
        assert psutil.pid_exists(int(kernel_pid)) and psutil.pid_exists(int(nsys_pid))
    finally:
        owner.kill()
        owner.wait()
    # the sidecar notices within a second; nsys then writes its report before it exits,
    # which took over a minute when two test suites shared the two cores (2026-11-27)
    deadline = time.monotonic() + 240
    gone = False
    while time.monotonic() < deadline and not gone:
        gone = not any(_running(int(pid)) for pid in (kernel_pid, nsys_pid))
        time.sleep(0.5)
    assert gone, "the orphaned sidecar (or its nsys) is still running"
    assert Path(folder).is_dir()  # nobody cleaned up (the HMAC key is still in there) ...
    assert Path(folder) in remove_stale_folders(Path(folder).parent)  # ... until the next start
    assert not Path(folder).exists()


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_range_that_never_started_is_reported_quickly(pair):
    """As with an NVTX library that records nothing under this nsys: no capture, no long wait."""
    car = pair[1]
    car.drain_lines()
    assert car.execute("import nvtx\nwith nvtx.annotate('not_jlprofs_range'): pass").status == "ok"
    t0 = time.monotonic()
    assert car.wait_for_capture(timeout=60) is None
    assert time.monotonic() - t0 < 10


def test_output_arrives_while_the_cell_runs(pair):
    car = pair[0]
    seen: list[tuple[float, str]] = []

    def on_message(msg):
        if msg["header"]["msg_type"] == "stream":
            seen.append((time.monotonic(), msg["content"]["text"]))

    t0 = time.monotonic()
    res = car.execute(
        "import time\nprint('first', flush=True)\ntime.sleep(1.5)\nprint('second')",
        on_message=on_message,
    )
    done = time.monotonic()
    assert res.status == "ok"
    first = next(t for t, text in seen if "first" in text)
    assert first - t0 < 1.0 and done - first >= 1.4  # streamed, not delivered at the end


def test_a_cell_that_ignores_interrupts_gives_the_notebook_back(tmp_path):
    """Ctrl-C twice is passed on; the third gives up waiting with the way out in the message."""
    if shutil.which("nsys") is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH")
    car = Sidecar(cwd=tmp_path)
    car.start()
    try:
        timers = [threading.Timer(1.0 + 0.5 * k, os.kill, (os.getpid(), signal.SIGINT))
                  for k in range(3)]  # fmt: skip
        for timer in timers:
            timer.start()
        t0 = time.monotonic()
        with pytest.raises(SidecarBusy, match="kernel restart"):
            car.execute(
                "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)"
            )
        assert time.monotonic() - t0 < 10
    finally:
        for timer in timers:
            timer.cancel()
        t0 = time.monotonic()
        car.shutdown(kernel_grace=2)  # the stuck kernel is killed, nsys then exits by itself
        assert time.monotonic() - t0 < 15
    assert not car.alive() and car.proc.returncode is not None


def test_an_interrupt_before_the_cell_starts_still_stops_it(pair):
    """ipykernel ignores SIGINT until a request starts: an early Ctrl-C must not be lost.

    A request queued ahead keeps the kernel busy, so the Ctrl-C arrives while ours waits its turn
    (as when the notebook is interrupted while the sidecar is still busy with jlprof's own code).
    """
    car = pair[1]
    car.client.execute("import time\ntime.sleep(1.5)", silent=True)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    rescue = threading.Timer(20.0, os.kill, (os.getpid(), signal.SIGINT))  # a second Ctrl-C
    timer.start()
    rescue.start()
    t0 = time.monotonic()
    try:
        res = car.execute("import time\nwhile True:\n    time.sleep(0.01)")
    finally:
        timer.cancel()
        rescue.cancel()
    assert res.interrupted and res.ename == "KeyboardInterrupt"
    assert time.monotonic() - t0 < 10  # stopped by the first Ctrl-C, not the rescue's second
    assert car.execute("print('alive')").status == "ok"
