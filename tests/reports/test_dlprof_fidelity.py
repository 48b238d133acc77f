"""Issue 43 (items 1-7): numbers a DLProf user would question, on the real traces, each checked
against the raw export (SQL) or the guide's definition worked by hand here."""

from __future__ import annotations

import ast
import itertools
import json
import sqlite3
from collections import defaultdict

import numpy as np

import jlprof
from jlprof.engine.correlate.ops import parse_texts
from jlprof.profile import Profile
from tests.fixtures.scenarios import real_traces

TRACES = {p.parent.name: p for p in real_traces()}
MMAGIC = "mmagic-pyprof-a100"
FSDP = "nsysai-fastvideo-wan-train-fsdp-2gpu"
_loaded: dict[str, Profile] = {}


def prof(name: str) -> Profile:
    if name not in _loaded:
        _loaded[name] = jlprof.load(TRACES[name])
    return _loaded[name]


def sql(name: str, query: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{TRACES[name]}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def union_per_thread(rows: list[tuple[int, int, int]]) -> int:
    """sum over threads of the length of the union of (thread, start, end) intervals."""
    by: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for tid, s, e in rows:
        by[tid].append((s, e))
    total = 0
    for iv in by.values():
        iv.sort()
        cur_s, cur_e = iv[0]
        for s, e in iv[1:]:
            if s > cur_e:
                total += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        total += cur_e - cur_s
    return total


NVTX_TEXT = "coalesce(n.text, s.value)"
NVTX_JOIN = "NVTX_EVENTS n left join StringIds s on s.id = n.textId"


# ---- item 1: nested op time is not summed twice ----------------------------------------------
def test_all_ops_cpu_time_counts_nested_ranges_once() -> None:
    """mmagic's pyprof markers nest 1000 deep on one thread: All Op CPU time is the union of
    the thread's ranges plus the unassociated API calls (outside every range), never more
    than the run's wall clock (main: 5,230,567,094,211 ns against 7,516,757,685)."""
    p = prof(MMAGIC)
    ranges = sql(MMAGIC, "select globalTid, start, end from NVTX_EVENTS where end is not null")
    calls = sql(
        MMAGIC, "select globalTid, start, end from CUPTI_ACTIVITY_KIND_RUNTIME order by start"
    )
    by_tid: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for tid, s, e in ranges:
        by_tid[tid].append((s, e))
    outside = sum(
        e - s for tid, s, e in calls if not any(a <= s and e <= b for a, b in by_tid[tid])
    )
    expected = union_per_thread(ranges) + outside
    s = p.report("summary")
    got = s[(s["Table"] == "All Ops") & (s["Row Name"] == "All Op")]
    cpu = int(got[got["Column"] == "CPU Time (ns)"]["Value"].iloc[0])
    wall = int(s[s["Row Name"] == "Wall Clock Time (ns)"]["Value"].iloc[0])
    assert cpu == expected
    assert cpu <= wall


def test_op_type_cpu_time_counts_nested_instances_once() -> None:
    """The 702 ``torch.__getattr__`` markers of mmagic nest in each other: the getattr type's
    CPU time is their union (main: their sum, 2,612,... s)."""
    p = prof(MMAGIC)
    rows = sql(
        MMAGIC,
        "select globalTid, start, end from NVTX_EVENTS "
        "where text like '%''op'': ''__getattr__''%' and end is not null",
    )
    assert len(rows) == 702
    t = p.report("op_type").set_index("Op Name")
    assert int(t.loc["getattr", "No. Calls"]) == 702
    assert int(t.loc["getattr", "Total CPU Time (ns)"]) == union_per_thread(rows)


# ---- item 6: one rule for a group node's CPU time --------------------------------------------
def test_group_node_cpu_time_sums_the_processes() -> None:
    """fsdp runs AllToAll4D on two ranks at once: the group node's CPU time is each thread's
    union, summed over the threads (guide ch. 9: totals summed per GPU), the same as the
    detail and op type reports give (main: the union across the processes, 20,449,886)."""
    p = prof(FSDP)
    rows = sql(
        FSDP,
        f"select n.globalTid, n.start, n.end from {NVTX_JOIN} "
        f"where {NVTX_TEXT} like 'AllToAll4D,%' and n.end is not null",
    )
    assert len({r[0] for r in rows}) == 2
    expected = union_per_thread(rows)
    g = p.report("group_node").set_index("Name")
    d = p.report("detail")
    d = d[d["Op Name"] == "AllToAll4D"]
    t = p.report("op_type").set_index("Op Name")
    assert int(g.loc["/AllToAll4D", "Total CPU Time (ns)"]) == expected
    assert int(d["Total CPU Time (ns)"].sum()) == expected
    assert int(t.loc["AllToAll4D", "Total CPU Time (ns)"]) == expected


# ---- item 7: one definition of an op's GPU time ----------------------------------------------
def _gpu_time_by_innermost_range(name: str, like: str) -> int:
    """GPU work (kernels, memcpys, memsets) launched by runtime calls whose innermost enclosing
    NVTX range on their thread has a text matching ``like``: summed durations (raw SQL plus a
    loop here; the guide's exclusive GPU time of those ranges)."""
    ranges = sql(name, "select globalTid, start, end, text from NVTX_EVENTS where end not null")
    calls = sql(
        name, "select globalTid, start, end, correlationId from CUPTI_ACTIVITY_KIND_RUNTIME"
    )
    gpu: dict[int, int] = defaultdict(int)
    for table in ("KERNEL", "MEMCPY", "MEMSET"):
        for corr, dur in sql(
            name, f"select correlationId, end - start from CUPTI_ACTIVITY_KIND_{table}"
        ):
            gpu[corr] += dur
    total = 0
    for tid, s, e, corr in calls:
        inner = [(b - a, text) for t, a, b, text in ranges if t == tid and a <= s and e <= b]
        if inner and gpu.get(corr) and like in min(inner)[1]:
            total += gpu[corr]
    return total


def test_tensor_report_gpu_time_is_the_detail_reports() -> None:
    """mmagic's conv2d ops ran memsets beside their kernels: the tensor report's Total GPU
    Time counts them as the detail report does (main: conv2d:74 1,033,778 vs 1,036,146)."""
    p = prof(MMAGIC)
    t = p.report("tensor").set_index("Op ID")
    d = p.report("detail").set_index("Op ID")
    conv = t[t["Op Type"] == "conv2d"]
    assert len(conv) == 3
    expected = _gpu_time_by_innermost_range(MMAGIC, "'op': 'conv2d'")
    assert int(conv["Total GPU Time"].sum()) == expected
    both = t.index.intersection(d.index)
    assert len(both) == len(t)
    assert (t.loc[both, "Total GPU Time"] == d.loc[both, "Total GPU Time (ns)"]).all()
    assert (t["Non-TC GPU Time"] == t["Total GPU Time"] - t["TC GPU Time"]).all()


# ---- item 2: "eligible but not using" is judged where the kernels are attributed -------------
def _ops_launching_gpu_work(name: str) -> set[str]:
    """Names (the text before ``, seq``/``, op_id``) of the ranges that get GPU work: per
    runtime call that launched some, its innermost NVTX range on its thread, then up through
    the unbroken chain of enclosing emit_nvtx op calls (``op_id =`` texts) to the outermost,
    which the work goes to (docs/reports.md, emit_nvtx). Raw SQL plus numpy here."""
    ranges = sql(
        name,
        f"select n.globalTid, n.start, n.end, {NVTX_TEXT} from {NVTX_JOIN} where n.end is not null",
    )
    work = {
        r[0]
        for t in ("KERNEL", "MEMCPY", "MEMSET")
        for r in sql(name, f"select distinct correlationId from CUPTI_ACTIVITY_KIND_{t}")
    }
    calls = sql(
        name, "select globalTid, start, end, correlationId from CUPTI_ACTIVITY_KIND_RUNTIME"
    )
    by_tid: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for tid, s, e, text in ranges:
        by_tid[tid].append((s, e, text))
    arrays = {
        tid: (np.array([r[0] for r in rs]), np.array([r[1] for r in rs]), [r[2] for r in rs])
        for tid, rs in by_tid.items()
    }
    out = set()
    for tid, s, e, corr in calls:
        if corr not in work or tid not in arrays:
            continue
        starts, ends, texts = arrays[tid]
        around = np.flatnonzero((starts <= s) & (ends >= e))
        if not len(around):
            continue
        chain = [texts[i] for i in around[np.argsort(ends[around] - starts[around])]]
        top = chain[0]
        for text in chain[1:]:
            if "op_id = " not in top or "op_id = " not in text:
                break
            top = text
        out.add(top.split(",")[0])
    return out


def test_eligible_not_using_counts_only_ops_that_ran_gpu_work() -> None:
    """fsdp's aten::addmm is TC-eligible but its GEMMs are launched in aten::linear, which uses
    Tensor Cores: it is not "eligible but not using" (main: 2 ops, 0 ns of GPU time)."""
    p = prof(FSDP)
    launching = _ops_launching_gpu_work(FSDP)
    assert "aten::linear" in launching and "aten::addmm" not in launching
    d = p.report("detail")
    by_hand = d[d["TC Eligibility"] & ~d["Using TC"] & d["Op Name"].isin(launching)]
    s = p.report("summary")
    row = s[(s["Table"] == "All Ops") & (s["Row Name"] == "Op eligible for TC but not using")]
    got = dict(zip(row["Column"], row["Value"], strict=True))
    assert int(got["# Ops"]) == len(by_hand) == 0
    assert int(got["GPU Time (ns)"]) == 0
    assert int(got["CPU Time (ns)"]) == 0


# ---- item 3: Bad Iteration Range, robust --------------------------------------------------
def _bad_range(p: Profile) -> list[dict]:
    e = p.report("expert_systems")
    return [
        {"problem": r.Problem, "evidence": json.loads(r.Evidence), "rec": r.Recommendation}
        for r in e[e["Detector"] == "Bad Iteration Range Detector"].itertuples()
    ]


def _robust(d: np.ndarray) -> tuple[float, float]:
    """(median, median + 3 scaled MADs) worked by hand (docs/analyses.md)."""
    med = float(np.median(d))
    return med, med + 3 * 1.4826 * float(np.median(np.abs(d - med)))


def test_bad_iteration_range_is_quiet_on_a_steady_run() -> None:
    """mmagic keyed on ``Tensor.__mul__ (multiscale_arch.py:105)``: five complete iterations
    within 7 % of their median (CV 3 %), no material outlier: no finding (main: "a lot of
    variation" and a recommended range 1..5 holding the two iterations it flagged)."""
    key = "Tensor.__mul__ (multiscale_arch.py:105)"
    ends = [
        e
        for (e,) in sql(
            MMAGIC,
            "select m.end from NVTX_EVENTS m join NVTX_EVENTS t on t.rowid = m.rowid - 1 "
            "where m.text like '%''op'': ''__mul__''%' "
            "and t.text like '%multiscale_arch.py:105''%' order by m.start",
        )
    ]
    assert len(ends) == 6
    d = np.diff(np.array(ends, dtype=np.int64)).astype(float)
    med, thr = _robust(d)
    assert (d.max() - med) / med < 0.10 and d.std() / d.mean() < 0.05  # steady by hand
    assert (d > thr).sum() == 2  # above median + 3 MADs, yet by under 7 %: not material
    assert 1.4826 * np.median(np.abs(d - med)) / med < 0.15  # robust CV
    p = jlprof.load(TRACES[MMAGIC], key_node=key)
    assert p.iterations.durations_ns()[1:-1].tolist() == d.astype(np.int64).tolist()
    assert _bad_range(p) == []


def test_bad_iteration_range_never_recommends_an_outlier() -> None:
    """fsdp keyed on ``aten::gelu`` (two ranks; the split after iteration n is the later rank's
    n-th end, guide ch. 9): the slow iterations are the robust outliers, and the recommended
    range is the longest run of complete iterations within 10 % of the median without one."""
    rows = sql(
        FSDP,
        f"select n.globalTid, n.end from {NVTX_JOIN} "
        f"where {NVTX_TEXT} like 'aten::gelu,%' and n.end is not null order by n.start",
    )
    per: dict[int, list[int]] = defaultdict(list)
    for tid, end in rows:
        per[tid].append(end)
    assert len(per) == 2 and len({len(v) for v in per.values()}) == 1
    split = np.max(np.array(list(per.values()), dtype=np.int64), axis=0)
    d = np.diff(split).astype(float)  # complete iterations 1..n-1
    med, thr = _robust(d)
    out = d > thr
    ok = ~out & (np.abs(d - med) <= 0.10 * med)
    best, run = (0, -1), 0
    for i in range(len(d)):
        run = run + 1 if ok[i] else 0
        if run > best[1] - best[0] + 1:
            best = (i - run + 2, i + 1)  # iteration numbers: complete ones start at 1
    p = jlprof.load(TRACES[FSDP], key_node="aten::gelu")
    found = _bad_range(p)
    assert len(found) == 1
    outliers = (np.flatnonzero(out) + 1).tolist()
    assert found[0]["evidence"]["outliers"] == outliers
    assert f"--iter_start={best[0]} --iter_stop={best[1]}" in found[0]["rec"]
    assert not set(range(best[0], best[1] + 1)) & set(outliers)
    assert f"{len(outliers)} outlier iteration(s)" in found[0]["problem"]


# ---- item 5: No Iteration suggests key nodes that partition the GPU work ------------------
def _work_at_op_start(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(time, length) of every GPU row, placed where the cube counts an op's GPU time: at the
    start of the op range that gets it — its runtime call's innermost NVTX range on the
    thread, up through an unbroken chain of enclosing pyprof op markers (``'op':`` texts)
    to the outermost — else at the call's start, else at its own (raw SQL plus numpy)."""
    ranges = sql(name, "select globalTid, start, end, text from NVTX_EVENTS where end not null")
    by_tid: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for tid, s, e, text in ranges:
        by_tid[tid].append((s, e, text))
    arrays = {
        tid: (np.array([r[0] for r in rs]), np.array([r[1] for r in rs]), [r[2] for r in rs])
        for tid, rs in by_tid.items()
    }
    rows = [
        r
        for t in ("KERNEL", "MEMCPY", "MEMSET")
        for r in sql(
            name,
            "select r.globalTid, r.start, r.end, g.start, g.end - g.start "
            f"from CUPTI_ACTIVITY_KIND_{t} g left join CUPTI_ACTIVITY_KIND_RUNTIME r "
            "on r.correlationId = g.correlationId",
        )
    ]
    at, w = [], []
    for tid, s, e, g_start, dur in rows:
        t = g_start if s is None else s
        if s is not None and tid in arrays:
            starts, ends, texts = arrays[tid]
            around = np.flatnonzero((starts <= s) & (ends >= e))
            if len(around):
                chain = around[np.argsort(ends[around] - starts[around], kind="stable")]
                top = chain[0]
                for i in chain[1:]:
                    if "'op':" not in texts[top] or "'op':" not in texts[i]:
                        break
                    top = i
                t = int(starts[top])
        at.append(t)
        w.append(dur)
    return np.array(at, dtype=np.int64), np.array(w, dtype=np.int64)


def test_no_iteration_suggests_a_key_node_that_partitions_the_gpu_work() -> None:
    """mmagic without a key node: ``torch.__getattr__ (multiscale_arch.py:148)`` (702 pyprof
    markers, each open until the end: nested in each other, main's first suggestion) splits
    nothing. The first suggestion is not nested, and its coverage of the GPU work and the
    spread of that work over its complete iterations are as worked by hand from SQL."""
    p = prof(MMAGIC)
    getattr_ranges = sql(
        MMAGIC,
        "select start, end from NVTX_EVENTS where text like '%''op'': ''__getattr__''%' "
        "order by start",
    )
    nested = sum(
        1 for i, (s, _) in enumerate(getattr_ranges) if any(e > s for _, e in getattr_ranges[:i])
    )
    assert nested == 701  # all but the first start inside an earlier one
    sug = p.suggest_key_nodes(3)
    assert not sug["op_name"].str.contains("__getattr__").any()
    top = sug.iloc[0]
    assert top["op_name"] == "Tensor.__mul__ (multiscale_arch.py:79)"
    ends = np.array(
        [
            e
            for (e,) in sql(
                MMAGIC,
                "select m.end from NVTX_EVENTS m join NVTX_EVENTS t on t.rowid = m.rowid - 1 "
                "where m.text like '%''op'': ''__mul__''%' "
                "and t.text like '%multiscale_arch.py:79''%' order by m.end",
            )
        ],
        dtype=np.int64,
    )
    assert len(ends) == int(top["calls"]) == 6
    at, w = _work_at_op_start(MMAGIC)
    work = np.array([w[(at >= a) & (at < b)].sum() for a, b in itertools.pairwise(ends)])
    coverage = work.sum() / w.sum()
    assert top["coverage"] == round(float(coverage), 3)
    assert top["work_cv"] == round(float(work.std() / work.mean()), 3)
    d = np.diff(ends)
    assert top["period_cv"] == round(float(d.std() / d.mean()), 3)
    es = p.report("expert_systems")
    rec = es[es["Detector"] == "No Iteration Detector"]["Recommendation"].iloc[0]
    assert f"--key_node={top['op_name']}" in rec


# ---- item 4: Parameters from what the markers record ------------------------------------
def test_iteration_report_parameters_are_the_markers_arguments() -> None:
    """mmagic's pyprof markers record every argument of ``conv2d`` (three tensors, then
    stride, padding, dilation, groups): the iteration report's Parameters of its kernels is
    that list, tensors as dtype[shape] (main: blank). Nothing records outputs."""
    p = prof(MMAGIC)
    (text,) = sql(
        MMAGIC,
        "select m.text from NVTX_EVENTS m join NVTX_EVENTS t on t.rowid = m.rowid - 1 "
        "where m.text like '%''op'': ''conv2d''%' "
        "and t.text like '%multiscale_arch.py:74''%' order by m.start limit 1",
    )[0]
    args = ast.literal_eval(text)["args"]
    by_hand = ", ".join(
        f"{a['dtype']}[{','.join(map(str, a['shape']))}]"
        if a["type"] == "tensor"
        else str(a["value"])
        for a in args
    )
    assert (
        by_hand
        == "float32[1,128,16,16], float32[144,128,7,7], float32[144], (1, 1), (3, 3), (1, 1), 1"
    )
    it = p.report("iteration")
    rows = it[it["Op Name"] == "torch.nn.functional.conv2d (multiscale_arch.py:74)"]
    assert len(rows) and set(rows["Parameters"].astype(str)) == {by_hand}
    assert (it["Parameters"].astype(str) != "").all()  # every row of mmagic has a marker op
    assert (it["Output Shapes"].astype(str) == "").all()


def test_parameters_of_every_marker_format() -> None:
    """emit_nvtx ``sizes`` and jlprof.torch input shapes record each argument's shape only;
    keyword arguments of a pyprof marker keep their name; plain ranges record nothing."""
    texts = [
        "aten::addmm, seq = 12, sizes = [[64], [8, 128], [128, 64], [], []]",
        "/Net/conv1/convolution [aten::convolution|fprop|float32|[[8,3,16,16],[4,3,3,3],[4]]]",
        "{'mod': 'torch', 'op': 'cat', 'args': [{'name': '', 'type': 'tensor', "
        "'shape': (2, 3), 'dtype': 'float16'}, {'name': 'dim', 'type': 'int', 'value': 1}]}",
        "aten::mul, seq = 45, op_id = 9",
        "train_step",
    ]
    got = parse_texts(texts)["parameters"].tolist()
    assert got == [
        "[64], [8,128], [128,64], [], []",
        "[8,3,16,16], [4,3,3,3], [4]",
        "float16[2,3], dim=1",
        "",
        "",
    ]
