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
from jlprof.sidecar.process import remove_stale_folders

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


@pytest.fixture
def local_server():
    """An HTTP server of the notebook's side on 127.0.0.1 (the issue's first failure)."""
    import http.server

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello from the notebook's host")

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


FETCH = (
    "import urllib.request\n"
    "try:\n"
    "    got = urllib.request.urlopen('http://localhost:{port}/', timeout=10).read().decode()\n"
    "except OSError as exc:\n"
    "    got = f'failed: {{exc}}'\n"
    "print(got)"
)


def run_text(car: Sidecar, code: str, **kw) -> tuple[str, list[dict]]:
    """What ``code`` printed in the sidecar (every stream message) and all its iopub messages."""
    msgs: list[dict] = []
    res = car.execute(code, on_message=msgs.append, **kw)
    assert res.status == "ok", (res.ename, res.evalue)
    out = "".join(m["content"]["text"] for m in msgs if m["header"]["msg_type"] == "stream")
    return out, msgs


def test_the_profiled_code_has_the_notebooks_network(pair, local_server):
    """By default the sidecar shares the notebook's network: a server on the host's 127.0.0.1,
    found through a name lookup ('localhost'), answers; nsys's agent port is then named."""
    from jlprof.magics.dlprof import network_line

    car = pair[0]
    out, _ = run_text(car, FETCH.format(port=local_server))
    assert out == "hello from the notebook's host\n"
    st = car.status()
    assert not st["private_network"]
    wide = [(a, port, name) for a, port, _pid, name in st["listeners"] if a == "0.0.0.0"]
    assert wide and all(name == "nsys" for _a, _p, name in wide), st["listeners"]
    if shutil.which("ss") is not None:  # what the user ran sees the same port
        assert any(f"0.0.0.0:{wide[0][1]}" in line for line in nsys_ports_seen_by_ss(car))
    line = network_line(st)
    assert line.startswith("network: the notebook's;")
    assert f"nsys's agent listens on 0.0.0.0:{wide[0][1]}" in line
    assert "no option to bind it to loopback" in line and "--isolate_network=true" in line


@pytest.mark.skipif(shutil.which("ss") is None, reason="ss (iproute2) is not installed")
def test_isolate_network_hides_the_agent_and_cuts_the_code_off(tmp_path, local_server):
    """--isolate_network: nsys's agent port is reachable from nowhere, and, as its note says,
    the profiled code has no network (the host's 127.0.0.1 is not its loopback)."""
    if shutil.which("nsys") is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH")
    if not netns.available():
        pytest.skip("this system refuses unprivileged network namespaces")
    car = Sidecar(cwd=tmp_path, isolate_network=True)
    car.start()
    try:
        assert car.private_network and car.status()["listeners"] == []
        assert nsys_ports_seen_by_ss(car) == []
        out, _ = run_text(car, FETCH.format(port=local_server))
        assert out.startswith("failed:") and "Connection refused" in out, out
    finally:
        car.shutdown()


def test_isolate_network_where_namespaces_are_refused_says_so(tmp_path, monkeypatch):
    if shutil.which("nsys") is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH")
    from jlprof.sidecar.process import NoPrivateNetwork

    monkeypatch.setattr(netns, "available", lambda python=None: False)
    car = Sidecar(cwd=tmp_path, isolate_network=True)
    with pytest.raises(NoPrivateNetwork, match="refuses unprivileged user and network"):
        car.start()
    assert car.dir is None and car.proc is None  # nothing left behind


def test_the_working_folder_and_environment_are_the_notebooks(pair):
    """The sidecar's os.getcwd() and os.environ are the notebook's, but for what nsys itself
    adds to inject its libraries (LD_PRELOAD, its injection's variables) and what ipykernel
    sets in any kernel."""
    car = pair[0]
    got = car.execute(
        "pass",
        user_expressions={"e": "(__import__('os').getcwd(), dict(__import__('os').environ))"},
    ).expression("e")
    cwd, env = eval(got)  # the repr of a str and a dict
    assert cwd == str(car.cwd)
    ours = dict(os.environ)
    changed = {k for k in env.keys() & ours.keys() if env[k] != ours[k]}
    added = env.keys() - ours.keys()
    removed = ours.keys() - env.keys()
    # ipykernel's own shell sets these in every kernel (TERM=xterm-color, PAGER=cat, ...);
    # pytest's marker names the test that runs, which changed since the sidecar started
    kernel_own = {"TERM", "CLICOLOR", "PAGER", "GIT_PAGER", "MPLBACKEND", "PYTEST_CURRENT_TEST"}
    assert removed == set(), removed
    assert changed <= {"LD_PRELOAD", *kernel_own}, changed
    # nsys adds its injection's variables (QUADD_*, NVTX_INJECTION64_PATH, ...); jlprof nothing
    ours_added = [k for k in added if k.startswith(("JLPROF", "_STDBUF", "PYTHONUNBUFFERED"))]
    assert ours_added == [] and env.get("TMPDIR") == ours.get("TMPDIR"), ours_added


def test_child_processes_output_reaches_the_cell(pair):
    """subprocess, multiprocessing fork workers and raw fd writes are captured at the file
    descriptors / through the fork pipe (an IPC socket: still no TCP port, see above)."""
    car = pair[1]
    code = (
        "import multiprocessing as mp, os, subprocess, sys\n"
        "subprocess.run(['echo', 'from echo'], check=True)\n"
        "os.write(1, b'raw fd 1\\n')\n"
        "os.write(2, b'raw fd 2\\n')\n"
        "def work(i):\n"
        "    print(f'fork worker {i}', flush=True)\n"
        "for i in range(2):\n"
        "    p = mp.get_context('fork').Process(target=work, args=(i,))\n"
        "    p.start(); p.join()\n"
        "sys.stdout.flush()\n"
    )
    out, msgs = run_text(car, code)
    lines = out.splitlines()
    for want in ("from echo", "raw fd 1", "raw fd 2", "fork worker 0", "fork worker 1"):
        assert want in lines, (want, out)
    streams = {m["content"]["name"] for m in msgs if m["header"]["msg_type"] == "stream"}
    assert streams == {"stdout", "stderr"}
    kernel = psutil.Process(car.kernel_pid)
    assert [c for c in kernel.net_connections(kind="inet") if c.status == "LISTEN"] == []
    assert (car.dir / "pipe").is_socket()


def test_widgets_comm_messages_are_passed_on(pair):
    """tqdm.auto in the sidecar makes ipywidgets models: their comm_open/comm_msg messages
    come with the cell's output, for the notebook to publish to its frontend."""
    pytest.importorskip("ipywidgets")
    pytest.importorskip("tqdm")
    _out, msgs = run_text(pair[1], "from tqdm.auto import tqdm\nfor _ in tqdm(range(3)): pass")
    kinds = [m["header"]["msg_type"] for m in msgs]
    opened = {m["content"]["comm_id"] for m in msgs if m["header"]["msg_type"] == "comm_open"}
    views = [
        m["content"]["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
        for m in msgs
        if m["header"]["msg_type"] == "display_data"
        and "application/vnd.jupyter.widget-view+json" in m["content"]["data"]
    ]
    assert views and set(views) <= opened, kinds
    assert "comm_msg" in kinds  # the bar's updates


def test_input_is_answered_by_the_notebook_or_refused_as_in_a_plain_kernel(pair):
    car = pair[1]
    asked: list[tuple[str, bool]] = []

    def answer(prompt: str, password: bool) -> str:
        asked.append((prompt, password))
        return "forty-two"

    out, _ = run_text(car, "print('got', input('your answer? '))", on_input=answer)
    assert out == "got forty-two\n" and asked == [("your answer? ", False)]
    res = car.execute("input('x')")  # a frontend without input, as nbclient's
    assert res.status == "error" and res.ename == "StdinNotImplementedError"
    assert "frontend does not support input requests" in res.evalue


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


def test_the_capture_range_does_not_use_the_users_nvtx(tmp_path, monkeypatch):
    """An nvtx package that records nothing (as 0.2.17 under nsys 2022.4; here a stand-in
    first on the path) leaves jlprof's own range working, and the sidecar says at start that
    the user's ranges will not be recorded, with the fix."""
    if shutil.which("nsys") is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH")
    fake = tmp_path / "site"
    (fake / "nvtx").mkdir(parents=True)
    (fake / "nvtx" / "__init__.py").write_text(
        "def push_range(*a, **k): pass\ndef pop_range(*a, **k): pass\n"
        "class annotate:\n    def __init__(self, *a, **k): pass\n"
        "    def __enter__(self): return self\n    def __exit__(self, *a): pass\n"
    )
    dist = fake / "nvtx-0.2.17.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: nvtx\nVersion: 0.2.17\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake), *sys.path]))
    car = Sidecar(cwd=tmp_path)
    car.start()
    try:
        where = car.execute("import nvtx", user_expressions={"f": "nvtx.__file__"}).expression("f")
        assert str(fake) in where
        raw = capture(car, "import time\ntime.sleep(0.2)")
        copy = tmp_path / raw.name
        shutil.copyfile(raw, copy)
        with sqlite3.connect(nsys.ensure_sqlite(copy)) as con:
            rows = con.execute(
                "SELECT s.value, d.text, e.end - e.start FROM NVTX_EVENTS e "
                "JOIN StringIds s ON s.id = e.textId JOIN NVTX_EVENTS d "
                "ON d.eventType = 75 AND d.domainId = e.domainId WHERE e.eventType = 59"
            ).fetchall()
        # jlprof's range (push/pop, registered name) in its domain, around the 0.2 s cell
        [(name, domain, ns)] = rows
        assert (name, domain) == ("jlprof_capture", "jlprof") and ns >= 200_000_000
        version = nsys.find_nsys().version[:2]
        if version <= (2022, 4):
            (note,) = car.notes
            assert "records no NVTX ranges of the nvtx package 0.2.17" in note
            assert "pip install 'nvtx==0.2.10'" in note
    finally:
        car.shutdown()


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
