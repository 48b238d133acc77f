"""What a selection in the views means, shared by the notebook dashboard and ``jlprof view``.

Both hosts (:class:`~jlprof.widgets.dashboard.Dashboard`, an ipywidget, and
:class:`~jlprof.widgets.app.ViewerApp`, a Bokeh document) hold the same :class:`Views`; a box
select over iteration bars sets the range, a tap in the op tree sets the node.
"""

from __future__ import annotations

from typing import Any


class SelectionHandlers:
    """Bokeh ``on_change`` callbacks of the views' selections; the host provides ``views``,
    ``_busy`` (a change it is applying itself), ``_guard``, ``set_range`` and ``set_node``."""

    views: Any
    _busy: bool

    def _on_iter_select(self, _attr: str, _old: Any, new: list[int]) -> None:
        if self._busy or not new:
            return
        its = self.views.iter_src.data["iteration"]
        picked = [int(its[i]) for i in new]
        self._guard(self.set_range, min(picked), max(picked))  # type: ignore[attr-defined]

    def _on_tree_select(self, _attr: str, _old: Any, new: list[int]) -> None:
        if self._busy:
            return
        paths = self.views.tree_src.data["path"]
        self.set_node(str(paths[new[0]]) if new else None)  # type: ignore[attr-defined]
