"""``%dlprof --diff BASE NEW`` in a real JupyterLab: the diff view (verdict, waterfall of the
biggest op deltas, both iteration timelines, changed ops) renders in the page."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.diffs import diff_run
from tests.ui.conftest import write_notebook
from tests.ui.lab import DEEP, open_notebook, run_all_cells


def test_magic_diff_shows_the_view(lab_server, page, tmp_path: Path) -> None:
    base = diff_run(tmp_path / "base.sqlite")
    slow = diff_run(tmp_path / "slow.sqlite", scale=1.5)
    write_notebook(
        lab_server.root,
        "diff/diff.ipynb",
        [
            "%load_ext jlprof",
            f"%dlprof --diff {base.path} {slow.path} --iter_stop 5 -o cmp",
            "print(cmp.verdict, len(cmp.ops))",
        ],
    )
    open_notebook(page, lab_server, "diff/diff.ipynb")
    run_all_cells(page)
    page.wait_for_selector(".jlprof-diff", timeout=60_000)
    page.wait_for_function(
        f"() => ({DEEP})(document.querySelector('.jlprof-diff'), 'canvas').length >= 2",
        timeout=60_000,
    )
    text = page.locator(".jlprof-diff").first.inner_text()
    assert "jlprof diff: regression likely" in text
    assert "/model/conv1/conv2d" in text  # the changed-ops table
    assert "+46.42%" in text  # the evidence: median iteration time, known by construction
    out = page.locator(".jp-OutputArea-output").last.inner_text()
    assert "regression likely 6" in out
