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
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from jlprof.distributed import several
from jlprof.errors import JlprofError, OptionError
from jlprof.options import VERBOSITY, add_cli_options
from jlprof.outputs import prepare_folder, written
from jlprof.reports.writers import check_outputs, report_path
from jlprof.version import __version__


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jlprof",
        description="Deep-learning profiler for Nsight Systems traces (DLProf-compatible).",
        epilog="Examples:\n  jlprof --database=run.sqlite --key_node=optimizer_step --reports=all\n"
        "  jlprof --reports=summary,kernel --formats=csv,json python train.py --epochs 1",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-V", "--version", action="version", version=f"jlprof {__version__}")
    add_cli_options(p)
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
    with written(path) as tmp:
        df.to_json(tmp, orient="records")
    return path


def run(args: argparse.Namespace, say: _Say) -> int:
    from jlprof.profile import load

    # every option and output folder is checked before the (long) load or profiling run
    reports, formats = check_outputs(args.reports, args.formats, args.profile_name)
    out = prepare_folder(args.output_path)
    if args.save_db:
        prepare_folder(Path(args.save_db).parent, "--save_db")
    status = 0
    if args.database and several(args.database):
        return _run_ranks(args, say, reports, formats, out)
    if args.database:
        if args.command:
            say(f"ignoring the command {' '.join(args.command)!r}: --database was given", "minimal")
        db = Path(args.database[0])
    elif args.command:
        from jlprof.profiling import profile_run

        db, status = profile_run(
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
    for w in prof.trace.warnings:
        say(f"warning: {w}", "minimal")
    it = prof.iterations
    if prof.key_node:
        say(
            f"key node {prof.key_node!r}: {it.count} iterations; aggregating "
            f"{prof.iter_start}..{prof.iter_stop}{_partial_note(prof)}"
        )
    else:
        cands = ", ".join(prof.suggest_key_nodes(3)["op_name"]) or "none"
        say(
            "0 iterations found (no key node); the whole profile is one iteration. "
            f"Candidates for --key_node: {cands}",
            "minimal",
        )
    written_paths = prof.write_reports(out, reports, formats, force=args.force)
    kept = [
        report_path(out, prof.profile_name, r, f)
        for r in reports
        for f in formats
        if report_path(out, prof.profile_name, r, f) not in written_paths
    ]
    for w in written_paths:
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
    if status:
        say(f"exit status {status}: the profiled program's, passed on as nsys does", "minimal")
    return status


def _run_ranks(args, say: _Say, reports: list[str], formats: list[str], out: Path) -> int:
    """Several databases: one rank each, on Dask (``jlprof.distributed``)."""
    from jlprof.distributed import load_ranks

    if args.save_db or args.dump_model_data:
        raise OptionError(
            "--save_db and --dump_model_data take one database; run them on one rank's file."
        )
    if args.command:
        say(f"ignoring the command {' '.join(args.command)!r}: --database was given", "minimal")

    ranks = load_ranks(
        args.database,
        scheduler=args.scheduler,
        output_path=out,
        reports=reports,
        formats=formats,
        force=args.force,
        profile_name=args.profile_name,
        progress=say.rank >= VERBOSITY.index("normal"),
        key_node=args.key_node,
        iter_start=args.iter_start,
        iter_stop=args.iter_stop,
        domains=args.domains,
        mode=args.mode,
    )
    for w in ranks.write_reports(out, formats, force=args.force):
        say(f"wrote {w}")
    if say.rank >= VERBOSITY.index("normal"):
        cols = ["Rank", "Iterations", "Avg. Iteration Time (ns)", "Straggler"]
        print(ranks.report("ranks")[cols].to_string(index=False))
    return 0


def _terminate(signum: int, _frame: object) -> None:
    """SIGTERM ends the run like Ctrl-C: cleanup runs, no partial file is left behind."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    say = _Say(args.verbosity)
    main_thread = threading.current_thread() is threading.main_thread()
    old_term = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        return run(args, say)
    except JlprofError as exc:
        return _fail(args, str(exc), 2)
    except OSError as exc:  # a file-system error no stage turned into a JlprofError
        where = exc.filename or "a file"
        return _fail(args, f"{where}: {exc.strerror or exc}; check the path, its permissions "
                     "and the free disk space.", 2)  # fmt: skip
    except KeyboardInterrupt:
        print("jlprof: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: still one line, the traceback on request
        return _fail(args, f"internal error {type(exc).__name__}: {exc}. Please report it with "
                     "the output of -v diagnostic.", 1)  # fmt: skip
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, old_term if old_term is not None else signal.SIG_DFL)


def _fail(args: argparse.Namespace, message: str, status: int) -> int:
    if args.verbosity == "diagnostic":
        traceback.print_exc()
    print(f"jlprof: error: {message}", file=sys.stderr)
    return status


def _partial_note(prof) -> str:
    """Says which partial intervals the summary's mean ± std iteration time leaves out."""
    from jlprof.engine.outliers import excluded

    left = excluded(prof.iterations, prof.iter_start, prof.iter_stop)
    if not left:
        return ""
    return (
        f" (mean ± std iteration time leaves out the partial intervals {', '.join(map(str, left))})"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
