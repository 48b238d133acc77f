"""Cross-rank reports from the ranks' aggregates (:mod:`jlprof.engine.analyses.ranks`).

* ``<profile_name>_ranks``: one row per rank (the issue's columns).
* ``<profile_name>_rank_iterations``: one row per rank × iteration (the heatmap's data).
* ``<profile_name>_ranks_expert_systems``: straggler, load imbalance, exposed communication.

Straggler rule (robust to the straggler itself): in each iteration, a rank's compute time is
an outlier when it exceeds the median across ranks by more than ``STRAGGLER_K`` scaled MADs
(1.4826·MAD estimates σ) and by at least ``STRAGGLER_MIN_FRAC`` of the median (so identical
ranks with a few ns of jitter flag nobody). A rank is a straggler when its median per-iteration
compute time is such an outlier among the ranks' medians; its outlying iterations are listed.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from jlprof import outputs
from jlprof.engine.analyses.ranks import RankAggregates
from jlprof.outputs import prepare_folder

STRAGGLER_K = 3.0
STRAGGLER_MIN_FRAC = 0.10
MAD_SIGMA = 1.4826
IMBALANCE_PCT = 10.0  # (max − mean) / max of per-iteration compute time across ranks
EXPOSED_COMM_PCT = 10.0  # exposed communication as a share of the iteration time
RANK_REPORTS = ("ranks", "rank_iterations", "ranks_expert_systems")


def _matrix(aggs: Sequence[RankAggregates], field: str) -> np.ndarray:
    """Rank × iteration matrix (float, NaN where a rank has fewer iterations)."""
    n_it = max((a.iterations for a in aggs), default=0)
    out = np.full((len(aggs), n_it), np.nan)
    for r, a in enumerate(aggs):  # one row per rank: a loop over ranks, not kernels
        v = getattr(a, field)
        out[r, : len(v)] = v
    return out


def _outliers(x: np.ndarray) -> np.ndarray:
    """Values above median + max(K·1.4826·MAD, MIN_FRAC·median), per column (axis 0 = ranks)."""
    with np.errstate(all="ignore"):
        med = np.nanmedian(x, axis=0)
        mad = np.nanmedian(np.abs(x - med), axis=0)
        margin = np.maximum(STRAGGLER_K * MAD_SIGMA * mad, STRAGGLER_MIN_FRAC * med)
        return np.nan_to_num(x - med, nan=-np.inf) > margin


def analyse(aggs: Sequence[RankAggregates]) -> dict[str, pd.DataFrame]:
    """The cross-rank tables, keyed by report name (see the module docstring)."""
    with warnings.catch_warnings():  # iterations outside a range are NaN: all-NaN medians
        warnings.simplefilter("ignore", RuntimeWarning)
        return _analyse(aggs)


def _analyse(aggs: Sequence[RankAggregates]) -> dict[str, pd.DataFrame]:
    full = {
        f: _matrix(aggs, f) for f in ("compute_ns", "comm_ns", "exposed_comm_ns", "iteration_ns")
    }
    n_ranks, n_it = full["compute_ns"].shape
    ids = np.array([a.rank for a in aggs], np.int64)
    # the per-rank figures, stragglers and expert rows cover each rank's aggregated range
    # (--iter_start/--iter_stop; all iterations by default); rank_iterations lists them all
    col = np.arange(n_it)[None, :]
    lo = np.array([a.iter_start for a in aggs], np.int64)[:, None]
    hi = np.array([a.iter_stop for a in aggs], np.int64)[:, None]
    out_of_range = (col < lo) | (col > hi)
    compute, comm, exposed, iters = (
        np.where(out_of_range, np.nan, full[f])
        for f in ("compute_ns", "comm_ns", "exposed_comm_ns", "iteration_ns")
    )
    flagged_it = _outliers(compute) if n_ranks > 2 else np.zeros_like(compute, bool)
    with np.errstate(all="ignore"):
        per_rank = np.nanmedian(compute, axis=1) if n_it else np.zeros(n_ranks)
    straggler = _outliers(per_rank[:, None])[:, 0] if n_ranks > 2 else np.zeros(n_ranks, bool)
    comm_tot = np.nansum(comm, axis=1)
    exp_tot = np.nansum(exposed, axis=1)
    counts = (~np.isnan(iters)).sum(axis=1).astype(np.int64)
    with np.errstate(all="ignore"):
        overlap = np.where(comm_tot > 0, 100.0 * (comm_tot - exp_tot) / comm_tot, 0.0)
        # as the summary's Average Iteration Time: the partial first/last intervals left out
        # when the rank's range holds complete ones (engine.analyses.outliers)
        n_r = np.array([a.iterations for a in aggs], np.int64)[:, None]
        cut = np.array([a.key_node is not None for a in aggs])[:, None] & (n_r >= 3)
        partial = cut & ((col == 0) | (col == n_r - 1))
        whole = np.where(partial, np.nan, iters)
        n_whole = (~np.isnan(whole)).sum(axis=1)
        steady = np.where(n_whole[:, None] > 0, whole, iters)
        n_steady = (~np.isnan(steady)).sum(axis=1)
        avg_iter = np.where(n_steady > 0, np.nansum(steady, axis=1) / np.maximum(n_steady, 1), 0.0)
    ranks = pd.DataFrame(
        {
            "Rank": ids,
            "Database": [a.database for a in aggs],
            "Key Node": [a.key_node or "" for a in aggs],
            "Total GPU Time (ns)": (np.nansum(compute, axis=1) + comm_tot).astype(np.int64),
            "Compute Time (ns)": np.nansum(compute, axis=1).astype(np.int64),
            "Iterations": counts,
            "Avg. Iteration Time (ns)": avg_iter.round(1),
            "Communication Time (ns)": comm_tot.astype(np.int64),
            "Exposed Communication Time (ns)": exp_tot.astype(np.int64),
            "Compute/Communication Overlap %": overlap.round(2),
            "Straggler": straggler,
            "Straggler Iterations": [
                " ".join(str(i) for i in np.flatnonzero(flagged_it[r])) if straggler[r] else ""
                for r in range(n_ranks)
            ],
        }
    )
    rr, ii = np.nonzero(~np.isnan(full["compute_ns"]))
    per_it = pd.DataFrame(
        {
            "Rank": ids[rr],
            "Iteration": ii.astype(np.int64),
            "Iteration Time (ns)": full["iteration_ns"][rr, ii].astype(np.int64),
            "Compute Time (ns)": full["compute_ns"][rr, ii].astype(np.int64),
            "Communication Time (ns)": full["comm_ns"][rr, ii].astype(np.int64),
            "Exposed Communication Time (ns)": full["exposed_comm_ns"][rr, ii].astype(np.int64),
            "Outlier": flagged_it[rr, ii],
        }
    )
    return {
        "ranks": ranks,
        "rank_iterations": per_it,
        "ranks_expert_systems": _expert(ids, straggler, compute, iters, exposed, flagged_it),
    }


def _expert(
    ids: np.ndarray,
    straggler: np.ndarray,
    compute: np.ndarray,
    iters: np.ndarray,
    exposed: np.ndarray,
    flagged: np.ndarray,
) -> pd.DataFrame:
    rows = []
    for r in np.flatnonzero(straggler):
        its = [int(i) for i in np.flatnonzero(flagged[r])]
        with np.errstate(all="ignore"):
            ratio = float(np.nanmedian(compute[r]) / np.nanmedian(compute))
        rows.append(
            (
                f"Rank {ids[r]} is a straggler: its compute time per iteration is {ratio:.2f}x the "
                f"median rank's (iterations {_span(its)}).",
                f"Look at rank {ids[r]}'s own reports (rank{ids[r]}/): a slower GPU, throttling, "
                "a different input size or extra work on that rank slows every other rank at "
                "the next collective.",
                "Straggler Detector",
                {"rank": int(ids[r]), "iterations": its, "ratio_to_median": round(ratio, 3)},
            )
        )
    if compute.size and compute.shape[0] > 1:
        with np.errstate(all="ignore"):
            mx = np.nanmax(compute, axis=0)
            imb = np.where(mx > 0, 100.0 * (mx - np.nanmean(compute, axis=0)) / mx, 0.0)
        bad = np.flatnonzero(imb > IMBALANCE_PCT)
        if len(bad):
            busiest = ids[np.nanargmax(compute[:, bad], axis=0)]
            worst = int(bad[np.argmax(imb[bad])])
            rows.append(
                (
                    f"Load imbalance across ranks above {IMBALANCE_PCT:.0f}% in {len(bad)} "
                    f"iteration(s) (worst: iteration {worst}, {imb[worst]:.1f}%); busiest "
                    f"rank(s): {', '.join(str(int(b)) for b in sorted(set(busiest.tolist())))}.",
                    "Balance the work per rank (batch or shard sizes, sequence lengths); the "
                    "others wait for the busiest rank at every collective.",
                    "Load Imbalance Detector",
                    {
                        "iterations": [int(i) for i in bad],
                        "imbalance_pct": [round(float(imb[i]), 2) for i in bad],
                        "busiest_ranks": [int(b) for b in busiest],
                    },
                )
            )
    with np.errstate(all="ignore"):
        share = np.where(iters > 0, 100.0 * exposed / iters, 0.0)
    share = np.nan_to_num(share)
    hit = np.flatnonzero((share > EXPOSED_COMM_PCT).any(axis=1))
    if len(hit):
        per_rank = {
            int(ids[r]): [int(i) for i in np.flatnonzero(share[r] > EXPOSED_COMM_PCT)] for r in hit
        }
        worst = int(hit[np.argmax(share[hit].max(axis=1))])
        rows.append(
            (
                f"Exposed communication (NCCL kernels not overlapped by compute) is over "
                f"{EXPOSED_COMM_PCT:.0f}% of the iteration time on {len(hit)} rank(s): "
                f"{_span([int(ids[r]) for r in hit])} (worst: rank {ids[worst]}, "
                f"{share[worst].max():.1f}% in iteration {int(np.argmax(share[worst]))}).",
                "Overlap communication with compute: bucket gradients (DDP bucket_cap_mb), "
                "start all-reduce during the backward pass, or use a faster interconnect.",
                "Exposed Communication Detector",
                {
                    "ranks": [int(ids[r]) for r in hit],
                    "iterations": per_rank,
                    "max_pct": [round(float(share[r].max()), 2) for r in hit],
                },
            )
        )
    return pd.DataFrame(
        [(p, rec, d, json.dumps(ev)) for p, rec, d, ev in rows],
        columns=["Problem", "Recommendation", "Detector", "Evidence"],
    )


def _span(its: list[int]) -> str:
    if not its:
        return "none"
    if its == list(range(its[0], its[-1] + 1)) and len(its) > 2:
        return f"{its[0]}..{its[-1]}"
    return ", ".join(str(i) for i in its[:20]) + (" …" if len(its) > 20 else "")


def write_rank_reports(
    tables: dict[str, pd.DataFrame],
    output: Path,
    profile_name: str,
    formats: Sequence[str],
    force: bool,
) -> list[Path]:
    """Write the cross-rank tables as ``<profile_name>_<report>.<ext>`` (whole or not at all)."""
    from jlprof.reports.encoders import WRITERS
    from jlprof.reports.writers import report_path

    prepare_folder(output)
    done = []
    for name, df in tables.items():
        for fmt in formats:
            target = report_path(output, profile_name, name, fmt)
            if target.exists() and not force:
                continue
            with outputs.written_file(target, background=fmt != "parquet") as f:
                WRITERS[fmt](df, f)
            done.append(target)
    return done
