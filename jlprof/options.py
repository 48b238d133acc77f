"""DLProf's options (guide ch. 4, 7, 10.1, 15): one table from which the CLI's argparse parser
(:mod:`jlprof.cli`) and the ``%%dlprof`` magic's parser (:mod:`jlprof.magics.dlprof`) are built,
and the one tokenizer both run first (:func:`split_argv`) for DLProf's grammar.

Each row: name (the attribute it parses into), flags (DLProf's spellings, every name DLProf
used across versions), type, default, help, DLProf's name (None: jlprof's own option), the
``jlprof --help`` group (the guide's ch. 15 tables) and, where jlprof cannot honour an option,
why (``no_effect``: a one-line note when it is given, never silence). A surface may differ only
in its default and help where its meaning differs (the magic writes into a new run folder, not
``.``); ``tests/test_options.py`` checks both parsers accept the same flags.

DLProf's grammar (guide §10.1, §15.1): ``--opt=value`` or ``--opt value`` (``-m simple``);
lists by commas (``--reports=kernel,iteration``) or by spaces ended with ``--``
(``--reports iteration tensor node_op --``); the program to profile and its arguments after.
"""

from __future__ import annotations

import argparse
import glob
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jlprof.engine.analysis import DEFAULT_PROFILE_NAME, MODES
from jlprof.reports import REPORT_NAMES
from jlprof.reports.writers import FORMATS

VERBOSITY = ("quiet", "minimal", "normal", "detailed", "diagnostic")
CLI, MAGIC, DIFF = "cli", "magic", "diff"  # DIFF: the `jlprof diff` sub-command (docs/diff.md)
MODE_ALIASES = {"trtexec": "tensorrt"}  # guide §3.4 spells TensorRT's mode --mode=trtexec
_SAME = object()

# the ``jlprof --help`` groups, in the guide's ch. 15 order (and its table titles)
GROUPS = (
    "Generic Options (guide 15.1.1)",
    "Nsight Systems Options (guide 15.1.2)",
    "Data Aggregation Options (guide 15.1.3)",
    "Output Report Options (guide 15.1.4)",
    "jlprof options (not in DLProf)",
)
GENERIC, NSYS, AGGREGATION, OUTPUT, OWN = GROUPS


def parse_bool(v: str) -> bool:
    low = v.strip().lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {v!r}")


def parse_list(v: str) -> list[str]:
    return [x for x in v.replace(" ", ",").split(",") if x]


def _is_database(token: str) -> bool:
    """A word after ``--database`` that is one more rank's file (a profile, folder or glob)."""
    return (
        token.endswith((".sqlite", ".nsys-rep", ".qdrep", ".jlprof"))
        or os.path.isdir(token)
        or glob.has_magic(token)
    )


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
    nargs: int | None = None  # values after the flag on every surface (e.g. --diff BASE NEW)
    # a list option: which words after ``--opt`` (no ``=``, no ending ``--``) belong to it
    member: Callable[[str], bool] | None = None
    const: Any = _SAME  # the value of the flag given alone (``--ncu`` = ``--ncu=top5``)
    no_effect: str | None = None  # why jlprof cannot honour it (noted when given)
    magic_no_effect: str | None = None  # the same, for the magic only

    def kwargs(self, surface: str) -> dict[str, Any]:
        """``add_argument`` keyword arguments for this surface."""
        default = self.default
        if surface == MAGIC and self.magic_default is not _SAME:
            default = self.magic_default
        kw: dict[str, Any] = {"dest": self.name, "default": default}
        kw["help"] = (self.magic_help if surface == MAGIC else None) or self.help
        if surface == CLI and self.cli_nargs is not None:
            kw["nargs"] = self.cli_nargs
        elif self.nargs is not None:
            kw["nargs"] = self.nargs
        if self.const is not _SAME:
            kw["nargs"], kw["const"] = "?", self.const
        for key in ("type", "choices", "metavar"):
            if getattr(self, key) is not None:
                kw[key] = getattr(self, key)
        return kw


_BOOL = "{true,false}"
_REPORT_WORDS = (*REPORT_NAMES, "all")
_NO_TF_MARKERS = (
    "it made NGC TensorFlow's NVTX markers record tensor shapes and data types; jlprof reads "
    "whatever the markers hold (jlprof.torch records them for PyTorch)"
)
OPTIONS: tuple[Option, ...] = (
    Option("force", ("-f", "--force"), parse_bool, False,
           "if true, overwrite all existing result files with the same output filename "
           "(QDSTRM, QDREP/NSYS-REP, SQLITE, CSV, JSON)", "--force", GENERIC,
           metavar=_BOOL, magic_help="overwrite existing files in --output_path"),
    Option("verbosity", ("-v", "--verbosity"), None, "normal",
           "output verbosity; 'diagnostic' shows tracebacks", "--verbosity", GENERIC,
           choices=VERBOSITY,
           magic_help="quiet, minimal, normal, detailed or diagnostic (tracebacks)"),
    Option("mode", ("-m", "--mode"), None, None,
           "target framework: simple writes only the kernel report; pytorch adds Direction "
           "columns and the PyTorch expert systems, and annotates a profiled command's ops with "
           "jlprof.torch; tensorflow1/tensorflow2 read TF scopes and XLA clusters; tensorrt "
           "reads TensorRT layer names (default: pytorch when the trace holds PyTorch markers, "
           "else simple's analysis with every report)", "--mode", GENERIC,
           choices=(*MODES, *MODE_ALIASES),
           magic_help="framework; pytorch also annotates PyTorch ops in the sidecar "
           "(jlprof.torch); default: pytorch when the trace holds PyTorch markers"),
    Option("database", ("--database", "--nsys_database"), None, None,
           "analyse this nsys export (.sqlite, .nsys-rep, .qdrep) or DLProf/jlprof database "
           "(dlprof_dldb.sqlite, .jlprof) instead of profiling a command; several files, a "
           "directory or a glob: one per rank of a distributed job, analysed on Dask "
           "(docs/ranks.md); a name that exists is that file, a glob only where no file has "
           "that name", "--database", NSYS,
           metavar="FILE", cli_nargs="+", member=_is_database,
           magic_help="re-analyse this nsys export (.sqlite/.nsys-rep/.qdrep) or DLProf/jlprof "
           "database without profiling (line magic); a directory or a glob: one per rank of a "
           "distributed job, on Dask (docs/ranks.md); a name that exists is that file"),
    Option("nsys_base_name", ("--nsys_base_name", "--nsys_base_output_filename"), None,
           "nsys_profile", "base name for all Nsight Systems output files", "--nsys_base_name",
           NSYS, magic_help="base name of the nsys files in the run folder (default "
           "nsys_profile)"),
    Option("nsys_opts", ("--nsys_options", "--nsys_opts"), None, "",
           'customize the args passed to Nsight Systems, e.g. --nsys_options="-t '
           'osrt,cuda,nvtx" (default "-t cuda,nvtx -s none")', "--nsys_options", NSYS,
           magic_help='extra nsys profile flags for the sidecar, e.g. "-t cuda,nvtx,osrt" '
           "(applies when the sidecar starts)"),
    Option("isolate_network", ("--isolate_network",), parse_bool, False,
           "run the sidecar's nsys in a private network namespace (loopback only), so that "
           "nsys's agent port is reachable from nowhere; the profiled code then has no network "
           "(applies when the sidecar starts)", None, NSYS, surfaces=(MAGIC,), metavar=_BOOL),
    Option("nsys_profile_range", ("--nsys_profile_range",), parse_bool, False,
           "if true, collect only between the program's profiler start and stop calls "
           "(cudaProfilerStart/Stop: nsys --capture-range=cudaProfilerApi; guide §4.6)",
           "--nsys_profile_range", NSYS, metavar=_BOOL,
           magic_no_effect="%%dlprof captures exactly the profiled cell (its own capture range)"),
    Option("delay", ("-y", "--delay"), float, 0.0, "collection start delay in seconds",
           "--delay", NSYS, metavar="SECONDS",
           magic_help="start capturing this many seconds into the cell"),
    Option("duration", ("-d", "--duration"), float, None,
           "collection duration in seconds (> 0)", "--duration", NSYS, metavar="SECONDS",
           magic_help="stop capturing after this many seconds (the cell runs on)"),
    Option("detailed_mode", ("--detailed_mode",), parse_bool, True,
           "TensorFlow only in DLProf: gather detailed NVTX information (tensor shapes, data "
           "types); accepted, no effect in jlprof", "--detailed_mode", NSYS, metavar=_BOOL,
           no_effect=_NO_TF_MARKERS),
    Option("key_node", ("--key_node", "--key_op"), None, None,
           "op name or op ID marking each iteration (default: global_step, then optimizer_step)",
           "--key_node", AGGREGATION, metavar="OP"),
    Option("iter_start", ("--iter_start",), int, None,
           "first iteration to aggregate (inclusive, default 0)", "--iter_start", AGGREGATION,
           metavar="N"),
    Option("iter_stop", ("--iter_stop",), int, None,
           "last iteration to aggregate (inclusive, default the last)", "--iter_stop",
           AGGREGATION, metavar="N"),
    Option("output_path", ("--output_path",), None, ".",
           "output path for all generated collateral (created; default ./)", "--output_path",
           OUTPUT, metavar="PATH", magic_default=None,
           magic_help="folder for reports and nsys files (default: a new "
           "jlprof_runs/<time>-<id>/)"),
    Option("profile_name", ("--profile_name", "--base_name"), None, DEFAULT_PROFILE_NAME,
           f"name of the profile, prepended to every report file name (default "
           f"{DEFAULT_PROFILE_NAME}: {DEFAULT_PROFILE_NAME}_summary.csv, ...)", "--profile_name",
           OUTPUT, metavar="NAME"),
    Option("reports", ("--reports", "--report"), parse_list, [],
           f"report(s) to write: {', '.join(_REPORT_WORDS)}; by commas (--reports=kernel,tensor) "
           "or by spaces ended with -- (--reports kernel tensor --); default none (the summary "
           "is printed)", "--reports", OUTPUT, metavar="REPORT", member=_REPORT_WORDS.__contains__,
           magic_default=["summary"],
           magic_help=f"report(s) to write: {', '.join(_REPORT_WORDS)} (default summary)"),
    Option("formats", ("--formats", "--file_formats"), parse_list, ["csv"],
           "file format(s): csv, json, parquet (default csv; parquet: typed columns, beyond "
           "DLProf); by commas or by spaces ended with --",
           "--formats", OUTPUT, metavar="FORMAT", member=FORMATS.__contains__),
    Option("dump_model_data", ("--dump_model_data",), parse_bool, False,
           "if true, write the raw correlated model data as <profile_name>_model_data.json",
           "--dump_model_data", OUTPUT, surfaces=(CLI,), metavar=_BOOL),
    Option("domains", ("--domains",), parse_list, None,
           "NVTX domains to use, comma separated ('' = default domain)", None, OWN,
           metavar="DOMAIN"),
    Option("scheduler", ("--scheduler",), None, None,
           "Dask scheduler for several databases, e.g. tcp://host:8786 (default "
           "$JLPROF_SCHEDULER, else a local cluster); workers read the files themselves", None,
           OWN, metavar="ADDRESS"),
    Option("dldb", ("--dldb",), parse_bool, True,
           "write DLProf's database <profile_name>_dldb.sqlite in --output_path (guide §4.3; "
           "jlprof's saved trace, for --database); false saves its time and disk (about 2 s and "
           "200 MB at 1M kernels)", None, OWN, surfaces=(CLI,), metavar=_BOOL),
    Option("windowed", ("--windowed",), None, "auto",
           "read and correlate the CUDA API calls and GPU work window by window, holding the "
           "aggregates and one window instead of the whole trace (docs/windowed-engine.md); "
           "slower, less memory. auto: when the whole trace would take more than half the "
           "memory available (about 120 bytes per GPU activity, API call and NVTX range)",
           None, OWN, surfaces=(CLI,), choices=("auto", "true", "false")),
    Option("save_db", ("--save_db",), None, None,
           "also save a jlprof database (.jlprof zip or .sqlite) at this path", None, OWN,
           surfaces=(CLI,), metavar="FILE"),
    # below the kernel name (docs/kernels.md)
    Option("gpu_metrics", ("--gpu_metrics",), parse_bool, False,
           "also sample GPU metrics (SM active, Tensor active, DRAM bandwidth; Turing or newer) "
           "with nsys --gpu-metrics-device=all; the gpu_metrics report shows them per iteration",
           None, OWN, metavar=_BOOL),
    Option("ncu_report", ("--ncu_report",), None, None,
           "an Nsight Compute report (.ncu-rep) whose measured kernels are joined to the "
           "profile's: the kernel report gains ncu's measured columns (docs/kernels.md)",
           None, OWN, metavar="FILE"),
    Option("ncu", ("--ncu",), None, None,
           "after the capture, re-run the setup cells and this cell under Nsight Compute for "
           "the kernels chosen from its profile (topN: most GPU time; else a regex of kernel "
           "names; --ncu alone: top5) and join ncu's report; ncu's replay slows those kernels "
           "10-100x (docs/kernels.md)", None, OWN, surfaces=(MAGIC,), metavar="topN|REGEX",
           const="top5"),
    # the A/B diff (docs/diff.md): `jlprof diff BASE NEW` and `%dlprof --diff BASE NEW`
    Option("diff", ("--diff",), None, None,
           "compare two profiles, BASE then NEW (nsys exports, jlprof databases or run "
           "folders): diff view, verdict, result bound to -o (docs/diff.md)", None, "diff",
           surfaces=(MAGIC,), metavar=("BASE", "NEW"), nargs=2),
    Option("base_iter_start", ("--base_iter_start",), int, None,
           "diff: first iteration of BASE (default --iter_start)", None, "diff",
           surfaces=(DIFF, MAGIC)),
    Option("base_iter_stop", ("--base_iter_stop",), int, None,
           "diff: last iteration of BASE (default --iter_stop)", None, "diff",
           surfaces=(DIFF, MAGIC)),
    Option("new_iter_start", ("--new_iter_start",), int, None,
           "diff: first iteration of NEW (default --iter_start)", None, "diff",
           surfaces=(DIFF, MAGIC)),
    Option("new_iter_stop", ("--new_iter_stop",), int, None,
           "diff: last iteration of NEW (default --iter_stop)", None, "diff",
           surfaces=(DIFF, MAGIC)),
    Option("regression_threshold", ("--regression_threshold",), float, None,
           "diff: median iteration time change (%%) that counts as a regression or an "
           "improvement (default 5, or --fail-on-regression's PCT)", None, "diff",
           surfaces=(DIFF, MAGIC), metavar="PCT"),
    Option("fail_on_regression", ("--fail-on-regression", "--fail_on_regression"), float, None,
           "diff: exit status 1 when the verdict is 'regression likely' at PCT %% (3 when the "
           "runs are not comparable)", None, "diff", surfaces=(DIFF,), metavar="PCT"),
    Option("format", ("--format",), None, "text",
           "diff: what to print: text, markdown (a pull-request comment) or json (the summary)",
           None, "diff", surfaces=(DIFF,), choices=("text", "markdown", "json")),
    Option("output_file", ("--output_file",), None, None,
           "diff: write what --format prints to FILE instead of stdout", None, "diff",
           surfaces=(DIFF,), metavar="FILE"),
)  # fmt: skip

# options that only shape a profiling run: with --database nothing is profiled
PROFILING_ONLY = (
    "nsys_base_name",
    "nsys_opts",
    "nsys_profile_range",
    "delay",
    "duration",
    "gpu_metrics",
)


def options_for(surface: str) -> tuple[Option, ...]:
    return tuple(o for o in OPTIONS if surface in o.surfaces)


def by_name(name: str) -> Option:
    return next(o for o in OPTIONS if o.name == name)


def add_cli_options(parser: argparse.ArgumentParser) -> None:
    """The table's options on the CLI's parser, in the guide's ch. 15 groups."""
    groups: dict[str, Any] = {}
    for g in GROUPS:
        groups[g] = parser.add_argument_group(g)
    for o in options_for(CLI):
        groups[o.group].add_argument(*o.flags, **o.kwargs(CLI))


def magic_arguments_from_table(func: Callable) -> Callable:
    """Decorate a magic with the table's options (IPython ``@argument``), in table order."""
    from IPython.core.magic_arguments import argument

    for o in reversed(options_for(MAGIC)):
        func = argument(*o.flags, **o.kwargs(MAGIC))(func)
    return func


def parse_words(
    parser: argparse.ArgumentParser, argv: Sequence[str]
) -> tuple[argparse.Namespace, set[str]]:
    """Parse ``argv`` with DLProf's grammar (:func:`split_argv`) on either surface's parser:
    the namespace (``command``: the program, or the magic's verb) and the options given."""
    split = split_argv(argv, parser)
    ns = parser.parse_args(split.options)
    ns.command = split.command
    if getattr(ns, "mode", None) in MODE_ALIASES:
        ns.mode = MODE_ALIASES[ns.mode]
    return ns, split.given


@dataclass
class Split:
    """``argv`` cut by :func:`split_argv`: argparse-ready option words, the program, and the
    option names the user gave (for the no-effect notes)."""

    options: list[str]
    command: list[str]
    given: set[str]


def split_argv(argv: Sequence[str], parser: argparse.ArgumentParser) -> Split:
    """DLProf's grammar turned into words argparse parses the same on every surface.

    ``--opt value`` and ``--opt=value`` both become ``--opt=value``; a list option takes the
    words after it up to ``--`` (``--reports iteration tensor node_op --``), or without ``--``
    as long as they are names it knows (report names, formats, databases), so
    ``--reports summary python train.py`` leaves ``python train.py`` as the program. The first
    word that is not an option or an option's value starts the program; everything after it
    is the program's (``--`` alone also ends the options).
    """
    actions = parser._option_string_actions
    table = {f: o for o in OPTIONS for f in o.flags}
    out: list[str] = []
    given: set[str] = set()
    i, n = 0, len(argv)
    while i < n:
        word = argv[i]
        if word == "--":
            return Split(out, list(argv[i + 1 :]), given)
        if not word.startswith("-") or word == "-" or _is_number(word):
            return Split(out, list(argv[i:]), given)
        flag, eq, inline = word.partition("=")
        action = actions.get(flag)
        if action is None:  # unknown: argparse names it (or -abc short forms)
            out.append(word)
            i += 1
            continue
        given.add(action.dest)
        if action.nargs == 0:  # --help, --version, --setup
            out.append(word)
            i += 1
            continue
        opt = table.get(flag)
        if isinstance(action.nargs, int) and not eq:  # a fixed count: --diff BASE NEW
            out += [flag, *argv[i + 1 : i + 1 + action.nargs]]
            i += 1 + action.nargs
            continue
        several = opt is not None and opt.cli_nargs == "+" and action.nargs == "+"
        is_list = several or (opt is not None and opt.type is parse_list)
        if eq:
            values, i = [inline], i + 1
        elif is_list:
            values, i = _list_values(argv, i + 1, opt)
        elif i + 1 < n:
            values, i = [argv[i + 1]], i + 2
        else:
            out.append(flag)  # argparse says the value is missing
            i += 1
            continue
        if several and eq and flag.startswith("--"):
            # one word: argparse would take a separate '-lead.sqlite' for an option
            out.append(f"{flag}={values[0]}")
        elif several:
            out += [flag, *values]
        elif is_list:
            out.append(f"{flag}={','.join(values)}")
        elif flag.startswith("--"):
            out.append(f"{flag}={values[0]}")
        else:
            out += [flag, values[0]]
    return Split(out, [], given)


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _list_values(argv: Sequence[str], i: int, opt: Option | None) -> tuple[list[str], int]:
    """The words of a space-separated list starting at ``argv[i]``, and where the rest starts."""
    j = i
    while j < len(argv) and argv[j] != "--" and not argv[j].startswith("-"):
        j += 1
    if j < len(argv) and argv[j] == "--" and j > i:  # ended with --: all of them are the list
        return list(argv[i:j]), j + 1
    words = []
    for k in range(i, j):  # no --: the leading words the option knows (at least one)
        parts = parse_list(argv[k])
        known = opt is not None and opt.member is not None and parts
        if k > i and not (known and all(opt.member(p) for p in parts)):  # type: ignore[union-attr]
            return words, k
        words.append(argv[k])
    return words, j


def notes(ns: argparse.Namespace, given: set[str], surface: str) -> list[str]:
    """One line for every given option jlprof accepts but cannot honour here, with why."""
    out = []
    database = bool(getattr(ns, "database", None))
    for o in options_for(surface):
        if o.name not in given:
            continue
        why = (o.magic_no_effect if surface == MAGIC else None) or o.no_effect
        if why is None and database and surface == CLI and o.name in PROFILING_ONLY:
            why = "nothing is profiled with --database (guide §15.1.2)"
        if why is not None:
            out.append(f"note: {o.flags[0]} has no effect: {why}.")
    return out


__all__ = [
    "CLI",
    "DEFAULT_PROFILE_NAME",
    "GROUPS",
    "MAGIC",
    "OPTIONS",
    "VERBOSITY",
    "Option",
    "Split",
    "add_cli_options",
    "by_name",
    "magic_arguments_from_table",
    "notes",
    "options_for",
    "parse_bool",
    "parse_list",
    "parse_words",
    "split_argv",
]
