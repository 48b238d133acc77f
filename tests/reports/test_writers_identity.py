"""The Arrow writers write today's files: CSV byte for byte and JSON value for value what
``DataFrame.to_csv(index=False)`` / ``to_json(orient="records", indent=2, double_precision=15)``
write, on every report of every real trace (tests/data/real) and of the generated fixtures, and
on frames built to hit the formatting edge cases (quotes, commas, newlines, NaN, floats, bools,
mixed objects). Small batches put batch boundaries inside every report."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import jlprof
from jlprof.profile import REPORTS
from jlprof.reports import encoders
from jlprof.reports.writers import report_path
from tests.fixtures.loops import small_training_export
from tests.fixtures.scenarios import KEY_NODE, real_traces, rich_db
from tests.fixtures.torch_traces import emit_nvtx_db

REAL = real_traces()


def _csv(df: pd.DataFrame, rows: int) -> bytes:
    buf = io.BytesIO()
    encoders.write_csv(df, buf, rows=rows)
    return buf.getvalue()


def _json(df: pd.DataFrame, rows: int) -> bytes:
    buf = io.BytesIO()
    encoders.write_json(df, buf, rows=rows)
    return buf.getvalue()


def _nan_equal(a: object, b: object) -> bool:
    """JSON values equal (NaN never reaches JSON: both sides write null)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_nan_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_nan_equal(a[k], b[k]) for k in a)
    return a == b and type(a) is type(b)


def assert_same_files(df: pd.DataFrame, rows: int = 3) -> None:
    expected_csv = df.to_csv(index=False).encode()
    assert _csv(df, rows) == expected_csv
    assert _csv(df, encoders.BATCH_ROWS) == expected_csv
    expected = json.loads(df.to_json(orient="records", indent=2, double_precision=15))
    for r in (rows, encoders.BATCH_ROWS):
        got = json.loads(_json(df, r))
        assert _nan_equal(got, expected)


def _reports(path: Path, **kw) -> dict[str, pd.DataFrame]:
    prof = jlprof.load(path, **kw)
    return {r: prof.report(r) for r in REPORTS}


@pytest.mark.parametrize("path", REAL, ids=[p.parent.name for p in REAL])
def test_real_traces_write_todays_files(path):
    for name, df in _reports(path).items():
        assert len(df.columns) > 0, name
        assert_same_files(df, rows=max(1, len(df) // 3))


@pytest.fixture(scope="module")
def fixture_exports(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    d = tmp_path_factory.mktemp("exports")
    return {
        "rich": (rich_db().write(d / "rich.sqlite"), {"key_node": KEY_NODE}),
        "loop": (small_training_export(d / "loop.sqlite", steps=7), {"key_node": "optimizer_step"}),
        "emit_nvtx": (emit_nvtx_db(4).write(d / "emit.sqlite"), {}),
    }


@pytest.mark.parametrize("name", ["rich", "loop", "emit_nvtx"])
def test_generated_fixtures_write_todays_files(fixture_exports, name):
    path, kw = fixture_exports[name]
    reports = _reports(path, **kw)
    assert sum(len(df) for df in reports.values()) > 0
    for df in reports.values():
        assert_same_files(df)


def test_formatting_edge_cases():
    """Values whose text differs between naive writers: quoting, floats, missing cells."""
    df = pd.DataFrame(
        {
            "Name (text)": ["plain", "a,b", 'say "hi"', "line\nbreak", "cr\rhere", " lead", ""],
            "cat": pd.Categorical(["x", None, "y,z", "x", "", "x", "q"]),
            "Time (ns)": np.array([0, -1, 2**62, 7, 8, 9, 10], np.int64),
            "ratio": [0.1, 1.0, float("nan"), 1e-5, 1e20, 1 / 3, -0.0],
            "f32": np.array([0.1, 8.57, np.nan, 1, 2, 3, 4], np.float32),
            "flag": [True, False, True, True, False, False, True],
            "mixed": [1, "two", 3.5, None, True, float("nan"), "x\ny"],
            "u": np.array([0, 1, 2, 3, 4, 5, 2**64 - 1], np.uint64),
            "s": pd.array(["a", None, "c", "d,e", "", "f", "g"], dtype="str"),
        }
    )
    assert_same_files(df, rows=2)


@pytest.mark.filterwarnings("ignore:The default formatting of datetime")
def test_empty_and_single_column_frames():
    for df in (
        pd.DataFrame({"a": pd.Series([], dtype=np.int64), "b": pd.Series([], dtype=object)}),
        pd.DataFrame({"only": ["", "x", None]}),
        pd.DataFrame({"when": pd.to_datetime(["2026-01-01", None]), "n": [1, 2]}),
    ):
        assert_same_files(df, rows=1)


def test_parquet_round_trip_keeps_types(fixture_exports, tmp_path):
    path, kw = fixture_exports["rich"]
    prof = jlprof.load(path, **kw)
    written = prof.write_reports(tmp_path, ["all"], ["parquet"])
    assert {p.suffix for p in written} == {".parquet"} and len(written) == len(REPORTS)
    for name in REPORTS:
        df = prof.report(name)
        target = report_path(tmp_path, prof.profile_name, name, "parquet")
        assert target in written
        back = pq.read_table(target).to_pandas()
        assert list(back.columns) == [str(c) for c in df.columns]
        assert len(back) == len(df)
        for c in df.columns:
            kind = df[c].dtype.kind if isinstance(df[c].dtype, np.dtype) else None
            if kind in ("i", "u", "f", "b"):
                assert back[c].dtype == df[c].dtype, (name, c)
                np.testing.assert_array_equal(back[c].to_numpy(), df[c].to_numpy())
            else:
                got = back[c].astype(object).where(back[c].notna(), None).tolist()
                want = df[c].astype(object).where(df[c].notna(), None).tolist()
                assert [None if v is None else str(v) for v in got] == [
                    None if v is None else str(v) for v in want
                ], (name, c)
    it = pq.read_table(report_path(tmp_path, prof.profile_name, "iteration", "parquet"))
    assert str(it.schema.field("GPU Time (ns)").type) == "int64"
    assert str(it.schema.field("Uses TC").type) == "bool"
    assert it.schema.field("Kernel Name").type.value_type in ("string", "large_string") or str(
        it.schema.field("Kernel Name").type
    ).startswith("dictionary")


def test_columns_left_unmerged_when_their_combinations_are_many(monkeypatch):
    """Adjacent low-cardinality columns are written as one; past the limit, one by one."""
    rng = np.random.default_rng(0)
    n = 500
    df = pd.DataFrame(
        {
            "a": pd.Categorical(rng.choice(["x", "y,z", 'q"', ""], n)),
            "b": rng.integers(0, 40, n),
            "c": rng.random(n) < 0.5,
            "t (ns)": rng.integers(0, 2**40, n),
            "d": pd.Categorical(rng.choice(["m", None, "n\no"], n)),
            "e": rng.integers(-5, 5, n).astype(np.int16),
        }
    )
    assert_same_files(df, rows=64)
    monkeypatch.setattr(encoders, "_MAX_COMBOS", 3)
    assert_same_files(df, rows=64)
