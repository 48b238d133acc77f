"""Stale sidecar folders (a SIGKILLed notebook kernel's) are removed at the next start."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from jlprof.sidecar.process import FOLDER_PREFIX, OWNERS, remove_stale_folders


def dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(proc.stdout)


def folder(root: Path, name: str, owners: str | None, age_s: float = 0) -> Path:
    f = root / f"{FOLDER_PREFIX}{name}"
    (f / "tmp").mkdir(parents=True)
    (f / "kernel.json").write_text('{"key": "secret"}')
    if owners is not None:
        (f / OWNERS).write_text(owners)
    if age_s:
        t = time.time() - age_s
        os.utime(f, (t, t))
    return f


def test_only_folders_of_ended_owners_are_removed(tmp_path) -> None:
    dead = dead_pid()
    gone = folder(tmp_path, "gone", f"{dead} {dead}")
    live_kernel = folder(tmp_path, "live", f"{os.getpid()} {dead}")  # nsys may still write
    new_unowned = folder(tmp_path, "new", None)  # being created right now, or an older jlprof
    being_written = folder(tmp_path, "writing", "")  # owners file seen before its pids
    old_unowned = folder(tmp_path, "old", None, age_s=2 * 24 * 3600)
    other = tmp_path / "not-jlprof"
    other.mkdir()
    assert sorted(remove_stale_folders(tmp_path)) == sorted([gone, old_unowned])
    assert live_kernel.is_dir() and new_unowned.is_dir() and other.is_dir()
    assert being_written.is_dir()
    assert not gone.exists() and not old_unowned.exists()
