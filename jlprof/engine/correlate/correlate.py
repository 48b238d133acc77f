"""Correlation: GPU work -> CUDA API call -> NVTX op instance (DESIGN.md rules 1-4).

Two passes: the range pass (:func:`jlprof.engine.correlate.ranges.range_pass`) derives from the NVTX
ranges alone what they give (nesting, labels, the ranges' ops); the work pass here ties
each API call to its range (:func:`~jlprof.engine.correlate.ranges.calls_in_ranges`, a per-call
answer), each GPU row to its launching call, makes the synthetic ``unassociated_*``
instances and appends their ops after the ranges' ones.

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

from jlprof.background import InThread
from jlprof.engine.aggregate import intervals
from jlprof.engine.correlate.ops import unassociated_name
from jlprof.engine.correlate.ranges import (
    NONE,
    OP_KEY,
    Ranges,
    _rows,
    append_ops,
    calls_in_ranges,
    in_domains,
    range_pass,
)
from jlprof.engine.correlate.tensorcore import kernel_uses_tc
from jlprof.engine.read import schema
from jlprof.engine.read.narrow import index_dtype, narrow
from jlprof.engine.read.trace import GLOBAL_PID_MASK, Trace

MAX_PATH_CHARS = 1024


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


#: rows of one nesting level :func:`path_table` codes at a time
PATH_ROWS = 1 << 20


def path_table(
    op: np.ndarray, op_names: np.ndarray, op_abs: np.ndarray, parent: np.ndarray
) -> tuple[np.ndarray, pd.DataFrame]:
    """Hierarchy path code per instance and the path table (parent, name, path, depth).

    A ``/``-scoped op name is absolute; otherwise the path is the parent's path plus the
    name. Work runs level by level on unique (parent path, op) pairs, so deep nesting
    (pyprof traces nest >1000 levels) and millions of instances both stay cheap.
    """
    n = len(parent)
    # row-long arrays in 32 bits below 2**31 rows (the table of paths, a Python list, never
    # nears that many entries): 60 MB less at the peak at 7.5M instances
    code = np.full(n, NONE, dtype=index_dtype(n))
    depth = np.zeros(n, dtype=index_dtype(n))
    # climb only from the rows still below a root
    act = np.flatnonzero(parent >= 0).astype(depth.dtype, copy=False)
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
    # each level's first row in ``order``, counted: no copy of the sorted depths
    bounds = np.concatenate([[0], np.cumsum(np.bincount(depth))]) if n else np.zeros(0, np.int64)
    del depth
    nops = len(op_names) + 1

    def pairs(rows: np.ndarray) -> np.ndarray:  # (parent's path, op) as one int64 each
        par = parent[rows]
        par = np.where(par >= 0, code[np.maximum(par, 0)], NONE).astype(np.int64, copy=False)
        par += 1
        par *= nops
        par += op[rows]
        return par

    for d in range(len(bounds) - 1):
        # a level's rows by chunks of PATH_ROWS (a level can hold most rows: ~80 bytes a row
        # of temporaries at once were the windowed assembly's peak); its pairs in sorted order
        level = order[bounds[d] : bounds[d + 1]]
        chunks = [level[i : i + PATH_ROWS] for i in range(0, len(level), PATH_ROWS)]
        uniq = np.unique(np.concatenate([pd.unique(pairs(rows)) for rows in chunks] or [[]]))
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
        for rows in chunks:
            code[rows] = codes[np.searchsorted(uniq, pairs(rows))]
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


def pick(values: np.ndarray, idx: np.ndarray, fill) -> np.ndarray:
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
    nv = in_domains(trace.nvtx, domains)
    api = trace.api.copy(deep=False)  # copy-on-write: new columns never touch the trace
    gpu = trace.gpu.copy(deep=False)
    a_start = api["start_ns"].to_numpy(np.int64)
    a_end = api["end_ns"].to_numpy(np.int64)
    a_tid = api["global_tid"].to_numpy(np.int64)
    g_start = gpu["start_ns"].to_numpy(np.int64)
    g_end = gpu["end_ns"].to_numpy(np.int64)

    # ---- GPU work -> API call (same correlationId in the same process), and the GPU work
    # that overlaps no other: neither needs the ranges, so a second thread finds them while
    # this one runs the range pass and finds each call's range (numpy's sorts and searches
    # release the GIL)
    side = InThread(
        lambda _check: (launching_calls(api, gpu, a_tid), intervals.isolated(g_start, g_end)),
        "jlprof-correlate",
    )
    try:
        ranges = range_pass(nv, mode)  # start/end ranges ended elsewhere are roots
        # API call -> innermost range on its thread (latest-starting across domains)
        a_inst = calls_in_ranges(ranges, a_tid, a_start, a_end)
    except BaseException:
        side.cancel()  # joins: nothing runs on once this call has ended
        raise
    g_api, g_isolated = side.wait()
    r_start, r_end, r_tid = ranges.start_ns, ranges.end_ns, ranges.global_tid
    rl = ranges.lanes
    # instance rows (ranges, then at most one synthetic one per call and per GPU row)
    inst_idx = index_dtype(len(nv) + len(api) + len(gpu))
    a_inst = a_inst.astype(inst_idx, copy=False)

    # ---- synthetic unassociated instances
    n_work = np.bincount(g_api[g_api >= 0], minlength=len(api)) if len(api) else np.zeros(0, int)
    a_dur = a_end - a_start
    share = pick(a_dur / np.maximum(n_work, 1), g_api, 0.0)
    share_ns = narrow(share.astype(np.int64))  # the float64 goes before the instances
    del share
    g_inst = pick(a_inst, g_api, inst_idx(NONE))
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
    u_start = pick(a_start, ug_api, g_start[un_gpu])
    u_end = pick(a_end, ug_api, g_end[un_gpu])

    # ---- op identity: the ranges' ops (range pass), then the synthetic ones appended
    un_names = np.concatenate(  # names of the unassociated rows only (not 1M-row objects)
        [
            np.asarray(api["name"].array.take(un_api), dtype=object),
            np.asarray(gpu["name"].array.take(un_gpu), dtype=object),
        ]
    ).astype(str)
    ops, inst_op = op_table(ranges, un_names)

    n_inst = n_r + len(un_api) + len(un_gpu)
    inst_parent = np.full(n_inst, NONE, dtype=index_dtype(n_inst))
    inst_parent[:n_r] = rl.parent
    op_abs = np.full(len(ops), "", dtype=object)
    op_abs[: len(ranges.op_abs)] = ranges.op_abs
    path_code, paths = path_table(inst_op, ops["op_name"].to_numpy(object), op_abs, inst_parent)

    cpu_ns = narrow(
        np.concatenate(
            [r_end - r_start, a_dur[un_api], np.where(ug_has, share_ns[un_gpu], 0)]
        ).astype(np.int64, copy=False)
    )
    tid = np.concatenate([r_tid, a_tid[un_api], pick(a_tid, ug_api, -1)])
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
                        np.asarray(ranges.instance_no, np.int64),
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
        range_lane=rl.lane,
        lane_tid=np.asarray(rl.lane_tid, np.int64),
        lane_dom=np.asarray(rl.lane_dom, np.int64),
        markers=ranges.markers,
    )


def _add_columns(frame: pd.DataFrame, **columns: np.ndarray) -> None:
    """Add arrays built here and referenced nowhere else as columns, without the copy pandas
    makes of a bare array (eight 80 MB copies, 0.8 s, at 10M kernels)."""
    for name, values in columns.items():
        frame[name] = pd.Series(np.asarray(values), index=frame.index, copy=False)


def launching_calls(api: pd.DataFrame, gpu: pd.DataFrame, a_tid: np.ndarray) -> np.ndarray:
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


def op_table(
    ranges: Ranges, un_names: np.ndarray, range_op: np.ndarray | None = None
) -> tuple[pd.DataFrame, np.ndarray]:
    """The ops: the ranges' (:func:`~jlprof.engine.correlate.ranges.range_pass`), then the synthetic
    ``unassociated_<name>`` ones not among them appended; and the op of each instance
    (ranges, then the unassociated instances, whose names are ``un_names``). ``range_op``:
    the ranges' ops when already made (:meth:`Ranges.op_narrow`; the windowed run lets
    the labels they come from go)."""
    un_uniq, un_inv = np.unique(un_names, return_inverse=True)
    ops, un_code = append_ops(ranges.ops, unassociated_ops(un_uniq))
    r_op = ranges.op if range_op is None else range_op
    inst_op = _rows(np.concatenate([r_op, un_code[un_inv]]), len(ops))
    return ops, inst_op


def unassociated_ops(names: np.ndarray) -> pd.DataFrame:
    """The synthetic op of unassociated work of each name (``OP_KEY`` columns): op name and
    ID ``unassociated_<name>``, op type the name."""
    un = [unassociated_name(s) for s in names]
    return pd.DataFrame(
        {"op_name": un, "op_type": names, "direction": "", "op_id": un}, columns=OP_KEY
    )


__all__ = ["NONE", "Correlated", "correlate", "schema"]
