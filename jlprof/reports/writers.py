"""CSV, JSON and Parquet writers: ``<profile_name>_<report>.<ext>`` in the output path (§10.1).

JSON is a list of records keyed by the report's column names; the summary's JSON is one
object with an entry per table, whose rows are keyed by the guide's row names. Parquet (beyond
DLProf) is one file per report with typed columns. The rows are streamed through Arrow in
batches (:mod:`jlprof.reports.encoders`): the text is today's pandas text, at a fraction of the
time and without a second copy of the report in memory.
Existing files are kept unless ``force`` (DLProf's ``-f true``); every file is written whole or
not at all.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from jlprof import outputs
from jlprof.errors import OptionError
from jlprof.outputs import prepare_folder
from jlprof.reports import REPORTS, catalog
from jlprof.reports.encoders import WRITERS

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


def report_path(output: Path, profile_name: str, report: str, fmt: str) -> Path:
    return output / f"{profile_name.replace(' ', '_')}_{report}.{fmt}"


def check_outputs(
    reports: list[str] | tuple[str, ...], formats: list[str] | tuple[str, ...], profile_name: str
) -> tuple[list[str], list[str]]:
    """The reports (``all`` expanded, ``node_op`` = ``op_type``) and formats to write, checked.

    Shared by the CLI, the magic and :meth:`Profile.write_reports`, and run before any trace is
    read: a typo must not cost the whole load. Raises :class:`OptionError`.
    """
    if isinstance(reports, str) or isinstance(formats, str):
        raise OptionError("reports and formats are lists of names, e.g. ['summary'] and ['csv'].")
    if not reports:
        raise OptionError(f"--reports is empty; choose from {', '.join(REPORTS)} or all.")
    if not formats:
        raise OptionError("--formats is empty; choose from csv, json and parquet.")
    # the guide's §10.1.1 calls the op type report "node_op"; ch. 15 calls it op_type
    chosen = list(REPORTS) if "all" in reports else reports
    chosen = list(dict.fromkeys("op_type" if r == "node_op" else r for r in chosen))
    bad = [r for r in chosen if r not in REPORTS]
    if bad:
        raise OptionError(f"unknown report {bad[0]!r}; choose from {', '.join(REPORTS)} or all.")
    badf = [f for f in formats if f not in FORMATS]
    if badf:
        raise OptionError(f"unknown format {badf[0]!r}; choose from csv, json and parquet.")
    check_profile_name(profile_name)
    return chosen, list(dict.fromkeys(formats))


def check_profile_name(name: str) -> str:
    """``--profile_name`` is a file-name prefix: no folder part, so reports stay in the output
    folder (``../../escape`` would write elsewhere)."""
    if not isinstance(name, str) or not name.strip():
        raise OptionError("--profile_name is empty; give a file-name prefix such as jlprof.")
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

    ``progress`` is told each stage by name: ``building <report>``, ``writing <report>.<ext>``.

    Each file is written whole or not at all (:func:`jlprof.outputs.written`).
    """
    reports, formats = check_outputs(reports, formats, p.profile_name)
    say = progress or (lambda _m: None)
    prepare_folder(output)
    written = []
    for rep in reports:
        targets = {fmt: report_path(output, p.profile_name, rep, fmt) for fmt in formats}
        todo = {f: t for f, t in targets.items() if force or not t.exists()}
        if not todo:
            continue
        say(f"building {rep}")
        df = catalog.report(p, rep)
        for fmt, target in todo.items():
            say(f"writing {rep}.{fmt}")
            with outputs.written_file(target, background=fmt != "parquet") as f:
                if fmt == "json" and rep == "summary":
                    text = json.dumps(_plain(catalog.summary(p)), indent=2, default=str)
                    f.write(text.encode())
                else:
                    WRITERS[fmt](df, f)
            written.append(target)
        del df  # one report in memory at a time
    return written


def skipped(p: Analysis, output: Path, reports: list[str], formats: list[str]) -> list[Path]:
    """Files that exist and would be kept without force (for the CLI's message)."""
    return [
        report_path(output, p.profile_name, r, f)
        for r in reports
        for f in formats
        if report_path(output, p.profile_name, r, f).exists()
    ]
