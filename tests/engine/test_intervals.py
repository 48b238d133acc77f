import numpy as np
import pytest

from jlprof.engine.aggregate.intervals import clip_to_windows, isolated, merge, union_length


def brute_union(group, start, end, ngroups):
    """Independent computation: mark every covered integer nanosecond."""
    out = np.zeros(ngroups, dtype=np.int64)
    for g in range(ngroups):
        covered = set()
        for gg, s, e in zip(group, start, end, strict=True):
            if gg == g:
                covered.update(range(s, e))
        out[g] = len(covered)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_union_length_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 60
    group = rng.integers(0, 4, n)
    start = rng.integers(0, 200, n)
    end = start + rng.integers(0, 30, n)
    assert union_length(group, start, end, 5).tolist() == brute_union(group, start, end, 5).tolist()


def test_merge_joins_overlapping_and_touching():
    g, s, e = merge(np.array([0, 0, 0, 0]), np.array([10, 0, 5, 30]), np.array([20, 5, 12, 40]))
    assert list(zip(g, s, e, strict=True)) == [(0, 0, 20), (0, 30, 40)]


def test_merge_keeps_groups_apart():
    g, s, e = merge(np.array([1, 0]), np.array([0, 5]), np.array([10, 8]))
    assert list(zip(g, s, e, strict=True)) == [(0, 5, 8), (1, 0, 10)]


def test_clip_to_windows_splits_across_bounds_and_drops_outside():
    row, win, s, e = clip_to_windows(
        np.array([5, -10, 95]), np.array([25, -5, 120]), np.array([0, 10, 20, 100])
    )
    pieces = sorted(zip(row.tolist(), win.tolist(), s.tolist(), e.tolist(), strict=False))
    assert pieces == [(0, 0, 5, 10), (0, 1, 10, 20), (0, 2, 20, 25), (2, 2, 95, 100)]


def test_empty_inputs():
    z = np.zeros(0, np.int64)
    assert union_length(z, z, z, 3).tolist() == [0, 0, 0]
    assert all(len(a) == 0 for a in clip_to_windows(z, z, np.array([0, 1])))


@pytest.mark.parametrize("seed", range(20))
def test_isolated_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 40
    start = rng.integers(0, 400, n)
    end = start + rng.integers(0, 30, n)
    got = isolated(start, end)
    for i in range(n):
        others = [j for j in range(n) if j != i]
        overlaps = any(start[i] < end[j] and start[j] < end[i] for j in others)
        zero_inside = start[i] == end[i] and any(start[j] < start[i] < end[j] for j in others)
        # an isolated interval overlaps nothing; a zero-length one may be either (adds 0)
        if got[i]:
            assert not overlaps
        elif start[i] != end[i]:
            assert overlaps or zero_inside
    # the property the engine relies on: union = isolated lengths + union of the rest
    rest = ~got
    whole = union_length(np.zeros(n, int), start, end, 1)[0]
    part = union_length(np.zeros(rest.sum(), int), start[rest], end[rest], 1)[0]
    assert whole == (end - start)[got].sum() + part


@pytest.mark.parametrize("bucket_rows", [1, 7, 1 << 30])
def test_thread_union_length_is_each_threads_union_summed(monkeypatch, bucket_rows):
    """Per group: the union on each thread, summed over threads (worked by hand as a set of
    covered nanoseconds), in one merge or in spans of time merged alone, of every row or of
    the rows a mask keeps."""
    from jlprof.engine.aggregate import intervals

    monkeypatch.setattr(intervals, "BUCKET_ROWS", bucket_rows)
    rng = np.random.default_rng(3)
    n = 300
    group = rng.integers(0, 5, n)
    thread = rng.choice([11, 2**40 + 3, 7], n)
    start = rng.integers(0, 500, n)
    end = start + rng.integers(0, 60, n)
    want = sum(  # each thread's own union, per group
        brute_union(group[thread == t], start[thread == t], end[thread == t], 5)
        for t in np.unique(thread)
    )
    got = intervals.thread_union_length(group, thread, start, end, 5)
    assert got.tolist() == want.tolist()
    # whole columns and a mask of the rows counted: the rows outside it change nothing
    keep = rng.random(n) < 0.6
    k = keep
    want = sum(
        brute_union(group[k & (thread == t)], start[k & (thread == t)], end[k & (thread == t)], 5)
        for t in np.unique(thread)
    )
    group = np.where(keep, group, rng.integers(-1, 5, n))  # not counted: any group, even none
    got = intervals.thread_union_length(group, thread, start, end, 5, keep=keep)
    assert got.tolist() == want.tolist()
