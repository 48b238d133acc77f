"""``%dlprof --database=DIR``: a job's ranks analysed on Dask from the notebook."""

from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("distributed")

from tests.fixtures.ranks import rank_exports


def test_database_directory_is_a_job(shell, tmp_path):
    rank_exports(tmp_path / "job", 4, straggler=1)
    out = shell.line(f"--database={tmp_path / 'job'} --output_path=ranks_out -o job")
    ranks = shell.ns["job"]
    table = ranks.report("ranks")
    assert table.loc[table["Straggler"], "Rank"].tolist() == [1]
    written = pd.read_csv(shell.cwd / "ranks_out" / "dlprof_ranks.csv", keep_default_na=False)
    pd.testing.assert_frame_equal(written, table)
    assert (shell.cwd / "ranks_out" / "rank3" / "dlprof_summary.csv").exists()
    assert "Traceback" not in out.stderr
