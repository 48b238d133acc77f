"""How a displayed ``Profile`` shows up: the dashboard in a kernel, text elsewhere.

Kept free of Bokeh/ipywidgets imports at module level so that a Profile still displays
(as text + HTML tables) where the 'notebook' extra is not installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jlprof.engine.profile import Profile


def _in_kernel() -> bool:
    """True inside a Jupyter kernel (a front end that can render widgets may be attached)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython calls us, so it is there
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def display_profile(p: Profile) -> None:
    from IPython.display import display

    from jlprof.reports.html import profile_html

    if _in_kernel():
        try:
            from jlprof.widgets.dashboard import Dashboard
        except ImportError:
            pass  # no bokeh / ipywidgets / jupyter_bokeh: the text view below
        else:
            display(Dashboard(p))
            return
    display({"text/plain": repr(p), "text/html": profile_html(p)}, raw=True)
