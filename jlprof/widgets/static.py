"""Static rendering of the dashboard: standalone Bokeh HTML plus text, for kernel-less viewers.

A saved notebook, nbconvert's HTML or a Git forge's viewer has no kernel behind the widget;
they show this instead (the ``text/html`` of the dashboard's mimebundle), never an empty box.
BokehJS is inlined because no CDN may be reachable where the notebook is read.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from bokeh.embed import components
from bokeh.resources import Resources

from jlprof.reports.html import profile_html
from jlprof.widgets import data
from jlprof.widgets.views import Views

if TYPE_CHECKING:
    from jlprof.engine.profile import Profile


def fill(
    views: Views,
    p: Profile,
    max_kernel_glyphs: int = data.MAX_KERNEL_GLYPHS,
    iterations: bool = True,
    kernels: bool = True,
) -> None:
    """Put the profile's current range into the views (the iteration bars only when asked:
    they change with the key node, not with the range)."""
    lo, hi = p.iter_start, p.iter_stop
    if iterations:
        views.update_iterations(data.iterations(p))
    views.update_range(lo, hi)
    gpu, merged = data.gpu_timeline(p, lo, hi, max_kernel_glyphs)
    b = p.iterations.bounds_ns
    views.update_timeline(gpu, merged, data.nvtx_timeline(p, lo, hi), (b[lo], b[hi + 1]))
    views.update_tree(data.op_tree(p, lo, hi))
    if kernels:
        views.update_kernels(data.kernels(p, lo, hi), None)
    views.update_tc(data.tensor_core(p, lo, hi))


def static_html(p: Profile) -> str:
    """Headline cards, the text summary and the figures as one self-contained HTML fragment."""
    from jlprof.widgets.dashboard import cards_html

    views = Views(p.correlated.t_first_ns, interactive=False)
    fill(views, p)
    script, div = components(views.static_layout)
    js = Resources(mode="inline", components=["bokeh"]).render_js()
    lo, hi = p.iter_start, p.iter_stop
    return (
        "<div class='jlprof-static'>"
        "<p style='font-size:11px;color:#666'>Static jlprof dashboard (no live kernel): "
        "run the cell to interact.</p>"
        f"{cards_html(data.headline(p, lo, hi))}{profile_html(p)}{js}{div}{script}"
        f"<p style='font-size:11px;color:#555'>{html.escape(views.lod_note.text)}</p></div>"
    )
