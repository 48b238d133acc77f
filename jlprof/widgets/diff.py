"""The diff view: a waterfall of the biggest op deltas and both sides' iteration timelines.

The waterfall starts at the base's GPU time of all ops, adds each of the ``limit`` biggest op
deltas (by absolute GPU time delta) as a floating bar, the rest as one "other ops" bar, and ends
at the new side's total; per iteration when the diff is normalised. The timelines draw every
aggregated iteration's time of both sides against its position in the range, with each side's
median as a dashed line. The data functions are pure pandas (tested without a browser); the
figures are Bokeh, shown through jupyter_bokeh like the dashboard.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np

from jlprof.reports.diff import STAT_COLUMNS, DiffResult, fmt_ns

COLOURS = {"Base": "#1f77b4", "New": "#d62728", "up": "#d62728", "down": "#2ca02c"}
VERDICT_COLOURS = {
    "regression likely": "#b00020",
    "improvement likely": "#1b7f3b",
    "unchanged": "#555555",
    "not comparable": "#a15c00",
}


def waterfall_data(r: DiffResult, limit: int = 12) -> dict[str, list]:
    """Bars of the waterfall, in order: label, bottom, top, delta (ns), kind (total/up/down).

    The first bar is the base total, the last the new total; in between the ``limit`` biggest
    op deltas and one bar for all other ops, so the bars add up: base + Σ deltas = new.
    """
    ops = r.ops
    base_total = float(ops["Base GPU Time (ns)"].sum())
    new_total = float(ops["New GPU Time (ns)"].sum())
    delta = ops["Delta GPU Time (ns)"].to_numpy(np.float64)
    order = np.argsort(-np.abs(delta), kind="stable")[:limit]
    order = order[delta[order] != 0]
    labels = ["base total"]
    bottoms, tops, deltas, kinds = [0.0], [base_total], [base_total], ["total"]
    level = base_total
    names = ops["Op Name"].astype(str).to_numpy()
    rest = float(delta.sum() - delta[order].sum())
    steps = [(names[i], float(delta[i])) for i in order]
    if rest != 0:
        steps.append(("other ops", rest))
    for name, d in steps:
        labels.append(name)
        bottoms.append(min(level, level + d))
        tops.append(max(level, level + d))
        deltas.append(d)
        kinds.append("up" if d > 0 else "down")
        level += d
    labels.append("new total")
    bottoms.append(0.0)
    tops.append(new_total)
    deltas.append(new_total)
    kinds.append("total")
    # the same name may appear twice (fwd/bwd ops matched by ID): keep categories unique
    seen: dict[str, int] = {}
    unique = []
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
        unique.append(lab if seen[lab] == 1 else f"{lab} ({seen[lab]})")
    return {"label": unique, "bottom": bottoms, "top": tops, "delta": deltas, "kind": kinds}


def timeline_data(r: DiffResult) -> dict[str, dict[str, list]]:
    """Per side: position in the aggregated range, iteration number, time (ms), median (ms)."""
    out = {}
    for side in ("Base", "New"):
        t = r.iterations[r.iterations["Side"] == side]
        ms = t["Iteration Time (ns)"].to_numpy(np.float64) / 1e6
        med = float(r.distributions.loc[side, STAT_COLUMNS["median"]]) / 1e6
        out[side] = {
            "x": list(range(len(t))),
            "iteration": t["Iteration"].astype(int).tolist(),
            "ms": ms.round(6).tolist(),
            "median_ms": [round(med, 6)] * len(t),
        }
    return out


def figures(r: DiffResult, limit: int = 12) -> tuple[Any, Any]:
    """The waterfall and the timelines as Bokeh figures."""
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.plotting import figure

    wf = waterfall_data(r, limit)
    unit = " per iteration" if r.normalised else ""
    scale = 1e3  # ns -> µs
    src = ColumnDataSource(
        {
            "label": wf["label"],
            "bottom": [b / scale for b in wf["bottom"]],
            "top": [t / scale for t in wf["top"]],
            "delta": [fmt_ns(d) for d in wf["delta"]],
            "colour": ["#7f7f7f" if k == "total" else COLOURS[k] for k in wf["kind"]],
        }
    )
    fig_w = figure(
        x_range=wf["label"],
        title=f"GPU time of all ops{unit}: base -> biggest op deltas -> new (µs)",
        height=340,
        sizing_mode="stretch_width",
        tools="save,reset",
        y_axis_label="GPU time (µs)",
    )
    fig_w.vbar(x="label", bottom="bottom", top="top", width=0.8, color="colour", source=src)
    fig_w.xaxis.major_label_orientation = 0.9
    fig_w.add_tools(HoverTool(tooltips=[("op", "@label"), ("delta", "@delta")]))

    tl = timeline_data(r)
    fig_t = figure(
        title="Iteration time per aggregated iteration (ms); dashed: median",
        height=260,
        sizing_mode="stretch_width",
        tools="pan,box_zoom,wheel_zoom,reset,save",
        x_axis_label="position in the aggregated range",
        y_axis_label="iteration time (ms)",
    )
    for side, d in tl.items():
        s = ColumnDataSource(d)
        fig_t.line("x", "ms", source=s, color=COLOURS[side], legend_label=side, line_width=2)
        fig_t.scatter("x", "ms", source=s, color=COLOURS[side], size=6)
        fig_t.line("x", "median_ms", source=s, color=COLOURS[side], line_dash="dashed")
    fig_t.add_tools(HoverTool(tooltips=[("iteration", "@iteration"), ("ms", "@ms")]))
    fig_t.legend.location = "top_left"
    return fig_w, fig_t


def header_html(r: DiffResult) -> str:
    """Verdict, evidence and warnings as HTML (escaped)."""
    colour = VERDICT_COLOURS[r.verdict]
    ev = "".join(f"<li>{html.escape(e)}</li>" for e in r.evidence)
    warn = "".join(f"<li>{html.escape(w)}</li>" for w in r.warnings)
    warn_html = f"<p><b>Warnings</b></p><ul>{warn}</ul>" if warn else ""
    return (
        f"<h3 style='color:{colour};margin:4px 0'>jlprof diff: {html.escape(r.verdict)}</h3>"
        f"<ul>{ev}</ul>{warn_html}"
    )


def ops_html(r: DiffResult, limit: int = 30) -> str:
    moved = r.ops[r.ops["Status"] != "unchanged"].head(limit)
    body = (
        moved.to_html(index=False, border=0, escape=True)
        if len(moved)
        else ("<p>No op changed beyond the noise band.</p>")
    )
    return f"<div style='max-height:320px;overflow:auto'>{body}</div>"


# A saved notebook (no kernel, no widget state) shows the static copy displayed after the view;
# a live page hides it after a rendered view, and hides a failed widget output before it
# (JupyterLab 4 output classes; the same approach as the dashboard's, jlprof.widgets.static).
_CHILD = ".jp-OutputArea-child"
STATIC_STYLE = (
    "<style>"
    f"{_CHILD}:has(.jlprof-diff) + {_CHILD}:has(.jlprof-diff-static), "
    f"{_CHILD}:has(> .jp-OutputArea-output.jupyter-widgets):has(+ {_CHILD} .jlprof-diff-static)"
    " {display:none}</style>"
)


def static_html(r: DiffResult, limit: int = 30) -> str:
    """Verdict, evidence, iteration statistics and the changed ops as plain HTML, for viewers
    without a kernel (the figures need one)."""
    dist = r.distributions.T.map(lambda v: fmt_ns(float(v)))
    dist.loc[STAT_COLUMNS["count"]] = [str(int(x)) for x in r.distributions[STAT_COLUMNS["count"]]]
    dist.index = [str(i).replace(" (ns)", "") for i in dist.index]  # the cells carry units
    return (
        f"{STATIC_STYLE}<div class='jlprof-diff-static'>"
        "<p style='font-size:11px;color:#666'>Static jlprof diff (no live kernel): run the cell "
        "for the waterfall and the iteration timelines.</p>"
        f"{header_html(r)}{dist.to_html(border=0, escape=True)}{ops_html(r, limit)}</div>"
    )


def diff_view(r: DiffResult, limit: int = 12) -> Any:
    """The view as an ipywidgets box (header, waterfall, timelines, changed ops)."""
    import ipywidgets as w
    from bokeh.layouts import column

    from jlprof.widgets.bokeh_comm import BatchedBokehModel
    from jlprof.widgets.dashboard import ensure_bokehjs

    ensure_bokehjs()
    fig_w, fig_t = figures(r, limit)
    box = w.VBox(
        [
            w.HTML(header_html(r)),
            BatchedBokehModel(column(fig_w, fig_t, sizing_mode="stretch_width")),
            w.HTML(ops_html(r)),
        ]
    )
    box.add_class("jlprof-diff")
    return box


def display_diff(r: DiffResult) -> None:
    """In a kernel: the view (text where Bokeh/ipywidgets are missing); elsewhere markdown."""
    from IPython.display import display

    from jlprof.widgets.frontend import in_kernel

    if in_kernel():
        try:
            view = diff_view(r)
        except ImportError:
            pass
        else:
            display(view)
            display({"text/html": static_html(r)}, raw=True)
            return
    display({"text/plain": repr(r), "text/markdown": r.to_markdown()}, raw=True)


__all__ = [
    "diff_view",
    "display_diff",
    "figures",
    "header_html",
    "static_html",
    "timeline_data",
    "waterfall_data",
]
