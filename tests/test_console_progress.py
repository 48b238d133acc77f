"""Stage progress of the jlprof command: stage names on stderr once a run passes 2 s, nothing
for a short run, nothing at -v quiet, and stdout (the summary scripts read) untouched."""

from __future__ import annotations

import io
import json

import pytest

from jlprof import console
from jlprof.cli import main
from jlprof.console import StageProgress
from jlprof.options import OPTIONS
from tests.fixtures.loops import small_training_export

NAME = next(o for o in OPTIONS if o.name == "profile_name").default


def test_stages_are_named_and_counted_after_the_delay():
    out = io.StringIO()
    bar = StageProgress(3, delay=0.0, stream=out)
    for s in ("reading", "correlating", "writing iteration.csv", "writing kernel.csv"):
        bar(s)
    bar.close()
    lines = out.getvalue().splitlines()
    assert [ln.split("] ", 1)[1] for ln in lines] == [
        "reading (1/3)",
        "correlating (2/3)",
        "writing iteration.csv (3/3)",
        "writing kernel.csv (4/4)",
        "done (4 stages)",
    ]


def test_a_short_run_or_a_quiet_one_shows_nothing():
    for kw in ({"delay": 60.0}, {"delay": 0.0, "enabled": False}):
        out = io.StringIO()
        bar = StageProgress(2, stream=out, **kw)
        bar("reading")
        bar.close()
        assert out.getvalue() == ""


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return small_training_export(tmp_path_factory.mktemp("e") / "loop.sqlite", steps=4)


def _run(export, out, capsys, *extra):
    rc = main([f"--database={export}", "--key_node=optimizer_step",
               "--reports=iteration,kernel", "--formats=csv,json", f"--output_path={out}",
               f"--profile_name={NAME}", *extra])  # fmt: skip
    assert rc == 0
    return capsys.readouterr()


def test_the_command_shows_its_stages_on_stderr(export, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(console, "DELAY_S", 0.0)  # as if the run were long
    cap = _run(export, tmp_path / "a", capsys)
    stages = [ln.split("] ", 1)[1] for ln in cap.err.splitlines() if ln.endswith(")")]
    names = [s.rsplit(" (", 1)[0] for s in stages]
    assert names[0].startswith("reading")
    assert "finding iterations" in names
    for want in ("building iteration", "writing iteration.csv", "writing kernel.json"):
        assert want in names
    assert "(1/" in stages[0]
    assert "Total Iterations" in json.loads(cap.out)["Iterations"]  # stdout is still the JSON


def test_short_and_quiet_runs_show_no_stages(export, tmp_path, capsys, monkeypatch):
    cap = _run(export, tmp_path / "b", capsys)  # a small trace ends well within 2 s
    assert "writing iteration.csv" not in cap.err
    monkeypatch.setattr(console, "DELAY_S", 0.0)
    cap = _run(export, tmp_path / "c", capsys, "-v", "quiet")
    assert cap.err == ""
