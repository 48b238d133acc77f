"""The range pass (``jlprof.engine.correlate.ranges``): what correlation derives from the NVTX
ranges alone, and the per-call range lookup the windowed work pass will run window by window.

* the window property: ``calls_in_ranges`` on any subset of the calls (random subsets, in
  and out of order; contiguous windows of 1, 7 and 1000 rows) gives the rows of the
  whole-array result, on fixtures (domains, emit_nvtx tops, pyprof, start/end ranges ended
  on another thread), random traces and every real trace;
* the range pass reads the NVTX frame only: correlation's range-derived output (range ops,
  each range's op, parent and lane, the markers, the calls' ranges) is the range pass's and
  stays the same when the trace's API calls and GPU work are taken away;
* the op table: the ranges' ops first, the unassociated ones appended, as one
  ``pd.factorize`` over both would number them (also where an unassociated op is one of
  the ranges' ops, and appended window by window).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.correlate.correlate import correlate
from jlprof.engine.correlate.ranges import (
    NONE,
    OP_KEY,
    Ranges,
    append_ops,
    calls_in_ranges,
    range_pass,
)
from jlprof.engine.read.read import read_trace
from jlprof.engine.read.trace import Trace
from tests.fixtures.loops import small_training_export
from tests.fixtures.scenarios import real_traces, rich_db
from tests.fixtures.torch_traces import emit_nvtx_db, plugin_db

from .frames import call, gtid, kernel, make_trace, rng

REAL = {p.parent.name: p for p in real_traces()}
FIXTURES = ("rich", "rich_two_domains", "emit_nvtx", "emit_nvtx_stashed", "plugin", "loop")
RANDOM = ("random_0", "random_1", "random_2")
CASES = FIXTURES + RANDOM + tuple(REAL)


def random_trace(seed: int) -> Trace:
    """Ranges on 3 threads x 3 domains with equal starts and ends, crossings, start/end
    ranges ended on another thread; calls inside, between and outside them, on threads
    with and without ranges."""
    r = np.random.default_rng(seed)
    ranges = []
    for _ in range(300):
        s = int(r.integers(0, 2_000))
        tid = int(r.integers(1, 4))
        end_tid = -1
        if r.random() < 0.1:  # a start/end range ended on another thread: no lane
            end_tid = gtid(1, tid % 3 + 1)
        text = str(r.choice(["fwd", "bwd", "step", "aten::mm, seq = 3, op_id = 7"]))
        dom = str(r.choice(["", "A", "B"]))
        ranges.append(
            rng(text, s, s + int(r.integers(0, 400)), tid=tid, domain=dom, end_tid=end_tid)
        )
    calls = []
    for i in range(500):
        s = int(r.integers(-100, 2_600))
        calls.append(call(s, s + int(r.integers(0, 30)), i + 1, tid=int(r.integers(1, 5))))
    return make_trace(api=calls, nvtx=ranges)


Case = tuple[Trace, list[str] | None, str | None]  # trace, domains, mode


@pytest.fixture(scope="module")
def trace_of(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Case]:
    """(trace, domains, mode) of a case, each built or read once."""
    tmp = tmp_path_factory.mktemp("ranges")
    build = {
        "rich": lambda p: rich_db().write(p),
        "emit_nvtx": lambda p: emit_nvtx_db(3).write(p),
        "emit_nvtx_stashed": lambda p: emit_nvtx_db(3, stashed=True).write(p),
        "plugin": lambda p: plugin_db(3).write(p),
        "loop": lambda p: small_training_export(p),
    }
    cache: dict[str, Case] = {}

    def get(case: str) -> Case:
        if case not in cache:
            if case in REAL:
                cache[case] = read_trace(REAL[case]), None, None
            elif case.startswith("random_"):
                cache[case] = random_trace(int(case.split("_")[1])), None, None
            elif case == "rich_two_domains":
                cache[case] = get("rich")[0], ["Forward", "Backward"], None
            else:
                cache[case] = read_trace(build[case](tmp / f"{case}.sqlite")), None, None
        return cache[case]

    return get


def nvtx_of(trace: Trace, domains: list[str] | None) -> pd.DataFrame:
    """The ranges correlation uses (after ``domains``), as ``correlate`` selects them."""
    nv = trace.nvtx
    if domains:
        nv = nv.loc[nv["domain"].astype(str).isin(domains).to_numpy()].reset_index(drop=True)
    return nv


def calls(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = trace.api
    return tuple(a[c].to_numpy(np.int64) for c in ("global_tid", "start_ns", "end_ns"))


@pytest.mark.parametrize("case", CASES)
def test_calls_in_ranges_on_any_subset_is_the_whole_result_restricted(
    case: str, trace_of: Callable[[str], Case]
) -> None:
    trace, domains, mode = trace_of(case)
    ranges = range_pass(nvtx_of(trace, domains), mode)
    tid, start, end = calls(trace)
    whole = calls_in_ranges(ranges, tid, start, end)
    n = len(whole)
    if case not in ("weatherbench2-rtx4060-nsys2025", "centerformer-trt-nvtx-titanrtx"):
        assert (whole >= 0).any()  # the case tests something: calls in ranges
    r = np.random.default_rng(7)
    subsets = [np.flatnonzero(r.random(n) < p) for p in (0.001, 0.1, 0.5, 0.9)]
    subsets += [r.permutation(n)[: n // 3], r.permutation(n)]  # out of time order too
    for rows in subsets:
        got = calls_in_ranges(ranges, tid[rows], start[rows], end[rows])
        assert np.array_equal(got, whole[rows])
    # contiguous windows of the calls' rows, as the windowed work pass reads them
    lo = int(r.integers(0, max(n - 700, 1)))
    for size, span in ((1, range(lo, min(lo + 150, n))), (7, range(0, n)), (1000, range(0, n))):
        for a in span[::size]:
            b = min(a + size, n)
            got = calls_in_ranges(ranges, tid[a:b], start[a:b], end[a:b])
            assert np.array_equal(got, whole[a:b]), (size, a)


def without_work(trace: Trace) -> Trace:
    """The trace with its API calls and GPU work taken away (the NVTX ranges kept)."""
    empty = make_trace()
    return dataclasses.replace(trace, api=empty.api, gpu=empty.gpu)


def assert_range_part(c, ranges: Ranges) -> None:
    """What ``correlate`` derived from the ranges is the range pass's."""
    n_r = len(ranges.start_ns)
    n_ops = len(ranges.ops)
    pd.testing.assert_frame_equal(  # no ranges: an empty frame of object columns
        c.ops.iloc[:n_ops].reset_index(drop=True), ranges.ops, check_dtype=n_ops > 0
    )
    inst = c.inst.iloc[:n_r]
    assert np.array_equal(inst["op"].to_numpy(np.int64), ranges.label_op[ranges.label])
    assert np.array_equal(inst["parent"].to_numpy(np.int64), ranges.lanes.parent)
    assert np.array_equal(inst["start_ns"].to_numpy(), ranges.start_ns)
    assert not inst["synthetic"].any()
    assert np.array_equal(c.range_lane, ranges.lanes.lane)
    assert c.markers == ranges.markers


@pytest.mark.parametrize("case", FIXTURES + RANDOM + ("nsysai-fastvideo-wan-train-fsdp-2gpu",))
def test_range_pass_reads_the_nvtx_ranges_only(case: str, trace_of: Callable[[str], Case]) -> None:
    trace, domains, mode = trace_of(case)
    ranges = range_pass(nvtx_of(trace, domains), mode)  # from the NVTX frame alone
    c = correlate(trace, domains, mode)
    assert_range_part(c, ranges)
    bare = correlate(without_work(trace), domains, mode)
    assert_range_part(bare, ranges)
    assert len(bare.ops) == len(ranges.ops)  # no work: no unassociated op appended
    # calls inside a range keep it; the others get a synthetic instance
    a_inst = c.api["inst"].to_numpy(np.int64)
    whole = calls_in_ranges(ranges, *calls(trace))
    inside = whole >= 0
    assert np.array_equal(a_inst[inside], whole[inside])
    assert (a_inst[~inside] >= len(ranges.start_ns)).all()


@pytest.mark.parametrize("case", CASES)
def test_the_unassociated_ops_come_after_the_ranges_ops(
    case: str, trace_of: Callable[[str], Case]
) -> None:
    trace, domains, mode = trace_of(case)
    ranges = range_pass(nvtx_of(trace, domains), mode)
    c = correlate(trace, domains, mode)
    assert_range_part(c, ranges)
    more = c.ops.iloc[len(ranges.ops) :]
    assert more["op_name"].str.startswith("unassociated_").all()
    assert (more["op_name"] == "unassociated_" + more["op_type"]).all()
    assert more["op_type"].is_monotonic_increasing  # sorted names, as np.unique gives them
    assert not c.ops.duplicated(OP_KEY).any()
    synthetic = c.inst["synthetic"].to_numpy()
    ops = c.ops["op_name"].to_numpy(object)[c.inst["op"].to_numpy()]
    assert all(str(x).startswith("unassociated_") for x in ops[synthetic])


def one_factorize(*tables: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The op table and codes of today's single ``pd.factorize`` over all the rows."""
    rows = pd.concat(tables, ignore_index=True)[OP_KEY]
    code, uniq = pd.factorize(pd.MultiIndex.from_frame(rows))
    return pd.DataFrame(list(uniq), columns=OP_KEY), code


def test_an_unassociated_op_that_is_a_range_op_keeps_the_range_ops_row() -> None:
    """TensorFlow names an op by its text (a detailed text with op ``cudaLaunchKernel`` and
    name ``unassociated_cudaLaunchKernel`` is op ``unassociated_cudaLaunchKernel`` of type
    ``cudaLaunchKernel``, direction ''): a cudaLaunchKernel call outside every range makes
    the same op (all 4 columns), which must stay the range's row (with the range's
    annotations); only the other unassociated ops are appended."""
    detailed = (
        '{"op":"cudaLaunchKernel","name":"unassociated_cudaLaunchKernel","attrs":{"T":"half"}}'
    )
    trace = make_trace(
        nvtx=[rng("MatMul: model/dense/MatMul", 0, 100), rng(detailed, 200, 300)],
        api=[
            call(10, 20, 1),  # in MatMul, launches gemm
            call(400, 410, 2),  # outside, launches nothing: unassociated_cudaLaunchKernel
            call(420, 430, 3, name="cudaMemcpy"),  # outside: unassociated_cudaMemcpy
            call(440, 450, 4),  # outside, launches relu: unassociated_relu
        ],
        gpu=[kernel(30, 60, 1, name="gemm"), kernel(460, 470, 4, name="relu")],
    )
    ranges = range_pass(trace.nvtx, "tensorflow2")
    c = correlate(trace, mode="tensorflow2")
    un_types = ["cudaLaunchKernel", "cudaMemcpy", "relu"]  # sorted, as np.unique gives them
    un_names = [f"unassociated_{t}" for t in un_types]
    un = pd.DataFrame(
        {"op_name": un_names, "op_type": un_types, "direction": "", "op_id": un_names}
    )
    want, code = one_factorize(ranges.ops, un)
    pd.testing.assert_frame_equal(c.ops[OP_KEY], want[OP_KEY], check_dtype=False)
    assert c.ops["op_name"].tolist() == [
        "model/dense/MatMul",
        "unassociated_cudaLaunchKernel",
        "unassociated_cudaMemcpy",
        "unassociated_relu",
    ]
    assert code.tolist() == [0, 1, 1, 2, 3]
    assert c.ops["data_type"].tolist() == ["", "half", "", ""]  # the range's annotations
    api_op = c.inst["op"].to_numpy()[c.api["inst"].to_numpy()]
    assert api_op.tolist() == [0, 1, 2, 3]  # the call outside shares the range's op row
    assert c.inst["synthetic"].to_numpy()[c.api["inst"].to_numpy()].tolist() == [
        False,
        True,
        True,
        True,
    ]


@pytest.mark.parametrize("seed", range(6))
def test_append_ops_window_by_window_is_one_factorize(seed: int) -> None:
    """Ops appended in parts (as windows will) get the rows and codes one factorize over the
    ranges' ops then every part gives: duplicates within a part, across parts and of the
    ranges' ops keep their first row."""
    r = np.random.default_rng(seed)

    def part(n: int) -> pd.DataFrame:
        name = r.choice(["a", "b", "c"], n).astype(object)
        direction = r.choice(["", "fprop"], n).astype(object)
        return pd.DataFrame(
            {
                "op_name": name,
                "op_type": r.choice(["", "x"], n).astype(object),
                "direction": direction,
                "op_id": np.where(direction != "", name + ":" + direction, name),
            }
        )

    texts = [rng("a", 0, 10), rng("c", 20, 30)] if seed % 2 else []  # ops a, c (type '')
    base = range_pass(make_trace(nvtx=texts).nvtx, None).ops
    ops, parts, codes = base, [], []
    for _ in range(4):
        p = part(int(r.integers(0, 6)))
        ops, code = append_ops(ops, p)
        parts.append(p)
        codes.append(code)
    want, want_code = one_factorize(base, *parts)
    pd.testing.assert_frame_equal(ops[OP_KEY], want, check_dtype=False)
    assert np.array_equal(np.concatenate(codes), want_code[len(base) :])
    pd.testing.assert_frame_equal(ops.iloc[: len(base)], base, check_dtype=len(base) > 0)
    assert not ops.duplicated(OP_KEY).any()
    assert ops["tc_eligible"].dtype == bool
    assert (ops["data_type"] == "").all()


def test_calls_outside_every_range_and_without_ranges_are_none() -> None:
    ranges = range_pass(make_trace().nvtx, None)
    tid, start, end = (np.array([5], np.int64),) * 3
    assert calls_in_ranges(ranges, tid, start, end).tolist() == [NONE]
    assert calls_in_ranges(ranges, tid[:0], start[:0], end[:0]).tolist() == []
