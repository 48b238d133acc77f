"""DLProf's reports (guide ch. 10) as DataFrames with the guide's exact column names.

Internal frames use ``*_ns`` names; the DLProf names appear only here, at the edge.
Every builder takes the profile and an inclusive iteration range and works from the
per-iteration cube, so a new range never touches the raw events (except the iteration
report, which lists raw kernel rows and is a filter of them).
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from jlprof.engine.aggregate.aggregate import CATEGORIES, combine, flat_cpu_ns, row_windows
from jlprof.engine.analyses.outliers import steady
from jlprof.engine.analysis import DEFAULT_PROFILE_NAME
from jlprof.engine.read.narrow import index_dtype
from jlprof.reports.roofline import roofline_columns
from jlprof.version import __version__

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

STATS = (("Total", "sum"), ("Avg.", "avg"), ("Min", "min"), ("Max", "max"))


def _stats(df: pd.DataFrame, col: str, label: str, calls: pd.Series) -> dict[str, Any]:
    """Total/Avg./Min/Max columns from a combined frame's ``col_sum/_min/_max``."""
    total = df[f"{col}_sum"].astype(np.int64)
    avg = (total / calls.replace(0, np.nan)).fillna(0.0)
    return {
        f"Total {label} (ns)": total.to_numpy(),
        f"Avg. {label} (ns)": avg.round(1).to_numpy(),
        f"Min {label} (ns)": df[f"{col}_min"].astype(np.int64).to_numpy(),
        f"Max {label} (ns)": df[f"{col}_max"].astype(np.int64).to_numpy(),
    }


def take_categorical(small: np.ndarray, idx: np.ndarray, missing: str = "") -> pd.Categorical:
    """``small[idx]`` (``missing`` where idx < 0) as a categorical, without per-row objects."""
    remap, uniq = pd.factorize(np.append(np.asarray(small, dtype=object), missing), sort=False)
    codes = remap[np.where(idx >= 0, idx, len(small))].astype(np.int32)
    return pd.Categorical.from_codes(
        codes, categories=pd.Index(np.asarray(uniq, object), dtype=object)
    )


def op_frame(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Ops with at least one instance in the range, combined over iterations."""

    def build() -> pd.DataFrame:
        comb = combine(p.cube.op_iter, "op", lo, hi)
        return comb.join(p.correlated.ops.loc[comb.index])

    return p.memo("ops", lo, hi, build).copy()


def _pytorch(p: Analysis) -> bool:
    return p.mode == "pytorch"


def detail(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Guide §10.3: one row per unique op (NVTX range name), exclusive GPU time."""
    df = op_frame(p, lo, hi)
    calls = df["calls"]
    cols: dict[str, Any] = {"Op ID": df["op_id"].to_numpy(), "Op Name": df["op_name"].to_numpy()}
    if _pytorch(p):
        cols["Direction"] = df["direction"].to_numpy()
    cols.update(
        {
            "Op Type": df["op_type"].to_numpy(),
            "No. Calls": calls.to_numpy(np.int64),
            "TC Eligibility": df["tc_eligible"].to_numpy(bool),
            "Using TC": (df["tc_gpu_sum"] > 0).to_numpy(bool),
        }
    )
    cols.update(_stats(df, "cpu", "CPU Time", calls))
    cols.update(_stats(df, "gpu", "GPU Time", calls))
    cols.update(_stats(df, "overhead", "CPU Overhead Time", calls))
    cols.update(_stats(df, "idle", "GPU Idle Time", calls))
    cols["Data Type"] = df["data_type"].to_numpy(object)
    cols["Input Shapes"] = df["input_shapes"].to_numpy(object)
    if _pytorch(p):
        cols["Stack Trace"] = df["stack_trace"].to_numpy(object)
    cols.update(roofline_columns(p, df))  # jlprof's FLOPs/roofline, after DLProf's columns
    out = pd.DataFrame(cols)
    return out.sort_values(
        ["Total GPU Time (ns)", "Total CPU Time (ns)"], ascending=False, kind="stable"
    ).reset_index(drop=True)


def op_type(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Guide §10.7: per op type. The guide names the type column "Op Name"; we keep that."""
    df = op_frame(p, lo, hi)
    df["using_tc"] = df["tc_gpu_sum"] > 0
    g = df.groupby("op_type", sort=True)
    agg = {"calls": "sum", "op_name": "size", "tc_eligible": "any", "using_tc": "any"}
    for c in ("cpu", "gpu", "overhead", "idle"):
        agg.update({f"{c}_sum": "sum", f"{c}_min": "min", f"{c}_max": "max"})
    t = g.agg(agg)
    t["cpu_sum"] = _flat_cpu(p, lo, hi, df.index.to_numpy(), df["op_type"].to_numpy(object))[
        t.index.to_numpy(object)
    ].to_numpy(np.int64)  # an op nested in one of its type counts once (docs/reports.md)
    calls = t["calls"]
    cols: dict[str, Any] = {
        "Op Name": t.index.to_numpy(),
        "No. Nodes": t["op_name"].to_numpy(np.int64),
        "No. Calls": calls.to_numpy(np.int64),
        "TC Eligibility": t["tc_eligible"].to_numpy(bool),
        "Using TC": t["using_tc"].to_numpy(bool),
    }
    cols.update(_stats(t, "cpu", "CPU Time", calls))
    cols.update(_stats(t, "gpu", "GPU Time", calls))
    cols.update(_stats(t, "overhead", "CPU Overhead Time", calls))
    cols.update(_stats(t, "idle", "GPU Idle Time", calls))
    out = pd.DataFrame(cols)
    return out.sort_values("Total GPU Time (ns)", ascending=False, kind="stable").reset_index(
        drop=True
    )


def _flat_cpu(p: Analysis, lo: int, hi: int, ops: np.ndarray, label: np.ndarray) -> pd.Series:
    """CPU time per label of the ops ``ops`` (rows of ``correlated.ops``), each thread's
    nested ranges counted once (:func:`flat_cpu_ns`), as a Series by label."""
    codes, names = pd.factorize(pd.Series(label, dtype=object), sort=False)
    group = np.full(len(p.correlated.ops), -1, np.int64)
    group[np.asarray(ops, np.int64)] = codes
    cpu = flat_cpu_ns(p.correlated, p.cube.inst_iter, lo, hi, group, len(names))
    return pd.Series(cpu, index=pd.Index(names, dtype=object))


def kernel_frame(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    return p.memo("kernels", lo, hi, lambda: _build_kernel_frame(p, lo, hi)).copy()


def _build_kernel_frame(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    comb = combine(p.cube.kernel_iter, ["kernel", "op"], lo, hi)
    if comb.empty:
        return comb
    long_names = p.correlated.gpu["long_name"].cat.categories.to_numpy(object)
    k = comb.index.get_level_values("kernel").to_numpy()
    op = comb.index.get_level_values("op").to_numpy()
    comb = comb.reset_index(drop=True)
    flags = p.kernel_flags
    comb["kernel"] = k
    comb["kernel_name"] = flags["short_name"].to_numpy(object)[k]
    comb["long_kernel_name"] = long_names[k]
    comb["uses_tc"] = flags["uses_tc"].to_numpy()[k]
    comb["is_memory"] = flags["is_memory"].to_numpy()[k]
    ops = p.correlated.ops
    comb["op"] = op
    for col in ("op_id", "op_name", "direction"):
        comb[col] = np.where(op >= 0, ops[col].to_numpy(object)[np.maximum(op, 0)], "")
    return comb


def kernel(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Guide §10.5: one row per (kernel, op); API time is the launching call's share.

    A kernel is its demangled name (``Long Kernel Name``), as ``nsys stats -r gpukernsum``
    tells kernels apart: template instantiations sharing a short name stay separate rows,
    each with its own Tensor Core verdict. ``Kernel Name`` is the short name, for display.
    """
    df = kernel_frame(p, lo, hi)
    if df.empty:
        return pd.DataFrame(columns=_kernel_columns(p))
    calls = df["calls"]
    cols: dict[str, Any] = {
        "Kernel Name": df["kernel_name"].to_numpy(),
        "Op ID": df["op_id"].to_numpy(),
        "Op Name": df["op_name"].to_numpy(),
    }
    if _pytorch(p):
        cols["Direction"] = df["direction"].to_numpy()
    cols["Uses TC"] = df["uses_tc"].to_numpy(bool)
    cols.update(_stats(df, "gpu", "GPU Time", calls))
    cols.update(_stats(df, "api", "API Time", calls))
    cols["Long Kernel Name"] = df["long_kernel_name"].to_numpy()
    if p.ncu_kernels is not None:
        cols.update(measured_columns(p.ncu_kernels, df))
    out = pd.DataFrame(cols)
    return out.sort_values("Total GPU Time (ns)", ascending=False, kind="stable").reset_index(
        drop=True
    )


def measured_columns(per_kernel: pd.DataFrame, df: pd.DataFrame) -> dict[str, Any]:
    """Nsight Compute's figures per kernel (mean of its measured launches; NaN where ncu did
    not profile it) and the Tensor Core verdict with how it was decided (docs/kernels.md), for
    the rows of a (kernel, op) frame ``df`` (``kernel_frame``: ``kernel``, ``uses_tc``)."""
    from jlprof.engine.analyses.ncu import REPORT_COLUMNS, tc_verdict

    m = per_kernel.reindex(df["kernel"].to_numpy())
    pipe = m["tensor_pipe_pct"].to_numpy(float)
    verdicts = [tc_verdict(u, t) for u, t in zip(df["uses_tc"].to_numpy(bool), pipe, strict=False)]
    cols: dict[str, Any] = {
        "Uses TC": np.array([v[0] for v in verdicts], dtype=bool),
        "TC Verdict": [v[1] for v in verdicts],
        "Measured Launches": m["launches"].fillna(0).to_numpy(np.int64),
    }
    for src, label in REPORT_COLUMNS.items():
        cols[label] = m[src].to_numpy(float)
    return cols


def _kernel_columns(p: Analysis) -> list[str]:
    cols = ["Kernel Name", "Op ID", "Op Name"] + (["Direction"] if _pytorch(p) else [])
    cols.append("Uses TC")
    for label in ("GPU Time", "API Time"):
        cols += [f"{s} {label} (ns)" for s, _ in STATS]
    cols.append("Long Kernel Name")
    if p.ncu_kernels is not None:  # the measured columns, as measured_columns adds them
        from jlprof.engine.analyses.ncu import REPORT_COLUMNS

        cols += ["TC Verdict", "Measured Launches", *REPORT_COLUMNS.values()]
    return cols


def tensor(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Guide §10.6: TC-eligible ops (and any op running TC kernels) and their TC use."""
    ops = op_frame(p, lo, hi)
    kf = kernel_frame(p, lo, hi)
    sel = ops[ops["tc_eligible"] | (ops["tc_gpu_sum"] > 0)]
    cols = (
        ["Op ID", "Op Name"]
        + (["Direction"] if _pytorch(p) else [])
        + [
            "Op Type",
            "Uses TC",
            "Total GPU Time",
            "TC GPU Time",
            "Non-TC GPU Time",
            "TC Utilization (%)",
            "Total Kernel Count",
            "TC Kernel Count",
            "TC Kernel Names",
            "Non-TC Kernel Count",
            "Non-TC Kernel Names",
        ]
    )
    if sel.empty:
        return pd.DataFrame(columns=cols)
    if kf.empty:
        names = pd.DataFrame(columns=["op", "uses_tc", "long_kernel_name"])
    else:
        names = kf.loc[~kf["is_memory"], ["op", "uses_tc", "long_kernel_name"]]
    # distinct kernels (demangled names): namesakes are counted and listed apart
    by = names.groupby(["op", "uses_tc"])["long_kernel_name"].agg(lambda s: sorted(set(s)))
    tc_names = [by.get((o, True), []) for o in sel.index]
    non_names = [by.get((o, False), []) for o in sel.index]
    # an op's GPU time is one figure everywhere: the detail report's (its kernels, memcpys
    # and memsets), so Non-TC GPU Time holds the memory work too (docs/reports.md)
    gpu = sel["gpu_sum"].astype(np.int64)
    tc_t = sel["tc_gpu_sum"].astype(np.int64)
    out: dict[str, Any] = {"Op ID": sel["op_id"].to_numpy(), "Op Name": sel["op_name"].to_numpy()}
    if _pytorch(p):
        out["Direction"] = sel["direction"].to_numpy()
    out.update(
        {
            "Op Type": sel["op_type"].to_numpy(),
            "Uses TC": (tc_t > 0).to_numpy(bool),
            "Total GPU Time": gpu.to_numpy(),
            "TC GPU Time": tc_t.to_numpy(),
            "Non-TC GPU Time": (gpu - tc_t).to_numpy(),
            "TC Utilization (%)": np.round(
                np.where(gpu > 0, 100.0 * tc_t / gpu.clip(lower=1), 0.0), 2
            ),
            "Total Kernel Count": [
                len(a) + len(b) for a, b in zip(tc_names, non_names, strict=True)
            ],
            "TC Kernel Count": [len(a) for a in tc_names],
            "TC Kernel Names": [";".join(a) for a in tc_names],
            "Non-TC Kernel Count": [len(b) for b in non_names],
            "Non-TC Kernel Names": [";".join(b) for b in non_names],
        }
    )
    df = pd.DataFrame(out)
    return df.sort_values("Total GPU Time", ascending=False, kind="stable").reset_index(drop=True)


def iteration(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Guide §10.4: one row per GPU activity (kernel, memcpy, memset) in the range.

    Rows in (iteration, GPU start) order. The order is found first and every column is
    gathered once in it (no second 1M-row copy); the whole range in order takes no copy.
    """
    return _iteration_rows(p, _iteration_order(p, lo, hi), _inst_op(p))


#: rows per part of a streamed iteration report (a multiple of the encoders' batch). 512k:
#: at 1M kernels two parts keep the CSV+JSON run ~50 MB under one 1M-row part (peak ~920 vs
#: ~970 MB) for ~0.05 s; smaller parts cost more per-part planning than they save
ITERATION_PART_ROWS = 1 << 19


def iteration_parts(
    p: Analysis, lo: int, hi: int, rows: int | None = None
) -> Iterator[pd.DataFrame]:
    """:func:`iteration` in consecutive parts of at most ``rows`` rows (default
    :data:`ITERATION_PART_ROWS`; at least one part, maybe empty): the writers stream a
    10M-row report without ever holding its frame (~1 GB of gathered columns at 10M), nor
    its row order (a permutation and its sort keys: ~0.5 GB at 10M) when the rows are not
    stored in it."""
    rows = rows or ITERATION_PART_ROWS
    inst_op = _inst_op(p)  # once, not per part: a part touches only its own rows
    it = p.gpu_iter
    start = p.correlated.gpu["start_ns"].to_numpy(np.int64)
    if _whole_in_order(it, start, lo, hi):
        n = len(it)
        for a in range(0, max(n, 1), rows):
            yield _iteration_rows(p, slice(a, min(a + rows, n)), inst_op)
        return
    rest = np.zeros(0, np.int64)  # rows of the pieces so far not yet in a part
    yielded = False
    for piece in _ordered_pieces(it, start, lo, hi, rows):
        rest = np.concatenate([rest, piece])
        full = len(rest) // rows * rows  # cut exactly at ``rows``: parts of the one global order
        for a in range(0, full, rows):
            yield _iteration_rows(p, rest[a : a + rows], inst_op)
            yielded = True
        rest = rest[full:]
    if len(rest) or not yielded:
        yield _iteration_rows(p, rest, inst_op)


def _ordered_pieces(
    it: np.ndarray, start: np.ndarray, lo: int, hi: int, rows: int
) -> Iterator[np.ndarray]:
    """The positions of :func:`_in_order`, a run of whole iterations at a time (about
    ``rows`` rows each): every row of iterations [a, b) is in one piece, so each piece sorted
    on its own and the pieces in turn are the global (iteration, GPU start) order."""
    counts = np.zeros(hi - lo + 1, np.int64)
    for a in range(0, len(it), 1 << 20):  # no trace-long temporaries
        k = it[a : a + (1 << 20)]
        k = k[(k >= lo) & (k <= hi)]
        counts += np.bincount(k - lo, minlength=hi - lo + 1)
    for a, b in row_windows(counts, rows):
        if counts[a:b].any():
            yield _in_order(it, start, lo + a, lo + b - 1)


def _inst_op(p: Analysis) -> np.ndarray:
    """Each op instance's op row, int32 (what every op column of a row gathers through)."""
    return p.correlated.inst["op"].to_numpy().astype(np.int32)


def _iteration_order(p: Analysis, lo: int, hi: int) -> slice | np.ndarray:
    """The iteration report's rows: ``slice(0, n)`` when they are every GPU row in stored
    order (10M rows: no index, no order check copies), else their positions."""
    it = p.gpu_iter
    start = p.correlated.gpu["start_ns"].to_numpy(np.int64)
    if _whole_in_order(it, start, lo, hi):
        return slice(0, len(it))
    return _in_order(it, start, lo, hi)


def _iteration_rows(p: Analysis, rows: slice | np.ndarray, inst_op: np.ndarray) -> pd.DataFrame:
    """The iteration report's rows ``rows`` (of :func:`_iteration_order`): a slice gathers
    nothing (views), positions gather each column once. Nothing here is as long as the
    trace: a part of a 10M-row report costs its own rows only."""
    c = p.correlated
    g = c.gpu
    inst = g["inst"].to_numpy()[rows]  # int32 row indices (engine/correlate/correlate.py): as held
    # each row's op, len(ops) for none: one int32 array that every op column gathers from
    # (take_categorical per column made ~200 MB of temporaries each at 10M rows)
    op = inst_op[np.maximum(inst, 0)]
    op[inst < 0] = len(c.ops)
    del inst
    api = g["api"].to_numpy()[rows]
    return iteration_frame(c.ops, op, p.gpu_iter[rows], g, rows, c.api, api, _pytorch(p))


def iteration_frame(
    ops: pd.DataFrame,
    op: np.ndarray,
    it: np.ndarray,
    g: pd.DataFrame,
    rows: slice | np.ndarray,
    api: pd.DataFrame,
    call: np.ndarray,
    pytorch: bool,
) -> pd.DataFrame:
    """The iteration report's frame for the GPU rows ``rows`` of ``g`` (``Trace.gpu``'s
    columns), given per row its op (a row of ``ops``; ``len(ops)``: none), its iteration and
    its launching call (a row of ``api``, -1: none). The whole-trace report and the windowed
    engine's windows (:mod:`jlprof.engine.windowed.windowed`) both build their rows here."""
    view = isinstance(rows, slice)

    def col(a: np.ndarray) -> np.ndarray:
        return a[rows]

    def i64(x: pd.Series) -> np.ndarray:  # the trace may hold it as int32 (engine/read/read.py)
        return col(x.to_numpy()).astype(np.int64, copy=False)

    def cat(name: str) -> pd.Categorical:
        arr = g[name].array
        return arr[rows] if view else arr.take(rows)

    n = len(op)

    def pick(name: str) -> pd.Categorical:  # = take_categorical(ops[name], op or -1)
        small = np.append(np.asarray(ops[name].to_numpy(object), dtype=object), "")
        remap, uniq = pd.factorize(small, sort=False)
        return pd.Categorical.from_codes(
            remap.astype(np.int32)[op], categories=pd.Index(np.asarray(uniq, object), dtype=object)
        )

    no_api = call < 0
    api_row = np.maximum(call, 0)  # both API columns gather with it, then blank the rows without
    a_start = api["start_ns"].to_numpy(np.int64)
    a_end = api["end_ns"].to_numpy(np.int64)

    def per_call(values: np.ndarray, none: int) -> np.ndarray:
        out = values[api_row] if len(values) else np.zeros(len(api_row), np.int64)
        out[no_api] = none
        return out

    call_start = per_call(a_start, -1)
    call_ns = per_call(a_end, 0) - np.where(no_api, 0, call_start)  # 0 where no call

    blank = take_categorical(np.zeros(0, object), np.full(n, -1))
    g_start = col(g["start_ns"].to_numpy(np.int64))
    cols: dict[str, Any] = {
        "Iteration": np.array(it, np.int64),  # a copy (the cube's is int32)
        "Op ID": pick("op_id"),
        "Op Name": pick("op_name"),
    }
    if pytorch:
        cols["Direction"] = pick("direction")
    cols.update(
        {
            "Op Type": pick("op_type"),
            "Kernel Name": cat("name"),
            "Device ID": i64(g["device_id"]),
            "GPU Start Time (ns)": g_start,
            "GPU Time (ns)": col(g["end_ns"].to_numpy(np.int64)) - g_start,
            "API Call Start (ns)": call_start,
            "API Call Time (ns)": call_ns,
            "Uses TC": col(g["uses_tc"].to_numpy(bool)),
            "Grid X": i64(g["grid_x"]),
            "Grid Y": i64(g["grid_y"]),
            "Grid Z": i64(g["grid_z"]),
            "Block X": i64(g["block_x"]),
            "Block Y": i64(g["block_y"]),
            "Block Z": i64(g["block_z"]),
            "Data Type": pick("data_type"),
            "Input Shapes": pick("input_shapes"),
            # as the op's marker records its arguments (engine.correlate.params); no marker records
            # outputs, so Output Shapes stays blank (docs/reports.md)
            "Parameters": pick("parameters") if "parameters" in ops else blank,
            "Output Shapes": blank,
            "Long Kernel Name": cat("long_name"),
        }
    )
    return pd.DataFrame(cols, copy=False)  # 1M rows: no consolidation copy


def iteration_window(
    ops: pd.DataFrame,
    op: np.ndarray,
    it: np.ndarray,
    g: pd.DataFrame,
    api: pd.DataFrame,
    call: np.ndarray,
    lo: int,
    hi: int,
    pytorch: bool,
) -> pd.DataFrame:
    """The iteration report's rows from one window of the windowed engine, whose GPU rows
    are every GPU row of its iterations (:mod:`jlprof.engine.windowed.windowed`): those of
    iterations lo..hi in (iteration, GPU start) order, so the windows' frames in turn are the
    report. Per GPU row of ``g``: ``op`` (row of ``ops``), ``it``, ``call`` (row of ``api``)."""
    rows = _in_order(np.asarray(it), g["start_ns"].to_numpy(np.int64), lo, hi)
    return iteration_frame(ops, op[rows], it[rows], g, rows, api, call[rows], pytorch)


def _in_order(it: np.ndarray, start: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Rows of iterations lo..hi in (iteration, GPU start) order."""
    sel = np.flatnonzero((it >= lo) & (it <= hi))
    k_it, k_t = it[sel], start[sel]
    d_it, d_t = np.diff(k_it), np.diff(k_t)
    if not bool(np.all((d_it > 0) | ((d_it == 0) & (d_t >= 0)))):
        sel = sel[np.lexsort((k_t, k_it))]
    return sel


def _whole_in_order(it: np.ndarray, start: np.ndarray, lo: int, hi: int) -> bool:
    """True when every row is in lo..hi and already in (iteration, GPU start) order (the usual
    whole-profile report), checked in blocks so no row-sized temporary is made."""
    if len(it) == 0 or int(it.min()) < lo or int(it.max()) > hi:
        return False
    step = 1 << 20
    for a in range(0, len(it) - 1, step):
        b = min(a + step + 1, len(it))
        d_it, d_t = np.diff(it[a:b]), np.diff(start[a:b])
        if not bool(np.all((d_it > 0) | ((d_it == 0) & (d_t >= 0)))):
            return False
    return True


def _group_stats_frame(p: Analysis) -> pd.DataFrame:
    """The group-node partials with one column per statistic, for :func:`combine`.

    Built once per key node (min/max copies of the four time columns, a row count for the
    averages), so a range change combines them in a few ms instead of a dozen group-bys.
    The columns are the cube's own arrays, int32 where it holds them so (no copies):
    :func:`combine` sums them exactly and gives int64.
    """

    def build() -> pd.DataFrame:
        gi = p.cube.group_iter
        cols: dict[str, np.ndarray] = {
            "calls": gi["calls"].to_numpy(),
            "tc_eligible_ops": gi["tc_eligible_ops"].to_numpy(),
            "tc_ops": gi["tc_ops"].to_numpy(),
            "n": np.ones(len(gi), index_dtype(len(gi))),
        }
        for col in ("cpu", "gpu", "overhead", "idle"):
            v = gi[col].to_numpy()
            cols[f"{col}_sum"], cols[f"{col}_min"], cols[f"{col}_max"] = v, v, v
        return pd.DataFrame(cols, index=gi.index, copy=False)

    return p.once(f"group_stats:{p.key_node}", build)


def group_node(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Guide §10.8: non-leaf nodes, flattened per iteration, then total/avg/min/max."""
    cols = ["Name", "No. Calls Aggregated", "No. TC Eligibility Ops", "No. Node Ops Using TC"]
    for label in ("CPU Time", "GPU Time", "CPU Overhead Time", "GPU Idle Time"):
        cols += [f"{s} {label} (ns)" for s, _ in STATS]
    g = combine(_group_stats_frame(p), "group", lo, hi)
    if g.empty:
        return pd.DataFrame(columns=cols)
    n = g["n"].to_numpy(np.float64)
    out: dict[str, Any] = {
        "Name": p.correlated.paths["path"].to_numpy(object)[g.index.to_numpy()],
        "No. Calls Aggregated": g["calls"].to_numpy(np.int64),
        "No. TC Eligibility Ops": g["tc_eligible_ops"].to_numpy(np.int64),
        "No. Node Ops Using TC": g["tc_ops"].to_numpy(np.int64),
    }
    for col, label in (
        ("cpu", "CPU Time"),
        ("gpu", "GPU Time"),
        ("overhead", "CPU Overhead Time"),
        ("idle", "GPU Idle Time"),
    ):
        total = g[f"{col}_sum"].to_numpy(np.int64)
        out[f"Total {label} (ns)"] = total
        out[f"Avg. {label} (ns)"] = np.round(total / n, 1)
        out[f"Min {label} (ns)"] = g[f"{col}_min"].to_numpy(np.int64)
        out[f"Max {label} (ns)"] = g[f"{col}_max"].to_numpy(np.int64)
    df = pd.DataFrame(out)
    return df.sort_values("Name", kind="stable").reset_index(drop=True)


# ---- summary -------------------------------------------------------------------------------
def _version_from_dir(path: str) -> str:
    import re

    m = re.search(r"(\d{4}\.\d+(?:\.\d+)*)", path or "")
    return m.group(1) if m else ""


def _driver(v: str) -> str:
    """``4505105`` -> ``450.51.05`` (old captures drop the dots)."""
    if v and v.isdigit() and len(v) >= 6:
        return f"{v[:-4]}.{v[-4:-2]}.{v[-2:]}"
    return v


def _cuda(v: str) -> str:
    """``12030`` -> ``12.3`` (CUDA's integer version)."""
    if v and v.isdigit():
        n = int(v)
        return f"{n // 1000}.{(n % 1000) // 10}"
    return v


def system_config(p: Analysis) -> dict[str, Any]:
    meta = p.trace.meta
    labels = p.gpu_labels
    gpus = p.trace.gpus
    names = list(gpus["name"].astype(str)) if len(gpus) else [lbl.split(": ")[-1] for lbl in labels]
    cfg: dict[str, Any] = {}
    if p.profile_name and p.profile_name != DEFAULT_PROFILE_NAME:  # "hidden if unspecified"
        cfg["Profile Name"] = p.profile_name
    capture = _version_from_dir(meta.get("TargetInstallDir", ""))
    export = meta.get("EXPORT_PRODUCT_VERSION", "")
    cfg.update(
        {
            "GPU Count": len(labels),
            "GPU Name(s)": ", ".join(sorted(set(names))),
            "CPU Model": meta.get("CpuDescription", "") or platform.processor(),
            "GPU Driver Version": _driver(meta.get("NvDriverVersion", "")),
            "Framework": p.framework(),
            "CUDA Version": _cuda(meta.get("CudaDriverVersion", "")),
            "cuDNN Version": meta.get("CudnnVersion", ""),
            "NSys Version": capture or export,
            "DLProf Version": f"jlprof {__version__}",
            "DLProf Build": "",
        }
    )
    return cfg


def iterations_table(p: Analysis, lo: int, hi: int) -> dict[str, Any]:
    """Guide §10.2's Iterations table (its rows only). Mean and std leave out the partial
    first/last intervals (start-up before the first key node, the tail after the last: see
    ``engine.analyses.outliers``) when the range holds complete iterations; the CLI's progress line,
    the dashboard card and the iteration_outliers report say which (``outliers.excluded``)."""
    it = p.iterations
    dur = it.durations_ns()[steady(it, lo, hi)]
    return {
        "Total Iterations": it.count if it.key_node else 0,
        "Aggregated Iterations": hi - lo + 1,
        "Start Iteration": lo,
        "Stop Iteration": hi,
        "Average Iteration Time (ns)": round(float(dur.mean()), 1) if len(dur) else 0.0,
        "Iteration Time Standard Deviation (ns)": round(float(dur.std()), 1) if len(dur) else 0.0,
    }


def duration_breakdown(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Per lane (GPU): % of the range's wall time in each priority category, and busy %."""
    comb = p.memo("time", lo, hi, lambda: combine(p.cube.time_iter, "lane", lo, hi))
    wall = np.maximum(comb["wall"].to_numpy(np.float64), 1.0)[:, None]
    cols = [*CATEGORIES, "other", "gpu_busy"]
    pct = 100.0 * comb[cols].to_numpy(np.float64) / wall  # one 2-D division, not a column each
    return pd.DataFrame(pct, index=comb.index, columns=[*cols[:-1], "gpu_util"])


def summary_report(p: Analysis, lo: int, hi: int) -> dict[str, Any]:
    ops = op_frame(p, lo, hi)
    elig = ops[ops["tc_eligible"]]
    denom = int(elig["kernel_sum"].sum())
    tc_util = 100.0 * int(elig["tc_gpu_sum"].sum()) / denom if denom else 0.0
    d = duration_breakdown(p, lo, hi).mean()
    wall = int(p.iterations.durations_ns()[lo : hi + 1].sum())
    return {
        "Wall Clock Time (ns)": wall,
        "Tensor Core Kernel Utilization %": round(tc_util, 2),
        "GPU Utilization %": round(float(d["gpu_util"]), 2),
        "Tensor Core Kernel Duration %": round(float(d["tc"]), 2),
        "Non-Tensor Core Kernel Duration %": round(float(d["non_tc"]), 2),
        "Memory Duration %": round(float(d["memory"]), 2),
        "Dataloader Duration %": round(float(d["dataloader"]), 2),
        "I/O Duration %": round(float(d["io"]), 2),
        "CPU Duration %": round(float(d["cpu"]), 2),
        "Other Duration %": round(float(d["other"]), 2),
    }


def all_ops(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """The summary's All Ops table (built once per range: the summary's CSV and JSON both
    show it, and its CPU times flatten every op's instances)."""
    return p.memo("all_ops", lo, hi, lambda: _all_ops(p, lo, hi)).copy()


def _all_ops(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    ops = op_frame(p, lo, hi)
    using = ops["tc_gpu_sum"] > 0
    # judged where the kernels are attributed: an eligible op that ran no GPU work of its own
    # (aten::addmm inside aten::linear, whose kernels are the linear's) is not "not using"
    elig_not = ops["tc_eligible"] & ~using & (ops["gpu_sum"] > 0)
    rows = {
        "All Op": np.ones(len(ops), bool),
        "Ops Using TC": using.to_numpy(),
        "Op eligible for TC but not using": elig_not.to_numpy(),
        "All other ops": (~using & ~elig_not).to_numpy(),
    }
    # CPU time: each thread's ranges flattened, so an op nested in another counts once
    # (summing the ops' totals counted a range once per level: docs/reports.md)
    cat = np.where(using, 0, np.where(elig_not, 1, 2))
    part = _flat_cpu(p, lo, hi, ops.index.to_numpy(), cat)
    every = _flat_cpu(p, lo, hi, ops.index.to_numpy(), np.zeros(len(ops), np.int64))
    cpu = {"All Op": int(every.get(0, 0))}
    cpu.update({name: int(part.get(k, 0)) for k, name in enumerate(list(rows)[1:])})
    return pd.DataFrame(
        {
            name: {
                "GPU Time (ns)": int(ops["gpu_sum"][m].sum()),
                "CPU Time (ns)": cpu[name],
                "# Ops": int(m.sum()),
            }
            for name, m in rows.items()
        }
    ).T


def all_kernels(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    kf = kernel_frame(p, lo, hi)
    if kf.empty:
        kf = pd.DataFrame(
            {"kernel": [], "uses_tc": [], "is_memory": [], "gpu_sum": [], "api_sum": []}
        )
    tc = kf["uses_tc"].astype(bool)
    mem = kf["is_memory"].astype(bool)
    rows = {
        "All Kernels": np.ones(len(kf), bool),
        "Kernels Using TC": tc.to_numpy(),
        "Memory": mem.to_numpy(),
        "All other kernels": (~tc & ~mem).to_numpy(),
    }
    return pd.DataFrame(
        {
            name: {
                "GPU Time (ns)": int(kf["gpu_sum"][m].sum()),
                "CPU Time (ns)": int(kf["api_sum"][m].sum()),
                "# Kernels": int(kf["kernel"][m].nunique()),
            }
            for name, m in rows.items()
        }
    ).T


def summary_tables(p: Analysis, lo: int, hi: int) -> dict[str, Any]:
    """The five tables of guide §10.2, keyed by table name then row name."""
    return {
        "System Config": system_config(p),
        "Summary Report": summary_report(p, lo, hi),
        "Iterations": iterations_table(p, lo, hi),
        "All Ops": all_ops(p, lo, hi).to_dict(orient="index"),
        "All Kernels": all_kernels(p, lo, hi).to_dict(orient="index"),
    }


def summary(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """The summary as one tidy frame: Table, Row Name, Column, Value (our CSV layout)."""
    rows = []
    for table, content in summary_tables(p, lo, hi).items():
        for row, val in content.items():
            if isinstance(val, dict):
                rows += [(table, row, col, v) for col, v in val.items()]
            else:
                rows.append((table, row, "Value", val))
    return pd.DataFrame(rows, columns=["Table", "Row Name", "Column", "Value"])
