"""How a streamed file's bytes reach the disk: written in a thread while the caller formats
the next batch (:class:`Pipe`), in 2 MiB writes, and from 64 MiB on past the page cache where
a probe finds that the cheaper (:class:`_Slices`). Whole-or-nothing naming is
:mod:`jlprof.outputs`' job; this module only writes bytes in order into an open file.
"""

from __future__ import annotations

import errno
import mmap
import os
import queue
import threading
import time
from typing import IO, Any

#: bytes per write(2): on ext4 here, 28 MB writes cost 3-6x the system time of 1-4 MB ones
#: (875 MB: 0.5-1.7 s vs 0.2 s)
_WRITE_SLICE = 2 * 1024 * 1024
#: O_DIRECT writes: offsets and lengths in multiples of this (any device's logical block)
_DIRECT_BLOCK = 4096
#: a file's bytes past this offset are tried past the page cache (:class:`_Slices`)
DIRECT_AFTER = 64 << 20
#: bytes written past the cache before comparing their cost with the cache's
DIRECT_PROBE = 32 << 20
#: a file's bytes past this offset go past the page cache whatever the probe found
DIRECT_ALWAYS = 1 << 30
#: set to 0 to write every file through the page cache
DIRECT_IO_ENV = "JLPROF_DIRECT_IO"
_clock = time.perf_counter  # the writes' timer (tests replace it)


#: ``statfs`` types whose files live in memory, where ``O_DIRECT`` saves no copy: tmpfs
#: (``/dev/shm``, most ``/tmp`` of containers). At 3M kernels the command spent 4 % more CPU
#: past the cache there (docs/writing-files.md).
_IN_MEMORY = frozenset({0x01021994})


def _fs_type(fd: int) -> int | None:
    """``fstatfs``' ``f_type`` of the file system holding ``fd`` (Linux), None where unknown."""
    try:
        import ctypes

        buf = ctypes.create_string_buffer(512)  # struct statfs: 120 bytes on 64-bit Linux
        if ctypes.CDLL(None, use_errno=True).fstatfs(fd, buf) != 0:
            return None
        return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF  # the first member
    except (OSError, AttributeError):
        return None


def _open_direct(path: str) -> int | None:
    """A second descriptor on ``path`` that writes past the page cache, or None where the
    platform (no ``O_DIRECT``: macOS, Windows), the file system (refused, or in memory) or the
    user says no."""
    flag = getattr(os, "O_DIRECT", None)
    if flag is None or os.environ.get(DIRECT_IO_ENV, "1") == "0":
        return None
    try:
        fd = os.open(path, os.O_WRONLY | flag)
    except OSError:
        return None
    if _fs_type(fd) in _IN_MEMORY:
        os.close(fd)
        return None
    return fd


class _Cost:
    """Seconds spent writing, and the bytes they wrote."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.bytes = 0

    def add(self, seconds: float, n: int) -> None:
        self.seconds += seconds
        self.bytes += n

    def per_byte(self) -> float | None:
        return self.seconds / self.bytes if self.bytes else None


class _Slices:
    """One file's bytes in order, in :data:`_WRITE_SLICE` writes: through the page cache up to
    :data:`DIRECT_AFTER`, then past it (``O_DIRECT``, from one page-aligned buffer; the last
    slice padded to a block, then the file truncated to its length), unless a probe finds the
    disk the slower way; past :data:`DIRECT_ALWAYS` in any case.

    Why: copying a report into fresh cache pages is CPU the formatting needs, and in the VMs we
    run on (freed memory goes back to the host at once, so each fresh page is a host fault) a
    lot of it: the 1M-kernel command's 1.35 GB of CSV and JSON took 3.6-4.0 s of system time
    through the cache against 0.8-1.1 s past it, the command 4.2-4.7 s against 2.9-3.0 s
    (BENCHMARKS.md, 2026-11-27); the 4.5 GB iteration CSV at 10M kernels 13 s against 0.5 s
    (``dd``). Past the cache, the user's cache (the export itself) also stays.

    The probe: the first :data:`DIRECT_PROBE` bytes past the cache are timed. The file goes
    back to the cache (until :data:`DIRECT_ALWAYS`) when the cached part's writes cost less per
    byte than the direct ones weighted by the share of the probe's time the writer spent in
    them. That share says how much of the disk's time holds the producer up: near 1, each
    direct byte's wait is the producer's; near 0, the disk keeps up and costs no time, only
    saves the copies. The share is a floor: the producer speeds up once the engine's other
    work ends (at 1M kernels the iteration JSON's probe found the writer 76-93 % busy and the
    disk 1.2-4.2x the cache's cost per byte; the rule before, back only at >= 95 % busy, kept
    it past the cache, and the command took 2.62 s against 2.30 s: medians of 12 alternated
    pairs, BENCHMARKS.md 2026-11-27 14:52). Back in the cache, the writes are watched: once
    those since the probe cost more per byte than that bar, the rest goes past it. On a box
    where the cache's fresh pages are host faults the cache costs more per byte than the
    disk, and the file stays past it. Past 1 GiB a file is more than the cache holds dirty
    before it makes the writer wait for the disk anyway. A file system that refuses O_DIRECT
    (at open, or ``EINVAL`` at a write) gets the rest of the file through the cache. Errors
    (a full disk) are raised as from any write. ``probe=False`` (a bursty producer,
    :func:`jlprof.outputs.written_file`): no probe, past the cache from :data:`DIRECT_AFTER`
    on. At 10M kernels the windowed run's CSV probe fell inside one window's burst (writer
    89 % busy), went back to the cache for its first GiB and cost ~1 s of CPU (BENCHMARKS.md,
    2026-11-27 15:14).

    Measured per file system (docs/writing-files.md, 2026-11-29): at 3M kernels the command
    took 0.55-0.84x the wall and 0.73-0.75x the CPU of the cache's on ext4, xfs and
    overlayfs; on a disk throttled to 100 MB/s the probe went back to the cache, where going
    past it regardless took 2.4x the wall.
    """

    def __init__(self, f: IO[bytes], probe: bool = True) -> None:
        self.f = f
        self.pos = 0  # bytes given so far
        self.after: int | None = DIRECT_AFTER  # where to go past the cache next (None: never)
        self.fd: int | None = None
        self.buf: mmap.mmap | None = None  # the direct part's slice being filled
        self.fill = 0  # bytes of buf not yet written: they go at ``pos - fill``
        self.cached = _Cost()  # the writes through the cache so far
        self.probe: _Cost | None = None  # the writes past it, while comparing the two
        self.probe_from = 0.0  # when the probe began
        self.probed = not probe  # a probe was judged (or none is wanted): no (other) one
        self.limit: float | None = None  # back in the cache: the per-byte cost it must stay under
        self.watch = _Cost()  # back in the cache: its writes since the probe
        self.looked = 0  # the watch's bytes when it was last compared

    def write(self, view: memoryview) -> None:
        i = 0
        if self.buf is None and self.after is not None and self.pos + len(view) > self.after:
            # through the cache up to the first block boundary at or past ``after``
            edge = max(self.after, self.pos)
            edge += -edge % _DIRECT_BLOCK
            i = min(len(view), edge - self.pos)
            self._cached(view[:i])
            if self.pos == edge:
                self._go_direct()
        if self.buf is None:
            self._cached(view[i:])
            return
        while i < len(view):
            n = min(len(view) - i, _WRITE_SLICE - self.fill)
            self.buf[self.fill : self.fill + n] = view[i : i + n]
            self.fill += n
            self.pos += n
            i += n
            if self.fill == _WRITE_SLICE and self._direct(_WRITE_SLICE):
                self.fill = 0
                if self.probe is not None:
                    self._judge()
            if self.buf is None:  # refused, or the cache is the cheaper: the rest by write
                self.write(view[i:])
                return

    def _cached(self, view: memoryview) -> None:
        t0 = _clock()
        for i in range(0, len(view), _WRITE_SLICE):
            self.f.write(view[i : i + _WRITE_SLICE])
        spent = _clock() - t0
        self.cached.add(spent, len(view))
        self.pos += len(view)
        if self.limit is not None:  # back in the cache after a probe: is it still the cheaper?
            self.watch.add(spent, len(view))
            if self.watch.bytes >= self.looked + DIRECT_PROBE:  # all since the probe, so one
                self.looked = self.watch.bytes  # dear write among cheap ones is not a trend
                if self.watch.seconds > self.limit * self.watch.bytes:
                    self.after, self.limit = self.pos, None  # past the cache from the next write

    def _go_direct(self) -> None:
        # before DIRECT_ALWAYS, on probation; one try past it (after a probe lost: the second)
        probation = self.pos < DIRECT_ALWAYS and not self.probed
        self.probe = _Cost() if probation else None
        self.probe_from = _clock()
        self.after = DIRECT_ALWAYS if probation else None
        self.f.flush()
        self.fd = _open_direct(self.f.name) if isinstance(self.f.name, str) else None
        if self.fd is not None:
            self.buf = mmap.mmap(-1, _WRITE_SLICE)
        else:
            self.after = None  # no O_DIRECT here: never again for this file

    def _judge(self) -> None:
        """Once the probe has written enough: back to the cache (until :data:`DIRECT_ALWAYS`)
        when its writes cost less per byte than the direct ones times the share of the probe's
        time the writer spent in them (the class's docstring says why); else past it on. Back
        in the cache, its writes since are compared with that every :data:`DIRECT_PROBE` bytes
        (:meth:`_cached`), and once they cost more the file goes past it for good."""
        probe = self.probe
        assert probe is not None
        if probe.bytes < DIRECT_PROBE:
            return
        self.probe, self.probed = None, True
        elapsed = _clock() - self.probe_from
        busy = min(1.0, probe.seconds / elapsed) if elapsed > 0 else 1.0
        direct, cached = probe.per_byte(), self.cached.per_byte()
        bar = busy * direct if direct is not None else None
        if cached is not None and bar is not None and cached < bar:
            self.limit = bar  # watched: a cache that grows dearer is left again
            self.f.seek(self.pos)  # the buffered file goes on where the direct part ended
            self.close()

    def _direct(self, n: int) -> bool:
        """Write ``buf[:n]`` past the cache at ``pos - fill``; False (and the file through the cache
        from here on, ``buf``'s bytes included) where the file system refuses it. No view of
        ``buf`` is ever taken: an error's traceback would keep it, and ``buf`` unclosable."""
        assert self.fd is not None and self.buf is not None
        at = self.pos - self.fill
        data = self.buf if n == _WRITE_SLICE else _aligned_copy(self.buf, self.fill, n)
        t0 = _clock()
        try:
            wrote = os.pwrite(self.fd, data, at)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            wrote = -1
        finally:
            if data is not self.buf:
                data.close()
        if wrote < 0:  # refused: the file system takes no O_DIRECT write
            self.f.seek(at)
            self.f.write(self.buf[: self.fill])
            self.after = None
            self.close()
            return False
        if wrote != n:  # a regular file writes all of an aligned O_DIRECT write or fails
            raise OSError(errno.EIO, f"short O_DIRECT write ({wrote} of {n} bytes)", self.f.name)
        if self.probe is not None:
            self.probe.add(_clock() - t0, n)
        return True

    def finish(self) -> None:
        """Write what is left; the file then holds every byte given, and no more."""
        padded = self.fill + (-self.fill % _DIRECT_BLOCK)
        if self.buf is not None and self.fill and self._direct(padded):
            os.ftruncate(self.fd, self.pos)  # type: ignore[arg-type]
        self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.buf is not None:
            self.buf.close()
            self.buf = None
        self.fill = 0


def _aligned_copy(buf: mmap.mmap, fill: int, n: int) -> mmap.mmap:
    """``buf``'s first ``fill`` bytes in a page-aligned buffer of ``n`` >= ``fill`` bytes."""
    out = mmap.mmap(-1, n)
    out[:fill] = buf[:fill]
    return out


class Pipe:
    """A write-only file whose writes happen in a thread, in order; the buffers are kept
    alive until written (``memoryview`` of Arrow buffers included)."""

    def __init__(self, f: IO[bytes], depth: int = 2, probe: bool = True) -> None:
        self.f = f
        self.out = _Slices(f, probe=probe)  # written to by the thread alone
        self.name = f.name
        self.q: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.aborted = False
        self.thread = threading.Thread(target=self._run, name="jlprof-writer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        out = self.out
        try:
            while True:
                item = self.q.get()
                if item is None:
                    if self.error is None and not self.aborted:
                        try:
                            out.finish()
                        except BaseException as exc:  # re-raised in the closing thread
                            self.error = exc
                    return
                if isinstance(item, threading.Event):
                    item.set()
                elif self.error is None and not self.aborted:
                    try:
                        out.write(memoryview(item).cast("B"))
                    except BaseException as exc:  # re-raised in the writing thread
                        self.error = exc
        finally:
            out.close()

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def write(self, data: Any) -> int:
        self._check()
        self.q.put(data)
        return len(data)

    def flush(self) -> None:
        """Wait until every write so far is handed to the OS (but the bytes of a slice going
        past the page cache: they wait for the slice to fill, or for :meth:`close`)."""
        done = threading.Event()
        self.q.put(done)
        done.wait()
        self._check()
        self.f.flush()

    def close(self) -> None:
        self.q.put(None)
        self.thread.join()
        self._check()

    def abort(self) -> None:
        self.aborted = True
        self.q.put(None)
        self.thread.join()


__all__ = ["DIRECT_IO_ENV", "Pipe"]
