"""Run folders and the ``jlprof-run/1`` manifest the JupyterLab sidebar reads."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from jlprof import runs

KEYS = {
    "format", "created", "profile_name", "key_node", "database", "nsys_report", "iterations",
    "wall_ns", "gpu_util_pct", "tc_util_pct", "avg_iter_ns", "status", "error",
}  # fmt: skip


def test_each_run_gets_a_new_timestamped_folder(tmp_path):
    a, b = runs.new_run_folder(tmp_path), runs.new_run_folder(tmp_path)
    assert a != b and a.parent == b.parent == tmp_path / "jlprof_runs"
    for folder in (a, b):
        assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", folder.name)
        stamp = dt.datetime.strptime(folder.name[:15], "%Y%m%d-%H%M%S")
        assert abs((dt.datetime.now() - stamp).total_seconds()) < 60


def test_manifest_has_the_agreed_keys_and_types(tmp_path):
    head = {"key_node": "optimizer_step", "iterations": 7, "wall_ns": 123, "gpu_util_pct": 1.5,
            "tc_util_pct": 0.0, "avg_iter_ns": 17.5, "source": "x", "range": (0, 6)}  # fmt: skip
    data = runs.manifest(
        profile_name="p",
        database=tmp_path / "nsys_profile.sqlite",
        nsys_report=tmp_path / "nsys_profile.nsys-rep",
        status="ok",
        headline=head,
    )
    assert set(data) == KEYS
    assert data["format"] == "jlprof-run/1"
    assert data["database"] == "nsys_profile.sqlite"  # relative to the folder
    assert data["nsys_report"] == "nsys_profile.nsys-rep"
    assert (data["iterations"], data["wall_ns"], data["avg_iter_ns"]) == (7, 123, 17.5)
    created = dt.datetime.fromisoformat(data["created"])
    assert created.utcoffset() == dt.timedelta(0)
    folder = runs.new_run_folder(tmp_path)
    path = runs.write_manifest(folder, data)
    assert json.loads(path.read_text()) == data == runs.read_manifest(folder)
    assert runs.list_runs(tmp_path) == [folder]
    later = runs.new_run_folder(tmp_path)  # same second, random suffix: still listed after
    runs.write_manifest(later, data)
    assert runs.list_runs(tmp_path) == [folder, later]
    assert sorted(p.name for p in folder.iterdir()) == ["jlprof_run.json"]  # no partial file left


def test_failed_run_manifest_keeps_the_error(tmp_path):
    data = runs.manifest(profile_name="p", database=None, nsys_report="r.qdstrm",
                         status="capture_empty", error="nothing was captured")  # fmt: skip
    assert data["database"] is None and data["iterations"] == 0
    assert data["error"] == "nothing was captured"
    with pytest.raises(ValueError, match="status"):
        runs.manifest(profile_name="p", database=None, nsys_report=None, status="fine")
