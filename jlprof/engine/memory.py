"""How the engine uses the C heap: reuse freed memory within a stage, give it back after.

Every stage allocates and frees hundreds of MB of 1M-row arrays (Arrow buffers, sort
permutations, gathered columns). With glibc's defaults each such array of more than a few
MB is a fresh ``mmap``: its pages fault in one by one and are zeroed, and in the VMs we run
on that was ~30 % of the whole load's CPU time (BENCHMARKS.md, 2026-11-23). Inside
:func:`heavy_stage` large blocks come from the heap instead, so a freed permutation is
reused by the next one; when the outermost stage ends, ``malloc_trim`` returns the free
heap to the OS so a notebook kernel does not keep the stage's peak, and both thresholds go back
to the process's own settings (glibc's defaults, or its ``MALLOC_*_THRESHOLD_`` variables): a
library must not change its host's allocator behind its back. Where glibc is absent (macOS,
musl) all of this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import numpy as np

# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
# glibc's dynamic mmap threshold grows to at most 32 MB, the most mallopt accepts on 64-bit;
# it trims the heap top when more than twice that is free
_MMAP_MAX = 32 * 1024 * 1024
_STAGE_TRIM = 2**31 - 1  # an int: never trim the heap top within a stage
_GLIBC_DEFAULT = 128 * 1024  # both thresholds' glibc default (malloc.h, DEFAULT_MMAP_THRESHOLD_MIN)
_GLIBC_MMAP_MAX = 65536  # glibc's default number of mmap'd blocks (malloc.c, DEFAULT_MMAP_MAX)


class _Outermost:
    """A process-wide setting shared by nested and overlapping blocks, in any thread: the first
    block to open applies it, the last to close undoes it (with what applying returned), so
    the setting holds while any block is open and the process's own comes back after."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.depth = 0  # blocks open
        self._saved: Any = None

    @contextmanager
    def held(self, apply: Callable[[], Any], undo: Callable[[Any], None]) -> Iterator[None]:
        with self._lock:
            if self.depth == 0:
                self._saved = apply()
            self.depth += 1
        try:
            yield
        finally:
            with self._lock:
                self.depth -= 1
                if self.depth == 0:
                    undo(self._saved)


_allocator = _Outermost()  # heavy_stage's allocator thresholds
_pages = _Outermost()  # small_pages' numpy huge-page switch


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


@cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim  # noqa: B018 - musl has no malloc_trim
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        if hasattr(libc, "mallinfo2"):  # glibc >= 2.33
            libc.mallinfo2.restype = _Mallinfo2
        return libc
    except (OSError, AttributeError):
        return None


def free_heap_bytes() -> int | None:
    """Bytes glibc holds free in all its arenas (``mallinfo2().fordblks``), or None where
    it cannot tell (no glibc, or one older than 2.33)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    return int(libc.mallinfo2().fordblks)


def release_reader_memory(slack: int = 0) -> None:
    """Return what reading left behind, even inside a stage: later stages cannot reuse it.

    Arrow's pool (mimalloc) keeps the pages of freed column buffers for Arrow alone, and
    the reader's worker threads free into glibc arenas that the main thread's stages do
    not draw from. At 1M kernels this took the peak RSS from ~1.0 GB to ~0.8 GB.
    Also for a stage's own freed blocks that nothing later can reuse (the cube's merged
    parts, :func:`jlprof.engine.aggregate.aggregate._merge_parts`).
    ``slack``: leave glibc's free memory in place while it is at most this many bytes
    (where glibc tells): a loop that frees and allocates the same sizes each turn (the
    windows) reuses it instead of faulting fresh pages in every turn.
    """
    libc = _libc()
    if libc is not None:
        free = free_heap_bytes() if slack else None
        if free is None or free > slack:
            libc.malloc_trim(0)
    release_arrow_memory()


def release_arrow_memory() -> None:
    """Give back the pages Arrow's pool (mimalloc) keeps of freed buffers, which only Arrow
    would reuse: where a reader frees an Arrow-backed column once it is copied, and the
    copies would otherwise stack on what the pool keeps (the NVTX table's split at 13.4M
    ranges: 1.1 GB kept until the read's end)."""
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.default_memory_pool().release_unused()


@contextmanager
def small_pages() -> Iterator[None]:
    """Within the block, numpy does not ask for transparent huge pages for its arrays.

    numpy advises huge pages for every array of 4 MB or more. Where the kernel then
    compacts memory synchronously on fault (THP ``defrag=madvise``, the Debian default),
    each such first touch stalls: at 1M kernels the whole load took ~10 % longer and twice
    the system time than with 4 kB pages (BENCHMARKS.md, 2026-11-23). The switch is the
    process's, and reader threads open blocks beside the main thread's (the windowed run
    reads the next window while this one is analysed): the first block to open saves the
    setting and the last to close restores it, so the user's own numpy work is left as it
    was whatever order the threads end in.
    """
    setter = getattr(getattr(np, "_core", None), "multiarray", None)
    setter = getattr(setter, "_set_madvise_hugepage", None)
    if setter is None:  # another numpy: nothing to change
        yield
        return
    with _pages.held(lambda: setter(False), setter):
        yield


def _host_setting(env: str, default: int = _GLIBC_DEFAULT) -> int:
    """The process's own setting: its ``MALLOC_*_`` variable as glibc read it, or glibc's."""
    try:
        return int(os.environ.get(env, default))
    except ValueError:
        return default


@contextmanager
def heavy_stage() -> Iterator[None]:
    """Within the block, big arrays reuse freed heap memory; after it, give memory back.

    Blocks of any size come from the heap, not only those under glibc's largest mmap
    threshold (32 MB, a 4M-row int64 column): at 10M kernels every temporary column is
    80 MB, and as fresh mmaps they faulted 3.4M pages in and took 8.5 s of system time in
    the analysis alone (BENCHMARKS.md, 2026-11-25).

    Nests: only the outermost block changes the allocator's thresholds, and on leaving restores
    them and trims. glibc then keeps these values fixed (a ``mallopt`` switches off its dynamic
    mmap threshold for good; there is no call to switch it back on).
    """
    libc = _libc()
    if libc is None:
        with small_pages():
            yield
        return

    def apply() -> None:
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_MAX)
        libc.mallopt(_M_MMAP_MAX, 0)  # no block is an mmap of its own, whatever its size
        libc.mallopt(_M_TRIM_THRESHOLD, _STAGE_TRIM)

    def undo(_: None) -> None:
        libc.malloc_trim(0)
        libc.mallopt(_M_MMAP_THRESHOLD, _host_setting("MALLOC_MMAP_THRESHOLD_"))
        libc.mallopt(_M_MMAP_MAX, _host_setting("MALLOC_MMAP_MAX_", _GLIBC_MMAP_MAX))
        libc.mallopt(_M_TRIM_THRESHOLD, _host_setting("MALLOC_TRIM_THRESHOLD_"))

    with _allocator.held(apply, undo), small_pages():
        yield


def available_bytes() -> int | None:
    """Memory the system can give without swapping now (Linux ``MemAvailable``), or None
    where it cannot tell."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
