"""The Viewer panels (DLProf Viewer's System Config, resource usage, GPUs, Top 10 GPU Ops, Op
Type Summary, Ops and Kernels with drill-down, Kernels by Iteration, Iterations by Op) as
Bokeh figures and tables fed by :mod:`jlprof.widgets.panels_data`.

Built once; :meth:`Panels.update` replaces the sources' data in place for a new range or key
node, as ``views`` does. The same patterns keep a range change cheap for the page: the ops
table's rows are every op of the profile in a fixed order, so its strings travel once per
profile and a range change sends only its number columns; sources are one-way
(``views._one_way``); tables have fixed column widths. Drill-down: picking an op (in the ops
table or a Top 10 bar) lists its kernels and draws its iterations; picking one of those
kernels draws that kernel's iterations over Kernels by Iteration. Each table has a filter box
above it: rows whose text columns contain what is typed (any case) stay, in the page alone
(a ``CustomJSFilter``: no kernel round trip, and it works in the static HTML too); header
clicks sort.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from bokeh.layouts import column, row
from bokeh.models import (
    BoxAnnotation,
    CDSView,
    ColumnDataSource,
    DataTable,
    Div,
    FactorRange,
    HoverTool,
    HTMLTemplateFormatter,
    NumberFormatter,
    Range1d,
    TableColumn,
)
from bokeh.plotting import figure

from jlprof.widgets import panels_data as pdata
from jlprof.widgets.views import (
    CATEGORY_COLORS,
    TABLE_SIZING,
    WIDTH,
    _one_way,
    _redraw,
    distinct_labels,
    filter_box,
    short,
)

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

HALF = WIDTH // 2 - 10
PIE_CATEGORIES = ("tc", "non_tc", "memory", "dataloader", "io", "cpu", "other")
GPU_CATEGORIES = ("tc", "non_tc", "memory")  # the GPU-busy categories, stacked per GPU
KERNEL_BY_ITER = ("tc", "non_tc", "memory")
KERNEL_BY_ITER_LABELS = {"tc": "TC kernels", "non_tc": "other kernels", "memory": "memory"}


# formatters: new models per table (a Bokeh model belongs to one document only)
def MS() -> NumberFormatter:
    return NumberFormatter(format="0,0.000")


def PCT() -> NumberFormatter:
    return NumberFormatter(format="0.0")


def LONG_NAME() -> HTMLTemplateFormatter:
    """A kernel's short name, its demangled name on hover (namesakes are separate rows)."""
    return HTMLTemplateFormatter(template='<span title="<%- long %>"><%- value %></span>')


def TC_TEXT() -> HTMLTemplateFormatter:
    """_tc_code's numbers as the table shows them: "eligible / using"."""
    return HTMLTemplateFormatter(
        template='<%= ["no / no", "yes / no", "no / yes", "yes / yes"][value] %>'
    )


def _table(src: ColumnDataSource, cols: list[tuple[str, str, int, Any]], width: int,
           height: int, view: CDSView | None = None) -> DataTable:  # fmt: skip
    return DataTable(
        source=src,
        **({"view": view} if view is not None else {}),
        columns=[
            TableColumn(field=f, title=t, width=w, **({"formatter": fm()} if fm else {}))
            for f, t, w, fm in cols
        ],
        width=width,
        height=height,
        index_position=None,
        reorderable=False,
        sortable=True,
        autosize_mode=TABLE_SIZING,
    )


class Panels:
    """Every Viewer panel, and the drill-down state (picked op and kernel)."""

    def __init__(self, interactive: bool = True) -> None:
        self.interactive = interactive
        self.p: Analysis | None = None
        self.lo = self.hi = 0
        self.op: int | None = None  # picked op (row of the engine's op table)
        self.kernel: tuple[int, int] | None = None  # picked (kernel code, op)
        self._ops_of: Analysis | None = None  # the profile whose ops the table lists
        self._ops_order = np.zeros(0, np.int64)  # the table's rows: ops in this order
        # what the per-iteration charts show (they span every iteration, the range is a
        # shaded box: a range change moves two boxes instead of redrawing ~7,000 bars)
        self._kbi_key: tuple = ()
        self._ibo_key: tuple = ()
        self._kernel_key: tuple = ()
        self._busy = False
        # set by the owner: a context that sends the changes made inside as one patch, and
        # what to do when the picked op changes (the dashboard dims other ops' kernels)
        self.batch: Callable[[], AbstractContextManager[Any]] = nullcontext
        self.on_op: Callable[[set[str] | None], None] = lambda _ops: None
        self.title = Div(
            text="<h3 style='margin:12px 0 4px 0'>Viewer panels</h3>"
            "<span style='font-size:11px;color:#555'>for the selected iterations; pick an op "
            "(Ops and Kernels table or a Top 10 bar) to drill down to its kernels and "
            "iterations</span>",
            width=WIDTH,
        )
        self._system_config()
        self._pie()
        self._kernel_pie()
        self._gpus()
        self._top_ops()
        self._op_types()
        self._ops_and_kernels()
        self._kernels_by_iteration()
        self._iterations_by_op()
        self.layout = column(
            self.title,
            row(self.config_div, self.pie_fig),
            row(self.gpu_fig, self.kernel_pie_fig),
            row(self.top_fig, column(self.top_title, self.top_filter, self.top_table)),
            column(Div(text="<b>Op Type Summary</b>"), self.type_filter, self.type_table),
            row(
                column(
                    Div(text="<b>Ops and Kernels</b> (pick an op)"), self.ops_filter, self.ops_table
                ),
                column(self.kernels_title, self.op_kernel_filter, self.op_kernel_table),
            ),
            self.kbi_fig,
            self.ibo_fig,
        )
        _one_way(self.layout, self.kbi_box, self.ibo_box)
        if interactive:
            self.ops_src.selected.on_change("indices", self._on_op_row)
            self.top_src.selected.on_change("indices", self._on_top_bar)
            self.top_table_src.selected.on_change("indices", self._on_top_row)
            self.op_kernel_src.selected.on_change("indices", self._on_kernel_row)

    # ---- figures ---------------------------------------------------------------------------
    def _system_config(self) -> None:
        self.config_div = Div(text="<b>System Config</b>", width=HALF)

    def _pie(self) -> None:
        self.pie_src = ColumnDataSource(
            {"label": [], "pct": [], "start_angle": [], "end_angle": [], "color": []}
        )
        f = figure(
            height=300, width=HALF, title="Resource usage (% of wall time, summary categories)",
            tools="save", x_range=Range1d(-1.1, 1.1), y_range=Range1d(-1.1, 1.1),
        )  # fmt: skip
        w = f.wedge(x=0, y=0, radius=1.0, start_angle="start_angle", end_angle="end_angle",
                    color="color", line_color="white", legend_field="label",
                    source=self.pie_src)  # fmt: skip
        f.add_tools(HoverTool(renderers=[w], tooltips=[("", "@label: @pct{0.00} %")]))
        f.axis.visible = False
        f.grid.visible = False
        f.legend.label_text_font_size = "9pt"
        f.add_layout(f.legend[0], "right")
        self.pie_fig = f

    def _kernel_pie(self) -> None:
        """DLProf Viewer's kernel pie: the range's kernel GPU time, TC / other / memory."""
        self.kernel_pie_src = ColumnDataSource(
            {"label": [], "pct": [], "gpu_ms": [], "start_angle": [], "end_angle": [], "color": []}
        )
        f = figure(
            height=300, width=HALF, title="Total Kernel GPU Time (selected iterations)",
            tools="save", x_range=Range1d(-1.1, 1.1), y_range=Range1d(-1.1, 1.1),
        )  # fmt: skip
        w = f.wedge(x=0, y=0, radius=1.0, start_angle="start_angle", end_angle="end_angle",
                    color="color", line_color="white", legend_field="label",
                    source=self.kernel_pie_src)  # fmt: skip
        tip = [("", "@label: @gpu_ms{0.000} ms (@pct{0.00} %)")]
        f.add_tools(HoverTool(renderers=[w], tooltips=tip))
        f.axis.visible = False
        f.grid.visible = False
        f.legend.label_text_font_size = "9pt"
        f.add_layout(f.legend[0], "right")
        self.kernel_pie_fig = f

    def _gpus(self) -> None:
        self.gpu_src = ColumnDataSource(
            {"gpu": [], "gpu_util_pct": [], **{f"{c}_pct": [] for c in GPU_CATEGORIES}}
        )
        self.gpu_range = FactorRange(factors=["(no GPU)"])
        f = figure(
            height=200, width=HALF, title="GPUs: utilization (% of wall time)",
            y_range=self.gpu_range, x_range=Range1d(0, 100), tools="save", x_axis_label="%",
        )  # fmt: skip
        bars = f.hbar_stack(
            [f"{c}_pct" for c in GPU_CATEGORIES], y="gpu", height=0.7, source=self.gpu_src,
            color=[CATEGORY_COLORS[c] for c in GPU_CATEGORIES],
        )  # fmt: skip
        f.add_tools(
            HoverTool(
                renderers=bars[:1],
                tooltips=[("GPU", "@gpu"), ("utilization", "@gpu_util_pct{0.00} %")]
                + [(c, f"@{c}_pct{{0.00}} %") for c in GPU_CATEGORIES],
            )
        )
        self.gpu_fig = f

    def _top_ops(self) -> None:
        self.top_src = ColumnDataSource(
            {k: [] for k in ("op", "label", "op_name", "op_type", "gpu_ms", "gpu_pct", "calls")}
        )
        self.top_range = FactorRange(factors=["(no ops)"])
        f = figure(
            height=300, width=HALF, title="Top 10 GPU Ops (GPU ms) — tap to drill down",
            y_range=self.top_range, tools="tap,save" if self.interactive else "save",
            x_axis_label="GPU ms",
        )  # fmt: skip
        r = f.hbar(y="label", right="gpu_ms", height=0.7, color="#1f77b4", source=self.top_src)
        f.add_tools(
            HoverTool(
                renderers=[r],
                tooltips=[("op", "@op_name"), ("type", "@op_type"), ("calls", "@calls"),
                          ("GPU", "@gpu_ms{0.000} ms (@gpu_pct{0.0} %)")],
            )
        )  # fmt: skip
        f.yaxis.major_label_text_font_size = "8pt"
        self.top_fig = f
        # the same ops as a table, largest first (DLProf Viewer's Top 10 GPU Ops table, guide
        # §12.2): its TC columns find the ops eligible for Tensor Cores but not using them
        # (names of their own: no other table's source has them, the page tests find it so)
        cols = ("op", "top_op_name", "top_op_type", "calls", "gpu_ms", "gpu_pct", "cpu_ms",
                "eligible", "using")  # fmt: skip
        self.top_table_src = ColumnDataSource({k: [] for k in cols})
        self.top_title = Div(text="<b>Top 10 GPU Ops</b> (click a header to sort)", width=HALF)
        self.top_filter, view = filter_box(
            self.top_table_src, ["top_op_name", "top_op_type"], "top ops", HALF
        )
        self.top_table = _table(
            self.top_table_src,
            [("top_op_name", "Op", 120, None), ("top_op_type", "Type", 60, None),
             ("calls", "Calls", 40, None), ("gpu_ms", "GPU ms", 55, MS),
             ("gpu_pct", "% GPU", 40, PCT), ("cpu_ms", "CPU ms", 55, MS),
             ("eligible", "TC eligible", 45, None), ("using", "Using TC", 45, None)],
            HALF, 240, view,
        )  # fmt: skip

    def _op_types(self) -> None:
        self.type_src = ColumnDataSource(
            {k: [] for k in ("op_type", "nodes", "calls", "gpu_ms", "cpu_ms", "gpu_pct", "tc")}
        )
        self.type_filter, view = filter_box(self.type_src, ["op_type"], "op types", 300)
        self.type_table = _table(
            self.type_src,
            [("op_type", "Op type", 300, None), ("nodes", "Nodes", 70, None),
             ("calls", "Calls", 80, None), ("gpu_ms", "GPU ms", 110, MS),
             ("cpu_ms", "CPU ms", 110, MS), ("gpu_pct", "% GPU", 80, PCT),
             ("tc", "TC eligible / using", 160, None)],
            WIDTH, 200, view,
        )  # fmt: skip

    def _ops_and_kernels(self) -> None:
        self.ops_src = ColumnDataSource(
            {k: [] for k in ("op", "op_name", "op_type", "calls", "gpu_ms", "cpu_ms", "tc")}
        )
        self.ops_filter, view = filter_box(self.ops_src, ["op_name", "op_type"], "ops", 300)
        self.ops_table = _table(
            self.ops_src,
            [("op_name", "Op", 170, None), ("op_type", "Type", 80, None),
             ("calls", "Calls", 50, None), ("gpu_ms", "GPU ms", 65, MS),
             ("cpu_ms", "CPU ms", 65, MS), ("tc", "TC elig./using", 90, TC_TEXT)],
            550, 260, view,
        )  # fmt: skip
        self.op_kernel_src = ColumnDataSource(
            {k: [] for k in ("kernel", "op", "name", "long", "calls", "gpu_ms", "avg_us", "tc")}
        )
        self.kernels_title = Div(text="<b>Kernels of the picked op</b>: pick an op", width=370)
        self.op_kernel_filter, view = filter_box(self.op_kernel_src, ["name", "long"], "kernels",
                                                 300)  # fmt: skip
        self.op_kernel_table = _table(
            self.op_kernel_src,
            [("name", "Kernel", 170, LONG_NAME), ("calls", "Calls", 45, None),
             ("gpu_ms", "GPU ms", 60, MS), ("avg_us", "Avg µs", 55, MS), ("tc", "TC", 30, None)],
            375, 240, view,
        )  # fmt: skip

    def _kernels_by_iteration(self) -> None:
        cols = ["iteration", "kernels", *[f"{c}_ms" for c in KERNEL_BY_ITER]]
        self.kbi_src = ColumnDataSource({c: [] for c in cols})
        self.kernel_iter_src = ColumnDataSource({"iteration": [], "gpu_ms": [], "calls": []})
        f = figure(
            height=240, width=WIDTH,
            title="Kernels by Iteration (GPU ms; selected range shaded; pick a kernel)",
            tools="xpan,xwheel_zoom,reset,save" if self.interactive else "save",
            x_axis_label="iteration", y_axis_label="GPU ms",
        )  # fmt: skip
        bars = f.vbar_stack(
            [f"{c}_ms" for c in KERNEL_BY_ITER], x="iteration", width=0.85, source=self.kbi_src,
            color=[CATEGORY_COLORS[c] for c in KERNEL_BY_ITER],
            legend_label=[KERNEL_BY_ITER_LABELS[c] for c in KERNEL_BY_ITER],
        )  # fmt: skip
        k = f.scatter("iteration", "gpu_ms", source=self.kernel_iter_src, size=6,
                      color="#d62728", legend_label="picked kernel")  # fmt: skip
        f.line("iteration", "gpu_ms", source=self.kernel_iter_src, color="#d62728")
        f.add_tools(
            HoverTool(renderers=bars[:1],
                      tooltips=[("iteration", "@iteration"), ("kernels", "@kernels")]
                      + [(KERNEL_BY_ITER_LABELS[c], f"@{c}_ms{{0.000}} ms")
                         for c in KERNEL_BY_ITER]),
            HoverTool(renderers=[k], tooltips=[("iteration", "@iteration"), ("calls", "@calls"),
                                               ("picked kernel", "@gpu_ms{0.000} ms")]),
        )  # fmt: skip
        f.legend.orientation = "horizontal"
        f.legend.label_text_font_size = "9pt"
        f.add_layout(f.legend[0], "above")
        self.kbi_box = _range_box()
        f.add_layout(self.kbi_box)
        self.kbi_fig = f

    def _iterations_by_op(self) -> None:
        self.ibo_src = ColumnDataSource({"iteration": [], "gpu_ms": [], "cpu_ms": [], "calls": []})
        f = figure(
            height=220, width=WIDTH, title="Iterations by Op: pick an op",
            tools="xpan,xwheel_zoom,reset,save" if self.interactive else "save",
            x_axis_label="iteration", y_axis_label="ms",
        )  # fmt: skip
        b = f.vbar(x="iteration", top="gpu_ms", width=0.85, source=self.ibo_src,
                   color="#1f77b4", legend_label="GPU ms")  # fmt: skip
        f.scatter("iteration", "cpu_ms", source=self.ibo_src, size=4, color="#ff7f0e",
                  legend_label="CPU ms")  # fmt: skip
        f.add_tools(HoverTool(renderers=[b], tooltips=[
            ("iteration", "@iteration"), ("calls", "@calls"), ("GPU", "@gpu_ms{0.000} ms"),
            ("CPU", "@cpu_ms{0.000} ms")]))  # fmt: skip
        f.legend.orientation = "horizontal"
        f.legend.label_text_font_size = "9pt"
        f.add_layout(f.legend[0], "above")
        self.ibo_box = _range_box()
        f.add_layout(self.ibo_box)
        self.ibo_fig = f

    # ---- updates ---------------------------------------------------------------------------
    def update(self, p: Analysis, lo: int, hi: int) -> None:
        """Show iterations lo..hi of ``p`` in every panel; the picked op and kernel stay
        picked (a new profile, e.g. another NVTX domain, clears them)."""
        new_profile = self._ops_of is not p
        if new_profile:
            self.op = self.kernel = None
        self.p, self.lo, self.hi = p, lo, hi
        self._busy = True
        try:
            if new_profile:
                self._set_profile(p)
            self._update_pie(pdata.resource_usage(p, lo, hi))
            self._update_kernel_pie(pdata.kernel_gpu_time(p, lo, hi))
            self._update_gpus(pdata.gpus(p, lo, hi))
            ops = pdata.ops(p, lo, hi)
            top = pdata.top_ops(p, lo, hi, all_ops=ops)
            self._update_top(top)
            self._update_types(pdata.op_types(p, lo, hi))
            self._update_ops(ops)
            if self.op is None and len(top):  # nothing picked: follow the top op
                self._show_op(int(top["op"].iloc[0]), picked=False)
            else:
                self._show_op(self.op, picked=self.op is not None)
            key = (id(p), p.key_node)
            if self._kbi_key != key:
                self._kbi_key = key
                last = max(p.iterations.count - 1, 0)
                self.kbi_src.data = _ms(pdata.kernels_by_iteration(p, 0, last), KERNEL_BY_ITER)
            for box in (self.kbi_box, self.ibo_box):
                box.left, box.right = lo - 0.5, hi + 0.5
        finally:
            self._busy = False

    def _set_profile(self, p: Analysis) -> None:
        """What does not change with the range: System Config, the GPUs, the ops' names."""
        self._ops_of = p
        self._kbi_key = self._ibo_key = self._kernel_key = ()
        cfg = pdata.system_config_rows(p)
        rows = "".join(
            f"<tr><td style='color:#555;padding-right:10px'>{html.escape(s)}</td>"
            f"<td>{html.escape(v)}</td></tr>"
            for s, v in zip(cfg["Setting"], cfg["Value"], strict=True)
        )
        self.config_div.text = (
            "<b>System Config</b><table class='jlprof-system-config' "
            f"style='font-size:12px;margin-top:4px'>{rows}</table>"
        )
        # rows by GPU time over every iteration (fixed for the profile; headers sort anew)
        o = pdata.ops(p, 0, max(p.iterations.count - 1, 0))
        self._ops_order = np.lexsort((o["op"].to_numpy(), -o["gpu_ns"].to_numpy()))
        o = o.iloc[self._ops_order]
        self.ops_src.data = {
            "op": o["op"].to_numpy(np.int64),
            "op_name": o["op_name"].map(short).to_numpy(object),
            "op_type": o["op_type"].to_numpy(object),
            **self._op_numbers(o),
        }
        self.ops_src.selected.indices = []

    def _update_pie(self, pie: pd.DataFrame) -> None:
        self.pie_src.data = {
            "label": [
                f"{lbl} ({v:.1f} %)" for lbl, v in zip(pie["label"], pie["pct"], strict=True)
            ],
            "pct": pie["pct"].to_numpy(float),
            "start_angle": pie["start_angle"].to_numpy(float),
            "end_angle": pie["end_angle"].to_numpy(float),
            "color": [CATEGORY_COLORS[c] for c in pie["category"]],
        }

    def _update_kernel_pie(self, pie: pd.DataFrame) -> None:
        self.kernel_pie_src.data = {
            "label": [
                f"{lbl} ({v:.1f} %)" for lbl, v in zip(pie["label"], pie["pct"], strict=True)
            ],
            "pct": pie["pct"].to_numpy(float),
            "gpu_ms": pie["gpu_ns"].to_numpy(np.int64) / 1e6,
            "start_angle": pie["start_angle"].to_numpy(float),
            "end_angle": pie["end_angle"].to_numpy(float),
            "color": [CATEGORY_COLORS[c] for c in pie["category"]],
        }

    def _update_gpus(self, g: pd.DataFrame) -> None:
        labels = [short(x, 28) for x in g["gpu"]]
        self.gpu_src.data = {
            "gpu": labels,
            "gpu_util_pct": g["gpu_util_pct"].to_numpy(float),
            **{f"{c}_pct": g[f"{c}_pct"].to_numpy(float) for c in GPU_CATEGORIES},
        }
        factors = labels[::-1] or ["(no GPU)"]
        if list(self.gpu_range.factors) != factors:
            self.gpu_range.factors = factors
            self.gpu_fig.height = max(160, 80 + 34 * len(labels))

    def _update_top(self, top: pd.DataFrame) -> None:
        t = top.iloc[::-1]  # the largest on top
        labels = distinct_labels(t["op_name"].map(lambda s: short(s, 32)).tolist())
        self.top_src.data = {
            "op": t["op"].to_numpy(np.int64),
            "label": labels,
            "op_name": t["op_name"].to_numpy(object),
            "op_type": t["op_type"].to_numpy(object),
            "gpu_ms": t["gpu_ns"].to_numpy(np.int64) / 1e6,
            "gpu_pct": t["gpu_pct"].to_numpy(float),
            "calls": t["calls"].to_numpy(np.int64),
        }
        self.top_range.factors = labels or ["(no ops in the selected iterations)"]
        self.top_src.selected.indices = []
        yn = np.array(["no", "yes"], dtype=object)
        self.top_table_src.data = {
            "op": top["op"].to_numpy(np.int64),
            "top_op_name": top["op_name"].to_numpy(object),
            "top_op_type": top["op_type"].to_numpy(object),
            "calls": top["calls"].to_numpy(np.int64),
            "gpu_ms": top["gpu_ns"].to_numpy(np.int64) / 1e6,
            "gpu_pct": top["gpu_pct"].to_numpy(float),
            "cpu_ms": top["cpu_ns"].to_numpy(np.int64) / 1e6,
            "eligible": yn[top["tc_eligible"].to_numpy(bool).astype(int)],
            "using": yn[top["using_tc"].to_numpy(bool).astype(int)],
        }
        self.top_table_src.selected.indices = []
        _redraw(self.top_table)

    def _update_types(self, t: pd.DataFrame) -> None:
        rows = len(self.type_src.data["op_type"])
        self.type_src.data = {
            "op_type": t["op_type"].to_numpy(object),
            "nodes": t["nodes"].to_numpy(np.int64),
            "calls": t["calls"].to_numpy(np.int64),
            "gpu_ms": t["gpu_ns"].to_numpy(np.int64) / 1e6,
            "cpu_ms": t["cpu_ns"].to_numpy(np.int64) / 1e6,
            "gpu_pct": t["gpu_pct"].to_numpy(float),
            "tc": _tc(t["tc_eligible"].to_numpy(bool), t["using_tc"].to_numpy(bool)),
        }
        if len(t) == rows:
            _redraw(self.type_table)

    def _update_ops(self, o: pd.DataFrame) -> None:
        """Only the number columns: the rows are the profile's ops, their names sent once."""
        self.ops_src.data.update(self._op_numbers(o.iloc[self._ops_order]))
        _redraw(self.ops_table)

    @staticmethod
    def _op_numbers(o: pd.DataFrame) -> dict[str, np.ndarray]:
        return {
            "calls": o["calls"].to_numpy(np.int64),
            "gpu_ms": o["gpu_ns"].to_numpy(np.int64) / 1e6,
            "cpu_ms": o["cpu_ns"].to_numpy(np.int64) / 1e6,
            "tc": _tc_code(o["tc_eligible"].to_numpy(bool), o["using_tc"].to_numpy(bool)),
        }

    # ---- drill-down ------------------------------------------------------------------------
    def pick_op(self, op: int | None) -> None:
        """Drill down into op ``op`` (a row of the engine's op table; None: none picked)."""
        with self.batch():
            self.op = op
            self.kernel = None
            if self.p is not None:
                self._show_op(op, picked=op is not None)
            ops = None
            if op is not None and self.p is not None:
                ops = {str(self.p.correlated.ops["op_id"].iloc[op])}
            self.on_op(ops)

    def pick_kernel(self, row: int | None) -> None:
        """Draw the iterations of the picked op's kernel in row ``row`` of its kernel table."""
        with self.batch():
            d = self.op_kernel_src.data
            if row is None or row >= len(d["kernel"]):
                self.kernel = None
            else:
                self.kernel = (int(d["kernel"][row]), int(d["op"][row]))
            self._show_kernel()

    def _show_op(self, op: int | None, picked: bool) -> None:
        p, lo, hi = self.p, self.lo, self.hi
        assert p is not None
        if op is None:
            self.kernels_title.text = "<b>Kernels of the picked op</b>: pick an op"
            _clear(self.op_kernel_src)
            _clear(self.ibo_src)
            self._ibo_key = ()
            self.ibo_fig.title.text = "Iterations by Op: pick an op"
            self.kernel = None
            self._show_kernel()
            return
        name = str(p.correlated.ops["op_name"].iloc[op])
        k = pdata.op_kernels(p, lo, hi, op)
        rows = len(self.op_kernel_src.data["kernel"])
        self.op_kernel_src.data = {
            "kernel": k["kernel"].to_numpy(np.int64),
            "op": np.full(len(k), op, np.int64),
            "name": k["Kernel Name"].astype(str).to_numpy(object),
            "long": k["Long Kernel Name"].astype(str).to_numpy(object),
            "calls": k["Calls"].to_numpy(np.int64),
            "gpu_ms": k["Total GPU Time (ns)"].to_numpy(np.int64) / 1e6,
            "avg_us": k["Avg. GPU Time (ns)"].to_numpy(float) / 1e3,
            "tc": np.where(k["Uses TC"].to_numpy(bool), "yes", "no"),
        }
        if len(k) == rows:
            _redraw(self.op_kernel_table)
        how = "picked" if picked else "top op"
        self.kernels_title.text = (
            f"<b>Kernels of</b> <code>{html.escape(short(name, 40))}</code> ({how}): "
            f"{len(k)} kernel(s)"
        )
        key = (id(p), p.key_node, op)
        if self._ibo_key != key:  # every iteration: drawn again for another op or key node
            self._ibo_key = key
            ibo = pdata.iterations_by_op(p, 0, max(p.iterations.count - 1, 0), op)
            self.ibo_src.data = {
                "iteration": ibo["iteration"].to_numpy(np.int64),
                "gpu_ms": ibo["gpu_ns"].to_numpy(np.int64) / 1e6,
                "cpu_ms": ibo["cpu_ns"].to_numpy(np.int64) / 1e6,
                "calls": ibo["calls"].to_numpy(np.int64),
            }
        self.ibo_fig.title.text = f"Iterations by Op: {short(name, 80)} ({how})"
        if self.kernel is not None and self.kernel[1] != op:
            self.kernel = None
        self._show_kernel()

    def _show_kernel(self) -> None:
        p = self.p
        if self.kernel is None or p is None:
            self._kernel_key = ()
            _clear(self.kernel_iter_src)
            self.kbi_fig.title.text = (
                "Kernels by Iteration (GPU ms; selected range shaded; pick a kernel)"
            )
            return
        kernel, op = self.kernel
        key = (id(p), p.key_node, kernel, op)
        if self._kernel_key != key:
            self._kernel_key = key
            last = max(p.iterations.count - 1, 0)
            ki = pdata.kernel_iterations(p, 0, last, kernel, op)
            self.kernel_iter_src.data = {
                "iteration": ki["iteration"].to_numpy(np.int64),
                "gpu_ms": ki["gpu_ns"].to_numpy(np.int64) / 1e6,
                "calls": ki["calls"].to_numpy(np.int64),
            }
        name = str(p.kernel_flags["short_name"].iloc[kernel])
        self.kbi_fig.title.text = f"Kernels by Iteration — picked kernel (red): {short(name, 80)}"

    # ---- selection events (from the page) ----------------------------------------------------
    def _on_op_row(self, _attr: str, _old: Any, new: list[int]) -> None:
        if self._busy:
            return
        ops = self.ops_src.data["op"]
        self.pick_op(int(ops[new[0]]) if new else None)

    def _on_top_bar(self, _attr: str, _old: Any, new: list[int]) -> None:
        if self._busy or not new:
            return
        self.pick_op(int(self.top_src.data["op"][new[0]]))

    def _on_top_row(self, _attr: str, _old: Any, new: list[int]) -> None:
        if self._busy or not new:
            return
        self.pick_op(int(self.top_table_src.data["op"][new[0]]))

    def _on_kernel_row(self, _attr: str, _old: Any, new: list[int]) -> None:
        if self._busy:
            return
        self.pick_kernel(new[0] if new else None)


def _range_box() -> BoxAnnotation:
    """The selected iterations, shaded as in the iteration timeline (on the overlay layer:
    moving it repaints no bar)."""
    return BoxAnnotation(fill_color="#ffd54f", fill_alpha=0.25, line_color=None, level="overlay")


def _clear(src: ColumnDataSource) -> None:
    """Empty ``src``, sending nothing when it is empty already: setting the same empty data
    again still goes to the page, which repaints the figure (Kernels by Iteration: ~4,600
    bars at 1M kernels) on every range change while no kernel is picked."""
    if any(len(v) for v in src.data.values()):
        src.data = {k: [] for k in src.data}


def _ms(frame: pd.DataFrame, cats: tuple[str, ...]) -> dict[str, Any]:
    d: dict[str, Any] = {
        "iteration": frame["iteration"].to_numpy(np.int64),
        "kernels": frame["kernels"].to_numpy(np.int64),
    }
    for c in cats:
        d[f"{c}_ms"] = frame[f"{c}_ns"].to_numpy(np.int64) / 1e6
    return d


def _tc_code(eligible: np.ndarray, using: np.ndarray) -> np.ndarray:
    """The two TC flags as one number (``TC_TEXT`` shows it): a range change sends numbers."""
    return eligible.astype(np.int8) + 2 * using.astype(np.int8)


def _tc(eligible: np.ndarray, using: np.ndarray) -> np.ndarray:
    """``eligible / using`` as yes/no, the DLProf Viewer's two TC columns in one."""
    yn = np.array(["no", "yes"], dtype=object)
    return yn[eligible.astype(int)] + " / " + yn[using.astype(int)]
