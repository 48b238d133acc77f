"""Report frames to CSV, JSON and Parquet bytes, streamed in row batches through Arrow.

Why not ``DataFrame.to_csv``/``to_json``: at 1M rows they take seconds in Python-level
formatting and build the whole file as one string (twice the memory). Here a frame is laid out
once (:func:`layout`): adjacent low-cardinality columns (categoricals, objects, strings, bools,
narrow ints) become one run of codes of their distinct combinations, the other columns (wide
ints, floats) are rendered per batch. A format (:class:`Plan`) renders only the combinations
and its glue texts, into one Arrow string array; a batch's rows are then one ``take`` from it
and the batch's rendered numbers, row by row, whose data buffer *is* the batch's text.

The text is the one pandas writes: CSV byte for byte (``to_csv(index=False)``: Python's csv
module quoting, numpy's float repr, empty cells for missing values), JSON value for value
(``to_json(orient="records", indent=2, double_precision=15)``). Distinct values are rendered by
the very functions pandas uses. Dtypes outside that set (datetimes, ...) fall back to pandas
per batch, still streamed. A frame given to CSV and JSON together (:func:`write_frames`, the
iteration report) is laid out once and its integers rendered once per batch for both.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

#: rows per batch: ~15-30 MB of text for the iteration report, about a ms of Python per batch
BATCH_ROWS = 32_768


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
        return values.cat.codes.to_numpy(), cats  # int8/int16: narrower to merge
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


#: integer columns spanning at most this share of the rows are rendered per distinct value
_INT_CODED_SHARE = 1 / 16
#: a run of coded columns is merged only while its distinct combinations stay this few
_MAX_COMBOS = 1 << 16
#: the most bytes a rendered number takes (int64: 20; a float's repr: 24)
_RENDER_BYTES = 32
#: the most text in one batch: Arrow's string offsets are int32
_MAX_BATCH_BYTES = 2**31 - 1


def _dense(key: np.ndarray, span: int, most: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Codes (uint16 when few) of the distinct values of ``key`` (intp in ``0..span-1``) and
    those values, sorted; None when there are more than ``most``."""
    present = np.zeros(span, bool)
    present[key] = True
    uniq = np.flatnonzero(present)
    if len(uniq) > most:
        return None
    remap = np.zeros(span, np.uint16 if len(uniq) <= 1 << 16 else np.int32)
    remap[uniq] = np.arange(len(uniq))
    return remap[key], uniq


def _small_ints(a: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Codes and distinct values of an integer column of a narrow range, else None."""
    if len(a) == 0:
        return None
    lo, hi = int(a.min()), int(a.max())
    if hi - lo > max(256, int(len(a) * _INT_CODED_SHARE)):
        return None
    # intp offsets: numpy indexes with them as they are (int32 ones are converted, twice)
    off = np.subtract(a, a.dtype.type(lo), dtype=np.intp, casting="unsafe")
    return _dense(off, hi - lo + 1, len(a))


#: a coded column's distinct texts in a format (csv/json), the missing value's last if any
Texts = Callable[[str], list[str]]


@dataclass
class Run:
    """Adjacent low-cardinality columns as codes of their distinct combinations, the same
    for every format: each format only renders the (few) combinations."""

    codes: np.ndarray  # per row: uint16 when there are at most 65,536 combinations
    members: list[tuple[int, np.ndarray]]  # (column, its distinct value per combination)
    size: int  # combinations

    def __post_init__(self) -> None:
        # a 10M-row report holds one codes array per run while it is planned
        if self.size <= 1 << 16 and self.codes.dtype.itemsize > 2:
            self.codes = self.codes.astype(np.uint16)


@dataclass
class Layout:
    """A frame's rows in any text format: runs of coded columns (:class:`Run`) and the
    positions of the columns rendered per batch, in column order; what each format needs of
    a column (its texts, or its values to render)."""

    segments: list[Run | int]
    texts: dict[int, Texts]  # coded columns
    values: dict[int, tuple[str, np.ndarray]]  # rendered columns: (int/float, values)


def _coded_column(s: pd.Series, kind: str) -> tuple[np.ndarray, int, Texts] | None:
    """Codes, count of distinct texts and the texts of a column rendered per distinct value;
    None for a column rendered per batch (wide-ranging integers, floats)."""
    if kind == "int":
        a = s.to_numpy()
        small = _small_ints(a)
        if small is None:
            return None
        base = int(a.min())
        words = [str(base + int(v)) for v in small[1]]  # what both pandas writers print
        return small[0], len(words), lambda _fmt: words
    if kind == "bool":
        return (
            s.to_numpy().view(np.uint8),
            2,
            lambda fmt: ["False", "True"] if fmt == "csv" else ["false", "true"],
        )
    if kind == "coded":
        codes, uniq = _coded(s)
        if len(codes) and int(codes.min()) < 0:  # the missing value's text is the last
            codes = np.where(codes < 0, np.int32(len(uniq)), codes)

        def texts(fmt: str) -> list[str]:
            if fmt == "csv":
                return [*(_csv_field(v) for v in uniq), ""]
            return [*_json_values(uniq), "null"]

        return codes, len(uniq) + 1, texts
    return None


def _merge(a: Run, b: Run) -> Run | None:
    """One run for two adjacent ones (a code per distinct pair of their codes), or None when
    they have too many distinct pairs to be worth it."""
    nb = b.size
    span = a.size * nb
    if span > 1 << 26:
        return None
    key = np.multiply(a.codes, nb, dtype=np.intp)  # intp: indexes as it is
    key += b.codes
    dense = _dense(key, span, _MAX_COMBOS)
    if dense is None:
        return None
    codes, uniq = dense
    ua, ub = uniq // nb, uniq % nb
    members = [(c, v[ua]) for c, v in a.members] + [(c, v[ub]) for c, v in b.members]
    return Run(codes, members, len(uniq))


def layout(df: pd.DataFrame) -> Layout:
    """``df``'s :class:`Layout` (every column of a :func:`_plain_kind`): adjacent coded
    columns merged into one run while their combinations stay few (fewer pieces per row)."""
    out = Layout([], {}, {})
    for j, c in enumerate(df.columns):
        s = df[c]
        kind = _plain_kind(s)
        coded = _coded_column(s, kind)  # type: ignore[arg-type]
        if coded is None:
            out.values[j] = (kind, s.to_numpy())  # type: ignore[assignment]
            out.segments.append(j)
            continue
        codes, size, out.texts[j] = coded
        run = Run(codes, [(j, np.arange(size, dtype=np.int32))], size)
        last = out.segments[-1] if out.segments else None
        merged = _merge(last, run) if isinstance(last, Run) else None
        if merged is not None:
            out.segments[-1] = merged
        else:
            out.segments.append(run)
    return out


def _suffixed(table: pa.Array, text: str) -> pa.Array:
    return pc.binary_join_element_wise(table, text, "") if text else table


class Plan:
    """A :class:`Layout` in one format: a row is ``k`` pieces, each a text of one string array
    (the runs' and glues' texts, then the batch's rendered columns); a batch's text is one
    ``take`` of it, row by row, whose data buffer is the text (no per-column arrays to join).
    Glues and the row's end are folded into the runs' texts where they touch one."""

    def __init__(self, lay: Layout, fmt: str, glues: list[str], end: str) -> None:
        self.fmt, self.values = fmt, lay.values
        tables: list[pa.Array] = []
        pieces: list[tuple[str, Any]] = []  # ("run", codes) | ("text", None) | ("render", col)
        for seg in lay.segments:
            if isinstance(seg, Run):
                args: list[Any] = []
                for c, idx in seg.members:
                    args += [glues[c], pa.array(lay.texts[c](fmt), pa.string()).take(idx)]
                tables.append(pc.binary_join_element_wise(*args, ""))
                pieces.append(("run", seg.codes))
                continue
            if glues[seg]:
                if pieces and pieces[-1][0] != "render":
                    tables[-1] = _suffixed(tables[-1], glues[seg])
                else:
                    tables.append(pa.array([glues[seg]], pa.string()))
                    pieces.append(("text", None))
            pieces.append(("render", seg))
        if pieces and pieces[-1][0] != "render":
            tables[-1] = _suffixed(tables[-1], end)
        else:
            tables.append(pa.array([end], pa.string()))
            pieces.append(("text", None))
        self.starts = np.cumsum([0] + [len(t) for t in tables]).tolist()
        self.base = pa.concat_arrays(tables)
        #: each text's length in bytes: a batch's size is known before its ``take``
        self.lengths = pc.binary_length(self.base).to_numpy(zero_copy_only=False)
        self.scratch = np.empty(0, np.uint8)  # the batch's texts and their padding, reused
        self.pieces = pieces
        widest = [pc.max(pc.binary_length(t)).as_py() or 0 for t in tables]
        row_bytes = sum(widest) + _RENDER_BYTES * sum(k == "render" for k, _ in pieces)
        #: rows per batch that keep a batch's text under Arrow's 2 GB string offsets
        self.max_rows = max(1, _MAX_BATCH_BYTES // max(row_bytes, 1))

    def _render(self, col: int, lo: int, hi: int, done: dict[Any, pa.Array]) -> pa.Array:
        kind, values = self.values[col]
        key = (col, "" if kind == "int" else self.fmt)  # ints print alike in both formats
        if key not in done:
            part = values[lo:hi]
            if kind == "int":
                done[key] = pc.cast(pa.array(part), pa.string())
            elif self.fmt == "csv":
                done[key] = _csv_floats(part)
            else:
                done[key] = _json_floats(part)
        return done[key]

    def rows(self, lo: int, hi: int, done: dict[Any, pa.Array]) -> memoryview:
        """The text of rows ``lo:hi``; ``done``: the batch's rendered columns so far (shared
        by the formats written together)."""
        n = hi - lo
        idx = np.empty((n, len(self.pieces)), np.int32)
        arrays, at, t, size = [self.base], len(self.base), 0, 0  # size: the text's bytes
        for j, (kind, what) in enumerate(self.pieces):
            if kind == "render":
                arrays.append(self._render(what, lo, hi, done))
                size += _data_bytes(arrays[-1])
                idx[:, j] = np.arange(at, at + n, dtype=np.int32)
                at += n
                continue
            start = np.int32(self.starts[t])
            lengths = self.lengths[self.starts[t] : self.starts[t + 1]]
            if kind == "run":
                codes = what[lo:hi]
                np.add(codes, start, out=idx[:, j], casting="unsafe")
                size += int(lengths[codes].sum())
            else:
                idx[:, j] = start
                size += n * int(lengths[0])
            t += 1
        text = self._values(arrays, size, idx.size).take(pa.array(idx.reshape(-1)))
        return _data(text)

    def _values(self, arrays: list[pa.Array], size: int, picks: int) -> pa.Array:
        """``arrays`` as one string array for a ``take`` of ``picks`` texts of ``size`` bytes
        in all, with one unused text after them that pads their mean length to the mean
        length taken: Arrow sizes a take's output by the values' mean length, and the run
        texts and rendered numbers (~8 bytes on average) are far shorter than the ~90 bytes
        a piece of the iteration report takes, so the output grew by doubling (copies and
        fresh pages: ~60 % of the take's time). The padding is never written, only
        allocated (the scratch buffer, reused by every batch)."""
        if any(a.null_count for a in arrays):
            return pa.concat_arrays(arrays)
        count = sum(len(a) for a in arrays) + 1
        data = sum(_data_bytes(a) for a in arrays)
        # Arrow truncates the mean to whole bytes: one byte more per value covers it
        total = max(data, -(-(size + picks) * count // max(picks, 1)))
        if total >= 2**31:  # int32 offsets
            return pa.concat_arrays(arrays)
        if len(self.scratch) < total:
            self.scratch = np.empty(total, np.uint8)
        offsets = np.empty(count + 1, np.int32)
        at, row = 0, 0
        for a in arrays:
            off = _offsets(a)
            n = int(off[-1] - off[0])
            np.subtract(off, off[0] - at, out=offsets[row : row + len(a) + 1])
            if n:
                src = np.frombuffer(a.buffers()[2], np.uint8)[off[0] : off[-1]]
                self.scratch[at : at + n] = src
            at, row = at + n, row + len(a)
        offsets[-1] = total
        return pa.StringArray.from_buffers(
            count, pa.py_buffer(offsets), pa.py_buffer(self.scratch[:total])
        )


def _csv_floats(part: np.ndarray) -> pa.Array:
    text = part.astype(str)  # what pandas writes: numpy's repr of each float
    text[np.isnan(part)] = ""
    return pa.array(text, pa.string())


def _json_floats(part: np.ndarray) -> pa.Array:
    # pandas' own encoder, so the 15-digit rounding is exactly today's
    text = pd.Series(part).to_json(orient="values", double_precision=15)
    return pa.array(text[1:-1].split(",") if len(part) else [], pa.string())


def _data(text: pa.Array) -> memoryview:
    """The concatenated values of a string array (its data buffer, no copy)."""
    offsets = _offsets(text)
    data = text.buffers()[2]
    if data is None or len(offsets) < 2:
        return memoryview(b"")
    return memoryview(data)[offsets[0] : offsets[-1]]


def _data_bytes(a: pa.Array) -> int:
    """Bytes of text in a string array (its values, not its buffer's capacity)."""
    if len(a) == 0:
        return 0
    off = _offsets(a)
    return int(off[-1] - off[0])


def _offsets(a: pa.Array) -> np.ndarray:
    """A string array's ``len(a) + 1`` int32 value offsets (a view of its buffer)."""
    return np.frombuffer(a.buffers()[1], np.int32)[a.offset : a.offset + len(a) + 1]


def _batches(n: int, rows: int) -> Iterator[tuple[int, int]]:
    for lo in range(0, n, rows):
        yield lo, min(lo + rows, n)


class TextStream:
    """A text format written from consecutive frames (``write`` each, then ``close``).

    Frames given to several streams at once through :func:`write_frames` are laid out once
    (:func:`layout`) and written batch by batch to each, the batch's numbers rendered once."""

    fmt = ""

    def __init__(self, out: IO[bytes], rows: int = BATCH_ROWS) -> None:
        self.out, self.rows = out, rows

    def write(self, df: pd.DataFrame) -> None:
        _write_text([self], df)

    def close(self) -> None:
        pass

    def begin(self, df: pd.DataFrame) -> bool:
        """Start ``df``: True when its rows are left to :class:`Plan` (else written here)."""
        raise NotImplementedError

    def glues(self, df: pd.DataFrame) -> tuple[list[str], str]:
        """The text before each column of a row, and after the row."""
        raise NotImplementedError

    def emit(self, text: memoryview, n: int) -> None:
        """Write the text of ``n`` consecutive rows."""
        raise NotImplementedError


def _write_text(streams: list[TextStream], df: pd.DataFrame) -> None:
    live = [s for s in streams if s.begin(df)]
    if not live:
        return
    lay = layout(df)
    plans = [Plan(lay, s.fmt, *s.glues(df)) for s in live]
    del lay
    # formats written together share the batch: the text in flight stays one format's
    rows = max(1, min(s.rows for s in live) // len(live))
    rows = min(rows, *(p.max_rows for p in plans))
    for lo, hi in _batches(len(df), rows):
        done: dict[Any, pa.Array] = {}
        for s, plan in zip(live, plans, strict=True):
            s.emit(plan.rows(lo, hi, done), hi - lo)


def write_frames(streams: list[Any], df: pd.DataFrame) -> None:
    """``s.write(df)`` for each stream; the text streams among them (those whose ``write`` is
    :class:`TextStream`'s) share the frame's layout and each batch's rendered numbers."""
    shared = [s for s in streams if isinstance(s, TextStream) and type(s).write is TextStream.write]
    for s in streams:
        if not any(s is t for t in shared):
            s.write(df)
    if shared:
        _write_text(shared, df)


def write_csv(
    df: pd.DataFrame, out: IO[bytes], rows: int = BATCH_ROWS, header: bool = True
) -> None:
    """``df.to_csv(out, index=False)``, byte for byte, in batches of ``rows``; ``header=False``:
    the rows only (a later part of a streamed report)."""
    stream = CsvRows(out, rows)
    stream.started = not header
    stream.write(df)


def write_json(df: pd.DataFrame, out: IO[bytes], rows: int = BATCH_ROWS) -> None:
    """``df.to_json(out, orient="records", indent=2, double_precision=15)``, value for value,
    written as records in batches of ``rows`` (never one string for the whole file)."""
    stream = JsonRecords(out, rows)
    stream.write(df)
    stream.close()


class JsonRecords(TextStream):
    """One JSON list of records written from consecutive frames (:func:`write_json` is one
    frame): each record is on its way to disk once its batch is formatted. The comma after a
    record is written with the next one, so the last needs no look-ahead."""

    fmt = "json"

    def __init__(self, out: IO[bytes], rows: int = BATCH_ROWS) -> None:
        super().__init__(out, rows)
        self.count = 0

    def _record_text(self, text: str | memoryview | bytes) -> None:
        # every piece is records joined by ",\n", without the comma after the last
        self.out.write(b"[\n" if self.count == 0 else b",\n")
        self.out.write(text.encode() if isinstance(text, str) else text)

    def begin(self, df: pd.DataFrame) -> bool:
        if len(df) == 0:
            return False
        if len(df.columns) == 0 or any(_plain_kind(df[c]) is None for c in df.columns):
            for lo, hi in _batches(len(df), self.rows):  # pandas' records, stitched
                text = df.iloc[lo:hi].to_json(orient="records", indent=2, double_precision=15)
                self._record_text(text[2:-2])  # without "[\n" and "\n]"
                self.count += hi - lo
            return False
        return True

    def glues(self, df: pd.DataFrame) -> tuple[list[str], str]:
        keys = [json.dumps(str(c)) for c in df.columns]
        glues = [("  {\n    " if i == 0 else ",\n    ") + k + ":" for i, k in enumerate(keys)]
        return glues, "\n  },\n"

    def emit(self, text: memoryview, n: int) -> None:
        self._record_text(text[:-2])
        self.count += n

    def close(self) -> None:
        self.out.write(b"[]" if self.count == 0 else b"\n]")


class CsvRows(TextStream):
    """One CSV file written from consecutive frames: the header with the first."""

    fmt = "csv"

    def __init__(self, out: IO[bytes], rows: int = BATCH_ROWS) -> None:
        super().__init__(out, rows)
        self.started = False

    def begin(self, df: pd.DataFrame) -> bool:
        header, self.started = not self.started, True
        if len(df.columns) < 2 or any(_plain_kind(df[c]) is None for c in df.columns):
            # a dtype only pandas formats (or one column)
            for i, (lo, hi) in enumerate(_batches(max(len(df), 1), self.rows)):
                text = df.iloc[lo:hi].to_csv(index=False, header=header and i == 0)
                self.out.write(text.encode())
            return False
        if header:
            self.out.write((",".join(_csv_field(str(c)) for c in df.columns) + "\n").encode())
        return len(df) > 0

    def glues(self, df: pd.DataFrame) -> tuple[list[str], str]:
        return ["", *[","] * (len(df.columns) - 1)], "\n"

    def emit(self, text: memoryview, n: int) -> None:
        self.out.write(text)


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
