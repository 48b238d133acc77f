"""CSV and JSON writers: ``<profile_name>_<report>.<ext>`` in the output path (guide §10.1).

JSON is a list of records keyed by the report's column names; the summary's JSON is one
object with an entry per table, whose rows are keyed by the guide's row names.
Existing files are kept unless ``force`` (DLProf's ``-f true``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from jlprof.errors import JlprofError

if TYPE_CHECKING:
    from jlprof.engine.profile import Profile

FORMATS = ("csv", "json")


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


def write_reports(
    p: Profile, output: Path, reports: list[str], formats: list[str], force: bool
) -> list[Path]:
    """Write each report in each format; returns the paths written (skipped ones excluded)."""
    from jlprof.engine.profile import REPORTS

    bad = [r for r in reports if r not in REPORTS]
    if bad:
        raise JlprofError(
            f"unknown report(s) {', '.join(bad)}; choose from {', '.join(REPORTS)} or all."
        )
    badf = [f for f in formats if f not in FORMATS]
    if badf:
        raise JlprofError(f"unknown format(s) {', '.join(badf)}; choose csv and/or json.")
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for rep in reports:
        targets = {fmt: report_path(output, p.profile_name, rep, fmt) for fmt in formats}
        todo = {f: t for f, t in targets.items() if force or not t.exists()}
        if not todo:
            continue
        df = p.report(rep)
        for fmt, target in todo.items():
            if fmt == "csv":
                df.to_csv(target, index=False)
            elif rep == "summary":
                target.write_text(json.dumps(_plain(p.summary()), indent=2, default=str))
            else:
                target.write_text(df.to_json(orient="records", indent=2, double_precision=15))
            written.append(target)
    return written


def skipped(p: Profile, output: Path, reports: list[str], formats: list[str]) -> list[Path]:
    """Files that exist and would be kept without force (for the CLI's message)."""
    return [
        report_path(output, p.profile_name, r, f)
        for r in reports
        for f in formats
        if report_path(output, p.profile_name, r, f).exists()
    ]
