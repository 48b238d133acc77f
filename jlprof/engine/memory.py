"""Give freed memory back to the OS between stages.

Each stage frees hundreds of MB of temporaries (Arrow buffers, sort permutations). glibc
keeps such memory in its heap, so the process's RSS keeps every stage's peak; at 1M
kernels that was the difference between ~1.08 GB and ~0.95 GB peak (BENCHMARKS.md).
``malloc_trim`` returns the free heap to the OS; it is a no-op where glibc is absent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from functools import cache


@cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim  # noqa: B018 - musl has no malloc_trim
        return libc
    except (OSError, AttributeError):
        return None


def trim() -> None:
    """Return free heap memory to the OS (glibc); cheap, safe to call after any stage."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
