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
    # the static copy for kernel-less viewers is there but hidden behind the live view
    assert page.locator(".jlprof-diff-static").count() == 1
    assert not page.locator(".jlprof-diff-static").first.is_visible()


def test_saved_diff_shows_the_static_copy_without_a_kernel(lab_server, page, tmp_path) -> None:
    """A notebook saved with the diff's outputs, opened with no kernel: the static copy shows
    (verdict, evidence, changed ops), the widget's "model not found" error is hidden."""
    import nbformat

    import jlprof
    from jlprof.widgets.diff import static_html

    base = diff_run(tmp_path / "base.sqlite")
    slow = diff_run(tmp_path / "slow.sqlite", scale=1.5)
    r = jlprof.load(base.path).compare(jlprof.load(slow.path), iter_stop=5, other_iter_stop=5)
    path = write_notebook(lab_server.root, "diff/saved.ipynb", ["%dlprof --diff a b"])
    nb = nbformat.read(path, as_version=4)
    widget = {"model_id": "0" * 32, "version_major": 2, "version_minor": 0}
    nb.cells[0].outputs = [
        nbformat.v4.new_output("display_data", data={
            "application/vnd.jupyter.widget-view+json": widget, "text/plain": repr(r)}),
        nbformat.v4.new_output("display_data", data={"text/html": static_html(r)}),
    ]  # fmt: skip
    nbformat.write(nb, path)
    open_notebook(page, lab_server, "diff/saved.ipynb")
    page.wait_for_selector(".jlprof-diff-static", timeout=60_000)
    static = page.locator(".jlprof-diff-static").first
    assert static.is_visible()
    text = static.inner_text()
    assert "jlprof diff: regression likely" in text and "/model/conv1/conv2d" in text
    assert "Median Iteration Time" in text and "214.5 µs" in text  # 146.5 µs + 68 µs added
