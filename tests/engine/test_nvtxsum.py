"""``nvtxsum``: every same-thread range containing a kernel's launch, checked by brute force.

NVIDIA's ``nsys stats -r nvtxkernsum`` counts a kernel for *every* NVTX range on the launching
thread that contains the launch call (tests/reports/test_against_nsys.py runs the real thing).
Here the same rule is written as a double loop and compared on random traces whose start/end
ranges cross each other, the case a parent-chain walk gets wrong.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.aggregate.nvtxsum import kernel_range_pairs, range_kernel_summary
from jlprof.engine.correlate.correlate import correlate

from .frames import call, gtid, kernel, make_trace, rng

DOMAINS = ("", "Lib")


def random_trace(seed: int, n_ranges: int = 60, n_calls: int = 150, crossing: bool = True):
    """Two threads x two domains; push/pop ranges properly nested, start/end ranges anywhere."""
    r = np.random.default_rng(seed)
    nvtx, api, gpu = [], [], []
    for tid in (1, 2):
        for dom in DOMAINS:
            t, stack = 0, []
            for _ in range(n_ranges // 4):  # push/pop: a stack per thread and domain
                t += int(r.integers(1, 40))
                if stack and r.random() < 0.45:
                    start, text = stack.pop()
                    nvtx.append(rng(text, start, t, tid=tid, domain=dom))
                else:
                    stack.append((t, f"p{tid}{dom}{len(nvtx)}_{len(stack)}"))
            for start, text in reversed(stack):
                t += 3
                nvtx.append(rng(text, start, t, tid=tid, domain=dom))
            if crossing:  # start/end ranges: arbitrary intervals, some ended on another thread
                for k in range(n_ranges // 8):
                    a = int(r.integers(0, t))
                    b = a + int(r.integers(0, t // 2 + 1))
                    other = gtid(1, 3 - tid) if k % 5 == 0 else -1
                    nvtx.append(
                        rng(
                            f"se{tid}{dom}{k}",
                            a,
                            b,
                            tid=tid,
                            domain=dom,
                            event_type=60,
                            end_tid=other,
                        )
                    )
    t_max = max(x["end_ns"] for x in nvtx)
    for i in range(n_calls):
        tid = int(r.integers(1, 4))  # thread 3 has no ranges at all
        a = int(r.integers(0, t_max))
        b = a + int(r.integers(0, 6))
        api.append(call(a, b, i, tid=tid))
        for j in range(int(r.integers(0, 3))):  # 0..2 kernels per call (a graph launch)
            gpu.append(kernel(b + 5 + j, b + 6 + j + int(r.integers(0, 50)), i, name=f"k{i % 7}"))
    gpu.append(kernel(5, 9, 10_000, name="orphan"))  # no call with this correlation id
    return make_trace(gpu=gpu, api=api, nvtx=nvtx)


def brute_pairs(trace) -> set[tuple[int, int]]:
    """(kernel row, range row) with the range on the call's thread containing the call."""
    api, nv, g = trace.api, trace.nvtx, trace.gpu
    by_corr = {int(c): i for i, c in enumerate(api["correlation_id"])}
    a_s, a_e, a_t = (api[c].to_numpy() for c in ("start_ns", "end_ns", "global_tid"))
    r_s, r_e, r_t, r_et = (
        nv[c].to_numpy() for c in ("start_ns", "end_ns", "global_tid", "end_global_tid")
    )
    nestable = (r_et < 0) | (r_et == r_t)
    out = set()
    for k, (corr, kind) in enumerate(zip(g["correlation_id"], g["kind"], strict=True)):
        a = by_corr.get(int(corr))
        if a is None or kind != "kernel":
            continue
        inside = nestable & (r_t == a_t[a]) & (r_s <= a_s[a]) & (a_e[a] <= r_e)
        out.update((k, int(j)) for j in np.flatnonzero(inside))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_pairs_match_brute_force_with_crossing_ranges(seed: int) -> None:
    trace = random_trace(seed)
    k, r = kernel_range_pairs(correlate(trace))
    got = list(zip(k.tolist(), r.tolist(), strict=True))
    assert len(got) == len(set(got)), "a (kernel, range) pair was listed twice"
    assert set(got) == brute_pairs(trace)


def test_pairs_match_brute_force_when_properly_nested() -> None:
    trace = random_trace(99, n_ranges=120, crossing=False)
    k, r = kernel_range_pairs(correlate(trace))
    assert set(zip(k.tolist(), r.tolist(), strict=True)) == brute_pairs(trace)


def test_crossing_start_end_ranges_both_count() -> None:
    # A=[0,100] and B=[50,150] cross; a launch at 60 lies in both, one at 120 only in B
    trace = make_trace(
        gpu=[kernel(200, 210, 1, name="k1"), kernel(220, 240, 2, name="k2")],
        api=[call(60, 70, 1), call(110, 120, 2)],
        nvtx=[rng("A", 0, 100, event_type=60), rng("B", 50, 150, event_type=60)],
    )
    s = range_kernel_summary(correlate(trace))
    rows = {(x["NVTX Range"], x["Kernel Name"]): x["Total Time (ns)"] for _, x in s.iterrows()}
    assert rows == {("A", "k1"): 10, ("B", "k1"): 10, ("B", "k2"): 20}


def test_summary_columns_match_a_pandas_reference() -> None:
    trace = random_trace(5, n_calls=300)
    c = correlate(trace)
    got = range_kernel_summary(c)
    pairs = sorted(brute_pairs(trace))
    nv, g = trace.nvtx, trace.gpu
    rows = []
    for k, j in pairs:
        if nv.at[j, "end_global_tid"] >= 0:  # nvtxkernsum leaves out every range with an end tid
            continue
        dom, text = nv.at[j, "domain"], nv.at[j, "text"]
        tid = int(nv.at[j, "global_tid"])
        rows.append(
            {
                "NVTX Range": f"{dom}:{text}" if dom else text,
                "Style": "PushPop" if nv.at[j, "event_type"] == 59 else "StartEnd",
                "PID": (tid >> 24) & 0xFFFFFF,
                "TID": tid & 0xFFFFFF,
                "range": j,
                "dur": int(g.at[k, "end_ns"] - g.at[k, "start_ns"]),
                "Kernel Name": g.at[k, "long_name"],
            }
        )
    ref = (
        pd.DataFrame(rows)
        .groupby(["NVTX Range", "Style", "PID", "TID", "Kernel Name"])
        .agg(
            nvtx=("range", "nunique"),
            kern=("dur", "size"),
            total=("dur", "sum"),
            avg=("dur", "mean"),
            med=("dur", "median"),
            mn=("dur", "min"),
            mx=("dur", "max"),
            sd=("dur", lambda x: float(np.std(x, ddof=1)) if len(x) > 1 else 0.0),
        )
    )
    mine = got.set_index(["NVTX Range", "Style", "PID", "TID", "Kernel Name"]).sort_index()
    assert len(mine) == len(ref) > 20
    ref = ref.loc[mine.index]
    assert mine["NVTX Inst"].tolist() == ref["nvtx"].tolist()
    assert mine["Kern Inst"].tolist() == ref["kern"].tolist()
    assert mine["Total Time (ns)"].tolist() == ref["total"].tolist()
    assert mine["Min (ns)"].tolist() == ref["mn"].tolist()
    assert mine["Max (ns)"].tolist() == ref["mx"].tolist()
    for a, b in (("Avg (ns)", "avg"), ("Med (ns)", "med"), ("StdDev (ns)", "sd")):
        np.testing.assert_allclose(mine[a].to_numpy(float), ref[b].to_numpy(float), atol=1e-9)
    # nsys' order: range name, PID, TID, then total time descending
    keys = list(
        zip(got["NVTX Range"], got["PID"], got["TID"], -got["Total Time (ns)"], strict=True)
    )
    assert keys == sorted(keys)


def test_same_label_from_two_domains_is_one_row() -> None:
    # nsys groups by the label string: domain "a" + text "b" and text "a:b" are one range name
    trace = make_trace(
        gpu=[kernel(100, 110, 1), kernel(120, 140, 2)],
        api=[call(10, 11, 1), call(30, 31, 2)],
        nvtx=[rng("b", 0, 20, domain="a"), rng("a:b", 25, 40)],
    )
    s = range_kernel_summary(correlate(trace))
    assert s[["NVTX Range", "NVTX Inst", "Kern Inst", "Total Time (ns)"]].values.tolist() == [
        ["a:b", 2, 2, 30]
    ]
