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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
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


@dataclass
class Coded:
    """A column (or a run of adjacent columns) as codes into its rendered distinct texts."""

    codes: np.ndarray  # indices into ``table``: uint16 when it has at most 65,536 entries
    table: Any  # list[str], then a pyarrow string array once planned

    def __post_init__(self) -> None:
        # a 10M-row report holds one codes array per coded column while it is planned
        if len(self.table) <= 1 << 16 and self.codes.dtype != np.uint16:
            self.codes = self.codes.astype(np.uint16)


Part = Coded | Render

#: integer columns spanning at most this share of the rows are rendered per distinct value
_INT_CODED_SHARE = 1 / 16
#: a run of coded columns is merged only while its distinct combinations stay this few
_MAX_COMBOS = 1 << 16


def _coded_part(codes: np.ndarray, rendered: list[str], missing: str) -> Coded:
    return Coded(np.where(codes < 0, len(rendered), codes).astype(np.int32), [*rendered, missing])


def _small_ints(a: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Codes and distinct values of an integer column of a narrow range, else None."""
    if len(a) == 0:
        return None
    lo, hi = int(a.min()), int(a.max())
    if hi - lo > max(256, int(len(a) * _INT_CODED_SHARE)):
        return None
    off = (a - lo).astype(np.int64) if a.dtype.kind == "i" else (a - np.uint64(lo)).astype(np.int64)
    present = np.zeros(hi - lo + 1, bool)
    present[off] = True
    uniq = np.flatnonzero(present)
    remap = np.zeros(hi - lo + 1, np.int32)
    remap[uniq] = np.arange(len(uniq), dtype=np.int32)
    return remap[off], uniq


def _part(s: pd.Series, fmt: str) -> Part | None:
    """How one column is rendered in ``fmt`` (csv/json); None: a dtype only pandas formats."""
    kind = _plain_kind(s)
    if kind == "int":
        a = s.to_numpy()
        small = _small_ints(a)
        if small is not None:  # Python's int text: what both pandas writers print
            base = int(a.min())
            return Coded(small[0], [str(base + int(v)) for v in small[1]])
        return lambda lo, hi: pc.cast(pa.array(a[lo:hi]), pa.string())
    if kind == "bool":
        words = ["False", "True"] if fmt == "csv" else ["false", "true"]
        return Coded(s.to_numpy().astype(np.int32), words)
    if kind == "float":
        f = s.to_numpy()
        return _csv_floats(f) if fmt == "csv" else _json_floats(f)
    if kind == "coded":
        codes, uniq = _coded(s)
        if fmt == "csv":
            return _coded_part(codes, [_csv_field(v) for v in uniq], "")
        return _coded_part(codes, _json_values(uniq), "null")
    return None


def _csv_floats(f: np.ndarray) -> Render:
    def floats(lo: int, hi: int) -> pa.Array:
        part = f[lo:hi]
        text = part.astype(str)  # what pandas writes: numpy's repr of each float
        text[np.isnan(part)] = ""
        return pa.array(text, pa.string())

    return floats


def _json_floats(f: np.ndarray) -> Render:
    def floats(lo: int, hi: int) -> pa.Array:
        # pandas' own encoder, so the 15-digit rounding is exactly today's
        text = pd.Series(f[lo:hi]).to_json(orient="values", double_precision=15)
        return pa.array(text[1:-1].split(",") if hi > lo else [], pa.string())

    return floats


def _merge(a: Coded, b: Coded, glue: str) -> Coded | None:
    """One coded part for two adjacent ones (``a`` + ``glue`` + ``b`` per distinct pair), or
    None when they have too many distinct pairs to be worth it."""
    nb = len(b.table)
    span = len(a.table) * nb
    if span > 1 << 26:
        return None
    key = a.codes.astype(np.int64) * nb + b.codes
    present = np.zeros(span, bool)
    present[key] = True
    uniq = np.flatnonzero(present)
    if len(uniq) > _MAX_COMBOS:
        return None
    remap = np.zeros(span, np.int32)
    remap[uniq] = np.arange(len(uniq), dtype=np.int32)
    ta, tb = a.table, b.table
    return Coded(remap[key], [ta[u // nb] + glue + tb[u % nb] for u in uniq.tolist()])


def _row_plan(parts: Iterable[Part], glues: list[str], end: str) -> list[Any]:
    """A row as join arguments: adjacent coded columns merged into one (fewer arguments, the
    join's cost), each glue (the text before a column) and the row's end folded into coded
    tables where they touch one."""
    plan: list[Any] = []
    for glue, part in zip(glues, parts, strict=True):
        last = plan[-1] if plan else None
        if isinstance(part, Coded):
            if isinstance(last, Coded):
                merged = _merge(last, part, glue)
                if merged is not None:
                    plan[-1] = merged
                    continue
            plan.append(Coded(part.codes, [glue + t for t in part.table]) if glue else part)
        else:
            if glue:
                plan.append(glue)
            plan.append(part)
    if plan and isinstance(plan[-1], Coded):
        plan[-1] = Coded(plan[-1].codes, [t + end for t in plan[-1].table])
    else:
        plan.append(end)
    for p in plan:
        if isinstance(p, Coded):
            p.table = pa.array(p.table, pa.string())
    return plan


def _rows(plan: list[Any], lo: int, hi: int) -> memoryview:
    """The text of rows ``lo:hi``."""
    args: list[Any] = []
    for p in plan:
        if isinstance(p, Coded):
            args.append(p.table.take(pa.array(p.codes[lo:hi])))
        elif isinstance(p, str):
            args.append(p)
        else:
            args.append(p(lo, hi))
    if not any(isinstance(a, pa.Array) for a in args):
        args.insert(0, pa.array([""] * (hi - lo), pa.string()))
    return _joined(args)


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


def write_csv(
    df: pd.DataFrame, out: IO[bytes], rows: int = BATCH_ROWS, header: bool = True
) -> None:
    """``df.to_csv(out, index=False)``, byte for byte, in batches of ``rows``; ``header=False``:
    the rows only (a later part of a streamed report)."""
    if len(df.columns) < 2 or any(_plain_kind(df[c]) is None for c in df.columns):
        # a dtype only pandas formats (or one column)
        for i, (lo, hi) in enumerate(_batches(max(len(df), 1), rows)):
            out.write(df.iloc[lo:hi].to_csv(index=False, header=header and i == 0).encode())
        return
    if header:
        out.write((",".join(_csv_field(str(c)) for c in df.columns) + "\n").encode())
    if len(df) == 0:
        return
    # parts made one at a time as the plan merges them: never every column's codes at once
    parts = (_part(df[c], "csv") for c in df.columns)
    plan = _row_plan(parts, ["", *[","] * (len(df.columns) - 1)], "\n")  # type: ignore[arg-type]
    for lo, hi in _batches(len(df), rows):
        out.write(_rows(plan, lo, hi))


def write_json(df: pd.DataFrame, out: IO[bytes], rows: int = BATCH_ROWS) -> None:
    """``df.to_json(out, orient="records", indent=2, double_precision=15)``, value for value,
    written as records in batches of ``rows`` (never one string for the whole file)."""
    stream = JsonRecords(out, rows)
    stream.write(df)
    stream.close()


class JsonRecords:
    """One JSON list of records written from consecutive frames (:func:`write_json` is one
    frame): each record is on its way to disk once its batch is formatted. The comma after a
    record is written with the next one, so the last needs no look-ahead."""

    def __init__(self, out: IO[bytes], rows: int = BATCH_ROWS) -> None:
        self.out, self.rows, self.count = out, rows, 0

    def _record_text(self, text: str | memoryview | bytes) -> None:
        # every piece is records joined by ",\n", without the comma after the last
        self.out.write(b"[\n" if self.count == 0 else b",\n")
        self.out.write(text.encode() if isinstance(text, str) else text)

    def write(self, df: pd.DataFrame) -> None:
        if len(df) == 0:
            return
        if len(df.columns) == 0 or any(_plain_kind(df[c]) is None for c in df.columns):
            for lo, hi in _batches(len(df), self.rows):  # pandas' records, stitched
                text = df.iloc[lo:hi].to_json(orient="records", indent=2, double_precision=15)
                self._record_text(text[2:-2])  # without "[\n" and "\n]"
                self.count += hi - lo
            return
        parts = (_part(df[c], "json") for c in df.columns)  # one at a time, as for CSV
        keys = [json.dumps(str(c)) for c in df.columns]
        glues = [("  {\n    " if i == 0 else ",\n    ") + k + ":" for i, k in enumerate(keys)]
        plan = _row_plan(parts, glues, "\n  },\n")  # type: ignore[arg-type]
        for lo, hi in _batches(len(df), self.rows):
            self._record_text(_rows(plan, lo, hi)[:-2])
            self.count += hi - lo

    def close(self) -> None:
        self.out.write(b"[]" if self.count == 0 else b"\n]")


class CsvRows:
    """One CSV file written from consecutive frames: the header with the first."""

    def __init__(self, out: IO[bytes], rows: int = BATCH_ROWS) -> None:
        self.out, self.rows, self.started = out, rows, False

    def write(self, df: pd.DataFrame) -> None:
        write_csv(df, self.out, self.rows, header=not self.started)
        self.started = True

    def close(self) -> None:
        pass


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
    stream = ParquetRows(out, rows)
    stream.write(df)
    stream.close()


class ParquetRows:
    """One Parquet file written from consecutive frames, each a row group per ``rows`` rows;
    the schema is the first frame's (a later frame is cast to it)."""

    def __init__(self, out: IO[bytes], rows: int = BATCH_ROWS) -> None:
        self.out, self.rows = out, rows
        self.writer: Any = None

    def write(self, df: pd.DataFrame) -> None:
        import pyarrow.parquet as pq

        table = arrow_table(df)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.out, table.schema, compression="zstd")
        elif table.schema != self.writer.schema:
            table = table.cast(self.writer.schema)
        for lo, hi in _batches(max(len(df), 1), self.rows):
            self.writer.write_table(table.slice(lo, hi - lo))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


WRITERS: dict[str, Callable[[pd.DataFrame, IO[bytes]], None]] = {
    "csv": write_csv,
    "json": write_json,
    "parquet": write_parquet,
}
#: the same formats for a report written in consecutive frames (``write``, then ``close``)
STREAMS: dict[str, Callable[[IO[bytes]], CsvRows | JsonRecords | ParquetRows]] = {
    "csv": CsvRows,
    "json": JsonRecords,
    "parquet": ParquetRows,
}
