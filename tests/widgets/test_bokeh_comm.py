"""What the dashboard's Bokeh widget sends over its comm on a range change: one PATCH-DOC that,
decoded with Bokeh's protocol receiver and applied to a copy of the document built from the
widget's render bundle (what the page does), leaves the copy equal to the kernel's document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import comm
import numpy as np
import pytest
from bokeh.document import Document
from bokeh.document.events import ColumnDataChangedEvent
from bokeh.models import ColumnDataSource
from bokeh.protocol import Protocol
from bokeh.protocol.receiver import Receiver
from comm.base_comm import BaseComm

import jlprof
from jlprof.widgets.dashboard import Dashboard
from tests.fixtures.loops import small_training_export


class RecordingComm(BaseComm):
    """A comm that keeps what it publishes (the kernel's comm puts the same on iopub)."""

    def __init__(self, **kwargs: Any) -> None:
        self.published: list[tuple[str, dict, list]] = []
        super().__init__(**kwargs)

    def publish_msg(self, msg_type: str, data=None, metadata=None, buffers=None, **keys) -> None:
        self.published.append((msg_type, data or {}, list(buffers or [])))
        SENT.append((self.comm_id, msg_type, data or {}))


SENT: list[tuple[str, str, dict]] = []  # every RecordingComm's messages, in the kernel's order


@pytest.fixture
def dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Dashboard:
    monkeypatch.setattr(comm, "create_comm", lambda **kw: RecordingComm(**kw))
    return jlprof.load(small_training_export(tmp_path / "loop.sqlite", steps=12)).dashboard()


def _patches(c: RecordingComm) -> list[tuple[dict, list]]:
    """The widget's custom messages (jupyter_bokeh's patch fragments), in order."""
    return [
        (d["content"], b)
        for t, d, b in c.published
        if t == "comm_msg" and d.get("method") == "custom"
    ]


def _mirror(dash: Dashboard) -> Document:
    """The page's copy of the document, from the render bundle it is shown with."""
    [doc_json] = dash.bokeh.render_bundle["docs_json"].values()
    return Document.from_json(doc_json)


def _merge_columns(doc: Document, event: ColumnDataChangedEvent) -> None:
    """Apply a ColumnDataChanged as BokehJS does: a patch that names its columns (``cols``,
    sent for ``source.data.update(...)`` or ``source.data[col] = ...``) replaces those
    columns and keeps the others (bokeh.js, Document.apply_json_patch, "ColumnDataChanged";
    Bokeh's Python handler replaces the whole dict)."""
    old = dict(event.model.data)
    event.model.set_from_json(event.attr, {**old, **event.data}, setter=event.setter)


def _apply(mirror: Document, fragments: list[tuple[dict, list]]) -> int:
    """Feed the fragments to Bokeh's receiver, as the page does one comm message at a time,
    and apply every complete message; returns how many messages were applied."""
    mp = pytest.MonkeyPatch()
    mp.setattr(ColumnDataChangedEvent, "_handle_event", staticmethod(_merge_columns))
    try:
        return _apply_patched(mirror, fragments)
    finally:
        mp.undo()


def _apply_patched(mirror: Document, fragments: list[tuple[dict, list]]) -> int:
    receiver = Receiver(Protocol())
    applied = 0
    for content, buffers in fragments:
        assert content["msg"] == "patch"
        frag = content["payload"] if "payload" in content else bytes(buffers[0])
        msg = _complete(receiver.consume(frag))
        if msg is not None:
            msg.apply_to_document(mirror)
            applied += 1
    return applied


def _complete(coro: Any) -> Any:
    """Run a coroutine that never suspends (the receiver only parses) to its result; not
    asyncio.run: other tests of the session may leave an event loop running in this thread."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("Receiver.consume suspended")


def _assert_same_sources(kernel: Document, page: Document) -> None:
    for src in kernel.models:
        if not isinstance(src, ColumnDataSource):
            continue
        other = page.get_model_by_id(src.id)
        assert set(other.data) == set(src.data), src
        for col, values in src.data.items():
            a, b = np.asarray(values), np.asarray(other.data[col])
            assert a.shape == b.shape, (src, col)
            assert (a == b).all(), (src, col)


def test_range_change_is_one_patch_that_updates_the_page_copy(dash: Dashboard) -> None:
    c = dash.bokeh.comm
    assert isinstance(c, RecordingComm)
    mirror = _mirror(dash)
    before = dash.bokeh.patches_sent
    c.published.clear()
    dash.range_slider.value = (3, 7)  # what the browser's slider sends
    fragments = _patches(c)
    # header, metadata and content of ONE PATCH-DOC; arrays inlined, no buffer fragments
    assert len(fragments) == 3, [f[0].get("payload", "<bytes>")[:60] for f in fragments]
    assert all(not b for _, b in fragments)
    assert dash.bokeh.patches_sent == before + 1
    assert _apply(mirror, fragments) == 1
    _assert_same_sources(dash.doc, mirror)
    assert mirror.get_model_by_id(dash.views.range_box.id).left == 2.5
    # and a second change on top of the first (the page keeps applying patches)
    c.published.clear()
    dash.set_range(0, 12)
    assert _apply(mirror, _patches(c)) == 1
    _assert_same_sources(dash.doc, mirror)


def test_tree_pick_and_key_node_change_reach_the_page_copy(dash: Dashboard) -> None:
    c = dash.bokeh.comm
    mirror = _mirror(dash)
    c.published.clear()
    dash.set_key_node("/model/conv1/conv2d")
    assert _apply(mirror, _patches(c)) == 1
    _assert_same_sources(dash.doc, mirror)
    kernels = mirror.get_model_by_id(dash.views.kernel_src.id).data
    assert len(kernels["kernel"]) == len(dash.views.kernel_src.data["kernel"]) > 0
    # picking a node: the kernel table in full, the bars' alpha column alone (BokehJS merges a
    # partial column update into the source; Bokeh's Python side replaces the data, so only
    # that column is compared here)
    c.published.clear()
    dash.set_node("/model/conv1")
    assert _apply(mirror, _patches(c)) == 1
    kernels = mirror.get_model_by_id(dash.views.kernel_src.id).data
    assert list(kernels["calls"]) == list(dash.views.kernel_src.data["calls"])
    alpha = mirror.get_model_by_id(dash.views.gpu_src.id).data["alpha"]
    assert np.array_equal(alpha, dash.views.gpu_src.data["alpha"])
    assert (np.asarray(alpha) < 0.5).any() and (np.asarray(alpha) > 0.5).any()


def test_changes_outside_a_batch_are_sent_at_once(dash: Dashboard) -> None:
    c = dash.bokeh.comm
    mirror = _mirror(dash)
    c.published.clear()
    dash.views.kernel_title.text = "changed by a script"
    assert _apply(mirror, _patches(c)) == 1
    assert mirror.get_model_by_id(dash.views.kernel_title.id).text == "changed by a script"


def test_range_change_spares_the_page_a_relayout(dash: Dashboard) -> None:
    """A range change sends data and ranges, no change of a Div or a table model: either
    makes BokehJS re-lay out the document or rebuild a SlickGrid (measured in the browser:
    ~50 ms and ~140 ms at 1M kernels). Tables whose row count stays are refreshed through
    their CDSView, which the page copy must then show."""
    from bokeh.models import CDSView, DataTable, Div

    c = dash.bokeh.comm
    mirror = _mirror(dash)
    c.published.clear()
    dash.set_range(2, 9)  # same op tree and kernel rows, other figures
    _header, _meta, content = [f[0]["payload"] for f in _patches(c)]
    events = json.loads(content)["events"]
    changed = {dash.doc.get_model_by_id(e["model"]["id"]) for e in events if "model" in e}
    kinds = {type(m) for m in changed}
    assert not kinds & {Div, DataTable}, kinds
    assert {dash.views.tree_table.view, dash.views.kernel_table.view} <= changed
    assert CDSView in kinds
    assert _apply(mirror, _patches(c)) == 1
    _assert_same_sources(dash.doc, mirror)
    assert "GPU activities" in dash.status.value  # the level-of-detail figures moved there


def test_status_line_goes_out_before_the_views_patch(dash: Dashboard) -> None:
    """The page then shows the status with the views' redraw, not in a frame after it."""
    SENT.clear()
    dash.set_range(3, 7)
    status = [
        i
        for i, (cid, t, d) in enumerate(SENT)
        if cid == dash.status.comm.comm_id and "iterations 3..7" in str(d.get("state", {}))
    ]
    patch = [
        i
        for i, (cid, t, d) in enumerate(SENT)
        if cid == dash.bokeh.comm.comm_id and d.get("method") == "custom"
    ]
    assert len(status) == 1 and len(patch) == 3
    assert status[0] < patch[0]
    assert "updated in" in dash.status.value
