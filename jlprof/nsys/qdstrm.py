"""Importing a ``.qdstrm`` into a ``.nsys-rep`` with QdstrmImporter (Debian's nsys leaves it
to us)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from jlprof.errors import JlprofError
from jlprof.nsys.files import _check_input, _derived_target, _mark_derived, _reuse_or_refuse
from jlprof.nsys.locate import NsysFailed, NsysInfo, NsysNotFound, Progress, _info
from jlprof.nsys.tool import _run_tool


def import_qdstrm(
    path: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    force: bool = False,
    nsys: NsysInfo | None = None,
    progress: Progress | None = None,
) -> Path:
    """Turn a raw ``.qdstrm`` into a ``.nsys-rep`` beside it with NVIDIA's QdstrmImporter.

    Reuses an up-to-date report. The ``.qdstrm`` is kept, unchanged: QdstrmImporter rewrites
    the file it imports (a crashed recording grew by 29 bytes), so it imports a temporary copy.
    The report is written under a temporary name and renamed, so an interrupted import never
    leaves a report that looks complete.
    """
    say = progress or (lambda _msg: None)
    source = _check_input(path)
    if source.suffix != ".qdstrm":
        raise JlprofError(f"{source}: expected a .qdstrm recording")
    target = _derived_target(source, ".nsys-rep", out)
    if target.suffix != ".nsys-rep":
        raise JlprofError(f"{target}: the imported report must end in .nsys-rep")
    if _reuse_or_refuse(target, source, force, say):
        return target
    info = _info(nsys)
    if info.importer is None:
        raise NsysNotFound(
            f"cannot import {source}: QdstrmImporter was not found next to {info.path}; "
            "install the full Nsight Systems package (it ships host-linux-x64/QdstrmImporter)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.stem}.jlprof-{os.getpid()}.nsys-rep")
    copy = partial.with_suffix(".qdstrm")
    say(f"Importing {source.name} -> {target.name}")
    try:
        shutil.copyfile(source, copy)
        _run_tool(
            [str(info.importer), "-i", str(copy), "-o", str(partial)],
            what=f"importing {source} with {info.importer.name}",
        )
        if not partial.exists():
            raise NsysFailed(f"{info.importer.name} wrote no report for {source}")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
        copy.unlink(missing_ok=True)
    _mark_derived(target, source)
    return target
