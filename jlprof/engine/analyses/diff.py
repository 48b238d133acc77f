"""A/B diff of two profiles: pure, vectorised computation on per-key totals (no I/O, no reports).

The reports layer (:mod:`jlprof.reports.diff`) hands in one frame per side (one row per op,
kernel or op type with its totals over the aggregated iterations) and gets back one row per key
present on either side, with base/new values, their delta and a status. Times and calls are
divided by each side's iteration count when the counts differ (``normalise``), so a 5-iteration
run and an 8-iteration run compare per iteration, not in total.

Status of a row (``classify``), from the first value column (GPU time) where either side has
some, else the last (CPU or API time):

* ``added`` / ``removed``: the key is on one side only;
* ``unchanged``: ``|delta| <= max(NOISE_PCT % of base, NOISE_NS per iteration)``;
* ``slower`` / ``faster``: the delta is beyond that band, positive / negative.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

STATUSES = ("added", "removed", "slower", "faster", "unchanged")
# An op's time moving by less than this is noise: 2 % is the run-to-run jitter of a GPU clock
# (nsys-ai's noise floor for step time), 1 µs the cost of one kernel launch.
NOISE_PCT = 2.0
NOISE_NS = 1_000.0


def match_keys(
    base_ids: np.ndarray, base_names: np.ndarray, new_ids: np.ndarray, new_names: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The key each row is matched on: its op ID where both sides have that ID, else its name.

    PyTorch's forward and backward of one op share a name but not an ID, so IDs keep them apart
    where both profiles carry them; a profile without IDs (or another naming) falls back to names.
    """
    bi = np.asarray(base_ids, dtype=object)
    ni = np.asarray(new_ids, dtype=object)
    both = np.intersect1d(bi[bi != ""].astype(str), ni[ni != ""].astype(str))
    b_use = np.isin(bi.astype(str), both) & (bi != "")
    n_use = np.isin(ni.astype(str), both) & (ni != "")
    bk = np.where(b_use, "id:" + bi.astype(str), "name:" + np.asarray(base_names).astype(str))
    nk = np.where(n_use, "id:" + ni.astype(str), "name:" + np.asarray(new_names).astype(str))
    return bk.astype(object), nk.astype(object)


def _totals(df: pd.DataFrame, key: str, labels: list[str], values: list[str]) -> pd.DataFrame:
    agg: dict[str, Any] = {c: "first" for c in labels}
    agg.update({c: "sum" for c in values})
    return df.groupby(key, sort=False).agg(agg)


def classify(
    base: np.ndarray,
    new: np.ndarray,
    in_base: np.ndarray,
    in_new: np.ndarray,
    noise_pct: float = NOISE_PCT,
    noise_ns: float = NOISE_NS,
) -> np.ndarray:
    """Status of each row (module docstring), vectorised."""
    base = np.asarray(base, np.float64)
    delta = np.asarray(new, np.float64) - base
    band = np.maximum(noise_pct / 100.0 * np.abs(base), noise_ns)
    out = np.where(delta > band, "slower", np.where(delta < -band, "faster", "unchanged"))
    out = np.where(in_base & ~in_new, "removed", out)
    out = np.where(in_new & ~in_base, "added", out)
    return out.astype(object)


def diff_totals(
    base: pd.DataFrame,
    new: pd.DataFrame,
    *,
    key: str,
    labels: list[str],
    values: list[str],
    n_base: int,
    n_new: int,
    normalise: bool,
    noise_pct: float = NOISE_PCT,
    noise_ns: float = NOISE_NS,
) -> pd.DataFrame:
    """One row per key on either side: ``<label>``, ``base_<v>``, ``new_<v>``, ``delta_<v>`` for
    each value column, and ``status``; sorted by the first value's
    absolute delta, largest first.

    ``labels`` are taken from the new side where the key is there, else from the base side.
    With ``normalise`` every value is divided by its side's iteration count (floats); without,
    sums stay integers so deltas are exact. ``noise_ns`` is per iteration (scaled to totals).
    """
    b = _totals(base, key, labels, values)
    n = _totals(new, key, labels, values)
    keys = b.index.union(n.index, sort=False)
    b, n = b.reindex(keys), n.reindex(keys)
    in_b, in_n = keys.isin(base[key]), keys.isin(new[key])
    out = pd.DataFrame(index=keys)
    for c in labels:
        out[c] = n[c].where(in_n, b[c]).to_numpy(object)
    for c in values:
        bv = b[c].fillna(0).to_numpy(np.float64 if normalise else np.int64)
        nv = n[c].fillna(0).to_numpy(np.float64 if normalise else np.int64)
        if normalise:
            bv, nv = bv / max(n_base, 1), nv / max(n_new, 1)
        out[f"base_{c}"], out[f"new_{c}"], out[f"delta_{c}"] = bv, nv, nv - bv
    first, second = values[0], values[-1]
    use_first = (out[f"base_{first}"] != 0) | (out[f"new_{first}"] != 0)
    bsel = np.where(use_first, out[f"base_{first}"], out[f"base_{second}"])
    nsel = np.where(use_first, out[f"new_{first}"], out[f"new_{second}"])
    floor = noise_ns if normalise else noise_ns * max(n_base, 1)
    out["status"] = classify(bsel, nsel, in_b, in_n, noise_pct, floor)
    out.index.name = key
    d = out[f"delta_{first}"].to_numpy(np.float64)
    order = np.lexsort((-d, -np.abs(d)))  # biggest change first, slower before faster
    return out.iloc[order]


def distribution(durations_ns: np.ndarray) -> dict[str, float]:
    """Iteration-time statistics: count, mean, median, p10, p90, MAD (median absolute deviation
    from the median, unscaled), std (population), min, max; zeros for no iterations."""
    d = np.asarray(durations_ns, np.float64)
    if len(d) == 0:
        keys = ("count", "total", "mean", "median", "p10", "p90", "mad", "std", "min", "max")
        return dict.fromkeys(keys, 0.0)
    med = float(np.median(d))
    return {
        "count": float(len(d)),
        "total": float(d.sum()),
        "mean": float(d.mean()),
        "median": med,
        "p10": float(np.percentile(d, 10)),
        "p90": float(np.percentile(d, 90)),
        "mad": float(np.median(np.abs(d - med))),
        "std": float(d.std()),
        "min": float(d.min()),
        "max": float(d.max()),
    }


def median_standard_error(stats: dict[str, float]) -> float:
    """Standard error of a median from its MAD: σ ≈ 1.4826·MAD (normal data) and
    SE(median) ≈ 1.2533·σ/√n; 0 below 5 iterations, where a MAD says nothing."""
    n = stats["count"]
    if n < 5:
        return 0.0
    return 1.2533 * 1.4826 * stats["mad"] / float(np.sqrt(n))


__all__ = [
    "NOISE_NS",
    "NOISE_PCT",
    "STATUSES",
    "classify",
    "diff_totals",
    "distribution",
    "match_keys",
    "median_standard_error",
]
