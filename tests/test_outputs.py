"""``jlprof.outputs.written_file`` with its background writer: every byte in order, whatever
the sizes of the writes; the writer's errors raised in the caller, and no file left then."""

from __future__ import annotations

import errno

import pytest

from jlprof import outputs, writer
from jlprof.errors import OutputError
from tests.fixtures.pieces import pieces

SLICE = writer._WRITE_SLICE


@pytest.mark.parametrize("total", [0, 1, 4095, SLICE - 1, SLICE, SLICE + 1, 3 * SLICE - 7])
def test_background_file_holds_every_byte_in_order_whatever_its_size(tmp_path, total):
    """Writes of any size, bytes and memoryviews (the encoders hand Arrow buffers), split
    into slices by the thread: the file holds exactly the bytes given, and nothing else is
    left in the folder."""
    parts = pieces(total, total)
    target = tmp_path / "out.bin"
    with outputs.written_file(target, background=True) as f:
        for i, p in enumerate(parts):
            f.write(memoryview(p) if i % 2 else p)
    assert target.read_bytes() == b"".join(parts)
    assert list(tmp_path.iterdir()) == [target]


def test_flush_waits_until_the_thread_has_written_everything(tmp_path):
    target = tmp_path / "out.bin"
    with outputs.written_file(target, background=True) as f:
        f.write(b"a" * (SLICE + 3))
        f.write(b"b" * 5)
        f.flush()
        (partial,) = tmp_path.iterdir()  # the temporary name, already holding every byte
        assert partial.name.endswith(outputs.PARTIAL)
        assert partial.read_bytes() == b"a" * (SLICE + 3) + b"b" * 5
    assert target.read_bytes() == b"a" * (SLICE + 3) + b"b" * 5


class _Full:
    """A file whose ``n``-th write fails as a full disk does."""

    def __init__(self, f, n: int) -> None:
        self.f, self.n, self.name = f, n, f.name

    def write(self, b):
        self.n -= 1
        if self.n == 0:
            raise OSError(errno.ENOSPC, "No space left on device", self.name)
        return self.f.write(b)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


@pytest.mark.parametrize("failing", [1, 3])
def test_a_full_disk_in_the_writer_thread_is_an_output_error_and_no_file(
    tmp_path, monkeypatch, failing
):
    """ENOSPC in the thread's first or a later write: raised in the caller (at a later write
    or at the end of the block) as one OutputError naming the file; no file, no temporary."""
    real = open
    monkeypatch.setattr(
        outputs, "open", lambda path, mode: _Full(real(path, mode), failing), raising=False
    )
    target = tmp_path / "out.bin"
    with pytest.raises(OutputError) as info, outputs.written_file(target, background=True) as f:
        for _ in range(4):
            f.write(b"q" * SLICE)
    assert str(info.value).startswith(f"cannot write {target}: no space left on the device")
    assert list(tmp_path.iterdir()) == []


def test_an_error_in_the_caller_stops_the_writer_and_leaves_no_file(tmp_path):
    target = tmp_path / "out.bin"
    with pytest.raises(KeyboardInterrupt), outputs.written_file(target, background=True) as f:
        f.write(b"x" * (2 * SLICE))
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
