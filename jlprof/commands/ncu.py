"""``jlprof ncu``: Nsight Compute below the kernel name (docs/kernels.md).

Two forms:

* ``jlprof ncu REPORT.ncu-rep [--csv | --output_path DIR --formats csv,json]`` lists every
  profiled launch of an Nsight Compute report, in the report's order, with its measured figures.
* ``jlprof ncu --database PROFILE --kernels top5|REGEX [--nvtx_include RANGE] [--launch_skip N]
  [--launch_count N] [--output FILE] [--dry_run] python train.py`` builds the ``ncu`` command
  line that profiles the kernels chosen from an nsys profile (the N taking most GPU time, or
  those whose name matches REGEX) with jlprof's metric set, says that ncu's replay slows them
  10-100x, and runs it (``--dry_run``: prints it only).
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from jlprof.commands import guarded
from jlprof.errors import JlprofError, OptionError

_TOP = re.compile(r"top(\d+)")
SHOWN = ("launch", "kernel", "nvtx", "duration_ns", "sm_throughput_pct", "memory_throughput_pct",
         "achieved_occupancy_pct", "tensor_pipe_pct", "dram_bytes", "flops")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jlprof ncu",
        description="List an Nsight Compute report's measured kernels, or profile the kernels "
        "chosen from an nsys profile under ncu (replay slows them 10-100x).",
        epilog="Examples:\n  jlprof ncu run.ncu-rep --csv\n"
        "  jlprof ncu --database run.sqlite --kernels top5 --dry_run python train.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("words", nargs="*", metavar="REPORT | PROGRAM ...",
                   help="an .ncu-rep, or (with --kernels) the program to profile")  # fmt: skip
    p.add_argument("--csv", action="store_true", help="print the listing as CSV")
    p.add_argument("--formats", default=None,
                   help="write <profile_name>_ncu.{csv,json} to --output_path")  # fmt: skip
    p.add_argument("--output_path", default=None, help="folder for --formats (default .)")
    p.add_argument("--profile_name", default="dlprof", help="file name prefix (--formats)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite existing files")
    p.add_argument("--via", choices=("ncu_report", "ncu"), default=None,
                   help="the reader (default: ncu_report where installed, else ncu)")  # fmt: skip
    p.add_argument("--kernels", default=None, metavar="topN|REGEX",
                   help="profile under ncu the N kernels with most GPU time in --database, or "
                   "those whose short name matches REGEX")  # fmt: skip
    p.add_argument("--database", default=None, help="the nsys profile the kernels are chosen from")
    p.add_argument("--nvtx_include", "--nvtx-include", action="append", default=[],
                   metavar="RANGE", help="profile only inside this NVTX range")  # fmt: skip
    p.add_argument("--launch_skip", "--launch-skip", type=int, default=0, metavar="N")
    p.add_argument("--launch_count", "--launch-count", type=int, default=None, metavar="N")
    p.add_argument("--output", default="jlprof_ncu", help="the ncu report to write (.ncu-rep)")
    p.add_argument("--dry_run", "--dry-run", action="store_true",
                   help="print the ncu command line, do not run it")  # fmt: skip
    return p


def run(argv: list[str]) -> int:
    p = build_parser()
    if any(w == "--kernels" or w.startswith("--kernels=") for w in argv):
        # jlprof's options come before the program; the program's own options stay its own
        a = p.parse_args(_options_first(p, argv))
    else:
        a = p.parse_args(argv)
    return guarded("jlprof ncu", lambda: _capture(a) if a.kernels is not None else _list(a))


def run_diff(argv: list[str]) -> int:
    """``jlprof diff BASE.ncu-rep NEW.ncu-rep``: the measured figures of two Nsight Compute
    reports per kernel (e.g. batch 4 against 512), and each figure's change in %."""
    p = argparse.ArgumentParser(prog="jlprof diff", description="Compare the measured "
                                "kernels of two Nsight Compute reports, per kernel.")  # fmt: skip
    p.add_argument("base", metavar="BASE.ncu-rep")
    p.add_argument("new", metavar="NEW.ncu-rep")
    p.add_argument("--format", choices=("text", "csv", "markdown", "json"), default="text")
    p.add_argument("--output_file", default=None, metavar="FILE")
    p.add_argument("--via", choices=("ncu_report", "ncu"), default=None)
    a = p.parse_args(argv)
    return guarded("jlprof diff", lambda: _diff(a))


def _diff(a: argparse.Namespace) -> int:
    from jlprof.engine.analyses.ncu import compare

    df = compare(launches_frame(a.base, a.via), launches_frame(a.new, a.via))
    shown = df.assign(kernel=[_short(k) for k in df["kernel"]])
    if a.format == "csv":
        text = df.to_csv(index=False)
    elif a.format == "json":
        text = df.to_json(orient="records", indent=2) + "\n"
    elif a.format == "markdown":
        text = _markdown(shown) + "\n"
    else:
        text = shown.T.to_string(header=False) + "\n"
    if a.output_file:
        from jlprof.outputs import prepare_folder, written

        prepare_folder(Path(a.output_file).parent, "--output_file")
        with written(a.output_file, "--output_file") as tmp:
            tmp.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def _markdown(df: Any) -> str:
    """A pipe table (no tabulate dependency)."""
    cols = list(df.columns)
    rows = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in df.itertuples(index=False):
        rows.append("| " + " | ".join("" if v != v else f"{v:.6g}" if isinstance(v, float)
                                      else str(v) for v in r) + " |")  # fmt: skip
    return "\n".join(rows)


def _options_first(p: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with the program (the first word that is neither an option nor an option's
    value) and everything after it put behind ``--``."""
    takes_value = {s for act in p._actions if act.nargs != 0 for s in act.option_strings}
    i = 0
    while i < len(argv):
        w = argv[i]
        if w == "--":
            return argv
        if not w.startswith("-"):
            return [*argv[:i], "--", *argv[i:]]
        i += 2 if w in takes_value else 1
    return argv


def launches_frame(path: str | Path, via: str | None = None) -> Any:
    """The report's launches with their measured figures
    (``engine.analyses.ncu.measured_frame``)."""
    from jlprof.engine.analyses.ncu import measured_frame
    from jlprof.nsys import ncu

    return measured_frame(ncu.measured_rows(ncu.read_ncu_report(path, via=via)))


def _list(a: argparse.Namespace) -> int:
    if len(a.words) != 1:
        raise OptionError("give one .ncu-rep to list (or --kernels and a program to profile).")
    df = launches_frame(a.words[0], a.via)[list(SHOWN)]
    if df.empty:
        print(f"jlprof ncu: {a.words[0]} holds no profiled kernel launch.", file=sys.stderr)
    if a.formats is not None:
        from jlprof.errors import OutputError
        from jlprof.outputs import prepare_folder, written
        from jlprof.reports.encoders import WRITERS

        fmts = [f for f in a.formats.split(",") if f]
        bad = [f for f in fmts if f not in ("csv", "json")] or ([] if fmts else [""])
        if bad:
            raise OptionError(f"unknown format {bad[0]!r}; choose csv and/or json.")
        out = prepare_folder(a.output_path or ".")
        paths = [out / f"{a.profile_name}_ncu.{fmt}" for fmt in fmts]
        if not a.force and any(p.exists() for p in paths):
            there = next(p for p in paths if p.exists())
            raise OutputError(f"{there} exists; pass -f to overwrite it.")
        for fmt, path in zip(fmts, paths, strict=False):
            with written(path) as tmp, open(tmp, "wb") as fh:
                WRITERS[fmt](df, fh)
            print(f"wrote {path}", file=sys.stderr)
        return 0
    if a.csv:
        df.to_csv(sys.stdout, index=False)
    else:
        with_short = df.assign(kernel=[_short(k) for k in df["kernel"]])
        sys.stdout.write(with_short.to_string(index=False) + "\n")
    return 0


def _short(name: str) -> str:
    from jlprof.nsys.ncu import _function_base

    return _function_base(name)


def choose_kernels(profile: Any, spec: str) -> tuple[list[str], str | None]:
    """``topN``: the N demangled kernel names with most total GPU time (the kernel report
    summed over ops); else ``spec`` is a regex for ncu, checked here."""
    m = _TOP.fullmatch(spec)
    if m is None:
        try:
            re.compile(spec)
        except re.error as exc:
            raise OptionError(f"--kernels {spec!r} is neither topN nor a regex ({exc}).") from None
        return [], spec
    n = int(m.group(1))
    if n < 1:
        raise OptionError("--kernels topN needs N >= 1.")
    names = profile.top_kernels(n)
    if not names:
        raise JlprofError("the profile has no kernels to choose from; check --database.")
    return names, None


def _capture(a: argparse.Namespace) -> int:
    from jlprof.nsys.ncu import SLOWDOWN_NOTE, capture_command

    if not a.words:
        raise OptionError("give the program to profile under ncu after the options.")
    if a.database is None and _TOP.fullmatch(a.kernels):
        raise OptionError("--kernels topN chooses from an nsys profile: give --database.")
    names: list[str] = []
    regex = a.kernels
    if _TOP.fullmatch(a.kernels):
        from jlprof.profile import load

        names, regex = choose_kernels(load(a.database), a.kernels)
    else:
        names, regex = [], choose_kernels(None, a.kernels)[1]
    cmd = capture_command(a.words, a.output, kernels=names, regex=regex,
                          nvtx_include=a.nvtx_include, launch_skip=a.launch_skip,
                          launch_count=a.launch_count, force=a.force)  # fmt: skip
    print(f"jlprof ncu: profiling {cmd.what}. Note: {SLOWDOWN_NOTE}.", file=sys.stderr)
    print(shlex.join(cmd.argv))
    if a.dry_run:
        return 0
    try:
        return subprocess.run(cmd.argv, check=False).returncode
    except FileNotFoundError:
        raise JlprofError("ncu is not on PATH; install Nsight Compute (it needs a GPU) or use "
                          "--dry_run to print the command.") from None  # fmt: skip


__all__ = ["build_parser", "choose_kernels", "launches_frame", "run", "run_diff"]
