"""Correlation: GPU work -> CUDA API call -> NVTX op instance (DESIGN.md rules 1-4).

Output is a :class:`Correlated` with explicit index columns (``-1`` = none):

=========  ===========================================================================
frame      correlation columns
=========  ===========================================================================
``inst``   one row per op instance: NVTX ranges, then synthetic ``unassociated_*`` ones;
           ``op`` int32 (row of ``ops``), ``parent`` int32 (row of ``inst``), ``path``
           int32 (row of ``paths``), ``cpu_ns`` int32* (range duration, or the share of
           an API call for synthetic ones), ``event_type`` int32* (0 for synthetic ones),
           ``instance_no`` int32* (``Batch 17`` -> 17, else -1); ``start_ns``, ``end_ns``,
           ``global_tid`` int64
``api``    ``inst`` int32: innermost enclosing push/pop range on the same thread, else
           the synthetic instance it created (a call's process is ``global_tid &
           GLOBAL_PID_MASK``: not stored, 8 bytes a call saved)
``gpu``    ``api`` int32: launching call (same correlationId **and** process); ``inst``
           int32: op instance (the call's, else a synthetic one); ``api_share_ns``
           int32*: the call's time split over the work it launched (graph launches share
           one call); ``isolated``: overlaps no other GPU work (flattening can sum it:
           :func:`intervals.isolated`)
=========  ===========================================================================

int32: a row index (as is :attr:`Correlated.range_lane`), int32 while the table it points
into has fewer than 2**31 rows, else int64. int32*: int32 when every value fits, else
int64 (as in trace.py). 4 bytes a row each saved (~0.2 GB at 10M kernels); read them as
int64 (``to_numpy(np.int64)`` or ``astype`` after a gather) where they enter a sum,
product or difference. Times and global ids stay int64.

Everything is sort + searchsorted; the only Python loops run over nesting depth and
NVTX domains, never over events.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from jlprof.engine import intervals, schema
from jlprof.engine.framework_names import TENSORFLOW
from jlprof.engine.narrow import index_dtype, narrow
from jlprof.engine.ops import abs_path, parse_texts, unassociated_name
from jlprof.engine.tensorcore import kernel_uses_tc, op_type_tc_eligible
from jlprof.engine.torch_ops import label_names, range_labels, tops
from jlprof.engine.trace import GLOBAL_PID_MASK, Trace
from jlprof.outputs import InThread

NONE = -1
MAX_PATH_CHARS = 1024


def _rows(x: np.ndarray, n: int) -> np.ndarray:
    """``x``, row indices into a table of ``n`` rows, in
    :func:`~jlprof.engine.narrow.index_dtype` (no copy when it already is)."""
    return np.asarray(x).astype(index_dtype(n), copy=False)


@dataclass
class Correlated:
    """Correlated frames; see the module docstring for the index columns and their dtypes."""

    trace: Trace
    inst: pd.DataFrame
    ops: pd.DataFrame
    paths: pd.DataFrame
    api: pd.DataFrame
    gpu: pd.DataFrame
    t_first_ns: int
    t_last_ns: int
    nvtx: pd.DataFrame | None = None  # the NVTX ranges used (after --domains), rows = inst 0..n-1
    range_lane: np.ndarray | None = None  # int32 nesting lane (thread x domain) per range, -1 none
    lane_tid: np.ndarray | None = None
    lane_dom: np.ndarray | None = None
    markers: frozenset[str] = frozenset()  # PyTorch marker formats seen: emit_nvtx, pyprof, jlprof


class _Keys:
    """Composite (lane, time) keys as one sortable int64, so searchsorted works per lane."""

    def __init__(self, nlanes: int, *times: np.ndarray) -> None:
        allt = [t for t in times if len(t)]
        self.t0 = int(min(t.min() for t in allt)) if allt else 0
        t1 = int(max(t.max() for t in allt)) if allt else 0
        self.span = t1 - self.t0 + 2
        if (nlanes + 1) * self.span >= 2**62:  # pragma: no cover - sessions of months
            raise OverflowError("time span too large for composite keys")

    def __call__(self, lane: np.ndarray, t: np.ndarray) -> np.ndarray:
        rel = np.clip(np.asarray(t, np.int64) - self.t0, -1, self.span - 2) + 1
        return np.asarray(lane, np.int64) * self.span + rel


def _range_order(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Ranges in (lane, start, -end) order: containers before what they contain.

    Equal to ``np.lexsort((-end, start, lane))`` (ties keep row order) but one stable sort
    of a (lane, start) key, fast on ranges that arrive in time order; only rows that share
    a lane and start are then sorted by ``-end``.
    """
    if len(lane) == 0:
        return np.zeros(0, dtype=np.int64)
    keys = _Keys(int(lane.max()) + 2, start)
    key = keys(lane + 1, start)  # lanes may be NONE: shift them to >= 0
    order = np.argsort(key, kind="stable")
    k = key[order]
    tie = np.flatnonzero(k[1:] == k[:-1])
    if len(tie):  # rows sharing (lane, start): longest first, then row order (stable)
        pos = np.union1d(tie, tie + 1)
        rows = order[pos]
        order[pos] = rows[np.lexsort((-end[rows], k[pos]))]
    return order


def _nest(
    lane: np.ndarray, start: np.ndarray, end: np.ndarray, order: np.ndarray | None = None
) -> np.ndarray:
    """Parent (innermost containing range in the same lane) of every range; -1 for roots.

    In the order (lane, start, -end) the innermost container of a range is the nearest
    earlier range with ``end >=`` its end (earlier ranges start no later). That is the
    "previous greater-or-equal" pointer, found by pointer jumping: every range skips over
    ranges known to end before it. Unlike a stack walk this stays right when start/end
    ranges cross (A=[0,100], B=[50,150]: B has no parent, C=[110,120] gets B).
    Most ranges need no jump: the range just before contains them (first children), or
    none before in their lane ends as late (roots, found from the running maximum end;
    without that their chains through all earlier roots took 20+ passes at 10M ranges).
    """
    n = len(lane)
    parent = np.full(n, NONE, dtype=np.int64)
    if n == 0:
        return parent
    order = _range_order(lane, start, end) if order is None else order
    L, E = lane[order], end[order]
    same_lane = L[1:] == L[:-1]
    # running maximum end within each lane: one cummax of (lane run, end) keys
    keys = _Keys(int(np.count_nonzero(~same_lane)) + 1, E)
    run = np.zeros(n, dtype=np.int64)
    np.cumsum(~same_lane, out=run[1:])
    run_max = keys(run, E)
    del run
    np.maximum.accumulate(run_max, out=run_max)
    after_all = run_max[1:] > run_max[:-1]  # ends after every earlier range: a root
    del run_max
    up = same_lane & (E[:-1] >= E[1:])  # the previous range contains it
    idx = index_dtype(n)
    cand = np.full(n, NONE, dtype=idx)
    cand[1:][up] = np.flatnonzero(up).astype(idx)
    # invariant: every position strictly between cand[p] and p ends before E[p]; the
    # others have a container, so their jumps never reach NONE
    act = np.flatnonzero(same_lane & ~up & ~after_all).astype(idx) + 1
    cand[act] = act - 1
    while len(act):
        act = act[E[cand[act]] < E[act]]
        cand[act] = cand[cand[act]]
    parent[order] = np.where(cand >= 0, order[np.maximum(cand, 0)], NONE)
    return parent


def _innermost(
    lane: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    parent: np.ndarray,
    q_lane: np.ndarray,
    q_start: np.ndarray,
    q_end: np.ndarray,
    order: np.ndarray | None = None,
) -> np.ndarray:
    """Innermost range of lane ``q_lane`` containing each query interval; -1 when none.

    The candidate is the latest-starting range of the lane (sorted position ``pos``); it is
    checked on the sorted keys and ends, read in the queries' (time) order, and only the
    few that end too early climb their parents.
    """
    if len(lane) == 0 or len(q_lane) == 0:
        return np.full(len(q_lane), NONE, dtype=np.int64)
    order = _range_order(lane, start, end) if order is None else order
    keys = _Keys(int(max(lane.max(), q_lane.max())) + 1, start, end, q_start, q_end)
    skey = keys(lane[order], start[order])
    q_lane = np.asarray(q_lane, np.int64)
    pos = np.searchsorted(skey, keys(np.maximum(q_lane, 0), q_start), side="right")
    pos -= 1
    ok = (q_lane >= 0) & (pos >= 0)
    np.maximum(pos, 0, out=pos)
    ok &= skey[pos] >= q_lane * keys.span  # found a range of its own lane (keys lane-major)
    del skey
    out = np.where(ok, order[pos], NONE)
    ok &= end[order][pos] < q_end  # it ends too early: climb to the first that encloses it
    del pos
    act = np.flatnonzero(ok)
    while len(act):  # parents start no later and end no earlier
        out[act] = parent[out[act]]
        act = act[out[act] >= 0]
        act = act[end[out[act]] < q_end[act]]
    return out


def _paths(
    op: np.ndarray, op_names: np.ndarray, op_abs: np.ndarray, parent: np.ndarray
) -> tuple[np.ndarray, pd.DataFrame]:
    """Hierarchy path code per instance and the path table (parent, name, path, depth).

    A ``/``-scoped op name is absolute; otherwise the path is the parent's path plus the
    name. Work runs level by level on unique (parent path, op) pairs, so deep nesting
    (pyprof traces nest >1000 levels) and millions of instances both stay cheap.
    """
    n = len(parent)
    code = np.full(n, NONE, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    act = np.flatnonzero(parent >= 0)  # climb only from the rows still below a root
    cur = parent[act]
    while len(act):
        depth[act] += 1
        cur = parent[cur]
        keep = cur >= 0
        act, cur = act[keep], cur[keep]
    keys: dict[tuple[int, str], int] = {}
    t_parent: list[int] = []
    t_name: list[str] = []
    t_path: list[str] = []

    def intern(par: int, name: str) -> int:
        k = keys.get((par, name))
        if k is None:
            k = keys[(par, name)] = len(t_path)
            path = (t_path[par] if par >= 0 else "") + "/" + name
            if len(path) > MAX_PATH_CHARS:  # pyprof traces nest 1000+ levels of 1 kB texts
                path = "…" + path[-(MAX_PATH_CHARS - 1) :]
            t_parent.append(par)
            t_name.append(name)
            t_path.append(path)
        return k

    small = n == 0 or int(depth.max()) < 2**15  # a 16-bit stable sort is a radix sort
    order = np.argsort(depth.astype(np.int16) if small else depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max()) + 2 if n else 0))
    nops = len(op_names) + 1
    for d in range(len(bounds) - 1):
        rows = order[bounds[d] : bounds[d + 1]]
        par = np.where(parent[rows] >= 0, code[np.maximum(parent[rows], 0)], NONE)
        pair = (par + 1) * nops + op[rows]
        inv, uniq = pd.factorize(pair, sort=True)  # np.unique's result, hashed: few pairs
        codes = np.empty(len(uniq), dtype=np.int64)
        for i, u in enumerate(uniq.tolist()):  # unique pairs only
            p, o = divmod(u, nops)
            if op_abs[o]:  # absolute '/'-scoped name: one node per level of its path
                k = NONE
                for part in str(op_abs[o]).strip("/").split("/"):
                    k = intern(k, part)
                codes[i] = k
            else:
                codes[i] = intern(p - 1, str(op_names[o]).replace("/", "|"))
        code[rows] = codes[inv]
    table = pd.DataFrame(
        {
            "parent": np.asarray(t_parent, dtype=np.int64),
            "name": pd.Series(t_name, dtype=object),
            "path": pd.Series(t_path, dtype=object),
        }
    )
    depth_of = np.zeros(len(t_parent), dtype=np.int64)
    par_arr = table["parent"].to_numpy()
    for i in range(len(t_parent)):  # parents are always interned before children
        depth_of[i] = depth_of[par_arr[i]] + 1 if par_arr[i] >= 0 else 0
    table["depth"] = depth_of
    return _rows(code, len(table)), table


def _pick(values: np.ndarray, idx: np.ndarray, fill) -> np.ndarray:
    """``values[idx]`` where ``idx >= 0``, else ``fill``; also when ``values`` is empty (an
    export without the CUDA API table has no launching call for any GPU work)."""
    out = np.empty(len(idx), dtype=np.result_type(values, np.asarray(fill)))
    out[:] = fill
    ok = idx >= 0
    out[ok] = values[idx[ok]]
    return out


def correlate(
    trace: Trace, domains: list[str] | None = None, mode: str | None = None
) -> Correlated:
    """Tie GPU work to API calls to NVTX ranges; see the module docstring for the result.
    ``mode`` (``tensorrt``, ``tensorflow1/2``) picks how range texts name ops (``ops``)."""
    nv = trace.nvtx
    if domains:
        keep = nv["domain"].astype(str).isin(domains).to_numpy()
        nv = nv.loc[keep].reset_index(drop=True)
    api = trace.api.copy(deep=False)  # copy-on-write: new columns never touch the trace
    gpu = trace.gpu.copy(deep=False)
    a_start = api["start_ns"].to_numpy(np.int64)
    a_end = api["end_ns"].to_numpy(np.int64)
    a_tid = api["global_tid"].to_numpy(np.int64)
    g_start = gpu["start_ns"].to_numpy(np.int64)
    g_end = gpu["end_ns"].to_numpy(np.int64)

    # ---- GPU work -> API call (same correlationId in the same process), and the GPU work
    # that overlaps no other: neither needs the ranges, so a second thread finds them while
    # this one nests the ranges (numpy's sorts and searches release the GIL)
    side = InThread(
        lambda _check: (_launching_calls(api, gpu, a_tid), intervals.isolated(g_start, g_end)),
        "jlprof-correlate",
    )
    try:
        rl, r_top, parsed, text_code, a_inst = _ranges_and_calls(nv, mode, a_tid, a_start, a_end)
    except BaseException:
        side.cancel()  # joins: nothing runs on once this call has ended
        raise
    g_api, g_isolated = side.wait()
    r_start = nv["start_ns"].to_numpy(np.int64)
    r_end = nv["end_ns"].to_numpy(np.int64)
    r_tid = nv["global_tid"].to_numpy(np.int64)
    lane, lane_tid, lane_dom, r_parent = rl.lane, rl.lane_tid, rl.lane_dom, rl.parent
    # instance rows (ranges, then at most one synthetic one per call and per GPU row)
    inst_idx = index_dtype(len(nv) + len(api) + len(gpu))
    a_inst = a_inst.astype(inst_idx, copy=False)

    # ---- synthetic unassociated instances
    n_work = np.bincount(g_api[g_api >= 0], minlength=len(api)) if len(api) else np.zeros(0, int)
    a_dur = a_end - a_start
    share = _pick(a_dur / np.maximum(n_work, 1), g_api, 0.0)
    share_ns = narrow(share.astype(np.int64))  # the float64 goes before the instances
    del share
    g_inst = _pick(a_inst, g_api, inst_idx(NONE))
    un_api = np.flatnonzero((a_inst < 0) & (n_work == 0)) if len(api) else np.zeros(0, int)
    un_gpu = np.flatnonzero(g_inst < 0)

    n_r = len(nv)
    a_inst[un_api] = n_r + np.arange(len(un_api))
    g_inst[un_gpu] = n_r + len(un_api) + np.arange(len(un_gpu))
    # API calls that launched unassociated work point at that work's first synthetic instance
    launched_un = g_api[un_gpu]
    has = launched_un >= 0
    a_inst[launched_un[has][::-1]] = g_inst[un_gpu][has][::-1]

    # instance times: the launching call (CPU side) when known, else the GPU work itself
    ug_api = g_api[un_gpu]
    ug_has = ug_api >= 0
    u_start = _pick(a_start, ug_api, g_start[un_gpu])
    u_end = _pick(a_end, ug_api, g_end[un_gpu])

    # ---- op identity: each range's label (parsed texts), then synthetic names
    r_pid = pd.factorize(r_tid & GLOBAL_PID_MASK)[0].astype(np.int64, copy=False)
    labels, r_label = range_labels(parsed, text_code, r_parent, r_top, r_start, r_pid)
    ops, inst_op, named, lab_code = _op_table(parsed, labels, r_label, api, gpu, un_api, un_gpu)

    n_inst = n_r + len(un_api) + len(un_gpu)
    inst_parent = np.full(n_inst, NONE, dtype=index_dtype(n_inst))
    inst_parent[:n_r] = r_parent
    op_abs = np.full(len(ops), "", dtype=object)
    scoped = mode in TENSORFLOW  # TF op names are scopes: model/dense/MatMul
    op_abs[lab_code] = [abs_path(str(name), scoped) for name in named]
    path_code, paths = _paths(inst_op, ops["op_name"].to_numpy(object), op_abs, inst_parent)

    cpu_ns = narrow(
        np.concatenate(
            [r_end - r_start, a_dur[un_api], np.where(ug_has, share_ns[un_gpu], 0)]
        ).astype(np.int64, copy=False)
    )
    tid = np.concatenate([r_tid, a_tid[un_api], _pick(a_tid, ug_api, -1)])
    synthetic = np.zeros(n_inst, dtype=bool)
    synthetic[n_r:] = True
    inst = pd.DataFrame(
        {
            "start_ns": np.concatenate([r_start, a_start[un_api], u_start]),
            "end_ns": np.concatenate([r_end, a_end[un_api], u_end]),
            "cpu_ns": cpu_ns,
            "global_tid": tid,
            "op": inst_op,
            "parent": inst_parent,
            "path": path_code,
            "synthetic": synthetic,
            "event_type": narrow(
                np.concatenate(
                    [nv["event_type"].to_numpy(np.int64), np.zeros(n_inst - n_r, np.int64)]
                )
            ),
            "instance_no": narrow(  # "Batch 17" is op "Batch #", instance 17
                np.concatenate(
                    [
                        parsed["instance_no"].to_numpy(np.int64)[text_code],
                        np.full(n_inst - n_r, -1, np.int64),
                    ]
                )
            ),
        },
        copy=False,
    )

    _add_columns(api, inst=_rows(a_inst, n_inst))  # process: global_tid & GLOBAL_PID_MASK
    is_kernel = (gpu["kind"] == "kernel").to_numpy()
    _add_columns(
        gpu,
        api=g_api,
        inst=_rows(g_inst, n_inst),
        api_share_ns=share_ns,
        uses_tc=is_kernel & kernel_uses_tc(gpu["long_name"]) if len(gpu) else np.zeros(0, bool),
        is_memory=~is_kernel,
        isolated=g_isolated,
    )

    times = [a for a in (r_start, r_end, a_start, a_end, g_start, g_end) if len(a)]
    if trace.osrt is not None and len(trace.osrt):
        times += [trace.osrt["start_ns"].to_numpy(), trace.osrt["end_ns"].to_numpy()]
    t_first = int(min(a.min() for a in times)) if times else 0
    t_last = int(max(a.max() for a in times)) if times else 0
    return Correlated(
        trace=trace,
        inst=inst,
        ops=ops,
        paths=paths,
        api=api,
        gpu=gpu,
        t_first_ns=t_first,
        t_last_ns=t_last,
        nvtx=nv,
        range_lane=lane,
        lane_tid=np.asarray(lane_tid, np.int64),
        lane_dom=np.asarray(lane_dom, np.int64),
        markers=_markers(parsed),
    )


def _ranges_and_calls(
    nv: pd.DataFrame, mode: str | None, a_tid: np.ndarray, a_start: np.ndarray, a_end: np.ndarray
) -> tuple[_RangeLanes, np.ndarray, pd.DataFrame, np.ndarray, np.ndarray]:
    """The ranges' lanes and nesting (start/end ranges ended elsewhere are roots), their
    parsed texts, and per API call the innermost range around it: (lanes, emit_nvtx tops,
    parsed texts, text code per range, range per call)."""
    r_start = nv["start_ns"].to_numpy(np.int64)
    r_end = nv["end_ns"].to_numpy(np.int64)
    r_tid = nv["global_tid"].to_numpy(np.int64)
    rl = _range_lanes(nv, r_start, r_end, r_tid)

    # range texts, parsed once each; emit_nvtx chains work for their outermost range
    text_cats = nv["text"].cat.categories if len(nv) else pd.Index([], dtype=object)
    parsed = parse_texts(list(text_cats), mode)
    text_code = nv["text"].cat.codes.to_numpy(np.int64) if len(nv) else np.zeros(0, np.int64)
    is_call = parsed["torch_call"].to_numpy(bool) | (parsed["pyprof"] == "op").to_numpy(bool)
    r_top = tops(is_call[text_code], rl.parent)

    # API call -> innermost range on its thread (latest-starting across domains)
    a_inst = _calls_in_ranges(rl, r_start, a_tid, a_start, a_end)
    if len(a_inst) and len(r_top):  # a call in nested emit_nvtx ranges: the outermost's
        in_top = (a_inst >= 0) & (r_top[np.maximum(a_inst, 0)] >= 0)
        a_inst[in_top] = r_top[a_inst[in_top]]
    return rl, r_top, parsed, text_code, a_inst


def _add_columns(frame: pd.DataFrame, **columns: np.ndarray) -> None:
    """Add arrays built here and referenced nowhere else as columns, without the copy pandas
    makes of a bare array (eight 80 MB copies, 0.8 s, at 10M kernels)."""
    for name, values in columns.items():
        frame[name] = pd.Series(np.asarray(values), index=frame.index, copy=False)


@dataclass
class _RangeLanes:
    """NVTX ranges on their lanes (thread x domain), with their nesting."""

    lane: np.ndarray  # per range; NONE for a start/end range ended on another thread
    lane_tid: np.ndarray
    lane_dom: np.ndarray
    parent: np.ndarray  # enclosing range per range, NONE for a root
    nest_rows: np.ndarray  # the ranges that nest (on one lane), and per nestable row:
    n_lane: np.ndarray
    n_start: np.ndarray
    n_end: np.ndarray
    n_order: np.ndarray  # shared by nesting and every domain's call lookup


def _range_lanes(
    nv: pd.DataFrame, r_start: np.ndarray, r_end: np.ndarray, r_tid: np.ndarray
) -> _RangeLanes:
    """Lanes and nesting of the NVTX ranges; start/end ranges ended elsewhere are roots."""
    etid = nv["end_global_tid"].to_numpy(np.int64)
    nestable = (etid < 0) | (etid == r_tid)
    dom_code = nv["domain"].cat.codes.to_numpy(np.int64) if len(nv) else np.zeros(0, np.int64)
    n_dom = int(dom_code.max()) + 1 if len(dom_code) else 1
    if len(nv) and r_tid.min() >= 0 and int(r_tid.max()) < 2**62 // n_dom:
        # (thread, domain) pairs as one key: lanes in order of first appearance
        lane_id, lane_keys = pd.factorize(r_tid * n_dom + dom_code)
        lane_tid = lane_keys // n_dom
    else:
        tid_code, tid_uniq = pd.factorize(r_tid)
        lane_id, lane_keys = pd.factorize(tid_code.astype(np.int64, copy=False) * n_dom + dom_code)
        lane_tid = tid_uniq[lane_keys // n_dom] if len(lane_keys) else np.zeros(0, np.int64)
    lane_dom = lane_keys % n_dom if len(lane_keys) else np.zeros(0, np.int64)
    lane = _rows(np.where(nestable, lane_id, NONE), len(nv))
    nest_rows = np.flatnonzero(nestable)
    every = len(nest_rows) == len(nv)  # the usual case: no start/end range ended elsewhere
    if every:
        n_lane, n_start, n_end = lane, r_start, r_end
    else:
        n_lane, n_start, n_end = lane[nest_rows], r_start[nest_rows], r_end[nest_rows]
    n_order = _range_order(n_lane, n_start, n_end)  # shared by nesting and every domain's calls
    if every:
        r_parent = _nest(n_lane, n_start, n_end, n_order)
    else:
        r_parent = np.full(len(nv), NONE, dtype=np.int64)
        if len(nest_rows):
            p = _nest(n_lane, n_start, n_end, n_order)
            r_parent[nest_rows] = np.where(p >= 0, nest_rows[np.maximum(p, 0)], NONE)
    return _RangeLanes(
        lane, lane_tid, lane_dom, r_parent, nest_rows, n_lane, n_start, n_end, n_order
    )


def _calls_in_ranges(
    rl: _RangeLanes, r_start: np.ndarray, a_tid: np.ndarray, a_start: np.ndarray, a_end: np.ndarray
) -> np.ndarray:
    """Per API call, the innermost range around it on its thread (latest-starting across
    domains), NONE outside every range."""
    a_inst = np.full(len(a_tid), NONE, dtype=np.int64)
    if len(rl.nest_rows) and len(a_tid):
        lanes = pd.DataFrame({"tid": rl.lane_tid, "dom": rl.lane_dom})
        n_parent = _local_parent(rl.parent, rl.nest_rows)
        doms = np.unique(lanes["dom"].to_numpy())
        first_dom = doms[0]
        for d in doms:
            sel = lanes.index[lanes["dom"] == d]
            idx = pd.Index(lanes.loc[sel, "tid"].to_numpy())
            hit = idx.get_indexer(a_tid)
            q_lane = np.where(hit >= 0, sel.to_numpy()[np.maximum(hit, 0)], NONE)
            c = _innermost(
                rl.n_lane, rl.n_start, rl.n_end, n_parent, q_lane, a_start, a_end, rl.n_order
            )
            if len(rl.nest_rows) < len(rl.lane):  # rows of the nestable subset -> range rows
                c = np.where(c >= 0, rl.nest_rows[np.maximum(c, 0)], NONE)
            if d == first_dom:
                a_inst = c
                continue
            hit = np.flatnonzero(c >= 0)  # keep the latest-starting range across domains
            rows, had = c[hit], a_inst[hit]
            better = (had < 0) | (r_start[rows] > r_start[np.maximum(had, 0)])
            a_inst[hit[better]] = rows[better]
    return a_inst


def _launching_calls(api: pd.DataFrame, gpu: pd.DataFrame, a_tid: np.ndarray) -> np.ndarray:
    """Per GPU activity, the API call that launched it (same correlationId, same process)."""
    idx = index_dtype(len(api))
    g_api = np.full(len(gpu), NONE, dtype=idx)
    if len(gpu) and len(api):
        a_pid = a_tid & GLOBAL_PID_MASK
        g_pid = gpu["global_pid"].to_numpy(np.int64) & GLOBAL_PID_MASK
        corr_a = api["correlation_id"].to_numpy(np.int64) & ((1 << 40) - 1)
        corr_g = gpu["correlation_id"].to_numpy(np.int64) & ((1 << 40) - 1)
        pids = (a_pid.min(), a_pid.max(), g_pid.min(), g_pid.max())
        if min(pids) == max(pids):  # one process (the usual case): no 2M-row hashing
            ka, kg = corr_a, corr_g
        else:
            pid_codes, _ = pd.factorize(np.concatenate([a_pid, g_pid]))
            ka = pid_codes[: len(api)].astype(np.int64) << 40 | corr_a
            kg = pid_codes[len(api) :].astype(np.int64) << 40 | corr_g
        lo = int(ka.min())
        span = int(ka.max()) - lo + 1
        if span <= 4 * len(ka) and bool((ka[1:] > ka[:-1]).all()):
            # ids arrive in order, each once, from a compact range (one process: the usual
            # case): a table of call rows by id, read in GPU order (nearly sequential), in
            # place of a binary search per GPU row
            table = np.full(span + 1, NONE, idx)  # the last slot: ids out of range
            table[ka - lo] = np.arange(len(ka), dtype=idx)
            at = kg - lo
            np.clip(at, -1, span, out=at)  # -1 is the last slot too
            g_api = table[at]
            raw = gpu["correlation_id"].to_numpy()
            if raw.min() < 0:  # GPU work without a correlation id
                g_api[raw < 0] = NONE
            return g_api
        if bool((ka[1:] >= ka[:-1]).all()):  # calls arrive in correlation id order
            asort, ka_sorted = None, ka
        else:
            asort = np.argsort(ka, kind="stable")
            ka_sorted = ka[asort]
        pos = np.searchsorted(ka_sorted, kg)
        np.minimum(pos, len(ka) - 1, out=pos)
        found = np.flatnonzero((ka_sorted[pos] == kg) & (gpu["correlation_id"].to_numpy() >= 0))
        g_api[found] = pos[found] if asort is None else asort[pos[found]]
    return g_api


def _op_table(
    parsed: pd.DataFrame,
    labels: pd.DataFrame,
    r_label: np.ndarray,
    api: pd.DataFrame,
    gpu: pd.DataFrame,
    un_api: np.ndarray,
    un_gpu: np.ndarray,
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """The ops (name, type, direction, op ID, TC eligibility, annotations), the op of each
    instance (ranges, then unassociated calls, then unassociated GPU work), the ranges' label
    names and each label's op code."""
    by_type = parsed.iloc[labels["type_text"].to_numpy()].reset_index(drop=True)
    named = label_names(parsed, labels)
    direction = np.where(labels["bprop"], "bprop", by_type["direction"].to_numpy(object))
    lab_ops = pd.DataFrame(
        {
            "op_name": named,
            "op_type": by_type["op_type"].to_numpy(object),
            "direction": direction,
            "op_id": np.where(direction != "", named + ":" + direction, named),
        }
    )
    # names of the unassociated rows only (not 1M-row object arrays)
    un_names = np.concatenate(
        [
            np.asarray(api["name"].array.take(un_api), dtype=object),
            np.asarray(gpu["name"].array.take(un_gpu), dtype=object),
        ]
    ).astype(str)
    op_frames = [lab_ops]
    un_uniq, un_inv = np.unique(un_names, return_inverse=True)
    op_frames.append(
        pd.DataFrame(
            {
                "op_name": [unassociated_name(s) for s in un_uniq],
                "op_type": un_uniq,
                "direction": "",
                "op_id": [unassociated_name(s) for s in un_uniq],
            }
        )
    )
    all_ops = pd.concat(op_frames, ignore_index=True)
    op_code, ops_uniq = pd.factorize(
        pd.MultiIndex.from_frame(all_ops[["op_name", "op_type", "direction", "op_id"]])
    )
    ops = pd.DataFrame(list(ops_uniq), columns=["op_name", "op_type", "direction", "op_id"])
    if not len(ops):
        ops = pd.DataFrame(columns=["op_name", "op_type", "direction", "op_id"], dtype=object)
    ops["tc_eligible"] = op_type_tc_eligible(ops["op_type"])
    n_lab = len(labels)
    _annotation_columns(ops, by_type, op_code[:n_lab])
    inst_op = _rows(np.concatenate([op_code[:n_lab][r_label], op_code[n_lab:][un_inv]]), len(ops))
    return ops, inst_op, named, op_code[:n_lab]


ANNOTATION_COLUMNS = ("data_type", "input_shapes", "stack_trace")


def _annotation_columns(ops: pd.DataFrame, parsed: pd.DataFrame, text_op: np.ndarray) -> None:
    """Data type, input shapes, stack trace per op: from its first text that has shapes.

    One op (name, type, direction) may run with several shapes (a smaller last batch); the
    detail report shows one row per op, so it shows the first annotated texts' values.
    """
    for col in ANNOTATION_COLUMNS:
        ops[col] = ""
    if not len(parsed):
        return
    f = parsed[list(ANNOTATION_COLUMNS)].copy()
    f["op"] = np.asarray(text_op, np.int64)
    f = f.iloc[np.argsort((f["input_shapes"] == "").to_numpy(), kind="stable")]
    first = f.drop_duplicates("op")
    for col in ANNOTATION_COLUMNS:
        vals = ops[col].to_numpy(object)
        vals[first["op"].to_numpy()] = first[col].to_numpy(object)
        ops[col] = vals


def _markers(parsed: pd.DataFrame) -> frozenset[str]:
    """The PyTorch marker formats among the range texts (the analysis mode follows them)."""
    found = set()
    if parsed["torch_op"].any():
        found.add("emit_nvtx")
    if (parsed["pyprof"] != "").any():
        found.add("pyprof")
    if ((parsed["direction"] != "") & ~parsed["torch_op"] & (parsed["pyprof"] == "")).any():
        found.add("jlprof")
    return frozenset(found)


def _local_parent(r_parent: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Parents re-indexed into the ``rows`` subset (parents are always nestable rows)."""
    if len(rows) == len(r_parent):  # every row: the same indices
        return r_parent
    pos = np.full(len(r_parent), NONE, dtype=np.int64)
    pos[rows] = np.arange(len(rows))
    p = r_parent[rows]
    return np.where(p >= 0, pos[np.maximum(p, 0)], NONE)


__all__ = ["NONE", "Correlated", "correlate", "schema"]
