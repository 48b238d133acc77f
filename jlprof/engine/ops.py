"""From an NVTX range text to DLProf's op identity: Op Name, Op Type, Direction, Op ID.

Parsing runs once per *unique* text (a categorical's categories), never per range.

Formats understood, in order:

* pyprof / apex dict strings: ``{'mod': 'torch', 'op': 'conv2d', 'args': [...]}`` -> type ``conv2d``
* PyTorch ``emit_nvtx`` texts (``jlprof.engine.emit_nvtx``): ``aten::mul, seq = 45, op_id = 9``
  -> name ``aten::mul``, type ``mul``, fprop; backward nodes -> bprop (linked to their forward
  op by ``jlprof.engine.torch_ops``); ``sizes =`` -> input shapes
* jlprof annotations (``jlprof.torch``, format in ``docs/pytorch.md``):
  ``/Net/conv1/convolution [aten::convolution|fprop|float32|[[8,3,16,16],[4,3,3,3],[4]]]``
  -> type ``convolution``, direction, data type, input shapes, optional ``bwd=``/``stack=``
* ``/``-scoped names (TensorFlow, DLProf PyTorch): ``/a/b(2)/conv1d`` -> levels ``a, b(2), conv1d``,
  type ``conv1d`` (the ``(N)`` repeat suffix of guide §11.1 is dropped from the type)
* anything else: the text is the name and the type.

Op ID is the op name in simple mode; with a direction (PyTorch) it is ``name:direction``
so forward and backward of one op stay apart (guide §11.2-11.3).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from jlprof.engine import emit_nvtx

_REPEAT = re.compile(r"\(\d+\)$")
_PYPROF_OP = re.compile(r"""['"]op['"]\s*:\s*['"]([^'"]+)['"]""")
_DIRECTIONS = ("fprop", "bprop")
COLUMNS = [
    "op_name",
    "op_type",
    "direction",
    "abs_path",
    "data_type",
    "input_shapes",
    "stack_trace",
    "bwd_op",
]


def parse_annotation(text: str) -> dict[str, str] | None:
    """The fields of a ``jlprof.torch`` op text, or None when ``text`` is not one.

    ``name [type|direction|data type|input shapes(|key=value)*]``; the name ends at the first
    `` [`` (module and op names hold no spaces), shapes hold no ``|``, and ``stack=`` comes last
    so a stack trace may hold anything but a newline.
    """
    if not text.endswith("]"):
        return None
    i = text.find(" [")
    if i < 0:
        return None
    inner = text[i + 2 : -1]
    head, sep, stack = inner.partition("|stack=")
    fields = head.split("|")
    if len(fields) < 2 or fields[1] not in _DIRECTIONS:
        return None
    out = {
        "op_name": text[:i],
        "op_type": fields[0],
        "direction": fields[1],
        "data_type": fields[2] if len(fields) > 2 else "",
        "input_shapes": fields[3] if len(fields) > 3 else "",
        "stack_trace": stack if sep else "",
        "bwd_op": "",
    }
    for extra in fields[4:]:
        key, _, value = extra.partition("=")
        if key == "bwd":
            out["bwd_op"] = value
    return out


def _parse_one(text: str, e: emit_nvtx.EmitNvtx | None = None) -> tuple[str, ...]:
    """COLUMNS for one range text (``e``: its emit_nvtx parse, if it is one)."""
    name, op_type, direction = text, "", ""
    if text.startswith("{"):
        m = _PYPROF_OP.search(text)
        op_type = m.group(1) if m else "pyprof"
        return text, op_type, "", "", "", "", "", ""
    extra = ("", "", "", "")
    if e is not None:
        name = e.node or e.name
        return (name, e.op_type, "bprop" if e.node else "fprop", "", "", e.sizes, "", "")
    ann = parse_annotation(text)
    if ann is not None:
        name = ann["op_name"]
        op_type = ann["op_type"].removeprefix("aten::")
        direction = ann["direction"]
        extra = (ann["data_type"], ann["input_shapes"], ann["stack_trace"], ann["bwd_op"])
    path = ""
    if name.startswith("/") and len(name) > 1:
        path = "/" + "/".join(p for p in name.split("/") if p)
    if not op_type:
        last = name.rstrip("/").rsplit("/", 1)[-1] or name
        op_type = _REPEAT.sub("", last)
    return (name, op_type, direction, path, *extra)


def parse_texts(texts: pd.Index | np.ndarray | list[str]) -> pd.DataFrame:
    """Parse unique range texts into COLUMNS plus op_id.

    ``abs_path`` is the hierarchy path for ``/``-scoped names ('' when the name is relative,
    in which case the NVTX nesting gives the hierarchy). ``data_type``, ``input_shapes``,
    ``stack_trace`` and ``bwd_op`` come from ``jlprof.torch`` texts ('' otherwise).
    ``torch_op``, ``seq`` and ``bwd_node`` describe emit_nvtx texts (False, -1, False
    otherwise).
    """
    texts = [str(t) for t in texts]
    marks = [emit_nvtx.parse(t) for t in texts]
    rows = [_parse_one(t, m) for t, m in zip(texts, marks, strict=True)]
    df = pd.DataFrame(rows, columns=COLUMNS)
    # emit_nvtx: the range is a PyTorch op call (nesting merges), seq, backward node
    df["torch_op"] = np.array([m is not None for m in marks], dtype=bool)
    df["seq"] = np.array([m.seq if m else -1 for m in marks], dtype=np.int64)
    df["bwd_node"] = np.array([bool(m and m.node) for m in marks], dtype=bool)
    df["op_id"] = np.where(
        df["direction"] != "", df["op_name"] + ":" + df["direction"], df["op_name"]
    )
    return df


def unassociated_name(name: str) -> str:
    """Guide §8.3: work outside every NVTX range becomes op ``unassociated_<name>``."""
    return f"unassociated_{name}"
