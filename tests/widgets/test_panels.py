"""The Viewer panels' Bokeh models: built into the dashboard, filled from panels_data, linked
(a range change updates them, an op pick drills down and dims the other ops' kernels), and the
Bokeh-only viewer app (``jlprof view``) and its static HTML."""

from __future__ import annotations

import re
from pathlib import Path

import comm
import numpy as np
import pytest
from bokeh.document import Document
from bokeh.document.events import ColumnDataChangedEvent

import jlprof
from jlprof.widgets import panels_data as pdata
from jlprof.widgets.app import ViewerApp, static_document_html
from jlprof.widgets.dashboard import Dashboard
from jlprof.widgets.panels import Panels
from tests.fixtures.loops import small_training_export
from tests.widgets.test_bokeh_comm import RecordingComm

STEPS = 12


@pytest.fixture
def profile(tmp_path: Path):
    return jlprof.load(small_training_export(tmp_path / "loop.sqlite", steps=STEPS))


@pytest.fixture
def dash(profile, monkeypatch: pytest.MonkeyPatch) -> Dashboard:
    monkeypatch.setattr(comm, "create_comm", lambda **kw: RecordingComm(**kw))
    return profile.dashboard(panels=True)


def _op(p, name: str) -> int:
    return int(np.flatnonzero(p.correlated.ops["op_id"].astype(str) == name)[0])


def test_dashboard_document_holds_every_panel(dash: Dashboard) -> None:
    pan = dash.panels
    models = set(dash.panels_doc.models)
    assert dash.panels_bokeh in dash.panels_section.children
    for m in (pan.config_div, pan.pie_fig, pan.gpu_fig, pan.top_fig, pan.type_table,
              pan.ops_table, pan.op_kernel_table, pan.kbi_fig, pan.ibo_fig):  # fmt: skip
        assert m in models
    assert "System Config" in pan.config_div.text
    assert "NVIDIA A100-SXM4-40GB" in pan.config_div.text
    p = dash.profile
    lo, hi = p.iter_start, p.iter_stop
    top = pdata.top_ops(p, lo, hi)
    assert list(pan.top_src.data["op"]) == top["op"].tolist()[::-1]
    assert len(pan.ops_src.data["op"]) == len(p.correlated.ops)
    assert list(pan.kbi_src.data["iteration"]) == list(range(p.iterations.count))
    want = pdata.kernels_by_iteration(p, 0, p.iterations.count - 1)
    assert np.allclose(pan.kbi_src.data["tc_ms"], want["tc_ns"] / 1e6)
    # nothing picked: the top op is drilled into
    assert pan.op is None
    assert "(top op)" in pan.kernels_title.text
    assert top["op_name"].iloc[0] in pan.ibo_fig.title.text


def test_range_change_updates_the_panels(dash: Dashboard) -> None:
    pan, p = dash.panels, dash.profile
    kbi_before = pan.kbi_src.data
    dash.set_range(3, 7)
    # the per-iteration charts span every iteration; the range is their shaded box
    assert pan.kbi_src.data is kbi_before
    assert list(pan.ibo_src.data["iteration"]) == list(range(STEPS + 1))
    assert (pan.kbi_box.left, pan.kbi_box.right) == (2.5, 7.5)
    assert (pan.ibo_box.left, pan.ibo_box.right) == (2.5, 7.5)
    ops = pdata.ops(p, 3, 7)
    by_op = dict(zip(ops["op"], ops["calls"], strict=True))
    got = dict(zip(pan.ops_src.data["op"], pan.ops_src.data["calls"], strict=True))
    assert got == by_op
    pie = pdata.resource_usage(p, 3, 7)
    assert np.allclose(pan.pie_src.data["end_angle"], pie["end_angle"])


def test_a_range_change_sends_only_number_columns_of_the_ops_table(dash: Dashboard) -> None:
    """The op names go to the page once per profile; a range change patches numbers."""
    seen: list[ColumnDataChangedEvent] = []
    src = dash.panels.ops_src
    dash.panels_doc.on_change(
        lambda e: seen.append(e) if getattr(e, "model", None) is src else None
    )
    dash.set_range(2, 9)
    assert seen, "the ops table was not updated"
    for e in seen:
        assert isinstance(e, ColumnDataChangedEvent)
        assert e.cols is not None and set(e.cols) <= {"calls", "gpu_ms", "cpu_ms", "tc"}
        for c in e.cols:
            assert np.asarray(src.data[c]).dtype.kind in "iuf"


def test_picking_an_op_drills_down_to_its_kernels_and_iterations(dash: Dashboard) -> None:
    pan, p = dash.panels, dash.profile
    relu = _op(p, "/model/relu1/relu")
    row = list(pan.ops_src.data["op"]).index(relu)
    pan.ops_src.selected.indices = [row]  # what a click on the row does in the page
    assert pan.op == relu
    # the fixture's relu op launches one kernel
    assert list(pan.op_kernel_src.data["long"]) == [
        "void at::native::vectorized_elementwise_kernel<4, relu>(int)"
    ]
    assert list(pan.op_kernel_src.data["calls"]) == [STEPS]
    want = pdata.iterations_by_op(p, 0, p.iterations.count - 1, relu)
    assert np.allclose(pan.ibo_src.data["gpu_ms"], want["gpu_ns"] / 1e6)
    assert "(picked)" in pan.ibo_fig.title.text
    # linked: the GPU timeline dims the kernels of every other op
    assert dash.views.highlighted == {"/model/relu1/relu"}
    # then a kernel: its iterations over Kernels by Iteration
    pan.op_kernel_src.selected.indices = [0]
    k = int(pan.op_kernel_src.data["kernel"][0])
    want = pdata.kernel_iterations(p, 0, p.iterations.count - 1, k, relu)
    assert np.allclose(pan.kernel_iter_src.data["gpu_ms"], want["gpu_ns"] / 1e6)
    assert "picked kernel" in pan.kbi_fig.title.text
    # the pick survives a range change; its kernel table is the new range's
    dash.set_range(4, 6)
    assert pan.op == relu and pan.kernel == (k, relu)
    assert list(pan.op_kernel_src.data["calls"]) == [3]
    assert len(pan.kernel_iter_src.data["iteration"]) == STEPS + 1
    # a new key node redraws the per-iteration charts for its iterations
    dash.set_key_node("/model/conv1/conv2d")
    assert len(pan.kbi_src.data["iteration"]) == dash.profile.iterations.count
    # a Top 10 bar picks too
    conv = _op(p, "/model/conv1/conv2d")
    pan.top_src.selected.indices = [list(pan.top_src.data["op"]).index(conv)]
    assert pan.op == conv and pan.kernel is None
    assert len(pan.kernel_iter_src.data["iteration"]) == 0


def test_a_pick_is_one_patch_per_document(dash: Dashboard) -> None:
    assert dash.panels_bokeh is not None
    before, main = dash.panels_bokeh.patches_sent, dash.bokeh.patches_sent
    relu = _op(dash.profile, "/model/relu1/relu")
    dash.panels.pick_op(relu)
    assert dash.panels_bokeh.patches_sent == before + 1  # the panels' drill-down
    assert dash.bokeh.patches_sent == main + 1  # the GPU timeline's dimmed kernels


def test_a_closed_section_costs_a_range_change_nothing(profile, monkeypatch) -> None:
    monkeypatch.setattr(comm, "create_comm", lambda **kw: RecordingComm(**kw))
    dash = profile.dashboard()
    # closed: no panel is even built
    assert dash.panels is None and dash.panels_section.selected_index is None
    dash.set_range(2, 5)
    dash.show_panels()  # opened: built for the current range, data in its render bundle
    assert dash.panels is not None and dash.panels_bokeh is not None
    assert dash.panels_bokeh in dash.panels_section.children
    got = dict(zip(dash.panels.ops_src.data["op"], dash.panels.ops_src.data["calls"], strict=True))
    ops = pdata.ops(profile, 2, 5)
    assert got == dict(zip(ops["op"], ops["calls"], strict=True))
    dash.show_panels(False)
    sent = dash.panels_bokeh.patches_sent
    dash.set_range(0, 9)
    assert dash.panels_bokeh.patches_sent == sent  # closed again: not updated
    dash.show_panels()
    assert dash.panels_bokeh.patches_sent == sent + 1  # brought up to date on opening
    assert (dash.panels.kbi_box.left, dash.panels.kbi_box.right) == (-0.5, 9.5)


def test_panels_share_no_model_between_documents(profile) -> None:
    """Two dashboards of one kernel: every model belongs to one document only."""
    a, b = Panels(), Panels()
    da, db = Document(), Document()
    da.add_root(a.layout)
    db.add_root(b.layout)  # raises if a model (a formatter, say) were shared
    a.update(profile, profile.iter_start, profile.iter_stop)
    assert not (set(da.models) & set(db.models))


def test_viewer_app_drives_the_same_views_and_panels(profile) -> None:
    doc = Document()
    app = ViewerApp(profile, title="loop.sqlite")
    doc.add_root(app.layout)
    assert "jlprof · loop.sqlite" in app.header.text
    assert app.slider.value == (0, STEPS)
    app._on_slider("value_throttled", None, (3.0, 7.0))  # what the server does on a drag
    assert (profile.iter_start, profile.iter_stop) == (3, 7)
    assert "iterations 3..7" in app.status.text
    assert "over 5 iteration" in app.cards.text
    assert (app.panels.kbi_box.left, app.panels.kbi_box.right) == (2.5, 7.5)
    app._on_key_node("value", None, "/model/conv1/conv2d")
    assert profile.key_node == "/model/conv1/conv2d"
    assert app.slider.value == (profile.iter_start, profile.iter_stop)
    app._on_key_node("value", None, "no such op")
    assert "not an op name" in app.status.text  # shown, not raised
    app._on_tree_select("indices", [], [list(app.views.tree_src.data["path"]).index("/model")])
    assert app.views.highlighted is not None


def test_static_html_is_self_contained(profile) -> None:
    page = static_document_html(profile, title="loop.sqlite")
    assert not re.search(r"<script\s[^>]*\bsrc=", page)  # BokehJS inlined
    assert not re.search(r"<link\s[^>]*\bhref=", page)  # no stylesheet fetched either
    assert "Bokeh.embed" in page or "embed_items" in page
    assert "Static export: iterations 0..12" in page
    assert "Top 10 GPU Ops" in page and "Iterations by Op" in page


def test_in_a_kernel_the_open_panels_follow_a_burst_of_changes_once(
    dash: Dashboard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an event loop running (as in a kernel), the views' patch goes out at once and the
    panels' one PANELS_DELAY_S later, once for several quick changes (a dragged slider)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from jlprof.widgets import dashboard
    from jlprof.widgets.dashboard import PANELS_DELAY_S

    monkeypatch.setattr(dashboard, "in_kernel", lambda: True)

    assert dash.panels_bokeh is not None
    before, views = dash.panels_bokeh.patches_sent, dash.bokeh.patches_sent

    async def drag() -> tuple[int, int]:
        for hi in (6, 7, 8):
            dash.set_range(2, hi)
        mid = dash.panels_bokeh.patches_sent
        await asyncio.sleep(PANELS_DELAY_S + 0.2)
        return mid, dash.panels_bokeh.patches_sent

    # a loop of its own in a thread: this process may already run one (Playwright's, tests/ui)
    with ThreadPoolExecutor(1) as pool:
        mid, after = pool.submit(asyncio.run, drag()).result()
    assert dash.bokeh.patches_sent == views + 3  # every change: the views at once
    assert mid == before  # the panels not yet
    assert after == before + 1  # then once, for the last range
    assert (dash.panels.kbi_box.left, dash.panels.kbi_box.right) == (1.5, 8.5)


def test_top_10_table_tc_columns_sort_and_every_table_filters(dash: Dashboard) -> None:
    """Issue 43 item 8: the Top 10 GPU Ops table carries TC eligible / Using TC (guide §12.2)
    and sorts; each table has a filter box; the Total Kernel GPU Time pie is there."""
    from bokeh.models import CustomJSFilter, TextInput

    pan, p = dash.panels, dash.profile
    lo, hi = p.iter_start, p.iter_stop
    models = set(dash.panels_doc.models)
    assert {pan.top_table, pan.kernel_pie_fig} <= models
    titles = [c.title for c in pan.top_table.columns]
    assert {"TC eligible", "Using TC", "GPU ms", "CPU ms"} <= set(titles)
    assert pan.top_table.sortable
    top = pdata.top_ops(p, lo, hi)
    d = pan.top_table_src.data
    assert list(d["op"]) == top["op"].tolist()  # largest first
    yn = {True: "yes", False: "no"}
    assert list(d["eligible"]) == [yn[bool(x)] for x in top["tc_eligible"]]
    assert list(d["using"]) == [yn[bool(x)] for x in top["using_tc"]]
    assert "yes" in set(d["eligible"]) and "yes" in set(d["using"])  # the conv op
    # a row picks its op, like a bar
    pan.top_table_src.selected.indices = [0]
    assert pan.op == int(d["op"][0])
    # every table filters by name in the page (the dashboard's kernel table too)
    for table, box in ((pan.top_table, pan.top_filter), (pan.type_table, pan.type_filter),
                       (pan.ops_table, pan.ops_filter),
                       (pan.op_kernel_table, pan.op_kernel_filter),
                       (dash.views.kernel_table, dash.views.kernel_filter)):  # fmt: skip
        assert isinstance(box, TextInput)
        assert box in models or box in dash.views.layout.references()
        flt = table.view.filter
        assert isinstance(flt, CustomJSFilter) and flt.args["box"] is box
        assert all(f in table.source.data for f in flt.args["fields"])
    # a kernel's demangled name is one hover away in the picked op's kernel table (item 12)
    (name_col,) = [c for c in pan.op_kernel_table.columns if c.field == "name"]
    assert "<%- long %>" in name_col.formatter.template
    pie = pdata.kernel_gpu_time(p, lo, hi)
    assert np.allclose(pan.kernel_pie_src.data["gpu_ms"], pie["gpu_ns"] / 1e6)
    dash.set_range(3, 7)
    pie = pdata.kernel_gpu_time(p, 3, 7)
    assert np.allclose(pan.kernel_pie_src.data["end_angle"], pie["end_angle"])
