"""The dashboard as a Bokeh-only document: for ``jlprof view`` (a Bokeh server app in the
browser, no Jupyter) and its static ``--export-html`` copy.

The notebook's :class:`~jlprof.widgets.dashboard.Dashboard` has ipywidgets controls, which
need a Jupyter kernel; here the same controls are Bokeh widgets (a RangeSlider for the
iteration range, an AutocompleteInput for the key node) and the same ``Views`` and
``Panels`` are filled by the same functions (``static.fill``, ``Panels.update``). A Bokeh
server runs the callbacks in Python, so selections, the slider and the drill-down work as
in the notebook; the static copy has no Python behind it and shows one range.
"""

from __future__ import annotations

import html
import time
from typing import TYPE_CHECKING, Any

from bokeh.document import Document
from bokeh.layouts import column, row
from bokeh.models import AutocompleteInput, Div, RangeSlider

from jlprof.errors import JlprofError
from jlprof.widgets import data
from jlprof.widgets.panels import Panels
from jlprof.widgets.selection import SelectionHandlers
from jlprof.widgets.static import cards_html, fill
from jlprof.widgets.views import WIDTH, Views

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

MAX_HINTS = 8


def hints_html(hints: list[dict[str, Any]]) -> str:
    """The expert hints as HTML (problem, recommendation), as the Viewer's Recommendations."""
    if not hints:
        return "<b>Expert hints</b>: <i>no problems found for this range.</i>"
    items = "".join(
        f"<li><b>{html.escape(h['detector'])}</b>: {html.escape(h['problem'])}<br>"
        f"<i>Recommendation:</i> {html.escape(h['recommendation'])}</li>"
        for h in hints[:MAX_HINTS]
    )
    more = f"<li>… and {len(hints) - MAX_HINTS} more</li>" if len(hints) > MAX_HINTS else ""
    return (
        f"<b>Expert hints ({len(hints)})</b>"
        f"<ul style='margin:2px 0;font-size:12px'>{items}{more}</ul>"
    )


class ViewerApp(SelectionHandlers):
    """Controls, cards, hints, the dashboard's views and the Viewer panels in one layout."""

    def __init__(self, profile: Analysis, title: str = "", interactive: bool = True) -> None:
        self.profile = profile
        self.interactive = interactive
        self.node: str | None = None
        self._busy = False
        self.status_text = ""
        self.views = Views(
            profile.correlated.t_first_ns,
            interactive=interactive,
            no_kernels=data.why_no_kernels(profile),
        )
        self.panels = Panels(interactive=interactive)
        self.panels.on_op = self.views.highlight_ops
        self.header = Div(
            text=f"<h2 style='margin:4px 0'>jlprof · {html.escape(title or 'profile')}</h2>",
            width=WIDTH,
        )
        n = profile.iterations.count
        self.slider = RangeSlider(
            start=0, end=max(n - 1, 1), value=(profile.iter_start, profile.iter_stop), step=1,
            title="Iterations", width=520, disabled=n <= 1 or not interactive,
        )  # fmt: skip
        candidates = [str(x) for x in profile.suggest_key_nodes(10)["op_name"]]
        self.key_node = AutocompleteInput(
            value=profile.key_node or "", completions=candidates, title="Key node",
            placeholder="key node (op name or ID)", width=360, min_characters=1,
            case_sensitive=False, disabled=not interactive,
        )  # fmt: skip
        self.status = Div(width=WIDTH, styles={"font-size": "12px", "color": "#555"})
        self.cards = Div(width=WIDTH)
        self.hints = Div(width=WIDTH)
        self.layout = column(
            self.header,
            row(self.slider, self.key_node),
            self.status,
            self.cards,
            self.hints,
            self.views.layout,
            self.panels.layout,
            css_classes=["jlprof-viewer"],
        )
        if interactive:
            self.slider.on_change("value_throttled", self._on_slider)
            self.key_node.on_change("value", self._on_key_node)
            self.views.iter_src.selected.on_change("indices", self._on_iter_select)
            self.views.tree_src.selected.on_change("indices", self._on_tree_select)
        self.refresh(key_node_changed=True)

    # ---- scriptable API (the server's callbacks and the tests) ----------------------------
    def set_range(self, start: int, stop: int) -> None:
        self.profile.set_range(start, stop)
        self.refresh()

    def set_key_node(self, name: str | None) -> None:
        self.profile.set_key_node(name or None)
        self.refresh(key_node_changed=True)

    def set_node(self, node: str | None) -> None:
        self.node = node or None
        p = self.profile
        with self._hold():
            self.views.update_kernels(data.kernels(p, p.iter_start, p.iter_stop, self.node), node)
            self.views.highlight_ops(data.ops_under(p, self.node) if self.node else None)

    def refresh(self, key_node_changed: bool = False) -> None:
        p = self.profile
        lo, hi = p.iter_start, p.iter_stop
        t = time.perf_counter()
        self._busy = True
        try:
            with self._hold():
                fill(self.views, p, iterations=key_node_changed, kernels=False)
                self.views.update_kernels(data.kernels(p, lo, hi, self.node), self.node)
                self.views.highlight_ops(data.ops_under(p, self.node) if self.node else None)
                self.panels.update(p, lo, hi)
                if key_node_changed:
                    n = p.iterations.count
                    self.slider.end = max(n - 1, 1)
                    self.slider.disabled = n <= 1 or not self.interactive
                    self.key_node.value = p.key_node or ""
                self.slider.value = (lo, hi)
                self.cards.text = cards_html(data.headline(p, lo, hi))
                self.hints.text = hints_html(data.hints(p, lo, hi))
                ms = (time.perf_counter() - t) * 1e3
                if self.interactive:
                    self._say(
                        f"iterations {lo}..{hi} of {p.iterations.count} · updated in {ms:.0f} ms"
                        f" · GPU timeline: {self.views.lod_text}"
                    )
                else:
                    self._say(
                        f"Static export: iterations {lo}..{hi} of {p.iterations.count}, key node "
                        f"{p.key_node or '(none)'}. Run `jlprof view` for the live viewer. "
                        f"GPU timeline: {self.views.lod_text}"
                    )
        finally:
            self._busy = False

    # ---- callbacks -----------------------------------------------------------------------
    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except JlprofError as err:
            self._say(str(err), error=True)

    def _on_slider(self, _attr: str, _old: Any, new: tuple[float, float]) -> None:
        if not self._busy:
            self._guard(self.set_range, round(new[0]), round(new[1]))

    def _on_key_node(self, _attr: str, _old: Any, new: str) -> None:
        name = (new or "").strip()
        if self._busy or name == (self.profile.key_node or ""):
            return
        self._guard(self.set_key_node, name or None)

    # ---- helpers -------------------------------------------------------------------------
    def _hold(self) -> Any:
        """Changes made inside go to the page together (one patch per callback)."""
        doc = self.layout.document
        if doc is None:
            from contextlib import nullcontext

            return nullcontext()
        return _Held(doc)

    def _say(self, text: str, error: bool = False) -> None:
        self.status_text = text
        color = "#b00020" if error else "#555"
        self.status.text = f"<span style='color:{color}'>{html.escape(text)}</span>"


class _Held:
    """``doc.hold('combine')`` ... ``doc.unhold()`` as a context (nested holds join)."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.outer = doc.callbacks.hold_value is not None

    def __enter__(self) -> None:
        if not self.outer:
            self.doc.hold("combine")

    def __exit__(self, *exc: object) -> None:
        if not self.outer:
            self.doc.unhold()


def add_to(doc: Document, profile: Analysis, title: str = "") -> ViewerApp:
    """Put a live viewer of ``profile`` into ``doc`` (a Bokeh server session's document)."""
    app = ViewerApp(profile, title=title)
    doc.add_root(app.layout)
    doc.title = f"jlprof view · {title}" if title else "jlprof view"
    app.panels.batch = app._hold
    return app


def static_document_html(profile: Analysis, title: str = "") -> str:
    """A self-contained HTML page of the viewer at the profile's range (BokehJS inlined: it
    opens with no network)."""
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    app = ViewerApp(profile, title=title, interactive=False)
    return file_html(app.layout, resources=INLINE, title=f"jlprof · {title or 'profile'}")
