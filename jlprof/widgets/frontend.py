"""Where the widgets run: inside a Jupyter kernel or not (no Bokeh/ipywidgets imports)."""

from __future__ import annotations


def in_kernel() -> bool:
    """True inside a Jupyter kernel (a front end that can render widgets may be attached)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython calls us, so it is there
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None
