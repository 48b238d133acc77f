"""int64 columns held as int32 when every value fits: 4 bytes a row saved for the whole run.

Shared by the reader (trace columns, issue 18) and the cube (per-iteration aggregates). A
narrowed column must be widened where it enters a sum, product or difference (numpy int32
arithmetic wraps silently): ``x.astype(np.int64)`` or ``to_numpy(np.int64)`` at the use.
"""

from __future__ import annotations

import numpy as np

INT32 = np.iinfo(np.int32)


def fits_int32(x: np.ndarray) -> bool:
    """True when ``x`` has rows and every value fits int32 (no rows: int64, as a missing
    table's :func:`~jlprof.engine.trace.empty_frame` has it)."""
    return len(x) > 0 and int(x.min()) >= INT32.min and int(x.max()) <= INT32.max


def narrow(x: np.ndarray) -> np.ndarray:
    """``x`` (int64) as int32 when it has rows that all fit, else as it is."""
    return x.astype(np.int32) if fits_int32(x) else x
