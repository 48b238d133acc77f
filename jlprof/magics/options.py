"""``%%dlprof`` options: DLProf's flags (guide ch. 4, 10.1, 15) turned into a checked dataclass.

The options come from :mod:`jlprof.options` (the table the CLI is built from too), put on the
magic with IPython's ``magic_arguments`` so ``%dlprof?`` lists them; this module turns the
parsed namespace into :class:`RunOptions` and checks everything that can be checked before any
code runs, so a typo never costs a profiling run.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from jlprof.engine.analysis import MODES
from jlprof.errors import JlprofError
from jlprof.options import (  # the table's parsers
    DEFAULT_PROFILE_NAME,
    VERBOSITY,
    parse_bool,
    parse_list,
)

KERNEL_COMMANDS = ("status", "restart", "shutdown")
DEFAULT_NAME = "_dlprof"

# nsys flags that would break a long-lived capture session: the sidecar would stop after N
# seconds (duration), never start collecting (delay, hotkey/frames), or end the kernel.
_SESSION_BREAKERS = {
    "duration": "use %%dlprof --duration, which stops the capture, not the sidecar",
    "delay": "use %%dlprof --delay, which delays the capture within the cell",
    "hotkey-capture": "the capture range is jlprof's",
    "start-frame-index": "the capture range is jlprof's",
    "duration-frames": "the capture range is jlprof's",
    "kill": "the sidecar must outlive each capture",
    "stop-on-exit": "the sidecar must outlive each capture",
    "session-new": "jlprof names nsys sessions itself",
    "capture-range-end": "jlprof needs one report per captured cell (repeat)",
}


@dataclass
class RunOptions:
    """What one ``%%dlprof``/``%dlprof`` invocation asked for, checked."""

    key_node: str | None = None
    iter_start: int | None = None
    iter_stop: int | None = None
    reports: list[str] = field(default_factory=lambda: ["summary"])
    formats: list[str] = field(default_factory=lambda: ["csv"])
    output_path: Path | None = None
    profile_name: str = DEFAULT_PROFILE_NAME
    delay: float = 0.0
    duration: float | None = None
    nsys_opts: str = ""
    nsys_base_name: str = "nsys_profile"
    force: bool = False
    verbosity: str = "normal"
    mode: str | None = None  # None: from the trace (pytorch when it holds PyTorch markers)
    domains: list[str] | None = None
    setup: bool = False
    database: Path | None = None
    scheduler: str | None = None  # Dask scheduler for a job's ranks (--database=DIR)
    name: str = DEFAULT_NAME
    kernel: str | None = None
    nsys_opts_given: bool = False
    isolate_network: bool = False
    isolate_network_given: bool = False
    diff: tuple[Path, Path] | None = None  # --diff BASE NEW (docs/diff.md)
    base_iter_start: int | None = None
    base_iter_stop: int | None = None
    new_iter_start: int | None = None
    new_iter_stop: int | None = None
    regression_threshold: float | None = None
    ncu_report: Path | None = None  # an Nsight Compute report joined to the kernels
    ncu: str | None = None  # --ncu[=topN|REGEX]: re-run the cell under ncu (docs/kernels.md)
    gpu_metrics: bool = False  # nsys GPU metrics sampling asked for (in nsys_opts too)

    def says(self, level: str) -> bool:
        """True when messages of ``level`` are shown at this verbosity."""
        return VERBOSITY.index(self.verbosity) >= VERBOSITY.index(level)


def from_namespace(ns: argparse.Namespace, *, cell: bool) -> RunOptions:
    """Check the parsed arguments; raises :class:`JlprofError` with the fix in the message."""
    from jlprof.reports.writers import check_outputs

    words = list(getattr(ns, "command", None) or [])
    kernel = None
    if words:
        if cell:
            raise JlprofError(
                f"%%dlprof takes only options, not {' '.join(words)!r}: the cell body is "
                "the code to profile"
            )
        if words[0] != "kernel" or len(words) != 2 or words[1] not in KERNEL_COMMANDS:
            raise JlprofError(
                f"unknown %dlprof command {' '.join(words)!r}: use %dlprof kernel "
                f"{'|'.join(KERNEL_COMMANDS)}, or %dlprof --database=FILE [options]"
            )
        kernel = words[1]
    elif not cell and not ns.database and not ns.diff:
        raise JlprofError(
            "%dlprof needs --database=FILE (re-analyse a profile), --diff BASE NEW (compare "
            "two) or 'kernel status|restart|shutdown'; use %%dlprof around a cell to profile it"
        )
    if ns.diff and (cell or ns.database):
        raise JlprofError(
            "--diff BASE NEW compares two existing profiles: use it on the line magic, "
            "without --database (%dlprof --diff BASE NEW [options])"
        )
    if cell and ns.database:
        raise JlprofError(
            "--database re-analyses an existing profile: use it on the line magic "
            "(%dlprof --database=FILE), not around a cell"
        )
    reports, formats = check_outputs(
        ns.reports,
        ns.formats,
        ns.profile_name,
        reports_given="reports" in getattr(ns, "given_options", ()),
    )
    if ns.delay < 0 or (ns.duration is not None and ns.duration <= 0):
        raise JlprofError("--delay must be >= 0 and --duration > 0 (seconds)")
    if not ns.name.isidentifier():
        raise JlprofError(f"-o {ns.name!r} is not a Python name to bind the profile to")
    if "/" in ns.nsys_base_name or not ns.nsys_base_name:
        raise JlprofError("--nsys_base_name is a file name without a folder (use --output_path)")
    check_nsys_opts(ns.nsys_opts)
    if getattr(ns, "ncu", None) is not None and (not cell or ns.setup):
        raise JlprofError(
            "--ncu re-runs a profiled cell under Nsight Compute: use it on %%dlprof around "
            "the cell (not with --setup); for a script, jlprof ncu --kernels top5 python x.py"
        )
    nsys_opts = ns.nsys_opts
    if getattr(ns, "gpu_metrics", False) and "--gpu-metrics-device" not in nsys_opts:
        nsys_opts = f"{nsys_opts} --gpu-metrics-device=all".strip()  # docs/kernels.md
    return RunOptions(
        key_node=ns.key_node,
        iter_start=ns.iter_start,
        iter_stop=ns.iter_stop,
        reports=reports,
        formats=formats,
        output_path=Path(ns.output_path).expanduser() if ns.output_path else None,
        profile_name=ns.profile_name,
        delay=ns.delay,
        duration=ns.duration,
        nsys_opts=nsys_opts,
        nsys_base_name=ns.nsys_base_name,
        force=ns.force,
        verbosity=ns.verbosity,
        mode=ns.mode,
        domains=ns.domains,
        setup=ns.setup,
        database=Path(ns.database).expanduser() if ns.database else None,
        scheduler=ns.scheduler,
        name=ns.name,
        kernel=kernel,
        nsys_opts_given=bool(nsys_opts),
        isolate_network=ns.isolate_network,
        isolate_network_given="isolate_network" in getattr(ns, "given_options", ()),
        diff=(Path(ns.diff[0]).expanduser(), Path(ns.diff[1]).expanduser()) if ns.diff else None,
        base_iter_start=ns.base_iter_start,
        base_iter_stop=ns.base_iter_stop,
        new_iter_start=ns.new_iter_start,
        new_iter_stop=ns.new_iter_stop,
        regression_threshold=ns.regression_threshold,
        ncu_report=Path(ns.ncu_report).expanduser() if getattr(ns, "ncu_report", None) else None,
        ncu=getattr(ns, "ncu", None),
        gpu_metrics=bool(getattr(ns, "gpu_metrics", False)),
    )


def check_nsys_opts(text: str) -> None:
    """Refuse nsys flags that would break the sidecar's capture session (the rest is checked
    by :func:`jlprof.nsys.profile_command` when the sidecar starts)."""
    from jlprof.nsys import _parse_options

    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise JlprofError(f"--nsys_opts {text!r}: {exc} (check the quotes)") from None
    options, stray = _parse_options(tokens)
    if stray:
        raise JlprofError(f"--nsys_opts may hold only nsys options, found {shlex.join(stray)!r}")
    for opt in options:
        why = _SESSION_BREAKERS.get(opt.name)
        if why:
            raise JlprofError(f"--nsys_opts cannot use {opt.tokens[0]} with %%dlprof: {why}")


__all__ = [
    "DEFAULT_NAME",
    "MODES",
    "VERBOSITY",
    "RunOptions",
    "check_nsys_opts",
    "from_namespace",
    "parse_bool",
    "parse_list",
]
