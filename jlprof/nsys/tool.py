"""Running an nsys tool: its output filtered of progress bars and importer noise, failures as
:class:`NsysFailed`."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence

from jlprof.nsys.locate import INSTALL_HINT, NsysFailed, NsysNotFound, _last_lines

_IMPORTER_NOISE = ("Importer error status:", "Unable to retrieve the importer version")
IMPORTER_NOTE = (
    "nsys could not run its QdstrmImporter (Debian's package leaves it off nsys's search path); "
    "jlprof imports the .qdstrm itself"
)


def _is_importer_noise(line: str) -> bool:
    """nsys's two lines about its missing importer: replaced by :data:`IMPORTER_NOTE`."""
    return line.startswith(_IMPORTER_NOISE)


class NsysTimeout(NsysFailed):
    """An nsys call did not return in time; ``output`` holds what it had printed."""


def _run_tool(
    argv: Sequence[str],
    *,
    what: str,
    timeout: float | None = None,
    check: bool = True,
    new_session: bool = False,
) -> list[str]:
    """Run an nsys helper to the end: its output lines, or :class:`NsysFailed` naming ``what``
    (:class:`NsysTimeout` past ``timeout``). ``new_session``: out of the caller's process group,
    so a notebook's interrupt never reaches an nsys control call."""
    try:
        proc = subprocess.run(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
            start_new_session=new_session,
        )
    except FileNotFoundError:
        raise NsysNotFound(f"{argv[0]} is gone; {INSTALL_HINT}") from None
    except subprocess.TimeoutExpired as exc:
        raise NsysTimeout(
            f"{what} did not return within {timeout:.0f} s", _output_lines(exc.output)
        ) from None
    lines = proc.stdout.splitlines()
    if check and proc.returncode != 0:
        raise NsysFailed(f"{what} failed (exit {proc.returncode}): {_last_lines(lines)}", lines)
    return lines


def _output_lines(output: str | bytes | None) -> list[str]:
    if output is None:
        return []
    if isinstance(output, bytes):
        output = output.decode(errors="replace")
    return output.splitlines()


#: where the start lock lives: one place whatever TMPDIR says (a sidecar kernel and pytest's
#: workers set their own), since the race is between any two nsys sessions of the machine
LOCK_DIR = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()
#: how long a start keeps the lock: two ``nsys profile`` started 2.5 s apart ran 8 of 8 pairs
START_SETTLE_S = 3.0


def _locked() -> int:
    """The start lock, taken (blocking): a descriptor to close to let it go."""
    path = os.path.join(LOCK_DIR, f"jlprof-nsys-start-{os.getuid()}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def start_lock() -> Iterator[None]:
    """Held while an nsys session starts: nsys 2022.4 cannot start two sessions at the same
    instant (measured: of two ``nsys profile`` started together, one hung in 5 of 7 pairs and
    its agent stayed behind, failing later starts with "Agent launcher failed"; 2.5 s apart,
    8 of 8 pairs ran). One lock per user, opened without following links."""
    fd = _locked()
    try:
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def start_window(settle_s: float = START_SETTLE_S) -> Iterator[None]:
    """:func:`start_lock` around a session's start (``nsys profile`` started in the block),
    kept ``settle_s`` after the block so the session is under way before another starts;
    the session itself then runs unlocked."""
    fd = _locked()
    try:
        yield
    except BaseException:
        os.close(fd)
        raise
    timer = threading.Timer(settle_s, os.close, (fd,))
    timer.daemon = True
    timer.start()


def lock_through_exec(settle_s: float = START_SETTLE_S) -> None:
    """:func:`start_window` for an nsys that is about to replace this process (``exec``): a
    detached grandchild keeps the lock ``settle_s``, our own descriptor closes at the exec."""
    fd = _locked()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked processes
        if os.fork() == 0:
            os.closerange(0, fd)
            os.closerange(fd + 1, 4096)
            time.sleep(settle_s)
        os._exit(0)
    os.waitpid(child, 0)
