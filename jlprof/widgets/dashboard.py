"""``Dashboard``: ipywidgets controls + Bokeh views over one Profile, re-aggregating live.

Controls (iteration-range slider, key-node combobox, NVTX domain filter) and the Bokeh
selections (iterations box-selected in the timeline, a node picked in the op tree) all end
in :meth:`Dashboard.refresh`, which asks the Profile for the range's figures and replaces
the ColumnDataSources' data in place. Scripts and tests drive the same path through
:meth:`Dashboard.set_range` and :meth:`Dashboard.set_key_node`.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ipywidgets as w
from bokeh.document import Document

from jlprof.errors import JlprofError
from jlprof.widgets import data
from jlprof.widgets.analyses import AnalysesPanel
from jlprof.widgets.bokeh_comm import BatchedBokehModel
from jlprof.widgets.frontend import in_kernel
from jlprof.widgets.panels import Panels
from jlprof.widgets.selection import SelectionHandlers
from jlprof.widgets.static import cards_html, fill, static_html
from jlprof.widgets.views import Views

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

ALL_DOMAINS = "(all domains)"
PANELS_DELAY_S = 0.25  # the open panels follow a range change this much later
PANELS_TITLE = (
    "Viewer panels: System Config, resource usage, GPUs, Top 10 GPU Ops, Op Type Summary, "
    "Ops and Kernels, Kernels by Iteration, Iterations by Op"
)
DEFAULT_DOMAIN = "(default domain)"
_bokeh_js_loaded = False


# the BokehJS bundles the dashboard's models need: not bokeh-mathjax (1.8 MB) nor bokeh-gl
# (no WebGL here), which bokeh.resources.INLINE adds; half the JavaScript the page must
# evaluate before the first view (measured: ~380 ms of the browser's initial render for all)
BOKEHJS_COMPONENTS = ["bokeh", "bokeh-widgets", "bokeh-tables"]


def ensure_bokehjs() -> None:
    """Put BokehJS on the page once per kernel (inline: no CDN needed; see DESIGN.md)."""
    global _bokeh_js_loaded
    if _bokeh_js_loaded:
        return
    from bokeh.io import output_notebook
    from bokeh.resources import Resources

    output_notebook(Resources(mode="inline", components=BOKEHJS_COMPONENTS), hide_banner=True)
    _bokeh_js_loaded = True


@dataclass
class _HintRow:
    """One expert hint's widgets: its text and the buttons of the actions it may offer."""

    box: w.HBox
    text: w.HTML
    range_button: w.Button
    key_button: w.Button
    action: dict[str, Any] = field(default_factory=dict)


class Dashboard(SelectionHandlers, w.VBox):
    """The interactive dashboard of a :class:`~jlprof.profile.Profile`."""

    def __init__(
        self,
        profile: Analysis,
        max_kernel_glyphs: int = data.MAX_KERNEL_GLYPHS,
        panels: bool = False,
    ) -> None:
        """``panels``: open the Viewer panels' section at once (else on a click)."""
        if in_kernel():
            # BokehJS goes to the page before the views are built: the browser evaluates it
            # (~0.3 s for the three bundles) while the kernel builds (~0.5 s at 1M kernels)
            ensure_bokehjs()
        self.profile = profile
        self.max_kernel_glyphs = max_kernel_glyphs
        self.node: str | None = None
        self.last_update_ms: float = 0.0
        self.status_text = ""
        self._ranked: tuple[Analysis, list[str]] | None = None
        self._hints_key = ""
        self._hint_rows: list[_HintRow] = []
        self._no_hints = w.HTML("<i>No problems found for this range.</i>")
        self._busy = False
        self.views = Views(profile.correlated.t_first_ns, no_kernels=data.why_no_kernels(profile))
        # the Viewer panels: a Bokeh document and widget of their own in a section, built
        # when first opened (their models cost ~0.3 s) and updated only while open
        self.panels: Panels | None = None
        self.panels_doc: Document | None = None
        self.panels_bokeh: BatchedBokehModel | None = None
        self._panels_timer: Any = None  # a pending delayed panels update (asyncio handle)
        self.doc = Document()
        self.doc.add_root(self.views.layout)
        # ---- controls
        n = profile.iterations.count
        self.range_slider = w.IntRangeSlider(
            value=(profile.iter_start, profile.iter_stop),
            min=0,
            max=max(n - 1, 0),
            description="Iterations",
            continuous_update=False,
            disabled=n <= 1,
            layout=w.Layout(width="520px"),
            style={"description_width": "80px"},
        )
        self.key_node_box = w.Combobox(
            value=profile.key_node or "",
            options=self._candidates(),
            placeholder="key node (op name or ID)",
            description="Key node",
            ensure_option=False,
            continuous_update=False,
            layout=w.Layout(width="360px"),
            style={"description_width": "70px"},
        )
        domains = self._domains()
        self.domain_box = w.Dropdown(
            options=[ALL_DOMAINS, *domains],
            value=ALL_DOMAINS if not profile.domains else profile.domains[0],
            description="Domain",
            disabled=len(domains) <= 1,
            layout=w.Layout(width="260px"),
            style={"description_width": "60px"},
        )
        self.status = w.HTML(layout=w.Layout(margin="0 0 0 8px"))
        self.cards = w.HTML()
        self.hints_box = w.VBox()
        self.range_slider.observe(self._on_slider, names="value")
        self.key_node_box.observe(self._on_key_node, names="value")
        self.domain_box.observe(self._on_domain, names="value")
        self.views.iter_src.selected.on_change("indices", self._on_iter_select)
        self.views.tree_src.selected.on_change("indices", self._on_tree_select)
        controls = w.HBox([self.range_slider, self.key_node_box, self.domain_box, self.status])
        self.hints = w.Accordion(children=[self.hints_box], titles=("Expert hints",))
        self.panels_section = w.Accordion(children=[w.HTML()], titles=(PANELS_TITLE,))
        self.panels_section.observe(self._panels_open, names="selected_index")
        self.analyses = AnalysesPanel(profile)  # idle causes, launches, outliers, roofline
        self.refresh(key_node_changed=True)
        # created after the first fill: its render bundle carries the data (patches sent
        # before a view exists would be lost)
        self.bokeh = BatchedBokehModel(self.views.layout)
        super().__init__(
            [controls, self.cards, self.hints, self.bokeh, self.analyses, self.panels_section]
        )
        if panels:
            self.show_panels()
        self.add_class("jlprof-dashboard")

    # ---- scriptable API ------------------------------------------------------------------
    def set_range(self, start: int, stop: int) -> None:
        """Aggregate over iterations start..stop (inclusive) and update every view."""
        self.profile.set_range(start, stop)  # raises a clear AnalysisError on bad input
        self._set_slider(start, stop)
        self.refresh()

    def set_key_node(self, name: str | None) -> None:
        """Split iterations at ``name`` (None: the default key node); resets the range."""
        self.profile.set_key_node(name or None)
        self.refresh(key_node_changed=True)

    def show_panels(self, show: bool = True) -> None:
        """Open (or close) the Viewer panels' section, as a click on its title does."""
        self.panels_section.selected_index = 0 if show else None

    def set_node(self, node: str | None) -> None:
        """Filter the kernel table to an op-tree node (None: all ops) and highlight its ops."""
        self.node = node or None
        with self._batch():
            self._update_node()

    # ---- refresh -------------------------------------------------------------------------
    def refresh(self, key_node_changed: bool = False) -> None:
        """Re-aggregate the current range and replace every view's data."""
        p = self.profile
        lo, hi = p.iter_start, p.iter_stop
        t = time.perf_counter()

        def report() -> None:  # the status line goes out just before the views' patch
            self.last_update_ms = (time.perf_counter() - t) * 1e3
            self._say(
                f"iterations {lo}..{hi} of {p.iterations.count} · updated in "
                f"{self.last_update_ms:.0f} ms",
                detail=f"GPU timeline: {self.views.lod_text}",
            )

        with self._batch(before_send=report):
            self._refresh(key_node_changed)
        # the open panels follow a moment later (see _panels_later): the views show first
        self._panels_later()

    def _refresh(self, key_node_changed: bool) -> None:
        p = self.profile
        lo, hi = p.iter_start, p.iter_stop
        self._busy = True
        self.doc.hold("combine")
        try:
            fill(self.views, p, self.max_kernel_glyphs, iterations=key_node_changed, kernels=False)
            if key_node_changed:
                n = p.iterations.count
                with self.range_slider.hold_trait_notifications():
                    self.range_slider.max = max(n - 1, 0)
                    self.range_slider.disabled = n <= 1
                self._set_slider(lo, hi)
                self._sync_key_node_box()
            self._update_node()
            self.cards.value = cards_html(data.headline(p, lo, hi))
            self._update_hints(data.hints(p, lo, hi))
            self.analyses.refresh()
        finally:
            self.doc.unhold()
            self._busy = False

    def _panels_later(self) -> None:
        """Update the open panels PANELS_DELAY_S after a change, once for a burst of changes.

        Sent at once, the panels' patch reaches the page while it applies the views' one and
        both are drawn together (measured: the views alone then take ~2.5x longer). In a
        kernel the update waits on the kernel's event loop, so the page draws the views first
        and a dragged slider updates the panels once at its end; outside a kernel (scripts,
        tests; a running loop there may be another library's, e.g. Playwright's, that runs no
        callbacks) it is immediate."""
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or not in_kernel():
            self._update_panels()
            return
        if self._panels_timer is not None:
            self._panels_timer.cancel()
        self._panels_timer = loop.call_later(PANELS_DELAY_S, self._panels_due)

    def _panels_due(self) -> None:
        self._panels_timer = None
        try:
            self._update_panels()
        except JlprofError as err:
            self._say(str(err), error=True)

    def _update_panels(self) -> None:
        """The panels follow the range while their section is open; closed, they are
        brought up to date when it opens (a closed section costs a range change nothing)."""
        if self.panels is None or self.panels_bokeh is None:
            return
        if self.panels_section.selected_index is None:
            return
        p = self.profile
        with self.panels_bokeh.batch():
            self.panels.update(p, p.iter_start, p.iter_stop)

    def _panels_open(self, change: dict[str, Any]) -> None:
        if change["new"] is None:
            return
        if self.panels_bokeh is None:  # first opening: fill, then the widget (data in its bundle)
            p = self.profile
            self.panels = Panels()
            self.panels.on_op = self._on_panel_op
            self.panels_doc = Document()
            self.panels_doc.add_root(self.panels.layout)
            self.panels.update(p, p.iter_start, p.iter_stop)
            self.panels_bokeh = BatchedBokehModel(self.panels.layout)
            self.panels.batch = self.panels_bokeh.batch
            self.panels_section.children = [self.panels_bokeh]
        else:
            self._update_panels()

    def _on_panel_op(self, ops: set[str] | None) -> None:
        """A pick in the panels dims the other ops' kernels in the GPU timeline."""
        with self._batch():
            self.views.highlight_ops(ops)

    def _update_node(self) -> None:
        p = self.profile
        k = data.kernels(p, p.iter_start, p.iter_stop, self.node)
        self.views.update_kernels(k, self.node)
        self.views.highlight_ops(data.ops_under(p, self.node) if self.node else None)

    def _update_hints(self, hints: list[dict[str, Any]]) -> None:
        """Show the findings in rows of widgets that are kept and updated in place.

        New widgets cost the page far more than new values (ipywidgets builds each view):
        a range change that changed the findings used to close and reopen ~10 widgets."""
        key = repr([(h["detector"], h["problem"], h["action"]) for h in hints])
        if key == self._hints_key:  # same findings: nothing to send
            return
        self._hints_key = key
        shown: list[w.Widget] = []
        for i, h in enumerate(hints):
            row = self._hint_row(i)
            ev = ", ".join(f"{k}: {v}" for k, v in h["evidence"].items() if k != "candidates")
            row.text.value = (
                f"<div style='margin:2px 0'><b>{html.escape(h['detector'])}</b>: "
                f"{html.escape(h['problem'])}<br><i>Recommendation:</i> "
                f"{html.escape(h['recommendation'])}<br>"
                f"<span style='font-size:11px;color:#666'>Evidence: {html.escape(ev[:400])}"
                "</span></div>"
            )
            row.action = h.get("action") or {}
            parts: list[w.Widget] = [row.text]
            if "set_range" in row.action:
                lo, hi = row.action["set_range"]
                row.range_button.description = f"use suggested range {lo}..{hi}"
                parts.append(row.range_button)
            if "set_key_node" in row.action:
                name = row.action["set_key_node"]
                row.key_button.description = f"use key node {data_short(name)}"
                parts.append(row.key_button)
            if list(row.box.children) != parts:
                row.box.children = parts
            shown.append(row.box)
        self.hints_box.children = shown or [self._no_hints]
        self.hints.set_title(0, f"Expert hints ({len(hints)})" if hints else "Expert hints (none)")

    def _hint_row(self, i: int) -> _HintRow:
        """The i-th row of the hints (created the first time that many are shown)."""
        while len(self._hint_rows) <= i:
            row = _HintRow(
                box=w.HBox(),
                text=w.HTML(layout=w.Layout(width="85%")),
                range_button=w.Button(button_style="info", layout=w.Layout(width="auto")),
                key_button=w.Button(button_style="info", layout=w.Layout(width="auto")),
            )
            row.range_button.on_click(
                lambda _b, row=row: self._guard(self.set_range, *row.action["set_range"])
            )
            row.key_button.on_click(
                lambda _b, row=row: self._guard(self.set_key_node, row.action["set_key_node"])
            )
            self._hint_rows.append(row)
        return self._hint_rows[i]

    # ---- event handlers (user actions: errors are shown, never raised into the kernel) ----
    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except JlprofError as err:
            self._say(str(err), error=True)

    def _on_slider(self, change: dict[str, Any]) -> None:
        if self._busy:
            return
        lo, hi = change["new"]
        self._guard(self.set_range, lo, hi)

    def _on_key_node(self, change: dict[str, Any]) -> None:
        if self._busy:
            return
        name = (change["new"] or "").strip()
        if name == (self.profile.key_node or ""):
            return
        self._guard(self.set_key_node, name or None)

    def _on_domain(self, change: dict[str, Any]) -> None:
        if self._busy:
            return
        old = self.profile
        pick = change["new"]
        domains = None if pick == ALL_DOMAINS else ["" if pick == DEFAULT_DOMAIN else pick]
        key = old.key_node if old.key_node_given else None
        note = ""
        try:
            try:
                new = type(old)(old.trace, key_node=key, domains=domains, mode=old.mode,
                              profile_name=old.profile_name)  # fmt: skip
            except JlprofError:
                if key is None:
                    raise
                new = type(old)(old.trace, domains=domains, mode=old.mode,
                              profile_name=old.profile_name)  # fmt: skip
                note = f"key node {key!r} is not in {pick}; using the default key node. "
        except JlprofError as err:
            self._say(str(err), error=True)
            return
        self.profile = new
        self.node = None
        self.refresh(key_node_changed=True)
        if note:
            self._say(note + self.status_text, error=True)

    # ---- helpers -------------------------------------------------------------------------
    def _batch(self, before_send: Callable[[], None] | None = None) -> AbstractContextManager[None]:
        """The Bokeh changes made inside go to the page as one patch (none before the widget
        exists: the first fill travels in its render bundle); see BatchedBokehModel.batch."""
        bokeh = getattr(self, "bokeh", None)
        if bokeh is not None:
            return bokeh.batch(before_send)
        return _then(before_send) if before_send is not None else nullcontext()

    def _set_slider(self, lo: int, hi: int) -> None:
        busy, self._busy = self._busy, True
        try:
            self.range_slider.value = (int(lo), int(hi))
        finally:
            self._busy = busy

    def _sync_key_node_box(self) -> None:
        busy, self._busy = self._busy, True
        try:
            self.key_node_box.options = self._candidates()
            self.key_node_box.value = self.profile.key_node or ""
        finally:
            self._busy = busy

    def _candidates(self) -> tuple[str, ...]:
        """Ranked key-node candidates; they do not depend on the key node, so computed once
        per profile (the ranking groups every op instance: ~0.2 s at 1M kernels)."""
        if self._ranked is None or self._ranked[0] is not self.profile:
            ranked = [str(n) for n in self.profile.suggest_key_nodes(10)["op_name"]]
            self._ranked = (self.profile, ranked)
        names = list(self._ranked[1])
        kn = self.profile.key_node
        if kn and kn not in names:
            names.insert(0, kn)
        return tuple(names)

    def _domains(self) -> list[str]:
        nv = self.profile.trace.nvtx
        if len(nv) == 0:
            return []
        return sorted({str(d) for d in nv["domain"].astype(str).unique()} - {""}) + (
            [DEFAULT_DOMAIN] if (nv["domain"].astype(str) == "").any() else []
        )

    def _say(self, text: str, error: bool = False, detail: str = "") -> None:
        self.status_text = text
        color = "#b00020" if error else "#555"
        more = (
            f"<br><span style='color:#555;font-size:11px'>{html.escape(detail)}</span>"
            if detail
            else ""
        )
        self.status.value = (
            f"<span style='color:{color};font-size:12px'>{html.escape(text)}</span>{more}"
        )

    # ---- display -------------------------------------------------------------------------
    def _ipython_display_(self) -> None:
        """The live widget, then a static rendering of it for kernel-less viewers.

        The static rendering is an output of its own (see :mod:`jlprof.widgets.static` for
        why it cannot be the widget bundle's ``text/html``), sent after the widget: the page
        builds the live views while the kernel renders the static copy (~0.2 s at 1M
        kernels), instead of waiting for both.
        """
        from IPython.display import display

        ensure_bokehjs()
        display(self._repr_mimebundle_(), raw=True)
        display({"text/html": static_html(self.profile)}, raw=True)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """The live widget, with the profile's one-line summary as text."""
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        bundle["text/plain"] = repr(self.profile)
        return bundle


@contextmanager
def _then(after: Callable[[], None]) -> Iterator[None]:
    """Run ``after`` once the block ended without error."""
    yield
    after()


def data_short(name: str, n: int = 40) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"
