"""The NVTX message format of ``jlprof.torch`` (documented in ``docs/pytorch.md``).

Kept free of any ``torch`` import: the engine's parser (``jlprof.engine.correlate.ops``) and the
tests use the same constants, so what the annotator writes is what the engine reads back.

Op range::

    <op name> [<op type>|<direction>|<data type>|<input shapes>(|<key>=<value>)*]

    /Net/conv1/convolution [aten::convolution|fprop|float32|[[8,3,16,16],[4,3,3,3],[4]]]
    /Net/conv1/convolution [aten::convolution|bprop|float32|[[8,3,16,16],[4,3,3,3],[4]]|bwd=...]

Metadata mark (instant event)::

    jlprof:{"event": "state", "amp": false, "cudnn_benchmark": false, ...}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MARK_PREFIX = "jlprof:"
FIELD_SEP = "|"
OPEN = " ["
#: optional trailing fields, in this order when present
KEYS = ("bwd", "stack")
MAX_SHAPES = 16  # inputs listed; more become a trailing "..." (foreach ops take 100s of tensors)
_BAD = str.maketrans({"|": "/", "]": ")", "[": "(", "\n": " "})


def shapes_text(shapes: Iterable[Sequence[int]]) -> str:
    """``[[8,3,16,16],[4]]``: compact, no spaces, a 0-d tensor is ``[]``."""
    parts = []
    for i, s in enumerate(shapes):
        if i == MAX_SHAPES:
            parts.append("...")
            break
        parts.append("[" + ",".join(str(int(d)) for d in s) + "]")
    return "[" + ",".join(parts) + "]"


def clean(value: str) -> str:
    """A field value never holds the separators ``|``, ``[`` or ``]`` (stack traces might)."""
    return value.translate(_BAD)


def op_text(
    name: str,
    op_type: str,
    direction: str,
    data_type: str = "",
    input_shapes: str = "",
    *,
    bwd: str = "",
    stack: str = "",
) -> str:
    """One op range's text. ``input_shapes`` is a :func:`shapes_text` string (or '')."""
    fields = [clean(op_type), direction, clean(data_type), input_shapes]
    if bwd:
        fields.append("bwd=" + clean(bwd))
    if stack:
        fields.append("stack=" + clean(stack))
    return f"{name}{OPEN}{FIELD_SEP.join(fields)}]"


def mark_text(payload: Mapping[str, Any]) -> str:
    """A metadata mark: ``jlprof:`` then compact JSON (one object, keys sorted)."""
    return MARK_PREFIX + json.dumps(dict(payload), sort_keys=True, separators=(",", ":"))
