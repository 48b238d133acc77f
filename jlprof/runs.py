"""Run folders: where each ``%%dlprof`` run keeps its raw nsys files, reports and manifest.

A run folder is ``jlprof_runs/<YYYYmmdd-HHMMSS>-<short random>/`` under the notebook's working
directory, so re-running a cell never overwrites an earlier profile. ``jlprof_run.json`` describes
the run for the JupyterLab sidebar (issue 6), which reads the JSON itself; this module is the one
place that writes it. Only the standard library: the engine's headline dict is passed in.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
from pathlib import Path
from typing import Any

from jlprof.outputs import written

FORMAT = "jlprof-run/1"
MANIFEST = "jlprof_run.json"
RUNS_DIR = "jlprof_runs"
STATUSES = ("ok", "analysis_failed", "capture_empty")


def new_run_folder(root: str | os.PathLike[str] | None = None) -> Path:
    """Create a fresh ``jlprof_runs/<stamp>-<random>`` folder under ``root`` (default: cwd).

    The random part keeps two notebooks started in the same second apart; ``mkdir`` without
    ``exist_ok`` makes a collision an error instead of a shared folder.
    """
    base = Path(root if root is not None else Path.cwd()) / RUNS_DIR
    base.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for _ in range(16):
        folder = base / f"{stamp}-{secrets.token_hex(3)}"
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise RuntimeError(f"could not create a new run folder under {base}")


def manifest(
    *,
    profile_name: str,
    database: str | os.PathLike[str] | None,
    nsys_report: str | os.PathLike[str] | None,
    status: str,
    headline: dict[str, Any] | None = None,
    key_node: str | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """The manifest dict of the agreed ``jlprof-run/1`` format (file names, not paths)."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, not {status!r}")
    h = headline or {}
    return {
        "format": FORMAT,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "profile_name": profile_name,
        "key_node": h.get("key_node", key_node),
        "database": Path(database).name if database else None,
        "nsys_report": Path(nsys_report).name if nsys_report else None,
        "iterations": int(h.get("iterations", 0)),
        "wall_ns": int(h.get("wall_ns", 0)),
        "gpu_util_pct": float(h.get("gpu_util_pct", 0.0)),
        "tc_util_pct": float(h.get("tc_util_pct", 0.0)),
        "avg_iter_ns": float(h.get("avg_iter_ns", 0.0)),
        "status": status,
        "error": error,
    }


def write_manifest(folder: str | os.PathLike[str], data: dict[str, Any]) -> Path:
    """Write ``jlprof_run.json`` atomically, so a reader never sees half a manifest."""
    path = Path(folder) / MANIFEST
    with written(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def read_manifest(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a run folder (``{}`` keys missing are the reader's business)."""
    return json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8"))


def run_database(path: str | os.PathLike[str]) -> Path:
    """``path`` itself, or for a run folder the profile its manifest names: the database, else
    the nsys report (diff, ``jlprof view``, re-analysis).

    Raises :class:`~jlprof.errors.InputError` for a run folder whose capture left neither.
    """
    from jlprof.errors import InputError

    path = Path(path)
    if not (path.is_dir() and (path / MANIFEST).is_file()):
        return path
    try:
        m = read_manifest(path)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"{path / MANIFEST} cannot be read ({exc}); give a profile file in the folder."
        ) from exc
    for key in ("database", "nsys_report"):
        name = m.get(key)
        if name and (path / name).is_file():
            return path / name
    raise InputError(
        f"run folder {path} has no database (status {m.get('status')!r}: "
        f"{m.get('error') or 'no database or nsys report in it'}); give another run or an nsys "
        "export, or re-run the profiled cell."
    )


def list_runs(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Run folders under ``root/jlprof_runs`` that have a manifest, oldest first."""
    base = Path(root if root is not None else Path.cwd()) / RUNS_DIR
    if not base.is_dir():
        return []
    found = [p for p in base.iterdir() if (p / MANIFEST).is_file()]
    # the name's timestamp has whole seconds: the manifest's own time breaks ties
    return sorted(found, key=lambda p: (p.name[:15], (p / MANIFEST).stat().st_mtime_ns))


__all__ = [
    "FORMAT",
    "MANIFEST",
    "RUNS_DIR",
    "list_runs",
    "manifest",
    "new_run_folder",
    "read_manifest",
    "run_database",
    "write_manifest",
]
