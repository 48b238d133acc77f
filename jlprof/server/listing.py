"""Find profiles under the Jupyter server root for the JupyterLab sidebar.

Pure filesystem code (no Jupyter import) so it is tested without a server. Every path a client
names is resolved and confined to the root: absolute paths, ``..`` parts and symlinks that lead
out of the root are refused. The walk is cheap (names and ``stat``); manifests and SQLite files
are opened only for the page of results actually returned, so big trees page quickly.
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from jlprof.engine.read.schema import export_error

MANIFEST = "jlprof_run.json"
RUNS_DIR = "jlprof_runs"
# Folders never worth walking into: caches, environments, VCS data (dot folders are skipped too).
SKIP_DIRS = frozenset({"node_modules", "__pycache__", "site-packages"})
MAX_DEPTH = 8
MAX_VISITED = 100_000  # directory entries looked at before the walk stops (``truncated``)
DEFAULT_LIMIT = 100
MAX_LIMIT = 500
HEADLINE_KEYS = {
    "iterations": int,
    "wall_ns": int,
    "gpu_util_pct": float,
    "tc_util_pct": float,
    "avg_iter_ns": float,
}


class PathRefused(Exception):
    """A client path that names something outside the root (HTTP 403)."""


class PathMissing(Exception):
    """A client path that does not exist under the root (HTTP 404)."""


class NotAProfile(Exception):
    """A path inside the root that is no profile (HTTP 400)."""


def confine(root: Path, rel: str, allow_hidden: bool = True) -> Path:
    """The real path of ``rel`` (a root-relative API path) if it stays inside ``root``.

    Refuses absolute paths and ``..`` parts outright (no normalisation tricks) and resolves
    symlinks before checking, so a link pointing out of the root is refused too.
    """
    rel = rel.strip()
    if rel.startswith(("/", "\\")) or (len(rel) > 1 and rel[1] == ":") or "\x00" in rel:
        raise PathRefused(f"absolute paths are not allowed: {rel!r}")
    parts = PurePosixPath(rel.replace("\\", "/")).parts
    if ".." in parts:
        raise PathRefused(f"'..' is not allowed in paths: {rel!r}")
    if not allow_hidden and any(p.startswith(".") for p in parts):
        # as the contents API: hidden files do not exist unless the server allows them
        raise PathMissing(f"no such file or folder: {rel!r} (hidden)")
    real_root = root.resolve()
    target = real_root.joinpath(*parts)
    try:
        real = target.resolve(strict=True)
    except (FileNotFoundError, NotADirectoryError) as err:
        raise PathMissing(f"no such file or folder: {rel!r}") from err
    if real != real_root and real_root not in real.parents:
        raise PathRefused(f"{rel!r} leads outside the server root")
    return real


def api_path(root: Path, path: Path) -> str:
    """``path`` relative to the (resolved) root, '/'-separated, as JupyterLab names files."""
    return path.relative_to(root.resolve()).as_posix()


@dataclass
class Candidate:
    """What the cheap walk found: a run/reports folder or a raw nsys file."""

    kind: str  # "run" | "reports" | "nsys-rep" | "sqlite"
    path: Path
    mtime: float


def _is_report_file(name: str) -> bool:
    stem, _, ext = name.rpartition(".")
    return ext in ("csv", "json") and stem.endswith("_summary") and name != MANIFEST


def _inside(real_root: Path, path: Path) -> bool:
    try:
        real = path.resolve(strict=True)
    except OSError:
        return False
    return real == real_root or real_root in real.parents


def _file_inside(real_root: Path, entry: os.DirEntry[str]) -> bool:
    """A regular file; when it is a symlink, one that resolves inside the root."""
    try:
        if not entry.is_file():
            return False
    except OSError:
        return False
    return not entry.is_symlink() or _inside(real_root, Path(entry.path))


def walk(root: Path, start: Path) -> tuple[list[Candidate], bool]:
    """Candidates under ``start`` (newest first) and whether the walk hit its limits.

    Symlinked folders are not followed; a symlinked file counts only if it resolves inside
    the root. Files inside a run folder belong to that run and are not listed on their own.
    """
    real_root = root.resolve()
    found: list[Candidate] = []
    visited = 0
    truncated = False
    stack: list[tuple[Path, int]] = [(start, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        visited += len(entries)
        if visited > MAX_VISITED:
            truncated = True
            break
        names = {e.name: e for e in entries}
        if MANIFEST in names:
            found.append(Candidate("run", folder, _mtime(names[MANIFEST])))
            continue
        reports = False
        reps: list[os.DirEntry[str]] = []
        exports: list[os.DirEntry[str]] = []
        for e in entries:
            if e.name.startswith("."):
                continue
            if e.is_dir(follow_symlinks=False):
                if e.name not in SKIP_DIRS:
                    if depth < MAX_DEPTH:
                        stack.append((Path(e.path), depth + 1))
                    else:
                        truncated = True
            elif e.name.endswith(".nsys-rep"):
                reps.append(e)
            elif e.name.endswith(".sqlite"):
                exports.append(e)
            elif _is_report_file(e.name):
                reports = True
        rep_stems = {e.name[: -len(".nsys-rep")] for e in reps}
        for e in reps:
            if _file_inside(real_root, e):
                found.append(Candidate("nsys-rep", Path(e.path), _mtime(e)))
        for e in exports:
            # an export beside its .nsys-rep is the same profile: listed once, as the .nsys-rep
            if e.name[: -len(".sqlite")] not in rep_stems and _file_inside(real_root, e):
                found.append(Candidate("sqlite", Path(e.path), _mtime(e)))
        if reports and folder != start:
            found.append(Candidate("reports", folder, folder.stat().st_mtime))
    found.sort(key=lambda c: (-c.mtime, str(c.path)))
    return found, truncated


def _mtime(entry: os.DirEntry[str]) -> float:
    try:
        return entry.stat().st_mtime
    except OSError:
        return 0.0


def nsys_sqlite_error(path: Path) -> str | None:
    """None when ``path`` is an nsys SQLite export, else why not (one line): the reader's rule."""
    return export_error(path)


def _folder_size(folder: Path) -> int:
    total = 0
    for e in os.scandir(folder):
        if e.is_file(follow_symlinks=False):
            total += e.stat().st_size
    return total


def read_manifest(folder: Path) -> tuple[dict[str, Any], str | None]:
    """The manifest of a run folder (only well-typed keys kept) and a problem, if any."""
    if (folder / MANIFEST).is_symlink():
        return {}, f"{MANIFEST} is a symbolic link: not read"
    if not (folder / MANIFEST).is_file():  # a FIFO would block the read
        return {}, f"{MANIFEST} is not a regular file: not read"
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return {}, f"{MANIFEST} is not readable JSON ({err.__class__.__name__}: {err})"
    if not isinstance(data, dict):
        return {}, f"{MANIFEST} is not a JSON object"
    return data, None


def _clean_name(folder: Path, value: Any) -> Path | None:
    """A file named by the manifest, only if it is a plain name inside the run folder."""
    if not isinstance(value, str) or value in ("", ".", "..") or "/" in value or "\\" in value:
        return None
    path = folder / value
    return path if path.is_file() and _inside(folder, path) else None


def describe(root: Path, cand: Candidate) -> dict[str, Any]:
    """The sidebar's entry for one candidate: names, date, size, headline numbers, problems."""
    real_root = root.resolve()
    path = cand.path
    entry: dict[str, Any] = {
        "kind": cand.kind,
        "path": api_path(root, path),
        "name": path.name,
        "modified": cand.mtime,
        "error": None,
    }
    if cand.kind in ("nsys-rep", "sqlite"):
        entry["size_bytes"] = path.stat().st_size
        database = path
        if cand.kind == "sqlite":
            entry["error"] = nsys_sqlite_error(path)
        else:
            export = path.with_name(path.name[: -len(".nsys-rep")] + ".sqlite")
            if export.is_file() and _inside(real_root, export) and not nsys_sqlite_error(export):
                database = export
        entry["database"] = api_path(root, database)
        entry["open_dir"] = api_path(root, path.parent) if path.parent != real_root else ""
        return entry

    entry["size_bytes"] = _folder_size(path)
    # A notebook opened on a run sits where the profiled notebook ran (above jlprof_runs/).
    base = path.parent.parent if path.parent.name == RUNS_DIR else path.parent
    if real_root not in base.parents and base != real_root:
        base = real_root
    entry["open_dir"] = api_path(root, base) if base != real_root else ""
    database = None
    if cand.kind == "run":
        manifest, problem = read_manifest(path)
        entry["error"] = problem
        for key in ("created", "profile_name", "key_node", "status"):
            value = manifest.get(key)
            entry[key] = value if isinstance(value, str) else None
        if manifest.get("error") and isinstance(manifest["error"], str) and not problem:
            entry["error"] = manifest["error"]
        headline = {}
        for key, kind in HEADLINE_KEYS.items():
            value = manifest.get(key)
            # json reads 1e400 as inf and NaN as nan: neither is a number the sidebar can show
            if (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
            ):
                headline[key] = kind(value)
        entry["headline"] = headline
        database = _clean_name(path, manifest.get("database")) or _clean_name(
            path, manifest.get("nsys_report")
        )
    if database is None:
        for pattern in ("*.sqlite", "*.nsys-rep"):
            inside = [p for p in sorted(path.glob(pattern)) if _inside(real_root, p)]
            if inside:
                database = inside[0]
                break
    if database is None and entry["error"] is None:
        entry["error"] = "no .sqlite or .nsys-rep file in this folder"
    entry["database"] = api_path(root, database) if database is not None else None
    return entry


def _describe_or_error(root: Path, cand: Candidate) -> dict[str, Any]:
    """:func:`describe`, or an entry naming the problem: one bad folder never hides the others."""
    try:
        return describe(root, cand)
    except (OSError, ValueError, OverflowError, TypeError) as err:
        return {
            "kind": cand.kind,
            "path": api_path(root, cand.path),
            "name": cand.path.name,
            "modified": cand.mtime,
            "error": f"cannot be read: {err.__class__.__name__}: {err}",
            "database": None,
            "open_dir": "",
        }


def list_profiles(
    root: Path,
    rel: str = "",
    offset: int = 0,
    limit: int = DEFAULT_LIMIT,
    *,
    allow_hidden: bool = True,
) -> dict[str, Any]:
    """One page of the profiles under ``rel`` (root-relative), newest first."""
    start = confine(root, rel, allow_hidden)
    if not start.is_dir():
        raise PathMissing(f"not a folder: {rel!r}")
    offset = max(0, offset)
    limit = min(max(1, limit), MAX_LIMIT)
    cands, truncated = walk(root, start)
    page = [_describe_or_error(root, c) for c in cands[offset : offset + limit]]
    return {
        "path": api_path(root, start) if start != root.resolve() else "",
        "total": len(cands),
        "offset": offset,
        "limit": limit,
        "truncated": truncated,
        "items": page,
    }


def describe_path(root: Path, rel: str, *, allow_hidden: bool = True) -> dict[str, Any]:
    """The entry for one file or folder the user picked (file browser: 'Open in jlprof')."""
    path = confine(root, rel, allow_hidden)
    try:
        mode = path.stat().st_mode
    except OSError as err:
        raise PathMissing(f"no such file or folder: {rel!r}") from err
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        # a FIFO or device opened here would block the server until a writer came
        raise NotAProfile(f"{rel!r} is not a regular file or folder")
    if path.is_dir():
        kind = "run" if (path / MANIFEST).exists() else "reports"  # as walk() finds runs
    elif path.name.endswith(".nsys-rep"):
        kind = "nsys-rep"
    elif path.name.endswith(".sqlite"):
        kind = "sqlite"
    else:
        raise NotAProfile(f"{rel!r} is not a profile (.nsys-rep, nsys .sqlite or a run folder)")
    return describe(root, Candidate(kind, path, path.stat().st_mtime))
