"""The padded values a batch's ``take`` reads (:meth:`encoders.Plan._values`): the same texts
as plain concatenation, whatever the arrays' offsets, and batch after batch in one scratch
buffer."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from jlprof.reports import encoders


def _plan() -> encoders.Plan:
    df = pd.DataFrame({"a": pd.Categorical(["x", "yy", "x"]), "b": [10**12, 3, 7]})
    stream = encoders.JsonRecords(None)  # type: ignore[arg-type]
    return encoders.Plan(encoders.layout(df), "json", *stream.glues(df))


def test_values_take_equals_concatenation():
    rng = np.random.default_rng(7)
    plan = _plan()
    for batch in range(4):  # the scratch buffer is reused (and grown) across batches
        words = [("w" * int(k)) + str(batch) for k in rng.integers(0, 40, 50)]
        whole = pa.array([*words, "tail", ""], pa.string())
        arrays = [plan.base, whole.slice(3, 40), pa.array(["", "z"]), whole.slice(0, 0)]
        count = sum(len(a) for a in arrays)
        idx = pa.array(rng.integers(0, count, 500).astype(np.int32))
        want = pa.concat_arrays(arrays).take(idx)
        size = sum(len(v.as_py().encode()) for v in want)
        got = plan._values(arrays, size, len(idx))
        assert len(got) == count + 1  # the padding is one unused text after the values
        assert got.take(idx).to_pylist() == want.to_pylist()
        assert encoders._data_bytes(got.take(idx)) == size


def test_values_with_missing_texts_are_concatenated():
    plan = _plan()
    arrays = [plan.base, pa.array(["a", None, "c"], pa.string())]
    got = plan._values(arrays, 10, 3)
    assert got.to_pylist() == pa.concat_arrays(arrays).to_pylist()
