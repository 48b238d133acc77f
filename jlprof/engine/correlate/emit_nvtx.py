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
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jlprof.background import InThread

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


# every number after "= " (the suffixes' among them); a suffix number as getNvtxStr writes it
# and as the grammar would take it (spaces optional)
_ZEROED = r"(= -?)\d+"
_NUMBERS = r"= -?\d"
_CANONICAL = r", (?:stashed )?seq = -?\d|, op_id = \d"
_LOOSE = r", ?(?:stashed )?seq ?= ?-?\d|, ?op_id ?= ?\d"
_SEQ = r", (?:stashed )?seq = (?P<seq>-?\d+)"


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
    and each row's seq.

    The grammar runs once per distinct text with its numbers after ``= `` zeroed (a PyTorch
    run's 7.45M texts are a few hundred such): zeroing a whole digit run changes no match of
    :data:`_SUFFIXES`, which tests those characters only with ``\\d+`` and ``.``. A text is
    taken only where each number zeroed is a ``seq`` or ``op_id`` the grammar took, written as
    getNvtxStr writes it; the few others are left to the caller, which parses them one at a
    time."""
    # each text's seq on the other core meanwhile (pyarrow's kernels release the GIL)
    seq = InThread(lambda _check: _seqs(texts), "jlprof-seq")
    try:
        rows, codes, skel, names, firsts = _forms(texts)
    except BaseException:
        seq.cancel()  # joins: nothing runs on once this call has ended
        raise
    return rows, codes, skel, names, firsts, seq.wait()[rows]


#: texts split at a time by :func:`skeletons_by_chunk`: the regex kernels' temporaries are a
#: chunk's (all 7.45M texts of a 10M-kernel PyTorch run at once: ~1.5 GB for a moment)
CHUNK_TEXTS = 1 << 20


def skeletons_by_chunk(
    texts: np.ndarray | pa.Array, to_arrow: Callable[[np.ndarray | pa.Array], pa.Array]
) -> tuple[np.ndarray, np.ndarray, list[str], list[str], np.ndarray, np.ndarray]:
    """:func:`skeletons` of ``texts`` (an object array, or Arrow strings), :data:`CHUNK_TEXTS`
    at a time (each slice made Arrow large strings by ``to_arrow``); the same result as one
    call: skeletons are numbered in order of their first text across the chunks, as one call
    numbers them."""
    code_of: dict[str, int] = {}
    skel: list[str] = []
    names: list[str] = []
    firsts: list[int] = []
    rows, codes, seqs = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for a in range(0, len(texts), CHUNK_TEXTS):
        arrow = to_arrow(texts[a : a + CHUNK_TEXTS])
        r, c, k, nm, f, sq = skeletons(arrow)
        del arrow
        remap = np.empty(len(k), np.int64)
        for j, (sk, name, first) in enumerate(zip(k, nm, f.tolist(), strict=True)):
            g = code_of.get(sk)
            if g is None:  # first met in this chunk: after every skeleton of earlier chunks
                g = code_of[sk] = len(skel)
                skel.append(sk)
                names.append(name)
                firsts.append(first + a)
            remap[j] = g
        rows.append(np.asarray(r, np.int64) + a)
        codes.append(remap[c])
        seqs.append(np.asarray(sq, np.int64))
    return (
        np.concatenate(rows),
        np.concatenate(codes),
        skel,
        names,
        np.asarray(firsts, np.int64),
        np.concatenate(seqs),
    )


def _forms(texts: pa.Array) -> tuple[np.ndarray, np.ndarray, list[str], list[str], np.ndarray]:
    """:func:`skeletons` but the seqs."""
    zeroed = pc.dictionary_encode(pc.replace_substring_regex(texts, _ZEROED, "\\10"))
    z_code = zeroed.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    z_skel = _zeroed_skeletons(zeroed.dictionary)
    rows = np.flatnonzero(z_skel[z_code] >= 0)
    codes = z_skel[z_code[rows]]
    # the codes are already in order of each skeleton's first text: the zeroed texts' dictionary
    # is in order of first appearance, and a zeroed text is taken with all its texts or none
    firsts = np.empty(int(z_skel.max(initial=-1)) + 1, np.int64)
    firsts[codes[::-1]] = np.arange(len(rows) - 1, -1, -1)
    first = zeroed.dictionary.take(pa.array(z_code[rows[firsts]], pa.int64()))
    got = pc.extract_regex(first, "(?s)" + _SUFFIXES.pattern)
    skel, names = _skeleton(got).to_pylist(), got.field("name").to_pylist()
    return rows, codes, skel, names, rows[firsts]


def _seqs(texts: pa.Array) -> np.ndarray:
    """Each text's number after ``seq = `` (getNvtxStr's spacing), -1 where none."""
    seq = pc.struct_field(pc.extract_regex(texts, _SEQ), "seq")  # null where none
    return pc.fill_null(seq, _s("-1")).cast(pa.int64()).to_numpy(zero_copy_only=False)


def _zeroed_skeletons(texts: pa.Array) -> np.ndarray:
    """Per text (numbers after ``= `` zeroed): a code shared by the texts of one skeleton,
    -1 where not taken."""
    got = pc.extract_regex(texts, "(?s)" + _SUFFIXES.pattern)
    empty = _s("")
    has = {
        k: pc.fill_null(pc.not_equal(got.field(k), empty), False)
        for k in ("seq", "op_id", "sizes", "inputs")
    }
    suffix = pc.or_(pc.or_(has["seq"], has["op_id"]), pc.or_(has["sizes"], has["inputs"]))
    plain = pc.invert(pc.or_(pc.match_substring(texts, "\n"), pc.starts_with(texts, "{")))
    take = pc.and_(pc.and_(got.is_valid(), plain), pc.or_(suffix, pc.starts_with(texts, EVALUATE)))
    take = pc.fill_null(take, False).to_numpy(zero_copy_only=False)
    # every number zeroed is a suffix's, in getNvtxStr's spacing, and taken by the grammar
    zeroed, canonical, loose = (
        pc.count_substring_regex(texts, p).to_numpy(zero_copy_only=False)
        for p in (_NUMBERS, _CANONICAL, _LOOSE)
    )
    groups = sum(has[k].to_numpy(zero_copy_only=False).astype(np.int64) for k in ("seq", "op_id"))
    take &= (zeroed == canonical) & (canonical == loose) & (canonical == groups)
    skel = np.full(len(texts), -1, np.int64)
    rows = np.flatnonzero(take)
    skel[rows] = pc.dictionary_encode(
        _skeleton(got.filter(pa.array(take, pa.bool_())))
    ).indices.to_numpy(zero_copy_only=False)
    return skel


def _skeleton(got: pa.StructArray) -> pa.Array:
    """The skeleton of each grammar match: ``seq`` as its sign, ``op_id`` as 0, spaces as
    getNvtxStr writes them."""
    empty = _s("")
    f = {
        k: pc.fill_null(got.field(k), empty)
        for k in ("name", "stashed", "seq", "op_id", "sizes", "inputs")
    }
    has = {k: pc.not_equal(v, empty) for k, v in f.items()}
    sign = pc.if_else(pc.starts_with(f["seq"], "-"), _s("-1"), _s("0"))
    lead = pc.if_else(has["stashed"], _s(", stashed seq = "), _s(", seq = "))
    return pc.binary_join_element_wise(
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


def is_evaluate(text: str) -> bool:
    """The autograd engine's wrapper range around one backward node's work."""
    return text.startswith(EVALUATE)
