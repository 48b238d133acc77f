"""PyProf's kernel table as a report (``--reports prof``, ``Profile.report("prof")``).

The rows are :func:`jlprof.engine.analyses.prof.prof_table`'s, kept where the kernel was launched in
the iteration range; the columns carry the headers ``python -m pyprof.prof --csv`` prints
(``Idx``, ``SeqId``, ... ``Sil(ns)``, ... ``Bytes``). ``Idx`` stays the kernel's number in
the whole trace, so a row is found again in ``jlprof prof``'s output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jlprof.engine.analyses.prof import COLUMNS, prof_table

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

# PyProf's output.py: option -> header
HEADERS = {"idx": "Idx", "seq": "SeqId", "altseq": "AltSeqId", "tid": "TId", "layer": "Layer",
           "trace": "Trace", "dir": "Direction", "sub": "Sub", "mod": "Module", "op": "Op",
           "kernel": "Kernel", "params": "Params", "sil": "Sil(ns)", "tc": "TC",
           "device": "Device", "stream": "Stream", "grid": "Grid", "block": "Block",
           "flops": "FLOPs", "bytes": "Bytes"}  # fmt: skip


def table(p: Analysis) -> pd.DataFrame:
    """The whole trace's table (option-named columns and ``gpu_row``), computed once."""
    return p.once("prof", lambda: prof_table(p.correlated))


def prof_report(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """One row per kernel launched in iterations ``lo..hi``, PyProf's 20 columns."""
    gpu_iter = np.asarray(p.gpu_iter)  # refuses a windowed profile: its GPU rows are gone
    df = table(p)
    it = gpu_iter[df["gpu_row"].to_numpy(np.int64)]
    keep = (it >= lo) & (it <= hi)
    out = df.loc[keep, list(COLUMNS)].rename(columns=HEADERS)
    return out.reset_index(drop=True)
