"""``nsys export --type sqlite`` and :func:`ensure_sqlite`: whatever nsys file the user has,
the SQLite export to read."""

from __future__ import annotations

import os
import re
from pathlib import Path

from jlprof.engine.read.schema import is_sqlite
from jlprof.errors import JlprofError
from jlprof.nsys.files import _check_input, _derived_target, _mark_derived, _reuse_or_refuse
from jlprof.nsys.locate import (
    _REPORT_SUFFIXES,
    NsysFailed,
    NsysInfo,
    Progress,
    _info,
)
from jlprof.nsys.qdstrm import import_qdstrm
from jlprof.nsys.tool import _run_tool

_NEWER_VERSION = re.compile(r"(\d{4})@(\d+)@(\d+)")


def export_sqlite(
    rep_path: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    force: bool = False,
    nsys: NsysInfo | None = None,
    progress: Progress | None = None,
) -> Path:
    """``nsys export --type sqlite`` of a .nsys-rep/.qdrep; refuses to overwrite without force.

    The export is written under a temporary name and renamed, so a half-written database is never
    mistaken for an up-to-date one later.
    """
    say = progress or (lambda _msg: None)
    source = _check_input(rep_path)
    if source.suffix not in _REPORT_SUFFIXES:
        raise JlprofError(f"{source}: expected an nsys report (.nsys-rep or .qdrep)")
    target = _derived_target(source, ".sqlite", out)
    if target.exists() and not force:
        raise JlprofError(f"{target} already exists: pass force (-f true) to overwrite it")
    info = _info(nsys)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.jlprof-{os.getpid()}.partial")
    say(f"Exporting {source.name} -> {target.name}")
    try:
        _run_tool(
            [
                str(info.path),
                "export",
                "--type",
                "sqlite",
                "--force-overwrite",
                "true",
                "--output",
                str(partial),
                str(source),
            ],
            what=f"nsys export of {source}",
        )
        if not partial.exists():
            raise NsysFailed(f"nsys export wrote nothing for {source}")
        os.replace(partial, target)
    except NsysFailed as exc:
        newer = _NEWER_VERSION.search(str(exc))
        if newer and tuple(map(int, newer.groups())) > info.version[:3]:
            made_by = ".".join(newer.groups())
            raise NsysFailed(
                f"{source} was recorded by nsys {made_by}, newer than this nsys "
                f"{info.version_text}: export it to SQLite with nsys {made_by} or later "
                "(nsys export --type sqlite) and pass the .sqlite file",
                exc.output,
            ) from None
        raise
    finally:
        partial.unlink(missing_ok=True)
    _mark_derived(target, source)
    return target


def ensure_sqlite(
    path: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    force: bool = False,
    nsys: NsysInfo | None = None,
    progress: Progress | None = None,
) -> Path:
    """Whatever nsys file the user has, the SQLite export to read.

    ``.sqlite`` is returned as is; ``.nsys-rep``/``.qdrep`` is exported next to it (or to ``out``;
    to ``~/.cache/jlprof`` when its folder is read-only) unless an up-to-date export is already
    there; ``.qdstrm`` is imported first. Nothing the user recorded is removed.
    """
    say = progress or (lambda _msg: None)
    source = _check_input(path)
    if source.suffix in (".sqlite", ".db", ".sqlite3"):
        if not is_sqlite(source):
            raise JlprofError(f"{source}: not an SQLite database")
        return source
    if source.suffix == ".qdstrm":
        source = import_qdstrm(source, force=force, nsys=nsys, progress=say)
    elif source.suffix not in _REPORT_SUFFIXES:
        raise JlprofError(
            f"{source}: not an nsys file (expected .sqlite, .nsys-rep, .qdrep or .qdstrm)"
        )
    target = _derived_target(source, ".sqlite", out)
    if _reuse_or_refuse(target, source, force, say):
        return target
    return export_sqlite(source, target, force=True, nsys=nsys, progress=say)
