"""An op call's *Parameters* (the iteration report's column, guide §10.4: "the parameter values
of the op calling this kernel"): its arguments as its marker records them, in call order.

* pyprof / DLProf-plugin dict markers (``args``): a tensor as ``<dtype>[<shape>]``, any other
  argument as its value, a keyword argument as ``name=value``:
  ``float32[1,128,16,16], float32[144,128,7,7], float32[144], (1, 1), (3, 3), (1, 1), 1``
* emit_nvtx ``sizes = [[64], [8, 128], []]`` and ``jlprof.torch`` input shapes, which record
  each argument's shape only (``[]``: a scalar or None): ``[64], [8,128], []``
* TensorFlow detailed markers (``attrs``): ``T=half, transpose_a=false``

No marker records an op's outputs, so *Output Shapes* stays blank (docs/reports.md). These are
the one place that turns recorded arguments into text: a report that shows an op call's
parameters (the iteration report; a PyProf-style ``prof`` table) calls them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SEP = ", "


def _shape(shape: Any) -> str:
    try:
        return "[" + ",".join(str(int(d)) for d in shape) + "]"
    except (TypeError, ValueError):
        return str(shape)


def pyprof_parameters(args: Any) -> str:
    """The ``args`` list of a pyprof / DLProf-plugin op marker as Parameters text."""
    out = []
    for a in args if isinstance(args, list) else []:
        if not isinstance(a, dict):
            continue
        if a.get("type") in ("tensor", "ndarray") and "shape" in a:
            value = f"{a.get('dtype', '')}{_shape(a['shape'])}"
        elif "value" in a:
            value = str(a["value"])
        else:
            value = str(a.get("type", ""))
        name = str(a.get("name") or "")
        out.append(f"{name}={value}" if name else value)
    return SEP.join(out)


def shapes_parameters(shapes: str) -> str:
    """A recorded shape list (``[[64],[8,128],[]]``, spaces or not) as Parameters text."""
    s = "".join(str(shapes).split())
    if len(s) < 2 or not (s.startswith("[") and s.endswith("]")):
        return s
    inner = s[1:-1]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    if inner:
        parts.append(inner[start:])
    return SEP.join(parts)


def attrs_parameters(attrs: Any) -> str:
    """A TensorFlow detailed marker's ``attrs`` as ``key=value`` Parameters text."""
    if not isinstance(attrs, Mapping):
        return ""
    return SEP.join(f"{k}={v}" for k, v in attrs.items())


__all__ = ["attrs_parameters", "pyprof_parameters", "shapes_parameters"]
