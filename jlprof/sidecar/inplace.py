"""Start a Python kernel under ``nsys launch`` (jlprof's in-place mode).

``python -m jlprof.sidecar.inplace -f CONN`` (the ``jlprof-inplace`` kernelspec) or
``python -m jlprof.sidecar.inplace -- KERNEL ARGV...`` (the server extension's provisioner, which
wraps the command it would have run). The kernel is started as ``nsys launch --session-new=NAME
--trace=... KERNEL`` with the session's name in its environment, so ``%%dlprof`` in that kernel
captures cells with ``nsys start``/``nsys stop`` (:mod:`jlprof.nsys.session`). Extra launch
options come from ``JLPROF_INPLACE_NSYS_OPTS``. When nsys cannot be used the kernel starts plain
and ``JLPROF_INPLACE_ERROR`` says why (``%%dlprof`` shows it). ``PYTEST_CURRENT_TEST`` is
dropped from the kernel's environment: ipykernel stops capturing fd output (``subprocess`` echo)
when it is set, so a kernel started from a test would not show what it shows in JupyterLab (the
sidecar forces the capture instead, :mod:`jlprof.sidecar.kernel`). Standard library and
:mod:`jlprof.nsys` only.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

OPTS_ENV = "JLPROF_INPLACE_NSYS_OPTS"
PROVISIONER_ENV = "JLPROF_PROVISIONER"
"""Set by jlprof's kernel provisioner (server extension) in the kernels it starts, to the
kernel's id: the protocol between the magic (``%dlprof enable``) and ``jlprof.server.provisioner``
is these names and :func:`request_path`."""
REQUEST_PREFIX = "jlprof-inplace-"
"""``<runtime dir>/jlprof-inplace-<kernel id>.json``: what the provisioner reads at a (re)start."""
ERROR_ENV = "JLPROF_INPLACE_ERROR"
DEFAULT_LAUNCH = ("--trace=cuda,nvtx,osrt",)
"""jlprof's traced APIs (``nsys.DEFAULT_TRACE``), as a launch option."""
_START_ONLY = ("-o", "--output", "-c", "--capture-range", "--capture-range-end", "-s", "--sample")


def kernel_argv(argv: Sequence[str], env: dict[str, str]) -> tuple[list[str], str]:
    """The kernel command and a session key from this launcher's arguments."""
    args = list(argv)
    cmd = args[1:] if args[:1] == ["--"] else [sys.executable, "-m", "ipykernel_launcher", *args]
    key = ""
    for i, word in enumerate(cmd):
        conn = word.split("=", 1)[1] if word.startswith("--f=") else None
        if word == "-f" and i + 1 < len(cmd):
            conn = cmd[i + 1]
        if conn:
            key = Path(conn).stem.removeprefix("kernel-")
    given = env.get("JLPROF_PROVISIONER", "")  # the server's kernel id (provisioner)
    if given and given != "1":
        key = given
    return cmd, key or uuid.uuid4().hex[:12]


def launch_options(text: str) -> list[str]:
    """The user's launch options (``%dlprof enable -t cuda,nvtx``) or jlprof's trace."""
    words = shlex.split(text)
    for word in words:
        if word.split("=", 1)[0] in _START_ONLY:
            raise ValueError(
                f"{word} is an option of nsys start, not nsys launch: give it to %%dlprof "
                "(or leave it to jlprof)"
            )
    if not any(w.split("=", 1)[0] in ("-t", "--trace") for w in words):
        words = [*DEFAULT_LAUNCH, *words]
    return words


def command(argv: Sequence[str], env: dict[str, str]) -> list[str]:
    """The argv to exec: ``nsys launch ... KERNEL``, or the plain kernel with ``ERROR_ENV`` set."""
    from jlprof.nsys import session
    from jlprof.nsys.command import NVTX_REGISTER_ENV
    from jlprof.nsys.locate import find_nsys

    cmd, key = kernel_argv(argv, env)
    env.pop("PYTEST_CURRENT_TEST", None)  # see the module's docstring
    try:
        info = find_nsys()
        too_old = session.version_line(info)
        if too_old:
            raise RuntimeError(too_old)
        options = launch_options(env.get(OPTS_ENV, ""))
    except Exception as exc:  # the kernel must start; %%dlprof says why it cannot capture
        env[ERROR_ENV] = f"this kernel is not under nsys: {exc}"
        env.pop(session.SESSION_ENV, None)
        return cmd
    name = session.session_name(key)
    env[session.SESSION_ENV] = name
    env[session.NSYS_ENV] = str(info.path)
    env.update(NVTX_REGISTER_ENV)
    env.pop(ERROR_ENV, None)
    return session.launch_argv(info.path, name, options, cmd)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def reap(pid: int, name: str, nsys: str, every_s: float = 1.0) -> None:
    """Once ``pid`` (``nsys launch``) is gone, end its session's agent.

    nsys 2022.4's agent outlives the launched kernel (seen: still ``Launched`` 10 minutes after
    the kernel ended), and Jupyter's kill of the kernel's process group never reaches it (it is
    a daemon). This watcher runs in its own session, so a SIGKILL of the kernel's group spares it.
    """
    from jlprof.nsys import session

    while _alive(pid):
        time.sleep(every_s)
    sess = session.Session(name, nsys=nsys, quick_timeout_s=10)
    with contextlib.suppress(Exception):
        sess.shutdown()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for agent in session.agent_pids(name):
            with contextlib.suppress(OSError):
                os.kill(agent, sig)
        deadline = time.monotonic() + 5
        while session.agent_pids(name) and time.monotonic() < deadline:
            time.sleep(0.1)


def main() -> None:
    if sys.argv[1:2] == ["--reap"]:
        reap(int(sys.argv[2]), sys.argv[3], sys.argv[4])
        return
    env = dict(os.environ)
    argv = command(sys.argv[1:], env)
    name = env.get("JLPROF_NSYS_SESSION")
    if name and argv[0] != sys.executable:  # under nsys: its agent is ended after the kernel
        subprocess.Popen(
            [sys.executable, "-m", "jlprof.sidecar.inplace", "--reap", str(os.getpid()), name,
             argv[0]],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True,
        )  # fmt: skip
    if argv[0] != sys.executable:  # nsys launch: one nsys session starts at a time
        from jlprof.nsys.tool import lock_through_exec

        lock_through_exec()
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    main()


def request_path(kernel_id: str) -> Path:
    """Where ``%dlprof enable|disable`` leaves its request for the provisioner."""
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir()) / f"{REQUEST_PREFIX}{kernel_id}.json"
