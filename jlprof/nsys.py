"""Find and drive the Nsight Systems CLI: ``nsys profile``, .qdstrm import, SQLite export, stats.

nsys differs by build and by version, and this module absorbs that so nothing else has to:

* Debian's ``nsight-systems`` package (2022.4) writes a ``.qdstrm`` and cannot find its own
  importer; NVIDIA's builds import by themselves. :func:`run_profile` finishes the import
  when nsys did not.
* ``nsys stats`` reports were renamed in 2023 (``gpukernsum`` → ``cuda_gpu_kern_sum``) and their CSV
  headers gained units (``Time(%)`` → ``Time (%)``); :func:`run_stats` accepts either name.

Only the standard library is used, so the profiled sidecar kernel and plain scripts can import it.
Every command is an argv list handed to :mod:`subprocess` without a shell; files the user recorded
are never deleted or overwritten unless ``force`` is given.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import hashlib
import io
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jlprof.errors import JlprofError

Progress = Callable[[str], None]
"""Receives one human-readable line per step (``"Importing r.qdstrm"``); jlprof's own messages."""

INSTALL_HINT = (
    "install Nsight Systems: on Debian add 'contrib non-free' to the apt sources and run "
    "'apt-get install nsight-systems', or use NVIDIA's installer "
    "(https://developer.nvidia.com/nsight-systems); or set JLPROF_NSYS to the nsys binary"
)

DEFAULT_TRACE: tuple[str, ...] = ("cuda", "nvtx", "osrt")
"""APIs traced by default: DLProf's ``-t cuda,nvtx`` plus OS runtime calls (I/O and waits)."""

DL_LIBRARY_TRACE: tuple[str, ...] = ("cudnn", "cublas")

NVTX_REGISTER_ENV = {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
"""Without this, an NVTX capture range only triggers on registered strings, which ``nvtx`` and
PyTorch do not use for range names."""

_SEARCH_DIRS: tuple[str, ...] = (
    "/usr/lib/nsight-systems/bin",
    "/opt/nvidia/nsight-systems/*/bin",
    "/opt/nvidia/nsight-systems-cli/*/bin",
    "/usr/local/cuda/bin",
)
_IMPORTER = "QdstrmImporter"
_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
_SQLITE_MAGIC = b"SQLite format 3\x00"


class NsysNotFound(JlprofError):
    """nsys (or the part of it a step needs) is not installed where jlprof can find it."""


class NsysFailed(JlprofError):
    """nsys ran and failed; the message ends with its last output lines, ``output`` has more."""

    def __init__(self, message: str, output: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.output = list(output)


# --------------------------------------------------------------------------------------------------
# Finding nsys


@dataclass(frozen=True)
class NsysInfo:
    """An nsys installation: the CLI, its version and the ``.qdstrm`` importer next to it."""

    path: Path
    version: tuple[int, ...]
    version_string: str
    importer: Path | None = None

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version)) or self.version_string


_info_cache: dict[tuple[str, int], NsysInfo] = {}


def find_nsys(*, search_dirs: Sequence[str] | None = None) -> NsysInfo:
    """Locate nsys: ``$JLPROF_NSYS``, then ``PATH``, then the usual install folders.

    ``search_dirs`` replaces the install folders searched after ``PATH`` (glob patterns allowed),
    e.g. ``()`` to rely on ``PATH`` alone. A ``JLPROF_NSYS`` that points nowhere is an error rather
    than a silent fallback, so a typo there never profiles with another nsys.
    """
    configured = os.environ.get("JLPROF_NSYS", "").strip()
    if configured:
        path = _nsys_in(Path(configured).expanduser())
        if path is None:
            raise NsysNotFound(
                f"JLPROF_NSYS={configured} is not an nsys executable: point it at the nsys binary "
                f"(or its bin folder), or unset it to search PATH; to get nsys, {INSTALL_HINT}"
            )
        return _describe(path)
    on_path = shutil.which("nsys")
    if on_path:
        return _describe(Path(on_path))
    for pattern in _SEARCH_DIRS if search_dirs is None else search_dirs:
        for folder in sorted(glob.glob(pattern), key=_natural_key, reverse=True):
            path = _nsys_in(Path(folder))
            if path is not None:
                return _describe(path)
    raise NsysNotFound(f"nsys not found on PATH nor in the usual install folders; {INSTALL_HINT}")


def _natural_key(text: str) -> list[object]:
    """Sort ``2024.10`` after ``2024.9``, so the newest install in /opt wins."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _nsys_in(candidate: Path) -> Path | None:
    """``candidate`` if it is an executable nsys, else ``nsys`` in that folder or its ``bin``."""
    options = [candidate] if candidate.is_file() else [candidate / "nsys", candidate / "bin/nsys"]
    for path in options:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def _describe(path: Path) -> NsysInfo:
    """Ask nsys its version (cached per binary) and find the importer that ships with it."""
    try:
        stamp = path.stat().st_mtime_ns
    except OSError as exc:
        raise NsysNotFound(f"cannot use nsys at {path}: {exc.strerror}; {INSTALL_HINT}") from None
    key = (str(path), stamp)
    if key not in _info_cache:
        try:
            proc = subprocess.run(
                [str(path), "--version"], capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise NsysNotFound(f"nsys at {path} does not run ({exc}); {INSTALL_HINT}") from None
        text = (proc.stdout + proc.stderr).strip()
        match = re.search(r"(\d{4})\.(\d+)(?:\.(\d+))?(?:\.(\d+))?", text)
        if proc.returncode != 0 or match is None:
            raise NsysNotFound(
                f"{path} --version failed (exit {proc.returncode}: {_last_lines(text)}); "
                f"{INSTALL_HINT}"
            )
        version = tuple(int(g) for g in match.groups() if g is not None)
        line = next((ln for ln in text.splitlines() if match.group(0) in ln), text)
        _info_cache[key] = NsysInfo(path, version, line.strip(), _find_importer(path))
    return _info_cache[key]


def _find_importer(nsys_path: Path) -> Path | None:
    """QdstrmImporter lives in ``host-linux-*`` beside nsys's ``bin``/``target-linux-*`` folder.

    The lookup follows the chain of symlinks because Debian's ``/usr/bin/nsys`` links through
    ``/usr/lib/nsight-systems/bin`` (with ``host-linux-x64`` beside it) to a folder that has none.
    """
    hops: list[Path] = []
    current = nsys_path
    for _ in range(16):
        hops.append(current)
        if not current.is_symlink():
            break
        current = current.parent / os.readlink(current)
    hops.append(nsys_path.resolve())
    for hop in hops:
        root = hop.parent.parent
        for candidate in [hop.parent / _IMPORTER, *sorted(root.glob(f"host-*/{_IMPORTER}"))]:
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return Path(os.path.normpath(candidate))
    fixed = Path("/usr/lib/nsight-systems/host-linux-x64") / _IMPORTER
    if fixed.is_file():
        return fixed
    on_path = shutil.which(_IMPORTER)
    return Path(on_path) if on_path else None


def _info(nsys: NsysInfo | None) -> NsysInfo:
    return nsys if nsys is not None else find_nsys()


# --------------------------------------------------------------------------------------------------
# Building `nsys profile` command lines

# Long options of `nsys profile` 2022.4 (newer ones pass through unchecked). Like nsys's own parser,
# jlprof accepts an unambiguous prefix (`--out` = `--output`), so a shortened flag cannot slip past.
_PROFILE_OPTIONS = (  # noqa: SIM905 (a list of 55 names reads better as one string)
    "backtrace capture-range capture-range-end command-file cpu-core-events cpuctxsw "
    "cuda-flush-interval cuda-graph-trace cuda-memory-usage cuda-um-cpu-page-faults "
    "cuda-um-gpu-page-faults cudabacktrace duration duration-frames env-var event-sample "
    "event-sampling-frequency export force-overwrite ftrace ftrace-keep-user-config "
    "gpu-metrics-device gpu-metrics-frequency gpu-metrics-set gpuctxsw help hotkey-capture "
    "kill mpi-impl inherit-environment nic-metrics nvtx-domain-include nvtx-domain-exclude "
    "output opengl-gpu-workload os-events osrt-backtrace-stack-size osrt-backtrace-threshold "
    "osrt-threshold nvtx-capture resolve-symbols run-as sample samples-per-backtrace "
    "sampling-period session-new start-frame-index stats trace trace-fork-before-exec "
    "vulkan-gpu-workload show-output wait stop-on-exit delay"
).split()
_SHORT_OPTIONS = {
    "b": "backtrace",
    "c": "capture-range",
    "d": "duration",
    "e": "env-var",
    "f": "force-overwrite",
    "h": "help",
    "n": "inherit-environment",
    "o": "output",
    "p": "nvtx-capture",
    "s": "sample",
    "t": "trace",
    "w": "show-output",
    "x": "stop-on-exit",
    "y": "delay",
}
_CAPTURE_RANGES = ("none", "cudaProfilerApi", "nvtx", "hotkey")
_CAPTURE_RANGE_END = re.compile(r"none|stop|stop-shutdown|repeat(:\d+)?|repeat-shutdown:\d+")


@dataclass(frozen=True)
class _Opt:
    """One option as the user wrote it: canonical long name (or the raw flag), value, tokens."""

    name: str
    value: str | None
    tokens: tuple[str, ...]


def _canonical(flag: str) -> str:
    """``-o``/``--out``/``--output`` → ``output``; unknown or ambiguous flags come back as given."""
    if not flag.startswith("--"):
        return _SHORT_OPTIONS.get(flag[1:], flag)
    name = flag[2:]
    if name in _PROFILE_OPTIONS:
        return name
    matches = [option for option in _PROFILE_OPTIONS if option.startswith(name)]
    return matches[0] if len(matches) == 1 else flag


def _parse_options(tokens: Sequence[str]) -> tuple[list[_Opt], list[str]]:
    """Split ``nsys profile`` options from the program that follows them.

    Every ``nsys profile`` option takes a value (``--opt=v``, ``--opt v``, ``-ov`` or ``-o v``), so
    the first token that is not an option or an option's value starts the program.
    """
    options: list[_Opt] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("-") or token in ("-", "--"):
            break
        if token.startswith("--"):
            flag, eq, value = token.partition("=")
            attached: str | None = value if eq else None
        else:
            flag, rest = token[:2], token[2:]
            attached = rest.removeprefix("=") if rest else None
        if attached is None and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
            attached = tokens[i + 1]
            options.append(_Opt(_canonical(flag), attached, (token, attached)))
            i += 2
            continue
        options.append(_Opt(_canonical(flag), attached, (token,)))
        i += 1
    return options, list(tokens[i:])


@dataclass(frozen=True)
class ProfileCommand:
    """An ``nsys profile`` invocation: argv (no shell), extra environment and where output lands."""

    argv: list[str]
    env: dict[str, str]
    output_base: Path
    """Report path without extension; nsys appends ``.qdstrm``/``.nsys-rep`` (``.N.`` per range)."""
    force: bool
    nsys: NsysInfo | None = None


def _output_base(output: str | os.PathLike[str]) -> Path:
    base = Path(output).expanduser()
    if base.suffix in (*_REPORT_SUFFIXES, ".qdstrm", ".sqlite"):
        base = base.with_suffix("")
    return base


def _whole_seconds(what: str, value: float) -> str:
    """nsys takes whole seconds only (``--duration 0.5`` is "Illegal --duration argument")."""
    if value < 0 or value != int(value):
        raise JlprofError(f"{what} must be a whole, non-negative number of seconds, not {value}")
    return str(int(value))


def profile_command(
    app: Sequence[str],
    output: str | os.PathLike[str],
    *,
    trace: Sequence[str] = DEFAULT_TRACE,
    trace_dl_libraries: bool = False,
    sample: str = "none",
    cpuctxsw: str = "none",
    capture_range: str | None = None,
    nvtx_capture: str | None = None,
    capture_range_end: str | None = None,
    delay: float | None = None,
    duration: float | None = None,
    force: bool = False,
    nsys_opts: str | Sequence[str] | None = None,
    nsys: NsysInfo | None = None,
) -> ProfileCommand:
    """Build the ``nsys profile`` argv that records ``app`` to ``output`` (.qdstrm/.nsys-rep).

    CPU context-switch tracing is off by default (``cpuctxsw="none"``): jlprof does not use it, and
    with it nsys 2022.4 intermittently never finishes (its agent spins after the program exits;
    1 run in 8 here, more under load). ``sample="none"`` is DLProf's default too.

    ``nsys_opts`` (DLProf's ``--nsys_opts``; a string is split with :func:`shlex.split`) may replace
    the defaults (``-t``, ``-s``) and add any other nsys option, but not one jlprof sets itself:
    the output, ``--export`` (jlprof exports), ``-f`` (use ``force``), ``--command-file`` (its
    contents cannot be checked), and the capture range, delay or duration when given here.
    """
    if isinstance(app, str):
        raise TypeError("app must be an argv list such as ['python', 'train.py'], not a string")
    app = [os.fspath(a) for a in app]
    if not app:
        raise JlprofError("no program to profile: give the command to run after the options")
    if app[0].startswith("-"):
        raise JlprofError(f"the program to profile cannot start with '-' ({app[0]!r})")
    base = _output_base(output)
    user_tokens = shlex.split(nsys_opts) if isinstance(nsys_opts, str) else list(nsys_opts or ())
    user, stray = _parse_options(user_tokens)
    if stray:
        raise JlprofError(
            f"--nsys_opts may hold only nsys options, found {shlex.join(stray)!r}: "
            "give the program to profile separately"
        )
    user_set = {opt.name: opt for opt in user}

    # What jlprof controls: (nsys option, value jlprof passes, jlprof option to use instead).
    controlled: list[tuple[str, str | None, str]] = [
        ("output", str(base), "the output/--nsys_base_name option"),
        ("force-overwrite", "true" if force else "false", "force (-f)"),
    ]
    if capture_range is not None:
        if capture_range not in _CAPTURE_RANGES:
            raise JlprofError(
                f"capture range must be one of {', '.join(_CAPTURE_RANGES)}, not {capture_range!r}"
            )
        if capture_range == "nvtx" and not nvtx_capture:
            raise JlprofError("an NVTX capture range needs the name of the range (nvtx_capture)")
        controlled.append(("capture-range", capture_range, "capture_range"))
        controlled.append(("nvtx-capture", nvtx_capture, "nvtx_capture"))
        controlled.append(("capture-range-end", capture_range_end, "capture_range_end"))
    elif nvtx_capture or capture_range_end:
        raise JlprofError("nvtx_capture and capture_range_end need capture_range to be set")
    if capture_range_end is not None and not _CAPTURE_RANGE_END.fullmatch(capture_range_end):
        raise JlprofError(
            f"capture range end must be none, stop, stop-shutdown, repeat[:N] or "
            f"repeat-shutdown:N, not {capture_range_end!r}"
        )
    if delay is not None:
        controlled.append(("delay", _whole_seconds("delay", delay), "delay (-y)"))
    if duration is not None:
        controlled.append(("duration", _whole_seconds("duration", duration), "duration (-d)"))

    for opt in user:
        if opt.name in ("export", "command-file"):
            why = "jlprof exports the SQLite itself" if opt.name == "export" else "unchecked"
            raise JlprofError(f"--nsys_opts cannot use {opt.tokens[0]} ({why})")
    argv: list[str] = []
    for name, value, instead in controlled:
        given = user_set.get(name)
        same = given is not None and (
            given.value == value
            or (name == "output" and given.value is not None and _output_base(given.value) == base)
        )
        if given is not None and not same:
            raise JlprofError(
                f"--nsys_opts {' '.join(given.tokens)} conflicts with jlprof's own --{name}: "
                f"set it with {instead} instead"
            )
        if value is not None:
            argv += [f"--{name}={value}"]

    if "trace" in user_set:
        traced = (user_set["trace"].value or "").split(",")
    else:
        traced = list(dict.fromkeys([*trace, *(DL_LIBRARY_TRACE if trace_dl_libraries else ())]))
        argv += ["--trace=" + (",".join(traced) or "none")]
    if "sample" not in user_set:
        argv += [f"--sample={sample}"]
    if "cpuctxsw" not in user_set:
        argv += [f"--cpuctxsw={cpuctxsw}"]

    effective_range = capture_range
    if effective_range is None and "capture-range" in user_set:
        effective_range = user_set["capture-range"].value
    if effective_range == "nvtx" and "nvtx" not in traced:
        raise JlprofError("an NVTX capture range needs NVTX tracing: add nvtx to -t/--trace")
    if effective_range == "cudaProfilerApi" and "cuda" not in traced:
        raise JlprofError("a cudaProfilerApi capture range needs CUDA tracing: add cuda to -t")

    # User options that jlprof also sets with the same value were already emitted once.
    passed = [t for opt in user if opt.name not in {c[0] for c in controlled} for t in opt.tokens]
    info = _info(nsys)
    return ProfileCommand(
        argv=[str(info.path), "profile", *argv, *passed, *app],
        env=dict(NVTX_REGISTER_ENV) if effective_range == "nvtx" else {},
        output_base=base,
        force=force,
        nsys=info,
    )


# --------------------------------------------------------------------------------------------------
# Running nsys and its helpers

_PROGRESS_BAR = re.compile(r"\[[= ]*\d+%[= ]*\]")


_IMPORTER_NOISE = ("Importer error status:", "Unable to retrieve the importer version")
IMPORTER_NOTE = (
    "nsys could not run its QdstrmImporter (Debian's package leaves it off nsys's search path); "
    "jlprof imports the .qdstrm itself"
)


def _is_importer_noise(line: str) -> bool:
    """nsys's two lines about its missing importer: replaced by :data:`IMPORTER_NOTE`."""
    return line.startswith(_IMPORTER_NOISE)


def _is_progress(line: str) -> bool:
    """nsys redraws progress bars with ``\\r``; each redraw arrives as a line of its own."""
    return bool(_PROGRESS_BAR.search(line))


def _last_lines(text: str | Iterable[str], count: int = 3) -> str:
    """The last meaningful output lines on one line, for an error message."""
    lines = text.splitlines() if isinstance(text, str) else list(text)
    kept = [ln.strip() for ln in lines if ln.strip() and not _is_progress(ln)]
    return " | ".join(kept[-count:]) or "no output"


def _run_tool(
    argv: Sequence[str], *, what: str, timeout: float | None = None, check: bool = True
) -> list[str]:
    """Run an nsys helper to the end: its output lines, or :class:`NsysFailed` naming ``what``."""
    try:
        proc = subprocess.run(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise NsysNotFound(f"{argv[0]} is gone; {INSTALL_HINT}") from None
    except subprocess.TimeoutExpired:
        raise NsysFailed(f"{what} did not finish within {timeout:.0f} s") from None
    lines = proc.stdout.splitlines()
    if check and proc.returncode != 0:
        raise NsysFailed(f"{what} failed (exit {proc.returncode}): {_last_lines(lines)}", lines)
    return lines


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
    if isinstance(cmd, str):
        raise TypeError("cmd must be an argv list or a ProfileCommand, never a shell string")
    if isinstance(cmd, ProfileCommand):
        argv, extra_env, base, force = cmd.argv, cmd.env, cmd.output_base, cmd.force
        nsys = nsys or cmd.nsys
    else:
        argv = [os.fspath(a) for a in cmd]
        start = argv.index("profile") + 1 if "profile" in argv else 1
        opts = {opt.name: opt.value for opt in _parse_options(argv[start:])[0]}
        base = _output_base(opts["output"]) if opts.get("output") else None
        force = (opts.get("force-overwrite") or "false").lower() in ("true", "1", "yes")
        extra_env = dict(NVTX_REGISTER_ENV) if opts.get("capture-range") == "nvtx" else {}
    say = progress or (lambda _msg: None)
    show = on_output or (lambda line: print(line, flush=True))
    if base is not None:
        existing = [] if force else _existing_outputs(base)
        if existing:
            raise JlprofError(
                f"{existing[0]} already exists: pass force (-f true) to overwrite it "
                "or choose another output name"
            )
        base.parent.mkdir(parents=True, exist_ok=True)

    say(f"Profiling with nsys: {shlex.join(argv)}")
    started = time.time()
    tail: deque[str] = deque(maxlen=200)
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **extra_env, **(env or {})},
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
    timed_out = fired.is_set()

    lines = list(tail)
    refused = next((ln for ln in lines if ln.startswith("Failed to create")), None)
    generated = [p for p in _generated_paths(lines) if p.exists()]
    if refused:
        where = f"; nsys wrote {generated[0]} instead" if generated else ""
        raise JlprofError(f"nsys: {refused.strip()} (pass force (-f true) to overwrite){where}")
    if not generated and base is not None:
        generated = [p for p in _existing_outputs(base) if p.stat().st_mtime >= started - 1]
    if not generated:
        why = f"stopped after {timeout:.0f} s" if timed_out else f"exit {returncode}"
        raise NsysFailed(f"nsys profile wrote no report ({why}): {_last_lines(lines)}", lines)

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
    return ProfileResult(returncode, reports, recordings, lines[-40:], timed_out)


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


def _mark_derived(target: Path, source: Path) -> None:
    """Date ``target`` no earlier than its source, so up-to-date checks cannot race the tools.

    QdstrmImporter appends to the ``.qdstrm`` while it writes the report, leaving the two mtimes a
    few microseconds apart in either order.
    """
    newest = max(target.stat().st_mtime_ns, source.stat().st_mtime_ns)
    os.utime(target, ns=(time.time_ns(), newest))


def _is_current(target: Path, source: Path) -> bool:
    return target.exists() and target.stat().st_mtime_ns >= source.stat().st_mtime_ns


def _cache_path(source: Path, suffix: str) -> Path:
    """Where a derived file goes when the source's folder is read-only (shared data sets)."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jlprof" / "exports"
    digest = hashlib.sha1(str(source.resolve()).encode()).hexdigest()[:12]
    return root / f"{source.stem}-{digest}{suffix}"


def _derived_target(source: Path, suffix: str, out: str | os.PathLike[str] | None) -> Path:
    if out is not None:
        return Path(out).expanduser()
    if os.access(source.parent, os.W_OK):
        return source.with_suffix(suffix)
    return _cache_path(source, suffix)


def _check_input(path: str | os.PathLike[str]) -> Path:
    source = Path(path).expanduser()
    if not source.exists():
        raise JlprofError(f"{source}: no such file")
    if not source.is_file():
        raise JlprofError(f"{source}: not a file")
    return source


def _reuse_or_refuse(target: Path, source: Path, force: bool, progress: Progress) -> bool:
    """True when ``target`` can be used as is; refuses to replace a file jlprof may not own."""
    if force or not target.exists():
        return False
    if _is_current(target, source):
        progress(f"Using {target} (newer than {source.name})")
        return True
    if target.parent == _cache_path(source, target.suffix).parent:
        return False  # jlprof's own cache: stale entries are simply rebuilt
    raise JlprofError(
        f"{target} is older than {source}: pass force (-f true) to replace it, "
        "or remove it yourself"
    )


def import_qdstrm(
    path: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    force: bool = False,
    nsys: NsysInfo | None = None,
    progress: Progress | None = None,
) -> Path:
    """Turn a raw ``.qdstrm`` into a ``.nsys-rep`` beside it with NVIDIA's QdstrmImporter.

    Reuses an up-to-date report. The ``.qdstrm`` is kept. The report is written under a temporary
    name and renamed, so an interrupted import never leaves a report that looks complete.
    """
    say = progress or (lambda _msg: None)
    source = _check_input(path)
    if source.suffix != ".qdstrm":
        raise JlprofError(f"{source}: expected a .qdstrm recording")
    target = _derived_target(source, ".nsys-rep", out)
    if target.suffix != ".nsys-rep":
        raise JlprofError(f"{target}: the imported report must end in .nsys-rep")
    if _reuse_or_refuse(target, source, force, say):
        return target
    info = _info(nsys)
    if info.importer is None:
        raise NsysNotFound(
            f"cannot import {source}: QdstrmImporter was not found next to {info.path}; "
            "install the full Nsight Systems package (it ships host-linux-x64/QdstrmImporter)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.stem}.jlprof-{os.getpid()}.nsys-rep")
    say(f"Importing {source.name} -> {target.name}")
    try:
        _run_tool(
            [str(info.importer), "-i", str(source), "-o", str(partial)],
            what=f"importing {source} with {info.importer.name}",
        )
        if not partial.exists():
            raise NsysFailed(f"{info.importer.name} wrote no report for {source}")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    _mark_derived(target, source)
    return target


_NEWER_VERSION = re.compile(r"(\d{4})@(\d+)@(\d+)")


def export_sqlite(
    rep_path: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    force: bool = False,
    nsys: NsysInfo | None = None,
    progress: Progress | None = None,
) -> Path:
    """``nsys export --type sqlite`` of a .nsys-rep/.qdrep; refuses to overwrite without force.

    The export is written under a temporary name and renamed, so a half-written database is never
    mistaken for an up-to-date one later.
    """
    say = progress or (lambda _msg: None)
    source = _check_input(rep_path)
    if source.suffix not in _REPORT_SUFFIXES:
        raise JlprofError(f"{source}: expected an nsys report (.nsys-rep or .qdrep)")
    target = _derived_target(source, ".sqlite", out)
    if target.exists() and not force:
        raise JlprofError(f"{target} already exists: pass force (-f true) to overwrite it")
    info = _info(nsys)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.jlprof-{os.getpid()}.partial")
    say(f"Exporting {source.name} -> {target.name}")
    try:
        _run_tool(
            [
                str(info.path),
                "export",
                "--type",
                "sqlite",
                "--force-overwrite",
                "true",
                "--output",
                str(partial),
                str(source),
            ],
            what=f"nsys export of {source}",
        )
        if not partial.exists():
            raise NsysFailed(f"nsys export wrote nothing for {source}")
        os.replace(partial, target)
    except NsysFailed as exc:
        newer = _NEWER_VERSION.search(str(exc))
        if newer and tuple(map(int, newer.groups())) > info.version[:3]:
            made_by = ".".join(newer.groups())
            raise NsysFailed(
                f"{source} was recorded by nsys {made_by}, newer than this nsys "
                f"{info.version_text}: export it to SQLite with nsys {made_by} or later "
                "(nsys export --type sqlite) and pass the .sqlite file",
                exc.output,
            ) from None
        raise
    finally:
        partial.unlink(missing_ok=True)
    _mark_derived(target, source)
    return target


def ensure_sqlite(
    path: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    force: bool = False,
    nsys: NsysInfo | None = None,
    progress: Progress | None = None,
) -> Path:
    """Whatever nsys file the user has, the SQLite export to read.

    ``.sqlite`` is returned as is; ``.nsys-rep``/``.qdrep`` is exported next to it (or to ``out``;
    to ``~/.cache/jlprof`` when its folder is read-only) unless an up-to-date export is already
    there; ``.qdstrm`` is imported first. Nothing the user recorded is removed.
    """
    say = progress or (lambda _msg: None)
    source = _check_input(path)
    if source.suffix in (".sqlite", ".db", ".sqlite3"):
        with source.open("rb") as fh:
            if fh.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
                raise JlprofError(f"{source}: not an SQLite database")
        return source
    if source.suffix == ".qdstrm":
        source = import_qdstrm(source, force=force, nsys=nsys, progress=say)
    elif source.suffix not in _REPORT_SUFFIXES:
        raise JlprofError(
            f"{source}: not an nsys file (expected .sqlite, .nsys-rep, .qdrep or .qdstrm)"
        )
    target = _derived_target(source, ".sqlite", out)
    if _reuse_or_refuse(target, source, force, say):
        return target
    return export_sqlite(source, target, force=True, nsys=nsys, progress=say)


# --------------------------------------------------------------------------------------------------
# nsys stats

# 2022.4 name -> name since 2023.2 (the rename also added reports; unknown names pass through).
STATS_RENAMES: dict[str, str] = {
    "apigpusum": "cuda_api_gpu_sum",
    "cudaapisum": "cuda_api_sum",
    "cudaapitrace": "cuda_api_trace",
    "gpukernsum": "cuda_gpu_kern_sum",
    "gpumemsizesum": "cuda_gpu_mem_size_sum",
    "gpumemtimesum": "cuda_gpu_mem_time_sum",
    "gpusum": "cuda_gpu_sum",
    "gputrace": "cuda_gpu_trace",
    "kernexecsum": "cuda_kern_exec_sum",
    "kernexectrace": "cuda_kern_exec_trace",
    "nvtxgpuproj": "nvtx_gpu_proj_trace",
    "nvtxkernsum": "nvtx_kern_sum",
    "nvtxppsum": "nvtx_pushpop_sum",
    "nvtxpptrace": "nvtx_pushpop_trace",
    "nvtxsesum": "nvtx_startend_sum",
    "nvtxsum": "nvtx_sum",
    "openaccsum": "openacc_sum",
    "openmpevtsum": "openmp_sum",
    "osrtsum": "osrt_sum",
    "umcpupagefaults": "um_cpu_page_faults_sum",
    "unifiedmemory": "um_sum",
    "unifiedmemorytotals": "um_total_sum",
}
# Older CSV headers, mapped to the 2022.4 spelling once units are stripped.
_OLD_HEADERS = {"Average": "Avg", "Minimum": "Min", "Maximum": "Max", "Calls": "Num Calls"}
_UNIT_SUFFIX = re.compile(r"\s*\((?:%|ns|nsec|us|usec|ms|msec|s|sec|seconds|B|MB)\)$")

_reports_cache: dict[str, frozenset[str]] = {}


def stats_reports(nsys: NsysInfo | None = None) -> frozenset[str]:
    """Names of the ``nsys stats`` reports this nsys ships (``nsys stats --help-reports``)."""
    info = _info(nsys)
    key = str(info.path)
    if key not in _reports_cache:
        lines = _run_tool(
            [str(info.path), "stats", "--help-reports"],
            what="nsys stats --help-reports",
            check=False,  # 2022.4 lists the reports, then exits 1
        )
        names = {m.group(1) for ln in lines if (m := re.match(r"\s+([A-Za-z]\w*)\S* -- ", ln))}
        _reports_cache[key] = frozenset(names)
    return _reports_cache[key]


def _resolve_report(report: str, nsys: NsysInfo) -> str:
    """``report`` under the name this nsys knows it by; arguments (``:base``) are kept."""
    name, colon, args = report.partition(":")
    available = stats_reports(nsys)
    if name in available:
        return report
    renamed = {**STATS_RENAMES, **{new: old for old, new in STATS_RENAMES.items()}}
    alias = renamed.get(name)
    if alias in available:
        return alias + colon + args
    raise JlprofError(
        f"nsys {nsys.version_text} has no stats report {name!r}; it has: "
        + ", ".join(sorted(available))
    )


def stats_header(name: str) -> str:
    """A ``nsys stats`` CSV header without its unit, in the 2022.4 spelling (``Total Time``)."""
    bare = _UNIT_SUFFIX.sub("", name.strip())
    return _OLD_HEADERS.get(bare, bare)


def _convert(value: str) -> object:
    """Numbers as numbers (``nsys stats`` prints plain ``123`` and ``45.6``), all else as text."""
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    if re.fullmatch(r"-?\d+\.\d*(?:[eE][-+]?\d+)?", value):
        return float(value)
    return value


def run_stats(
    sqlite_path: str | os.PathLike[str],
    report: str,
    *,
    normalize: bool = False,
    nsys: NsysInfo | None = None,
    timeout: float | None = 1800,
) -> list[dict[str, object]]:
    """Rows of NVIDIA's own ``nsys stats -r REPORT`` as dicts, for checking jlprof against it.

    Keys are the CSV headers as nsys prints them (``Total Time (ns)``), or with ``normalize`` as
    :func:`stats_header` gives them (``Total Time``). A report that finds no data (nsys says
    ``SKIPPED``) gives ``[]``. ``report`` may use the 2022.4 or the 2023.2+ name.
    """
    info = _info(nsys)
    source = _check_input(sqlite_path)
    if source.suffix != ".sqlite":
        source = ensure_sqlite(source, nsys=info)
    resolved = _resolve_report(report, info)
    with tempfile.TemporaryDirectory(prefix="jlprof-stats-") as tmp:
        lines = _run_tool(
            [
                str(info.path),
                "stats",
                "--report",
                resolved,
                "--format",
                "csv",
                "--output",
                str(Path(tmp) / "out"),
                str(source),
            ],
            what=f"nsys stats --report {resolved} on {source}",
            timeout=timeout,
        )
        errors = [ln for ln in lines if ln.lstrip().startswith("ERROR")]
        written = sorted(Path(tmp).glob("*.csv"))
        if errors or not written:
            detail = _last_lines(errors or lines)
            raise NsysFailed(f"nsys stats --report {resolved} on {source} failed: {detail}", lines)
        text = written[0].read_text(encoding="utf-8", errors="replace")
    rows = list(csv.DictReader(io.StringIO(text)))
    key = stats_header if normalize else (lambda header: header)
    return [{key(k): _convert(v) for k, v in row.items() if k is not None} for row in rows]


__all__ = [
    "DEFAULT_TRACE",
    "DL_LIBRARY_TRACE",
    "INSTALL_HINT",
    "STATS_RENAMES",
    "NsysFailed",
    "NsysInfo",
    "NsysNotFound",
    "ProfileCommand",
    "ProfileResult",
    "ensure_sqlite",
    "export_sqlite",
    "find_nsys",
    "import_qdstrm",
    "profile_command",
    "run_profile",
    "run_stats",
    "stats_header",
    "stats_reports",
]
