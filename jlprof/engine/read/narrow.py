"""int32 where every value fits: the one rule by which the engine narrows what it keeps.

A run holds its trace, its correlation and its cube for as long as it lives (10M-row
columns at 10M kernels), so every integer column whose values fit is held as int32 (4
bytes a row saved) and int64 otherwise. Readers widen where a column enters a sum,
product or difference; reports never see the narrowed types.
"""

from __future__ import annotations

import numpy as np

INT32 = np.iinfo(np.int32)


def fits_int32(x: np.ndarray) -> bool:
    """True when ``x`` has rows and every value fits int32 (no rows: int64, as a missing
    table's :func:`~jlprof.engine.read.trace.empty_frame` has it)."""
    return len(x) > 0 and int(x.min()) >= INT32.min and int(x.max()) <= INT32.max


def narrow(x: np.ndarray) -> np.ndarray:
    """``x`` (int64) as int32 when it has rows that all fit, else as it is."""
    return x.astype(np.int32) if fits_int32(x) else x


def narrow_joined(*parts: np.ndarray) -> np.ndarray:
    """``narrow(np.concatenate(parts))`` of integer parts, without the int64 copy of the whole
    first: each part's values go straight into the result (the windowed assembly makes ten
    such range-long columns; each int64 copy was 0.1 GB at 13.5M ranges)."""
    n = sum(len(p) for p in parts)
    fits = n > 0 and all(fits_int32(p) for p in parts if len(p))
    out = np.empty(n, np.int32 if fits else np.int64)
    pos = 0
    for p in parts:
        out[pos : pos + len(p)] = p
        pos += len(p)
    return out


def smallest(x: np.ndarray) -> np.ndarray:
    """``x`` (integers) in the smallest signed type that holds its values: for the few
    per-range codes the windowed run keeps through every window and reads back once (op,
    text and event type: 1 or 2 bytes a range instead of 4; 65 MB less at 7.5M ranges).
    Not for columns a run keeps for its readers, which :func:`narrow` decides."""
    x = np.asarray(x)
    if len(x) == 0:
        return x
    lo, hi = int(x.min()), int(x.max())
    for t in (np.int8, np.int16, np.int32):
        if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
            return x.astype(t, copy=False)
    return x


def index_dtype(n: int) -> type[np.signedinteger]:
    """The dtype of values below ``n`` (row indices and ``-1`` for none, codes, keys): int32
    when ``n`` < 2**31, else int64; decided from the bound, before the values exist."""
    return np.int32 if n <= INT32.max else np.int64
