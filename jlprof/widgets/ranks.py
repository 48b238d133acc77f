"""``RanksDashboard``: a job's rank × iteration heatmap, linked to each rank's own dashboard.

The heatmap colours each cell by the rank's compute time in that iteration over the median
rank's (1.0 = typical; a straggler's row stands out). Clicking cells (or box-selecting them) in
one rank's row opens that rank's :class:`~jlprof.widgets.dashboard.Dashboard` below, on the
picked iteration range; the rank's file is read then, in this process (only the clicked rank).
Below the heatmap: the per-rank summary table (the ``ranks`` report).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Protocol

import ipywidgets as w
import numpy as np
import pandas as pd
from bokeh.models import ColumnDataSource, HoverTool, LinearColorMapper
from bokeh.palettes import RdYlBu11
from bokeh.plotting import figure

from jlprof.errors import JlprofError
from jlprof.widgets.bokeh_comm import BatchedBokehModel
from jlprof.widgets.dashboard import Dashboard, ensure_bokehjs


class RankSet(Protocol):
    """What the view needs of :class:`jlprof.distributed.RankSet` (a layer above widgets)."""

    def report(self, name: str = "ranks") -> pd.DataFrame: ...
    def path(self, rank: int) -> Path: ...
    def profile(self, rank: int) -> Any: ...


def heatmap_data(ranks: RankSet) -> dict[str, np.ndarray]:
    """One cell per (rank, iteration): figures in ms and compute time / the iteration's
    median across ranks."""
    t = ranks.report("rank_iterations")
    comp = t["Compute Time (ns)"].to_numpy(np.float64)
    it = t["Iteration"].to_numpy(np.int64)
    med = t.groupby("Iteration")["Compute Time (ns)"].transform("median").to_numpy(np.float64)
    ratio = np.divide(comp, med, out=np.ones_like(comp), where=med > 0)
    return {
        "rank": t["Rank"].to_numpy(np.int64),
        "iteration": it,
        "ratio": ratio.round(3),
        "compute_ms": (comp / 1e6).round(3),
        "iter_ms": (t["Iteration Time (ns)"].to_numpy(np.float64) / 1e6).round(3),
        "exposed_ms": (t["Exposed Communication Time (ns)"].to_numpy(np.float64) / 1e6).round(3),
        "outlier": t["Outlier"].to_numpy(bool),
    }


class RanksDashboard(w.VBox):
    """Heatmap + per-rank table; :meth:`select` (or a click) opens one rank's dashboard."""

    def __init__(self, ranks: RankSet) -> None:
        ensure_bokehjs()
        self.ranks = ranks
        self.src = ColumnDataSource(heatmap_data(ranks))
        ids = ranks.report("ranks")["Rank"]
        lo, hi = (int(ids.min()), int(ids.max())) if len(ids) else (0, 0)
        n_it = int(self.src.data["iteration"].max()) + 1 if len(self.src.data["rank"]) else 1
        fig = figure(
            title="Compute time per iteration / median rank's (click a rank's cells to open it)",
            x_axis_label="Iteration",
            y_axis_label="Rank",
            x_range=(-0.5, n_it - 0.5),
            y_range=(hi + 0.5, lo - 0.5),
            height=min(120 + 14 * (hi - lo + 1), 700),
            sizing_mode="stretch_width",
            tools="tap,box_select,reset",
        )
        cmap = LinearColorMapper(palette=list(reversed(RdYlBu11)), low=0.5, high=1.5)
        fig.rect("iteration", "rank", 1, 1, source=self.src, line_color=None,
                 fill_color={"field": "ratio", "transform": cmap})  # fmt: skip
        fig.add_tools(
            HoverTool(
                tooltips=[
                    ("rank", "@rank"),
                    ("iteration", "@iteration"),
                    ("× median", "@ratio"),
                    ("compute ms", "@compute_ms"),
                    ("iteration ms", "@iter_ms"),
                    ("exposed comm ms", "@exposed_ms"),
                ]
            )
        )
        self.src.selected.on_change("indices", self._on_pick)
        self.status = w.HTML()
        self.table = w.HTML(self._table_html())
        self.rank_view = w.VBox()
        self.dashboard: Dashboard | None = None
        self._profiles: dict[int, Any] = {}
        self.bokeh = BatchedBokehModel(fig)
        super().__init__([self.bokeh, self.status, self.table, self.rank_view])
        self.add_class("jlprof-ranks")

    def _table_html(self) -> str:
        t = self.ranks.report("ranks").drop(columns=["Key Node"])
        styled = t.to_html(index=False, border=0, escape=True)
        return f"<div style='max-height:320px;overflow:auto'>{styled}</div>"

    def select(self, rank: int, start: int, stop: int) -> Dashboard:
        """Open ``rank``'s dashboard on iterations ``start..stop`` (its file is read once)."""
        prof = self._profiles.get(rank)
        if prof is None:
            self._profiles.clear()  # one rank's profile in memory at a time
            prof = self._profiles[rank] = self.ranks.profile(rank)
        prof.set_range(start, min(stop, prof.iterations.count - 1))
        self.dashboard = Dashboard(prof)
        self.rank_view.children = [self.dashboard]
        self.status.value = (
            f"rank {rank} ({html.escape(str(self.ranks.path(rank)))}), iterations "
            f"{prof.iter_start}..{prof.iter_stop}"
        )
        return self.dashboard

    def _on_pick(self, _attr: str, _old: Any, new: list[int]) -> None:
        if not new:
            return
        d = self.src.data
        rank = int(d["rank"][new[0]])
        its = [int(d["iteration"][i]) for i in new if int(d["rank"][i]) == rank]
        try:
            self.select(rank, min(its), max(its))
        except JlprofError as exc:
            self.status.value = f"<span style='color:#b00'>{html.escape(str(exc))}</span>"
