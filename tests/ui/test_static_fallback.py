"""A saved notebook with a displayed dashboard, reopened in JupyterLab without a kernel, shows
the static rendering (cards, summary, Bokeh figures) instead of ipywidgets' "Error displaying
widget: model not found"; while the kernel is live the static copy stays hidden."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.loops import small_training_export
from tests.ui.conftest import write_notebook
from tests.ui.lab import open_notebook, run_all_cells, screenshot
from tests.ui.test_dashboard import DEEP

NB = "fallback/saved.ipynb"
SHOWN = "el => !!el && el.getClientRects().length > 0"  # rendered and not display:none


def _visible(page, selector: str) -> bool:
    return bool(page.evaluate(f"() => ({SHOWN})(document.querySelector({selector!r}))"))


def _canvases(page, selector: str) -> int:
    """Drawn Bokeh canvases under the first element matching ``selector``."""
    return int(
        page.evaluate(
            f"() => {{ const r = document.querySelector({selector!r});"
            f" return r ? ({DEEP})(r, 'canvas').filter(c => c.width > 0).length : 0; }}"
        )
    )


@pytest.fixture
def cleanup(lab_server):
    yield
    status, kernels = lab_server.api("api/kernels")
    for k in kernels if status == 200 else []:
        lab_server.api(f"api/kernels/{k['id']}", method="DELETE")
    lab_server.api(f"api/contents/{NB}", method="DELETE")
    lab_server.api("lab/api/workspaces/default", method="DELETE")


def test_reopened_without_kernel_shows_the_static_dashboard(
    lab_server, page, tmp_path: Path, cleanup
) -> None:
    export = small_training_export(tmp_path / "loop.sqlite", steps=6)
    write_notebook(
        lab_server.root, NB, [f"import jlprof\np = jlprof.load({str(export)!r})\np.dashboard()"]
    )
    page.set_viewport_size({"width": 1400, "height": 2300})
    # the server is shared: no tabs of earlier tests restored (hidden) into this page
    lab_server.api("lab/api/workspaces/default", method="DELETE")
    open_notebook(page, lab_server, NB)
    run_all_cells(page)
    page.wait_for_function(
        f"() => ({DEEP})(document.querySelector('.jlprof-dashboard'), 'canvas').length >= 3"
    )
    # live: the dashboard shows, its static copy is in the page but hidden (not twice)
    assert page.locator(".jlprof-static").count() == 1
    assert _visible(page, ".jlprof-dashboard")
    assert not _visible(page, ".jlprof-static")
    assert _canvases(page, ".jlprof-static") == 0  # hidden: its figures were not embedded
    screenshot(page, "fallback-live")
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000
    )

    # reopen without a kernel: no kernelspec a kernel could be started for, "No Kernel"
    page.goto("about:blank")
    status, kernels = lab_server.api("api/kernels")
    for k in kernels if status == 200 else []:
        lab_server.api(f"api/kernels/{k['id']}", method="DELETE")
    status, model = lab_server.api(f"api/contents/{NB}?content=1")
    assert status == 200
    nb = model["content"]
    assert any(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        for o in nb["cells"][0]["outputs"]
    ), "the saved notebook holds the widget output"
    spec = {"name": "no-such-kernel", "display_name": "gone", "language": "none"}
    nb["metadata"]["kernelspec"] = spec
    nb["metadata"].pop("language_info", None)
    body = {"type": "notebook", "format": "json", "content": nb}
    status, _ = lab_server.api(f"api/contents/{NB}", method="PUT", body=body)
    assert status == 200
    # edited outside JupyterLab: sign it again, as a user's own saved notebook is
    subprocess.run(
        [sys.executable, "-m", "jupyter", "trust", str(lab_server.root / NB)],
        env=lab_server.env,
        check=True,
        capture_output=True,
    )
    lab_server.api("lab/api/workspaces/default", method="DELETE")
    page.goto(lab_server.lab_url(NB), wait_until="domcontentloaded")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=90_000)
    page.wait_for_selector(".jp-Dialog", timeout=60_000)
    no_kernel = page.locator(".jp-Dialog button:has-text('No Kernel')")
    if no_kernel.count():
        no_kernel.first.click()
    else:
        page.keyboard.press("Escape")
    page.wait_for_selector(".jp-Dialog", state="detached")
    status, kernels = lab_server.api("api/kernels")
    assert status == 200 and kernels == [], "no kernel was started"

    # the static rendering shows, with its figures; the failed widget output does not
    page.wait_for_function(f"() => ({SHOWN})(document.querySelector('.jlprof-static'))")
    page.wait_for_function(
        f"() => ({DEEP})(document.querySelector('.jlprof-static'), 'canvas')"
        ".filter(c => c.width > 0).length >= 3",
        timeout=60_000,
    )
    text = page.locator(".jlprof-static").inner_text()
    assert "Static jlprof dashboard" in text
    assert "Iterations found" in text and "7" in text  # 6 steps + the tail
    # the widget output just before it (ipywidgets: "Loading widget..." for good without a
    # kernel, or "Error displaying widget: model not found") is hidden: no empty box
    widget_out = page.evaluate(
        "() => { const c = document.querySelector('.jlprof-static')"
        ".closest('.jp-OutputArea-child').previousElementSibling;"
        " return [c.innerText, c.getClientRects().length]; }"
    )
    assert "widget" in widget_out[0].lower() and widget_out[1] == 0, widget_out
    assert page.locator(".jlprof-dashboard").count() == 0
    screenshot(page, "fallback-no-kernel")
