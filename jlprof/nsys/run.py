"""``nsys profile`` run to the end: the report it wrote (imported when nsys did not), and
stopping it cleanly."""

from __future__ import annotations

import contextlib
import glob
import os
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jlprof.errors import JlprofError
from jlprof.nsys.command import NVTX_REGISTER_ENV, ProfileCommand, _output_base, _parse_options
from jlprof.nsys.locate import (
    _REPORT_SUFFIXES,
    INSTALL_HINT,
    NsysFailed,
    NsysInfo,
    NsysNotFound,
    Progress,
    _is_progress,
    _last_lines,
)
from jlprof.nsys.qdstrm import import_qdstrm
from jlprof.nsys.session import agents_hint
from jlprof.nsys.tool import IMPORTER_NOTE, _is_importer_noise, start_window


@dataclass
class ProfileResult:
    """What one ``nsys profile`` run left behind."""

    returncode: int
    """Exit status of nsys, which is the profiled program's own exit status."""
    reports: list[Path]
    """``.nsys-rep`` files, one per capture range, ready for :func:`ensure_sqlite`."""
    recordings: list[Path] = field(default_factory=list)
    """Raw ``.qdstrm`` files nsys left (Debian build); kept, never deleted."""
    output_tail: list[str] = field(default_factory=list)
    timed_out: bool = False
    """nsys was stopped by ``timeout``; the reports hold what it had recorded by then."""


def _generated_paths(lines: Iterable[str]) -> list[Path]:
    """Files nsys lists under ``Generated:`` when it exits (the truth, even after a fallback)."""
    paths: list[Path] = []
    in_block = False
    for line in lines:
        if line.strip() == "Generated:":
            in_block = True
        elif in_block and line[:1].isspace() and line.strip():
            paths.append(Path(line.strip()))
        else:
            in_block = False
    return paths


def _existing_outputs(base: Path) -> list[Path]:
    if "%" in base.name:  # nsys substitutes %p, %h, %q{VAR}: cannot know the name in advance
        return []
    found = []
    for suffix in (".nsys-rep", ".qdstrm"):
        found += [base.with_name(base.name + suffix)]
        found += [Path(p) for p in glob.glob(glob.escape(str(base)) + ".[0-9]*" + suffix)]
    return [p for p in found if p.exists()]


def run_profile(
    cmd: ProfileCommand | Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    on_output: Callable[[str], None] | None = None,
    progress: Progress | None = None,
    nsys: NsysInfo | None = None,
    timeout: float | None = None,
) -> ProfileResult:
    """Run ``nsys profile`` (no shell), stream its output, and make sure ``.nsys-rep`` files exist.

    ``cmd`` is a :class:`ProfileCommand` or a plain argv list. nsys and program output go line by
    line to ``on_output`` (default: this process's stdout). When nsys leaves only a ``.qdstrm``
    (Debian's build cannot find its importer) it is imported here; NVIDIA's builds did it already.
    Ctrl-C is passed on to nsys, which then stops collecting and writes what it has; so is
    ``timeout`` (seconds), after which a hung nsys and its agent are killed.
    """
    argv, extra_env, base, force, nsys = _command_parts(cmd, nsys)
    say = progress or (lambda _msg: None)
    show = on_output or (lambda line: print(line, flush=True))
    if base is not None:
        _refuse_existing(base, force)
        base.parent.mkdir(parents=True, exist_ok=True)

    say(f"Profiling with nsys: {shlex.join(argv)}")
    started = time.time()
    returncode, lines, timed_out = _stream(
        argv, {**os.environ, **extra_env, **(env or {})}, cwd, show, say, timeout
    )
    generated = _generated_reports(lines, base, started)
    if not generated:
        why = f"stopped after {timeout:.0f} s" if timed_out else f"exit {returncode}"
        raise NsysFailed(
            f"nsys profile wrote no report ({why}): {_last_lines(lines)}{agents_hint()}", lines
        )
    reports, recordings = _imported(generated, lines, started, force, nsys, say)
    return ProfileResult(returncode, reports, recordings, lines[-40:], timed_out)


def _command_parts(
    cmd: ProfileCommand | Sequence[str], nsys: NsysInfo | None
) -> tuple[list[str], dict[str, str], Path | None, bool, NsysInfo | None]:
    """argv, extra environment, output base, force and nsys of a command or a plain argv."""
    if isinstance(cmd, str):
        raise TypeError("cmd must be an argv list or a ProfileCommand, never a shell string")
    if isinstance(cmd, ProfileCommand):
        return cmd.argv, cmd.env, cmd.output_base, cmd.force, nsys or cmd.nsys
    argv = [os.fspath(a) for a in cmd]
    start = argv.index("profile") + 1 if "profile" in argv else 1
    opts = {opt.name: opt.value for opt in _parse_options(argv[start:])[0]}
    base = _output_base(opts["output"]) if opts.get("output") else None
    force = (opts.get("force-overwrite") or "false").lower() in ("true", "1", "yes")
    extra_env = dict(NVTX_REGISTER_ENV) if opts.get("capture-range") == "nvtx" else {}
    return argv, extra_env, base, force, nsys


def _refuse_existing(base: Path, force: bool) -> None:
    existing = [] if force else _existing_outputs(base)
    if existing:
        raise JlprofError(
            f"{existing[0]} already exists: pass force (-f true) to overwrite it "
            "or choose another output name"
        )


def _stream(
    argv: list[str],
    env: dict[str, str],
    cwd: str | os.PathLike[str] | None,
    show: Callable[[str], None],
    say: Progress,
    timeout: float | None,
) -> tuple[int, list[str], bool]:
    """Run nsys, showing its output as it comes; Ctrl-C and ``timeout`` stop it cleanly.
    Returns the exit status, the last 200 output lines and whether the timeout fired."""
    tail: deque[str] = deque(maxlen=200)
    try:
        with start_window():  # one nsys session starts at a time (2022.4 hangs on two)
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                text=True,
                errors="replace",
                bufsize=1,
            )
    except FileNotFoundError:
        raise NsysNotFound(f"cannot run {argv[0]}: no such program; {INSTALL_HINT}") from None
    assert proc.stdout is not None
    fired = threading.Event()

    def on_timeout() -> None:
        fired.set()
        _stop_nsys(proc, say)

    timer = threading.Timer(timeout, on_timeout) if timeout else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            tail.append(line)
            if (not _is_progress(line) or "100%" in line) and not _is_importer_noise(line):
                show(line)
        returncode = proc.wait()
    except KeyboardInterrupt:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        with contextlib.suppress(KeyboardInterrupt):
            proc.wait()
        raise
    finally:
        if timer is not None:
            timer.cancel()
            timer.join()  # let a stop in progress finish its clean-up
    return returncode, list(tail), fired.is_set()


def _generated_reports(lines: list[str], base: Path | None, started: float) -> list[Path]:
    """The files this run wrote: as nsys named them, else the new ones at the output base."""
    refused = next((ln for ln in lines if ln.startswith("Failed to create")), None)
    generated = [p for p in _generated_paths(lines) if p.exists()]
    if refused:
        where = f"; nsys wrote {generated[0]} instead" if generated else ""
        raise JlprofError(f"nsys: {refused.strip()} (pass force (-f true) to overwrite){where}")
    if not generated and base is not None:
        generated = [p for p in _existing_outputs(base) if p.stat().st_mtime >= started - 1]
    return generated


def _imported(
    generated: list[Path],
    lines: list[str],
    started: float,
    force: bool,
    nsys: NsysInfo | None,
    say: Progress,
) -> tuple[list[Path], list[Path]]:
    """The reports (each .qdstrm imported unless nsys did it) and the .qdstrm recordings."""
    reports: list[Path] = []
    recordings: list[Path] = []
    for path in generated:
        if path.suffix == ".qdstrm":
            recordings.append(path)
            rep = path.with_suffix(".nsys-rep")
            if rep.exists() and rep.stat().st_mtime >= started - 1:
                reports.append(rep)  # NVIDIA's nsys imported it (and normally removes the .qdstrm)
            else:
                if not recordings[:-1] and any(map(_is_importer_noise, lines)):
                    say(IMPORTER_NOTE)  # once, before the first import
                reports.append(import_qdstrm(path, force=force, nsys=nsys, progress=say))
        elif path.suffix in _REPORT_SUFFIXES and path not in reports:
            reports.append(path)
    return reports, recordings


def _stop_nsys(proc: subprocess.Popen[str], say: Progress, grace: float = 20.0) -> None:
    """Ask nsys to stop (SIGINT: it writes what it has), then kill it and the agent it started.

    The agent is a separate process (``nsys --start-agent --session-name=profile-APP-<nsys pid>``)
    that a hung nsys leaves spinning even when nsys itself obeys SIGINT; it is found by that pid.
    """
    if proc.poll() is not None:
        return
    say("nsys is still running after the time limit: stopping it")
    agents = _agents_of(proc.pid)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
    time.sleep(2)  # a healthy agent exits with nsys; check again so a reused pid is never hit
    for pid in set(agents) & set(_agents_of(proc.pid)):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _agents_of(nsys_pid: int) -> list[int]:
    """Process ids of the nsys agents serving the nsys process ``nsys_pid`` (Linux /proc)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                args = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            session = [a for a in args if a.startswith(b"--session-name=profile-")]
            if b"--start-agent" in args and session and session[0].endswith(b"-%d" % nsys_pid):
                found.append(int(entry.name))
    return found
