"""DLProf's database written part by part (:class:`jlprof.engine.read.store.DldbWriter`): the same
file, byte for byte, as the whole trace saved at once, whatever the parts and the order."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import sqlite3
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.feather as feather
import pytest

from jlprof.engine.read import store
from jlprof.engine.read.read import read_trace
from jlprof.engine.read.store import FRAMES, load_trace, open_store, save_trace
from tests.fixtures import scenarios as sc

#: the cuts the brief names: single rows, odd sizes, and one batch (64Ki rows) and a bit
SIZES = (1, 7, 1000, 65536 + 3)


def _reference_dldb(trace, path: Path) -> bytes:
    """The database as save_trace wrote it before the part writer (its code, kept here as the
    independent reference): every frame whole through write_feather, in FRAMES order, each
    frame's bytes cut into rows of PART_BYTES, then the manifest, in one transaction, in
    pages of 64 KiB (the page size is in the file's bytes; the journal and syncs are not)."""
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size = 65536")
    con.execute("CREATE TABLE jlprof_dldb (name TEXT PRIMARY KEY, data BLOB)")
    split = False
    for name in FRAMES:
        buf = io.BytesIO()
        table = pa.Table.from_pandas(getattr(trace, name), preserve_index=False)
        feather.write_feather(table, buf, compression="uncompressed")
        data = buf.getvalue()
        cuts = range(0, max(len(data), 1), store.PART_BYTES)
        split = split or len(cuts) > 1
        for i, at in enumerate(cuts):
            key = f"{name}.arrow" if i == 0 else f"{name}.arrow.{i}"
            con.execute(
                "INSERT INTO jlprof_dldb VALUES (?, ?)", (key, data[at : at + store.PART_BYTES])
            )
    manifest = {
        "format": "jlprof-trace",
        "version": 2 if split else 1,
        "meta": trace.meta,
        "source": str(trace.source or ""),
        "warnings": trace.warnings,
    }
    con.execute(
        "INSERT INTO jlprof_dldb VALUES (?, ?)", ("manifest.json", json.dumps(manifest).encode())
    )
    con.commit()
    con.close()
    return path.read_bytes()


def _cuts(n: int, sizes) -> list[tuple[int, int]]:
    """[start, stop) row ranges covering n rows, sizes taken in turn."""
    out, at = [], 0
    for size in itertools.cycle(sizes):
        if at >= n:
            return out
        out.append((at, min(n, at + size)))
        at += size


def _write_parts(trace, path: Path, sizes, parted=("gpu", "api", "nvtx")) -> bytes:
    """The windowed engine's order: the small frames whole first, then the parted frames' parts
    interleaved (a gpu part, an api part, an nvtx part, ...), each cut by ``sizes``."""
    with open_store(path, meta=trace.meta, source=trace.source, warnings=trace.warnings) as db:
        for name in FRAMES:
            if name not in parted:
                db.write_frame(name, getattr(trace, name))
        with contextlib.ExitStack() as stack:
            sinks = []
            for name in parted:
                df = getattr(trace, name)
                part = stack.enter_context(db.frame(name, schema_like=df.iloc[:0]))
                sinks.append((part, df, _cuts(len(df), sizes)))
            for step in itertools.zip_longest(*(cuts for _, _, cuts in sinks)):
                for (part, df, _), cut in zip(sinks, step, strict=True):
                    if cut is not None:
                        part.write(df.iloc[cut[0] : cut[1]])
    return path.read_bytes()


def _same_trace(a, b) -> None:
    for name in FRAMES:
        x, y = getattr(a, name), getattr(b, name)
        assert list(x.columns) == list(y.columns)
        pd.testing.assert_frame_equal(x.astype(object), y.astype(object))
    assert a.meta == b.meta and a.warnings == b.warnings


def _traces():
    yield "rich", lambda p: read_trace(sc.rich_db().write(p))
    yield "cpu_only", lambda p: read_trace(sc.cpu_only_db().write(p))
    yield "long", lambda p: read_trace(sc.long_db().write(p))


@pytest.mark.parametrize(("label", "make"), list(_traces()), ids=[t[0] for t in _traces()])
@pytest.mark.parametrize("sizes", [(s,) for s in SIZES] + [SIZES], ids=str)
def test_parts_are_the_whole_save_byte_for_byte(tmp_path, label, make, sizes):
    trace = make(tmp_path / f"{label}.sqlite")
    ref = _reference_dldb(trace, tmp_path / "ref.sqlite")
    assert save_trace(trace, tmp_path / "whole.sqlite").read_bytes() == ref
    parts = _write_parts(trace, tmp_path / "parts.sqlite", sizes)
    assert parts == ref
    _same_trace(load_trace(tmp_path / "parts.sqlite"), trace)


@pytest.mark.parametrize(("label", "make"), list(_traces()), ids=[t[0] for t in _traces()])
def test_a_zip_by_parts_holds_the_whole_saves_members(tmp_path, label, make):
    """``open_store`` on a name not ending in .sqlite: a ``.jlprof`` zip written frame by frame
    and part by part, and save_trace's (the same writer, every frame whole), each hold every
    frame as write_feather writes it whole and the manifest (the reference: its code, kept
    here); both read back as the trace; a frame never written leaves no file."""
    import zipfile

    trace = make(tmp_path / f"{label}.sqlite")
    want = {}
    for name in FRAMES:
        buf = io.BytesIO()
        table = pa.Table.from_pandas(getattr(trace, name), preserve_index=False)
        feather.write_feather(table, buf, compression="uncompressed")
        want[f"{name}.arrow"] = buf.getvalue()
    manifest = {"format": "jlprof-trace", "version": 1, "meta": trace.meta,
                "source": str(trace.source or ""), "warnings": trace.warnings}  # fmt: skip
    whole = save_trace(trace, tmp_path / "whole.jlprof")
    _write_parts(trace, tmp_path / "parts.jlprof", SIZES)
    for path in (whole, tmp_path / "parts.jlprof"):
        with zipfile.ZipFile(path) as z:
            assert sorted(z.namelist()) == sorted([*want, "manifest.json"]), path
            for name, data in want.items():
                assert z.read(name) == data, (path, name)
            assert json.loads(z.read("manifest.json")) == manifest
        _same_trace(load_trace(path), trace)


def _real():
    return [pytest.param(p, id=f"{p.parent.name}/{p.name}") for p in sc.real_traces()]


@pytest.mark.parametrize("path", _real())
@pytest.mark.parametrize("sizes", [(7,), (1000,), (65536 + 3,), SIZES], ids=str)
def test_real_traces_parts_are_the_whole_save(tmp_path, path, sizes):
    """Every real trace; single-row parts come in turn with the other sizes (SIZES): all parts of
    one row would take minutes here (~1 ms of from_pandas per part), the fixtures have them."""
    trace = read_trace(path)
    ref = _reference_dldb(trace, tmp_path / "ref.sqlite")
    assert save_trace(trace, tmp_path / "whole.sqlite").read_bytes() == ref
    assert _write_parts(trace, tmp_path / "parts.sqlite", sizes) == ref
    _same_trace(load_trace(tmp_path / "parts.sqlite"), trace)


def _frame(n: int, seed: int = 0) -> pd.DataFrame:
    """Every column kind the frames hold, and some they may: ints, a float with NaN (a null in
    Arrow), categoricals with and without missing values, pandas strings, booleans."""
    import numpy as np

    rng = np.random.default_rng(seed)
    names = pd.Index([f"kernel_{i}" for i in range(300)])  # int16 codes
    codes = rng.integers(-1, len(names), n)
    floats = rng.random(n)
    floats[rng.random(n) < 0.1] = np.nan
    return pd.DataFrame(
        {
            "start_ns": rng.integers(0, 1 << 40, n, dtype="int64"),
            "device_id": rng.integers(0, 8, n).astype("int32"),
            "name": pd.Categorical.from_codes(np.maximum(codes, 0), categories=names),
            "kind": pd.Categorical.from_codes(codes % 3 - (codes < 0), categories=["a", "b", "c"]),
            "double_value": floats,
            "label": pd.array([f"s{i % 17}" for i in range(n)], dtype="str"),
            "flag": rng.random(n) < 0.5,
        }
    )


def _feather(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    feather.write_feather(
        pa.Table.from_pandas(df, preserve_index=False), buf, compression="uncompressed"
    )
    return buf.getvalue()


@pytest.mark.parametrize("rows", [0, 1, 65535, 65536, 65537, 2 * 65536 + 5])
@pytest.mark.parametrize(
    "sizes", [(7001,), (65536 + 3,), (1000, 7, 65536, 1, 30000), "whole"], ids=str
)
def test_frame_parts_are_write_feather_of_the_whole(rows, sizes):
    """The Feather bytes alone, on frames over several 64Ki-row batches (the real traces and
    fixtures have fewer rows): the re-cut batches, dictionaries written once, null bitmaps."""
    whole = _frame(rows)
    buf = io.BytesIO()
    parts = store.FrameParts(buf, "gpu", whole.iloc[:0])
    for start, stop in [(0, rows)] if sizes == "whole" else _cuts(rows, sizes):
        parts.write(whole.iloc[start:stop])
    parts.close()
    assert buf.getvalue() == _feather(whole)
    back = feather.read_table(io.BytesIO(buf.getvalue())).to_pandas()
    if rows:  # an empty file has no dictionary batch: its categories read back empty
        pd.testing.assert_frame_equal(back, whole)
    assert len(back) == rows


def test_a_frame_with_no_part_is_the_empty_frame():
    empty = _frame(0)
    buf = io.BytesIO()
    parts = store.FrameParts(buf, "gpu", empty)
    parts.close()
    assert buf.getvalue() == _feather(empty)


@pytest.mark.parametrize(
    "recode",
    [
        lambda c: c.cat.add_categories(["extra"]),  # one more category
        lambda c: c.cat.reorder_categories(list(reversed(c.cat.categories))),  # same set, reordered
        lambda c: c.cat.as_ordered(),
        lambda c: c.astype(str),  # not a categorical at all
    ],
    ids=["added", "reordered", "ordered", "str"],
)
def test_a_part_with_other_categories_is_one_clear_error(recode):
    whole = _frame(100)
    parts = store.FrameParts(io.BytesIO(), "gpu", whole.iloc[:0])
    parts.write(whole.iloc[:40])
    bad = whole.iloc[40:80].assign(kind=recode(whole["kind"].iloc[40:80]))
    with pytest.raises(
        ValueError, match=r"frame 'gpu', column 'kind': the part at row 40 .*categories"
    ):
        parts.write(bad)


def test_a_part_with_other_columns_is_one_clear_error():
    whole = _frame(100)
    parts = store.FrameParts(io.BytesIO(), "gpu", None)  # the first part sets the schema
    parts.write(whole.iloc[:40])
    with pytest.raises(ValueError, match=r"part at row 40 has another schema .*device_id"):
        parts.write(whole.iloc[40:].astype({"device_id": "int64"}))
    with pytest.raises(ValueError, match=r"part at row 40 has another schema .*columns"):
        parts.write(whole.iloc[40:].drop(columns="flag"))


def test_parts_split_over_blob_rows_in_any_order(tmp_path, monkeypatch):
    """Frames larger than one blob (PART_BYTES) written straight and spooled (api beside gpu,
    nvtx and the small frames early) are cut into the same rows, format version 2."""
    monkeypatch.setattr(store, "PART_BYTES", 1000)
    trace = read_trace(sc.rich_db().write(tmp_path / "rich.sqlite"))
    ref = _reference_dldb(trace, tmp_path / "ref.sqlite")
    assert _write_parts(trace, tmp_path / "parts.sqlite", SIZES) == ref
    with sqlite3.connect(tmp_path / "parts.sqlite") as con:
        rows = dict(con.execute("SELECT name, data FROM jlprof_dldb"))
    assert "api.arrow.1" in rows and "nvtx.arrow.1" in rows
    assert json.loads(rows["manifest.json"])["version"] == 2
    _same_trace(load_trace(tmp_path / "parts.sqlite"), trace)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_cancelled_write_leaves_no_file(tmp_path):
    """``check`` runs before every write; raising there (a cancelled background save) anywhere,
    while a frame streams or is spooled or copied in, leaves nothing behind."""
    trace = read_trace(sc.rich_db().write(tmp_path / "rich.sqlite"))
    out = tmp_path / "out"
    out.mkdir()
    calls = []

    def counting():
        calls.append(1)

    with open_store(out / "dlprof_dldb.sqlite", check=counting, meta=trace.meta) as db:
        for name in reversed(FRAMES):  # every frame but gpu spooled first
            db.write_frame(name, getattr(trace, name))
    total = len(calls)
    assert total > 10
    (out / "dlprof_dldb.sqlite").unlink()

    class Cancelled(Exception):
        pass

    for stop_at in sorted({1, 2, total // 3, total // 2, total - 1, total}):
        calls.clear()

        def check(stop_at=stop_at):
            calls.append(1)
            if len(calls) >= stop_at:
                raise Cancelled

        with pytest.raises(Cancelled), open_store(out / "dlprof_dldb.sqlite", check=check) as db:
            for name in reversed(FRAMES):
                db.write_frame(name, getattr(trace, name))
        assert _leftovers(out) == []


@pytest.mark.parametrize("file_name", ["dlprof_dldb.sqlite", "x.jlprof"])
def test_misuse_is_refused_and_leaves_no_file(tmp_path, file_name):
    trace = read_trace(sc.rich_db().write(tmp_path / "rich.sqlite"))
    target = tmp_path / "out" / file_name
    target.parent.mkdir()
    with pytest.raises(ValueError, match="frames not written: api"), open_store(target) as db:
        for name in FRAMES:
            if name != "api":
                db.write_frame(name, getattr(trace, name))
    with pytest.raises(ValueError, match="'gpu' written twice"), open_store(target) as db:
        db.write_frame("gpu", trace.gpu)
        db.write_frame("gpu", trace.gpu)
    with pytest.raises(ValueError, match="unknown frame 'kernels'"), open_store(target) as db:
        db.write_frame("kernels", trace.gpu)
    with pytest.raises(KeyError), open_store(target) as db, db.frame("gpu", trace.gpu) as part:
        part.write(trace.gpu.iloc[:5])
        part.write(trace.gpu[["no such column"]])  # the caller fails mid-frame
    assert _leftovers(target.parent) == []


def test_manifest_set_late_is_written(tmp_path):
    """The windowed engine knows its warnings at the end: meta, source and warnings may be set
    on the writer any time before the block ends."""
    trace = read_trace(sc.rich_db().write(tmp_path / "rich.sqlite"))
    ref = _reference_dldb(trace, tmp_path / "ref.sqlite")
    with open_store(tmp_path / "late.sqlite") as db:
        for name in FRAMES:
            db.write_frame(name, getattr(trace, name))
        db.meta, db.source, db.warnings = trace.meta, trace.source, trace.warnings
    assert (tmp_path / "late.sqlite").read_bytes() == ref
