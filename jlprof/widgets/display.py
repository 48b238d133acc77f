"""How a displayed ``Profile`` shows up: the dashboard in a kernel, text elsewhere.

Kept free of Bokeh/ipywidgets imports at module level so that a Profile still displays
(as text + HTML tables) where the 'notebook' extra is not installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jlprof.widgets.frontend import in_kernel

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis


def display_profile(p: Analysis) -> None:
    from IPython.display import display

    from jlprof.reports.html import profile_html

    if in_kernel():
        try:
            from jlprof.widgets.dashboard import Dashboard
        except ImportError:
            pass  # no bokeh / ipywidgets / jupyter_bokeh: the text view below
        else:
            display(Dashboard(p))
            return
    display({"text/plain": repr(p), "text/html": profile_html(p)}, raw=True)
