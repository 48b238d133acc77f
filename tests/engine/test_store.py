"""The jlprof database: a saved trace re-analyses to the same frames and numbers."""

from __future__ import annotations

import pandas as pd
import pytest

import jlprof
from jlprof.engine.read import read_trace
from jlprof.engine.store import is_jlprof_db, load_trace, save_trace
from jlprof.errors import InputError
from tests.fixtures.loops import small_training_export


def test_round_trip(tmp_path):
    src = small_training_export(tmp_path / "run.sqlite")
    tr = read_trace(src)
    db = save_trace(tr, tmp_path / "run.jlprof")
    assert is_jlprof_db(db) and not is_jlprof_db(src)
    back = load_trace(db)
    for name in ("gpu", "api", "nvtx", "marks", "osrt", "gpus"):
        a, b = getattr(tr, name), getattr(back, name)
        assert list(a.columns) == list(b.columns)
        pd.testing.assert_frame_equal(a.astype(object), b.astype(object), check_dtype=False)
    assert back.meta == tr.meta
    p1 = jlprof.load(src, key_node="optimizer_step")
    p2 = jlprof.load(db, key_node="optimizer_step")
    pd.testing.assert_frame_equal(p1.report("detail"), p2.report("detail"))


def test_damaged_database(tmp_path):
    bad = tmp_path / "x.jlprof"
    bad.write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(InputError):
        jlprof.load(bad)
