"""Building ``nsys profile`` command lines: the options nsys 2022.4 knows, checked before nsys
runs."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jlprof.errors import JlprofError
from jlprof.nsys.locate import _REPORT_SUFFIXES, NsysInfo, _info

DEFAULT_TRACE: tuple[str, ...] = ("cuda", "nvtx", "osrt")
"""APIs traced by default: DLProf's ``-t cuda,nvtx`` plus OS runtime calls (I/O and waits)."""

DL_LIBRARY_TRACE: tuple[str, ...] = ("cudnn", "cublas")

NVTX_REGISTER_ENV = {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
"""Without this, an NVTX capture range only triggers on registered strings, which ``nvtx`` and
PyTorch do not use for range names."""


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
    gpu_metrics: bool = False,
) -> ProfileCommand:
    """Build the ``nsys profile`` argv that records ``app`` to ``output`` (.qdstrm/.nsys-rep).

    CPU context-switch tracing is off by default (``cpuctxsw="none"``): jlprof does not use it, and
    with it nsys 2022.4 intermittently never finishes (its agent spins after the program exits;
    1 run in 8 here, more under load). ``sample="none"`` is DLProf's default too.

    ``nsys_opts`` (DLProf's ``--nsys_opts``; a string is split with :func:`shlex.split`) may replace
    the defaults (``-t``, ``-s``) and add any other nsys option, but not one jlprof sets itself:
    the output, ``--export`` (jlprof exports), ``-f`` (use ``force``), ``--command-file`` (its
    contents cannot be checked), and the capture range, delay or duration when given here.
    ``gpu_metrics``: also sample GPU metrics on every GPU (``--gpu-metrics-device=all``), unless
    ``nsys_opts`` chooses the devices itself.
    """
    app = _program(app)
    base = _output_base(output)
    user = _user_options(nsys_opts)
    user_set = {opt.name: opt for opt in user}
    controlled = _controlled(
        base, force, capture_range, nvtx_capture, capture_range_end, delay, duration
    )
    argv = _controlled_argv(controlled, user, user_set, base)
    traced, defaults = _default_argv(user_set, trace, trace_dl_libraries, sample, cpuctxsw)
    argv += defaults
    if gpu_metrics and not {"gpu-metrics-device", "gpu-metrics-devices"} & set(user_set):
        argv += ["--gpu-metrics-device=all"]
    effective_range = _check_capture_tracing(capture_range, user_set, traced)

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


def _program(app: Sequence[str]) -> list[str]:
    """The program to profile as an argv list of strings, checked."""
    if isinstance(app, str):
        raise TypeError("app must be an argv list such as ['python', 'train.py'], not a string")
    app = [os.fspath(a) for a in app]
    if not app:
        raise JlprofError("no program to profile: give the command to run after the options")
    if app[0].startswith("-"):
        raise JlprofError(f"the program to profile cannot start with '-' ({app[0]!r})")
    return app


def _user_options(nsys_opts: str | Sequence[str] | None) -> list[_Opt]:
    """``--nsys_opts`` parsed into nsys options; a stray word (a program) is refused."""
    user_tokens = shlex.split(nsys_opts) if isinstance(nsys_opts, str) else list(nsys_opts or ())
    user, stray = _parse_options(user_tokens)
    if stray:
        raise JlprofError(
            f"--nsys_opts may hold only nsys options, found {shlex.join(stray)!r}: "
            "give the program to profile separately"
        )
    return user


def _controlled(
    base: Path,
    force: bool,
    capture_range: str | None,
    nvtx_capture: str | None,
    capture_range_end: str | None,
    delay: float | None,
    duration: float | None,
) -> list[tuple[str, str | None, str]]:
    """What jlprof controls: (nsys option, value jlprof passes, jlprof option to use instead)."""
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
    return controlled


def _controlled_argv(
    controlled: list[tuple[str, str | None, str]],
    user: list[_Opt],
    user_set: dict[str, _Opt],
    base: Path,
) -> list[str]:
    """jlprof's own options; a user option that would change one of them is refused."""
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
    return argv


def _default_argv(
    user_set: dict[str, _Opt],
    trace: Sequence[str],
    trace_dl_libraries: bool,
    sample: str,
    cpuctxsw: str,
) -> tuple[list[str], list[str]]:
    """The traced APIs, and the defaults (-t, -s, --cpuctxsw) the user's options leave."""
    argv: list[str] = []
    if "trace" in user_set:
        traced = (user_set["trace"].value or "").split(",")
    else:
        traced = list(dict.fromkeys([*trace, *(DL_LIBRARY_TRACE if trace_dl_libraries else ())]))
        argv += ["--trace=" + (",".join(traced) or "none")]
    if "sample" not in user_set:
        argv += [f"--sample={sample}"]
    if "cpuctxsw" not in user_set:
        argv += [f"--cpuctxsw={cpuctxsw}"]
    return traced, argv


def _check_capture_tracing(
    capture_range: str | None, user_set: dict[str, _Opt], traced: list[str]
) -> str | None:
    """The capture range in effect (jlprof's or the user's); it must be traced."""
    effective_range = capture_range
    if effective_range is None and "capture-range" in user_set:
        effective_range = user_set["capture-range"].value
    if effective_range == "nvtx" and "nvtx" not in traced:
        raise JlprofError("an NVTX capture range needs NVTX tracing: add nvtx to -t/--trace")
    if effective_range == "cudaProfilerApi" and "cuda" not in traced:
        raise JlprofError("a cudaProfilerApi capture range needs CUDA tracing: add cuda to -t")
    return effective_range
