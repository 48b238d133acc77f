"""Output files: written whole or not at all, and one-line errors when they cannot be written.

Every file jlprof writes goes first to a hidden temporary name in the same folder and is renamed
onto its final name (``os.replace``, atomic within one file system) only when complete. An
interrupted run (Ctrl-C, SIGKILL, a full disk) therefore never leaves a cut file under a final
name, and a rerun without ``-f`` never keeps one. Ctrl-C and write errors remove the temporary
file; the leftovers of a killed process are removed by the next run writing into that folder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from jlprof.errors import OutputError
from jlprof.writer import Pipe

PARTIAL = ".jlprof-partial"
_PARTIAL_NAME = re.compile(r"\.(\d+)\.[0-9a-f]{8}" + re.escape(PARTIAL) + "$")


def partial_path(target: Path) -> Path:
    """The temporary name ``target`` is written under: hidden, in its folder, owned by this pid."""
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}{PARTIAL}")


@contextlib.contextmanager
def written(target: str | os.PathLike[str], flag: str = "--output_path") -> Iterator[Path]:
    """Yield the temporary path to write; renamed to ``target`` when the block succeeds.

    A failing block (an exception, Ctrl-C) leaves ``target`` as it was. File-system errors become
    :class:`~jlprof.errors.OutputError`; ``flag`` is the option that chose the path (for the fix).
    """
    target = Path(target)
    tmp = partial_path(target)
    try:
        yield tmp
        os.replace(tmp, target)
    except OSError as exc:
        raise OutputError(describe(exc, target, flag)) from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def written_file(
    target: str | os.PathLike[str],
    flag: str = "--output_path",
    *,
    background: bool = False,
    bursty: bool = False,
) -> Iterator[IO[bytes]]:
    """Like :func:`written`, but yield the temporary file open for binary writing (streaming
    writers); closed before the rename.

    ``background``: the bytes go through :class:`jlprof.writer.Pipe` (a thread; past 64 MiB,
    past the page cache where that is the cheaper), so the next batch is formatted while the
    last is written; the writer's errors are raised in the caller's thread at its next write
    or at the end of the block. The yielded object then only writes (and flushes).
    ``bursty`` (with ``background``): the producer writes in bursts with long pauses between
    them (the windowed engine's parts, one a window), so a probe inside a burst says nothing
    of the file's pace: no probe, past the page cache from 64 MiB.
    """
    with written(target, flag) as tmp, open(tmp, "wb") as f:
        if not background:
            yield f
            return
        pipe = Pipe(f, probe=not bursty)
        try:
            yield pipe  # type: ignore[misc]
        except BaseException:
            pipe.abort()
            raise
        pipe.close()


def prepare_folder(folder: str | os.PathLike[str], flag: str = "--output_path") -> Path:
    """Create ``folder`` and prove it writable before any analysis runs; clean stale partials.

    A write probe, not ``os.access``: root passes access checks on read-only folders, and only a
    real write sees a read-only mount or a full disk's missing inodes.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".jlprof-probe-", suffix=PARTIAL, dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(describe(exc, folder, flag)) from exc
    remove_stale_partials(folder)
    return folder


@contextlib.contextmanager
def folder_lock(folder: Path, flag: str = "--output_path") -> Iterator[None]:
    """Hold ``folder`` for this run's files: one run's files are one run's (issue 46: two runs
    into one folder left one's summary beside the other's kernel report). An advisory
    ``flock`` on the folder itself, so no lock file is left; a second run refuses at once."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputError(
                f"another jlprof run is writing {folder}: wait for it to end, or choose another "
                f"{flag}"
            ) from None
        except OSError:  # a file system without flock: run unlocked, as before
            pass
        yield
    finally:
        os.close(fd)  # releases the lock


def remove_stale_partials(folder: Path) -> list[Path]:
    """Remove the temporary files of processes that no longer run (a killed run's leftovers)."""
    removed = []
    with contextlib.suppress(OSError):
        for p in folder.glob(f".*{PARTIAL}"):
            m = _PARTIAL_NAME.search(p.name)
            if m and not _alive(int(m.group(1))):
                with contextlib.suppress(OSError):
                    p.unlink()
                    removed.append(p)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: someone else's live process
        return True
    return True


def describe(exc: OSError, path: Path, flag: str = "--output_path") -> str:
    """One line naming what failed, why, and what to do."""
    code = exc.errno
    where = Path(exc.filename) if exc.filename else path
    if where.name.endswith(PARTIAL):  # the temporary name means nothing to the user
        where = path
    # the folder: ``where`` itself when it is one (the write probe of ``prepare_folder``)
    folder = where if where.is_dir() else where.parent
    if code in (errno.ENOSPC, errno.EDQUOT):
        why = f"no space left on the device of {folder}"
        fix = f"free some space or choose another {flag}"
    elif code == errno.EROFS:
        why = f"{folder} is on a read-only file system"
        fix = f"choose a writable {flag}"
    elif code in (errno.EACCES, errno.EPERM):
        why = f"permission denied on {where}"
        fix = f"choose a folder you can write with {flag}"
    elif code in (errno.ENOTDIR, errno.EEXIST):
        why = f"{_first_file(where)} is a file, not a folder"
        fix = f"choose another {flag} or move that file"
    elif code == errno.EISDIR:
        why = f"{where} is a folder"
        fix = f"give {flag} a file name"
    elif code == errno.ENOENT:
        why = f"the folder {where.parent} does not exist"
        fix = f"create it or choose another {flag}"
    else:
        why = exc.strerror or str(exc)
        fix = f"check {flag} and the disk"
    return f"cannot write {path}: {why}; {fix}."


def _first_file(path: Path) -> Path:
    """The component of ``path`` that exists but is not a folder (what ENOTDIR/EEXIST mean)."""
    for p in [*reversed(path.parents), path]:
        if p.exists() and not p.is_dir():
            return p
    return path


__all__ = [
    "PARTIAL",
    "describe",
    "folder_lock",
    "partial_path",
    "prepare_folder",
    "remove_stale_partials",
    "written",
    "written_file",
]
