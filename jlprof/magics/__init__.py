"""IPython magics (``%%dlprof``); see issue 3."""

from __future__ import annotations

from typing import Any


def register(ipython: Any) -> None:
    """Register the magics with ``ipython``."""
    raise NotImplementedError("the %%dlprof magic is not built yet (issue 3)")
