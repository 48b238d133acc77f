"""The jlprof command line, run as users run it (a subprocess) and in-process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from jlprof.cli import main
from jlprof.options import DEFAULT_PROFILE_NAME
from jlprof.profile import REPORTS
from jlprof.reports.writers import report_path
from tests.fixtures.loops import small_training_export


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    return small_training_export(tmp_path_factory.mktemp("cli") / "run.sqlite")


def test_all_reports_in_both_formats(export, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "jlprof", f"--database={export}", "--key_node", "optimizer_step",
         "--reports", "all", "--formats", "csv,json", "--output_path", str(out), "-f", "true"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in out.iterdir())
    want = [
        report_path(out, DEFAULT_PROFILE_NAME, r, e).name for r in REPORTS for e in ("csv", "json")
    ]
    assert names == sorted([*want, f"{DEFAULT_PROFILE_NAME}_dldb.sqlite"])
    summary = json.loads((out / "dlprof_summary.json").read_text())
    assert summary["Iterations"]["Total Iterations"] == 6
    kern = pd.read_csv(out / "dlprof_kernel.csv")
    conv = kern[kern["Kernel Name"].str.contains("h884")]
    assert conv["Uses TC"].all() and conv["Total GPU Time (ns)"].sum() == 5 * 50_000
    det = json.loads((out / "dlprof_detailed.json").read_text())
    assert {"Op ID", "Op Name", "No. Calls", "Total GPU Time (ns)"} <= set(det[0])
    assert "key node 'optimizer_step': 6 iterations" in proc.stderr


def test_profile_name_and_force(export, tmp_path):
    args = [f"--database={export}", "--reports=kernel", f"--output_path={tmp_path}",
            "--profile_name=my run", "-v", "quiet"]  # fmt: skip
    assert main(args) == 0
    target = tmp_path / "my_run_kernel.csv"
    target.write_text("kept")
    assert main(args) == 0
    assert target.read_text() == "kept"
    assert main([*args, "-f", "true"]) == 0
    assert target.read_text().startswith("Kernel Name")


def test_iteration_range_and_dump_and_save_db(export, tmp_path, capsys):
    db = tmp_path / "run.jlprof"
    assert main([f"--database={export}", "--key_node=optimizer_step", "--iter_start=1",
                 "--iter_stop=3", "--reports=summary,iteration", "--formats=json",
                 f"--output_path={tmp_path}", "--dump_model_data=true",
                 f"--save_db={db}"]) == 0  # fmt: skip
    its = json.loads((tmp_path / "dlprof_summary.json").read_text())["Iterations"]
    assert (its["Start Iteration"], its["Stop Iteration"], its["Aggregated Iterations"]) == (
        1,
        3,
        3,
    )
    rows = json.loads((tmp_path / "dlprof_iteration.json").read_text())
    assert {r["Iteration"] for r in rows} == {1, 2, 3}
    model = json.loads((tmp_path / "dlprof_model_data.json").read_text())
    assert {"op_name", "path", "iteration", "gpu_ns"} <= set(model[0])
    # the saved jlprof database re-analyses to the same numbers
    out2 = tmp_path / "again"
    capsys.readouterr()
    assert main([f"--database={db}", "--key_node=optimizer_step", "--iter_start=1",
                 "--iter_stop=3", "--reports=summary", "--formats=json",
                 f"--output_path={out2}"]) == 0  # fmt: skip
    a = json.loads((tmp_path / "dlprof_summary.json").read_text())
    b = json.loads((out2 / "dlprof_summary.json").read_text())
    assert a["Summary Report"] == b["Summary Report"] and a["All Ops"] == b["All Ops"]


def test_no_key_node_reports_candidates(tmp_path, capsys):
    export = small_training_export(tmp_path / "sgd.sqlite", key="sgd_update")
    assert main([f"--database={export}", "--reports=summary,expert_systems",
                 f"--output_path={tmp_path}"]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert "0 iterations found" in err and "Candidates for --key_node:" in err
    es = pd.read_csv(tmp_path / "dlprof_expert_systems.csv")
    assert "No Iteration Detector" in set(es["Detector"])


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--key_node=nope"], "key node 'nope' is not an op name"),
        (["--key_node=optimizer_step", "--iter_start=3", "--iter_stop=1"], "before --iter_start"),
        (["--key_node=optimizer_step", "--iter_stop=99"], "past the last iteration"),
        (["--reports=bogus"], "unknown report 'bogus'"),
    ],
)
def test_errors_are_one_line_exit_2(export, tmp_path, capsys, args, msg):
    assert main([f"--database={export}", f"--output_path={tmp_path}", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("jlprof: error: ") and msg in err[-1]
    assert not any("Traceback" in line for line in err)


def test_nothing_to_analyse(capsys):
    assert main([]) == 2
    assert "give --database=FILE or a command" in capsys.readouterr().err
