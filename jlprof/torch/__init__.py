"""PyTorch annotation for jlprof: one call replaces ``nvidia_dlprof_pytorch_nvtx`` + ``emit_nvtx``.

    import jlprof.torch
    jlprof.torch.init()              # from here on every op is an NVTX range
    # or, scoped:
    with jlprof.torch.init():
        train()

Ops are named by the module call hierarchy (``/Net/layer1/conv1/convolution``, ``(2)`` for
repeated calls, guide §11.1), carry their aten op type, direction (``fprop``/``bprop``: backward
ops take their forward op's name), data type and input shapes; ``optimizer.step()`` is the range
``optimizer_step`` (jlprof's default key node) and DataLoader fetches are ``dataloader``. Facts
the trace cannot show (AMP, cudnn.benchmark, batch size, peak memory) travel as ``jlprof:`` NVTX
marks. The message format is in ``docs/pytorch.md``. Works on CPU and CUDA builds alike.

Importing this module does not import torch; :func:`init` does.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

from jlprof.errors import JlprofError, TorchUnavailable

_lock = threading.Lock()
_annotator: Any = None


class _Handle:
    """What :func:`init` returns: usable as a context manager that ends the annotation."""

    def __enter__(self) -> _Handle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        shutdown()

    @property
    def enabled(self) -> bool:
        return enabled()


def init(*, stack_trace: bool = False) -> _Handle:
    """Start annotating PyTorch ops on this thread; a second call changes nothing.

    ``stack_trace`` adds the innermost user frames to each op's text (the detail report's
    Stack Trace column); it is taken once per unique op text, so it costs little after warm-up.
    """
    global _annotator
    with _lock:
        if _annotator is not None and _annotator.active:
            return _Handle()
        try:
            import torch  # noqa: F401
        except ImportError as e:
            raise TorchUnavailable(
                "jlprof.torch.init() needs PyTorch: pip install torch (or 'jlprof[torch]')"
            ) from e
        from jlprof.torch.annotator import Annotator

        ann = Annotator(stack_trace=stack_trace)
        ann.enable()
        _annotator = ann
    return _Handle()


def shutdown() -> None:
    """Stop annotating and restore everything :func:`init` patched (safe to call twice)."""
    global _annotator
    with _lock:
        if _annotator is not None:
            _annotator.disable()
        _annotator = None


def enabled() -> bool:
    return _annotator is not None and _annotator.active


def mark(**facts: Any) -> None:
    """Record extra facts for the expert systems, e.g. ``mark(batch_size=64)``.

    They travel as a ``jlprof:`` NVTX mark (``{"event": "user", ...}``) and so are in the saved
    profile; a ``batch_size`` here wins over the one guessed from the model's input.
    """
    if _annotator is None:
        raise JlprofError("jlprof.torch.mark() needs jlprof.torch.init() first")
    from jlprof.torch import format as fmt

    _annotator.nvtx.mark(fmt.mark_text({"event": "user", **facts}))


__all__ = ["TorchUnavailable", "enabled", "init", "mark", "shutdown"]
