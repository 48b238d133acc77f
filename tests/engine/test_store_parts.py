"""DLProf's database written part by part (:class:`jlprof.engine.store.DldbWriter`): the same
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

from jlprof.engine import store
from jlprof.engine.read import read_trace
from jlprof.engine.store import FRAMES, load_trace, open_dldb, save_trace
from tests.fixtures import scenarios as sc

#: the cuts the brief names: single rows, odd sizes, and one batch (64Ki rows) and a bit
SIZES = (1, 7, 1000, 65536 + 3)


def _reference_dldb(trace, path: Path) -> bytes:
    """The database as save_trace wrote it before the part writer (its code, kept here as the
    independent reference): every frame whole through write_feather, in FRAMES order, each
    frame's bytes cut into rows of PART_BYTES, then the manifest, in one transaction."""
    con = sqlite3.connect(path)
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
    with open_dldb(path, meta=trace.meta, source=trace.source, warnings=trace.warnings) as db:
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
