"""Keep nsys off the network: run the sidecar's nsys in a private network namespace.

``nsys profile`` (2022.4) starts an agent (``nsys --start-agent``) that listens on
``0.0.0.0:<random port>`` for the profiled process and the nsys front end, for as long as the
session lives. nsys has no option or environment variable to bind it to loopback. So where the
kernel lets an ordinary user create a user + network namespace (Linux unprivileged user
namespaces, on by default in Debian and most distributions), the sidecar's nsys is started inside
its own namespace with only a loopback interface: the agent's port exists only in there.
Everything the notebook uses to talk to the sidecar is a file-system (IPC) socket, which works
across network namespaces. Where namespaces are refused, nsys runs as before and ``%dlprof kernel
status`` names the listening port (:func:`listeners`).

Run as ``python -m jlprof.sidecar.netns -- COMMAND...`` (exec's COMMAND inside the namespace) or
``python -m jlprof.sidecar.netns --probe`` (exit 0 when it works here).
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def enter() -> None:
    """Move this (single-threaded) process into a new user + network namespace, same uid/gid,
    with the loopback interface up. Raises OSError where the kernel refuses."""
    uid, gid = os.getuid(), os.getgid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, _SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


@functools.cache
def available(python: str = sys.executable) -> bool:
    """True when :func:`enter` works here (tried once per process, in a child process)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        proc = subprocess.run(
            [python, "-m", "jlprof.sidecar.netns", "--probe"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def wrap(argv: list[str], python: str = sys.executable) -> list[str]:
    """``argv`` to be run inside a private network namespace."""
    return [python, "-m", "jlprof.sidecar.netns", "--", *argv]


def session_processes(pids: list[int]) -> list:
    """The nsys processes ``pids``, their children and their agent (``psutil.Process`` list)."""
    import psutil

    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            procs += [p, *p.children(recursive=True)]
        except psutil.Error:
            continue
    # nsys's agent daemonises (its parent is init); it names the front end's pid in its session
    ends = tuple(f"-{pid}" for pid in pids)
    for p in psutil.process_iter(["cmdline"]):
        args = p.info["cmdline"] or []
        if "--start-agent" in args and any(
            a.startswith("--session-name=") and a.endswith(ends) for a in args
        ):
            procs.append(p)
    return procs


def listeners(pids: list[int]) -> list[tuple[str, int, int, str]]:
    """TCP ports that these nsys processes, their children and their agent listen on, as seen
    from here: ``(address, port, pid, process name)``; [] inside a private namespace."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - ipykernel depends on psutil
        return []
    found = []
    for p in session_processes(pids):
        try:
            conns = p.net_connections(kind="inet")
            name = p.name()
        except psutil.Error:
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN:
                found.append((c.laddr.ip, c.laddr.port, p.pid, name))
    return sorted(set(found))


def main(args: list[str]) -> int:
    if args[:1] == ["--probe"]:
        try:
            enter()
        except OSError:
            return 1
        return 0
    if args[:1] != ["--"] or len(args) < 2:
        print("usage: python -m jlprof.sidecar.netns (--probe | -- COMMAND...)", file=sys.stderr)
        return 2
    enter()
    os.execvp(args[1], args[1:])
    return 127  # pragma: no cover - execvp does not return


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
