"""Running an nsys tool: its output filtered of progress bars and importer noise, failures as
:class:`NsysFailed`."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from jlprof.nsys.locate import INSTALL_HINT, NsysFailed, NsysNotFound, _last_lines

_IMPORTER_NOISE = ("Importer error status:", "Unable to retrieve the importer version")
IMPORTER_NOTE = (
    "nsys could not run its QdstrmImporter (Debian's package leaves it off nsys's search path); "
    "jlprof imports the .qdstrm itself"
)


def _is_importer_noise(line: str) -> bool:
    """nsys's two lines about its missing importer: replaced by :data:`IMPORTER_NOTE`."""
    return line.startswith(_IMPORTER_NOISE)


def _run_tool(
    argv: Sequence[str], *, what: str, timeout: float | None = None, check: bool = True
) -> list[str]:
    """Run an nsys helper to the end: its output lines, or :class:`NsysFailed` naming ``what``."""
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
        )
    except FileNotFoundError:
        raise NsysNotFound(f"{argv[0]} is gone; {INSTALL_HINT}") from None
    except subprocess.TimeoutExpired:
        raise NsysFailed(f"{what} did not finish within {timeout:.0f} s") from None
    lines = proc.stdout.splitlines()
    if check and proc.returncode != 0:
        raise NsysFailed(f"{what} failed (exit {proc.returncode}): {_last_lines(lines)}", lines)
    return lines
