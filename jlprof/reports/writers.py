"""CSV, JSON and Parquet writers: ``<profile_name>_<report>.<ext>`` in the output path (§10.1).

The report word is the one given to ``--reports`` (``node_op`` -> ``dlprof_node_op.csv``), except
the detail report, whose file DLProf names ``dlprof_detailed.csv`` (guide §13.1.2). JSON is a
list of records keyed by the report's column names; the summary's JSON is one object with an
entry per table, whose rows are keyed by the guide's row names. The summary's CSV is DLProf's
layout: the guide's §10.2 tables one after the other, each under its title
(:func:`summary_csv`). Parquet (beyond DLProf) is one file per report with typed columns (the
summary's is its tidy Table/Row/Column/Value frame). The rows are streamed through Arrow in
batches (:mod:`jlprof.reports.encoders`): the text is pandas' text, at a fraction of the time and
without a second copy of the report in memory.
Existing files are kept unless ``force`` (DLProf's ``-f true``); every file is written whole or
not at all.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from jlprof import background, outputs
from jlprof.errors import OptionError
from jlprof.outputs import prepare_folder
from jlprof.reports import ALIASES, REPORT_NAMES, REPORTS, catalog
from jlprof.reports.encoders import STREAMS, WRITERS, write_frames

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

FORMATS = tuple(WRITERS)  # csv, json, parquet


def _plain(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


# file names that are not the report's word (guide §13.1.2 lists dlprof_detailed.csv)
FILE_WORDS = {"detail": "detailed"}
SIMPLE_REPORTS = ("kernel",)  # guide §15.1.4: "the only available report type for simple mode"


def report_path(output: Path, profile_name: str, report: str, fmt: str) -> Path:
    """``<profile_name>_<report>.<fmt>``, spaces in the profile name as underscores (§10.1.3)."""
    word = FILE_WORDS.get(report, report)
    return output / f"{profile_name.replace(' ', '_')}_{word}.{fmt}"


def available(p: Analysis, reports: list[str]) -> tuple[list[str], list[str]]:
    """The reports ``p``'s mode can write, and those it cannot: with ``-m simple`` given,
    only the kernel report (guide §15.1.4); every report otherwise."""
    if p.mode == "simple" and getattr(p, "mode_given", False):
        return [r for r in reports if r in SIMPLE_REPORTS], [
            r for r in reports if r not in SIMPLE_REPORTS
        ]
    return list(reports), []


def check_outputs(
    reports: list[str] | tuple[str, ...],
    formats: list[str] | tuple[str, ...],
    profile_name: str,
    *,
    reports_given: bool = False,
) -> tuple[list[str], list[str]]:
    """The reports (``all`` expanded) and formats to write, checked; no report is fine (DLProf's
    default: the CLI prints the summary). ``node_op`` (guide §10.1.1) is the op type report
    written under that word.

    Shared by the CLI, the magic and :meth:`Profile.write_reports`, and run before any trace is
    read: a typo must not cost the whole load. Raises :class:`OptionError`. ``reports_given``:
    ``--reports`` was on the command line, so an empty list is a mistake (``--reports=``), not
    the default.
    """
    if isinstance(reports, str) or isinstance(formats, str):
        raise OptionError("reports and formats are lists of names, e.g. ['summary'] and ['csv'].")
    if not formats:
        raise OptionError("--formats is empty; choose from csv, json and parquet.")
    if reports_given and not reports:
        raise OptionError(
            f"--reports is empty; choose from {', '.join(REPORT_NAMES)} or all (without "
            "--reports no report is written and the summary is printed)."
        )
    chosen = [*REPORTS, *(r for r in reports if r != "all")] if "all" in reports else reports
    chosen = list(dict.fromkeys(chosen))
    bad = [r for r in chosen if r not in REPORT_NAMES]
    if bad:
        raise OptionError(
            f"unknown report {bad[0]!r}; choose from {', '.join(REPORT_NAMES)} or all."
        )
    badf = [f for f in formats if f not in FORMATS]
    if badf:
        raise OptionError(f"unknown format {badf[0]!r}; choose from csv, json and parquet.")
    check_profile_name(profile_name)
    return chosen, list(dict.fromkeys(formats))


def check_profile_name(name: str) -> str:
    """``--profile_name`` is a file-name prefix: no folder part, so reports stay in the output
    folder (``../../escape`` would write elsewhere)."""
    if not isinstance(name, str) or not name.strip():
        raise OptionError("--profile_name is empty; give a file-name prefix such as dlprof.")
    if "/" in name or os.sep in name or "\\" in name or "\0" in name or name in (".", ".."):
        raise OptionError(
            f"--profile_name {name!r} is not a plain file name; give a prefix without a folder "
            "(choose the folder with --output_path)."
        )
    return name


def write_reports(
    p: Analysis,
    output: Path,
    reports: list[str] | tuple[str, ...],
    formats: list[str] | tuple[str, ...],
    force: bool,
    progress: Callable[[str], None] | None = None,
) -> list[Path]:
    """Write each report in each format; returns the paths written (skipped ones excluded).

    Each file is written whole or not at all (:func:`jlprof.outputs.written_file`).
    ``progress`` is told each stage by name: ``building <report>``, ``writing <report>.<ext>``.
    """
    reports, formats = check_outputs(reports, formats, p.profile_name)
    reports = available(p, reports)[0]
    say = progress or (lambda _m: None)
    prepare_folder(output)
    written: dict[str, list[Path]] = {}
    streamed: background.InThread[None] | None = None
    try:
        # the iteration report first: it streams in a thread while the others are built
        for rep in sorted(reports, key=lambda r: r != "iteration"):
            if rep in p.written_early:  # written while the windowed engine read its rows
                written[rep] = p.written_early[rep]
                continue
            targets = {fmt: report_path(output, p.profile_name, rep, fmt) for fmt in formats}
            todo = {f: t for f, t in targets.items() if force or not t.exists()}
            if not todo:
                continue
            say(f"building {rep}")
            if rep == "iteration":  # a row per GPU activity: streamed, never held whole
                streamed = _start_streamed(p, todo, say)
            else:
                if streamed is None:
                    # nothing streams beside the cube (the windowed engine wrote the iteration
                    # report as it read): its group-node partials are built with its other
                    # parts, beside them on a small trace, not alone for the last report
                    p.ensure_cube(groups="group_node" in reports)
                _write_one(p, rep, todo, say)
            written[rep] = list(todo.values())
        if streamed is not None:
            streamed.wait()
    except BaseException:
        if streamed is not None:
            streamed.cancel()  # its files go: none of a run that failed
        raise
    return [path for rep in reports for path in written.get(rep, [])]


def _write_one(p: Analysis, rep: str, todo: dict[str, Path], say: Callable[[str], None]) -> None:
    """One report held whole (they are small: per op, kernel, group or iteration), in each
    format of ``todo``; it goes when this returns, so one is in memory at a time."""
    df = catalog.report(p, ALIASES.get(rep, rep))
    for fmt, target in todo.items():
        say(f"writing {rep}.{fmt}")
        with outputs.written_file(target, background=fmt != "parquet") as f:
            if rep == "summary" and fmt == "csv":
                f.write(summary_csv(catalog.summary(p)).encode())
            elif rep == "summary" and fmt == "json":
                text = json.dumps(_plain(catalog.summary(p)), indent=2, default=str)
                f.write(text.encode())
            else:
                WRITERS[fmt](df, f)


def _start_streamed(
    p: Analysis, todo: dict[str, Path], say: Callable[[str], None]
) -> background.InThread[None]:
    """The iteration report, part by part (:func:`tables.iteration_parts`), into every format
    at once, in a thread of its own while the caller builds the other reports (at 10M
    kernels its 4.5 GB CSV takes ~3.5 s of one core; the others, with the group-node
    partials a command builds for them, ~2.6 s of the other). Each
    part is gathered once and written to each file, so memory holds one part, not the
    10M-row frame. Every file whole or not at all: an error or a cancel leaves none."""
    from jlprof.engine.memory import heavy_stage
    from jlprof.reports import tables

    lo, hi = p.range_of(None, None)
    p.gpu_iter  # noqa: B018 - found here, not raced for by the stream and the cube's builder
    for fmt in todo:
        say(f"writing iteration.{fmt}")

    def work(check: Callable[[], None]) -> None:
        with _parts_into(todo) as write, heavy_stage():
            for part in tables.iteration_parts(p, lo, hi):
                check()
                write(part)
                del part

    return background.InThread(work, "jlprof-iteration")


@contextmanager
def iteration_files(
    output: Path, profile_name: str, formats: list[str] | tuple[str, ...], force: bool
) -> Iterator[tuple[Callable[[pd.DataFrame], None], list[Path]]]:
    """The iteration report's files open for parts written in order (the windowed engine's
    windows, :func:`jlprof.profile.load_windowed`): yields (write one part, the paths). Every
    file whole or not at all: an error inside leaves none of them."""
    targets = {f: report_path(output, profile_name, "iteration", f) for f in formats}
    todo = {f: t for f, t in targets.items() if force or not t.exists()}
    with _parts_into(todo, bursty=True) as write:  # a part a window, the window's work between
        yield write, list(todo.values())


@contextmanager
def _parts_into(
    todo: dict[str, Path], bursty: bool = False
) -> Iterator[Callable[[pd.DataFrame], None]]:
    """A report's files (format -> path) open for its parts in order: yields a function
    writing one part to every file (CSV and JSON laid out once, batch by batch). Every file
    whole or not at all. ``bursty``: :func:`jlprof.outputs.written_file`'s."""
    from contextlib import ExitStack

    def opened(fmt: str, target: Path) -> IO[bytes]:
        background = fmt != "parquet"
        return files.enter_context(
            outputs.written_file(target, background=background, bursty=bursty and background)
        )

    with ExitStack() as files:
        streams = [STREAMS[fmt](opened(fmt, t)) for fmt, t in todo.items()]
        yield lambda part: write_frames(streams, part)
        for s in streams:
            s.close()


def summary_csv(tables: dict[str, dict[str, Any]]) -> str:
    """The summary as DLProf lays it out: each §10.2 table under its title line, a blank line
    between tables; one ``Row Name,Value`` row per metric, and for the All Ops / All Kernels
    tables a header of their columns then one row per category."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for n, (title, rows) in enumerate(tables.items()):
        if n:
            w.writerow([])
        w.writerow([title])
        values = list(rows.values())
        if values and isinstance(values[0], dict):
            w.writerow(["", *values[0].keys()])
            w.writerows([name, *(_plain(v) for v in row.values())] for name, row in rows.items())
        else:
            w.writerows([name, _plain(v)] for name, v in rows.items())
    return buf.getvalue()


def read_summary_csv(text: str) -> dict[str, dict[str, Any]]:
    """:func:`summary_csv` read back (values as strings): for tests and scripts."""
    import csv
    import io

    tables: dict[str, dict[str, Any]] = {}
    for block in text.strip("\n").split("\n\n"):
        rows = list(csv.reader(io.StringIO(block)))
        title, body = rows[0][0], rows[1:]
        if body and body[0] and body[0][0] == "" and len(body[0]) > 2:
            head = body[0][1:]
            tables[title] = {r[0]: dict(zip(head, r[1:], strict=True)) for r in body[1:]}
        else:
            tables[title] = {r[0]: r[1] for r in body}
    return tables


def skipped(p: Analysis, output: Path, reports: list[str], formats: list[str]) -> list[Path]:
    """Files that exist and would be kept without force (for the CLI's message)."""
    return [
        report_path(output, p.profile_name, r, f)
        for r in reports
        for f in formats
        if report_path(output, p.profile_name, r, f).exists()
    ]
