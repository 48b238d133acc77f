"""The profiled sidecar kernel (``process``) and the capture control that runs inside it
(``capture``, standard library + ``nvtx`` only)."""

from __future__ import annotations

from jlprof.sidecar.process import ExecResult, NsysTooOld, Sidecar, SidecarDied, cuda_usable

__all__ = ["ExecResult", "NsysTooOld", "Sidecar", "SidecarDied", "cuda_usable"]
