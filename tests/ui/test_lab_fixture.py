"""The shared browser fixtures work: a real JupyterLab runs a notebook in headless Chromium."""

from __future__ import annotations

from tests.ui.conftest import write_notebook
from tests.ui.lab import open_notebook, run_all_cells


def test_api_requires_token(lab_server) -> None:
    status, _ = lab_server.api("api/contents", token=False)
    assert status == 403
    status, body = lab_server.api("api/contents")
    assert status == 200 and body["type"] == "directory"


def test_notebook_runs_in_chromium(lab_server, page) -> None:
    write_notebook(lab_server.root, "smoke/sum.ipynb", ["print(sum(range(7)) * 1000 + 7)"])
    open_notebook(page, lab_server, "smoke/sum.ipynb")
    run_all_cells(page)
    output = page.locator(".jp-OutputArea-output").first
    output.wait_for()
    assert "21007" in output.inner_text()
