"""The magic's progress bar names the report being written (issue 18: progress in the notebook)."""

from __future__ import annotations

import pytest

from jlprof.magics.progress import Progress
from tests.fixtures.scenarios import rich_db

pytest.importorskip("ipywidgets")


def test_the_bar_label_follows_the_reports_being_written(tmp_path) -> None:
    import jlprof

    bar = Progress(["analysing", "writing reports"], widget=True)
    bar.step("writing reports")
    seen: list[str] = []

    def detail(text: str) -> None:
        bar.detail(text)
        seen.append(bar._label.value)

    prof = jlprof.load(str(rich_db().write(tmp_path / "rich.sqlite")), key_node="optimizer_step")
    prof.write_reports(tmp_path / "out", ["summary", "kernel"], ["csv", "json"], progress=detail)
    assert seen[0] == "writing reports: building summary…"
    assert "writing reports: writing kernel.json…" in seen
    assert bar._bar.value == 1  # a sub-step never moves the bar itself


def test_text_progress_prints_steps_only(capsys) -> None:
    bar = Progress(["analysing", "writing reports"], widget=False)
    bar.step("writing reports")
    bar.detail("writing kernel.csv")
    out = capsys.readouterr().out
    assert "writing reports (2/2)" in out and "kernel.csv" not in out
