"""PyTorch's ``torch.autograd.profiler.emit_nvtx`` range texts (``getNvtxStr`` in PyTorch).

Grammar, across versions (each suffix optional, in this order)::

    <name>[, seq = <N> | , stashed seq = <N>][, op_id = <N>][, sizes = [[d, ...], ...]]
          [, input_op_ids = [(<op id>,<output nr>), ...]]

    aten::mul, seq = 45328, op_id = 990726
    aten::addmm, seq = 12, sizes = [[64], [8, 128], [128, 64]]
    ConvolutionBackward0, stashed seq = 7          (PyTorch < 1.9: backward Function apply())
    autograd::engine::evaluate_function: ConvolutionBackward0

``seq`` is the autograd sequence number: a forward op's range carries the number the backward
node it creates will get, and that node's range (``<X>Backward<k>``, run inside
``autograd::engine::evaluate_function: <X>Backward<k>``) carries it again, which links a
backward node to its forward op (``jlprof.engine.correlate.torch_ops``). ``op_id`` is per call and
is dropped: op identity is the name. Plain names (no suffix) are not emit_nvtx texts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

_SUFFIXES = re.compile(
    r"^(?P<name>.+?)"
    r"(?:, ?(?P<stashed>stashed )?seq ?= ?(?P<seq>-?\d+))?"
    r"(?:, ?op_id ?= ?(?P<op_id>\d+))?"
    r"(?:, ?sizes ?= ?(?P<sizes>\[.*?\]))?"
    r"(?:, ?input_op_ids ?= ?(?P<inputs>\[.*\]))?$",
    re.S,
)
EVALUATE = "autograd::engine::evaluate_function: "
_BACKWARD_NODE = re.compile(r"^(?:[\w:]+::)?(?P<base>\w+?)Backward\d*$")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class EmitNvtx:
    """One parsed range text. ``seq`` is -1 when absent; ``node`` is the backward node's
    name (``ConvolutionBackward0``) for a backward range, else ''."""

    name: str
    seq: int = -1
    stashed: bool = False
    sizes: str = ""
    node: str = ""

    @property
    def is_call(self) -> bool:
        """An op call (nested calls merge into the outermost): a dispatcher op
        (``aten::mul``, ``FSDP::pre_forward``), an autograd Function (it has a ``seq``) or a
        backward node. A ``record_function`` range (``ProfilerStep#3``, ``my_block``) has none
        of these: it is a user range, a group around the calls."""
        return self.seq >= 0 or "::" in self.name or bool(self.node)

    @property
    def op_type(self) -> str:
        """``conv2d`` for ``aten::conv2d``; ``convolution`` for ``ConvolutionBackward0``."""
        if self.node:
            m = _BACKWARD_NODE.match(self.node)
            base = m.group("base") if m else self.node
            return re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()
        return self.name.rsplit("::", 1)[-1]


def parse(text: str) -> EmitNvtx | None:
    """The fields of an emit_nvtx range text, or None when ``text`` is not one."""
    evaluate = text.startswith(EVALUATE)
    m = _SUFFIXES.match(text)
    if m is None:  # pragma: no cover - the name group matches any text
        return None
    has_suffix = any(m.group(k) is not None for k in ("seq", "op_id", "sizes", "inputs"))
    if not (has_suffix or evaluate):
        return None
    name = m.group("name").strip()
    node = ""
    if evaluate:
        node = name[len(EVALUATE) :].strip()
    elif m.group("stashed") or _BACKWARD_NODE.match(name):
        node = name
    sizes = _SPACES.sub("", m.group("sizes") or "")
    seq = int(m.group("seq")) if m.group("seq") is not None else -1
    return EmitNvtx(name=name, seq=seq, stashed=bool(m.group("stashed")), sizes=sizes, node=node)


def suffix_fields(texts: list[str]) -> pd.DataFrame:
    """:data:`_SUFFIXES`' groups of many texts at once, matched by RE2 in pyarrow (no Python
    per text: a PyTorch run has a unique text per call, ``seq``/``op_id`` differing). A group
    that took no part is ''; ``matched`` is False where the pattern failed (an empty text).
    Texts with a newline are for :func:`parse` (``$`` differs between the two engines)."""
    arr = pa.array(texts, pa.large_string())
    got = pc.extract_regex(arr, "(?s)" + _SUFFIXES.pattern)
    out = {
        k: got.field(k).fill_null("").to_numpy(zero_copy_only=False)
        for k in ("name", "stashed", "seq", "op_id", "sizes", "inputs")
    }
    frame = pd.DataFrame(out)
    frame["matched"] = got.is_valid().to_numpy(zero_copy_only=False)
    frame["evaluate"] = pc.starts_with(arr, EVALUATE).to_numpy(zero_copy_only=False)
    frame["newline"] = pc.match_substring(arr, "\n").to_numpy(zero_copy_only=False)
    return frame


def is_evaluate(text: str) -> bool:
    """The autograd engine's wrapper range around one backward node's work."""
    return text.startswith(EVALUATE)
