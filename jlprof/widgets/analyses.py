"""The dashboard's "Analyses" section: idle causes, launch latency, outliers, roofline, PyProf.

Five Bokeh tabs over the reports of ``jlprof.reports.analyses`` (one per analysis):

* **Idle causes**: per iteration, each GPU's idle time stacked by cause (mean over the GPUs
  that ran work), the summary the ``idle_causes`` report gives per GPU and iteration;
* **Launch latency**: histogram of launch latency (call start -> kernel start, log bins), with
  the queue time's and the launch-bound share in the title;
* **Outliers**: iteration times with the robust threshold, outliers marked, and for the chosen
  outlier its ops' GPU-time delta against their median iteration (why it is slow);
* **Roofline**: achieved TFLOP/s against arithmetic intensity per op with recorded shapes, under
  the GPU's roofs (``engine.analyses.gpu_peaks``).
* **PyProf**: PyProf's kernel table (the ``prof`` report) of the range's kernels: op,
  parameters, silicon time, FLOPs and bytes per launch; computed only while its tab is open
  (PyProf's sequential rules: ~0.1 ms a kernel, docs/kernels.md).

``*_data`` functions are pure pandas (tested without a browser); :class:`AnalysesPanel` is an
ipywidgets Accordion that builds its views the first time it is opened and follows the
dashboard's range afterwards (:meth:`AnalysesPanel.refresh`), so a closed section costs nothing.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import ipywidgets as w
import numpy as np
import pandas as pd
from bokeh.document import Document
from bokeh.layouts import column
from bokeh.models import (
    ColumnDataSource,
    DataTable,
    Div,
    HoverTool,
    NumberFormatter,
    Select,
    Span,
    TableColumn,
    TabPanel,
    Tabs,
)
from bokeh.plotting import figure

from jlprof.engine.analyses.gpu_peaks import gpu_peaks
from jlprof.engine.analyses.idle import CAUSE_LABELS, CAUSES
from jlprof.errors import AnalysisError
from jlprof.reports import analyses as an
from jlprof.reports import catalog
from jlprof.reports.prof import prof_report
from jlprof.reports.roofline import profile_gpu
from jlprof.widgets.bokeh_comm import BatchedBokehModel
from jlprof.widgets.views import distinct_labels

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

CAUSE_COLORS = {
    "memcpy": "#9467bd",
    "sync": "#d62728",
    "dataloader": "#ff7f0e",
    "host_launch": "#1f77b4",
    "other": "#c7c7c7",
}
WIDTH = 900
TOP_OPS = 15  # ops shown in an outlier's delta chart
BINS = 40
# the PyProf tab: source field -> (prof report column, title, width); rows capped (the whole
# table: ``p.report("prof")``, ``jlprof prof``)
PROF = {
    "idx": ("Idx", "Idx", 55),
    "dir": ("Direction", "Dir", 45),
    "op": ("Op", "Op", 110),
    "kernel": ("Kernel", "Kernel", 250),
    "params": ("Params", "Params", 200),
    "sil": ("Sil(ns)", "Sil (ns)", 70),
    "flops": ("FLOPs", "FLOPs", 80),
    "bytes": ("Bytes", "Bytes", 80),
}
PROF_ROWS = 5_000
NUMERIC = ("idx", "sil", "flops", "bytes")
PROF_TAB = 4  # the PyProf tab's index


def idle_data(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Per iteration: idle ms per cause, averaged over the GPUs that ran work (all when none)."""
    r = catalog.report(p, "idle_causes", lo, hi)
    active = r.groupby("GPU")["GPU Busy Time (ns)"].transform("sum") > 0
    if active.any():
        r = r[active]
    cols = [f"{CAUSE_LABELS[c]} (ns)" for c in CAUSES]
    m = r.groupby("Iteration", sort=True)[[*cols, "GPU Idle Time (ns)"]].mean() / 1e6
    out = pd.DataFrame({"iteration": m.index.to_numpy(np.int64)})
    for c, col in zip(CAUSES, cols, strict=True):
        out[f"{c}_ms"] = m[col].to_numpy()
    out["idle_ms"] = m["GPU Idle Time (ns)"].to_numpy()
    return out


def launch_data(p: Analysis, lo: int, hi: int, bins: int = BINS) -> dict[str, Any]:
    """Histogram of launch latency in µs on log-spaced bins, and the figures of the title."""
    lf = an.launches_in_range(p, lo, hi)
    lat = lf["latency_ns"].to_numpy(np.float64) / 1e3
    pos = lat[lat > 0]
    if len(pos) == 0:
        return {"left": [], "right": [], "count": [], "outlier": [], "n": 0, "text": "no launches"}
    edges = np.logspace(np.log10(pos.min()), np.log10(pos.max()) + 1e-9, bins + 1)
    counts, _ = np.histogram(pos, edges)
    out_counts, _ = np.histogram(pos[lf["outlier"].to_numpy(bool)[lat > 0]], edges)
    bound = 100 * lf["launch_bound"].mean()
    text = (
        f"{len(lf)} launches · median {np.median(lat):.1f} µs · mean queue "
        f"{lf['queue_ns'].mean() / 1e3:.1f} µs · launch-bound {bound:.1f}%"
        f" · {int(lf['outlier'].sum())} outliers"
    )
    return {
        "left": edges[:-1],
        "right": edges[1:],
        "count": counts,
        "outlier": out_counts,
        "n": len(lf),
        "text": text,
    }


def outlier_data(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """Per iteration: ms, threshold ms, partial and outlier flags (the ``iteration_outliers``
    report)."""
    o = catalog.report(p, "iteration_outliers", lo, hi)
    return pd.DataFrame(
        {
            "iteration": o["Iteration"].to_numpy(np.int64),
            "ms": o["Iteration Time (ns)"].to_numpy(np.float64) / 1e6,
            "threshold_ms": o["Outlier Threshold (ns)"].to_numpy(np.float64) / 1e6,
            "partial": o["Partial Interval"].to_numpy(bool),
            "outlier": o["Outlier"].to_numpy(bool),
        }
    )


def why_slow_data(p: Analysis, iteration: int, lo: int, hi: int) -> pd.DataFrame:
    """The ops with the largest GPU-time delta of ``iteration`` over their median (µs)."""
    d = an.outlier_ops(p, iteration, lo, hi).head(TOP_OPS)
    return pd.DataFrame(
        {
            "op": d["Op Name"].astype(str).to_numpy(object),
            "delta_us": d["Delta GPU Time (ns)"].to_numpy(np.float64) / 1e3,
            "cpu_delta_us": d["Delta CPU Time (ns)"].to_numpy(np.float64) / 1e3,
        }
    )


def roofline_data(p: Analysis, lo: int, hi: int) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Ops with modelled FLOPs (intensity, TFLOP/s) and the roofs of the profile's GPU."""
    r = catalog.report(p, "roofline", lo, hi)
    r = r[(r["Total FLOPs"] > 0) & (r["Total GPU Time (ns)"] > 0)]
    pts = pd.DataFrame(
        {
            "op": r["Op Name"].astype(str).to_numpy(object),
            "ai": r["Arithmetic Intensity (FLOP/B)"].to_numpy(np.float64),
            "tflops": r["Achieved TFLOP/s"].to_numpy(np.float64),
            "dtype": r["Roofline Data Type"].astype(str).to_numpy(object),
            "pct": r["Roofline %"].to_numpy(np.float64),
        }
    )
    found = gpu_peaks(profile_gpu(p))
    roofs: dict[str, Any] = {"gpu": profile_gpu(p), "model": "", "peaks": {}, "bw": np.nan}
    if found is not None:
        roofs.update(model=found[0], peaks={k: v / 1e12 for k, v in found[1].items()}, bw=found[2])
    return pts, roofs


def measured_roofline_data(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """The roofline's measured points: each launch Nsight Compute measured (``--ncu_report``)
    and joined to a kernel launched in lo..hi, with FP work and DRAM traffic: intensity =
    measured FLOPs / DRAM bytes, TFLOP/s = measured FLOPs / ncu's duration. Tensor Core MMA
    work is not in ncu's FLOP counts (docs/kernels.md): a Tensor Core GEMM has no point here."""
    cols = ["kernel", "ai", "tflops"]
    j = getattr(p, "ncu_launches", None)
    if j is None or j.empty:
        return pd.DataFrame(columns=cols)
    j = j[(j["gpu_row"] >= 0) & (j["flops"] > 0) & (j["dram_bytes"] > 0) & (j["duration_ns"] > 0)]
    it = p.gpu_iter[j["gpu_row"].to_numpy(np.int64)] if len(j) else np.zeros(0, np.int64)
    j = j[(it >= lo) & (it <= hi)]
    short = p.kernel_flags["short_name"].to_numpy(object)
    codes = p.correlated.gpu["long_name"].cat.codes.to_numpy()[j["gpu_row"].to_numpy(np.int64)]
    return pd.DataFrame(
        {
            "kernel": short[codes] if len(j) else np.zeros(0, object),
            "ai": (j["flops"] / j["dram_bytes"]).to_numpy(np.float64),
            "tflops": (j["flops"] / (j["duration_ns"] * 1e-9) / 1e12).to_numpy(np.float64),
        }
    )


def prof_data(p: Analysis, lo: int, hi: int) -> tuple[pd.DataFrame, str]:
    """The PyProf tab's rows (the ``prof`` report's, the first ``PROF_ROWS``) and its note."""
    try:
        rep = prof_report(p, lo, hi)
    except AnalysisError as e:  # a windowed profile keeps no GPU rows
        return pd.DataFrame(columns=[c for c, _, _ in PROF.values()]), str(e)
    note = f"{len(rep):,} kernels launched in iterations {lo}–{hi} (PyProf's table"
    if len(rep) > PROF_ROWS:
        note += f'; the first {PROF_ROWS:,} shown, all of them: p.report("prof")'
    return rep.head(PROF_ROWS), note + ")"


class AnalysesViews:
    """The five tabs' figures and sources (built once, data replaced in place)."""

    def __init__(self) -> None:
        self.idle_src = ColumnDataSource({"iteration": [], **{f"{c}_ms": [] for c in CAUSES}})
        f = figure(
            height=260,
            width=WIDTH,
            title="GPU idle time by cause (ms per iteration)",
            x_axis_label="iteration",
            y_axis_label="ms",
            tools="xpan,xwheel_zoom,reset,save",
        )
        bars = f.vbar_stack(
            [f"{c}_ms" for c in CAUSES],
            x="iteration",
            width=0.85,
            source=self.idle_src,
            color=[CAUSE_COLORS[c] for c in CAUSES],
            legend_label=[CAUSE_LABELS[c] for c in CAUSES],
        )
        f.add_tools(
            HoverTool(
                renderers=bars[:1],
                tooltips=[("iteration", "@iteration")]
                + [(CAUSE_LABELS[c], f"@{c}_ms{{0.000}} ms") for c in CAUSES],
            )
        )
        f.legend.orientation = "horizontal"
        f.add_layout(f.legend[0], "above")
        self.idle_fig = f

        self.launch_src = ColumnDataSource({"left": [], "right": [], "count": [], "outlier": []})
        h = figure(
            height=260,
            width=WIDTH,
            x_axis_type="log",
            title="Kernel launch latency",
            x_axis_label="launch latency (µs, call start → kernel start)",
            y_axis_label="launches",
            tools="xpan,xwheel_zoom,reset,save",
        )
        h.quad(
            left="left",
            right="right",
            bottom=0,
            top="count",
            source=self.launch_src,
            color="#1f77b4",
            alpha=0.7,
            legend_label="launches",
        )
        h.quad(
            left="left",
            right="right",
            bottom=0,
            top="outlier",
            source=self.launch_src,
            color="#d62728",
            alpha=0.8,
            legend_label="latency outliers",
        )
        self.launch_fig = h

        self.out_src = ColumnDataSource({"iteration": [], "ms": [], "color": []})
        o = figure(
            height=220,
            width=WIDTH,
            title="Iteration time; red: outliers "
            "(> median + 3 scaled MADs), grey: partial intervals",
            x_axis_label="iteration",
            y_axis_label="ms",
            tools="tap,reset,save",
        )
        o.vbar(x="iteration", top="ms", width=0.85, color="color", source=self.out_src)
        self.threshold = Span(
            location=0, dimension="width", line_color="#d62728", line_dash="dashed"
        )
        o.add_layout(self.threshold)
        self.out_fig = o
        self.pick = Select(title="Why is this outlier slow?", options=[], width=240)
        self.why_src = ColumnDataSource({"op": [], "delta_us": [], "cpu_delta_us": []})
        self.why_fig = figure(
            height=300,
            width=WIDTH,
            y_range=[],
            tools="save",
            title="Ops' GPU and CPU time beyond their median iteration (µs)",
        )
        self.why_fig.hbar(
            y="op",
            right="delta_us",
            height=0.7,
            source=self.why_src,
            color="#d62728",
            legend_label="GPU time Δ",
        )
        self.why_fig.hbar(
            y="op",
            right="cpu_delta_us",
            height=0.3,
            source=self.why_src,
            color="#bcbd22",
            legend_label="CPU time Δ",
        )
        self.why_fig.add_tools(
            HoverTool(
                tooltips=[
                    ("op", "@op"),
                    ("GPU Δ", "@delta_us{0.0} µs"),
                    ("CPU Δ", "@cpu_delta_us{0.0} µs"),
                ]
            )
        )

        self.roof_src = ColumnDataSource({"op": [], "ai": [], "tflops": [], "dtype": [], "pct": []})
        self.roof_lines = ColumnDataSource({"xs": [], "ys": [], "label": []})
        r = figure(
            height=360,
            width=WIDTH,
            x_axis_type="log",
            y_axis_type="log",
            title="Roofline",
            x_axis_label="arithmetic intensity (FLOP/byte)",
            y_axis_label="achieved TFLOP/s",
            tools="pan,wheel_zoom,reset,save",
        )
        r.multi_line(xs="xs", ys="ys", source=self.roof_lines, color="#555555", line_width=1.5)
        self.roof_labels = ColumnDataSource({"x": [], "y": [], "text": []})
        r.text(
            x="x",
            y="y",
            text="text",
            source=self.roof_labels,
            text_font_size="9pt",
            text_baseline="bottom",
            text_align="right",
            text_color="#555555",
        )
        pts = r.scatter(x="ai", y="tflops", source=self.roof_src, size=8, color="#2ca02c")
        self.roof_measured = ColumnDataSource({"kernel": [], "ai": [], "tflops": []})
        meas = r.scatter(x="ai", y="tflops", source=self.roof_measured, size=9, marker="diamond",
                         color="#ff7f0e")  # fmt: skip
        r.add_tools(
            HoverTool(
                renderers=[meas],
                tooltips=[
                    ("kernel (measured by ncu)", "@kernel"),
                    ("AI", "@ai{0.00} FLOP/B"),
                    ("TFLOP/s", "@tflops{0.000}"),
                ],
            )
        )
        r.add_tools(
            HoverTool(
                renderers=[pts],
                tooltips=[
                    ("op", "@op"),
                    ("type", "@dtype"),
                    ("AI", "@ai{0.00} FLOP/B"),
                    ("TFLOP/s", "@tflops{0.000}"),
                    ("of roof", "@pct{0.0}%"),
                ],
            )
        )
        self.roof_fig = r
        self.roof_note = Div(text="")
        self.launch_note = Div(text="")
        self.prof_src = ColumnDataSource({f: [] for f in PROF})
        num = NumberFormatter(format="0,0")
        self.prof_table = DataTable(
            source=self.prof_src,
            columns=[
                TableColumn(
                    field=f, title=t, width=w, **({"formatter": num} if f in NUMERIC else {})
                )
                for f, (_, t, w) in PROF.items()
            ],
            width=WIDTH,
            height=320,
            index_position=None,
            reorderable=False,
            autosize_mode="none",
        )
        self.prof_note = Div(text="")
        self.layout = Tabs(
            tabs=[
                TabPanel(child=self.idle_fig, title="Idle causes"),
                TabPanel(child=column(self.launch_note, self.launch_fig), title="Launch latency"),
                TabPanel(child=column(self.out_fig, self.pick, self.why_fig), title="Outliers"),
                TabPanel(child=column(self.roof_note, self.roof_fig), title="Roofline"),
                TabPanel(child=column(self.prof_note, self.prof_table), title="PyProf"),
            ]
        )

    def update(self, p: Analysis, lo: int, hi: int) -> None:
        idle = idle_data(p, lo, hi)
        self.idle_src.data = {c: idle[c].to_numpy() for c in idle.columns if c != "idle_ms"}
        ld = launch_data(p, lo, hi)
        self.launch_src.data = {k: np.asarray(ld[k]) for k in ("left", "right", "count", "outlier")}
        self.launch_note.text = ld["text"]
        o = outlier_data(p, lo, hi)
        color = np.where(o["outlier"], "#d62728", np.where(o["partial"], "#bbbbbb", "#1f77b4"))
        self.out_src.data = {
            "iteration": o["iteration"].to_numpy(),
            "ms": o["ms"].to_numpy(),
            "color": color,
        }
        self.threshold.location = float(o["threshold_ms"].iloc[0]) if len(o) else 0.0
        picks = [str(i) for i in o.loc[o["outlier"], "iteration"]]
        self.pick.options = picks
        self.pick.value = picks[0] if picks else ""
        self.update_why(p, lo, hi)
        pts, roofs = roofline_data(p, lo, hi)
        self.roof_src.data = {c: pts[c].to_numpy() for c in pts.columns}
        meas = measured_roofline_data(p, lo, hi)
        self.roof_measured.data = {c: meas[c].to_numpy() for c in meas.columns}
        lines = _roofs(roofs, pd.concat([pts[["ai"]], meas[["ai"]]], ignore_index=True))
        self.roof_lines.data = lines
        self.roof_labels.data = {
            "x": [xs[-1] for xs in lines["xs"]],
            "y": [ys[-1] for ys in lines["ys"]],
            "text": [
                f"{d} {y:g} TFLOP/s"
                for d, y in zip(lines["label"], [ys[-1] for ys in lines["ys"]], strict=True)
            ],
        }
        self.roof_note.text = (
            f"{len(pts)} ops with recorded shapes · {roofs['gpu'] or 'GPU unknown'}"
            + (f" ({roofs['model']} roofs)" if roofs["model"] else " (not in the peak table)")
            + (f" · ◆ {len(meas)} launches measured by ncu" if len(meas) else "")
        )
        self.update_prof(p, lo, hi)

    def update_prof(self, p: Analysis, lo: int, hi: int) -> None:
        """Fill the PyProf tab while it is the open one: its table costs ~0.1 ms a kernel
        (docs/kernels.md), so opening the section or changing the range elsewhere skips it."""
        if self.layout.active != PROF_TAB:
            self.prof_src.data = {f: [] for f in PROF}
            self.prof_note.text = "Computed when this tab is opened."
            return
        rows, note = prof_data(p, lo, hi)
        self.prof_src.data = {
            f: rows[c].to_numpy(np.int64 if f in NUMERIC else object)
            for f, (c, _, _) in PROF.items()
        }
        self.prof_note.text = html.escape(note)

    def update_why(self, p: Analysis, lo: int, hi: int) -> None:
        if not self.pick.value:
            self.why_src.data = {"op": [], "delta_us": [], "cpu_delta_us": []}
            self.why_fig.y_range.factors = []
            return
        d = why_slow_data(p, int(self.pick.value), lo, hi)
        labels = distinct_labels([s[:60] for s in d["op"]])
        self.why_fig.y_range.factors = labels[::-1]
        self.why_src.data = {
            "op": labels,
            "delta_us": d["delta_us"].to_numpy(),
            "cpu_delta_us": d["cpu_delta_us"].to_numpy(),
        }


def _roofs(roofs: dict[str, Any], pts: pd.DataFrame) -> dict[str, list]:
    """One polyline per peak: min(peak, AI * bandwidth) over the points' AI span; types with
    the same peak share it (label ``fp16/bf16``)."""
    if not roofs["peaks"] or not np.isfinite(roofs["bw"]):
        return {"xs": [], "ys": [], "label": []}
    ai = pts["ai"].to_numpy(np.float64)
    ai = ai[np.isfinite(ai) & (ai > 0)]
    lo = min(float(ai.min()) / 4 if len(ai) else 0.01, 0.01)
    hi = max(float(ai.max()) * 4 if len(ai) else 1e4, 1e3)
    xs, ys, labels = [], [], []
    by_peak: dict[float, list[str]] = {}
    for dtype, peak in roofs["peaks"].items():
        by_peak.setdefault(peak, []).append(dtype)
    for peak, names in by_peak.items():
        dtype = "/".join(names)
        ridge = peak * 1e12 / roofs["bw"]
        x = [lo, ridge, hi] if lo < ridge < hi else [lo, hi]
        xs.append(x)
        ys.append([min(peak, v * roofs["bw"] / 1e12) for v in x])
        labels.append(dtype)
    return {"xs": xs, "ys": ys, "label": labels}


class AnalysesPanel(w.Accordion):
    """The collapsed "Analyses" section of the dashboard; see the module docstring."""

    def __init__(self, profile: Analysis) -> None:
        self.profile = profile
        self.views: AnalysesViews | None = None
        self.bokeh: BatchedBokehModel | None = None
        self.box = w.VBox(
            [
                w.HTML(
                    "<i>Open to compute idle causes, launch latency, outliers, the "
                    "roofline and PyProf's kernel table for the selected range.</i>"
                )
            ]
        )
        super().__init__(children=[self.box], titles=("Analyses (beyond DLProf)",))
        self.selected_index = None
        self.observe(self._on_open, names="selected_index")

    def expand(self) -> None:
        """Build and fill the views, as opening the section does (``open`` is the comm's)."""
        self.selected_index = 0
        if self.views is None:
            self._build()

    def refresh(self) -> None:
        """Follow the profile's range (the dashboard calls this on every refresh)."""
        if self.views is None or self.bokeh is None:
            return
        p = self.profile
        with self.bokeh.batch():
            self.views.update(p, p.iter_start, p.iter_stop)

    def _build(self) -> None:
        p = self.profile
        self.views = AnalysesViews()
        self.doc = Document()
        self.doc.add_root(self.views.layout)
        self.views.update(p, p.iter_start, p.iter_stop)
        self.views.pick.on_change("value", self._on_pick)
        self.views.layout.on_change("active", self._on_tab)
        self.bokeh = BatchedBokehModel(self.views.layout)
        self.box.children = [self.bokeh]

    def _on_open(self, change: dict[str, Any]) -> None:
        if change["new"] == 0 and self.views is None:
            self._build()

    def _on_tab(self, _attr: str, _old: Any, _new: Any) -> None:
        if self.views is None or self.bokeh is None:
            return
        p = self.profile
        with self.bokeh.batch():
            self.views.update_prof(p, p.iter_start, p.iter_stop)

    def _on_pick(self, _attr: str, _old: Any, _new: Any) -> None:
        if self.views is None or self.bokeh is None:
            return
        p = self.profile
        with self.bokeh.batch():
            self.views.update_why(p, p.iter_start, p.iter_stop)


__all__ = [
    "AnalysesPanel",
    "AnalysesViews",
    "idle_data",
    "launch_data",
    "measured_roofline_data",
    "outlier_data",
    "prof_data",
    "roofline_data",
    "why_slow_data",
]
