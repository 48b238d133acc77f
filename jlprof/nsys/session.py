"""Interactive nsys sessions: ``nsys launch`` a program once, then ``nsys start``/``stop`` around
what to capture (jlprof's in-place mode: the notebook's own kernel runs under ``nsys launch``).

Every control call is bounded by a timeout. nsys's agent has been seen to hang in ``nsys stop``
(93 % CPU, ``nsys shutdown`` leaving it running), so a call that does not return in time is
followed by the recovery ladder: ``nsys cancel``, ``nsys shutdown``, then the agent process
(``nsys --start-agent --session-name=NAME``) is ended by its pid. The error says what was done.
Standard library only: the profiled kernel imports this.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jlprof.nsys.locate import NsysFailed, NsysInfo
from jlprof.nsys.tool import NsysTimeout, _run_tool, start_window

SESSION_ENV = "JLPROF_NSYS_SESSION"
"""Set in the environment of a kernel started under ``nsys launch`` by jlprof: its session name."""
NSYS_ENV = "JLPROF_NSYS_BINARY"
"""The nsys binary that launched the kernel: start/stop must talk to the same installation."""

MIN_VERSION = (2020, 1)
"""``nsys launch``/``start``/``stop`` with named sessions (interactive CLI, 2020.1)."""

CONTROL_TIMEOUT_S = 120.0
"""Default bound on ``nsys stop`` (it writes the whole report; ~2 s for a short cell here)."""
QUICK_TIMEOUT_S = 20.0
"""Bound on ``nsys start``, ``cancel``, ``shutdown`` and ``sessions list``."""

QUIET = ("--sample=none", "--cpuctxsw=none")
"""``nsys start`` options by default: no CPU sampling. With sampling (nsys's default) nsys
2022.4's ``stop`` took 2-9 s and hung on the 3rd capture of a process, 3 times of 3; without it, 6
of 6 captures stopped in under 1.1 s (reports 1.4 MB instead of 28-44 MB)."""

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
_GENERATED = re.compile(r"^\s*(/.*\.(?:qdstrm|nsys-rep|qdrep))\s*$")


def session_name(key: str) -> str:
    """A valid nsys session name from ``key`` (a kernel id): a letter first, no spaces."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", key)[:48]
    return f"jlprof-{cleaned}"


def launch_argv(
    nsys: str | os.PathLike[str], name: str, options: Sequence[str], program: Sequence[str]
) -> list[str]:
    """``nsys launch --session-new=NAME [options] program...``; ``options`` are launch options
    (trace, NVTX capture, ...), never start options (output, capture range end)."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"invalid nsys session name {name!r}")
    return [str(nsys), "launch", f"--session-new={name}", *options, *program]


def _agents(proc: Path) -> Iterator[tuple[Path, list[bytes]]]:
    """The nsys agents (``nsys --start-agent``) in ``proc``: each one's folder and argv."""
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--start-agent" in argv:
            yield entry, argv


def agent_pids(name: str, proc: Path = Path("/proc")) -> list[int]:
    """Pids of the nsys agents of session ``name`` (``nsys --start-agent --session-name=NAME``)."""
    want = f"--session-name={name}".encode()
    return sorted(int(entry.name) for entry, argv in _agents(proc) if want in argv)


def running_agents(proc: Path = Path("/proc")) -> list[tuple[int, str]]:
    """This user's nsys agents, each with its session's name ('' when it has none): what to
    name when an nsys start fails, since an agent left behind by a failed start makes later
    starts fail with nothing but "End of file"."""
    found = []
    uid = os.getuid()
    for entry, argv in _agents(proc):
        try:
            if entry.stat().st_uid != uid:
                continue
        except OSError:
            continue
        named = [a.split(b"=", 1)[1] for a in argv if a.startswith(b"--session-name=")]
        found.append((int(entry.name), (named or [b""])[0].decode(errors="replace")))
    return sorted(found)


def agents_hint(proc: Path = Path("/proc")) -> str:
    """A sentence for an nsys start's error: the agents running (a failed earlier start can
    leave one that fails every later start) and how to end one no longer in use; '' when
    none runs."""
    agents = running_agents(proc)
    if not agents:
        return ""
    shown = ", ".join(f"{pid}" + (f" (session {name})" if name else "") for pid, name in agents[:5])
    more = f" and {len(agents) - 5} more" if len(agents) > 5 else ""
    return (
        f"; nsys agents already running: {shown}{more}. An agent left by a failed nsys start "
        "makes later starts fail: end the ones no notebook or run uses any more (kill PID)"
    )


@dataclass
class Session:
    """Control of one named nsys session (the program runs under ``nsys launch`` already)."""

    name: str
    nsys: str = "nsys"
    timeout_s: float = CONTROL_TIMEOUT_S
    quick_timeout_s: float = QUICK_TIMEOUT_S
    log: list[str] = field(default_factory=list)
    """Recovery steps taken by the last failed call, for the error message."""

    @classmethod
    def from_env(cls, info: NsysInfo | None = None) -> Session | None:
        """The session this process runs under (``JLPROF_NSYS_SESSION``), or None."""
        name = os.environ.get(SESSION_ENV, "").strip()
        if not name:
            return None
        binary = os.environ.get(NSYS_ENV) or (str(info.path) if info else "nsys")
        return cls(name=name, nsys=binary)

    def _call(self, args: Sequence[str], timeout: float, what: str) -> list[str]:
        lines = _run_tool([self.nsys, *args], what=what, timeout=timeout, new_session=True)
        return [ln for ln in lines if ln.strip()]

    def state(self) -> str | None:
        """The session's state as ``nsys sessions list`` shows it (``Launched``, ``Collection``,
        ...), or None when nsys lists no such session."""
        lines = self._call(["sessions", "list"], self.quick_timeout_s, "nsys sessions list")
        for line in lines[1:]:
            words = line.split()
            if len(words) >= 5 and words[-1] == self.name:
                return words[2]
        return None

    def start(self, output: str | os.PathLike[str], options: Sequence[str] = QUIET) -> None:
        """``nsys start``: collection begins; the report goes to ``output`` (no suffix). It
        starts inside :func:`tool.start_window`, as every nsys session jlprof starts: nsys
        2022.4 hangs when two start at the same instant."""
        with start_window():
            self._guarded(
                ["start", f"--session={self.name}", "-o", str(output), "-f", "true", *options],
                self.quick_timeout_s,
                "nsys start",
            )

    def stop(self, output: str | os.PathLike[str] | None = None) -> Path | None:
        """``nsys stop``: collection ends and the report is written; returns its path.

        nsys prints ``Generated: PATH`` in the launched program's output, not in stop's, so the
        path is found from ``output`` (what was given to :meth:`start`) when stop does not say it.
        """
        lines = self._guarded(["stop", f"--session={self.name}"], self.timeout_s, "nsys stop")
        for line in lines:
            m = _GENERATED.match(line)
            if m:
                return Path(m.group(1))
        if output is None:
            return None
        base = Path(output)
        for suffix in (".nsys-rep", ".qdrep", ".qdstrm"):
            path = base.with_name(base.name + suffix)
            if path.exists():
                return path
        return None

    def cancel(self) -> None:
        """``nsys cancel``: collection ends and what was collected is dropped."""
        self._call(["cancel", f"--session={self.name}"], self.quick_timeout_s, "nsys cancel")

    def shutdown(self, kill: str = "none") -> None:
        """``nsys shutdown --kill=none``: the session ends, the program keeps running."""
        self._call(
            ["shutdown", f"--session={self.name}", f"--kill={kill}"],
            self.quick_timeout_s,
            "nsys shutdown",
        )

    def _guarded(self, args: Sequence[str], timeout: float, what: str) -> list[str]:
        """Run a control call; on a timeout, recover and raise with what recovery did."""
        self.log = []
        try:
            return self._call(args, timeout, what)
        except NsysTimeout as exc:
            kept = self.recover()
            after = (
                "the session is usable again"
                if kept
                else "this kernel keeps running, no longer under nsys: run %dlprof enable to "
                "profile in place again"
            )
            raise NsysTimeout(
                f"{exc}; recovered ({'; '.join(self.log)}): the capture is lost, {after}",
                exc.output,
            ) from None

    def recover(self, grace_s: float = 5.0) -> bool:
        """End a stuck collection: ``nsys cancel``; when the session is not back to
        ``Launched`` after it, ``nsys shutdown`` and SIGTERM then SIGKILL to its agent's pid.
        True when the session survived (steps taken in :attr:`log`)."""
        steps: list[str] = []
        self.log = steps
        try:
            self.cancel()
            steps.append("nsys cancel returned")
            if self.state() == "Launched":
                return True
        except NsysFailed as exc:
            steps.append(str(exc).split(":")[0])
        try:
            self.shutdown()
            steps.append("nsys shutdown returned")
        except NsysFailed as exc:
            steps.append(str(exc).split(":")[0])
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = agent_pids(self.name)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    continue
                steps.append(f"agent pid {pid} sent {sig.name}")
            deadline = time.monotonic() + grace_s
            while agent_pids(self.name) and time.monotonic() < deadline:
                time.sleep(0.1)
        if agent_pids(self.name):
            steps.append(f"agent pids {agent_pids(self.name)} still running")
        return False


def version_line(info: NsysInfo) -> str | None:
    """One line when this nsys cannot run in-place sessions (None when it can)."""
    if info.version and info.version < MIN_VERSION:
        return (
            f"in-place profiling needs nsys {'.'.join(map(str, MIN_VERSION))} or later (named "
            f"sessions: nsys launch/start/stop); this is nsys {info.version_text}"
        )
    return None
