"""From an NVTX range text to DLProf's op identity: Op Name, Op Type, Direction, Op ID.

Parsing runs once per *unique* text (a categorical's categories), never per range.

Formats understood, in order:

* pyprof / DLProf-plugin dict strings (``jlprof.engine.correlate.pyprof``):
  ``{'mod': 'torch.nn.functional', 'op': 'conv2d', 'args': [...]}`` -> name
  ``torch.nn.functional.conv2d`` (the enclosing call's ``funcStack`` module path when there is
  one, ``jlprof.engine.correlate.torch_ops``), type ``conv2d``, shapes and dtype of the tensor
  arguments
* PyTorch ``emit_nvtx`` texts (``jlprof.engine.correlate.emit_nvtx``):
  ``aten::mul, seq = 45, op_id = 9`` -> name ``aten::mul``, type ``mul``, fprop; backward nodes ->
  bprop (linked to their forward op by ``jlprof.engine.correlate.torch_ops``); ``sizes =`` -> input
  shapes
* jlprof annotations (``jlprof.torch``, format in ``docs/pytorch.md``):
  ``/Net/conv1/convolution [aten::convolution|fprop|float32|[[8,3,16,16],[4,3,3,3],[4]]]``
  -> type ``convolution``, direction, data type, input shapes, optional ``bwd=``/``stack=``
* ``/``-scoped names (TensorFlow, DLProf PyTorch): ``/a/b(2)/conv1d`` -> levels ``a, b(2), conv1d``,
  type ``conv1d`` (the ``(N)`` repeat suffix of guide §11.1 is dropped from the type)
* instance-numbered user ranges: ``Batch 17``, ``Epoch #2`` -> name ``Batch #`` (one op, one
  group node, one key-node candidate), type ``Batch``; the number is kept per instance
  (``instance_no``)
* with ``-m tensorrt`` / ``-m tensorflow1|2``: TensorRT layer names (fusions, reformats) and
  TensorFlow node texts (``MatMul: model/dense/MatMul``, detailed JSON, XLA clusters), see
  ``jlprof.engine.correlate.framework_names``
* anything else: the text is the name and the type.

Op ID is the op name in simple mode; with a direction (PyTorch) it is ``name:direction``
so forward and backward of one op stay apart (guide §11.2-11.3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from jlprof.engine.correlate import emit_nvtx, framework_names, pyprof
from jlprof.engine.correlate.params import shapes_parameters
from jlprof.engine.memory import release_arrow_memory
from jlprof.engine.read.trace import arrow_strings

_REPEAT = re.compile(r"\(\d+\)$")
_NUMBERED = re.compile(r"^(?P<base>[A-Za-z][\w.-]*(?: [A-Za-z][\w.-]*)*) #?(?P<no>\d+)$")
NUMBER_MARK = " #"  # "Batch 17" -> "Batch #"
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
    "parameters",
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


def _parse_one(
    text: str,
    e: emit_nvtx.EmitNvtx | None = None,
    pp: pyprof.PyProf | None = None,
    mode: str | None = None,
) -> tuple[str, ...]:
    """COLUMNS for one range text (``e``, ``pp``: its emit_nvtx or pyprof parse, if any;
    ``mode``: the framework whose names to read, ``framework_names``)."""
    name, op_type, direction = text, "", ""
    if pp is not None:
        direction = "fprop" if pp.kind == "op" else ""
        return (pp.name, pp.op_type, direction, abs_path(pp.name), pp.data_type,
                pp.input_shapes, pp.stack_trace, "", pp.parameters)  # fmt: skip
    fw = framework_names.parse(text, mode) if e is None else None
    if fw is not None:
        return (fw.name, fw.op_type, "", fw.abs_path, fw.data_type, fw.input_shapes, "", "",
                fw.parameters)  # fmt: skip
    if text.startswith("{"):  # a dict marker of another kind: its text is the name
        return text, "pyprof", "", "", "", "", "", "", ""
    extra = ("", "", "", "", "")
    if e is not None:
        name = e.node or e.name
        return (name, e.op_type, "bprop" if e.node else "fprop", "", "", e.sizes, "", "",
                shapes_parameters(e.sizes))  # fmt: skip
    ann = parse_annotation(text)
    if ann is not None:
        name = ann["op_name"]
        op_type = ann["op_type"].removeprefix("aten::")
        direction = ann["direction"]
        extra = (ann["data_type"], ann["input_shapes"], ann["stack_trace"], ann["bwd_op"],
                 shapes_parameters(ann["input_shapes"]))  # fmt: skip
    path = abs_path(name)
    numbered = _NUMBERED.match(name) if not (path or ann) else None
    if numbered:
        return (numbered.group("base") + NUMBER_MARK, numbered.group("base"), "", "", *extra)
    if not op_type:
        last = name.rstrip("/").rsplit("/", 1)[-1] or name
        op_type = _REPEAT.sub("", last)
    return (name, op_type, direction, path, *extra)


def abs_path(name: str, scoped: bool = False) -> str:
    """The hierarchy path of a ``/``-scoped name ('' for a relative one). ``scoped``: names
    are scopes without the leading ``/`` (TensorFlow's ``model/dense/MatMul``)."""
    if name.startswith("/") and len(name) > 1:
        return "/" + "/".join(p for p in name.split("/") if p)
    if scoped and "/" in name and " " not in name:
        return framework_names.scope_path(name)
    return ""


def parse_texts(texts: pd.Index | np.ndarray | list[str], mode: str | None = None) -> pd.DataFrame:
    """Parse unique range texts into COLUMNS plus op_id.

    ``abs_path`` is the hierarchy path for ``/``-scoped names ('' when the name is relative,
    in which case the NVTX nesting gives the hierarchy). ``data_type``, ``input_shapes``,
    ``stack_trace`` and ``bwd_op`` come from ``jlprof.torch`` texts ('' otherwise).
    ``torch_op``, ``torch_call``, ``seq`` and ``bwd_node`` describe emit_nvtx texts (False,
    False, -1, False otherwise); ``pyprof`` is the kind of a pyprof marker (``op``,
    ``module``, ``trace``, ``config``; '' otherwise) and ``func_stack`` its module path.
    ``instance_no`` is the number of an instance-numbered range (``Batch 17`` -> 17; -1
    otherwise). ``form``: a text whose row is this one's but for ``seq`` and ``instance_no``
    (the first such text, or itself): what names ops works per form, not per text.
    ``mode``: ``tensorrt``/``tensorflow1``/``tensorflow2`` read that framework's
    names (``framework_names``); other modes leave them to the generic rules.

    Parsing runs once per unique text. emit_nvtx texts (unique per call in a PyTorch run:
    ``aten::mul, seq = 45, op_id = 9``) are split by RE2 all at once and parsed once per
    *skeleton* (the text with its numbers zeroed; every field but ``seq`` depends on it alone),
    the rest one at a time (:func:`_parse_each`, which gives the same frame for any text).
    """
    f = parse_forms(texts, mode)
    df = f.frame.iloc[f.code].reset_index(drop=True)
    df["seq"] = f.seq
    df["instance_no"] = f.instance_no
    df = df[[*COLUMNS, "pyprof", "func_stack", "torch_op", "torch_call", "seq", "bwd_node",
             "instance_no", "op_id"]]  # fmt: skip
    df["form"] = f.first[f.code]
    return df


@dataclass
class Forms:
    """Range texts by *form*: texts whose :func:`parse_texts` rows differ only in ``seq``
    and ``instance_no`` (a PyTorch run's call texts, ``aten::mul, seq = 45, op_id = 9``)."""

    frame: pd.DataFrame  # one row per form: parse_texts' columns but seq and instance_no
    code: np.ndarray  # each text's row of ``frame``
    first: np.ndarray  # each form's first text
    seq: np.ndarray  # each text's
    instance_no: np.ndarray  # each text's


class _NotStrings(Exception):
    """Texts that are not all str (:func:`parse_forms` reads them as ``str()`` gives them)."""


def _strings(texts: np.ndarray) -> pa.Array:
    """``texts`` (str objects) as Arrow strings; :class:`_NotStrings` if any is not a str."""
    try:
        arrow = pa.array(texts, pa.large_string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        raise _NotStrings from None
    if arrow.null_count:
        raise _NotStrings
    return arrow


def _large(texts: pa.Array) -> pa.Array:
    """A slice of Arrow strings as :func:`_strings` gives object texts (large strings)."""
    return texts.cast(pa.large_string())


def parse_forms(texts: pd.Index | np.ndarray | list[str], mode: str | None = None) -> Forms:
    """:func:`parse_texts` by form, forms in order of their first text, without a row per
    text: the range pass's 7.45M distinct texts of a 10M-kernel PyTorch run are 412 forms."""
    arrow = arrow_strings(texts) if isinstance(texts, pd.Index) else None
    if arrow is not None:  # the windowed read's texts: never a Python string per text
        found = emit_nvtx.skeletons_by_chunk(arrow, _large)

        def pick(rows: np.ndarray) -> list[str]:
            return arrow.take(pa.array(rows, pa.int64())).to_pylist()

    else:
        texts = np.asarray(texts, dtype=object)  # an object Index's own array: no copy
        try:
            found = emit_nvtx.skeletons_by_chunk(texts, _strings)
        except _NotStrings:  # not all str: read as the per-text path reads them
            texts = np.array([str(t) for t in texts], dtype=object)
            found = emit_nvtx.skeletons_by_chunk(texts, _strings)

        def pick(rows: np.ndarray) -> list[str]:
            return [texts[i] for i in rows]

    n = len(arrow if arrow is not None else texts)
    rows, codes, skeletons, names, firsts, seq_fast = found
    del found
    # the pages Arrow's pool kept of the skeleton pass's freed buffers, given back now, not
    # at its next allocation (7.45M texts: ~0.25 GB held through the range pass's labels)
    release_arrow_memory()
    marks = [emit_nvtx.parse(k) for k in skeletons]
    kept = np.array(  # the skeleton parses, to the name RE2 found: else one at a time
        [
            m is not None and _suffix_name(k) == nm
            for k, m, nm in zip(skeletons, marks, names, strict=True)
        ],
        dtype=bool,
    )
    ok = kept[codes] if len(codes) else np.zeros(0, bool)
    if ok.all():  # usually: no copies of every text's row, code and seq (7.45M: 0.18 GB)
        idx = rows
    else:
        idx, codes, seq_fast = rows[ok], codes[ok], seq_fast[ok]
    del rows, ok
    rest = np.ones(n, bool)
    rest[idx] = False
    rest = np.flatnonzero(rest)
    each = _parse_each(pick(rest), mode)
    # the skeletons in use, ascending, and each text's among them: counted, not sorted
    # (np.unique's sort and 64-bit inverse of every text)
    in_use = np.bincount(codes, minlength=len(skeletons)) > 0
    used = np.flatnonzero(in_use)
    pos = (np.cumsum(in_use, dtype=np.int32) - 1)[codes]
    del in_use, codes
    blank = ("",) * len(COLUMNS)
    one = pd.DataFrame(
        [_parse_one(skeletons[k], marks[k], None, mode) if marks[k] else blank for k in used],
        columns=COLUMNS,
    )
    one["pyprof"] = pd.Series([""] * len(used), dtype=object)
    one["func_stack"] = pd.Series([""] * len(used), dtype=object)
    one["torch_op"] = np.ones(len(used), bool)
    one["torch_call"] = np.array([bool(marks[k] and marks[k].is_call) for k in used], bool)
    one["bwd_node"] = np.array([bool(marks[k] and marks[k].node) for k in used], bool)
    one["op_id"] = np.where(
        one["direction"] != "", one["op_name"] + ":" + one["direction"], one["op_name"]
    )
    # forms in order of their first text (a kept skeleton keeps all its texts)
    keys = np.concatenate([firsts[used], rest])
    order = np.argsort(keys, kind="stable")
    rank = np.empty(len(keys), np.int64)
    rank[order] = np.arange(len(keys))
    parts = [one, each.drop(columns=["seq", "instance_no", "form"])]
    frame = pd.concat([q for q in parts if len(q)] or parts[1:], ignore_index=True).iloc[order]
    code = np.empty(n, np.int64)
    code[idx] = rank[pos]
    code[rest] = rank[len(used) + np.arange(len(rest))]
    seq = np.full(n, -1, np.int64)
    seq[idx] = seq_fast
    seq[rest] = each["seq"].to_numpy(np.int64)
    instance_no = np.full(n, -1, np.int64)
    instance_no[rest] = each["instance_no"].to_numpy(np.int64)
    numbered = idx[one["op_name"].str.endswith(NUMBER_MARK).to_numpy(bool)[pos]]
    if len(numbered):  # an emit_nvtx name ending in " #": as the per-text path numbers it
        instance_no[numbered] = [_instance_no(t) for t in pick(numbered)]
    return Forms(frame.reset_index(drop=True), code, keys[order], seq, instance_no)


def _suffix_name(text: str) -> str:
    m = emit_nvtx._SUFFIXES.match(text)
    return m.group("name") if m else ""


def _parse_each(texts: pd.Index | np.ndarray | list[str], mode: str | None = None) -> pd.DataFrame:
    """:func:`parse_texts` one text at a time: the reference, and the path for texts the
    vectorised split leaves out."""
    texts = [str(t) for t in texts]
    marks = [emit_nvtx.parse(t) for t in texts]
    tf_json = mode in framework_names.TENSORFLOW  # '{"op": ...}' is TF's, not pyprof's
    pps = [
        pyprof.parse(t) if t.startswith("{") and not (tf_json and t.startswith('{"op"')) else None
        for t in texts
    ]
    rows = [_parse_one(t, m, q, mode) for t, m, q in zip(texts, marks, pps, strict=True)]
    df = pd.DataFrame(rows, columns=COLUMNS)
    # pyprof: which marker (the op call holds the work; the call site above names it)
    df["pyprof"] = pd.Series([q.kind if q else "" for q in pps], dtype=object)
    df["func_stack"] = pd.Series([q.func_stack if q else "" for q in pps], dtype=object)
    # emit_nvtx: the range is a PyTorch op call (nesting merges), seq, backward node
    df["torch_op"] = np.array([m is not None for m in marks], dtype=bool)
    df["torch_call"] = np.array([m is not None and m.is_call for m in marks], dtype=bool)
    df["seq"] = np.array([m.seq if m else -1 for m in marks], dtype=np.int64)
    df["bwd_node"] = np.array([bool(m and m.node) for m in marks], dtype=bool)
    df["instance_no"] = np.array(
        [
            _instance_no(t) if r[0].endswith(NUMBER_MARK) else -1
            for t, r in zip(texts, rows, strict=True)
        ],
        dtype=np.int64,
    )
    df["op_id"] = np.where(
        df["direction"] != "", df["op_name"] + ":" + df["direction"], df["op_name"]
    )
    df["form"] = np.arange(len(texts), dtype=np.int64)
    return df


def _instance_no(text: str) -> int:
    m = _NUMBERED.match(text)
    return int(m.group("no")) if m else -1


def unassociated_name(name: str) -> str:
    """Guide §8.3: work outside every NVTX range becomes op ``unassociated_<name>``."""
    return f"unassociated_{name}"
