"""Build profile trees (run folders with manifests, nsys exports) for the server/UI tests."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.fixtures.scenarios import rich_db

_EXPORT: dict[str, bytes] = {}


def nsys_export_bytes(tmp: Path) -> bytes:
    """A small but real nsys SQLite export (the verification scenario), built once."""
    if "rich" not in _EXPORT:
        path = rich_db().write(tmp / "rich_export.sqlite")
        _EXPORT["rich"] = path.read_bytes()
        path.unlink()
    return _EXPORT["rich"]


def manifest(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "format": "jlprof-run/1",
        "created": "2026-11-23T18:00:00Z",
        "profile_name": "dlprof",
        "key_node": "global_step",
        "database": "nsys_profile.sqlite",
        "nsys_report": "nsys_profile.nsys-rep",
        "iterations": 3,
        "wall_ns": 30450,
        "gpu_util_pct": 41.5,
        "tc_util_pct": 12.25,
        "avg_iter_ns": 10000.0,
        "status": "ok",
        "error": None,
    }
    data.update(overrides)
    return data


def make_run(
    parent: Path, name: str, export: bytes, mtime: float | None = None, **overrides: Any
) -> Path:
    """A run folder as the %%dlprof magic writes it: export, a report, the manifest."""
    folder = parent / "jlprof_runs" / name
    folder.mkdir(parents=True)
    (folder / "nsys_profile.sqlite").write_bytes(export)
    (folder / "dlprof_summary.json").write_text("{}")
    (folder / "jlprof_run.json").write_text(json.dumps(manifest(**overrides)))
    if mtime is not None:
        os.utime(folder / "jlprof_run.json", (mtime, mtime))
    return folder
