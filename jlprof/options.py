"""DLProf's options (guide ch. 4, 10.1, 15): one table from which the CLI's argparse parser
(:mod:`jlprof.cli`) and the ``%%dlprof`` magic's parser (:mod:`jlprof.magics.dlprof`) are built.

Each row: name (the attribute it parses into), aliases (the flags, DLProf's spelling first),
type, default, help, DLProf's name (None: jlprof's own option) and where it applies. A surface
may differ only in its default and help where its meaning differs (the magic writes into a
new run folder, not ``.``); ``tests/test_options.py`` checks both parsers accept the same flags.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jlprof.engine.analysis import MODES
from jlprof.reports import REPORTS

VERBOSITY = ("quiet", "minimal", "normal", "detailed", "diagnostic")
CLI, MAGIC = "cli", "magic"
_SAME = object()


def parse_bool(v: str) -> bool:
    low = v.strip().lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {v!r}")


def parse_list(v: str) -> list[str]:
    return [x for x in v.replace(" ", ",").split(",") if x]


@dataclass(frozen=True)
class Option:
    name: str
    flags: tuple[str, ...]
    type: Callable[[str], Any] | None
    default: Any
    help: str
    dlprof: str | None
    group: str
    surfaces: tuple[str, ...] = (CLI, MAGIC)
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    magic_default: Any = _SAME
    magic_help: str | None = None
    cli_nargs: str | None = None  # the CLI's nargs where it takes several values

    def kwargs(self, surface: str) -> dict[str, Any]:
        """``add_argument`` keyword arguments for this surface."""
        default = self.default
        if surface == MAGIC and self.magic_default is not _SAME:
            default = self.magic_default
        kw: dict[str, Any] = {"dest": self.name, "default": default}
        kw["help"] = (self.magic_help if surface == MAGIC else None) or self.help
        if surface == CLI and self.cli_nargs is not None:
            kw["nargs"] = self.cli_nargs
        for key in ("type", "choices", "metavar"):
            if getattr(self, key) is not None:
                kw[key] = getattr(self, key)
        return kw


_BOOL = "{true,false}"
OPTIONS: tuple[Option, ...] = (
    Option("force", ("-f", "--force"), parse_bool, False,
           "overwrite existing result files (reports, nsys outputs)", "--force", "generic",
           metavar=_BOOL, magic_help="overwrite existing files in --output_path"),
    Option("verbosity", ("-v", "--verbosity"), None, "normal",
           "output verbosity; 'diagnostic' shows tracebacks", "--verbosity", "generic",
           choices=VERBOSITY,
           magic_help="quiet, minimal, normal, detailed or diagnostic (tracebacks)"),
    Option("mode", ("-m", "--mode"), None, None,
           "framework of the profiled run; 'pytorch' adds Direction columns and the PyTorch "
           "expert systems, and annotates a profiled command's ops with jlprof.torch (default: "
           "pytorch when the trace holds PyTorch markers, else simple)", "--mode", "generic",
           choices=MODES,
           magic_help="framework; pytorch also annotates PyTorch ops in the sidecar "
           "(jlprof.torch); default: pytorch when the trace holds PyTorch markers, else simple"),
    Option("database", ("--database",), None, None,
           "analyse this nsys export (.sqlite, .nsys-rep, .qdrep) or jlprof database instead of "
           "profiling a command; several files, a directory or a glob: one per rank of a "
           "distributed job, analysed on Dask (docs/ranks.md)", "--database", "Nsight Systems",
           metavar="FILE", cli_nargs="+",
           magic_help="re-analyse this nsys export (.sqlite/.nsys-rep/.qdrep) or jlprof "
           "database without profiling (line magic); a directory or a glob: one per rank of a "
           "distributed job, on Dask (docs/ranks.md)"),
    Option("scheduler", ("--scheduler",), None, None,
           "Dask scheduler for several databases, e.g. tcp://host:8786 (default "
           "$JLPROF_SCHEDULER, else a local cluster); workers read the files themselves", None,
           "Nsight Systems", metavar="ADDRESS"),
    Option("nsys_base_name", ("--nsys_base_name", "--nsys_base_output_filename"), None,
           "nsys_profile",
           "base name of the nsys output files when profiling", "--nsys_base_output_filename",
           "Nsight Systems",
           magic_help="base name of the nsys files in the run folder (default nsys_profile)"),
    Option("nsys_opts", ("--nsys_opts", "--nsys_options"), None, "",
           'extra nsys profile flags, e.g. --nsys_opts="-t cuda,nvtx,osrt"', "--nsys_opts",
           "Nsight Systems",
           magic_help='extra nsys profile flags for the sidecar, e.g. "-t cuda,nvtx,osrt" '
           "(applies when the sidecar starts)"),
    Option("delay", ("-y", "--delay"), float, 0.0, "collection start delay (s)", "--delay",
           "Nsight Systems", magic_help="start capturing this many seconds into the cell"),
    Option("duration", ("-d", "--duration"), float, None, "collection duration (s)",
           "--duration", "Nsight Systems",
           magic_help="stop capturing after this many seconds (the cell runs on)"),
    Option("key_node", ("--key_node", "--key_op"), None, None,
           "op name or op ID marking each iteration (default: global_step, then optimizer_step)",
           "--key_node", "data aggregation"),
    Option("iter_start", ("--iter_start",), int, None,
           "first iteration to aggregate (inclusive, default 0)", "--iter_start",
           "data aggregation"),
    Option("iter_stop", ("--iter_stop",), int, None,
           "last iteration to aggregate (inclusive, default the last)", "--iter_stop",
           "data aggregation"),
    Option("domains", ("--domains",), parse_list, None,
           "NVTX domains to use, comma separated ('' = default domain)", None,
           "data aggregation"),
    Option("output_path", ("--output_path",), None, ".", "folder for the reports (created)",
           "--output_path", "output reports", magic_default=None,
           magic_help="folder for reports and nsys files (default: a new "
           "jlprof_runs/<time>-<id>/)"),
    Option("profile_name", ("--profile_name", "--base_name"), None, "jlprof",
           "prefix of the report files (default jlprof)", "--base_name", "output reports"),
    Option("reports", ("--reports",), parse_list, ["summary"],
           f"comma list of {', '.join(REPORTS)} or all (default summary)", "--reports",
           "output reports"),
    Option("formats", ("--formats", "--file_formats"), parse_list, ["csv"],
           "csv, json and/or parquet (default csv)", "--formats", "output reports"),
    Option("dump_model_data", ("--dump_model_data",), parse_bool, False,
           "also write the raw correlated op instances as JSON", "--dump_model_data",
           "output reports", surfaces=(CLI,), metavar=_BOOL),
    Option("save_db", ("--save_db",), None, None,
           "save a jlprof database (.jlprof) for fast re-analysis", None, "output reports",
           surfaces=(CLI,), metavar="FILE"),
)  # fmt: skip


def options_for(surface: str) -> tuple[Option, ...]:
    return tuple(o for o in OPTIONS if surface in o.surfaces)


def add_cli_options(parser: argparse.ArgumentParser) -> None:
    """The table's options on the CLI's parser, in argument groups as ``jlprof --help`` shows."""
    groups: dict[str, Any] = {}
    for o in options_for(CLI):
        if o.group not in groups:
            groups[o.group] = parser.add_argument_group(o.group)
        groups[o.group].add_argument(*o.flags, **o.kwargs(CLI))


def magic_arguments_from_table(func: Callable) -> Callable:
    """Decorate a magic with the table's options (IPython ``@argument``), in table order."""
    from IPython.core.magic_arguments import argument

    for o in reversed(options_for(MAGIC)):
        func = argument(*o.flags, **o.kwargs(MAGIC))(func)
    return func
