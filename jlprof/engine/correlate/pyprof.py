"""PyProf / DLProf-plugin range texts (``pyprof.nvtx`` and ``nvidia_dlprof_pytorch_nvtx``).

Both monkey-patch ``torch.*``, ``torch.Tensor.*`` and ``torch.nn.functional.*`` and push, per
call, up to three nested ranges whose text is a Python dict's ``str()``::

    {'traceMarker': ['train.py:41', ...], 'funcStack': '/Net/forward/conv1/conv2d'}   # call site
      {'mod': 'Conv2d', 'strRepr': '3, 64, kernel_size=(3, 3)'}                     # nn module
        {'mod': 'torch.nn.functional', 'op': 'conv2d', 'args': [
            {'name': '', 'type': 'tensor', 'shape': (8, 3, 32, 32), 'dtype': 'float32'}, ...]}

``funcStack`` (DLProf's plugin; absent from plain pyprof) is the module path of the call; the
innermost (*op*) range does the work. ``{"model_config": {...}}`` ranges (JSON) carry
settings. Texts are decoded with ``ast.literal_eval`` once per distinct text; a text cut short
by the NVTX length limit falls back to a pattern for ``mod``/``op``.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from jlprof.engine.correlate.params import pyprof_parameters

_KEY = re.compile(r"""['"](mod|op|funcStack)['"]\s*:\s*['"]([^'"]*)['"]""")
_DUNDER = re.compile(r"^__(\w+?)__$")


@dataclass(frozen=True)
class PyProf:
    """One parsed marker. ``kind``: ``op``, ``module``, ``trace`` or ``config``."""

    kind: str
    name: str
    op_type: str = ""
    func_stack: str = ""
    data_type: str = ""
    input_shapes: str = ""
    stack_trace: str = ""
    parameters: str = ""  # every argument as recorded (jlprof.engine.correlate.params)


def _decode(text: str) -> dict[str, Any] | None:
    try:
        obj = json.loads(text) if text.startswith('{"') else ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        found = dict(m.groups() for m in _KEY.finditer(text))
        return found or None
    return obj if isinstance(obj, dict) else None


def _tensors(args: Any) -> tuple[str, str]:
    """(data type of the first tensor, shapes of the tensor arguments) from ``args``."""
    shapes, dtype = [], ""
    for a in args if isinstance(args, list) else []:
        if isinstance(a, dict) and a.get("type") in ("tensor", "ndarray") and "shape" in a:
            shapes.append("[" + ",".join(str(int(d)) for d in a["shape"]) + "]")
            dtype = dtype or str(a.get("dtype", ""))
    return dtype, ("[" + ",".join(shapes) + "]") if shapes else ""


def _site(frames: list[str]) -> str:
    """The call site of a trace marker: the innermost frame outside site-packages (the user's
    line that called into torch; frames run outermost first), as file:line."""
    user = [f for f in frames if "site-packages" not in f and "dist-packages" not in f]
    frame = (user or frames or [""])[-1]
    path, _, line = frame.rpartition(":")
    return f"{PurePosixPath(path).name}:{line}" if path else frame


def parse(text: str) -> PyProf | None:
    """The fields of a pyprof / DLProf-plugin marker, or None when ``text`` is not one."""
    if not text.startswith("{"):
        return None
    d = _decode(text)
    if not d:
        return None
    if "model_config" in d:
        return PyProf("config", "model_config", "model_config")
    stack = d.get("funcStack") if isinstance(d.get("funcStack"), str) else ""
    if "traceMarker" in d:
        frames = [str(f) for f in d["traceMarker"]] if isinstance(d["traceMarker"], list) else []
        name = stack or _site(frames) or "traceMarker"
        return PyProf("trace", name, "traceMarker", stack, stack_trace=";".join(frames))
    mod = str(d.get("mod", ""))
    if "op" in d:
        op = str(d["op"])
        m = _DUNDER.match(op)
        dtype, shapes = _tensors(d.get("args"))
        name = f"{mod}.{op}" if mod else op
        return PyProf(
            "op", name, m.group(1) if m else op, stack, dtype, shapes,
            parameters=pyprof_parameters(d.get("args")),
        )  # fmt: skip
    if mod:
        return PyProf("module", mod, mod)
    return None
