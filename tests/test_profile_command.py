"""End to end with the real nsys: `jlprof [opts] python train.py` profiles, exports, analyses."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import jlprof
from jlprof.reports import REPORTS

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.nsys


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    if shutil.which("nsys") is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH")
    out = tmp_path_factory.mktemp("profiled")
    proc = subprocess.run(
        [sys.executable, "-m", "jlprof", "--key_node=optimizer_step", "--reports=all",
         "--formats=csv,json", f"--output_path={out}", "-f", "true", sys.executable,
         str(ROOT / "examples" / "train_loop.py"), "--steps", "6"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "trained 6 steps" in proc.stdout
    return out


def test_raw_files_kept_and_reports_written(run):
    names = {p.name for p in run.iterdir()}
    assert {"nsys_profile.nsys-rep", "nsys_profile.sqlite", "jlprof_summary.json"} <= names
    assert len([n for n in names if n.startswith("jlprof_")]) == 2 * len(REPORTS)


def test_iterations_and_ops_from_the_real_profile(run):
    s = json.loads((run / "jlprof_summary.json").read_text())
    assert s["Iterations"]["Total Iterations"] == 7  # 6 optimizer_step ranges -> 7 intervals
    assert s["Summary Report"]["I/O Duration %"] > 0  # the loop reads its batches from a file
    assert s["Summary Report"]["Dataloader Duration %"] > 0
    det = pd.read_csv(run / "jlprof_detail.csv").set_index("Op Name")
    assert det.loc["optimizer_step", "No. Calls"] == 6
    assert det.loc["/model/conv1/conv2d", "Op Type"] == "conv2d"
    assert det.loc["/model/conv1/conv2d", "No. Calls"] == 6
    g = pd.read_csv(run / "jlprof_group_node.csv").set_index("Name")
    assert {"/train_step", "/model", "/model/conv1"} <= set(g.index)


def test_load_accepts_the_nsys_rep(run, tmp_path):
    rep = tmp_path / "copy.nsys-rep"
    shutil.copy(run / "nsys_profile.nsys-rep", rep)
    p = jlprof.load(rep, key_node="optimizer_step")
    assert (tmp_path / "copy.sqlite").exists()
    assert p.iterations.count == 7


def test_a_failing_program_fails_jlprof_too(tmp_path):
    """As with nsys: what was captured is analysed, and the program's exit status is jlprof's."""
    if shutil.which("nsys") is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH")
    proc = subprocess.run(
        [sys.executable, "-m", "jlprof", f"--output_path={tmp_path}", "-v", "minimal",
         sys.executable, "-c", "import sys, time; time.sleep(1); print('bye'); sys.exit(3)"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "bye" in proc.stdout and "exit status 3" in proc.stderr
    assert (tmp_path / "jlprof_summary.csv").is_file()
