"""IPython magics: ``%%dlprof`` profiles a cell in a sidecar kernel under nsys (issue 3).

``dlprof`` holds the magic (thin), ``options`` the option checks, ``run`` the session and the
profiled run, ``progress`` the progress display.
"""

from __future__ import annotations

from typing import Any


def register(ipython: Any) -> None:
    """Register ``%%dlprof``/``%dlprof`` with ``ipython`` (IPython imported only here)."""
    from jlprof.magics.dlprof import register as _register

    _register(ipython)
