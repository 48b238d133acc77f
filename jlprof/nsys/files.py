"""Files derived from a recording (exports, imports): where they go and when one is current."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from jlprof.errors import JlprofError
from jlprof.nsys.locate import Progress


def _mark_derived(target: Path, source: Path) -> None:
    """Date ``target`` no earlier than its source, so up-to-date checks cannot race the tools.

    QdstrmImporter appends to the ``.qdstrm`` while it writes the report, leaving the two mtimes a
    few microseconds apart in either order.
    """
    newest = max(target.stat().st_mtime_ns, source.stat().st_mtime_ns)
    os.utime(target, ns=(time.time_ns(), newest))


def _is_current(target: Path, source: Path) -> bool:
    return target.exists() and target.stat().st_mtime_ns >= source.stat().st_mtime_ns


def _cache_path(source: Path, suffix: str) -> Path:
    """Where a derived file goes when the source's folder is read-only (shared data sets)."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jlprof" / "exports"
    digest = hashlib.sha1(str(source.resolve()).encode()).hexdigest()[:12]
    return root / f"{source.stem}-{digest}{suffix}"


def _derived_target(source: Path, suffix: str, out: str | os.PathLike[str] | None) -> Path:
    if out is not None:
        return Path(out).expanduser()
    if os.access(source.parent, os.W_OK):
        return source.with_suffix(suffix)
    return _cache_path(source, suffix)


def _check_input(path: str | os.PathLike[str]) -> Path:
    source = Path(path).expanduser()
    if not source.exists():
        raise JlprofError(f"{source}: no such file")
    if not source.is_file():
        raise JlprofError(f"{source}: not a file")
    return source


def _reuse_or_refuse(target: Path, source: Path, force: bool, progress: Progress) -> bool:
    """True when ``target`` can be used as is; refuses to replace a file jlprof may not own."""
    if force or not target.exists():
        return False
    if _is_current(target, source):
        progress(f"Using {target} (newer than {source.name})")
        return True
    if target.parent == _cache_path(source, target.suffix).parent:
        return False  # jlprof's own cache: stale entries are simply rebuilt
    raise JlprofError(
        f"{target} is older than {source}: pass force (-f true) to replace it, "
        "or remove it yourself"
    )


def wait_stable(path: Path, deadline: float) -> None:
    """Until ``path``'s size stops growing (or ``time.monotonic()`` passes ``deadline``): nsys
    may return before the report it names is whole."""
    last = -1
    while time.monotonic() < deadline:
        size = path.stat().st_size
        if size == last:
            return
        last = size
        time.sleep(0.1)
