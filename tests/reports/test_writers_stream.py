"""Streaming writers: whole files or none when a write fails midway, and ``--formats parquet``
from the command line (typed columns that pandas reads back equal to the report)."""

from __future__ import annotations

import subprocess
import sys

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


def test_a_failed_stream_leaves_no_file_and_keeps_the_old_one(prof, tmp_path, monkeypatch):
    old = report_path(tmp_path, prof.profile_name, "kernel", "csv")
    old.write_text("yesterday's report")
    monkeypatch.setitem(encoders.WRITERS, "csv", _failing_after_first_batch)
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
