"""``jlprof.writer``: a streamed file's bytes past 64 MiB written past the page cache
(``O_DIRECT``) in aligned slices, every byte in order; the probe that sends a file back to the
cache where the cache is the cheaper; a file system that refuses ``O_DIRECT``; a full disk."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from jlprof import outputs, writer
from tests.fixtures.pieces import pieces, write_through

SLICE = writer._WRITE_SLICE


def _direct_fds(monkeypatch) -> list[int]:
    """The descriptors ``_open_direct`` hands out, recorded."""
    opened: list[int] = []
    real = writer._open_direct

    def spy(path):
        fd = real(path)
        if fd is not None:
            opened.append(fd)
        return fd

    monkeypatch.setattr(writer, "_open_direct", spy)
    return opened


BLOCK = writer._DIRECT_BLOCK


@pytest.mark.parametrize("after", [0, 3 * BLOCK, SLICE + BLOCK])
@pytest.mark.parametrize(
    "total", [0, 1, 4095, SLICE - 1, SLICE, SLICE + 1, 2 * SLICE + 4096, 3 * SLICE - 7]
)
def test_background_file_holds_every_byte_in_order_whatever_its_size(
    tmp_path, monkeypatch, total, after
):
    """Past ``DIRECT_AFTER`` the writer goes past the page cache in aligned slices and pads
    the last one: the file must still hold exactly the bytes given (no padding, no loss)."""
    monkeypatch.setattr(writer, "DIRECT_AFTER", after)
    parts = pieces(total, total)
    target = tmp_path / "out.bin"
    write_through(target, parts)
    assert list(tmp_path.iterdir()) == [target]


def _direct_writes(monkeypatch, refuse=None) -> tuple[list[int], list[int]]:
    """(descriptors ``_open_direct`` handed out, the lengths written to them); ``refuse(k)``
    may raise for the k-th direct write instead."""
    direct = _direct_fds(monkeypatch)
    real = os.pwrite
    seen: list[int] = []

    def spy(fd, data, offset):
        if fd in direct:
            seen.append(len(data))
            if refuse is not None:
                refuse(len(seen))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", spy)
    return direct, seen


def _has_direct(tmp_path) -> bool:
    probe = tmp_path / "probe"
    probe.write_bytes(b"")
    fd = writer._open_direct(str(probe))
    probe.unlink()
    if fd is not None:
        os.close(fd)
    return fd is not None


def test_only_the_part_past_direct_after_goes_past_the_cache(tmp_path, monkeypatch):
    """Where O_DIRECT opens at all (Linux, a disk file system), a file's bytes past
    ``DIRECT_AFTER`` (from the next block boundary) are written by it, in whole slices and a
    padded last block; a file that ends before never is."""
    if not _has_direct(tmp_path):
        pytest.skip("this file system (or platform) has no O_DIRECT")
    monkeypatch.setattr(writer, "DIRECT_AFTER", SLICE)
    _, writes = _direct_writes(monkeypatch)
    with outputs.written_file(tmp_path / "small", background=True) as f:
        f.write(b"s" * SLICE)
    assert writes == []
    with outputs.written_file(tmp_path / "big", background=True) as f:
        f.write(b"a" * (SLICE - 5))
        f.write(b"b" * (2 * SLICE + 15))  # the cached part ends at the block boundary
    assert writes == [SLICE, SLICE, BLOCK]
    assert (tmp_path / "big").read_bytes() == b"a" * (SLICE - 5) + b"b" * (2 * SLICE + 15)


def test_a_file_system_that_refuses_o_direct_midway_gets_the_rest_through_the_cache(
    tmp_path, monkeypatch
):
    """EINVAL from an O_DIRECT write (a file system that opens but will not write so): the
    slice and everything after it go through the page cache, the file whole."""
    import errno

    def refuse_second(k):
        if k == 2:
            raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(writer, "DIRECT_AFTER", 0)
    direct, seen = _direct_writes(monkeypatch, refuse_second)
    parts = pieces(3 * SLICE + 123, 5)
    target = tmp_path / "out.bin"
    write_through(target, parts)
    if direct:  # O_DIRECT opened here: the first slice went by it, the second was refused
        assert seen == [SLICE, SLICE]


def test_direct_io_can_be_switched_off(tmp_path, monkeypatch):
    monkeypatch.setenv(writer.DIRECT_IO_ENV, "0")
    monkeypatch.setattr(writer, "DIRECT_AFTER", 0)
    assert writer._open_direct(str(tmp_path)) is None
    _, seen = _direct_writes(monkeypatch)
    target = tmp_path / "out.bin"
    with outputs.written_file(target, background=True) as f:
        f.write(b"z" * (SLICE + 5))
    assert target.read_bytes() == b"z" * (SLICE + 5)
    assert seen == []


def test_a_full_disk_past_the_cache_is_an_output_error_and_no_file(tmp_path, monkeypatch):
    """ENOSPC from an O_DIRECT write: raised where the caller writes or closes, as an
    OutputError naming the file, and no file (nor temporary) is left."""
    import errno

    from jlprof.errors import OutputError

    def full(_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer, "DIRECT_AFTER", 0)
    direct, _ = _direct_writes(monkeypatch, full)
    target = tmp_path / "out.bin"
    with (
        pytest.raises((OutputError, OSError)) as info,
        outputs.written_file(target, background=True) as f,
    ):
        for _ in range(4):
            f.write(b"q" * SLICE)
    if direct:
        assert info.type is OutputError and "no space left" in str(info.value)
    assert list(tmp_path.iterdir()) == []


class _Clocked(io.FileIO):
    """A file whose every write takes ``cached_s`` on the fake clock ``now``."""

    def __init__(self, path, now: list[float], cached_s: float) -> None:
        super().__init__(path, "wb")
        self.now, self.cached_s = now, cached_s

    def write(self, b):
        self.now[0] += self.cached_s
        return super().write(b)


def _probe_stage(tmp_path, monkeypatch, always: int, on_direct=None) -> tuple[list, list]:
    """The probe's stage in slices: ``DIRECT_AFTER`` one, a probe of two, ``DIRECT_ALWAYS`` at
    ``always``; a fake clock on which every direct write (a slice) takes 0.5, then
    ``on_direct(k)`` for the k-th. Returns (the clock, the direct writes' lengths)."""
    if not _has_direct(tmp_path):
        pytest.skip("this file system (or platform) has no O_DIRECT")
    monkeypatch.setattr(writer, "DIRECT_AFTER", SLICE)
    monkeypatch.setattr(writer, "DIRECT_PROBE", 2 * SLICE)
    monkeypatch.setattr(writer, "DIRECT_ALWAYS", always * SLICE)
    now = [0.0]
    monkeypatch.setattr(writer, "_clock", lambda: now[0])

    def slow_direct(k):
        now[0] += 0.5
        if on_direct is not None:
            on_direct(k)

    return now, _direct_writes(monkeypatch, slow_direct)[1]


def _through_slices(f: _Clocked, data: list[bytes], producer_s: float = 0.0, probe=True) -> None:
    """``data`` written through a :class:`writer._Slices` of ``f`` in slices, each after
    ``producer_s`` on ``f``'s clock (the producer's time to make it); then finished, closed."""
    out = writer._Slices(f, probe=probe)
    try:
        for part in data:
            for i in range(0, len(part), SLICE):
                f.now[0] += producer_s
                out.write(memoryview(part)[i : i + SLICE])
        out.finish()
    finally:
        out.close()
        f.close()


@pytest.mark.parametrize(
    ("producer_s", "cached_s", "goes_back"),
    [
        # a direct slice takes 0.5; the writer's share of the probe is 0.5 / (0.5 + producer_s)
        (0.0, 0.1, True),  # the disk holds the writer up, and the cache is quicker: back to it
        (0.0, 1.0, False),  # the disk holds it up, but the cache is slower still: past it
        (0.5, 0.1, True),  # the disk half the time: the cache costs less than 0.5 x 0.5
        (0.5, 0.4, False),  # ... and more than that: past it, though cheaper than the disk
        (4.5, 0.1, False),  # the disk keeps up (a tenth of the time): past it
    ],
)
def test_back_to_the_cache_where_it_costs_less_than_the_disk_weighted_by_its_hold_up(
    tmp_path, monkeypatch, producer_s, cached_s, goes_back
):
    """Past ``DIRECT_AFTER`` the writer probes ``DIRECT_PROBE`` bytes past the cache. It goes
    back to the cache (until ``DIRECT_ALWAYS``, past it from there) when the cached writes cost
    less per byte than the direct ones times the share of the probe's time spent in them;
    else it stays past the cache. Either way the file holds every byte, in order."""
    now, seen = _probe_stage(tmp_path, monkeypatch, always=6)
    data = pieces(9 * SLICE + 77, 9)
    target = tmp_path / "out.bin"
    _through_slices(_Clocked(str(target), now, cached_s), data, producer_s)
    assert target.read_bytes() == b"".join(data)
    if goes_back:  # the probe's two slices; the cache up to 6 slices; past it from there
        assert seen == [SLICE] * 2 + [SLICE] * 3 + [BLOCK]
    else:  # slices 1..8 and the padded rest past the cache
        assert seen == [SLICE] * 8 + [BLOCK]


def test_back_in_the_cache_a_file_that_grows_dearer_there_goes_past_it_again(tmp_path, monkeypatch):
    """After a probe sent the file back to the cache, every ``DIRECT_PROBE`` bytes of cached
    writes are timed again: once they cost more per byte than the probe's weighted direct
    cost (a box whose fresh cache pages turned into host faults), the rest goes past the
    cache, with no second probe, though ``DIRECT_ALWAYS`` is far off."""
    files: list[_Clocked] = []

    def dearer(k):  # after the probe's two slices, a cached write costs 1.0
        if k == 2:
            files[0].cached_s = 1.0

    now, seen = _probe_stage(tmp_path, monkeypatch, always=40, on_direct=dearer)
    data = [bytes([k]) * SLICE for k in range(9)] + [b"x" * 77]  # a write per slice
    target = tmp_path / "out.bin"
    files.append(_Clocked(str(target), now, 0.1))
    _through_slices(files[0], data)
    assert target.read_bytes() == b"".join(data)
    # the probe's two slices (1, 2); the cache for two (3, 4), dearer than 0.5 each; past it
    # from slice 5 on: slices 5..8 and the padded rest
    assert seen == [SLICE] * 2 + [SLICE] * 4 + [BLOCK]


def test_a_bursty_producers_file_is_not_probed_and_stays_past_the_cache(tmp_path, monkeypatch):
    """``probe=False`` (``written_file(bursty=True)``: the windowed engine's parts, one a
    window): past ``DIRECT_AFTER`` every slice goes past the cache, where a probe would have
    sent the file back (the disk holding the writer up, the cache quicker)."""
    now, seen = _probe_stage(tmp_path, monkeypatch, always=40)
    data = [bytes([k]) * SLICE for k in range(9)] + [b"x" * 77]
    for probe, want in ((True, [SLICE] * 2), (False, [SLICE] * 8 + [BLOCK])):
        seen.clear()
        target = tmp_path / f"out-{probe}.bin"
        _through_slices(_Clocked(str(target), now, 0.1), data, probe=probe)
        assert target.read_bytes() == b"".join(data)
        assert seen == want  # probed: two slices, then the cache to the end
    # the same through written_file's thread: ``bursty`` is what turns the probe off (the
    # cached writes cost nothing on the fake clock, so a probe sends the file back)
    for bursty, want in ((False, [SLICE] * 2), (True, [SLICE] * 8 + [BLOCK])):
        seen.clear()
        target = tmp_path / f"piped-{bursty}.bin"
        with outputs.written_file(target, background=True, bursty=bursty) as f:
            for part in data:
                f.write(part)
        assert target.read_bytes() == b"".join(data)
        assert seen == want


TMPFS_MAGIC = 0x01021994  # linux/magic.h


def _statfs_type(path) -> int:
    """``stat -f``'s file-system type of ``path`` (coreutils: the independent reading)."""
    import subprocess

    out = subprocess.run(["stat", "-f", "-c", "%t", str(path)], capture_output=True, text=True)
    return int(out.stdout.strip(), 16)


def _shm() -> Path:
    """A new folder on tmpfs (``/dev/shm``), or the test skipped."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or _statfs_type(shm) != TMPFS_MAGIC:
        pytest.skip("no tmpfs at /dev/shm here")
    return Path(tempfile.mkdtemp(dir=shm, prefix="jlprof-test-"))


def test_the_file_system_type_is_statfs_f_type(tmp_path):
    for folder in [tmp_path, Path("/dev/shm")]:
        if not folder.is_dir():
            continue
        fd = os.open(folder, os.O_RDONLY)
        try:
            assert writer._fs_type(fd) == _statfs_type(folder), folder
        finally:
            os.close(fd)


def test_a_file_on_tmpfs_stays_in_the_cache(monkeypatch):
    """tmpfs files are their pages: ``O_DIRECT`` (which tmpfs accepts since Linux 6.6) saves
    no copy there and cost the 3M-kernel command 4 % more CPU, so a tmpfs file is written by
    ``write`` to its end, whole."""
    folder = _shm()
    try:
        assert writer._open_direct(str(folder)) is None
        monkeypatch.setattr(writer, "DIRECT_AFTER", 0)
        _, seen = _direct_writes(monkeypatch)
        parts = pieces(3 * SLICE + 5, 3)
        write_through(folder / "out.bin", parts)
        assert seen == []
    finally:
        shutil.rmtree(folder)
