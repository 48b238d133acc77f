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

from jlprof.engine.correlate import Correlated
from jlprof.engine.trace import GLOBAL_PID_MASK

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


def suggest_key_nodes(c: Correlated, limit: int = 5) -> pd.DataFrame:
    """Rank ops that look like iteration markers (guide §12.3).

    A good key node recurs once per period: its instances are evenly spaced (low
    coefficient of variation of the gaps between starts), there are several of them,
    and it comes early in each period (small offset from the period start, measured
    as the share of the ops that start between two of its instances and before it).
    Returns op_name, op_id, calls, period_cv, score (higher is better).
    """
    inst = c.inst.loc[~c.inst["synthetic"].to_numpy()]
    if len(inst) == 0:
        return pd.DataFrame(columns=["op_name", "op_id", "calls", "period_cv", "score"])
    g = inst.groupby("op", sort=False)["start_ns"]
    stats = pd.DataFrame({"calls": g.size(), "first": g.min(), "last": g.max()})
    stats = stats[stats["calls"] >= 2]
    if stats.empty:
        return pd.DataFrame(columns=["op_name", "op_id", "calls", "period_cv", "score"])
    srt = inst.sort_values(["op", "start_ns"])
    gaps = srt.groupby("op")["start_ns"].diff()
    cv = (gaps.groupby(srt["op"]).std(ddof=0) / gaps.groupby(srt["op"]).mean()).reindex(stats.index)
    stats["period_cv"] = cv.fillna(0.0).to_numpy()
    # how early in the profile the first instance comes, relative to the period
    period = (stats["last"] - stats["first"]) / (stats["calls"] - 1).clip(lower=1)
    lead = ((stats["first"] - c.t_first_ns) / period.replace(0, np.nan)).fillna(1.0).clip(0, 1)
    depth = (
        pd.Series(inst["parent"].to_numpy() >= 0, index=inst.index)
        .groupby(inst["op"])
        .mean()
        .reindex(stats.index)
        .fillna(0)
    )
    stats["score"] = (
        np.log1p(stats["calls"])
        / (1.0 + 4.0 * stats["period_cv"])
        * (1.0 - 0.3 * lead)
        * (1.0 - 0.2 * depth)
    )
    ops = c.ops.loc[stats.index]
    out = pd.DataFrame(
        {
            "op_name": ops["op_name"].to_numpy(),
            "op_id": ops["op_id"].to_numpy(),
            "calls": stats["calls"].to_numpy(np.int64),
            "period_cv": stats["period_cv"].round(3).to_numpy(),
            "score": stats["score"].round(3).to_numpy(),
        }
    )
    return out.sort_values(["score", "calls"], ascending=False).head(limit).reset_index(drop=True)
