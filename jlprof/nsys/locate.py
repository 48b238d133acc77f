"""Finding nsys: the binary, its version and its QdstrmImporter; the errors a missing or
broken nsys raises."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from jlprof.errors import JlprofError

Progress = Callable[[str], None]
"""Receives one human-readable line per step (``"Importing r.qdstrm"``); jlprof's own messages."""

INSTALL_HINT = (
    "install Nsight Systems: on Debian add 'contrib non-free' to the apt sources and run "
    "'apt-get install nsight-systems', or use NVIDIA's installer "
    "(https://developer.nvidia.com/nsight-systems); or set JLPROF_NSYS to the nsys binary"
)


_SEARCH_DIRS: tuple[str, ...] = (
    "/usr/lib/nsight-systems/bin",
    "/opt/nvidia/nsight-systems/*/bin",
    "/opt/nvidia/nsight-systems-cli/*/bin",
    "/usr/local/cuda/bin",
)
_IMPORTER = "QdstrmImporter"
_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")


class NsysNotFound(JlprofError):
    """nsys (or the part of it a step needs) is not installed where jlprof can find it."""


class NsysFailed(JlprofError):
    """nsys ran and failed; the message ends with its last output lines, ``output`` has more."""

    def __init__(self, message: str, output: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.output = list(output)


@dataclass(frozen=True)
class NsysInfo:
    """An nsys installation: the CLI, its version and the ``.qdstrm`` importer next to it."""

    path: Path
    version: tuple[int, ...]
    version_string: str
    importer: Path | None = None

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version)) or self.version_string


_info_cache: dict[tuple[str, int], NsysInfo] = {}


def find_nsys(*, search_dirs: Sequence[str] | None = None) -> NsysInfo:
    """Locate nsys: ``$JLPROF_NSYS``, then ``PATH``, then the usual install folders.

    ``search_dirs`` replaces the install folders searched after ``PATH`` (glob patterns allowed),
    e.g. ``()`` to rely on ``PATH`` alone. A ``JLPROF_NSYS`` that points nowhere is an error rather
    than a silent fallback, so a typo there never profiles with another nsys.
    """
    configured = os.environ.get("JLPROF_NSYS", "").strip()
    if configured:
        path = _nsys_in(Path(configured).expanduser())
        if path is None:
            raise NsysNotFound(
                f"JLPROF_NSYS={configured} is not an nsys executable: point it at the nsys binary "
                f"(or its bin folder), or unset it to search PATH; to get nsys, {INSTALL_HINT}"
            )
        return _describe(path)
    on_path = shutil.which("nsys")
    if on_path:
        return _describe(Path(on_path))
    for pattern in _SEARCH_DIRS if search_dirs is None else search_dirs:
        for folder in sorted(glob.glob(pattern), key=_natural_key, reverse=True):
            path = _nsys_in(Path(folder))
            if path is not None:
                return _describe(path)
    raise NsysNotFound(f"nsys not found on PATH nor in the usual install folders; {INSTALL_HINT}")


def _natural_key(text: str) -> list[object]:
    """Sort ``2024.10`` after ``2024.9``, so the newest install in /opt wins."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _nsys_in(candidate: Path) -> Path | None:
    """``candidate`` if it is an executable nsys, else ``nsys`` in that folder or its ``bin``."""
    options = [candidate] if candidate.is_file() else [candidate / "nsys", candidate / "bin/nsys"]
    for path in options:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def _describe(path: Path) -> NsysInfo:
    """Ask nsys its version (cached per binary) and find the importer that ships with it."""
    try:
        stamp = path.stat().st_mtime_ns
    except OSError as exc:
        raise NsysNotFound(f"cannot use nsys at {path}: {exc.strerror}; {INSTALL_HINT}") from None
    key = (str(path), stamp)
    if key not in _info_cache:
        try:
            proc = subprocess.run(
                [str(path), "--version"], capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise NsysNotFound(f"nsys at {path} does not run ({exc}); {INSTALL_HINT}") from None
        text = (proc.stdout + proc.stderr).strip()
        match = re.search(r"(\d{4})\.(\d+)(?:\.(\d+))?(?:\.(\d+))?", text)
        if proc.returncode != 0 or match is None:
            raise NsysNotFound(
                f"{path} --version failed (exit {proc.returncode}: {_last_lines(text)}); "
                f"{INSTALL_HINT}"
            )
        version = tuple(int(g) for g in match.groups() if g is not None)
        line = next((ln for ln in text.splitlines() if match.group(0) in ln), text)
        _info_cache[key] = NsysInfo(path, version, line.strip(), _find_importer(path))
    return _info_cache[key]


def _find_importer(nsys_path: Path) -> Path | None:
    """QdstrmImporter lives in ``host-linux-*`` beside nsys's ``bin``/``target-linux-*`` folder.

    The lookup follows the chain of symlinks because Debian's ``/usr/bin/nsys`` links through
    ``/usr/lib/nsight-systems/bin`` (with ``host-linux-x64`` beside it) to a folder that has none.
    """
    hops: list[Path] = []
    current = nsys_path
    for _ in range(16):
        hops.append(current)
        if not current.is_symlink():
            break
        current = current.parent / os.readlink(current)
    hops.append(nsys_path.resolve())
    for hop in hops:
        root = hop.parent.parent
        for candidate in [hop.parent / _IMPORTER, *sorted(root.glob(f"host-*/{_IMPORTER}"))]:
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return Path(os.path.normpath(candidate))
    fixed = Path("/usr/lib/nsight-systems/host-linux-x64") / _IMPORTER
    if fixed.is_file():
        return fixed
    on_path = shutil.which(_IMPORTER)
    return Path(on_path) if on_path else None


def _info(nsys: NsysInfo | None) -> NsysInfo:
    return nsys if nsys is not None else find_nsys()


_PROGRESS_BAR = re.compile(r"\[[= ]*\d+%[= ]*\]")


def _is_progress(line: str) -> bool:
    """nsys redraws progress bars with ``\\r``; each redraw arrives as a line of its own."""
    return bool(_PROGRESS_BAR.search(line))


def _last_lines(text: str | Iterable[str], count: int = 3) -> str:
    """The last meaningful output lines on one line, for an error message."""
    lines = text.splitlines() if isinstance(text, str) else list(text)
    kept = [ln.strip() for ln in lines if ln.strip() and not _is_progress(ln)]
    return " | ".join(kept[-count:]) or "no output"
