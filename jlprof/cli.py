"""``jlprof``: DLProf-compatible command line (guide ch. 15).

Two forms, as DLProf had::

    jlprof [options] --database=FILE            # analyse an existing profile
    jlprof [options] python train.py [args...]  # profile under nsys, then analyse

DLProf's grammar (``--opt value``, lists ended with ``--``) is :func:`jlprof.options.split_argv`.

Errors are one line on stderr naming the problem and the fix, exit status 2;
``-v diagnostic`` adds the traceback.
"""

from __future__ import annotations

import argparse
import gc
import json
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

import jlprof.process  # noqa: F401 - first: sets how Arrow's pool frees before it loads
from jlprof.background import InThread
from jlprof.console import StageProgress
from jlprof.distributed import several
from jlprof.engine.read.schema import version_line
from jlprof.errors import InputError, JlprofError, OptionError
from jlprof.options import VERBOSITY, add_cli_options, notes, parse_words
from jlprof.outputs import folder_lock, prepare_folder, written
from jlprof.reports import ALIASES, EVERY_ROW, REPORTS
from jlprof.reports.writers import available, check_outputs, report_path
from jlprof.version import __version__


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jlprof",
        usage="jlprof [optional switch_options] [application] [optional application_options]\n"
        "       jlprof [optional switch_options] --database=dlprof_dldb.sqlite",
        description="Deep-learning profiler for Nsight Systems traces (DLProf-compatible: "
        "'--opt=value' or '--opt value'; lists by commas, or by spaces ended with '--').",
        epilog="Examples:\n  jlprof --database=run.sqlite --key_node=optimizer_step --reports=all\n"
        "  jlprof --reports iteration tensor node_op -- python train.py --epochs 1\n"
        "  jlprof diff BASE NEW --format markdown --fail-on-regression 5   (docs/diff.md)\n"
        "  jlprof ncu REPORT.ncu-rep | --database P --kernels top5 python train.py   "
        "(docs/kernels.md)\n"
        "  jlprof view PROFILE [--export-html FILE]   (docs/viewer.md)\n"
        "  jlprof prof DB [-c idx,dir,kernel,params,sil] [--csv | -w WIDTH]   (docs/kernels.md)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
        allow_abbrev=False,
    )
    g = p.add_argument_group("CLI Global Options (guide 15.1.1)")
    g.add_argument("-h", "--help", action="help", help="show this help message and exit")
    g.add_argument("-V", "--version", action="version", version=f"jlprof {__version__}",
                   help="show the jlprof version and exit")  # fmt: skip
    add_cli_options(p)
    p.add_argument(
        "command",
        nargs="*",
        metavar="application",
        help="the program to profile and its arguments (when --database is not given)",
    )
    return p


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, set[str]]:
    """DLProf's command line: the namespace and the options the user gave."""
    return parse_words(build_parser(), sys.argv[1:] if argv is None else argv)


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


def _bar(say: _Say, total: int) -> StageProgress:
    """Stage names: a line each at -v detailed, a progress line after 2 s at normal."""
    if say.rank >= VERBOSITY.index("detailed"):
        return StageProgress(total, echo=lambda m: say(m, "detailed"))
    return StageProgress(total, enabled=say.rank >= VERBOSITY.index("normal"))


def run(args: argparse.Namespace, say: _Say, given: set[str] | None = None) -> int:
    for note in notes(args, given or set(), "cli"):
        say(note, "minimal")
    # every option and output folder is checked before the (long) load or profiling run
    reports, formats = check_outputs(
        args.reports, args.formats, args.profile_name, reports_given="reports" in (given or ())
    )
    out = prepare_folder(args.output_path)
    if args.ncu_report and not Path(args.ncu_report).is_file():
        raise InputError(f"--ncu_report {args.ncu_report}: no such Nsight Compute report; "
                         "check the path.")  # fmt: skip
    if args.save_db:
        prepare_folder(Path(args.save_db).parent, "--save_db")
    with folder_lock(out):  # a second run into this folder refuses while this one writes
        return _run(args, say, reports, formats, out)


def _run(
    args: argparse.Namespace, say: _Say, reports: list[str], formats: list[str], out: Path
) -> int:
    """:func:`run` once the options are checked and the output folder is held."""
    from jlprof.profile import load

    status = 0
    if args.database and several(args.database):
        if args.ncu_report:
            raise OptionError("--ncu_report joins one profile's kernels: give one --database.")
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
            profile_range=args.nsys_profile_range,
            gpu_metrics=args.gpu_metrics,
        )
    else:
        raise JlprofError(
            "nothing to analyse: give --database=FILE or a command to profile "
            "(e.g. jlprof python train.py)."
        )
    say(f"loading {db}")
    if db.suffix in (".nsys-rep", ".qdrep", ".qdstrm"):  # its SQLite export, as load() reads
        from jlprof.nsys import ensure_sqlite  # it: then either engine may read it

        db = ensure_sqlite(db, progress=say)  # an export takes minutes: nsys's steps said
    bar = _bar(say, 3 + len(reports) * (1 + len(formats)))
    dldb: list[InThread[Path]] = []  # DLProf's database, written while the engine computes
    beyond = _beyond_dlprof(reports)
    if _windowed(args, db, [r for r in beyond if r in EVERY_ROW], say):
        try:
            prof = _load_windowed(db, args, say, bar, formats, out, dldb, reports)
        except BaseException:
            for job in dldb:
                job.cancel()
            raise
        if prof is not None:
            return _analysed(prof, args, say, bar, reports, formats, out, dldb, status)
    try:
        prof = load(
            db,
            **_analysis_options(args, bar),
            on_read=lambda trace: dldb.extend(_start_dldb(trace, db, out, args, say)),
            # DLProf's reports are for one range: the cube keeps it alone (jlprof's own
            # analyses read per-iteration figures)
            range_only=not beyond,
            ncu_report=args.ncu_report,
        )
        return _analysed(prof, args, say, bar, reports, formats, out, dldb, status)
    except BaseException:
        for job in dldb:
            job.cancel()  # no database of a run that failed (as before it was written last)
        raise


def _analysed(
    prof,
    args: argparse.Namespace,
    say: _Say,
    bar: StageProgress,
    reports: list[str],
    formats: list[str],
    out: Path,
    dldb: list[InThread[Path]],
    status: int,
) -> int:
    """The loaded profile's reports, files and summary; the database's thread joined."""
    say(version_line(prof.trace.meta, prof.trace.nvtx_table))
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
    reports, dropped = available(prof, reports)
    if dropped:
        say(f"note: not written: {', '.join(dropped)}; the only report of simple mode is "
            "'kernel' (guide §15.1.4)", "minimal")  # fmt: skip
    if "gpu_metrics" in reports and prof.report("gpu_metrics").empty:
        from jlprof.engine.analyses.gpu_metrics import UNAVAILABLE

        say(f"note: {UNAVAILABLE}", "minimal")
    written_paths = prof.write_reports(out, reports, formats, force=args.force, progress=bar)
    bar.close()
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
        target = report_path(out, prof.profile_name, "model_data", "json")
        if args.force or not target.exists():
            say(f"wrote {_dump_model_data(prof, target)}")
    saved = False  # --save_db, written beside the windows (a job in ``dldb``) or now
    for job in dldb:
        path = job.wait()
        if args.save_db and not saved and path == Path(args.save_db):
            saved = True
            say(f"saved jlprof database {path}")
        else:
            say(f"wrote {path}")
    if args.save_db and not saved:
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


def _analysis_options(args: argparse.Namespace, bar: StageProgress) -> dict:
    """The options both loads take (:func:`~jlprof.profile.load`, ``load_windowed``)."""
    return {
        "key_node": args.key_node,
        "iter_start": args.iter_start,
        "iter_stop": args.iter_stop,
        "domains": args.domains,
        "mode": args.mode,
        "profile_name": args.profile_name,
        "progress": bar,
    }


#: what the whole-trace path holds per event (GPU activity, API call, NVTX range) at its
#: peak, and besides the events (BENCHMARKS.md, 2026-11-26: 3.55 GB for k10m's 27M events)
WHOLE_BYTES_PER_EVENT = 120
WHOLE_BYTES_BASE = 200 << 20
#: the same for the windowed path, which still grows with the trace: the PyTorch shape's
#: (a range per call: the heavier), 2111 MiB for p10m's 33.6M events and 4060 MiB for
#: p20m's 67.1M (BENCHMARKS.md, 2026-11-29 20:20-20:33 UTC); the default shape holds less
#: (1.25 GiB for k10m's 27.6M events, 2026-11-27), so the warning comes early, not late
WINDOWED_BYTES_PER_EVENT = 61
WINDOWED_BYTES_BASE = 190 << 20


def _beyond_dlprof(reports: list[str]) -> list[str]:
    """The reports asked for that are jlprof's own analyses, not DLProf's eight: read whole,
    the profile keeps every iteration's figures for them (not only the command's range)."""
    return [r for r in reports if ALIASES.get(r, r) not in REPORTS]


def _windowed(args: argparse.Namespace, db: Path, every_row: list[str], say: _Say) -> bool:
    """Whether to analyse ``db`` window by window (``--windowed``). ``auto``: when the whole
    trace would take more than half the memory available now (the whole-trace path is faster,
    the windowed one holds less). Never a jlprof database (it holds the trace whole
    already), and not when ``every_row`` names reports that read every row
    (``reports.EVERY_ROW``)."""
    if args.windowed == "false":
        return False
    if args.ncu_report:
        say("reading the whole trace: --ncu_report joins ncu's launches to every kernel row",
            "detailed")  # fmt: skip
        return False
    if every_row:
        say(f"reading the whole trace: --reports {every_row[0]} reads every row", "detailed")
        return False
    from jlprof.engine.read.nvprof import is_nvprof
    from jlprof.engine.read.store import is_dldb, is_jlprof_db

    if is_nvprof(db):  # an nvprof database is read whole (jlprof.engine.read.nvprof)
        if args.windowed == "true":
            raise OptionError("--windowed true reads nsys SQLite exports only, not nvprof's.")
        return False
    if args.windowed == "true":
        if db.suffix != ".sqlite" or is_jlprof_db(db) or is_dldb(db):
            raise OptionError("--windowed true reads nsys SQLite exports only.")
        _warn_if_short(db, say)
        return True
    if db.suffix != ".sqlite":
        return False
    from jlprof.engine.memory import available_bytes

    free = available_bytes()
    if free is None:
        return False
    try:  # an event row takes 16 bytes of the file at least: a small file needs no look
        if WHOLE_BYTES_BASE + WHOLE_BYTES_PER_EVENT * (db.stat().st_size // 16) <= free // 2:
            return False
    except OSError:
        return False  # the whole path says what is wrong with the file
    if is_jlprof_db(db) or is_dldb(db):
        return False
    from jlprof.engine.windowed.windows import events_at_most

    try:
        events = events_at_most(db)
    except JlprofError:  # not an export, damaged: the whole path says so
        return False
    if WHOLE_BYTES_BASE + WHOLE_BYTES_PER_EVENT * events <= free // 2:
        return False
    _warn_if_short(db, say, events, free)
    return True


def _warn_if_short(db: Path, say: _Say, events: int | None = None, free: int | None = None) -> None:
    """Say so before a windowed run that memory looks too short even for it (the windowed
    path still grows with the trace): a warning naming the cause and the way out, rather
    than the system stopping the run later with no word."""
    from jlprof.engine.memory import available_bytes
    from jlprof.engine.windowed.windows import events_at_most

    free = available_bytes() if free is None else free
    if free is None:
        return
    try:
        events = events_at_most(db) if events is None else events
    except JlprofError:
        return  # the run itself says what is wrong with the file
    need = WINDOWED_BYTES_BASE + WINDOWED_BYTES_PER_EVENT * events
    if need > free:
        say(
            f"warning: {db.name} holds {events:,} events; read by windows, its analysis "
            f"still takes about {need / 2**30:.1f} GiB at its peak, and {free / 2**30:.1f} "
            "GiB are available now: the system may stop it for lack of memory. Free memory "
            "(close other programs) or run it on a machine with more.",
            "minimal",
        )


def _load_windowed(
    db: Path,
    args: argparse.Namespace,
    say: _Say,
    bar: StageProgress,
    formats: list[str],
    out: Path,
    dldb: list[InThread[Path]],
    reports: list[str],
):
    """The profile of ``db`` by the windowed engine, the iteration report written as its
    windows are read and DLProf's database (and --save_db's) beside them (jobs in ``dldb``,
    begun as soon as the small frames are read); None when the export needs the whole-trace
    path (said why; the jobs begun, if any, cancelled and taken out of ``dldb``)."""
    from jlprof.engine.windowed.windowed_run import Unsuitable
    from jlprof.profile import load_windowed
    from jlprof.reports.writers import iteration_files

    def files():
        return iteration_files(out, args.profile_name, formats, args.force)

    started = len(dldb)
    sinks: list = []  # DLProf's database, begun as soon as the small frames are read

    def read(small) -> None:
        sinks.extend(_start_windowed_dldb(small, db, out, args, say, dldb))
        if args.save_db:  # the jlprof database asked for, from the same frames
            from jlprof.engine.windowed.windowed_run import WindowsDldb

            sinks.append(WindowsDldb(small, Path(args.save_db), "--save_db"))
            dldb.append(sinks[-1].job)

    def planned(run) -> list:
        for sink in sinks:
            sink.planned(run)
        return sinks

    try:
        return load_windowed(
            db,
            **_analysis_options(args, bar),
            iteration_files=files if "iteration" in reports else None,
            launch_stats="launch_stats" in reports,
            idle_causes="idle_causes" in reports,
            on_read=read,
            on_run=planned,
        )
    except Unsuitable as why:
        # the database begun beside the run goes (its temporary file with it), or the whole
        # path's would wait behind it
        for job in dldb[started:]:
            job.cancel()
        del dldb[started:]
        say(f"reading the whole trace: {why}", "detailed")
        return None


def _start_windowed_dldb(
    small, source: Path, out: Path, args: argparse.Namespace, say: _Say, jobs: list
) -> list:
    """:func:`_start_dldb` for the windowed engine: the database written from the trace's
    small frames (``small``, at once) and the windows' frames in a thread (``WindowsDldb``,
    its job added to ``jobs``); the windows' sinks."""
    target = _dldb_target(source, out, args, say)
    if target is None:
        return []
    from jlprof.engine.windowed.windowed_run import WindowsDldb

    sink = WindowsDldb(small, target)
    jobs.append(sink.job)
    return [sink]


def _start_dldb(
    trace, source: Path, out: Path, args: argparse.Namespace, say: _Say
) -> list[InThread[Path]]:
    """DLProf's database, ``<profile_name>_dldb.sqlite`` (guide §2.3, §4.3), every run: the
    trace for fast re-analysis with ``--database`` (jlprof's content, see engine/read/store.py).
    Started in a thread as soon as the trace is read: it needs nothing of the analysis, and
    writing it (~0.4 s at 1M kernels, ~4 s at 10M) overlaps the correlation."""
    target = _dldb_target(source, out, args, say)
    if target is None:
        return []
    from jlprof.engine.read.store import save_trace

    return [
        InThread(lambda check: save_trace(trace, target, "--output_path", check), "jlprof-dldb")
    ]


def _dldb_target(source: Path, out: Path, args: argparse.Namespace, say: _Say) -> Path | None:
    """Where this run writes DLProf's database, or None (not asked, simple mode, kept)."""
    if not args.dldb:
        return None
    target = report_path(out, args.profile_name, "dldb", "sqlite")
    if target.exists() and target.resolve() == source.resolve():
        return None  # re-analysing the database itself
    if args.mode == "simple":  # §3.1: no viewer files in simple mode (given, never defaulted)
        say(f"not writing {target.name}: simple mode creates no DLProf database", "detailed")
        return None
    if target.exists() and not args.force:
        say(f"kept the existing {target}; use -f true to overwrite", "detailed")
        return None
    return target


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
    words = sys.argv[1:] if argv is None else list(argv)
    if words[:1] == ["diff"]:  # sub-command: jlprof diff BASE NEW (docs/diff.md)
        from jlprof.commands.diff import run as run_diff

        return run_diff(words[1:])
    if words[:1] == ["ncu"]:  # sub-command: jlprof ncu REPORT | --kernels ... (docs/kernels.md)
        from jlprof.commands.ncu import run as run_ncu

        return run_ncu(words[1:])
    if words[:1] == ["prof"]:  # sub-command: jlprof prof DB, PyProf's table (docs/kernels.md)
        from jlprof.commands.prof import run as run_prof

        return run_prof(words[1:])
    if words[:1] == ["view"]:  # sub-command: jlprof view PROFILE (docs/viewer.md)
        from jlprof.viewer import main as view

        return view(words[1:])
    args, given = parse(argv)
    say = _Say(args.verbosity)
    main_thread = threading.current_thread() is threading.main_thread()
    old_term = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        return run(args, say, given)
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


def entry() -> None:
    """The process's entry (the ``jlprof`` script, ``python -m jlprof``): :func:`main`, then
    the exit. Every file is whole and closed when ``main`` returns; what is left is the
    interpreter's teardown, whose garbage-collection passes over every loaded module's objects
    took 0.10-0.17 s after each 1M-kernel command (0.05 s once :func:`gc.freeze` has moved
    them out of the collector's view; the memory goes with the process). ``main`` itself
    stays free of it, for callers in a process that goes on."""
    status = main()
    gc.freeze()
    sys.exit(status)


def _fail(args: argparse.Namespace, message: str, status: int) -> int:
    if args.verbosity == "diagnostic":
        traceback.print_exc()
    print(f"jlprof: error: {message}", file=sys.stderr)
    return status


def _partial_note(prof) -> str:
    """Says which partial intervals the summary's mean ± std iteration time leaves out."""
    from jlprof.engine.analyses.outliers import excluded

    left = excluded(prof.iterations, prof.iter_start, prof.iter_stop)
    if not left:
        return ""
    return (
        f" (mean ± std iteration time leaves out the partial intervals {', '.join(map(str, left))})"
    )


if __name__ == "__main__":  # pragma: no cover
    entry()
