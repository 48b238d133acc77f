"""Report frames to CSV, JSON and Parquet bytes, streamed in row batches through Arrow.

Why not ``DataFrame.to_csv``/``to_json``: at 1M rows they take seconds in Python-level
formatting and build the whole file as one string (twice the memory). Here every column is
turned into an Arrow string array per batch and the batch's rows are joined in C++
(``binary_join_element_wise``); the joined array's data buffer *is* the batch's text.

The text is the one pandas writes: CSV byte for byte (``to_csv(index=False)``: Python's csv
module quoting, numpy's float repr, empty cells for missing values), JSON value for value
(``to_json(orient="records", indent=2, double_precision=15)``). Low-cardinality columns
(categoricals, objects, strings) are rendered once per distinct value, by the very functions
pandas uses, and gathered by code per batch. Dtypes outside that set (datetimes, ...) fall back
to pandas per batch, still streamed.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator
from typing import IO, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

#: rows per batch: ~15-30 MB of text for the iteration report, about a ms of Python per batch
BATCH_ROWS = 32_768

Render = Callable[[int, int], pa.Array]


def _csv_field(value: Any) -> str:
    """``value`` as Python's csv module writes it in a row of several fields (QUOTE_MINIMAL)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([value, ""])
    return buf.getvalue()[:-2]


def _json_values(values: np.ndarray) -> list[str]:
    """Each value as pandas' JSON encoder writes it (round-tripped through :mod:`json`)."""
    if len(values) == 0:
        return []
    text = pd.Series(values, dtype=object).to_json(orient="values", double_precision=15)
    return [json.dumps(v) for v in json.loads(text)]


def _coded(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """Codes (``-1`` = missing) and distinct values of a low-cardinality column."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        cats = np.asarray(values.cat.categories.astype(object), dtype=object)
        return values.cat.codes.to_numpy(np.int32), cats
    if values.dtype == object and pd.api.types.infer_dtype(values, skipna=True) not in (
        "string",
        "empty",
    ):
        # mixed objects: 0 and 0.0 (or 1 and True) hash equal but print differently
        arr = values.to_numpy(object)
        missing = pd.isna(arr)
        codes = np.where(missing, -1, np.arange(len(arr))).astype(np.int32)
        return codes, arr
    codes, uniq = pd.factorize(values, use_na_sentinel=True)
    return codes.astype(np.int32, copy=False), np.asarray(uniq, dtype=object)


def _by_code(codes: np.ndarray, rendered: list[str], missing: str) -> Render:
    table = pa.array([*rendered, missing], pa.string())
    codes = np.where(codes < 0, len(rendered), codes).astype(np.int32)

    def render(lo: int, hi: int) -> pa.Array:
        return table.take(pa.array(codes[lo:hi]))

    return render


def _plain_kind(s: pd.Series) -> str | None:
    """``int``/``bool``/``float`` for numpy columns Arrow formats itself, ``coded`` for columns
    rendered per distinct value, None for those left to pandas."""
    dt = s.dtype
    if isinstance(dt, np.dtype):
        if dt.kind in "iu":
            return "int"
        if dt.kind == "b":
            return "bool"
        if dt.kind == "f":
            return "float"
        if dt.kind == "O":
            return "coded"
        return None
    if isinstance(dt, (pd.CategoricalDtype, pd.StringDtype)):
        if isinstance(dt, pd.CategoricalDtype) and dt.categories.dtype.kind in "Mm":
            return None
        return "coded"
    return None


def _csv_column(s: pd.Series) -> Render | None:
    kind = _plain_kind(s)
    if kind == "int":
        a = s.to_numpy()
        return lambda lo, hi: pc.cast(pa.array(a[lo:hi]), pa.string())
    if kind == "bool":
        b = s.to_numpy()
        return lambda lo, hi: pc.if_else(pa.array(b[lo:hi]), "True", "False")
    if kind == "float":
        f = s.to_numpy()

        def floats(lo: int, hi: int) -> pa.Array:
            part = f[lo:hi]
            text = part.astype(str)  # what pandas writes: numpy's repr of each float
            text[np.isnan(part)] = ""
            return pa.array(text, pa.string())

        return floats
    if kind == "coded":
        codes, uniq = _coded(s)
        return _by_code(codes, [_csv_field(v) for v in uniq], "")
    return None


def _json_column(s: pd.Series) -> Render | None:
    kind = _plain_kind(s)
    if kind == "int":
        a = s.to_numpy()
        return lambda lo, hi: pc.cast(pa.array(a[lo:hi]), pa.string())
    if kind == "bool":
        b = s.to_numpy()
        return lambda lo, hi: pc.if_else(pa.array(b[lo:hi]), "true", "false")
    if kind == "float":
        f = s.to_numpy()

        def floats(lo: int, hi: int) -> pa.Array:
            # pandas' own encoder, so the 15-digit rounding is exactly today's
            text = pd.Series(f[lo:hi]).to_json(orient="values", double_precision=15)
            return pa.array(text[1:-1].split(",") if hi > lo else [], pa.string())

        return floats
    if kind == "coded":
        codes, uniq = _coded(s)
        return _by_code(codes, _json_values(uniq), "null")
    return None


def _joined(parts: list[Any]) -> memoryview:
    """The concatenated text of the row-wise join of ``parts`` (arrays and scalar strings)."""
    j = pc.binary_join_element_wise(*parts, "")
    if isinstance(j, pa.ChunkedArray):
        j = j.combine_chunks()
    offsets = np.frombuffer(j.buffers()[1], np.int32)[j.offset : j.offset + len(j) + 1]
    data = j.buffers()[2]
    if data is None or len(offsets) < 2:
        return memoryview(b"")
    return memoryview(data)[offsets[0] : offsets[-1]]


def _batches(n: int, rows: int) -> Iterator[tuple[int, int]]:
    for lo in range(0, n, rows):
        yield lo, min(lo + rows, n)


def write_csv(df: pd.DataFrame, out: IO[bytes], rows: int = BATCH_ROWS) -> None:
    """``df.to_csv(out, index=False)``, byte for byte, in batches of ``rows``."""
    renders = [_csv_column(df[c]) for c in df.columns] if len(df.columns) > 1 else [None]
    if any(r is None for r in renders):  # a dtype only pandas formats (or one column)
        for i, (lo, hi) in enumerate(_batches(max(len(df), 1), rows)):
            out.write(df.iloc[lo:hi].to_csv(index=False, header=i == 0).encode())
        return
    out.write((",".join(_csv_field(str(c)) for c in df.columns) + "\n").encode())
    for lo, hi in _batches(len(df), rows):
        parts: list[Any] = []
        for r in renders:
            parts += [r(lo, hi), ","]  # type: ignore[misc]
        parts[-1] = "\n"
        out.write(_joined(parts))


def write_json(df: pd.DataFrame, out: IO[bytes], rows: int = BATCH_ROWS) -> None:
    """``df.to_json(out, orient="records", indent=2, double_precision=15)``, value for value,
    written as records in batches of ``rows`` (never one string for the whole file)."""
    if len(df) == 0:
        out.write(b"[]")
        return
    renders = [_json_column(df[c]) for c in df.columns]
    if any(r is None for r in renders) or len(df.columns) == 0:
        _json_by_pandas(df, out, rows)
        return
    keys = [json.dumps(str(c)) for c in df.columns]
    out.write(b"[\n")
    last = len(df)
    for lo, hi in _batches(len(df), rows):
        parts: list[Any] = []
        for i, (k, r) in enumerate(zip(keys, renders, strict=True)):
            parts += [("  {\n    " if i == 0 else ",\n    ") + k + ":", r(lo, hi)]  # type: ignore[misc]
        parts.append("\n  },\n")
        text = _joined(parts)
        out.write(text[:-2] if hi == last else text)  # no comma after the last record
    out.write(b"\n]")


def _json_by_pandas(df: pd.DataFrame, out: IO[bytes], rows: int) -> None:
    """pandas' records, batch by batch, stitched into one list."""
    out.write(b"[")
    for i, (lo, hi) in enumerate(_batches(len(df), rows)):
        text = df.iloc[lo:hi].to_json(orient="records", indent=2, double_precision=15)
        out.write((("," if i else "") + text[1:-2]).encode())
    out.write(b"\n]")


def arrow_table(df: pd.DataFrame) -> pa.Table:
    """``df`` as a typed Arrow table: ints, floats, bools as such, categoricals as dictionaries;
    object columns of mixed values (e.g. numbers and text) as text."""
    cols = {}
    for c in df.columns:
        s = df[c]
        try:
            arr = pa.array(s, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arr = pa.array(s.map(lambda v: None if pd.isna(v) else str(v)), pa.string())
        cols[str(c)] = arr
    return pa.table(cols)


def write_parquet(df: pd.DataFrame, out: IO[bytes], rows: int = BATCH_ROWS) -> None:
    """One Parquet file, typed columns, one row group per ``rows`` rows."""
    import pyarrow.parquet as pq

    table = arrow_table(df)
    with pq.ParquetWriter(out, table.schema, compression="zstd") as w:
        for lo, hi in _batches(max(len(df), 1), rows):
            w.write_table(table.slice(lo, hi - lo))


WRITERS: dict[str, Callable[[pd.DataFrame, IO[bytes]], None]] = {
    "csv": write_csv,
    "json": write_json,
    "parquet": write_parquet,
}
