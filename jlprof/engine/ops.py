"""From an NVTX range text to DLProf's op identity: Op Name, Op Type, Direction, Op ID.

Parsing runs once per *unique* text (a categorical's categories), never per range.

Formats understood, in order:

* pyprof / apex dict strings: ``{'mod': 'torch', 'op': 'conv2d', 'args': [...]}`` -> type ``conv2d``
* jlprof annotations (``jlprof.torch``): ``/model/conv1/conv2d [aten::conv2d|fprop|...]``
  (the bracket part is optional; see ``docs/annotation.md`` once issue 5 lands)
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

_REPEAT = re.compile(r"\(\d+\)$")
_PYPROF_OP = re.compile(r"""['"]op['"]\s*:\s*['"]([^'"]+)['"]""")
_ANNOT = re.compile(r"^(?P<name>.*?)\s*\[(?P<type>[^\]|]*)(?:\|(?P<dir>fprop|bprop))?[^\]]*\]\s*$")


def _parse_one(text: str) -> tuple[str, str, str, str]:
    """(op name, op type, direction, hierarchy path) for one range text."""
    name, op_type, direction = text, "", ""
    if text.startswith("{"):
        m = _PYPROF_OP.search(text)
        op_type = m.group(1) if m else "pyprof"
        return text, op_type, "", ""
    m = _ANNOT.match(text)
    if m:
        name = m.group("name")
        op_type = m.group("type").removeprefix("aten::")
        direction = m.group("dir") or ""
    path = ""
    if name.startswith("/") and len(name) > 1:
        path = "/" + "/".join(p for p in name.split("/") if p)
    if not op_type:
        last = name.rstrip("/").rsplit("/", 1)[-1] or name
        op_type = _REPEAT.sub("", last)
    return name, op_type, direction, path


def parse_texts(texts: pd.Index | np.ndarray | list[str]) -> pd.DataFrame:
    """Parse unique range texts into op_name, op_type, direction, op_id and abs_path columns.

    ``abs_path`` is the hierarchy path for ``/``-scoped names ('' when the name is relative,
    in which case the NVTX nesting gives the hierarchy).
    """
    rows = [_parse_one(str(t)) for t in texts]
    df = pd.DataFrame(rows, columns=["op_name", "op_type", "direction", "abs_path"])
    df["op_id"] = np.where(
        df["direction"] != "", df["op_name"] + ":" + df["direction"], df["op_name"]
    )
    return df


def unassociated_name(name: str) -> str:
    """Guide §8.3: work outside every NVTX range becomes op ``unassociated_<name>``."""
    return f"unassociated_{name}"
