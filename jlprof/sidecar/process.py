"""The sidecar: a real ipykernel started under ``nsys profile``, driven over private IPC sockets.

Why a sidecar: nsys profiles a whole process from its start, and the notebook kernel was started
long before anyone typed ``%%dlprof``. So the profiled code runs in a second kernel launched under
``nsys profile --capture-range=nvtx|cudaProfilerApi --capture-range-end=repeat``: nothing is
collected until a cell opens jlprof's capture range, and every captured cell becomes one report.

Security: the kernel listens on IPC sockets inside a fresh 0700 folder (never a TCP port) and
signs messages with a random HMAC key; nsys writes its temporary capture files there too. nsys's
own agent listens on a TCP port of all interfaces, as with ``nsys profile`` by hand (named by
``%dlprof kernel status``); ``isolate_network`` runs nsys, and so the profiled code, in a private
network namespace instead (:mod:`jlprof.sidecar.netns`), which also cuts that code off the network.

The profiled code otherwise runs as in a plain kernel: the notebook's network, working folder and
environment; output of child processes captured at the file descriptors; its widgets' comm
messages and ``input()`` requests passed to the caller (``on_message``, ``on_input``).
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jlprof import nsys
from jlprof.errors import JlprofError
from jlprof.nsys import session as nsys_session
from jlprof.sidecar import netns
from jlprof.sidecar.capture import NVTX_CAPTURE
from jlprof.sidecar.kernel import ORIGINAL_TMPDIR, PARENT_PID, PIPE

OnInput = Callable[[str, bool], str]
"""Answers the profiled code's ``input(prompt)`` (``password`` for getpass); raising refuses."""

MIN_NSYS = (2021, 1)
"""``--capture-range-end=repeat`` and NVTX capture of unregistered strings need nsys 2021.1+."""

OnMessage = Callable[[dict[str, Any]], None]
MAX_INTERRUPTS = 2
NO_REPLY_GRACE_S = 5.0
"""After an interrupted request went idle, how long its reply may lag before it counts as lost."""
"""Interrupts passed on to a busy sidecar; one more gives the notebook back (see SidecarBusy)."""


class SidecarDied(JlprofError):
    """The sidecar kernel process ended (crash, ``os._exit``, killed); its state is gone."""


class SidecarBusy(JlprofError):
    """The sidecar kernel keeps running the cell although it was interrupted repeatedly."""


class NsysTooOld(nsys.NsysNotFound):
    """The nsys found is older than the sidecar needs."""


class NoPrivateNetwork(JlprofError):
    """``isolate_network`` was asked for where the system refuses unprivileged namespaces."""


@dataclass
class ExecResult:
    """How one execute request ended in the sidecar."""

    status: str  # ok | error | aborted
    ename: str = ""
    evalue: str = ""
    traceback: list[str] = field(default_factory=list)
    user_expressions: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False

    def expression(self, name: str) -> str:
        """The text/plain value of a user expression (``repr`` of the value in the sidecar)."""
        value = self.user_expressions.get(name, {})
        if value.get("status") != "ok":
            raise JlprofError(f"sidecar could not evaluate {name}: {value.get('evalue', value)}")
        return value["data"]["text/plain"]


def cuda_usable() -> bool:
    """True when a CUDA driver with at least one device is present (then capture uses the CUDA
    profiler API, which also works for code that never touches NVTX)."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    try:
        return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0
    except AttributeError:
        return False


FOLDER_PREFIX = "jlprof-sidecar-"
OWNERS = "owners"
"""File in the sidecar folder: the pids (notebook kernel, nsys) whose life the folder serves."""
STALE_UNOWNED_S = 24 * 3600
"""A folder without an owners file (an older jlprof) is stale after a day."""


def _write_owners(folder: Path, *pids: int) -> None:
    # temp + rename: another notebook's clean-up must never read a half-written (empty) list
    tmp = folder / f".{OWNERS}.tmp"
    tmp.write_text(" ".join(map(str, pids)))
    os.replace(tmp, folder / OWNERS)


def remove_stale_folders(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove this user's sidecar folders whose notebook kernel and nsys both ended.

    A SIGKILLed notebook kernel never runs its clean-up, which would leave the folder (capture
    files and the HMAC key) in the temp folder for good; the next sidecar start removes it.
    """
    removed = []
    base = Path(root if root is not None else tempfile.gettempdir())
    for folder in base.glob(f"{FOLDER_PREFIX}*"):
        try:
            st = folder.lstat()
            if not folder.is_dir() or folder.is_symlink() or st.st_uid != os.getuid():
                continue
            owners = folder / OWNERS
            pids = [int(x) for x in owners.read_text().split()] if owners.exists() else []
            if pids:
                if any(_proc_state(pid) not in (None, "Z", "X") for pid in pids):
                    continue
            elif time.time() - st.st_mtime < STALE_UNOWNED_S:
                continue  # no owners recorded (yet, or by an older jlprof): judged by its age
        except (OSError, ValueError):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _proc_state(pid: int) -> str | None:
    """Linux process state letter (``R``, ``S``, ``Z`` ...) or None when the pid is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


class Sidecar:
    """One profiled kernel: start, run code (captured or not), interrupt, restart, shut down."""

    def __init__(
        self,
        *,
        method: str | None = None,
        nsys_opts: str = "",
        cwd: str | os.PathLike[str] | None = None,
        python: str = sys.executable,
        say: Callable[[str], None] | None = None,
        isolate_network: bool = False,
    ) -> None:
        self.method = method or ("cudaProfilerApi" if cuda_usable() else "nvtx")
        self.nsys_opts = nsys_opts
        self.cwd = Path(cwd) if cwd is not None else Path.cwd()
        self.python = python
        self.say = say or (lambda _m: None)
        self.dir: Path | None = None
        self.proc: subprocess.Popen[str] | None = None
        self.kernel_pid: int | None = None
        self.client: Any = None
        self.started_at = 0.0
        self.captures = 0
        self.tail: deque[str] = deque(maxlen=400)
        self._lines: queue.Queue[str] = queue.Queue()
        self._seen: set[str] = set()
        self._reader: threading.Thread | None = None
        self.isolate_network = isolate_network
        self.private_network = False
        self.notes: list[str] = []
        """Problems found at start that affect every capture (the user's NVTX not recorded)."""

    # ---- life cycle ----------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> None:
        """Launch nsys + ipykernel and wait until the kernel answers."""
        from jupyter_client import BlockingKernelClient
        from jupyter_client.connect import write_connection_file

        info = nsys.find_nsys()
        if info.version[:2] < MIN_NSYS:
            raise NsysTooOld(
                f"nsys {info.version_text} at {info.path} is too old for %%dlprof (needs "
                f"{'.'.join(map(str, MIN_NSYS))} or newer); {nsys.INSTALL_HINT}"
            )
        remove_stale_folders()
        self.dir = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
        os.chmod(self.dir, 0o700)
        (self.dir / "tmp").mkdir(mode=0o700)
        _write_owners(self.dir, os.getpid())
        conn = self.dir / "kernel.json"
        write_connection_file(
            str(conn),
            transport="ipc",
            ip=str(self.dir / "kern"),
            key=secrets.token_hex(32).encode(),
        )
        try:
            cmd = nsys.profile_command(
                [self.python, "-m", "jlprof.sidecar.kernel", "-f", str(conn)],
                self.dir / "capture",
                capture_range=self.method,
                nvtx_capture=NVTX_CAPTURE if self.method == "nvtx" else None,
                capture_range_end="repeat",
                trace_dl_libraries=self.method == "cudaProfilerApi",
                force=True,
                nsys_opts=self.nsys_opts,
                nsys=info,
            )
        except JlprofError:  # e.g. --nsys_opts that clash with the capture set-up
            self._cleanup()
            raise
        # nsys block-buffers its stdout into a pipe; its "Generating ..." lines are needed live
        stdbuf = shutil.which("stdbuf")
        argv = [stdbuf, "-oL", *cmd.argv] if stdbuf else cmd.argv
        # nsys's agent listens on 0.0.0.0 (2022.4, no option against it): only where asked, in
        # a private network namespace, where its port exists alone (and the profiled code with it)
        if self.isolate_network:
            if not netns.available(self.python):
                self._cleanup()
                raise NoPrivateNetwork(
                    "--isolate_network=true: this system refuses unprivileged user and network "
                    "namespaces (sysctl kernel.unprivileged_userns_clone, or a container without "
                    "them); run without it and block nsys's agent port (%dlprof kernel status) "
                    "with a firewall"
                )
            self.private_network = True
            argv = netns.wrap(argv, self.python)
        env = {
            **os.environ,
            **cmd.env,
            "TMPDIR": str(self.dir / "tmp"),
            ORIGINAL_TMPDIR: os.environ.get("TMPDIR", ""),
            PARENT_PID: str(os.getpid()),
            PIPE: f"ipc://{self.dir / 'pipe'}",
        }
        self.say(f"starting the sidecar kernel under nsys {info.version_text}")
        # one nsys session starts at a time (nsys.start_lock: two at once hang in 2022.4)
        with nsys.start_lock():
            # its own session: a notebook-kernel interrupt (SIGINT to our process group) must not
            # reach nsys, which would end the whole profiling session
            self.proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.cwd,
                env=env,
                text=True,
                errors="replace",
                bufsize=1,
                start_new_session=True,
            )
            _write_owners(self.dir, os.getpid(), self.proc.pid)
            self._reader = threading.Thread(target=self._read_output, daemon=True)
            self._reader.start()
            self.started_at = time.time()
            client = BlockingKernelClient(connection_file=str(conn))
            client.load_connection_file()
            client.start_channels()
            self.client = client
            deadline = time.monotonic() + timeout
            while True:
                if self.proc.poll() is not None:
                    self._cleanup()
                    raise nsys.NsysFailed(
                        "the sidecar kernel did not start under nsys "
                        f"(exit {self.proc.returncode}): {nsys._last_lines(self.tail)}"
                        f"{nsys_session.agents_hint()}",
                        list(self.tail),
                    )
                try:
                    client.wait_for_ready(timeout=2)
                    break
                except RuntimeError:
                    if time.monotonic() > deadline:
                        self.shutdown()
                        raise nsys.NsysFailed(
                            f"the sidecar kernel did not answer within {timeout:.0f} s"
                        ) from None
        res = self.execute(
            "import jlprof.sidecar.capture as _jlprof_capture",
            silent=True,
            user_expressions={
                "pid": "__import__('os').getpid()",
                "nvtx": f"_jlprof_capture.nvtx_note({info.version_text!r})",
            },
        )
        if res.status != "ok":
            self.shutdown()
            raise JlprofError(f"the sidecar cannot import jlprof: {res.ename}: {res.evalue}")
        self.kernel_pid = int(res.expression("pid"))
        try:  # a check that fails must not stop the sidecar from working
            note = ast.literal_eval(res.expression("nvtx"))
        except (JlprofError, ValueError, SyntaxError) as exc:
            note = f"could not check whether nsys records your NVTX ranges: {exc}"
        self.notes = [note] if note else []
        atexit.register(self.shutdown)

    def _read_output(self) -> None:
        """nsys and raw kernel output: kept for error messages; nsys's file lines queued."""
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.rstrip("\n")
            self.tail.append(line)
            self._lines.put(line)

    def alive(self) -> bool:
        """nsys still runs and the kernel process neither exited nor is a zombie."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        if self.kernel_pid is None:
            return True
        return _proc_state(self.kernel_pid) not in (None, "Z", "X")

    def status(self) -> dict[str, Any]:
        return {
            "running": self.alive(),
            "kernel_pid": self.kernel_pid,
            "nsys_pid": self.proc.pid if self.proc else None,
            "capture": self.method,
            "captures": self.captures,
            "uptime_s": round(time.time() - self.started_at, 1) if self.started_at else 0.0,
            "folder": str(self.dir) if self.dir else None,
            "private_network": self.private_network,
            "listeners": netns.listeners([self.proc.pid]) if self.proc else [],
        }

    def interrupt(self) -> None:
        """SIGINT to the kernel process only (nsys must keep running)."""
        if self.kernel_pid is not None and self.alive():
            with contextlib.suppress(OSError):
                os.kill(self.kernel_pid, signal.SIGINT)

    def _kernel_running(self) -> bool:
        return self.kernel_pid is not None and _proc_state(self.kernel_pid) not in (None, "Z", "X")

    def shutdown(self, timeout: float = 60.0, kernel_grace: float = 10.0) -> None:
        """Stop the kernel, let nsys finish, remove the private folder. Safe to call twice."""
        with contextlib.suppress(ValueError):
            atexit.unregister(self.shutdown)
        if self.client is not None:
            if self.alive():
                with contextlib.suppress(Exception):
                    self.client.shutdown()
            with contextlib.suppress(Exception):
                self.client.stop_channels()
            self.client = None
        # a kernel stuck in code that ignores interrupts never acts on the shutdown request
        deadline = time.monotonic() + min(timeout, kernel_grace)
        while self._kernel_running() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self._kernel_running():
            with contextlib.suppress(OSError):
                os.kill(self.kernel_pid, signal.SIGKILL)  # type: ignore[arg-type]
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                nsys._stop_nsys(self.proc, self.say)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(10)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._cleanup()

    def rescue(self, dest: Path, base_name: str, timeout: float = 60.0) -> Path | None:
        """After a death: let nsys finish writing, keep what it recorded, clean up.

        nsys writes the capture that was open when the kernel died as ``capture.<N>.qdstrm``
        when it exits; the newest one not collected yet goes to ``dest/<base_name>.<suffix>``.
        """
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        kept: Path | None = None
        if self.dir is not None:

            def index(path: Path) -> int:  # capture.qdstrm when nsys wrote only one
                parts = path.name.split(".")
                return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 1

            files = [
                p
                for p in self.dir.glob("capture*")
                if p.suffix in (".qdstrm", ".nsys-rep") and index(p) > self.captures
            ]
            if files:
                newest = max(files, key=index)
                dest.mkdir(parents=True, exist_ok=True)
                kept = Path(shutil.move(str(newest), dest / f"{base_name}{newest.suffix}"))
        self.shutdown(timeout=5)
        return kept

    def _cleanup(self) -> None:
        if self._kernel_running():
            with contextlib.suppress(OSError):
                os.kill(self.kernel_pid, signal.SIGKILL)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    # ---- running code --------------------------------------------------------------------
    def execute(
        self,
        code: str,
        *,
        silent: bool = False,
        store_history: bool = False,
        user_expressions: dict[str, str] | None = None,
        on_message: OnMessage | None = None,
        on_input: OnInput | None = None,
        interrupt_on: tuple[type[BaseException], ...] = (KeyboardInterrupt,),
    ) -> ExecResult:
        """Run ``code``; iopub messages of this request go to ``on_message`` as they arrive.

        With ``on_input``, the code's ``input()``/``getpass`` requests are answered by it (the
        notebook asks its own frontend); without, they raise ipykernel's
        ``StdinNotImplementedError`` in the sidecar, as in a frontend without input.

        A KeyboardInterrupt here (the notebook kernel was interrupted) interrupts the sidecar and
        keeps waiting for its reply, so the caller can still stop the capture cleanly.
        Raises :class:`SidecarDied` when the kernel process ends before replying.
        """
        if self.client is None or not self.alive():
            raise SidecarDied(self._death_message())
        client = self.client
        msg_id = client.execute(
            code,
            silent=silent,
            store_history=store_history,
            user_expressions=user_expressions or {},
            allow_stdin=on_input is not None,
            stop_on_error=False,
        )
        reply: dict[str, Any] | None = None
        idle = False
        interrupted = False
        interrupts = 0
        # ipykernel ignores SIGINT between requests (SIG_IGN outside a handler): an interrupt sent
        # before this request runs would be lost and the cell would then run on unstopped. So a
        # visible request is interrupted only once it has started (its execute_input arrived);
        # a silent one (jlprof's own short code) publishes no execute_input and is sent at once.
        started = silent
        pending = False
        idle_since: float | None = None
        while reply is None or not idle:
            try:
                if not idle:
                    with contextlib.suppress(queue.Empty):
                        msg = client.get_iopub_msg(timeout=0.05)
                        if msg["parent_header"].get("msg_id") == msg_id:
                            kind = msg["header"]["msg_type"]
                            if kind == "status":
                                idle = msg["content"]["execution_state"] == "idle"
                                idle_since = time.monotonic() if idle else None
                            else:
                                if kind == "execute_input":
                                    started = True
                                    if pending:
                                        pending = False
                                        self.interrupt()
                                if on_message is not None:
                                    on_message(msg)
                if on_input is not None and reply is None:
                    with contextlib.suppress(queue.Empty):
                        msg = client.get_stdin_msg(timeout=0)
                        if msg["header"]["msg_type"] == "input_request":
                            self._answer(msg["content"], on_input)
                if reply is None:
                    with contextlib.suppress(queue.Empty):
                        msg = client.get_shell_msg(timeout=0 if not idle else 0.05)
                        if msg["parent_header"].get("msg_id") == msg_id:
                            reply = msg["content"]
                if (
                    reply is None
                    and interrupted
                    and idle_since is not None
                    and time.monotonic() - idle_since > NO_REPLY_GRACE_S
                ):
                    # SIGINT landed in ipykernel's own code around the cell, which swallows it
                    # ("KeyboardInterrupt caught in kernel") and never replies: stop waiting.
                    why = "interrupted before or after the cell's code ran"
                    reply = {"status": "error", "ename": "KeyboardInterrupt", "evalue": why}
                if (reply is None or not idle) and not self.alive():
                    raise SidecarDied(self._death_message())
            except interrupt_on:
                interrupts += 1
                if interrupts > MAX_INTERRUPTS:
                    raise SidecarBusy(
                        f"the sidecar kernel did not stop after {MAX_INTERRUPTS} interrupts (code "
                        "that ignores SIGINT?): run %dlprof kernel restart (its state is lost)"
                    ) from None
                interrupted = True
                if started:
                    self.interrupt()
                else:
                    pending = True
        content = reply
        return ExecResult(
            status=content.get("status", "error"),
            ename=content.get("ename", ""),
            evalue=content.get("evalue", ""),
            traceback=list(content.get("traceback", [])),
            user_expressions=content.get("user_expressions", {}),
            interrupted=interrupted,
        )

    def _answer(self, request: dict[str, Any], on_input: OnInput) -> None:
        """Reply to one input request with what ``on_input`` gives. When it fails, the code
        waiting for the answer is interrupted (its ``input()`` raises KeyboardInterrupt); an
        interrupt of the notebook's own input propagates to :meth:`execute`, which passes it on.
        """
        try:
            value = on_input(request.get("prompt", ""), bool(request.get("password")))
        except Exception:
            self.interrupt()
            return
        self.client.input(value)

    def _death_message(self) -> str:
        code = self.proc.poll() if self.proc is not None else None
        how = f" (nsys exit {code})" if code is not None else ""
        return (
            f"the sidecar kernel died{how}: its variables and imports are lost. The next "
            "%%dlprof starts a fresh sidecar; run your --setup cells again."
        )

    # ---- capture files -------------------------------------------------------------------
    def wait_for_capture(self, timeout: float = 120.0, no_start_s: float = 3.0) -> Path | None:
        """The raw report nsys wrote for the capture that just ended (None if none appeared).

        nsys prints ``Capture range started``, later ``Generating '<file>'`` and ``Capture range
        ended``; the file (under the private TMPDIR for the Debian build) is complete once its
        size settles. Lines are read from the queue filled since :meth:`drain_lines`, so when no
        start line arrives within ``no_start_s`` the range never triggered (an NVTX library that
        records nothing under this nsys) and there is no point in waiting longer.
        """
        t0 = time.monotonic()
        deadline = t0 + timeout
        generated: Path | None = None
        started = ended = False
        while not ended and time.monotonic() < deadline:
            if not started and generated is None and time.monotonic() - t0 > no_start_s:
                break  # (a report file that appeared anyway is still found below)
            try:
                line = self._lines.get(timeout=0.1)
            except queue.Empty:
                if self.proc is None or self.proc.poll() is not None:
                    break
                continue
            text = line.strip()
            if text.startswith("Capture range started"):
                started = True
            elif text.startswith("Generating '") and text.endswith("'"):
                generated = Path(text[len("Generating '") : -1])
            elif text.startswith("Capture range ended"):
                ended = True
        if generated is None:
            generated = self._newest_unseen()
        if generated is None or not generated.exists():
            return None
        self._seen.add(str(generated))
        self.captures += 1
        nsys.files.wait_stable(generated, deadline)
        return generated

    def _newest_unseen(self) -> Path | None:
        if self.dir is None:
            return None
        found = [
            p
            for p in [*self.dir.glob("tmp/nsys-report-*"), *self.dir.glob("capture*")]
            if p.suffix in (".qdstrm", ".nsys-rep") and str(p) not in self._seen
        ]
        return max(found, key=lambda p: p.stat().st_mtime) if found else None

    def drain_lines(self) -> list[str]:
        """Forget queued nsys lines (before a new capture, so old ones cannot be mistaken)."""
        lines = []
        with contextlib.suppress(queue.Empty):
            while True:
                lines.append(self._lines.get_nowait())
        return lines


__all__ = ["ExecResult", "NsysTooOld", "Sidecar", "SidecarBusy", "SidecarDied", "cuda_usable"]
