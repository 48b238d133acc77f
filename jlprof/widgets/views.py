"""The dashboard's Bokeh figures and tables, fed by ``data`` through ColumnDataSources.

``Views`` builds every figure once; ``update_*`` methods replace the sources' data in place
(never the figures), so the browser redraws without rebuilding the document. Times are
shown in milliseconds from the start of the profile.
"""

from __future__ import annotations

import html
import zlib
from typing import Any

import numpy as np
import pandas as pd
from bokeh.layouts import column, row
from bokeh.models import (
    BoxAnnotation,
    CDSView,
    ColumnDataSource,
    CustomJS,
    CustomJSFilter,
    CustomJSHover,
    DataTable,
    Div,
    FactorRange,
    FixedTicker,
    HoverTool,
    HTMLTemplateFormatter,
    Model,
    NumberFormatter,
    Range1d,
    TableColumn,
    TextInput,
)
from bokeh.palettes import Category20
from bokeh.plotting import figure
from bokeh.transform import linear_cmap

from jlprof.widgets.data import (
    CATEGORY_LABELS,
    ITER_CATEGORIES,
    MAX_KERNEL_GLYPHS,
    MEASURED_TABLE_COLUMNS,
)

CATEGORY_COLORS = {
    "tc": "#2ca02c",
    "non_tc": "#1f77b4",
    "memory": "#9467bd",
    "dataloader": "#ff7f0e",
    "io": "#8c564b",
    "cpu": "#bcbd22",
    "other": "#c7c7c7",
}
KERNEL_COLORS = Category20[20]
LABEL_CHARS = 48  # op and kernel names are cut to this in axes (full names in hovers/tables)
TC_TOP = 15  # ops in the Tensor Core chart
WIDTH = 940
# The tables' columns have fixed widths that fill the table (less its scroll bar), and
# autosize_mode="none": with BokehJS' default ("force_fit") every refresh of a table's rows
# also re-measures every column through jQuery's computed styles (~10 ms of a 1M-kernel
# range change in the browser, for the two tables).
TABLE_SIZING = "none"
KERNEL_TABLE_WIDTH = 480
# the kernel table's measured columns: source field -> (kernel report column, title, width,
# divisor from the report's unit to the shown one)
MEASURED = {
    "m_dur_us": (MEASURED_TABLE_COLUMNS[0], "ncu µs", 55, 1e3),
    "sm_pct": (MEASURED_TABLE_COLUMNS[1], "SM %", 45, 1.0),
    "mem_pct": (MEASURED_TABLE_COLUMNS[2], "Mem %", 45, 1.0),
    "occ_pct": (MEASURED_TABLE_COLUMNS[3], "Occ. %", 45, 1.0),
    "pipe_pct": (MEASURED_TABLE_COLUMNS[4], "TC pipe %", 55, 1.0),
    "dram_mb": (MEASURED_TABLE_COLUMNS[5], "DRAM MB", 55, 1e6),
}
MEASURED_WIDTH = sum(w for _, _, w, _ in MEASURED.values())


def short(name: Any, n: int = LABEL_CHARS) -> str:
    s = str(name)
    return s if len(s) <= n else s[: n - 1] + "…"


def _color_of(name: str) -> int:
    """A stable palette index per kernel name (same kernel, same colour, whatever the range)."""
    return zlib.crc32(name.encode()) % len(KERNEL_COLORS)


class NameCodes:
    """Kernel and NVTX names as int32 codes into a lookup source that only grows.

    A range change then sends numbers (binary) for the ~4,000 bars' names instead of strings
    (one JSON string each, encoded by Bokeh one by one and decoded by the page: ~60 kB of a
    ~190 kB patch at 1M kernels); the lookup travels once, new names as a small stream, and
    the hovers read it through ``hover`` (a ``CustomJSHover``).
    """

    def __init__(self) -> None:
        self.src = ColumnDataSource({"name": []})
        self.codes: dict[str, int] = {}
        self.colors = np.zeros(0, np.int64)  # palette index per code
        self.hover = CustomJSHover(
            args={"names": self.src}, code="return String(names.data.name[value] ?? '')"
        )

    def encode(self, names: np.ndarray) -> np.ndarray:
        inv, uniq = pd.factorize(np.asarray(names, dtype=object))
        new = [str(u) for u in uniq if str(u) not in self.codes]
        if new:
            for u in new:
                self.codes[u] = len(self.codes)
            self.colors = np.append(self.colors, [_color_of(u) for u in new])
            self.src.stream({"name": new})
        table = np.array([self.codes[str(u)] for u in uniq], dtype=np.int32)
        return table[inv] if len(inv) else np.zeros(0, np.int32)


def _lane_positions(lanes: Any, offset: int = 0) -> tuple[np.ndarray, list[str]]:
    """Each row's lane as a y position (lanes in sorted order from ``offset``), and the lanes."""
    inv, uniq = pd.factorize(np.asarray(lanes, dtype=object), sort=True)
    return (inv + offset).astype(np.float64), [str(u) for u in uniq]


class Views:
    """All Bokeh views of the dashboard, and the sources they draw."""

    def __init__(self, t0_ns: int, interactive: bool = True, no_kernels: str = "") -> None:
        """``no_kernels``: why the capture has no kernel at all (``data.why_no_kernels``); the
        kernel table and the Tensor Core chart say it instead of showing nothing."""
        self.t0_ns = int(t0_ns)
        self.no_kernels = no_kernels
        tools = "xbox_select,tap,xpan,xwheel_zoom,reset,save" if interactive else "save"
        self._iteration_view(tools)
        self._gpu_timeline_view(interactive)
        self._gpu_metrics_view()
        self._tables()
        self._tensor_core_view(no_kernels)
        tables = row(
            column(Div(text="<b>Op tree</b> (select a node)"), self.tree_table),
            column(self.kernel_title, self.kernel_filter, self.kernel_table),
        )
        self.layout = column(
            self.iter_fig, self.gpu_fig, self.metrics_fig, self.lod_note, tables, self.tc_fig
        )
        _one_way(self.layout, self.range_box)
        # without tables: what the static (no kernel) rendering shows
        # (plots only: Divs and tables need BokehJS' widget bundles, another 0.7 MB inline)
        self.static_layout = column(self.iter_fig, self.gpu_fig, self.metrics_fig, self.tc_fig)

    def _iteration_view(self, tools: str) -> None:
        """The iteration timeline: ms per iteration by duration category; select to aggregate."""
        self.iter_src = ColumnDataSource(self._empty_iter())
        self.outlier_src = ColumnDataSource({"iteration": [], "y": [], "duration_ms": []})
        f = figure(
            height=260,
            width=WIDTH,
            title="Iterations (ms per iteration, by duration category) — select to aggregate",
            tools=tools,
            toolbar_location="right",
            x_axis_label="iteration",
            y_axis_label="ms",
            y_range=Range1d(0, 1),
        )
        cats = [f"{c}_ms" for c in ITER_CATEGORIES]
        bars = f.vbar_stack(
            cats,
            x="iteration",
            width=0.85,
            source=self.iter_src,
            color=[CATEGORY_COLORS[c] for c in ITER_CATEGORIES],
            legend_label=[CATEGORY_LABELS[c] for c in ITER_CATEGORIES],
        )
        f.scatter(
            "iteration",
            "y",
            source=self.outlier_src,
            marker="inverted_triangle",
            size=9,
            color="#d62728",
            legend_label="outlier",
        )
        f.add_tools(
            HoverTool(
                renderers=bars[:1],
                tooltips=[("iteration", "@iteration"), ("time", "@duration_ms{0.000} ms")]
                + [(CATEGORY_LABELS[c], f"@{c}_ms{{0.000}} ms") for c in ITER_CATEGORIES],
            )
        )
        f.legend.orientation = "horizontal"
        f.legend.location = "top_left"
        f.legend.label_text_font_size = "9pt"
        f.add_layout(f.legend[0], "above")
        # on the overlay layer: moving it repaints that layer only, not the ~10k iteration
        # bars of the primary one (BokehJS repaints a plot's primary layer when any
        # non-overlay renderer changed)
        self.range_box = BoxAnnotation(
            fill_color="#ffd54f", fill_alpha=0.25, line_color=None, level="overlay"
        )
        f.add_layout(self.range_box)
        self.iter_fig = f

    def _gpu_timeline_view(self, interactive: bool) -> None:
        """The GPU timeline: kernels per device/stream, NVTX ranges per thread."""
        # numeric columns travel to the browser as binary buffers, strings one by one: lanes
        # are numbers (labelled on the axis), colours an index into a palette
        self.names = NameCodes()
        self.gpu_src = ColumnDataSource(
            {k: [] for k in ("y", "left", "right", "name", "dur_us", "count", "busy_us")}
            | {"color": [], "alpha": []}
        )
        self.gpu_op = np.zeros(0, dtype=object)  # op per bar, kept here for highlighting
        self.highlighted: set[str] | None = None  # ops whose kernels are not dimmed
        self.nvtx_src = ColumnDataSource(
            {k: [] for k in ("y", "left", "right", "name", "dur_us", "height")}
        )
        self.lanes: list[str] = []
        g = figure(
            height=300,
            width=WIDTH,
            title="GPU timeline of the selected iterations",
            y_range=Range1d(0.5, -0.5),  # first lane on top
            x_range=Range1d(0, 1),
            tools="xpan,xwheel_zoom,box_zoom,reset,save" if interactive else "save",
            active_scroll="xwheel_zoom" if interactive else None,
            x_axis_label="ms since profile start",
        )
        self.lane_ticker = FixedTicker(ticks=[0])  # updated in place (a new model is costly)
        g.yaxis.ticker = self.lane_ticker
        g.yaxis.major_label_overrides = {0: "(no GPU work or NVTX ranges)"}
        kr = g.hbar(
            y="y",
            left="left",
            right="right",
            height=0.7,
            color=linear_cmap("color", KERNEL_COLORS, 0, len(KERNEL_COLORS) - 1),
            alpha="alpha",
            source=self.gpu_src,
        )
        nr = g.hbar(
            y="y",
            left="left",
            right="right",
            height="height",
            fill_color="#7f7fbf",
            fill_alpha=0.25,
            line_color="#3f3f7f",
            source=self.nvtx_src,
        )
        g.add_tools(
            HoverTool(
                renderers=[kr],
                tooltips=[
                    ("kernel", "@name{custom}"),
                    ("duration", "@dur_us{0.0} µs"),
                    ("kernels merged", "@count"),
                    ("busy", "@busy_us{0.0} µs"),
                ],
                formatters={"@name": self.names.hover},
            ),
            HoverTool(
                renderers=[nr],
                tooltips=[("range", "@name{custom}"), ("duration", "@dur_us{0.0} µs")],
                formatters={"@name": self.names.hover},
            ),
        )
        self.gpu_fig = g
        # how many GPU activities the bars stand for (changes with the range): the live
        # dashboard shows it in its status line, because a changed Div costs the page a
        # re-layout of the whole Bokeh document (~50 ms at 1M kernels); the Div only
        # explains the bars there, and carries the figures in the static rendering
        self.lod_text = ""
        self.interactive = interactive
        self.lod_note = Div(
            text=f"GPU timeline: above {MAX_KERNEL_GLYPHS:,} activities, the work of each stream "
            "is merged into time bins (hover a bar for its count and busy time); counts in the "
            "status line.",
            styles={"font-size": "11px", "color": "#555"},
        )

    def _gpu_metrics_view(self) -> None:
        """nsys's GPU metrics under the GPU timeline, on its time axis (docs/kernels.md);
        hidden while the profile has none."""
        self.metrics_src = ColumnDataSource(
            {k: [] for k in ("t_ms", "sm_active", "tensor_active", "dram_bw")}
        )
        m = figure(
            height=150,
            width=WIDTH,
            title="GPU metrics (nsys sampling, % of peak, averaged over GPUs)",
            x_range=self.gpu_fig.x_range,
            y_range=Range1d(0, 100),
            tools="save",
            x_axis_label="ms since profile start",
        )
        for key, color, label in (("sm_active", "#1f77b4", "SM active"),
                                  ("tensor_active", "#2ca02c", "Tensor active"),
                                  ("dram_bw", "#ff7f0e", "DRAM bandwidth")):  # fmt: skip
            m.line("t_ms", key, source=self.metrics_src, color=color, legend_label=label)
        m.legend.orientation = "horizontal"
        m.legend.location = "top_left"
        m.legend.label_text_font_size = "9pt"
        m.visible = False
        self.metrics_fig = m

    def update_gpu_metrics(self, lane: pd.DataFrame) -> None:
        """The GPU-metrics lane of the shown window (``data.gpu_metrics_lane``)."""
        self.metrics_src.data = {
            "t_ms": (lane["ts_ns"].to_numpy(float) - self.t0_ns) / 1e6,
            **{k: lane[k].to_numpy(float) for k in ("sm_active", "tensor_active", "dram_bw")},
        }
        self.metrics_fig.visible = len(lane) > 0

    def _tables(self) -> None:
        """The op tree and the kernel table."""
        self.tree_src = ColumnDataSource(
            {
                k: []
                for k in ("path", "label", "calls", "gpu_ms", "cpu_ms", "tc_eligible_ops", "tc_ops")
            }
        )
        indent = HTMLTemplateFormatter(template='<span style="white-space:pre"><%= value %></span>')
        ms = NumberFormatter(format="0,0.000")
        self.tree_table = DataTable(
            source=self.tree_src,
            columns=[
                TableColumn(field="label", title="Group node", formatter=indent, width=160),
                TableColumn(field="calls", title="Calls", width=50),
                TableColumn(field="gpu_ms", title="GPU ms", formatter=ms, width=65),
                TableColumn(field="cpu_ms", title="CPU ms", formatter=ms, width=65),
                TableColumn(field="tc_eligible_ops", title="TC eligible", width=55),
                TableColumn(field="tc_ops", title="Using TC", width=45),
            ],
            width=450,
            height=260,
            index_position=None,
            reorderable=False,
            autosize_mode=TABLE_SIZING,
        )
        self.kernel_src = ColumnDataSource(
            {
                k: []
                for k in ("kernel", "long", "op", "calls", "gpu_ms", "avg_us", "uses_tc", *MEASURED)
            }
        )
        # namesakes (template instantiations) are separate rows: the full name on hover
        long_name = HTMLTemplateFormatter(template='<span title="<%- long %>"><%- value %></span>')
        # Nsight Compute's figures: shown only while an ncu report is joined (update_kernels)
        measured = NumberFormatter(format="0,0.0", nan_format="–")
        self.measured_columns = [
            TableColumn(field=f, title=t, width=w, formatter=measured, visible=False)
            for f, (_, t, w, _) in MEASURED.items()
        ]
        self.kernel_title = Div(text="<b>Kernels</b> (all ops)")
        self.kernel_filter, view = filter_box(
            self.kernel_src, ["kernel", "long", "op"], "kernels or ops", 300
        )
        self.kernel_table = DataTable(
            source=self.kernel_src,
            view=view,
            columns=[
                TableColumn(field="kernel", title="Kernel", width=170, formatter=long_name),
                TableColumn(field="op", title="Op", width=105),
                TableColumn(field="calls", title="Calls", width=45),
                TableColumn(field="gpu_ms", title="GPU ms", formatter=ms, width=60),
                TableColumn(field="avg_us", title="Avg µs", formatter=ms, width=55),
                TableColumn(field="uses_tc", title="TC", width=45),
                *self.measured_columns,
            ],
            width=KERNEL_TABLE_WIDTH,
            height=240,
            index_position=None,
            reorderable=False,
            autosize_mode=TABLE_SIZING,
        )

    def _tensor_core_view(self, no_kernels: str) -> None:
        """The Tensor Core report: eligible ops by GPU time, TC and not."""
        self.tc_src = ColumnDataSource(
            {k: [] for k in ("op", "label", "tc_ms", "non_tc_ms", "tc_util_pct", "op_type")}
        )
        self.tc_ops = FactorRange(factors=[no_kernels or "(no TC-eligible ops)"])
        t = figure(
            height=170,
            width=WIDTH,
            title="Tensor Core: eligible ops by GPU time (green: TC kernels, red: not TC)",
            y_range=self.tc_ops,
            tools="save",
            x_axis_label="GPU ms",
        )
        tr = t.hbar_stack(
            ["tc_ms", "non_tc_ms"],
            y="label",
            height=0.7,
            color=["#2ca02c", "#d62728"],
            source=self.tc_src,
        )
        t.add_tools(
            HoverTool(
                renderers=tr[:1],
                tooltips=[
                    ("op", "@op"),
                    ("type", "@op_type"),
                    ("TC", "@tc_ms{0.000} ms"),
                    ("non-TC", "@non_tc_ms{0.000} ms"),
                    ("TC util", "@tc_util_pct{0.0} %"),
                ],
            )
        )
        self.tc_fig = t

    @staticmethod
    def _empty_iter() -> dict[str, list]:
        cols = ["iteration", "duration_ms"] + [f"{c}_ms" for c in ITER_CATEGORIES]
        return {c: [] for c in cols}

    # ---- updates ---------------------------------------------------------------------------
    def update_iterations(self, frame: pd.DataFrame) -> None:
        d = {"iteration": frame["iteration"].to_numpy(), "duration_ms": frame["duration_ns"] / 1e6}
        for c in ITER_CATEGORIES:
            d[f"{c}_ms"] = (frame[f"{c}_ns"] / 1e6).to_numpy()
        self.iter_src.data = d
        # the y axis stops above the usual iterations, so that one long warm-up iteration
        # does not flatten every other bar; taller ones are cut and flagged as outliers
        dur_ms = frame["duration_ns"].to_numpy(np.float64) / 1e6
        top = float(dur_ms.max()) if len(dur_ms) else 1.0
        usual = float(np.percentile(dur_ms, 95)) if len(dur_ms) else 1.0
        ymax = top if top <= 1.5 * usual else 1.5 * usual
        self.iter_fig.y_range.start, self.iter_fig.y_range.end = 0.0, max(ymax * 1.08, 1e-6)
        out = frame["outlier"].to_numpy(bool)
        self.outlier_src.data = {
            "iteration": frame["iteration"].to_numpy()[out],
            "y": np.minimum(dur_ms[out], ymax) + 0.04 * ymax,
            "duration_ms": dur_ms[out],
        }

    def update_range(self, lo: int, hi: int) -> None:
        self.range_box.left = lo - 0.5
        self.range_box.right = hi + 0.5

    def update_timeline(
        self, gpu: pd.DataFrame, merged: bool, nvtx: pd.DataFrame, window_ns: tuple[int, int]
    ) -> None:
        t0 = self.t0_ns
        gpu_y, gpu_lanes = _lane_positions(gpu["lane"])
        nvtx_y, nvtx_lanes = _lane_positions(nvtx["lane"], len(gpu_lanes))
        lanes = gpu_lanes + nvtx_lanes
        self.gpu_op = gpu["op"].to_numpy(object) if "op" in gpu else np.full(len(gpu), "", object)
        names = self.names.encode(gpu["name"].to_numpy(object))
        self.gpu_src.data = {
            "y": gpu_y,
            "left": (gpu["start_ns"].to_numpy(np.int64) - t0) / 1e6,
            "right": (gpu["end_ns"].to_numpy(np.int64) - t0) / 1e6,
            "name": names,
            "dur_us": gpu["dur_ns"].to_numpy(np.int64) / 1e3,
            "count": gpu["count"].to_numpy(np.int64),
            "busy_us": gpu["busy_ns"].to_numpy(np.int64) / 1e3,
            "color": self.names.colors[names],
            "alpha": self._alpha(),
        }
        self.nvtx_src.data = {
            "y": nvtx_y,
            "left": (nvtx["start_ns"].to_numpy(np.int64) - t0) / 1e6,
            "right": (nvtx["end_ns"].to_numpy(np.int64) - t0) / 1e6,
            "name": self.names.encode(nvtx["name"].to_numpy(object)),
            "dur_us": nvtx["dur_ns"].to_numpy(np.int64) / 1e3,
            "height": 0.9 - 0.12 * np.minimum(nvtx["depth"].to_numpy(np.int64), 5),
        }
        if lanes != self.lanes:
            self.lanes = lanes
            shown = lanes or ["(no GPU work or NVTX ranges)"]
            self.lane_ticker.ticks = list(range(len(shown)))
            self.gpu_fig.yaxis.major_label_overrides = dict(enumerate(shown))
            self.gpu_fig.y_range.start, self.gpu_fig.y_range.end = len(shown) - 0.5, -0.5
            self.gpu_fig.height = max(160, 70 + 45 * len(shown))
        a, b = (window_ns[0] - t0) / 1e6, (window_ns[1] - t0) / 1e6
        self.gpu_fig.x_range.start, self.gpu_fig.x_range.end = a, max(b, a + 1e-6)
        n = int(gpu["count"].sum()) if len(gpu) else 0
        self.lod_text = (
            f"{n:,} GPU activities shown as {len(gpu):,} bars (merged into time bins per stream; "
            "hover for counts)"
            if merged
            else f"{n:,} GPU activities, {len(nvtx):,} NVTX ranges"
        )
        if not self.interactive:
            self.lod_note.text = self.lod_text

    def highlight_ops(self, ops: set[str] | None) -> None:
        """Dim the kernels of other ops than ``ops`` (None: nothing dimmed).

        Only a changed alpha column is sent (a range change already drew the bars with the
        current highlight: no second, partial update of the bars)."""
        self.highlighted = ops
        alpha = self._alpha()
        if not np.array_equal(alpha, self.gpu_src.data["alpha"]):
            self.gpu_src.data["alpha"] = alpha

    def _alpha(self) -> np.ndarray:
        op, ops = self.gpu_op, self.highlighted
        if ops is None:
            return np.full(len(op), 0.9)
        return np.where(np.isin(op, list(ops)), 0.95, 0.15)

    def update_tree(self, tree: pd.DataFrame) -> None:
        rows_before = len(self.tree_src.data["path"])
        label = [
            ("   " * int(d)) + str(n) for d, n in zip(tree["depth"], tree["name"], strict=True)
        ]
        self.tree_src.data = {
            "path": tree["path"].to_numpy(object),
            "label": label,
            "calls": tree["calls"].to_numpy(np.int64),
            "gpu_ms": tree["gpu_ns"].to_numpy(np.int64) / 1e6,
            "cpu_ms": tree["cpu_ns"].to_numpy(np.int64) / 1e6,
            "tc_eligible_ops": tree["tc_eligible_ops"].to_numpy(np.int64),
            "tc_ops": tree["tc_ops"].to_numpy(np.int64),
        }
        if len(tree) == rows_before:
            _redraw(self.tree_table)

    def update_kernels(self, k: pd.DataFrame, node: str | None) -> None:
        rows_before = len(self.kernel_src.data["kernel"])
        shown = MEASURED_TABLE_COLUMNS[0] in k  # an ncu report is joined
        self.kernel_src.data = {
            "kernel": k["Kernel Name"].astype(str).to_numpy(object),
            "long": k["Long Kernel Name"].astype(str).to_numpy(object),
            "op": k["Op Name"].astype(str).map(short).to_numpy(object),
            "calls": k["Calls"].to_numpy(np.int64),
            "gpu_ms": k["Total GPU Time (ns)"].to_numpy(np.int64) / 1e6,
            "avg_us": k["Avg. GPU Time (ns)"].to_numpy(float) / 1e3,
            "uses_tc": np.char.add(
                np.where(k["Uses TC"].to_numpy(bool), "yes", "no"),
                np.where(k["TC Verdict"] == "measured", " ncu", "") if "TC Verdict" in k else "",
            ).astype(object),
            **{
                f: k[label].to_numpy(float) / scale if shown else np.zeros(len(k))
                for f, (label, _, _, scale) in MEASURED.items()  # (hidden without ncu)
            },
        }
        for c in self.measured_columns:
            c.visible = shown
        self.kernel_table.width = KERNEL_TABLE_WIDTH + (MEASURED_WIDTH if shown else 0)
        where = f"under <code>{html.escape(node)}</code>" if node else "(all ops)"
        why = self.no_kernels or "no kernels in the selected iterations"
        count = f"{len(k)} rows" if len(k) else f"none — {html.escape(why)}"
        self.kernel_title.text = f"<b>Kernels</b> {where}: {count}"
        if len(k) == rows_before:
            _redraw(self.kernel_table)

    def update_tc(self, tc: pd.DataFrame) -> None:
        top = tc.head(TC_TOP).iloc[::-1]  # largest at the top of the chart
        labels = _unique_labels(top["op"].to_numpy(object))
        self.tc_src.data = {
            "op": top["op"].to_numpy(object),
            "label": labels,
            "tc_ms": top["tc_ns"].to_numpy(np.int64) / 1e6,
            "non_tc_ms": top["non_tc_ns"].to_numpy(np.int64) / 1e6,
            "tc_util_pct": top["tc_util_pct"].to_numpy(float),
            "op_type": top["op_type"].to_numpy(object),
        }
        why = self.no_kernels or "no Tensor Core eligible ops in the selected iterations"
        self.tc_ops.factors = labels or [why]  # an empty chart says why, on its only row
        self.tc_fig.xaxis.visible = bool(labels)  # no axis running from -1 to 1 over nothing
        self.tc_fig.height = max(170, 90 + 26 * len(labels))  # bars keep their thickness


# rows kept where any of ``fields`` contains the box's text (any case); all rows when empty
_FILTER_JS = """
const q = box.value_input.trim().toLowerCase();
const n = source.get_length();
const keep = new Array(n).fill(true);
if (q === "") { return keep; }
for (let i = 0; i < n; i++) {
  keep[i] = fields.some((f) => String(source.data[f][i]).toLowerCase().includes(q));
}
return keep;
"""


def filter_box(
    src: ColumnDataSource, fields: list[str], what: str, width: int
) -> tuple[TextInput, CDSView]:
    """A text box and the table view it filters: rows of ``src`` whose ``fields`` contain
    the text typed stay (in the page; each keystroke re-filters)."""
    box = TextInput(placeholder=f"filter {what}", width=width, value_input="")
    box.syncable = False  # typing filters in the page; the kernel needs none of it
    view = CDSView(filter=CustomJSFilter(args={"box": box, "fields": fields}, code=_FILTER_JS))
    box.js_on_change("value_input", CustomJS(args={"source": src}, code="source.change.emit()"))
    return box, view


def _one_way(layout: Model, *more: Model) -> None:
    """The layout's sources and their views, and ``more``: models only the kernel changes,
    whose changes the page does not send back.

    jupyter_bokeh's front end sends the kernel every change made in the page's document,
    including those made by applying the kernel's own patch: at 1M kernels ~190 kB of the
    sources' data per range change, base64-encoded by the page (~10 ms of its main thread),
    then decoded and set again by the kernel (~20 ms, which a quick second change waits
    for). BokehJS sends nothing for a model that is not ``syncable``. The selections (box
    select, op-tree pick) are models of their own and stay syncable.
    """
    sources = [m for m in layout.references() if isinstance(m, (ColumnDataSource, CDSView))]
    for m in (*sources, *more):
        m.syncable = False


def _redraw(table: DataTable) -> None:
    """Make BokehJS redraw a table whose data changed but whose row count did not.

    Its DataTableView refreshes its rows (``updateGrid``: cheap) on a change of the table's
    CDSView, and the view's indices do not change when the row count stays the same. A
    change of the table itself would also do, but rebuilds the whole SlickGrid (measured:
    ~140 ms of a 1M-kernel range change in the browser), so bump the CDSView's ``tags``.
    """
    view = table.view
    n = int(view.tags[0]) + 1 if view.tags else 1
    view.tags = [n]


def _unique_labels(names: np.ndarray) -> list[str]:
    """Short axis labels; a suffix keeps two long names that cut alike apart."""
    return distinct_labels([short(n) for n in names])


def distinct_labels(labels: list[str]) -> list[str]:
    """Categorical axis labels must differ: the second "x" becomes "x (2)", and so on."""
    seen: dict[str, int] = {}
    out = []
    for s in labels:
        k = seen.get(s, 0)
        seen[s] = k + 1
        out.append(s if k == 0 else f"{s} ({k + 1})")
    return out
