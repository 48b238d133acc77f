"""The reader's ``pageable`` flag: copies from/to unpinned host memory (srcKind/dstKind 0)."""

from __future__ import annotations

import numpy as np

from jlprof.engine.read.read import read_trace
from tests.fixtures.nsysdb import NsysDb


def test_pageable_flag_per_copy(tmp_path):
    db = NsysDb()
    db.gpu(cu_device=0)
    t = db.process(pid=9).thread()
    t.memcpy("HtoD", 64, 0, 10, 20, 30, pinned=False)
    t.memcpy("HtoD", 64, 40, 50, 60, 70, pinned=True)
    t.memcpy("DtoH", 64, 80, 90, 100, 110, pinned=False)
    t.memcpy("DtoD", 64, 120, 130, 140, 150)
    t.launch("k", 160, 170, 180, 190)
    g = read_trace(db.write(tmp_path / "c.sqlite")).gpu.sort_values("start_ns")
    assert list(g["pageable"]) == [1, 0, 1, 0, 0]
    assert g["pageable"].dtype == np.int32  # a flag: int32 (trace.py's small-valued columns)
