"""In-place mode: the notebook's own kernel under ``nsys launch`` (kernelspec ``jlprof-inplace``).

The notebook ``notebooks/inplace/inplace.ipynb`` is re-run by nbval on that kernel; its profile
of an NVTX loop is compared with the sidecar's profile of the same loop. ``plain_inplace.ipynb``
repeats ``notebooks/plain_kernel.ipynb``'s checks (network, child processes, widgets, gloo) in
``%%dlprof`` cells run in place.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jlprof import runs
from jlprof.magics import inplace, run
from jlprof.magics.options import RunOptions
from jlprof.nsys import session as nsys_session
from jlprof.sidecar import inplace as launcher

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "inplace" / "inplace.ipynb"
PLAIN_NOTEBOOK = NOTEBOOK.with_name("plain_inplace.ipynb")

SETUP = (
    "import time\nimport nvtx\nsteps = 5\n"
    "def step():\n"
    '    with nvtx.annotate("train_step"), nvtx.annotate("optimizer_step"):\n'
    "        time.sleep(0.002)"
)
LOOP = 'for i in range(steps):\n    step()\nprint("steps", i + 1)'


def test_launcher_wraps_the_kernel_in_nsys_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        "jlprof.nsys.locate.find_nsys",
        lambda: __import__("jlprof").nsys.NsysInfo(Path("/n/nsys"), (2022, 4, 2), "2022.4.2"),
    )
    env = {launcher.OPTS_ENV: "--cuda-memory-usage=true", "PYTEST_CURRENT_TEST": "t (call)"}
    argv = launcher.command(["-f", "/run/kernel-ab12.json"], env)
    assert "PYTEST_CURRENT_TEST" not in env  # ipykernel would not capture fd output
    assert argv == [
        "/n/nsys",
        "launch",
        "--session-new=jlprof-ab12",
        "--trace=cuda,nvtx,osrt",
        "--cuda-memory-usage=true",
        sys.executable,
        "-m",
        "ipykernel_launcher",
        "-f",
        "/run/kernel-ab12.json",
    ]
    assert env[nsys_session.SESSION_ENV] == "jlprof-ab12"
    assert env[nsys_session.NSYS_ENV] == "/n/nsys"
    assert env["NSYS_NVTX_PROFILER_REGISTER_ONLY"] == "0"
    # the provisioner's form: its own command after --, the user's trace kept
    env = {launcher.OPTS_ENV: "-t nvtx"}
    argv = launcher.command(
        ["--", "/py", "-m", "ipykernel_launcher", "-f", "/r/kernel-9.json"], env
    )
    assert argv[:5] == ["/n/nsys", "launch", "--session-new=jlprof-9", "-t", "nvtx"]


def test_launcher_starts_a_plain_kernel_that_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {launcher.OPTS_ENV: "--capture-range-end=repeat", nsys_session.SESSION_ENV: "old"}
    argv = launcher.command(["-f", "/r/kernel-1.json"], env)
    assert argv == [sys.executable, "-m", "ipykernel_launcher", "-f", "/r/kernel-1.json"]
    assert nsys_session.SESSION_ENV not in env
    assert "is an option of nsys start, not nsys launch" in env[launcher.ERROR_ENV]


def test_commands_outside_in_place_say_how(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(nsys_session.SESSION_ENV, raising=False)
    monkeypatch.delenv(inplace.PROVISIONER_ENV, raising=False)
    monkeypatch.delenv(launcher.ERROR_ENV, raising=False)
    assert inplace.split_command("enable -t cuda,nvtx") == ("enable", "-t cuda,nvtx")
    assert inplace.split_command("kernel status") is None
    with pytest.raises(Exception, match=r"needs jlprof's server extension.*jlprof-inplace"):
        inplace.restart_with(True, "", print)
    with pytest.raises(Exception, match=r"does not run under nsys.*jlprof-inplace"):
        inplace.InPlace().start(RunOptions(), print)


def test_options_that_cannot_apply_in_place_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(nsys_session.SESSION_ENV, "jlprof-x")
    place = inplace.InPlace()
    with pytest.raises(Exception, match=r"--delay/--duration are not available in place"):
        place.start(RunOptions(duration=2.0), print)
    with pytest.raises(Exception, match=r"give them to %dlprof enable"):
        place.start(RunOptions(nsys_opts="-t nvtx", nsys_opts_given=True), print)
    assert place.current is None


def _nbval(notebook: Path, tmp: Path) -> subprocess.CompletedProcess:
    """The stored notebook re-run by nbval on the jlprof-inplace kernel, in ``tmp``."""
    shutil.copy(notebook, tmp / notebook.name)
    env = {
        **os.environ,
        "JUPYTER_PATH": str(ROOT / "jupyter-config"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
         "--nbval-kernel-name", "jlprof-inplace", "--nbval-sanitize-with",
         str(ROOT / "notebooks" / "sanitize.cfg"), notebook.name],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=500,
    )  # fmt: skip
    return proc


def _assert_passed_with_good_runs(
    proc: subprocess.CompletedProcess, passed: str, folder: Path, n_runs: int
) -> None:
    """nbval passed every cell; the notebook left ``n_runs`` run folders, each a good profile."""
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert passed in proc.stdout
    folders = runs.list_runs(folder)
    assert len(folders) == n_runs, folders
    for run_folder in folders:
        assert runs.read_manifest(run_folder)["status"] == "ok"
        assert (run_folder / "nsys_profile.sqlite").exists()


@contextlib.contextmanager
def _inplace_kernel(monkeypatch: pytest.MonkeyPatch, cwd: Path, now: bool = True):
    """A ``jlprof-inplace`` kernel (under ``nsys launch``) and its client, ready; shut down after
    (``now``: killed, else a shutdown request)."""
    from jupyter_client.manager import KernelManager

    monkeypatch.setenv("JUPYTER_PATH", str(ROOT / "jupyter-config"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    km = KernelManager(kernel_name="jlprof-inplace")
    km.start_kernel(cwd=str(cwd))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=now)


@pytest.fixture(scope="module")
def nbval_run(tmp_path_factory, need_nsys):
    tmp = tmp_path_factory.mktemp("inplace")
    return tmp, _nbval(NOTEBOOK, tmp)


@pytest.mark.nsys
@pytest.mark.slow
def test_inplace_notebook_passes_nbval_on_the_inplace_kernel(nbval_run) -> None:
    tmp, proc = nbval_run
    _assert_passed_with_good_runs(proc, "12 passed", tmp, 2)  # the cell; start ... stop


@pytest.mark.nsys
@pytest.mark.slow
def test_plain_kernel_checks_pass_in_place(need_nsys, tmp_path: Path) -> None:
    """HTTP by name to a server on 127.0.0.1, input(), subprocess echo, fork workers, DataLoader
    workers, a tqdm.auto widget, gloo on 127.0.0.1 and matplotlib inside in-place %%dlprof cells:
    the outputs nbval compares are those of a plain kernel, and each cell made a good profile."""
    proc = _nbval(PLAIN_NOTEBOOK, tmp_path)
    # one run each: network, child processes, tqdm + gloo, matplotlib
    _assert_passed_with_good_runs(proc, "7 passed", tmp_path, 4)


@pytest.mark.nsys
@pytest.mark.slow
def test_inplace_profile_equals_the_sidecars(nbval_run, tmp_path: Path) -> None:
    """The same NVTX loop profiled in the sidecar and in place: same ops, calls, kernels."""
    tmp, _ = nbval_run
    first = runs.list_runs(tmp)[0]
    opts = RunOptions(key_node="optimizer_step", reports=["summary", "kernel"])
    placed, _ = run.analyse(first / "nsys_profile.sqlite", opts, capture_domain="jlprof")
    session = run.Session(cwd=tmp_path)
    try:
        run.run_setup(session, opts, SETUP, lambda m: None, print)
        side = run.run_captured(session, opts, LOOP, lambda m: None, print)
    finally:
        session.shutdown()
    assert side.status == "ok", side.error

    def ops(profile):
        detail = profile.report("detail")
        return sorted(zip(detail["Op Name"], detail["No. Calls"], strict=True))

    assert ops(placed) == ops(side.profile) == [("optimizer_step", 5), ("train_step", 5)]
    assert placed.iterations.instances == side.profile.iterations.instances == 5
    assert len(placed.report("kernel")) == len(side.profile.report("kernel"))


@pytest.mark.nsys
@pytest.mark.slow
@pytest.mark.parametrize("now", [False, True], ids=["shutdown_request", "killed"])
def test_the_nsys_agent_ends_with_the_kernel(need_nsys, monkeypatch, tmp_path, now) -> None:
    """nsys 2022.4's agent outlives the launched program; the launcher's watcher ends it, also
    when Jupyter kills the kernel's process group."""
    with _inplace_kernel(monkeypatch, tmp_path, now=now) as (km, _):
        key = Path(km.connection_file).stem.removeprefix("kernel-")
        name = nsys_session.session_name(key)
        assert nsys_session.agent_pids(name), "the kernel runs under nsys launch"
    deadline = time.monotonic() + 30
    while nsys_session.agent_pids(name) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert nsys_session.agent_pids(name) == []


def test_a_stuck_nsys_stop_gives_a_failed_run_and_a_clear_next_step(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """nsys stop hangs (a stand-in): the run folder records analysis_failed with what recovery
    did, and the next %%dlprof says how to profile again instead of hanging."""
    from tests.test_nsys_session import _fake_nsys

    fake = _fake_nsys(tmp_path)
    monkeypatch.setenv(nsys_session.SESSION_ENV, "jlprof-k")
    monkeypatch.setenv(nsys_session.NSYS_ENV, str(fake))
    monkeypatch.delenv(launcher.ERROR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    place = inplace.InPlace()
    assert place.session is not None
    place.session.timeout_s = 1.0
    result = place.run_cell(RunOptions(verbosity="quiet"), "x = 1", lambda code: None, print)
    assert result.status == "analysis_failed"
    assert "nsys stop did not return within 1 s" in str(result.error)
    assert runs.read_manifest(result.folder)["status"] == "analysis_failed"
    with pytest.raises(Exception, match=r"ended after a stuck nsys stop: restart this kernel"):
        place.start(RunOptions(), print)
    assert launcher.ERROR_ENV not in os.environ


@pytest.mark.nsys
@pytest.mark.slow
def test_interrupting_an_inplace_cell_analyses_what_ran_and_keeps_the_kernel(
    need_nsys, monkeypatch, tmp_path
) -> None:
    """The interrupt reaches the cell (a message, not SIGINT to nsys's process group); the
    capture is stopped and analysed; the kernel, its variables and its nsys session remain."""
    import threading

    out: list[str] = []

    def keep(msg):
        if msg["header"]["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    with _inplace_kernel(monkeypatch, tmp_path) as (km, kc):
        kc.execute_interactive("%load_ext jlprof\n" + SETUP + "\nkept = 42", timeout=60)
        timer = threading.Timer(5.0, km.interrupt_kernel)
        timer.start()
        kc.execute_interactive(
            "%%dlprof --key_node=optimizer_step\nwhile True:\n    step()",
            output_hook=keep,
            timeout=120,
        )
        timer.join()
        assert "jlprof: profile ok" in "".join(out), "".join(out)
        out.clear()
        kc.execute_interactive("print(kept)\n%dlprof kernel status", output_hook=keep, timeout=60)
        text = "".join(out)
        assert "42" in text and "state Launched" in text, text
    [folder] = runs.list_runs(tmp_path)
    assert runs.read_manifest(folder)["iterations"] > 1
