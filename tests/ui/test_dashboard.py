"""The dashboard in a real JupyterLab, driven in headless Chromium: the range slider and the
key-node combobox re-aggregate in the kernel and the Bokeh views redraw in the page."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.loops import small_training_export
from tests.ui.conftest import write_notebook
from tests.ui.lab import BOKEH_VIEWS, DEEP, open_notebook, run_all_cells, screenshot

STEPS = 12


def _text(page, selector: str) -> str:
    return page.locator(selector).first.inner_text()


def _kernel_calls(page) -> list[str]:
    """The Calls column of the Bokeh kernel table as the browser shows it."""
    rows = page.evaluate(
        f"() => ({DEEP})(document, '.slick-row')"
        ".map(r => [...r.querySelectorAll('.slick-cell')].map(c => c.innerText.trim()))"
    )
    return [r[2] for r in rows if len(r) == 6 and r[5] in ("yes", "no")]


# JavaScript: keep the text of every message the page sends its kernel from now on
SPY_SENDS = """() => {
    const ws = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel._ws;
    const send = ws.send.bind(ws);
    window.__jlprofSent = [];
    ws.send = (d) => {
        window.__jlprofSent.push(typeof d === 'string' ? d : new TextDecoder().decode(d));
        return send(d);
    };
}"""


@pytest.fixture
def dashboard_page(lab_server, page, tmp_path: Path):
    export = small_training_export(tmp_path / "loop.sqlite", steps=STEPS)
    write_notebook(
        lab_server.root,
        "dash/dashboard.ipynb",
        [f"import jlprof\np = jlprof.load({str(export)!r})\nd = p.dashboard()\nd"],
    )
    open_notebook(page, lab_server, "dash/dashboard.ipynb")
    run_all_cells(page)
    page.wait_for_selector(".jlprof-dashboard .jlprof-cards", timeout=60_000)
    page.wait_for_function(
        f"() => ({DEEP})(document.querySelector('.jlprof-dashboard'), 'canvas').length >= 3",
        timeout=60_000,
    )
    page.wait_for_function(
        "() => document.querySelector('.jlprof-dashboard').innerText.includes('updated in')"
    )
    news = page.locator(".jp-Notification-Toast-close, .jp-toast-button:has-text('No')")
    if news.count():
        news.first.click()
    # tall enough that the whole dashboard is in the screenshots (the notebook scrolls inside)
    page.set_viewport_size({"width": 1400, "height": 2300})
    yield page
    # leave the shared server as we found it: no kernel holding the profile, no notebook or
    # saved layout for JupyterLab to restore (hidden) into the next test's page
    page.goto("about:blank")
    status, kernels = lab_server.api("api/kernels")
    for k in kernels if status == 200 else []:
        lab_server.api(f"api/kernels/{k['id']}", method="DELETE")
    lab_server.api("api/contents/dash/dashboard.ipynb", method="DELETE")
    lab_server.api("lab/api/workspaces/default", method="DELETE")


def test_slider_and_key_node_update_the_views(dashboard_page) -> None:
    page = dashboard_page
    dash = ".jlprof-dashboard"
    cards0 = _text(page, f"{dash} .jlprof-cards")
    # STEPS key nodes cut STEPS + 1 intervals; the partial first and last are left out
    note = f"over {STEPS - 1} complete iteration(s); partial interval 0 and {STEPS} left out"
    assert f"mean ± std {note}" in cards0
    calls0 = _kernel_calls(page)
    assert sorted(calls0) == ["12", "12", "12"], calls0
    screenshot(page, "dashboard-initial")

    # what the page sends the kernel from here on (its kernel connection's websocket)
    page.evaluate(SPY_SENDS)
    # move the slider's lower handle 3 steps right with the keyboard (a real user action)
    handle = page.locator(f"{dash} .widget-slider .noUi-handle-lower")
    handle.focus()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "() => document.querySelector('.jlprof-dashboard').innerText.includes('iterations 3..12')",
        timeout=30_000,
    )
    page.wait_for_function(
        "() => document.querySelector('.jlprof-dashboard .jlprof-cards').innerText"
        ".includes('over 9 complete iteration(s); partial interval 12 left out')"
    )
    # the Bokeh kernel table in the page now counts 9 full steps (3..11) plus the tail
    page.wait_for_timeout(500)
    calls1 = _kernel_calls(page)
    assert sorted(calls1) == ["9", "9", "9"], calls1
    # the page sent the slider's values, not the patched sources back (see views._one_way)
    sent = page.evaluate("() => window.__jlprofSent")
    assert any('"value":[3,12]' in m.replace(" ", "") for m in sent), sent[:3]
    assert not [m for m in sent if '"attr":"data"' in m.replace(" ", "")]
    screenshot(page, "dashboard-range-3-12")

    # pick another key node in the combobox: iterations are rebuilt, the range resets
    box = page.locator(f"{dash} input[list]")  # the combobox (a datalist input)
    box.fill("/model/conv1/conv2d")
    box.press("Enter")
    page.wait_for_function(
        "() => document.querySelector('.jlprof-dashboard .jlprof-cards').innerText"
        ".includes('/model/conv1/conv2d')",
        timeout=30_000,
    )
    page.wait_for_function(  # the range resets to every iteration of the new key node
        "() => document.querySelector('.jlprof-dashboard').innerText.includes('iterations 0..12')",
        timeout=30_000,
    )
    text = _text(page, dash)
    assert "mean ± std over 11 complete iteration(s); partial interval 0 and 12 left out" in text
    page.wait_for_timeout(500)
    assert sorted(_kernel_calls(page)) == ["12", "12", "12"]
    screenshot(page, "dashboard-key-node")


# JavaScript: the page position of the first GPU bar's centre, from BokehJS' own view of the
# GPU timeline (its scales map data to canvas pixels)
FIRST_BAR = f"""() => {{
    const views = ({BOKEH_VIEWS})();
    const pv = views.find(v => v.model.title?.text?.startsWith?.('GPU timeline'));
    const r = pv.renderer_views ? [...pv.renderer_views.values()] : [];
    const bars = r.find(rv => rv.model.data_source && 'busy_us' in rv.model.data_source.data);
    const d = bars.model.data_source.data;
    const x = pv.frame.x_scale.compute((d.left[0] + d.right[0]) / 2);
    const y = pv.frame.y_scale.compute(d.y[0]);
    pv.canvas_view.el.scrollIntoView({{block: 'center'}});  // below the fold on a small page
    const box = pv.canvas_view.el.getBoundingClientRect();
    return {{x: box.left + x, y: box.top + y}};
}}"""


def test_gpu_bar_hover_names_its_kernel(dashboard_page) -> None:
    """Bars carry name codes; the hover's lookup (a CustomJSHover) shows the kernel's name."""
    page = dashboard_page
    at = page.evaluate(FIRST_BAR)
    page.mouse.move(at["x"], at["y"])
    tip = f"() => ({DEEP})(document, '.bk-tooltip-content').map(t => t.innerText).join(' | ')"
    page.wait_for_function(f"() => ({tip})().includes('duration')", timeout=10_000)
    text = page.evaluate(tip)
    names = ("volta_h884cudnn", "vectorized_elementwise_kernel", "multi_tensor_apply_kernel")
    assert any(n in text for n in names), text
    screenshot(page, "dashboard-hover")


def test_analyses_section_opens_with_its_tabs(dashboard_page) -> None:
    """The collapsed Analyses section: opening it builds a second Bokeh view in the page (the
    idle-cause stack first), and its tabs switch to the roofline."""
    page = dashboard_page
    dash = ".jlprof-dashboard"
    count = f"() => ({DEEP})(document.querySelector('{dash}'), 'canvas').length"
    before = page.evaluate(count)
    page.locator(f"{dash} .jupyter-widget-Collapse-header").filter(
        has_text="Analyses (beyond DLProf)"
    ).first.click()
    page.wait_for_function(f"() => ({count})() > {before}", timeout=60_000)
    text = page.evaluate(
        f"() => ({DEEP})(document.querySelector('{dash}'), '.bk-tab').map(t => t.innerText)"
    )
    assert text[-5:] == ["Idle causes", "Launch latency", "Outliers", "Roofline", "PyProf"], text
    screenshot(page, "dashboard-analyses-open")
