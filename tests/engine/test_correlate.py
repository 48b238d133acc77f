"""DESIGN.md correlation rules 1-4, one test each, on hand-built frames."""

import numpy as np
import pytest

from jlprof.engine.correlate.correlate import correlate
from jlprof.engine.correlate.ranges import _nest

from .frames import call, gtid, kernel, make_trace, rng


def op_of_gpu(c, row):
    inst = c.gpu["inst"].iat[row]
    return c.ops["op_name"].iat[c.inst["op"].iat[inst]]


def test_correlation_ids_reused_across_processes_stay_apart():
    # both processes use correlation id 5; each kernel must follow its own process
    t = make_trace(
        gpu=[kernel(100, 200, 5, pid=10, name="ka"), kernel(300, 400, 5, pid=20, name="kb")],
        api=[call(10, 20, 5, pid=10), call(30, 40, 5, pid=20)],
        nvtx=[rng("opA", 0, 50, pid=10), rng("opB", 25, 60, pid=20)],
    )
    c = correlate(t)
    assert c.gpu["api"].tolist() == [0, 1]
    assert [op_of_gpu(c, 0), op_of_gpu(c, 1)] == ["opA", "opB"]


def test_graph_launch_kernels_share_one_call_and_split_its_time():
    t = make_trace(
        gpu=[
            kernel(100 + 10 * i, 105 + 10 * i, 9, name=f"g{i}", graph_node_id=i + 1)
            for i in range(3)
        ],
        api=[call(0, 30, 9, name="cudaGraphLaunch")],
        nvtx=[rng("step", 0, 50)],
    )
    c = correlate(t)
    assert c.gpu["api"].tolist() == [0, 0, 0]
    assert c.gpu["api_share_ns"].tolist() == [10, 10, 10]
    assert {op_of_gpu(c, i) for i in range(3)} == {"step"}


def test_innermost_range_gets_the_call_exclusively():
    t = make_trace(
        gpu=[kernel(100, 110, 1), kernel(120, 130, 2)],
        api=[call(12, 14, 1), call(40, 42, 2)],
        nvtx=[rng("outer", 0, 100), rng("inner", 10, 20)],
    )
    c = correlate(t)
    assert [op_of_gpu(c, 0), op_of_gpu(c, 1)] == ["inner", "outer"]
    inner = c.inst["parent"].iat[1]
    assert inner == 0  # 'inner' nests in 'outer'


def test_unassociated_work_on_another_thread():
    # the range is on thread 1; the call on thread 2 overlaps it in time but is not inside it
    t = make_trace(
        gpu=[kernel(100, 110, 1, name="gemm")],
        api=[call(10, 20, 1, tid=2), call(30, 31, 2, tid=2, name="cudaStreamSynchronize")],
        nvtx=[rng("forward", 0, 50, tid=1)],
    )
    c = correlate(t)
    assert op_of_gpu(c, 0) == "unassociated_gemm"
    names = set(c.ops["op_name"])
    assert "unassociated_cudaStreamSynchronize" in names
    row = c.ops.index[c.ops["op_name"] == "unassociated_gemm"][0]
    assert c.ops.loc[row, "op_type"] == "gemm"


def test_call_straddling_a_range_end_is_not_inside_it():
    t = make_trace(
        gpu=[kernel(100, 110, 1)],
        api=[call(45, 55, 1)],
        nvtx=[rng("outer", 0, 100), rng("a", 10, 50)],
    )
    assert op_of_gpu(correlate(t), 0) == "outer"


def test_domains_filter_and_cross_domain_innermost():
    t = make_trace(
        gpu=[kernel(100, 110, 1)],
        api=[call(20, 21, 1)],
        nvtx=[rng("fw", 0, 100, domain="Forward"), rng("lib", 15, 30, domain="Lib")],
    )
    assert op_of_gpu(correlate(t), 0) == "lib"  # latest-starting across domains
    assert op_of_gpu(correlate(t, domains=["Forward"]), 0) == "fw"


def test_start_end_range_ended_on_other_thread_is_root_and_holds_no_calls():
    t = make_trace(
        gpu=[kernel(100, 110, 1)],
        api=[call(20, 21, 1)],
        nvtx=[rng("epoch", 0, 100, event_type=60, end_tid=gtid(1, 99))],
    )
    c = correlate(t)
    assert op_of_gpu(c, 0) == "unassociated_k"
    assert c.inst["parent"].iat[0] == -1


def test_slash_scoped_names_build_the_hierarchy():
    t = make_trace(
        nvtx=[rng("step", 0, 100), rng("/model/layer1/conv", 10, 20), rng("fwd", 30, 40)]
    )
    c = correlate(t)
    paths = set(c.paths["path"])
    assert {"/step", "/step/fwd", "/model", "/model/layer1", "/model/layer1/conv"} <= paths


def reference_parent(lane, s, e):
    out = []
    for i in range(len(s)):
        best = -1
        for j in range(len(s)):
            contains = j != i and lane[j] == lane[i] and s[j] <= s[i] and e[i] <= e[j]
            # innermost: latest start, then earliest end; ties broken by order of input
            if contains and (best < 0 or (s[j], -e[j]) > (s[best], -e[best])):
                best = j
        out.append(best)
    return out


def random_nested(seed, n_lanes=3, n=80):
    """Properly nested ranges built with an explicit stack (the reference generator)."""
    r = np.random.default_rng(seed)
    lane, s, e = [], [], []
    for ln in range(n_lanes):
        t, stack = 0, []
        for _ in range(n // n_lanes):
            t += int(r.integers(1, 5))
            if stack and r.random() < 0.45:
                i = stack.pop()
                e[i] = t
            else:
                lane.append(ln)
                s.append(t)
                e.append(-1)
                stack.append(len(s) - 1)
        for i in reversed(stack):
            t += 1
            e[i] = t
    return np.array(lane), np.array(s), np.array(e)


@pytest.mark.parametrize("seed", range(15))
def test_nesting_matches_brute_force(seed):
    lane, s, e = random_nested(seed)
    assert _nest(lane, s, e).tolist() == reference_parent(lane, s, e)


def test_api_innermost_matches_brute_force():
    _lane, s, e = random_nested(3, n_lanes=1, n=120)
    nv = [rng(f"r{i}", int(a), int(b)) for i, (a, b) in enumerate(zip(s, e, strict=True))]
    r = np.random.default_rng(1)
    qs = r.integers(0, int(e.max()), 200)
    calls = [call(int(q), int(q), i) for i, q in enumerate(qs)]
    c = correlate(make_trace(api=calls, nvtx=nv))
    got = c.api["inst"].to_numpy()
    for i, q in enumerate(qs):
        inside = [j for j in range(len(s)) if s[j] <= q <= e[j]]
        want = max(inside, key=lambda j: (s[j], -e[j])) if inside else None
        if want is None:
            assert c.inst["synthetic"].iat[got[i]]
        else:
            assert got[i] == want


def random_crossing(seed, n_lanes=2, n=90):
    """Arbitrary intervals (start/end ranges cross each other), distinct (start, end) pairs."""
    r = np.random.default_rng(seed)
    lane = r.integers(0, n_lanes, n)
    s = r.integers(0, 1_000, n)
    e = s + r.integers(0, 400, n)
    _, keep = np.unique(np.stack([lane, s, e]), axis=1, return_index=True)
    return lane[keep], s[keep], e[keep]


@pytest.mark.parametrize("seed", range(10))
def test_nesting_of_crossing_ranges_is_the_latest_starting_container(seed):
    lane, s, e = random_crossing(seed)
    assert _nest(lane, s, e).tolist() == reference_parent(lane, s, e)


def test_api_innermost_with_crossing_start_end_ranges():
    # A=[0,100], B=[50,150] cross; C=[110,120] lies in B only. A call at 125 is in B, not
    # unassociated (a parent-chain walk from C finds nothing: C's only container is B).
    t = make_trace(
        gpu=[kernel(300, 310, 1), kernel(320, 330, 2), kernel(340, 350, 3)],
        api=[call(125, 126, 1), call(60, 61, 2), call(20, 21, 3)],
        nvtx=[
            rng("A", 0, 100, event_type=60),
            rng("B", 50, 150, event_type=60),
            rng("C", 110, 120, event_type=60),
        ],
    )
    c = correlate(t)
    assert [op_of_gpu(c, i) for i in range(3)] == ["B", "B", "A"]
    assert c.inst["parent"].tolist()[:3] == [-1, -1, 1]


@pytest.mark.parametrize("seed", range(5))
def test_api_innermost_matches_brute_force_with_crossing_ranges(seed):
    _lane, s, e = random_crossing(seed, n_lanes=1, n=60)
    nv = [
        rng(f"r{i}", int(a), int(b), event_type=60)
        for i, (a, b) in enumerate(zip(s, e, strict=True))
    ]
    r = np.random.default_rng(seed + 100)
    qs = r.integers(0, int(e.max()), 200)
    qe = qs + r.integers(0, 30, 200)
    calls = [call(int(a), int(b), i) for i, (a, b) in enumerate(zip(qs, qe, strict=True))]
    c = correlate(make_trace(api=calls, nvtx=nv))
    got = c.api["inst"].to_numpy()
    for i, (a, b) in enumerate(zip(qs, qe, strict=True)):
        inside = [j for j in range(len(s)) if s[j] <= a and b <= e[j]]
        if not inside:
            assert c.inst["synthetic"].iat[got[i]]
        else:
            assert got[i] == max(inside, key=lambda j: (s[j], -e[j]))


def test_an_error_while_nesting_ranges_waits_for_the_launch_thread(monkeypatch):
    """Launching calls and isolated GPU work are found in a second thread while the ranges
    nest; an error (or Ctrl-C) in the nesting ends the call only once that thread has ended:
    nothing goes on reading the trace behind the caller's back."""
    import threading

    from jlprof.engine.correlate import correlate as corr

    from .interrupts import interrupt_beside_slow_work

    ended = interrupt_beside_slow_work(monkeypatch, corr, "launching_calls", "range_pass")
    t = make_trace(gpu=[kernel(100, 200, 5)], api=[call(10, 20, 5)], nvtx=[rng("opA", 0, 50)])
    with pytest.raises(KeyboardInterrupt):
        correlate(t)
    assert ended.is_set()
    assert not [th for th in threading.enumerate() if th.name == "jlprof-correlate"]
    monkeypatch.undo()
    c = correlate(t)  # and the same trace correlates once nothing breaks
    assert op_of_gpu(c, 0) == "opA"
    assert c.gpu["isolated"].tolist() == [True]


@pytest.mark.parametrize("rows", [1, 2, 5])
def test_path_codes_made_by_chunks_of_a_level_are_the_whole_levels(monkeypatch, rows):
    """``path_table`` codes a nesting level's rows by chunks of ``PATH_ROWS`` (its memory):
    every instance's path code and the path table are those of the level coded at once, on
    a trace of nested ranges on two threads with '/'-scoped (absolute) names among them."""
    import pandas as pd

    from jlprof.engine.correlate import correlate as correlate_module
    from jlprof.engine.correlate.correlate import path_table

    r = np.random.default_rng(rows)
    n = 400
    parent = np.full(n, -1, np.int64)
    for i in range(1, n):  # a random forest: each row's parent an earlier row or none
        parent[i] = r.integers(-1, i) if r.random() < 0.8 else -1
    order = r.permutation(n)  # rows in any order, parents after children too
    back = np.empty(n, np.int64)
    back[order] = np.arange(n)
    parent = np.where(parent[order] >= 0, back[np.maximum(parent[order], 0)], -1)
    names = np.array([f"op{k}" for k in range(6)] + ["/model/dense/MatMul"], dtype=object)
    op_abs = np.array([""] * 6 + ["/model/dense/MatMul"], dtype=object)
    op = r.integers(0, len(names), n)
    whole = path_table(op, names, op_abs, parent.astype(np.int32))
    monkeypatch.setattr(correlate_module, "PATH_ROWS", rows)
    got = path_table(op, names, op_abs, parent.astype(np.int32))
    assert np.array_equal(got[0], whole[0]) and got[0].dtype == whole[0].dtype
    pd.testing.assert_frame_equal(got[1], whole[1])
    assert whole[1]["depth"].max() >= 3  # nested deep enough to have levels
