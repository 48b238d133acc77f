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

import numpy as np
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


def _s(text: str) -> pa.Scalar:
    return pa.scalar(text, pa.large_string())


def skeletons(
    texts: pa.Array,
) -> tuple[np.ndarray, np.ndarray, list[str], list[str], np.ndarray, np.ndarray]:
    """The emit_nvtx texts among many, split by RE2 in pyarrow with :data:`_SUFFIXES` (no
    Python per text: a PyTorch run has a unique text per call). Each is reduced to its
    *skeleton*, the text with ``seq`` (its sign kept) and ``op_id`` zeroed, on which every field
    of :func:`parse` but ``seq`` depends. Returns the rows taken (texts with a suffix or the
    autograd wrapper; none with a newline, where ``$`` differs between the engines, nor a
    ``{`` dict marker), each row's skeleton code, the skeletons, the name RE2 found in each
    skeleton's first row (for the caller to check against :func:`parse`), that first row's text
    and each row's seq."""
    got = pc.extract_regex(texts, "(?s)" + _SUFFIXES.pattern)
    empty = _s("")
    f = {
        k: pc.fill_null(got.field(k), empty)
        for k in ("name", "stashed", "seq", "op_id", "sizes", "inputs")
    }
    has = {k: pc.not_equal(v, empty) for k, v in f.items()}
    suffix = pc.or_(pc.or_(has["seq"], has["op_id"]), pc.or_(has["sizes"], has["inputs"]))
    plain = pc.invert(pc.or_(pc.match_substring(texts, "\n"), pc.starts_with(texts, "{")))
    take = pc.and_(pc.and_(got.is_valid(), plain), pc.or_(suffix, pc.starts_with(texts, EVALUATE)))
    take = pc.fill_null(take, False)
    rows = np.flatnonzero(take.to_numpy(zero_copy_only=False))
    f = {k: pc.filter(v, take) for k, v in f.items()}
    has = {k: pc.not_equal(v, empty) for k, v in f.items()}
    sign = pc.if_else(pc.starts_with(f["seq"], "-"), _s("-1"), _s("0"))
    lead = pc.if_else(has["stashed"], _s(", stashed seq = "), _s(", seq = "))
    skeleton = pc.binary_join_element_wise(
        f["name"],
        pc.if_else(has["seq"], pc.binary_join_element_wise(lead, sign, empty), empty),
        pc.if_else(has["op_id"], _s(", op_id = 0"), empty),
        pc.if_else(
            has["sizes"], pc.binary_join_element_wise(_s(", sizes = "), f["sizes"], empty), empty
        ),
        pc.if_else(
            has["inputs"],
            pc.binary_join_element_wise(_s(", input_op_ids = "), f["inputs"], empty),
            empty,
        ),
        empty,
    )
    enc = pc.dictionary_encode(skeleton)
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    firsts = np.empty(len(enc.dictionary), np.int64)
    firsts[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)
    names = f["name"].take(pa.array(firsts)).to_pylist()
    seq = pc.if_else(has["seq"], f["seq"], _s("-1")).cast(pa.int64())
    skel = enc.dictionary.to_pylist()
    return rows, codes, skel, names, rows[firsts], seq.to_numpy(zero_copy_only=False)


def is_evaluate(text: str) -> bool:
    """The autograd engine's wrapper range around one backward node's work."""
    return text.startswith(EVALUATE)
