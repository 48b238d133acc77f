"""``jlprof``: DLProf-compatible command line (guide ch. 15).

Two forms, as DLProf had::

    jlprof [options] --database=FILE            # analyse an existing profile
    jlprof [options] python train.py [args...]  # profile under nsys, then analyse

Errors are one line on stderr naming the problem and the fix, exit status 2;
``-v diagnostic`` adds the traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

from jlprof import __version__
from jlprof.engine.profile import MODES, REPORTS
from jlprof.errors import JlprofError

VERBOSITY = ("quiet", "minimal", "normal", "detailed", "diagnostic")


def parse_bool(v: str) -> bool:
    low = v.strip().lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {v!r}")


def parse_list(v: str) -> list[str]:
    return [x for x in v.replace(" ", ",").split(",") if x]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jlprof",
        description="Deep-learning profiler for Nsight Systems traces (DLProf-compatible).",
        epilog="Examples:\n  jlprof --database=run.sqlite --key_node=optimizer_step --reports=all\n"
        "  jlprof --reports=summary,kernel --formats=csv,json python train.py --epochs 1",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-V", "--version", action="version", version=f"jlprof {__version__}")
    g = p.add_argument_group("generic")
    g.add_argument(
        "-f",
        "--force",
        type=parse_bool,
        default=False,
        metavar="{true,false}",
        help="overwrite existing result files (reports, nsys outputs)",
    )
    g.add_argument(
        "-v",
        "--verbosity",
        choices=VERBOSITY,
        default="normal",
        help="output verbosity; 'diagnostic' shows tracebacks",
    )
    g.add_argument(
        "-m",
        "--mode",
        choices=MODES,
        default=None,
        help="framework of the profiled run; 'pytorch' adds Direction columns and the PyTorch "
        "expert systems, and annotates a profiled command's ops with jlprof.torch (default: "
        "pytorch when the trace holds PyTorch markers, else simple)",
    )
    n = p.add_argument_group("Nsight Systems")
    n.add_argument(
        "--database",
        metavar="FILE",
        help="analyse this nsys export (.sqlite, .nsys-rep, .qdrep) or jlprof "
        "database instead of profiling a command",
    )
    n.add_argument(
        "--nsys_base_name",
        default="nsys_profile",
        help="base name of the nsys output files when profiling",
    )
    n.add_argument(
        "--nsys_opts",
        "--nsys_options",
        dest="nsys_opts",
        default="",
        help='extra nsys profile flags, e.g. --nsys_opts="-t cuda,nvtx,osrt"',
    )
    n.add_argument("-y", "--delay", type=float, default=0, help="collection start delay (s)")
    n.add_argument("-d", "--duration", type=float, default=None, help="collection duration (s)")
    a = p.add_argument_group("data aggregation")
    a.add_argument(
        "--key_node",
        "--key_op",
        dest="key_node",
        default=None,
        help="op name or op ID marking each iteration (default: global_step, then optimizer_step)",
    )
    a.add_argument(
        "--iter_start",
        type=int,
        default=None,
        help="first iteration to aggregate (inclusive, default 0)",
    )
    a.add_argument(
        "--iter_stop",
        type=int,
        default=None,
        help="last iteration to aggregate (inclusive, default the last)",
    )
    a.add_argument(
        "--domains",
        type=parse_list,
        default=None,
        help="NVTX domains to use, comma separated ('' = default domain)",
    )
    o = p.add_argument_group("output reports")
    o.add_argument("--output_path", default=".", help="folder for the reports (created)")
    o.add_argument(
        "--profile_name",
        "--base_name",
        dest="profile_name",
        default="jlprof",
        help="prefix of the report files",
    )
    o.add_argument(
        "--reports",
        type=parse_list,
        default=["summary"],
        help=f"comma list of {', '.join(REPORTS)} or all (default summary)",
    )
    o.add_argument(
        "--formats",
        "--file_formats",
        dest="formats",
        type=parse_list,
        default=["csv"],
        help="csv and/or json (default csv)",
    )
    o.add_argument(
        "--dump_model_data",
        type=parse_bool,
        default=False,
        metavar="{true,false}",
        help="also write the raw correlated op instances as JSON",
    )
    o.add_argument(
        "--save_db",
        metavar="FILE",
        default=None,
        help="save a jlprof database (.jlprof) for fast re-analysis",
    )
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="the program to profile (when --database is not given)",
    )
    return p


class _Say:
    def __init__(self, level: str) -> None:
        self.rank = VERBOSITY.index(level)
        self.t0 = time.perf_counter()

    def __call__(self, msg: str, at: str = "normal") -> None:
        if self.rank >= VERBOSITY.index(at):
            print(
                f"[jlprof {time.perf_counter() - self.t0:6.2f}s] {msg}", file=sys.stderr, flush=True
            )


def _dump_model_data(prof, path: Path) -> Path:
    c = prof.correlated
    inst = c.inst
    ops = c.ops
    df = inst.assign(
        op_name=ops["op_name"].to_numpy(object)[inst["op"].to_numpy()],
        op_id=ops["op_id"].to_numpy(object)[inst["op"].to_numpy()],
        path=c.paths["path"].to_numpy(object)[inst["path"].to_numpy()],
        iteration=prof.cube.inst_iter,
        gpu_ns=prof.metrics.gpu_ns,
        api_ns=prof.metrics.api_ns,
    ).drop(columns=["op"])
    df.to_json(path, orient="records")
    return path


def run(args: argparse.Namespace, say: _Say) -> int:
    from jlprof.engine.profile import load

    # the guide's §10.1.1 calls the op type report "node_op"; ch. 15 calls it op_type
    reports = list(REPORTS) if "all" in args.reports else args.reports
    reports = list(dict.fromkeys("op_type" if r == "node_op" else r for r in reports))
    bad = [r for r in reports if r not in REPORTS]
    if bad:
        raise JlprofError(f"unknown report {bad[0]!r}; choose from {', '.join(REPORTS)} or all.")
    out = Path(args.output_path)
    if args.database:
        if args.command:
            say(f"ignoring the command {' '.join(args.command)!r}: --database was given", "minimal")
        db = Path(args.database)
    elif args.command:
        from jlprof.profiling import profile_command

        db = profile_command(
            args.command,
            output=out,
            base_name=args.nsys_base_name,
            nsys_opts=args.nsys_opts,
            delay=args.delay,
            duration=args.duration,
            force=args.force,
            say=say,
            mode=args.mode,
        )
    else:
        raise JlprofError(
            "nothing to analyse: give --database=FILE or a command to profile "
            "(e.g. jlprof python train.py)."
        )
    say(f"loading {db}")
    prof = load(
        db,
        key_node=args.key_node,
        iter_start=args.iter_start,
        iter_stop=args.iter_stop,
        domains=args.domains,
        mode=args.mode,
        profile_name=args.profile_name,
        progress=lambda m: say(m, "detailed"),
    )
    it = prof.iterations
    if prof.key_node:
        say(
            f"key node {prof.key_node!r}: {it.count} iterations; aggregating "
            f"{prof.iter_start}..{prof.iter_stop}"
        )
    else:
        cands = ", ".join(prof.suggest_key_nodes(3)["op_name"]) or "none"
        say(
            "0 iterations found (no key node); the whole profile is one iteration. "
            f"Candidates for --key_node: {cands}",
            "minimal",
        )
    written = prof.write_reports(out, reports, args.formats, force=args.force)
    from jlprof.reports.writers import report_path

    kept = [
        report_path(out, prof.profile_name, r, f)
        for r in reports
        for f in args.formats
        if report_path(out, prof.profile_name, r, f) not in written
    ]
    for w in written:
        say(f"wrote {w}")
    if kept:
        say(
            f"kept {len(kept)} existing file(s) (e.g. {kept[0]}); use -f true to overwrite",
            "minimal",
        )
    if args.dump_model_data:
        target = out / f"{prof.profile_name}_model_data.json"
        if args.force or not target.exists():
            say(f"wrote {_dump_model_data(prof, target)}")
    if args.save_db:
        say(f"saved jlprof database {prof.save(args.save_db)}")
    if say.rank >= VERBOSITY.index("normal"):
        s = prof.summary()
        print(
            json.dumps(
                {"Summary Report": s["Summary Report"], "Iterations": s["Iterations"]}, indent=2
            )
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    say = _Say(args.verbosity)
    try:
        return run(args, say)
    except JlprofError as exc:
        if args.verbosity == "diagnostic":
            traceback.print_exc()
        print(f"jlprof: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("jlprof: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
