"""The heap policy of heavy stages: reuse freed memory inside, give it back after."""

import sys

import numpy as np
import pytest

from jlprof.engine import memory

linux_glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or memory._libc() is None, reason="glibc only"
)


def _rss_kb() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@linux_glibc
def test_freed_arrays_stay_for_reuse_inside_and_go_back_after():
    mb = 24  # below the 32 MB threshold: from the heap inside a stage
    with memory.heavy_stage():
        a = np.ones(mb * 2**20 // 8)
        b = np.ones(mb * 2**20 // 8)  # keeps the first block off the heap top
        del a
        inside = _rss_kb()
        c = np.ones(mb * 2**20 // 8)  # reuses the freed block: RSS does not grow by it
        assert _rss_kb() - inside < mb * 1024 // 2
        del b, c
    after = _rss_kb()
    assert inside - after > mb * 1024 // 2  # the outermost exit trimmed the free heap


@linux_glibc
def test_blocks_above_glibcs_largest_mmap_threshold_are_reused_too():
    mb = 80  # a 10M-row int64 column: above the 32 MB most mallopt allows as threshold
    with memory.heavy_stage():
        keep = np.ones(2**20)  # noqa: F841 - something live below the blocks
        a = np.ones(mb * 2**20 // 8)
        b = np.ones(mb * 2**20 // 8)  # keeps the first block off the heap top
        del a
        inside = _rss_kb()
        c = np.ones(mb * 2**20 // 8)  # the freed block again, not a fresh mmap to fault in
        assert _rss_kb() - inside < mb * 1024 // 2
        del b, c
    after = _rss_kb()
    assert inside - after > mb * 1024 // 2  # given back when the outermost stage ends


def test_stages_nest_and_survive_errors():
    with pytest.raises(RuntimeError), memory.heavy_stage():
        with memory.heavy_stage():
            assert memory._allocator.depth == 2
        raise RuntimeError("boom")
    assert memory._allocator.depth == 0


@linux_glibc
def test_arrow_buffers_of_reading_are_given_back():
    pa = pytest.importorskip("pyarrow")
    pc = pytest.importorskip("pyarrow.compute")
    a = pa.array(np.arange(6 * 2**20))  # 48 MB, as the reader's Arrow columns
    b = pc.multiply(a, 2)  # allocated by Arrow's own pool (mimalloc), which keeps freed pages
    del a, b
    before = _rss_kb()
    memory.release_reader_memory()
    assert before - _rss_kb() > 20 * 1024


@linux_glibc
def test_free_heap_within_the_slack_stays_for_the_next_window_and_beyond_it_goes():
    if memory.free_heap_bytes() is None:
        pytest.skip("glibc before 2.33: no mallinfo2")
    mb = 64
    with memory.heavy_stage():
        keep = np.ones(2**20)  # noqa: F841 - something live below the blocks
        a = np.ones(mb * 2**20 // 8)
        b = np.ones(mb * 2**20 // 8)  # keeps the first block off the heap top
        del a
        free = memory.free_heap_bytes()
        assert free >= mb * 2**20  # mallinfo2 counts the freed block
        before = _rss_kb()
        memory.release_reader_memory(slack=free + 2**20)  # within the slack: kept
        assert before - _rss_kb() < mb * 1024 // 2
        c = np.ones(mb * 2**20 // 8)  # the kept block again: no fresh pages
        assert _rss_kb() - before < mb * 1024 // 2
        del c
        before = _rss_kb()
        memory.release_reader_memory(slack=mb * 2**20 // 2)  # more free than the slack
        assert before - _rss_kb() > mb * 1024 // 2
        del b


def test_small_pages_only_inside_and_the_user_setting_restored():
    setter = getattr(np._core.multiarray, "_set_madvise_hugepage", None)
    if setter is None:
        pytest.skip("this numpy has no huge-page switch")
    for user in (True, False):
        setter(user)
        with memory.heavy_stage():
            assert setter(False) is False  # reads (and keeps) the setting inside
        assert setter(user) is user
    setter(True)


def test_small_pages_in_overlapping_threads_restore_the_user_setting():
    """A reader thread's block opens inside the main thread's and closes after it (or the
    other way round): the setting stays off while any is open and comes back at the end."""
    import threading

    setter = getattr(np._core.multiarray, "_set_madvise_hugepage", None)
    if setter is None:
        pytest.skip("this numpy has no huge-page switch")
    for user in (True, False):
        for main_first in (True, False):
            setter(user)
            opened, main_left = threading.Event(), threading.Event()
            inside: list[bool] = []

            def reader(opened=opened, main_left=main_left, inside=inside):
                with memory.small_pages():
                    opened.set()
                    assert main_left.wait(10)
                    inside.append(setter(False))  # still off after the main block left

            with memory.small_pages():
                t = threading.Thread(target=reader)
                t.start()
                assert opened.wait(10)
                if main_first:
                    main_left.set()
            if not main_first:
                main_left.set()
            t.join()
            assert inside == [False]
            assert setter(user) is user
    setter(True)


class _FakeLibc:
    """Records the allocator calls a stage makes (glibc offers no way to read them back)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append(("mallopt", param, value))
        return 1

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(("trim", pad))
        return 1


def test_the_host_allocator_settings_come_back_after_the_outermost_stage(monkeypatch):
    fake = _FakeLibc()
    monkeypatch.setattr(memory, "_libc", lambda: fake)
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.setenv("MALLOC_MMAP_MAX_", "1000")
    with memory.heavy_stage():
        with memory.heavy_stage():
            pass
        inside = list(fake.calls)
    assert inside == [
        ("mallopt", memory._M_MMAP_THRESHOLD, memory._MMAP_MAX),
        ("mallopt", memory._M_MMAP_MAX, 0),  # no block of any size is an mmap of its own
        ("mallopt", memory._M_TRIM_THRESHOLD, memory._STAGE_TRIM),
    ]  # the nested stage changed nothing
    assert fake.calls[len(inside) :] == [
        ("trim", 0),
        ("mallopt", memory._M_MMAP_THRESHOLD, 65536),  # the process's own setting
        ("mallopt", memory._M_MMAP_MAX, 1000),  # the process's own setting
        ("mallopt", memory._M_TRIM_THRESHOLD, 128 * 1024),  # glibc's default
    ]
    monkeypatch.delenv("MALLOC_MMAP_MAX_")
    fake.calls.clear()
    with memory.heavy_stage():
        pass
    assert ("mallopt", memory._M_MMAP_MAX, 65536) in fake.calls  # glibc's default
