"""Iterations from a key node (guide ch. 7 and 9; DESIGN.md rule 5).

N key-node instances, ordered by end time, split the profile into N+1 intervals
``[t_first, e1), [e1, e2), …, [eN, t_last]``. With several GPUs (data parallel: one
process per GPU) and the same instance count in each process, boundary k is the
latest k-th end across processes; otherwise every instance anywhere is a boundary.

Choice (documented in docs/reports.md): iteration 0 starts at the first recorded event,
not at the session's time 0, so nsys start-up before the first event is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from jlprof.engine.correlate.correlate import Correlated
from jlprof.engine.read.trace import GLOBAL_PID_MASK

DEFAULT_KEY_NODE = "global_step"


@dataclass
class Iterations:
    """Boundaries of the iterations found for one key node."""

    key_node: str | None  # None: not found, the whole profile is one iteration
    bounds_ns: np.ndarray  # K+1 edges for K intervals (K = instances + 1, or 1)
    instances: int  # key-node instances found (0 when not found)

    @property
    def count(self) -> int:
        """Number of iteration intervals (N+1 for N instances; 1 when none were found)."""
        return len(self.bounds_ns) - 1

    def of(self, t_ns: np.ndarray) -> np.ndarray:
        """Iteration index of each timestamp (times past the ends clip to the first/last)."""
        idx = np.searchsorted(self.bounds_ns[1:-1], np.asarray(t_ns, np.int64), side="right")
        return idx.astype(np.int64)

    def durations_ns(self) -> np.ndarray:
        return np.diff(self.bounds_ns)


def key_node_instances(c: Correlated, key_node: str) -> np.ndarray:
    """Rows of ``c.inst`` whose op name, op ID or hierarchy path equals ``key_node``."""
    ops = c.ops
    match = (ops["op_name"] == key_node) | (ops["op_id"] == key_node)
    op_hit = np.flatnonzero(match.to_numpy())
    rows = np.flatnonzero(np.isin(c.inst["op"].to_numpy(), op_hit))
    if len(rows) == 0 and len(c.paths):
        p = np.flatnonzero((c.paths["path"] == key_node).to_numpy())
        rows = np.flatnonzero(np.isin(c.inst["path"].to_numpy(), p))
    return rows[~c.inst["synthetic"].to_numpy()[rows]]


def find_iterations(c: Correlated, key_node: str | None) -> Iterations:
    """Split the profile at the key node's instances (one interval when it is absent)."""
    t0, t1 = c.t_first_ns, max(c.t_last_ns, c.t_first_ns + 1)
    whole = Iterations(key_node=None, bounds_ns=np.array([t0, t1], dtype=np.int64), instances=0)
    if not key_node:
        return whole
    rows = key_node_instances(c, key_node)
    if len(rows) == 0:
        return whole
    ends = c.inst["end_ns"].to_numpy(np.int64)[rows]
    pids = c.inst["global_tid"].to_numpy(np.int64)[rows] & GLOBAL_PID_MASK
    counts = pd.Series(pids).value_counts()
    if len(counts) > 1 and counts.nunique() == 1:
        # data parallel: k-th instance of every process; boundary = the latest of them
        df = pd.DataFrame({"pid": pids, "end": ends}).sort_values(["pid", "end"])
        df["k"] = df.groupby("pid").cumcount()
        cuts = df.groupby("k")["end"].max().to_numpy(np.int64)
    else:
        cuts = np.sort(ends)
    # N instances always give N+1 intervals (guide ch. 7), even when one is empty
    bounds = np.concatenate([[t0], np.clip(cuts, t0, t1), [t1]]).astype(np.int64)
    return Iterations(key_node=key_node, bounds_ns=bounds, instances=len(rows))


#: candidates re-ranked by how they partition the work (each costs a search of its
#: boundaries in the sorted launch times: O(calls log rows), not a pass over the rows)
SUGGEST_POOL = 64
SUGGEST_COLUMNS = ["op_name", "op_id", "calls", "period_cv", "coverage", "work_cv", "score"]


def _work(c: Correlated, gpu_ns: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(sorted times, cumulative weight) of the work iterations divide: each op instance's
    GPU time (``gpu_ns``, ``InstanceMetrics.gpu_ns``: unassociated work included) at its
    start, as the cube assigns an op's figures to iterations; without GPU time (or without
    ``gpu_ns``: the key node is being checked, before any metrics) the op calls, one each.
    Both engines hold the instances and their metrics, so both rank alike."""
    start = c.inst["start_ns"].to_numpy(np.int64)
    if gpu_ns is not None and len(gpu_ns) == len(start) and int(np.sum(gpu_ns)) > 0:
        at, w = start, np.asarray(gpu_ns, np.float64)
    else:
        real = ~c.inst["synthetic"].to_numpy(bool)
        at, w = start[real], np.ones(int(real.sum()))
    order = np.argsort(at, kind="stable")
    return at[order], np.concatenate([[0.0], np.cumsum(w[order])])


def _self_nested(inst: pd.DataFrame, name: np.ndarray) -> pd.Series:
    """Per op name: True when an instance of it starts inside another on the same thread."""
    df = pd.DataFrame(
        {
            "name": name,
            "tid": inst["global_tid"].to_numpy(),
            "start": inst["start_ns"].to_numpy(np.int64),
            "end": inst["end_ns"].to_numpy(np.int64),
        }
    ).sort_values(["name", "tid", "start"], kind="stable")
    reach = df.groupby(["name", "tid"], sort=False)["end"].cummax()
    prev = reach.groupby([df["name"], df["tid"]], sort=False).shift(1)
    return (df["start"] < prev).groupby(df["name"]).any()


def suggest_key_nodes(
    c: Correlated, limit: int = 5, gpu_ns: np.ndarray | None = None
) -> pd.DataFrame:
    """Rank op names as key nodes by how well they partition the work (docs/reports.md).

    A key node splits the run at its instances' ends (:func:`find_iterations`, as
    ``--key_node=<op_name>`` would). A good one is not nested in itself (a range that
    encloses its own later instances splits nothing: excluded), leaves most of the work
    (``gpu_ns``: each op instance's GPU time at its start; the op calls without it) inside
    complete iterations (``coverage``), gives the complete iterations equal work
    (``work_cv``, the coefficient of variation of their work) and equal lengths
    (``period_cv``). Score, higher better: coverage / (1 + 2 work_cv + 2 period_cv)
    x min(complete iterations, 3) / 3 x (1 - 0.2 x the share of its instances inside
    another range), so of equal partitions the outermost range (the step) comes first.
    """
    keep = ~c.inst["synthetic"].to_numpy(bool)
    inst = c.inst.loc[keep]
    empty = pd.DataFrame(columns=SUGGEST_COLUMNS)
    if len(inst) == 0:
        return empty
    op_name = c.ops["op_name"].astype(str).to_numpy(object)
    name = op_name[inst["op"].to_numpy()]
    df = pd.DataFrame(
        {
            "name": name,
            "pid": inst["global_tid"].to_numpy(np.int64) & GLOBAL_PID_MASK,
            "start": inst["start_ns"].to_numpy(np.int64),
            "inside": inst["parent"].to_numpy() >= 0,
        }
    ).sort_values(["name", "pid", "start"], kind="stable")
    calls = df.groupby("name", sort=False).size()
    inside = df.groupby("name", sort=False)["inside"].mean()
    per_pid = df.groupby(["name", "pid"], sort=False).size().groupby(level=0)
    # boundaries find_iterations makes: per process when every process has as many
    data_parallel = (per_pid.size() > 1) & (per_pid.nunique() == 1)
    bounds = calls.where(~data_parallel, per_pid.max())
    nested = _self_nested(inst, name).reindex(calls.index).fillna(False).to_numpy(bool)
    pool = calls[(bounds >= 2).to_numpy() & ~nested]  # a complete iteration at least
    if pool.empty:
        return empty
    # a cheap first cut when there are many: regular starts within each process, many
    same = (df["name"] == df["name"].shift()) & (df["pid"] == df["pid"].shift())
    gap = df["start"].diff().where(same)
    g = gap.groupby(df["name"], sort=False)
    gcv = (g.std(ddof=0) / g.mean()).reindex(pool.index).fillna(0.0)
    pre = np.log1p(bounds.reindex(pool.index)) / (1.0 + 4.0 * gcv)
    pool = pool.loc[pre.sort_values(ascending=False, kind="stable").index[:SUGGEST_POOL]]
    t, cum = _work(c, gpu_ns)
    total = float(cum[-1]) or 1.0
    op_id = pd.Series(c.ops["op_id"].astype(str).to_numpy(object), index=op_name)
    op_id = op_id[~op_id.index.duplicated()]
    rows = []
    for nm in pool.index:
        it = find_iterations(c, nm)
        inner = it.bounds_ns[1:-1]  # the complete iterations lie between these
        if len(inner) < 2:
            continue
        at = np.searchsorted(t, inner, side="left")
        work = np.diff(cum[at])
        dur = np.diff(inner).astype(np.float64)
        coverage = float(work.sum()) / total
        work_cv = float(work.std() / work.mean()) if work.mean() > 0 else 1.0
        period_cv = float(dur.std() / dur.mean()) if dur.mean() > 0 else 1.0
        score = coverage / (1.0 + 2.0 * work_cv + 2.0 * period_cv) * min(len(dur), 3) / 3
        score *= 1.0 - 0.2 * float(inside[nm])  # the outermost of equals: the step itself
        rows.append((nm, op_id.get(nm, nm), int(pool[nm]), period_cv, coverage, work_cv, score))
    if not rows:
        return empty
    out = pd.DataFrame(rows, columns=SUGGEST_COLUMNS)
    for col in ("period_cv", "coverage", "work_cv", "score"):
        out[col] = out[col].round(3)
    return (
        out.sort_values(["score", "calls"], ascending=False, kind="stable")
        .head(limit)
        .reset_index(drop=True)
    )
