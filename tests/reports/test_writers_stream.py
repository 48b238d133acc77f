"""Streaming writers: whole files or none when a write fails midway, and ``--formats parquet``
from the command line (typed columns that pandas reads back equal to the report)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

import jlprof
from jlprof.errors import OutputError
from jlprof.options import OPTIONS
from jlprof.outputs import PARTIAL, written_file
from jlprof.reports import encoders
from jlprof.reports.writers import report_path
from tests.fixtures.loops import small_training_export

DEFAULT_NAME = next(o for o in OPTIONS if o.name == "profile_name").default


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return small_training_export(tmp_path_factory.mktemp("e") / "loop.sqlite", steps=6)


@pytest.fixture(scope="module")
def prof(export):
    return jlprof.load(export, key_node="optimizer_step")


def _failing_after_first_batch(df, out, rows=2):
    """A CSV writer that dies after it has streamed part of the file."""
    encoders.write_csv(df.iloc[:2], out, rows=1)
    raise OSError(28, "No space left on device")


class _FailingRows(encoders.CsvRows):
    """The streamed (iteration) report's CSV, dying after its first rows."""

    def write(self, df):
        _failing_after_first_batch(df, self.out)


def test_a_failed_stream_leaves_no_file_and_keeps_the_old_one(prof, tmp_path, monkeypatch):
    old = report_path(tmp_path, prof.profile_name, "kernel", "csv")
    old.write_text("yesterday's report")
    monkeypatch.setitem(encoders.WRITERS, "csv", _failing_after_first_batch)
    monkeypatch.setitem(encoders.STREAMS, "csv", _FailingRows)
    with pytest.raises(OutputError, match="no space left"):
        prof.write_reports(tmp_path, ["iteration", "kernel"], ["csv"], force=True)
    assert old.read_text() == "yesterday's report"
    assert not report_path(tmp_path, prof.profile_name, "iteration", "csv").exists()
    assert not list(tmp_path.glob(f".*{PARTIAL}"))


def test_an_interrupt_midway_leaves_nothing(tmp_path):
    target = tmp_path / "x.csv"
    with pytest.raises(KeyboardInterrupt), written_file(target) as f:
        f.write(b"half a row")
        raise KeyboardInterrupt
    assert not target.exists() and not list(tmp_path.iterdir())


def test_cli_writes_parquet_reports(export, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "jlprof", f"--database={export}", "--key_node=optimizer_step",
         "--reports=iteration,kernel,summary", "--formats=parquet,csv", f"--output_path={out}",
         f"--profile_name={DEFAULT_NAME}", "-v", "quiet"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    prof = jlprof.load(export, key_node="optimizer_step", profile_name=DEFAULT_NAME)
    for name in ("iteration", "kernel", "summary"):
        table = pq.read_table(report_path(out, DEFAULT_NAME, name, "parquet"))
        back = table.to_pandas()
        df = prof.report(name)
        assert len(back) == len(df) > 0
        if name == "summary":  # its CSV is DLProf's sectioned layout; Parquet the tidy frame
            assert list(back.columns) == list(df.columns)
            continue
        from_csv = pd.read_csv(report_path(out, DEFAULT_NAME, name, "csv"), keep_default_na=False)
        assert list(back.columns) == list(from_csv.columns)
    it = pq.read_table(report_path(out, DEFAULT_NAME, "iteration", "parquet"))
    assert it.schema.field("GPU Start Time (ns)").type == "int64"
    assert it.schema.field("Uses TC").type == "bool"
    assert (
        it.column("GPU Time (ns)").to_pylist() == prof.report("iteration")["GPU Time (ns)"].tolist()
    )


def test_the_magic_accepts_parquet():
    pytest.importorskip("IPython")
    from jlprof.magics import options as magic_options
    from jlprof.magics.dlprof import DlprofMagics

    ns = DlprofMagics.dlprof.parser.parse_args(["--formats=parquet,csv", "--database=x.sqlite"])
    assert magic_options.from_namespace(ns, cell=False).formats == ["parquet", "csv"]


# ---- the iteration report streamed in parts (issue 18) ------------------------------------


def test_iteration_parts_are_the_report_cut_in_order(prof):
    """Every part size, the whole range (views) and a sub-range (gathered rows): the parts
    joined are the report, row for row, and no part is over the size."""
    from jlprof.reports import tables

    last = prof.iterations.count - 1
    for lo, hi in ((0, last), (1, last - 1)):
        whole = tables.iteration(prof, lo, hi)
        assert len(whole) > 10
        for rows in (1, 7, len(whole) - 1, len(whole), len(whole) + 5):
            parts = list(tables.iteration_parts(prof, lo, hi, rows))
            assert all(0 < len(x) <= rows for x in parts)
            assert len(parts) == -(-len(whole) // rows)
            joined = pd.concat(parts, ignore_index=True)
            pd.testing.assert_frame_equal(joined, whole)


def test_iteration_parts_of_an_empty_range_are_one_empty_frame(prof, monkeypatch):
    from jlprof.reports import tables

    monkeypatch.setattr(prof.cube, "gpu_iter", prof.cube.gpu_iter + 10_000)  # no row in range
    parts = list(tables.iteration_parts(prof, 0, 1, 4))
    assert len(parts) == 1 and len(parts[0]) == 0
    assert list(parts[0].columns) == list(tables.iteration(prof, 0, 1).columns)


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_streamed_iteration_files_equal_the_whole_frames(prof, tmp_path, monkeypatch, fmt):
    """Parts of 5 rows (a boundary every 5 rows) write the file that the whole frame
    writes: CSV and JSON byte for byte, Parquet the same table."""
    import io

    from jlprof.reports import tables

    monkeypatch.setattr(tables, "ITERATION_PART_ROWS", 5)
    [path] = prof.write_reports(tmp_path, ["iteration"], [fmt], force=True)
    whole = prof.report("iteration")
    assert len(whole) > 15
    buf = io.BytesIO()
    encoders.WRITERS[fmt](whole, buf)
    if fmt == "parquet":
        got = pq.read_table(path)
        assert got.equals(pq.read_table(io.BytesIO(buf.getvalue())))
        assert got.num_rows == len(whole)
    else:
        assert path.read_bytes() == buf.getvalue()


@pytest.mark.filterwarnings("ignore:The default formatting of datetime")
def test_streams_of_any_cut_write_the_whole_frames_bytes():
    """CsvRows/JsonRecords fed a frame in parts (empty ones too, and dtypes only pandas
    formats) write what write_csv/write_json write for the frame."""
    import io
    import itertools

    import numpy as np

    df = pd.DataFrame(
        {
            "n": np.arange(9, dtype=np.int64) * 7,
            "t": pd.Categorical(list("abcabcaab")),
            "f": np.linspace(0, 1, 9),
            "ok": [True, False] * 4 + [True],
        }
    )
    dated = df.assign(when=pd.to_datetime(["2026-01-01"] * 9))  # pandas' own formatting
    for frame in (df, dated, df.iloc[:0]):
        for cuts in ((), (0,), (3,), (1, 1, 4), (8,)):
            bounds = [0, *cuts, len(frame)]
            parts = [frame.iloc[a:b] for a, b in itertools.pairwise(bounds)]
            for stream, whole in ((encoders.CsvRows, encoders.write_csv),
                                  (encoders.JsonRecords, encoders.write_json)):  # fmt: skip
                got, want = io.BytesIO(), io.BytesIO()
                s = stream(got, 2)
                for part in parts:
                    s.write(part)
                s.close()
                whole(frame, want, 2)
                assert got.getvalue() == want.getvalue(), (stream.__name__, cuts, len(frame))


def test_ordered_pieces_are_the_global_order_in_whole_iterations():
    """Rows not stored in (iteration, start) order: the pieces, each sorted on its own, joined
    are the one global sort; a piece holds whole iterations, at most ``rows`` rows unless one
    iteration alone has more; rows outside lo..hi appear nowhere."""
    import numpy as np

    from jlprof.reports import tables

    rng = np.random.default_rng(3)
    n = 5_000
    it = rng.integers(-1, 40, n)
    it[rng.random(n) < 0.3] = 7  # one iteration bigger than a piece
    start = rng.integers(0, 50, n)  # ties: kept in stored order, as the global sort keeps them
    for lo, hi, rows in ((0, 39, 100), (3, 30, 1), (0, 39, 10**6), (12, 12, 5)):
        pieces = list(tables._ordered_pieces(it, start, lo, hi, rows))
        joined = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
        assert np.array_equal(joined, tables._in_order(it, start, lo, hi))
        seen: set[int] = set()
        for piece in pieces:
            its = set(it[piece].tolist())
            assert not its & seen  # an iteration never spans two pieces
            seen |= its
            assert len(piece) <= rows or len(its) == 1


# ---- formats written together (write_frames) ----------------------------------------------


def _edge_frame(n: int = 60):
    """Columns of every kind the encoders lay out: coded runs (categoricals with missing
    values and characters to quote, narrow ints, bools, mixed objects), wide ints, uint64,
    floats (rendered per format)."""
    import numpy as np

    rng = np.random.default_rng(7)
    ratio = rng.random(n) * 10.0 ** rng.integers(-8, 20, n)
    return pd.DataFrame(
        {
            "Iteration": np.arange(n) // 6,
            "Op": pd.Categorical(rng.choice(["conv", "a,b", 'say "hi"', "x\ny", ""], n)),
            "Kind": pd.Categorical(rng.choice(["k", None, "m"], n)),
            "Start (ns)": rng.integers(0, 2**62, n),
            "Time (ns)": rng.integers(-5, 2**40, n),
            "Big": rng.integers(0, 2**63, n).astype(np.uint64) * np.uint64(2),
            "TC": rng.random(n) < 0.5,
            "Grid": rng.choice([1, 7, 3136], n),
            "ratio": np.where(rng.random(n) < 0.2, np.nan, ratio),
            "mixed": rng.choice(np.array([1, "two", 3.5, None, True], dtype=object), n),
            "Name": pd.Categorical(rng.choice(["void k<float>(int)", "memcpy"], n)),
        }
    )  # fmt: skip


def _written_together(frame, cuts, rows=4):
    """CSV, JSON and Parquet of ``frame`` given in parts to the three streams at once."""
    import io
    import itertools

    outs = {f: io.BytesIO() for f in ("csv", "json", "parquet")}
    streams = [encoders.STREAMS[f](outs[f], rows) for f in outs]
    bounds = [0, *cuts, len(frame)]
    for a, b in itertools.pairwise(bounds):
        encoders.write_frames(streams, frame.iloc[a:b])
    for s in streams:
        s.close()
    return {f: o.getvalue() for f, o in outs.items()}


@pytest.mark.filterwarnings("ignore:The default formatting of datetime")
def test_formats_written_together_write_each_formats_own_bytes():
    """One layout, one set of rendered numbers per batch for CSV and JSON: each file is still
    the one its format writes alone, and pandas' text (CSV byte for byte, JSON value for
    value), whatever the parts."""
    import io
    import json

    df = _edge_frame()
    dated = df.assign(when=pd.to_datetime(["2026-01-01"] * len(df)))  # pandas' own path
    numbers = df[["ratio", "Start (ns)", "Big"]]  # no run: rendered columns and glues only
    for frame in (df, dated, numbers, df.iloc[:0], df[["Op"]], df[["ratio"]]):
        for cuts in ((), (5, 5), (17,), (1, 30, 31)):  # an empty part too
            got = _written_together(frame, cuts)
            assert got["csv"] == frame.to_csv(index=False).encode(), (list(frame.columns), cuts)
            want = io.BytesIO()
            encoders.write_json(frame, want)
            assert got["json"] == want.getvalue()
            records = json.loads(frame.to_json(orient="records", indent=2, double_precision=15))
            assert json.loads(got["json"]) == json.loads(json.dumps(records))  # NaN-free
            alone = io.BytesIO()
            encoders.write_parquet(frame, alone)
            assert pq.read_table(io.BytesIO(got["parquet"])).equals(pq.read_table(alone))


def test_formats_written_together_lay_a_frame_out_once(monkeypatch):
    calls = []
    real = encoders.layout
    monkeypatch.setattr(encoders, "layout", lambda df: calls.append(len(df)) or real(df))
    _written_together(_edge_frame(), (20,))
    assert calls == [20, 40]  # per part, not per format


def test_a_stream_with_its_own_write_is_given_each_frame():
    """A stream class that writes frames itself (e.g. a test's failing one) gets every frame
    through its ``write``; the others are written together."""
    import io

    seen = []

    class Counting(encoders.CsvRows):
        def write(self, df):
            seen.append(len(df))
            super().write(df)

    df = _edge_frame(30)
    own, csv, js = io.BytesIO(), io.BytesIO(), io.BytesIO()
    streams = [Counting(own), encoders.CsvRows(csv), encoders.JsonRecords(js)]
    encoders.write_frames(streams, df.iloc[:10])
    encoders.write_frames(streams, df.iloc[10:])
    for s in streams:
        s.close()
    assert seen == [10, 20]
    assert own.getvalue() == csv.getvalue() == df.to_csv(index=False).encode()


def test_batches_stay_under_the_string_offset_limit(monkeypatch):
    """A batch's text is one Arrow string buffer (int32 offsets): wide rows cut the batch so
    that its text stays under the limit, and the file is the same."""
    import io

    df = _edge_frame(40).assign(Long=pd.Categorical(["x" * 500, "y" * 700] * 20))
    want = df.to_csv(index=False).encode()
    monkeypatch.setattr(encoders, "_MAX_BATCH_BYTES", 4_000)
    sizes = []

    class Sized(encoders.CsvRows):
        def emit(self, text, n):
            sizes.append((len(text), n))
            super().emit(text, n)

    buf = io.BytesIO()
    s = Sized(buf, rows=1000)
    s.write(df)
    assert buf.getvalue() == want
    assert len(sizes) > 1 and all(size <= 4_000 for size, _n in sizes)
    assert sum(n for _s, n in sizes) == len(df)


def test_the_iteration_report_streams_while_the_others_are_built(prof, tmp_path, monkeypatch):
    """The iteration report's parts are written in a thread of its own while this thread
    builds the kernel report: its first part waits until the kernel report is being built
    (one thread doing both in turn would never get there and fail the wait)."""
    import threading

    from jlprof.reports import catalog, tables

    building = threading.Event()
    parts, report = tables.iteration_parts, catalog.report
    seen: list[str] = []

    def waiting_parts(p, lo, hi, rows=None):
        seen.append(threading.current_thread().name)
        assert building.wait(10), "the kernel report was not built beside the stream"
        yield from parts(p, lo, hi, rows)

    def marking_report(p, name, *a):
        building.set()
        return report(p, name, *a)

    monkeypatch.setattr(tables, "iteration_parts", waiting_parts)
    monkeypatch.setattr(catalog, "report", marking_report)
    paths = prof.write_reports(tmp_path, ["kernel", "iteration"], ["csv"], force=True)
    assert [p.name for p in paths] == [
        f"{DEFAULT_NAME}_kernel.csv",
        f"{DEFAULT_NAME}_iteration.csv",
    ]
    assert seen == ["jlprof-iteration"]
    monkeypatch.setattr(tables, "iteration_parts", parts)
    assert paths[1].read_bytes() == encoders_csv_bytes(prof.report("iteration"))


def encoders_csv_bytes(df: pd.DataFrame) -> bytes:
    import io

    buf = io.BytesIO()
    encoders.WRITERS["csv"](df, buf)
    return buf.getvalue()


def test_a_failed_report_stops_the_iteration_stream_and_leaves_none_of_it(
    prof, tmp_path, monkeypatch
):
    """Another report fails while the iteration report streams: the stream is cancelled
    and its file never appears (nor a partial one), and its thread is gone."""
    import threading

    from jlprof.reports import catalog, tables

    failed = threading.Event()
    parts = tables.iteration_parts

    def waiting_parts(p, lo, hi, rows=None):
        assert failed.wait(10)
        yield from parts(p, lo, hi, rows)

    def broken(p, name, *a):
        failed.set()
        raise OutputError("kernel report failed")

    monkeypatch.setattr(tables, "iteration_parts", waiting_parts)
    monkeypatch.setattr(catalog, "report", broken)
    with pytest.raises(OutputError, match="kernel report failed"):
        prof.write_reports(tmp_path, ["iteration", "kernel"], ["csv", "json"], force=True)
    assert not any(t.name == "jlprof-iteration" for t in threading.enumerate())
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("stream", [False, True])
def test_group_partials_are_built_with_the_cube_when_nothing_streams(
    export, tmp_path, monkeypatch, stream
):
    """A command's profile (``range_only``) builds its cube when its reports need it. With no
    iteration report streaming beside it (the windowed engine wrote that report as it read;
    here: not asked for), the group-node partials are built with the cube's other parts, in
    its second thread on a small trace, rather than alone on this one for the last report.
    With the stream running they wait for first use: the stream has the other core."""
    import threading

    from jlprof.engine.aggregate import aggregate

    built: list[str] = []
    group_iter = aggregate._group_iter

    def spy(*a, **k):
        built.append(threading.current_thread().name)
        return group_iter(*a, **k)

    monkeypatch.setattr(aggregate, "_group_iter", spy)
    p = jlprof.load(export, key_node="optimizer_step", range_only=True)
    assert p._cubes == {}
    reports = ["summary", "group_node"] + (["iteration"] if stream else [])
    p.write_reports(tmp_path, reports, ["csv"], force=True)
    whole = jlprof.load(export, key_node="optimizer_step")
    assert built[0] == ("MainThread" if stream else "jlprof-cube")
    assert len(built) == 2  # the range-only profile's, and the whole one's at load
    got = pd.read_csv(report_path(tmp_path, p.profile_name, "group_node", "csv"))
    pd.testing.assert_frame_equal(got, whole.report("group_node").reset_index(drop=True))


def test_the_windowed_iteration_files_are_bursty_and_the_streamed_ones_not(
    prof, tmp_path, monkeypatch
):
    """The windowed engine writes the iteration report a part a window, with the window's work
    between parts: its CSV and JSON are opened ``bursty`` (never probed, past the page cache
    from 64 MiB); the whole trace's stream, a part after another, is probed as any file."""
    from jlprof import outputs
    from jlprof.reports import tables, writers

    seen: dict[str, bool] = {}
    real = outputs.written_file

    def spy(target, *args, **kwargs):
        seen[Path(target).suffix] = kwargs.get("bursty", False)
        return real(target, *args, **kwargs)

    monkeypatch.setattr(outputs, "written_file", spy)
    lo, hi = prof.range_of(None, None)
    with writers.iteration_files(tmp_path, "p", ["csv", "json", "parquet"], False) as (write, _):
        write(next(iter(tables.iteration_parts(prof, lo, hi))))
    assert seen == {".csv": True, ".json": True, ".parquet": False}
    seen.clear()
    writers.write_reports(prof, tmp_path / "s", ["iteration"], ["csv", "json"], False)
    assert seen == {".csv": False, ".json": False}


@pytest.mark.parametrize("where", ["caller", "write"])
def test_a_failed_windowed_iteration_report_leaves_none_of_it(prof, tmp_path, monkeypatch, where):
    """The windows fail (the caller, after a part was written) or a part cannot be written:
    the error reaches the caller, naming the file and the fix for a full disk, and no file
    nor partial one is left."""
    from jlprof.reports import tables, writers

    lo, hi = prof.range_of(None, None)
    parts = list(tables.iteration_parts(prof, lo, hi))
    real = writers.write_frames

    def broken(streams, part):
        real(streams, part)
        raise OSError(28, "No space left on device")

    if where == "write":
        monkeypatch.setattr(writers, "write_frames", broken)
    expected = (
        (OutputError, "no space left on the device")
        if where == "write"
        else (RuntimeError, "a window failed")
    )
    files = writers.iteration_files(tmp_path, "p", ["csv", "json"], False)
    with pytest.raises(expected[0], match=expected[1]), files as (write, _):
        write(parts[0])
        if where == "caller":
            raise RuntimeError("a window failed")
        for part in parts[1:]:
            write(part)
    assert not list(tmp_path.iterdir())
