"""Running an nsys tool: its output filtered of progress bars and importer noise, failures as
:class:`NsysFailed`."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import tempfile
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


@contextlib.contextmanager
def start_lock() -> Iterator[None]:
    """Held while an nsys session starts: nsys 2022.4 cannot start two sessions at the same
    instant (measured: of two ``nsys profile`` started together, one hung in 5 of 7 pairs and
    its agent stayed behind, failing later starts with "Agent launcher failed"; 2.5 s apart,
    8 of 8 pairs ran). One lock per user, in the temporary folder, opened without following
    links."""
    path = os.path.join(tempfile.gettempdir(), f"jlprof-nsys-start-{os.getuid()}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
