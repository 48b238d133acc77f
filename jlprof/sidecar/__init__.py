"""The profiled sidecar kernel (``process``) and the capture control that runs inside it
(``capture``, standard library + ``nvtx`` only).

Names are imported lazily: the sidecar process imports ``jlprof.sidecar.capture`` and must not
pay for (or depend on) jupyter_client, which only the notebook side uses.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ExecResult", "NsysTooOld", "Sidecar", "SidecarBusy", "SidecarDied", "cuda_usable"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from jlprof.sidecar import process

        return getattr(process, name)
    raise AttributeError(f"module 'jlprof.sidecar' has no attribute {name!r}")
