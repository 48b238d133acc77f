"""Op name and op type from the NVTX range texts TensorRT and TensorFlow write (``-m tensorrt``,
``-m tensorflow1``, ``-m tensorflow2``); :func:`jlprof.engine.correlate.ops.parse_texts` calls these
once per unique text.

TensorRT names each layer's range after the layer (``--profilingVerbosity`` / nsys
``--trace=nvtx``); a fused layer joins its parts' names:

* ``A + B + C``: layers fused vertically (``/conv/Conv + /bn/BatchNormalization + /act/Relu``,
  or ``(Unnamed Layer* 3) [Convolution] + (Unnamed Layer* 4) [Activation]`` from the ONNX parser
  and network API) -> type ``Conv + BatchNormalization + Relu`` (``Convolution + Activation``);
* ``A || B``: layers merged horizontally -> their distinct types joined by `` || ``;
* ``PWN(a, b)``: a pointwise fusion (possibly nested) -> ``PWN(Sigmoid + Mul)``;
* ``Reformatting CopyNode for Input Tensor 0 to X`` -> ``Reformat`` (a layout change, named
  after the layer it feeds: never that layer's type);
* ``{ForeignNode[/a.../b]}`` -> ``ForeignNode`` (a Myelin subgraph); ``X copy`` -> ``Copy``;
* a scoped ONNX node ``/blocks.0/conv1/Conv_3`` -> its last part without the ``_N`` suffix.

TensorFlow (NGC builds, ``TF_ENABLE_NVTX_RANGES[_DETAILED]``, domain ``tensorflow-core``):

* ``MatMul: model/dense/MatMul`` -> name ``model/dense/MatMul``, type ``MatMul``;
* ``{"op":"MatMul","name":"model/dense/MatMul","args":[{"name":"x","shape":[8,16]}],
  "attrs":{"T":"half"}}`` (detailed) -> the same, plus input shapes and the data type;
* XLA: ``cluster_3_1/xla_run/fusion.12`` (``cluster_<N>_1/xla_run/<HLO instruction>``) ->
  type ``XLA fusion`` (``XLA convolution``, ``XLA dot``: the HLO opcode);
* a bare scoped name ``model/dense/MatMul_1`` -> type ``MatMul`` (TF's ``_N`` uniquifier dropped).

TensorFlow names are scopes: their hierarchy (``model``, ``model/dense``) is the group nodes.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

from jlprof.engine.correlate.params import attrs_parameters

TENSORRT = ("tensorrt",)
TENSORFLOW = ("tensorflow1", "tensorflow2")

_UNIQUE = re.compile(r"_\d+$")  # ONNX/TF uniquifiers: Conv_3, MatMul_1
_BRACKET_TYPE = re.compile(r"\[([A-Za-z][\w ]*)\]\s*$")  # "(Unnamed Layer* 3) [Convolution]"
_REFORMAT = re.compile(r"^Reformatting CopyNode for (?:Input|Output) Tensor \d+ to ")
_XLA = re.compile(r"^(?P<cluster>cluster_\d+)_1/xla_run/(?P<hlo>[\w.-]+)$")
_HLO_NO = re.compile(r"\.\d+$")
_TF_BASIC = re.compile(r"^(?P<op>_?[A-Za-z][\w]*): (?P<name>\S.*)$")


class Parsed(NamedTuple):
    name: str
    op_type: str
    abs_path: str = ""
    data_type: str = ""
    input_shapes: str = ""
    parameters: str = ""  # TF detailed markers' attrs (jlprof.engine.correlate.params)


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split on ``sep`` outside (), [] and {}."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(depth - 1, 0)
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _layer_type(part: str) -> str:
    """The type of one (unfused) TensorRT layer name."""
    if part.startswith("PWN(") and part.endswith(")"):
        inner = [t for p in _split_top(part[4:-1], ",") for t in _fused_types(p)]
        flat = [x for t in inner for x in (_unwrap_pwn(t) or [t])]  # PWN(PWN(a), b): one PWN
        return f"PWN({' + '.join(_unique(flat))})"
    if part.startswith("{ForeignNode[") or part.startswith("ForeignNode["):
        return "ForeignNode"
    m = _BRACKET_TYPE.search(part)
    if m:
        return m.group(1).strip()
    if part.endswith(" copy"):
        return "Copy"
    last = part.rstrip("/").rsplit("/", 1)[-1] or part
    return _UNIQUE.sub("", last)


def _unwrap_pwn(op_type: str) -> list[str] | None:
    if op_type.startswith("PWN(") and op_type.endswith(")"):
        return op_type[4:-1].split(" + ")
    return None


def _fused_types(text: str) -> list[str]:
    return [_layer_type(p) for p in _split_top(text, " + ")]


def parse_tensorrt(text: str) -> Parsed:
    """A TensorRT layer's range text: the name is the text, the type from its parts."""
    if _REFORMAT.match(text):
        return Parsed(text, "Reformat")
    branches = [" + ".join(_fused_types(b)) for b in _split_top(text, " || ")]
    return Parsed(text, " || ".join(_unique(branches)) or text)


def scope_path(name: str) -> str:
    parts = [p for p in name.split("/") if p]
    return "/" + "/".join(parts) if len(parts) > 1 else ""


def _tf_type(name: str) -> str:
    m = _XLA.match(name)
    if m:
        return f"XLA {_HLO_NO.sub('', m.group('hlo'))}"
    return _UNIQUE.sub("", name.rstrip("/").rsplit("/", 1)[-1] or name)


def parse_tensorflow(text: str) -> Parsed | None:
    """A TensorFlow node's range text (basic, detailed or XLA); None when it is not one."""
    if text.startswith('{"op"'):
        try:
            d = json.loads(text)
        except ValueError:
            return None
        name, op = str(d.get("name", "")), str(d.get("op", ""))
        if not name or not op:
            return None
        shapes = [a.get("shape") for a in d.get("args", []) if isinstance(a, dict)]
        attrs = d.get("attrs") or {}
        dtype = attrs.get("T") or attrs.get("dtype") or ""
        return Parsed(
            name,
            op,
            scope_path(name),
            str(dtype) if isinstance(dtype, str) else "",
            json.dumps(shapes, separators=(",", ":")) if shapes else "",
            attrs_parameters(attrs),
        )
    m = _TF_BASIC.match(text)
    if m and " " not in m.group("name"):
        name = m.group("name")
        return Parsed(name, m.group("op"), scope_path(name))
    if "/" in text and " " not in text and not text.startswith("/"):
        return Parsed(text, _tf_type(text), scope_path(text))
    return None


def parse(text: str, mode: str | None) -> Parsed | None:
    """The framework's parse of ``text`` in ``mode``; None: not a framework text (or no mode)."""
    if mode in TENSORRT:
        return parse_tensorrt(text)
    if mode in TENSORFLOW:
        return parse_tensorflow(text)
    return None
