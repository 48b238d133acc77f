"""The Viewer panels in headless Chromium: in `jlprof view` (a Bokeh server subprocess on a
free loopback port), in the JupyterLab dashboard, and in the static --export-html file opened
with the network off. A real click on an op row drills down to its kernels, a click on a
kernel row draws that kernel's iterations."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.loops import small_training_export
from tests.test_viewer import _free_port, start_viewer, stop_viewer
from tests.ui.lab import BOKEH_VIEWS, DEEP, screenshot
from tests.ui.test_dashboard import dashboard_page  # noqa: F401  (a fixture)

STEPS = 12

# JavaScript: the page position of the cell showing ``text`` in the Bokeh DataTable whose
# source has column ``col`` (found through BokehJS' own views, into their shadow roots)
CELL = f"""([col, text]) => {{
    const views = ({BOKEH_VIEWS})();
    const tv = views.find(v => v.model.source && v.model.columns && col in v.model.source.data);
    if (!tv) return null;
    const cells = ({DEEP})(tv.el.shadowRoot ?? tv.el, '.slick-cell');
    const cell = cells.find(c => c.innerText.trim() === text);
    if (!cell) return null;
    const r = cell.getBoundingClientRect();
    return {{x: r.left + r.width / 2, y: r.top + r.height / 2}};
}}"""

# JavaScript: the title of the Bokeh plot whose title starts with ``prefix``
TITLE = f"""(prefix) => {{
    const pv = ({BOKEH_VIEWS})().find(v => v.model.title?.text?.startsWith?.(prefix));
    return pv ? pv.model.title.text : null;
}}"""

# JavaScript: the rows of the Bokeh DataTable whose source has column ``col``
COLUMN = """([col, field]) => {
    const views = (BOKEH_VIEWS)();
    const tv = views.find(v => v.model.source && v.model.columns && col in v.model.source.data);
    return tv ? Array.from(tv.model.source.data[field]) : null;
}""".replace("BOKEH_VIEWS", BOKEH_VIEWS)


def _click_cell(page, col: str, text: str) -> None:
    page.wait_for_function(f"(a) => ({CELL})(a) !== null", arg=[col, text], timeout=30_000)
    at = page.evaluate(CELL, [col, text])
    page.mouse.click(at["x"], at["y"])


def _drill_down(page, shots: str) -> None:
    """Click the relu op's row, then its kernel's row; check each step in the page."""
    # the panels are there
    page.wait_for_function(f"() => ({TITLE})('Top 10 GPU Ops') !== null", timeout=60_000)
    assert page.evaluate(f"() => ({TITLE})('Resource usage')") is not None
    assert page.evaluate(f"() => ({TITLE})('GPUs: utilization')") is not None
    config = page.evaluate(
        f"() => ({DEEP})(document, 'table.jlprof-system-config').map(t => t.innerText).join('')"
    )
    assert "NVIDIA A100-SXM4-40GB" in config and "not recorded" in config
    screenshot(page, f"{shots}-panels")
    # an op row (only the ops table's source has an op_name column) -> its kernels
    _click_cell(page, "op_name", "/model/relu1/relu")
    page.wait_for_function(
        f"() => ({TITLE})('Iterations by Op').includes('/model/relu1/relu (picked)')",
        timeout=30_000,
    )
    page.wait_for_function(
        f"() => ({COLUMN})(['name', 'long'])?.join('|') === "
        "'void at::native::vectorized_elementwise_kernel<4, relu>(int)'",
        timeout=30_000,
    )
    screenshot(page, f"{shots}-op-picked")
    # a kernel row of that op -> its iterations over Kernels by Iteration
    _click_cell(page, "name", "vectorized_elementwise_kernel")
    page.wait_for_function(
        f"() => ({TITLE})('Kernels by Iteration').includes('picked kernel')", timeout=30_000
    )
    calls = page.evaluate(
        f"""() => {{
        const views = ({BOKEH_VIEWS})();
        const src = views.map(v => v.model.data_source).find(
            s => s && 'iteration' in s.data && 'gpu_ms' in s.data && !('cpu_ms' in s.data));
        return Array.from(src.data.calls);
    }}"""
    )
    # one relu kernel per training step, over the iterations 0..STEPS of the range
    assert len(calls) == STEPS + 1 and sum(calls) == STEPS and max(calls) == 1, calls
    screenshot(page, f"{shots}-kernel-picked")


@pytest.fixture
def viewer_url(tmp_path: Path):
    export = small_training_export(tmp_path / "loop.sqlite", steps=STEPS)
    port = _free_port()
    proc = start_viewer(export, port)
    try:
        yield f"http://localhost:{port}/"
    finally:
        stop_viewer(proc)


def test_jlprof_view_shows_the_panels_and_drills_down(viewer_url: str, page) -> None:
    page.set_viewport_size({"width": 1400, "height": 3400})
    page.goto(viewer_url)
    page.wait_for_function(
        f"() => ({DEEP})(document, 'canvas').filter(c => c.width > 0).length >= 6",
        timeout=60_000,
    )
    assert "jlprof" in page.title()
    _drill_down(page, "viewer")


def test_notebook_dashboard_shows_the_panels_and_drills_down(dashboard_page) -> None:  # noqa: F811
    page = dashboard_page
    page.set_viewport_size({"width": 1400, "height": 3600})
    # the section opens on a click on its title (closed, it costs a range change nothing)
    page.get_by_text("Viewer panels: System Config").click()
    _drill_down(page, "dashboard")


def test_export_html_opens_with_no_network(tmp_path: Path, page) -> None:
    from jlprof import viewer

    export = small_training_export(tmp_path / "loop.sqlite", steps=STEPS)
    out = viewer.export_html(viewer.load_profile(export), tmp_path / "v.html", "loop.sqlite")
    asked: list[str] = []
    page.context.set_offline(True)
    page.route(
        "**/*",
        lambda route: (
            route.continue_()
            if route.request.url.startswith("file:")
            else (asked.append(route.request.url), route.abort())
        ),
    )
    page.set_viewport_size({"width": 1400, "height": 3400})
    page.goto(out.as_uri())
    page.wait_for_function(
        f"() => ({DEEP})(document, 'canvas').filter(c => c.width > 0).length >= 6",
        timeout=60_000,
    )
    page.wait_for_function(f"() => ({TITLE})('Top 10 GPU Ops') !== null")
    assert page.evaluate(f"() => ({TITLE})('Iterations by Op')").startswith(
        "Iterations by Op: /model/conv1/conv2d (top op)"
    )
    assert asked == []  # nothing fetched from any network
    screenshot(page, "export-html-offline")


# JavaScript: the texts of column ``field``'s cells shown in the DataTable whose source has
# column ``col`` (the rows its CDSView keeps)
SHOWN = f"""([col, field]) => {{
    const views = ({BOKEH_VIEWS})();
    const tv = views.find(v => v.model.source && v.model.columns && col in v.model.source.data);
    if (!tv) return null;
    const i = tv.model.columns.findIndex(c => c.field === field);
    const rows = ({DEEP})(tv.el.shadowRoot ?? tv.el, '.slick-row');
    return rows.map(r => r.querySelectorAll('.slick-cell')[i]?.innerText.trim());
}}"""


def test_tables_filter_in_the_static_page(tmp_path: Path, page) -> None:
    """Issue 43 item 8: typing in a table's filter box keeps the rows whose names contain the
    text (any case), with no Python behind the page; emptying it shows every row again."""
    from jlprof import viewer

    export = small_training_export(tmp_path / "loop.sqlite", steps=STEPS)
    out = viewer.export_html(viewer.load_profile(export), tmp_path / "v.html", "loop.sqlite")
    page.set_viewport_size({"width": 1400, "height": 3400})
    page.goto(out.as_uri())
    page.wait_for_function(f"() => ({TITLE})('Top 10 GPU Ops') !== null", timeout=60_000)
    shown = page.evaluate(SHOWN, ["top_op_name", "top_op_name"])
    assert len(shown) > 2 and "/model/relu1/relu" in shown
    page.get_by_placeholder("filter top ops").fill("RELU")
    page.wait_for_function(
        f"() => ({SHOWN})(['top_op_name', 'top_op_name']).length === 1", timeout=30_000
    )
    assert page.evaluate(SHOWN, ["top_op_name", "top_op_name"]) == ["/model/relu1/relu"]
    # the Top 10 table's TC columns: the convolution is eligible and uses Tensor Cores
    names = page.evaluate(SHOWN, ["top_op_name", "top_op_name"])
    assert page.evaluate(SHOWN, ["top_op_name", "eligible"]) == ["no"] * len(names)
    page.get_by_placeholder("filter top ops").fill("conv")
    page.wait_for_function(
        f"() => ({SHOWN})(['top_op_name', 'top_op_name']).join() === '/model/conv1/conv2d'",
        timeout=30_000,
    )
    assert page.evaluate(SHOWN, ["top_op_name", "eligible"]) == ["yes"]
    assert page.evaluate(SHOWN, ["top_op_name", "using"]) == ["yes"]
    page.get_by_placeholder("filter top ops").fill("")
    page.wait_for_function(
        f"() => ({SHOWN})(['top_op_name', 'top_op_name']).length === {len(shown)}",
        timeout=30_000,
    )
    screenshot(page, "export-html-filter")
