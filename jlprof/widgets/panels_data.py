"""What the Viewer panels show (DLProf Viewer's System Config, Op Type, GPUs, Top 10 GPU Ops,
Kernels by Iteration, Iterations by Op, resource usage, Ops and Kernels), as plain frames.

No Bokeh here, like :mod:`jlprof.widgets.data`: every function takes an Analysis and an
inclusive iteration range and returns pandas data built from the reports' public frames and
the cube's per-iteration partials, so the tests check each number against the reports or an
independent computation without a browser. ``panels`` turns them into Bokeh sources.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jlprof.engine.aggregate.aggregate import flat_cpu_ns, index_levels, per_iteration
from jlprof.reports.tables import (
    duration_breakdown,
    kernel_frame,
    op_frame,
    summary_report,
    system_config,
)
from jlprof.widgets.data import (
    CATEGORY_LABELS,
    ITER_CATEGORIES,
    KERNEL_TABLE_COLUMNS,
    kernel_table_rows,
)

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

NOT_RECORDED = "not recorded"
TOP_N = 10  # DLProf Viewer's "Top 10 GPU Ops"

# the host rows of System Config: (label, keys of the export's metadata tables, first found)
HOST_ROWS = (
    ("Host Name", ("Hostname", "HostName", "hostname", "Host")),
    ("Operating System", ("OsDescription",)),
    ("CPU Cores", ("CpuCores",)),
    ("CPU Architecture", ("CpuArchitecture",)),
    ("Linux Kernel", ("SoftwareReleaseVersion",)),
)


def system_config_rows(p: Analysis) -> pd.DataFrame:
    """The summary's System Config (guide §10.2) plus one row per GPU and the host rows;
    a value the export does not carry reads "not recorded" (never blank, never guessed)."""
    cfg = {k: v for k, v in system_config(p).items() if k != "DLProf Build"}
    meta = p.trace.meta
    for label, keys in HOST_ROWS:
        cfg[label] = next((meta[k] for k in keys if meta.get(k)), "")
    gpus = p.trace.gpus.sort_values("cu_device", kind="stable")
    for dev, name in zip(gpus["cu_device"], gpus["name"], strict=True):
        cfg[f"GPU {int(dev)}"] = str(name)
    out = pd.DataFrame({"Setting": list(cfg), "Value": [str(v) for v in cfg.values()]})
    out.loc[out["Value"].str.strip() == "", "Value"] = NOT_RECORDED
    return out


def op_types(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Op Type view: the op-type report's figures (guide §10.7) by GPU time, with each
    type's share of all ops' GPU time.

    Summed from the range's op frame by type code with ``np.bincount`` (the report's
    group-by with its Min/Max columns costs ~6 ms of a 1M-kernel range change); the tests
    check it against the op-type report."""
    f = op_frame(p, lo, hi)
    codes, types = _type_codes(p)
    c = codes[f.index.to_numpy(np.int64)]
    n = len(types)

    def total(col: str) -> np.ndarray:
        return np.bincount(c, weights=f[col].to_numpy(np.float64), minlength=n).astype(np.int64)

    nodes = np.bincount(c, minlength=n)
    elig = np.bincount(c, weights=f["tc_eligible"].to_numpy(bool), minlength=n) > 0
    using = np.bincount(c, weights=(f["tc_gpu_sum"] > 0).to_numpy(bool), minlength=n) > 0
    gpu = total("gpu_sum")
    out = pd.DataFrame(
        {
            "op_type": types,
            "nodes": nodes.astype(np.int64),
            "calls": total("calls"),
            "gpu_ns": gpu,
            # nested instances of a type count once, as in the op-type report
            "cpu_ns": flat_cpu_ns(p.correlated, p.cube.inst_iter, lo, hi, _op_codes(p, c, f), n),
            "gpu_pct": 100.0 * gpu / max(int(gpu.sum()), 1),
            "tc_eligible": elig,
            "using_tc": using,
        }
    )[nodes > 0]
    # the report's order: GPU time, descending; ties by type name
    return out.sort_values("gpu_ns", ascending=False, kind="stable").reset_index(drop=True)


def _op_codes(p: Analysis, codes: np.ndarray, f: pd.DataFrame) -> np.ndarray:
    """Each op's code (of the range's op frame ``f``), -1 for ops outside the range."""
    out = np.full(len(p.correlated.ops), -1, np.int64)
    out[f.index.to_numpy(np.int64)] = codes
    return out


def _type_codes(p: Analysis) -> tuple[np.ndarray, np.ndarray]:
    """Each op's type as a code into the sorted type names (once per profile)."""

    def build() -> tuple[np.ndarray, np.ndarray]:
        codes, uniq = pd.factorize(p.correlated.ops["op_type"].astype(str), sort=True)
        return codes.astype(np.int64), np.asarray(uniq, dtype=object)

    return p.once("panels.type_codes", build)


def gpus(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """GPUs view: per visible GPU, utilisation and the summary's duration categories (% of
    the range's wall time), as the summary's averages over GPUs are made of."""
    d = duration_breakdown(p, lo, hi)
    labels = p.gpu_labels
    out = pd.DataFrame({"gpu": [_lane_label(labels, int(i)) for i in d.index]})
    out["gpu_util_pct"] = d["gpu_util"].to_numpy(np.float64)
    for c in ITER_CATEGORIES:
        out[f"{c}_pct"] = d[c].to_numpy(np.float64)
    return out


def _lane_label(labels: list[str], lane: int) -> str:
    return labels[lane] if 0 <= lane < len(labels) else "host (no GPU)"


def resource_usage(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """The resource-usage pie: the summary's "... Duration %" rows (they partition the wall
    time), as wedges with start/end angles in radians."""
    rep = summary_report(p, lo, hi)
    rows = {
        "tc": "Tensor Core Kernel Duration %",
        "non_tc": "Non-Tensor Core Kernel Duration %",
        "memory": "Memory Duration %",
        "dataloader": "Dataloader Duration %",
        "io": "I/O Duration %",
        "cpu": "CPU Duration %",
        "other": "Other Duration %",
    }
    pct = np.array([float(rep[r]) for r in rows.values()])
    total = pct.sum()
    frac = pct / total if total > 0 else np.zeros(len(pct))
    end = 2 * np.pi * np.cumsum(frac)
    return pd.DataFrame(
        {
            "category": list(rows),
            "label": [CATEGORY_LABELS[c] for c in rows],
            "pct": pct,
            "start_angle": np.concatenate([[0.0], end[:-1]]),
            "end_angle": end,
        }
    )


KERNEL_PIE = (("tc", "Kernels using TC"), ("non_tc", "Other kernels"), ("memory", "Memory"))


def kernel_gpu_time(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """The "Total Kernel GPU Time" pie (DLProf Viewer's kernel pie): the range's GPU time of
    kernels using Tensor Cores, of the other kernels and of memory work (copies, sets), as
    wedges with their ns, % of the total and start/end angles in radians."""
    kf = kernel_frame(p, lo, hi)
    gpu = kf["gpu_sum"].to_numpy(np.int64) if len(kf) else np.zeros(0, np.int64)
    mem = kf["is_memory"].to_numpy(bool) if len(kf) else np.zeros(0, bool)
    tc = kf["uses_tc"].to_numpy(bool) if len(kf) else np.zeros(0, bool)
    ns = np.array([gpu[tc & ~mem].sum(), gpu[~tc & ~mem].sum(), gpu[mem].sum()], np.int64)
    total = int(ns.sum())
    frac = ns / total if total else np.zeros(len(ns))
    end = 2 * np.pi * np.cumsum(frac)
    return pd.DataFrame(
        {
            "category": [c for c, _ in KERNEL_PIE],
            "label": [lbl for _, lbl in KERNEL_PIE],
            "gpu_ns": ns,
            "pct": 100.0 * frac,
            "start_angle": np.concatenate([[0.0], end[:-1]]),
            "end_angle": end,
        }
    )


def ops(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Every op of the profile (rows in the op table's fixed order: ``op``, the op's row in
    the engine's op table) with its figures for the range; ops without instances in the range
    get zeros. Columns: op, op_id, op_name, op_type, calls, gpu_ns, cpu_ns, tc_eligible,
    using_tc. A fixed row set lets the page receive the names once (see panels)."""
    all_ops = p.correlated.ops
    n = len(all_ops)
    f = op_frame(p, lo, hi)
    idx = f.index.to_numpy(np.int64)

    def spread(col: str, dtype: type) -> np.ndarray:
        out = np.zeros(n, dtype=dtype)
        out[idx] = f[col].to_numpy(dtype)
        return out

    return pd.DataFrame(
        {
            "op": np.arange(n, dtype=np.int64),
            "op_id": all_ops["op_id"].astype(str).to_numpy(object),
            "op_name": all_ops["op_name"].astype(str).to_numpy(object),
            "op_type": all_ops["op_type"].astype(str).to_numpy(object),
            "calls": spread("calls", np.int64),
            "gpu_ns": spread("gpu_sum", np.int64),
            "cpu_ns": spread("cpu_sum", np.int64),
            "tc_eligible": all_ops["tc_eligible"].to_numpy(bool),
            "using_tc": spread("tc_gpu_sum", np.int64) > 0,
        }
    )


def top_ops(
    p: Analysis, lo: int, hi: int, n: int = TOP_N, all_ops: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Top 10 GPU Ops: the ops with the most GPU time in the range (ties: more CPU time,
    then the op table's order), with their share of all ops' GPU time. ``all_ops``: the
    range's :func:`ops`, when the caller has it already."""
    o = ops(p, lo, hi) if all_ops is None else all_ops
    o = o[o["calls"] > 0]
    order = np.lexsort((o["op"].to_numpy(), -o["cpu_ns"].to_numpy(), -o["gpu_ns"].to_numpy()))
    top = o.iloc[order[:n]].reset_index(drop=True)
    total = int(o["gpu_ns"].sum())
    top["gpu_pct"] = 100.0 * top["gpu_ns"] / total if total else 0.0
    return top


def op_kernels(p: Analysis, lo: int, hi: int, op: int) -> pd.DataFrame:
    """Ops and Kernels drill-down: the kernel-table rows (guide §10.5) of one op, by GPU
    time, plus each kernel's code (``kernel``) for the next step (its iterations)."""
    kf = kernel_frame(p, lo, hi)
    if kf.empty:
        return pd.DataFrame(columns=["kernel", *KERNEL_TABLE_COLUMNS])
    kf = kf[kf["op"].to_numpy(np.int64) == op]
    out = kernel_table_rows(kf)
    out.insert(0, "kernel", kf["kernel"].to_numpy(np.int64))
    order = np.argsort(-out["Total GPU Time (ns)"].to_numpy(), kind="stable")
    return out.iloc[order].reset_index(drop=True)


def _iteration_frame(lo: int, hi: int) -> pd.DataFrame:
    return pd.DataFrame({"iteration": np.arange(lo, hi + 1, dtype=np.int64)})


def _levels(p: Analysis, which: str) -> tuple[np.ndarray, ...]:
    """The index levels of the cube's ``op_iter`` or ``kernel_iter`` as arrays, once per key
    node. The cube keeps those rows in (group, iteration) order, so one group's rows in a
    range are found by binary search (a mask over ~600k rows costs ~5 ms per pick). Each
    int32 when its values fit, as the cube holds its columns (6M rows at 10M kernels)."""
    frame = per_iteration(getattr(p.cube, which))  # a range-only profile's: combined
    return p.once(f"panels.levels:{which}:{p.key_node}", lambda: index_levels(frame))


def _rows(keys: tuple[np.ndarray, ...], want: tuple[int, ...], lo: int, hi: int) -> np.ndarray:
    """Rows whose group levels equal ``want`` and iteration lies in lo..hi, in iteration
    order, given rows sorted by (group levels, iteration)."""
    a, b = 0, len(keys[0])
    for level, v in zip(keys[:-1], want, strict=True):
        a, b = (
            a + np.searchsorted(level[a:b], v, "left"),
            a + np.searchsorted(level[a:b], v, "right"),
        )
    its = keys[-1][a:b]
    return np.arange(a + np.searchsorted(its, lo, "left"), a + np.searchsorted(its, hi, "right"))


def iterations_by_op(p: Analysis, lo: int, hi: int, op: int) -> pd.DataFrame:
    """Iterations by Op: one row per iteration of the range, the op's calls, GPU and CPU time
    in it (zeros where it did not run), from the cube's per-(op, iteration) partials."""
    oi = per_iteration(p.cube.op_iter)
    keys = _levels(p, "op_iter")
    sel = _rows(keys, (op,), lo, hi)
    out = _iteration_frame(lo, hi)
    at = keys[-1][sel] - lo
    for col, src in (("calls", "calls"), ("gpu_ns", "gpu_sum"), ("cpu_ns", "cpu_sum")):
        v = np.zeros(len(out), np.int64)
        v[at] = oi[src].to_numpy()[sel]  # the cube may hold int32
        out[col] = v
    return out


def kernel_iterations(p: Analysis, lo: int, hi: int, kernel: int, op: int) -> pd.DataFrame:
    """A kernel's iterations (the drill-down's last step): calls and GPU time of one
    (kernel, op) pair per iteration of the range (``op`` -1: launched outside every op)."""
    ki = per_iteration(p.cube.kernel_iter)
    keys = _levels(p, "kernel_iter")
    sel = _rows(keys, (kernel, op), lo, hi)
    out = _iteration_frame(lo, hi)
    at = keys[-1][sel] - lo
    for col, src in (("calls", "calls"), ("gpu_ns", "gpu_sum")):
        v = np.zeros(len(out), np.int64)
        v[at] = ki[src].to_numpy()[sel]  # the cube may hold int32
        out[col] = v
    return out


def _kernels_per_iteration(p: Analysis) -> pd.DataFrame:
    """Per iteration of the key node: kernels launched, their GPU time split TC / non-TC,
    and memory activities' time (once per key node; a range change only slices it)."""

    def build() -> pd.DataFrame:
        ki = per_iteration(p.cube.kernel_iter)
        n = p.iterations.count
        k = ki.index.get_level_values("kernel").to_numpy(np.int64)
        its = ki.index.get_level_values("iteration").to_numpy(np.int64)
        ok = (its >= 0) & (its < n)
        flags = p.kernel_flags
        tc = flags["uses_tc"].to_numpy(bool)[k]
        mem = flags["is_memory"].to_numpy(bool)[k]
        gpu = ki["gpu_sum"].to_numpy(np.float64)
        calls = ki["calls"].to_numpy(np.float64)

        def per_it(w: np.ndarray, where: np.ndarray) -> np.ndarray:
            m = ok & where
            return np.bincount(its[m], weights=w[m], minlength=n).astype(np.int64)

        return pd.DataFrame(
            {
                "iteration": np.arange(n, dtype=np.int64),
                "kernels": per_it(calls, ~mem),
                "tc_ns": per_it(gpu, tc & ~mem),
                "non_tc_ns": per_it(gpu, ~tc & ~mem),
                "memory_ns": per_it(gpu, mem),
            }
        )

    return p.once(f"panels.kernels_per_iteration:{p.key_node}", build)


def kernels_by_iteration(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Kernels by Iteration: per iteration of the range, kernels launched and GPU time
    (TC kernels, other kernels, memory activities), by the launching call's iteration as
    the iteration report (guide §10.4) assigns them."""
    return _kernels_per_iteration(p).iloc[lo : hi + 1].reset_index(drop=True)
