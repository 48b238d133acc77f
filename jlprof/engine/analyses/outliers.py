"""Robust outlier iterations, and which intervals are partial.

N key-node instances split a profile into N+1 intervals (``iterations``): the first runs from
the first recorded event to the end of the first key-node instance (start-up, warm-up), the
last from the last instance to the end of the capture (a tail). Both are *partial*: they are
not training steps like the others, so the iteration-time mean and standard deviation leave
them out by default (``include_partial=False``) and say so. They are never outliers.

An iteration is an *outlier* when its duration exceeds the median of the complete
iterations by more than :data:`OUTLIER_K` scaled MADs (MAD x 1.4826, which estimates the
standard deviation of a normal sample; median and MAD are not moved by the outliers
themselves, unlike mean and std). A band relative to the median (the old +-10 %) flags half
of a run whose iterations jitter by a few percent; k = 3 scaled MADs flags a normal sample's
iterations with probability ~0.1 %.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jlprof.engine.aggregate.iterations import Iterations

OUTLIER_K = 3.0  # scaled MADs above the median
MAD_SCALE = 1.4826  # MAD -> standard deviation for a normal sample
MIN_SAMPLE = 3  # fewer complete iterations than this: no outlier is flagged


def robust_threshold(x: np.ndarray, k: float = OUTLIER_K) -> tuple[float, float, float]:
    """(median, scaled MAD, median + k * scaled MAD) of ``x``; zeros for an empty sample."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) == 0:
        return 0.0, 0.0, 0.0
    med = float(np.median(x))
    mad = MAD_SCALE * float(np.median(np.abs(x - med)))
    return med, mad, med + k * mad


def partial_mask(it: Iterations) -> np.ndarray:
    """Per iteration: True for the partial first and last intervals (when a key node split the
    profile into at least three intervals; a lone interval is the whole profile)."""
    mask = np.zeros(it.count, dtype=bool)
    if it.key_node is not None and it.count >= 3:
        mask[0] = mask[-1] = True
    return mask


def steady(it: Iterations, lo: int, hi: int, include_partial: bool = False) -> np.ndarray:
    """Indices of the iterations in lo..hi that enter mean +- std: the complete ones, unless
    ``include_partial`` or the range holds no complete iteration (then all of them)."""
    idx = np.arange(lo, hi + 1)
    if include_partial:
        return idx
    keep = idx[~partial_mask(it)[idx]]
    return keep if len(keep) else idx


def excluded(it: Iterations, lo: int, hi: int, include_partial: bool = False) -> list[int]:
    """The iterations of lo..hi that :func:`steady` leaves out of mean +- std (partial ones)."""
    return sorted(set(range(lo, hi + 1)) - set(steady(it, lo, hi, include_partial).tolist()))


def iteration_outliers(it: Iterations, lo: int, hi: int, k: float = OUTLIER_K) -> pd.DataFrame:
    """Per iteration of lo..hi: duration, partial, robust z ((d - median) / scaled MAD) and the
    outlier flag, against the median and MAD of the range's complete iterations."""
    dur = it.durations_ns()[lo : hi + 1].astype(np.int64)
    partial = partial_mask(it)[lo : hi + 1]
    base = dur[~partial].astype(np.float64)
    med, mad, thr = robust_threshold(base, k)
    if mad > 0:
        z = (dur - med) / mad
    else:
        z = np.where(dur > med, np.inf, 0.0) if len(base) else np.zeros(len(dur))
    flag = (dur > thr) & ~partial & (len(base) >= MIN_SAMPLE)
    return pd.DataFrame(
        {
            "iteration": np.arange(lo, hi + 1, dtype=np.int64),
            "duration_ns": dur,
            "partial": partial,
            "median_ns": med,
            "mad_ns": mad,
            "threshold_ns": thr,
            "robust_z": z,
            "outlier": flag,
        }
    )


__all__ = [
    "MAD_SCALE",
    "MIN_SAMPLE",
    "OUTLIER_K",
    "excluded",
    "iteration_outliers",
    "partial_mask",
    "robust_threshold",
    "steady",
]
