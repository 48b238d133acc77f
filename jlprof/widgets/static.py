"""Static rendering of the dashboard: standalone Bokeh HTML plus text, for kernel-less viewers.

A saved notebook, nbconvert's HTML or a Git forge's viewer has no kernel behind the widget;
they show this instead, never an empty box. It is an output of its own, displayed just after
the widget (not the ``text/html`` of the widget's mimebundle: JupyterLab always picks the
widget mimetype when the widget manager is there, and then shows "Error displaying widget:
model not found" for a notebook reopened without its kernel). So that it is not shown twice
where the live widget renders, it carries a CSS rule that hides it after a live widget
output, and hides a failed one before it instead (``STYLE``). Its figures are embedded only
once it is visible (``LOADER``): a hidden copy costs the live page no BokehJS run.
BokehJS is inlined because no CDN may be reachable where the notebook is read.
"""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING

from bokeh.embed import components
from bokeh.resources import Resources

from jlprof.reports.html import profile_html
from jlprof.widgets import data
from jlprof.widgets.views import Views

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis


def fill(
    views: Views,
    p: Analysis,
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
    views.update_gpu_metrics(data.gpu_metrics_lane(p, (b[lo], b[hi + 1])))
    views.update_tree(data.op_tree(p, lo, hi))
    if kernels:
        views.update_kernels(data.kernels(p, lo, hi), None)
    views.update_tc(data.tensor_core(p, lo, hi))


# JupyterLab 4: each output is a .jp-OutputArea-child; ipywidgets' renderer node gets the
# class jupyter-widgets when it failed ("Error displaying widget: model not found"), and
# stays at "Loading widget..." where no kernel was started. The widget output comes just
# before the static one. The rules (:has() cannot nest): hidden after a live dashboard; the
# failed widget output before it hidden; while the loader waits for the widget (live
# JupyterLab only) hidden; once it gave up, the widget output hidden. Without scripts (an
# untrusted notebook) it simply shows.
_CHILD = ".jp-OutputArea-child"
STYLE = (
    "<style>"
    f"{_CHILD}:has(.jlprof-dashboard) + {_CHILD}:has(.jlprof-static), "
    f"{_CHILD}.jlprof-static-wait, "
    f"{_CHILD}:has(> .jp-OutputArea-output.jupyter-widgets):has(+ {_CHILD} .jlprof-static), "
    f"{_CHILD}:not(:has(.jlprof-dashboard)):has(+ {_CHILD}.jlprof-static-alone) "
    "{display:none}</style>"
)
WAIT_MS = 4000  # how long a live JupyterLab page may take to render the widget next to it
# In a live JupyterLab page (Lumino widgets): wait for the widget output before it, and
# show the static copy only when that fails or does not render in WAIT_MS. Anywhere:
# run BokehJS (unless the page has it) and the embedding script once the copy is visible.
LOADER = """<script>(function () {
  var me = document.currentScript, box = me && me.closest('.jlprof-static'), done = false;
  if (!box) return;
  function run(src) {
    var s = document.createElement('script'); s.text = src; document.head.appendChild(s);
  }
  function go() {
    if (done || !box.getClientRects().length) return;
    done = true;
    var code = JSON.parse(box.querySelector('script.jlprof-static-js').textContent);
    if (!(window.Bokeh && window.Bokeh.embed)) run(code[0]);
    run(code[1]);
  }
  var child = box.closest('.jp-OutputArea-child.lm-Widget');
  var prev = child && child.previousElementSibling;
  if (prev && !prev.querySelector('.jlprof-dashboard')) {
    child.classList.add('jlprof-static-wait');
    var t0 = Date.now(), iv = setInterval(function () {
      var live = prev.querySelector('.jlprof-dashboard');
      var failed = prev.querySelector(':scope > .jupyter-widgets');
      if (!live && !failed && Date.now() - t0 < WAIT_MS) return;
      clearInterval(iv);
      child.classList.remove('jlprof-static-wait');
      if (!live) child.classList.add('jlprof-static-alone');
    }, 100);
  }
  if (window.IntersectionObserver) {
    new IntersectionObserver(function (es) {
      if (es.some(function (e) { return e.isIntersecting; })) go();
    }).observe(box);
  } else go();
})();</script>""".replace("WAIT_MS", str(WAIT_MS))


def _json_script(value: object) -> str:
    """``value`` as JSON inside a non-executed script tag (``</`` escaped: it cannot end it)."""
    text = json.dumps(value).replace("</", "<\\/")
    return f"<script type='application/json' class='jlprof-static-js'>{text}</script>"


def _card(title: str, value: str, sub: str = "") -> str:
    return (
        "<div style='display:inline-block;min-width:170px;margin:0 10px 6px 0;padding:6px 12px;"
        "border:1px solid #ccc;border-radius:6px;background:#fafafa'>"
        f"<div style='font-size:11px;color:#666'>{html.escape(title)}</div>"
        f"<div class='jlprof-card-value' style='font-size:20px;font-weight:600'>"
        f"{html.escape(value)}</div>"
        f"<div style='font-size:11px;color:#666'>{html.escape(sub)}</div></div>"
    )


def cards_html(h: data.Headline) -> str:
    """The headline cards as HTML (also used by the static rendering)."""
    return (
        "<div class='jlprof-cards'>"
        + "".join(
            [
                _card("GPU utilization", f"{h.gpu_util_pct:.1f} %", "union of GPU work / wall"),
                _card(
                    "Tensor Core utilization", f"{h.tc_util_pct:.1f} %", "of TC-eligible ops' time"
                ),
                _card(
                    "Iteration time",
                    f"{h.iter_mean_ns / 1e6:.3f} ± {h.iter_std_ns / 1e6:.3f} ms",
                    iteration_time_note(h.aggregated, h.partial_excluded),
                ),
                _card(
                    "Iterations found",
                    str(h.iterations_found),
                    f"key node {h.key_node}" if h.key_node else "no key node found",
                ),
            ]
        )
        + "</div>"
    )


def static_html(p: Analysis) -> str:
    """Headline cards, the text summary and the figures as one self-contained HTML fragment."""
    views = Views(p.correlated.t_first_ns, interactive=False, no_kernels=data.why_no_kernels(p))
    fill(views, p)
    script, div = components(views.static_layout, wrap_script=False)
    bokehjs = "\n".join(Resources(mode="inline", components=["bokeh"]).js_raw)
    lo, hi = p.iter_start, p.iter_stop
    return (
        f"{STYLE}<div class='jlprof-static'>"
        "<p style='font-size:11px;color:#666'>Static jlprof dashboard (no live kernel): "
        "run the cell to interact.</p>"
        f"{cards_html(data.headline(p, lo, hi))}{profile_html(p)}{div}"
        f"<p style='font-size:11px;color:#555'>{html.escape(views.lod_text)}</p>"
        f"{_json_script([bokehjs, script])}{LOADER}</div>"
    )


def iteration_time_note(aggregated: int, partial: tuple[int, ...]) -> str:
    """The iteration-time card's subtitle: which iterations mean ± std is taken over."""
    if not partial:
        return f"mean ± std over {aggregated} iteration(s)"
    which = " and ".join(map(str, partial))
    return (
        f"mean ± std over {aggregated - len(partial)} complete iteration(s); "
        f"partial interval {which} left out"
    )
