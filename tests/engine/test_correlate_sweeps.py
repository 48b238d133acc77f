"""The correlation sweeps (range order, nesting, innermost range, launching call) against
plain quadratic definitions on random inputs: ties, crossing ranges, several lanes, empty."""

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.correlate.correlate import NONE, correlate, launching_calls
from jlprof.engine.correlate.ranges import _innermost, _nest, _range_order

from .frames import call, gtid, make_trace, rng


def random_ranges(seed, n_lanes, n, t_max=60):
    """Ranges with many equal starts and ends, duplicates and crossings (small times)."""
    r = np.random.default_rng(seed)
    lane = r.integers(0, n_lanes, n).astype(np.int64)
    s = r.integers(0, t_max, n).astype(np.int64)
    e = s + r.integers(0, t_max // 2, n)
    return lane, s, e


def previous_greater_or_equal(lane, s, e):
    """Parent by definition: in (lane, start, -end) order (ties by row), the nearest earlier
    range of the lane that ends no earlier."""
    order = sorted(range(len(s)), key=lambda i: (lane[i], s[i], -e[i], i))
    parent = [NONE] * len(s)
    for p, i in enumerate(order):
        for q in range(p - 1, -1, -1):
            j = order[q]
            if lane[j] == lane[i] and e[j] >= e[i]:
                parent[i] = j
                break
    return parent


CASES = [(seed, n_lanes, n) for seed in range(12) for n_lanes, n in ((1, 40), (3, 120), (7, 300))]


@pytest.mark.parametrize(("seed", "n_lanes", "n"), CASES)
def test_range_order_is_lane_start_then_longest_first(seed, n_lanes, n):
    lane, s, e = random_ranges(seed, n_lanes, n)
    lane[::7] = NONE  # ranges without a lane sort first
    want = sorted(range(n), key=lambda i: (lane[i], s[i], -e[i], i))
    assert _range_order(lane, s, e).tolist() == want


@pytest.mark.parametrize(("seed", "n_lanes", "n"), CASES)
def test_nesting_is_the_previous_range_ending_no_earlier(seed, n_lanes, n):
    lane, s, e = random_ranges(seed, n_lanes, n)
    assert _nest(lane, s, e).tolist() == previous_greater_or_equal(lane, s, e)


def test_nesting_of_long_sibling_chains_and_roots():
    # 200 roots in a row, each with 30 children in a row, and a crossing range at the end
    s = np.concatenate([[100 * k, *(100 * k + 1 + 3 * np.arange(30))] for k in range(200)])
    e = np.concatenate([[100 * k + 95, *(100 * k + 3 + 3 * np.arange(30))] for k in range(200)])
    s, e = np.append(s, [19_950]), np.append(e, [20_500])
    lane = np.zeros(len(s), np.int64)
    assert _nest(lane, s, e).tolist() == previous_greater_or_equal(lane, s, e)


def test_empty_inputs():
    z = np.zeros(0, np.int64)
    assert len(_range_order(z, z, z)) == 0
    assert len(_nest(z, z, z)) == 0
    one = np.zeros(1, np.int64)
    assert _innermost(z, z, z, z, one, one, one).tolist() == [NONE]
    assert _innermost(one, one, one + 5, one - 1, z, z, z).tolist() == []


def innermost_by_definition(lane, s, e, q_lane, q_s, q_e):
    """The range of the query's lane containing it that is latest in (start, -end, row)."""
    out = []
    for ql, a, b in zip(q_lane, q_s, q_e, strict=True):
        inside = [j for j in range(len(s)) if lane[j] == ql >= 0 and s[j] <= a and b <= e[j]]
        out.append(max(inside, key=lambda j: (s[j], -e[j], j)) if inside else NONE)
    return out


@pytest.mark.parametrize(("seed", "n_lanes", "n"), CASES)
def test_innermost_range_of_each_query(seed, n_lanes, n):
    lane, s, e = random_ranges(seed, n_lanes, n)
    parent = np.asarray(_nest(lane, s, e), np.int64)
    r = np.random.default_rng(seed + 1000)
    q_lane = r.integers(-1, n_lanes + 1, 3 * n)  # also lanes without ranges and NONE
    q_s = r.integers(-5, 100, 3 * n)
    q_e = q_s + r.integers(0, 12, 3 * n)
    got = _innermost(lane, s, e, parent, q_lane, q_s, q_e)
    assert got.tolist() == innermost_by_definition(lane, s, e, q_lane, q_s, q_e)


def launching_by_definition(a_pid, a_corr, g_pid, g_corr):
    """First call row with the same (process, correlation id); none for negative ids."""
    first = {}
    for i, key in enumerate(zip(a_pid, a_corr, strict=True)):
        first.setdefault(key, i)
    return [first.get(k, NONE) if k[1] >= 0 else NONE for k in zip(g_pid, g_corr, strict=True)]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(
    "layout", ["sorted", "shuffled", "duplicates", "two_processes", "one_process", "sparse_ids"]
)
def test_launching_call_by_correlation_id_and_process(seed, layout):
    r = np.random.default_rng(seed)
    n = 200
    a_corr = np.arange(5, 5 + 2 * n, 2, dtype=np.int64)
    a_pid = np.full(n, 7 << 24, np.int64)
    if layout == "shuffled":
        r.shuffle(a_corr)
    if layout == "duplicates":
        a_corr = np.sort(r.integers(0, n // 2, n))
    if layout == "two_processes":
        a_pid[r.random(n) < 0.5] = 9 << 24
    g_corr = np.concatenate([r.choice(a_corr, n), r.integers(-3, 2 * n + 10, 40)])
    g_pid = np.where(r.random(len(g_corr)) < 0.8, 7 << 24, 9 << 24).astype(np.int64)
    if layout in ("one_process", "sparse_ids"):  # one process: ids alone (by table if compact)
        g_pid[:] = 7 << 24
    if layout == "sparse_ids":  # ids spread over far more values than calls: searched
        a_corr, g_corr = a_corr * 1000, np.where(g_corr > 0, g_corr * 1000, g_corr)
    api = pd.DataFrame({"correlation_id": a_corr})
    gpu = pd.DataFrame({"correlation_id": g_corr, "global_pid": g_pid})
    got = launching_calls(api, gpu, a_pid + 3)  # thread ids of the calling processes
    assert got.tolist() == launching_by_definition(a_pid, a_corr, g_pid, g_corr)


@pytest.mark.parametrize("seed", range(6))
def test_calls_get_the_latest_starting_innermost_range_across_threads_and_domains(seed):
    r = np.random.default_rng(seed)
    n, m = 150, 300
    tid = r.integers(1, 4, n)
    dom = r.choice(["", "A", "B"], n)
    s = r.integers(0, 400, n)
    e = s + r.integers(0, 120, n)
    other = r.random(n) < 0.1  # start/end ranges ended on another thread hold no calls
    nv = [
        rng(
            f"r{i}",
            int(s[i]),
            int(e[i]),
            tid=int(tid[i]),
            domain=str(dom[i]),
            event_type=60,
            end_tid=gtid(1, 9) if other[i] else -1,
        )
        for i in range(n)
    ]
    q_tid = r.integers(1, 5, m)
    q_s = r.integers(0, 450, m)
    q_e = q_s + r.integers(0, 20, m)
    calls = [call(int(q_s[i]), int(q_e[i]), i, tid=int(q_tid[i])) for i in range(m)]
    c = correlate(make_trace(api=calls, nvtx=nv))
    code = c.nvtx["domain"].cat.codes.to_numpy()
    got = c.api["inst"].to_numpy()
    for i in range(m):
        best = NONE
        for d in sorted(set(code.tolist())):  # each domain's innermost, then latest start
            inside = [
                j
                for j in range(n)
                if code[j] == d
                and tid[j] == q_tid[i]
                and not other[j]
                and s[j] <= q_s[i]
                and q_e[i] <= e[j]
            ]
            if inside:
                j = max(inside, key=lambda j: (s[j], -e[j], j))
                if best < 0 or s[j] > s[best]:
                    best = j
        if best < 0:
            assert c.inst["synthetic"].iat[got[i]]
        else:
            assert got[i] == best
