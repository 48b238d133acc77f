"""connectorx's one-batch Arrow streams: every row read, and the same frames as ``sqlite3``.

The reader starts the event tables as streams sized by their rowid range (``rows_at_most``),
falls back to connectorx's batched read where streams are missing (connectorx < 0.4) and to
``sqlite3`` where connectorx fails; each path must give the frames of the others.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.read import read
from jlprof.engine.read.narrow import narrow
from jlprof.engine.read.read import read_trace
from jlprof.engine.read.trace import Trace
from tests.fixtures.scenarios import rich_db

FRAMES = ("gpu", "api", "nvtx", "marks", "osrt", "gpus")
EVENT_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
)


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rich_db().write(tmp_path_factory.mktemp("streams") / "rich.sqlite")


@pytest.fixture(scope="module")
def portable(export: Path) -> Trace:
    return read_trace(export, use_connectorx=False)


def assert_same_frames(a: Trace, b: Trace) -> None:
    for name in FRAMES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)


class Spy:
    """connectorx.read_sql, recording each call's return type; optionally failing some."""

    def __init__(self, real, fail_stream_start: bool = False, fail_stream_read: bool = False):
        self.real = real
        self.fail_start = fail_stream_start
        self.fail_read = fail_stream_read
        self.calls: list[tuple[str, int | None]] = []
        self.taken = 0

    def __call__(self, uri, sql, return_type="pandas", **kw):
        self.calls.append((return_type, kw.get("batch_size")))
        if return_type == "arrow_stream" and self.fail_start:
            raise ValueError(return_type)  # as connectorx 0.3 answers an unknown type
        out = self.real(uri, sql, return_type=return_type, **kw)
        if return_type != "arrow_stream":
            return out
        spy = self

        class Stream:
            def read_all(self):
                spy.taken += 1
                if spy.fail_read:
                    raise RuntimeError("odd text encoding")
                return out.read_all()

        return Stream()


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch):
    import connectorx

    def install(**kw) -> Spy:
        s = Spy(connectorx.read_sql, **kw)
        monkeypatch.setattr(connectorx, "read_sql", s)
        return s

    return install


def counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in EVENT_TABLES}


def test_rows_at_most_is_the_row_count_of_dense_tables(export: Path) -> None:
    f = read._Fetcher(export, read._connect(export), use_connectorx=False)
    want = counts(export)
    got = {t: f.rows_at_most(t) for t in EVENT_TABLES}
    assert got == {t: (n or None) for t, n in want.items()}
    assert all(n > 0 for n in want.values())  # the fixture has rows in every table


def test_rows_at_most_of_sparse_and_empty_tables(tmp_path: Path) -> None:
    path = tmp_path / "sparse.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (start INTEGER)")
        conn.execute("CREATE TABLE empty (start INTEGER)")
        conn.execute("INSERT INTO t (rowid, start) VALUES (5, 1), (7, 2), (9, 3)")
        conn.execute("CREATE TABLE far (start INTEGER)")
        conn.execute("INSERT INTO far (rowid, start) VALUES (1, 1), (1000000000000, 2)")
    f = read._Fetcher(path, read._connect(path), use_connectorx=False)
    assert f.rows_at_most("t") == 9 - 5 + 1  # a gap reserves room, never too little
    assert f.rows_at_most("empty") is None
    assert f.rows_at_most("far") == path.stat().st_size // 16  # capped by the file's size


def test_streams_read_the_event_tables_in_one_batch_each(export, portable, spy) -> None:
    s = spy()
    assert_same_frames(read_trace(export, use_connectorx=True), portable)
    want = counts(export)
    streams = [b for rt, b in s.calls if rt == "arrow_stream"]
    assert sorted(streams) == sorted(n + 1 for n in want.values())
    assert s.taken == len(streams)  # every stream started was read


def test_more_rows_than_the_stream_expects_still_read(export, portable, spy, monkeypatch):
    monkeypatch.setattr(read._Fetcher, "rows_at_most", lambda self, table: 1)
    s = spy()
    assert_same_frames(read_trace(export, use_connectorx=True), portable)
    assert {b for rt, b in s.calls if rt == "arrow_stream"} == {2}  # batches of 2 rows


def test_connectorx_without_streams_reads_in_batches(export, portable, spy) -> None:
    s = spy(fail_stream_start=True)
    assert_same_frames(read_trace(export, use_connectorx=True), portable)
    assert sum(rt == "arrow" for rt, _ in s.calls) == len(EVENT_TABLES)


def test_a_stream_that_fails_falls_back_to_sqlite3(export, portable, spy) -> None:
    s = spy(fail_stream_read=True)
    assert_same_frames(read_trace(export, use_connectorx=True), portable)
    assert s.taken == len(EVENT_TABLES)  # each table falls back alone


@pytest.mark.parametrize("reader", ["portable", "streams", "no streams"])
def test_the_nvtx_table_read_alone_in_two_runs_is_the_whole_reads(
    export, portable, spy, reader
) -> None:
    """The windowed engine reads the NVTX table alone (``work=False``): its texts (kept as
    Arrow strings) as two runs of rowids in two connectorx streams at once, then its numbers
    (the texts' ids among them) as four, each run copied into place in rowid order: the NVTX
    and mark frames (values, categories and their first-seen order) are the whole read's,
    whatever reads them, and each run is a stream sized for the whole table."""
    s = spy(fail_stream_start=reader == "no streams")
    alone = read_trace(export, use_connectorx=reader != "portable", work=False)
    # the range texts stay Arrow strings where connectorx read them (no Python string per
    # text: the range pass and DLProf's database read them as Arrow); the marks' are objects
    arrow_texts = isinstance(alone.nvtx["text"].cat.categories.dtype, pd.ArrowDtype)
    assert arrow_texts == (reader != "portable")
    assert alone.marks["text"].cat.categories.dtype == object
    text = alone.nvtx["text"].array
    objects = pd.Index(list(text.categories), dtype=object)
    alone.nvtx["text"] = pd.Categorical.from_codes(text.codes, categories=objects)
    for name in ("nvtx", "marks"):
        pd.testing.assert_frame_equal(getattr(alone, name), getattr(portable, name))
        for col in ("domain", "text"):
            assert list(getattr(alone, name)[col].cat.categories) == list(
                getattr(portable, name)[col].cat.categories
            )
    assert alone.gpu.empty and alone.api.empty
    streams = [b for rt, b in s.calls if rt == "arrow_stream"]
    if reader == "streams":
        assert streams == [counts(export)["NVTX_EVENTS"] + 1] * 6
        assert s.taken == 6


def test_invalid_utf8_text_reads_like_sqlite3(tmp_path: Path) -> None:
    """connectorx panics in its thread on such text (a BaseException): that table only is
    read with sqlite3 (replacing the bad bytes), the others still with connectorx."""
    path = rich_db().write(tmp_path / "bad.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE NVTX_EVENTS SET text = CAST(x'61ff62' AS TEXT) WHERE rowid = "
            "(SELECT max(rowid) FROM NVTX_EVENTS WHERE text IS NOT NULL)"
        )
    fast = read_trace(path, use_connectorx=True)
    assert_same_frames(fast, read_trace(path, use_connectorx=False))
    assert "a\ufffdb" in fast.nvtx["text"].astype(str).tolist()


@pytest.mark.parametrize("n_cats", [0, 3, 200, 40000])  # no categories, int8, int16 codes
def test_used_categories_are_those_of_pandas(n_cats: int) -> None:
    rng = np.random.default_rng(n_cats)
    cats = pd.Index([f"c{i}" for i in rng.permutation(n_cats)], dtype=object)
    codes = rng.integers(-1, max(n_cats, 1), 5000) if n_cats else np.full(5000, -1)
    cat = pd.Categorical.from_codes(codes, categories=cats)
    for rows in (rng.random(5000) < 0.3, np.zeros(5000, bool), np.ones(5000, bool)):
        want = cat[rows].remove_unused_categories()
        got = read._used(cat, rows)
        pd.testing.assert_extension_array_equal(got, want)
        assert list(got.categories) == list(want.categories)  # and in the same order


def test_stack_puts_parts_end_to_end_with_zeros_for_missing_columns() -> None:
    a = pd.DataFrame({"x": np.arange(4, dtype=np.int64), "y": np.arange(4, dtype=np.int64) + 10})
    b = pd.DataFrame({"x": np.array([7, 8], dtype=np.int64)})  # no "y"
    assert read._stack([a, b], "x").tolist() == [0, 1, 2, 3, 7, 8]
    assert read._stack([a, b], "y").tolist() == [10, 11, 12, 13, 0, 0]
    assert "x" not in a.columns and "y" not in a.columns  # given up once copied
    c = pd.DataFrame({"x": np.array([5, 6], dtype=np.int64)})
    x = c["x"].to_numpy()
    got = read._stack([c], "x")
    assert got.dtype == np.int64 and got.tolist() == [5, 6] and np.shares_memory(got, x)
    assert read._stack([c], "absent").tolist() == [0, 0]


def test_stack_narrows_small_valued_columns_only_when_every_value_fits() -> None:
    small = pd.DataFrame({"stream_id": np.array([7, 2**31 - 1], dtype=np.int64)})
    other = pd.DataFrame({"stream_id": np.array([-(2**31)], dtype=np.int64)})
    got = read._stack([small, other], "stream_id")
    assert got.dtype == np.int32 and got.tolist() == [7, 2**31 - 1, -(2**31)]
    big = pd.DataFrame({"stream_id": np.array([2**31], dtype=np.int64)})
    small = pd.DataFrame({"stream_id": np.array([7], dtype=np.int64)})
    got = read._stack([small, big], "stream_id")  # one value out of range: int64, all kept
    assert got.dtype == np.int64 and got.tolist() == [7, 2**31]
    one = pd.DataFrame({"stream_id": np.array([-(2**31) - 1], dtype=np.int64)})
    assert read._stack([one], "stream_id").dtype == np.int64
    wide = pd.DataFrame({"start_ns": np.array([1, 2], dtype=np.int64)})  # never narrowed
    assert read._stack([wide], "start_ns").dtype == np.int64
    assert read._stack([pd.DataFrame(index=range(3))], "grid_x").dtype == np.int32  # zeros
    assert narrow(np.zeros(0, np.int64)).dtype == np.int64  # no rows: as empty_frame


def test_small_valued_trace_columns_are_int32_and_keep_their_values(export, portable) -> None:
    """The read narrows them (trace.py); the values are the export's, as int64 held them."""
    with sqlite3.connect(export) as conn:
        want = conn.execute(
            "SELECT deviceId, streamId, gridX, blockZ "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start"
        ).fetchall()
        classes = sorted(
            r[0] for r in conn.execute("SELECT eventClass FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        )
    k = portable.gpu[portable.gpu["kind"] == "kernel"].sort_values("start_ns", kind="stable")
    cols = ["device_id", "stream_id", "grid_x", "block_z"]
    assert all(k[c].dtype == np.int32 for c in cols)
    assert list(k[cols].itertuples(index=False, name=None)) == want
    assert portable.api["event_class"].dtype == np.int32
    assert sorted(portable.api["event_class"].tolist()) == classes
    assert portable.nvtx["event_type"].dtype == np.int32
    for col in ("correlation_id", "bytes", "graph_node_id", "pageable"):
        assert portable.gpu[col].dtype == np.int32, col
    assert portable.api["correlation_id"].dtype == np.int32


@pytest.mark.parametrize("n_cats", [1, 5, 300])  # int8 and int16 codes
def test_concat_cats_is_pandas_union_of_categoricals(n_cats: int) -> None:
    rng = np.random.default_rng(n_cats)
    names = np.array([f"k{i}" for i in range(n_cats + 40)], dtype=object)
    parts = []
    for size in (1000, 0, 37, 5):
        cats = pd.Index(rng.choice(names, n_cats, replace=False), dtype=object)
        parts.append(pd.Categorical.from_codes(rng.integers(0, n_cats, size), categories=cats))
    got = read._concat_cats(parts)
    want = pd.api.types.union_categoricals(parts)  # categories in order of first listing
    assert list(got.categories) == list(want.categories)
    assert got.astype(object).tolist() == np.concatenate([p.astype(object) for p in parts]).tolist()


def test_first_seen_categories_order_categories_by_first_row() -> None:
    values = ["b", None, "a", "b", "c", "a"]
    df = pd.DataFrame(
        {
            "sorted": pd.Series(values, dtype=object).astype("category"),  # sqlite3: a, b, c
            "arrow": pd.Categorical(values, categories=["b", "a", "c"]),  # already in order
            "unused": pd.Categorical(values, categories=["z", "c", "b", "a"]),
            "n": np.arange(6),
        }
    )
    got = read._first_seen_categories(df.copy())
    for col in ("sorted", "arrow", "unused"):
        assert list(got[col].cat.categories) == ["b", "a", "c"], col
        assert got[col].cat.categories.dtype == object
        assert got[col].astype(object).tolist() == df[col].astype(object).tolist()
    assert got["n"].tolist() == list(range(6))


def _with_nulls(values: np.ndarray, valid: np.ndarray):
    """An Arrow array holding ``values`` in its data buffer, NULL where ``valid`` is False."""
    import pyarrow as pa

    typ = pa.float64() if values.dtype == np.float64 else pa.int64()
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
    return pa.Array.from_buffers(typ, len(values), [bitmap, pa.py_buffer(values.tobytes())])


def test_zeros_under_nulls_drops_the_bitmap_only_when_nulls_hold_zero() -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    valid = np.array([True, False, True, False, False, True, True, False, True, False])
    ints = np.where(valid, np.arange(10) + 5, 0).astype(np.int64)
    for values in (ints, ints.astype(np.float64)):
        arr = _with_nulls(values, valid)
        all_null = _with_nulls(np.zeros_like(values), np.zeros(10, bool))
        col = pa.chunked_array([arr, arr.slice(3, 5), all_null])
        got = read._zeros_under_nulls(col)
        assert got is not None and got.null_count == 0
        want = pc.fill_null(col, pa.scalar(0, type=col.type))
        assert got.to_pylist() == want.to_pylist()
        assert got.chunk(0).buffers()[1].address == arr.buffers()[1].address  # no copy
    for bad in (7, -1):  # a value under a NULL: it must be filled
        dirty = ints.copy()
        dirty[1] = bad
        assert read._zeros_under_nulls(pa.chunked_array([_with_nulls(dirty, valid)])) is None
    for bad in (-0.0, np.nan):  # equal to 0.0, or not a number: not 0 bits either
        dirty = ints.astype(np.float64)
        dirty[3] = bad
        assert read._zeros_under_nulls(pa.chunked_array([_with_nulls(dirty, valid)])) is None
    small = pa.chunked_array([pa.array([1, None], type=pa.int32())])
    assert read._zeros_under_nulls(small) is None  # only the 64-bit columns the reader fills


def test_split_gives_each_mask_rows_and_drops_the_column() -> None:
    col = {"a": np.arange(6, dtype=np.int64), "b": np.zeros(6, np.int64)}
    even, big = np.arange(6) % 2 == 0, np.arange(6) > 3
    got = read._split(col, "a", even, big)
    assert [g.tolist() for g in got] == [[0, 2, 4], [4, 5]]
    assert list(col) == ["b"]


def test_runs_of_numbers_make_the_joined_tables_frame() -> None:
    """Runs of a table of numbers are copied into one frame run by run (each let go before
    the next): the frame of the joined table, NULLs filled as that frame fills them, a run
    with a column of NULLs only included; a NULL with no default to fill it, a text or runs
    of other types go the joined table's way."""
    import pyarrow as pa

    defaults = [0, -1, 0.0]
    names = ["a", "b", "c"]

    def run(a, b, c, b_type=None):
        return pa.table({"a": pa.array(a, pa.int64()), "b": pa.array(b, b_type or pa.int64()),
                         "c": pa.array(c, pa.float64())})  # fmt: skip

    runs = [
        run([1, 2**40, 3], [None, 5, 6], [0.5, None, 1.5]),
        run([], [], []),
        run([7, 8], [None, None], [2.5, 3.5], b_type=pa.null()),
        run([-9], [10], [None]),
    ]
    assert read._numbers(runs, defaults)
    want = read._arrow_frame(read._fill_arrow(pa.concat_tables(
        [r.cast(runs[0].schema) for r in runs]), defaults), names)  # fmt: skip
    got = read._numbers_frame(list(runs), defaults, names)
    pd.testing.assert_frame_equal(got, want)
    assert got["b"].tolist() == [-1, 5, 6, -1, -1, 10] and got["a"].dtype == np.int64
    held = list(runs)
    read._numbers_frame(held, defaults, names)
    assert held == [None] * len(runs)  # each run let go
    assert not read._numbers(runs, [0, None, 0.0])  # b's NULLs would stay
    assert not read._numbers([runs[0], run([1], [2], [3.0], b_type=pa.float64())], defaults)
    text = pa.table({"a": pa.array(["x"]), "b": pa.array([1]), "c": pa.array([1.0])})
    assert not read._numbers([text, text], defaults)
