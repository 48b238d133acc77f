"""FLOPs and bytes of an op call from its recorded input shapes (PyProf's per-op model).

Shapes come from the op's annotation (``ops.input_shapes``: emit_nvtx ``sizes = [...]``,
PyProf/DLProf-plugin tensor ``shape`` args, jlprof.torch), one per op: the detail report's
Input Shapes. The model, per call (``s`` = bytes per element of the op's data type):

GEMM  ``linear`` (x[..., K], W[N, K]), ``matmul``/``mm`` (A[..., M, K], B[..., K, N]), ``bmm``,
      ``addmm``/``baddbmm``/``addbmm`` (bias first): FLOPs = 2*M*N*K per batch element;
      bytes = s * (|A| + |B| + |C|) (each operand read or written once: the ideal traffic).
conv  ``conv1d/2d/3d``, ``convolution``, ``cudnn_convolution``... (x[N, C, *S], W[O, C/g, *R]):
      FLOPs = 2 * N * O * prod(S_out) * (C/g) * prod(R). S_out from stride, padding and
      dilation where the range text records them (PyProf / DLProf-plugin ``args``:
      :func:`conv_params`); emit_nvtx records none, and then S_out = S (stride 1,
      size-preserving padding: an estimate, exact for "same" convs).
elementwise (``add``, ``mul``, ``relu``, ``gelu``...): FLOPs = output elements (one per element);
      bytes = s * (inputs' elements + output elements), the output broadcast from the inputs.

A backward (``bprop``) GEMM or conv costs twice its forward (gradients of input and weight);
a backward elementwise op as its forward. Other ops get NaN: their cost is not modelled.
All of it runs once per distinct (type, shapes, data type), never per kernel.
"""

from __future__ import annotations

import ast
import json
import math
import re
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

GEMM = frozenset({"linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "einsum_mm"})
CONV = re.compile(r"^(conv[123]d|convolution|_convolution|cudnn_convolution|conv_transpose[123]d)$")
ELEMENTWISE = frozenset(
    [
        "add",
        "sub",
        "mul",
        "div",
        "true_divide",
        "relu",
        "relu6",
        "leaky_relu",
        "gelu",
        "silu",
        "sigmoid",
        "tanh",
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "pow",
        "neg",
        "abs",
        "clamp",
        "clamp_min",
        "clamp_max",
        "threshold",
        "hardtanh",
        "hardswish",
        "hardsigmoid",
        "elu",
        "selu",
        "softplus",
        "mish",
        "where",
        "maximum",
        "minimum",
        "addcmul",
        "addcdiv",
        "lerp",
        "sign",
        "square",
        "reciprocal",
    ]
)
DTYPE_BYTES = {
    "float64": 8,
    "double": 8,
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "int64": 8,
    "long": 8,
    "int32": 4,
    "int": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}


def op_kind(op_type: str) -> str:
    """``gemm``, ``conv``, ``elementwise`` or '' for an op type (``aten::add_`` -> add)."""
    t = str(op_type).lower().rsplit("::", 1)[-1].rsplit(".", 1)[-1].strip("_")
    if t in GEMM:
        return "gemm"
    if CONV.match(t):
        return "conv"
    if t in ELEMENTWISE:
        return "elementwise"
    return ""


def dtype_class(data_type: str) -> str:
    """The roofline's data type: fp32, fp16, bf16, fp8, fp64, or '' (not a float type).
    No recorded type (emit_nvtx records none) counts as fp32, PyTorch's default."""
    t = str(data_type).lower().replace("torch.", "")
    if not t:
        return "fp32"
    if "float8" in t or "fp8" in t:
        return "fp8"
    if "bfloat16" in t or t == "bf16":
        return "bf16"
    if "float16" in t or t in ("half", "fp16"):
        return "fp16"
    if "float64" in t or t == "double":
        return "fp64"
    if "float32" in t or t in ("float", "fp32"):
        return "fp32"
    return ""


def element_bytes(data_type: str) -> int:
    t = str(data_type).lower().replace("torch.", "")
    if "float8" in t:
        return 1
    return DTYPE_BYTES.get(t, 4)


def parse_shapes(text: str) -> list[list[int]] | None:
    """``[[1,128,16,16],[144]]`` -> lists of ints; None when the text is not such a list."""
    if not text:
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, list):
        return None
    out = []
    for s in obj:
        if isinstance(s, list) and all(isinstance(d, int) for d in s):
            out.append(s)
        elif isinstance(s, int):  # one tensor's shape given flat
            return [[int(d) for d in obj]] if all(isinstance(d, int) for d in obj) else None
    return out


def _numel(s: list[int]) -> int:
    return math.prod(s) if s else 1


def _gemm(kind: str, shapes: list[list[int]]) -> tuple[float, float] | None:
    """(FLOPs, elements moved) of one GEMM call."""
    if kind in ("addmm", "baddbmm", "addbmm"):
        shapes = shapes[1:]
    if len(shapes) < 2:
        return None
    a, b = shapes[0], shapes[1]
    if not a or not b:
        return None
    if kind == "linear":
        k, n = a[-1], b[0]
        if len(b) != 2 or b[-1] != k:
            return None
        m = _numel(a[:-1])
        return 2.0 * m * n * k, float(m * k + n * k + m * n + (n if len(shapes) > 2 else 0))
    a2 = a if len(a) > 1 else [1, *a]
    b2 = b if len(b) > 1 else [*b, 1]
    m, k = a2[-2], a2[-1]
    k2, n = b2[-2], b2[-1]
    if k != k2:
        return None
    batch = max(_numel(a2[:-2]), _numel(b2[:-2]))
    return 2.0 * batch * m * n * k, float(_numel(a) + _numel(b) + batch * m * n)


def _per_dim(v: Any, nd: int, default: int) -> list[int] | None:
    if v is None:
        return [default] * nd
    if isinstance(v, int):
        return [v] * nd
    if isinstance(v, (list, tuple)) and all(isinstance(d, int) for d in v):
        return list(v) * nd if len(v) == 1 else list(v) if len(v) == nd else None
    return None


def conv_output(spatial: list[int], kernel: list[int], params: dict[str, Any]) -> list[int] | None:
    """Output size per spatial dim from stride/padding/dilation (PyTorch's formula); the
    input size (stride 1, size-preserving) when no parameter is known."""
    if not params:
        return list(spatial)
    nd = len(spatial)
    pad = params.get("padding")
    stride = _per_dim(params.get("stride"), nd, 1)
    dil = _per_dim(params.get("dilation"), nd, 1)
    if pad == "same":
        return list(spatial)
    p = _per_dim(0 if pad == "valid" else pad, nd, 0)
    if stride is None or dil is None or p is None or min(stride) <= 0:
        return None
    out = [
        (s + 2 * pp - d * (k - 1) - 1) // st + 1
        for s, pp, d, k, st in zip(spatial, p, dil, kernel, stride, strict=True)
    ]
    return out if min(out) > 0 else None


def _conv(shapes: list[list[int]], params: dict[str, Any]) -> tuple[float, float] | None:
    if len(shapes) < 2 or len(shapes[0]) < 3 or len(shapes[1]) != len(shapes[0]):
        return None
    x, w = shapes[0], shapes[1]
    n, c, spatial = x[0], x[1], x[2:]
    o, c_g, kernel = w[0], w[1], w[2:]
    if c_g <= 0 or c % c_g:
        return None
    s_out = conv_output(spatial, kernel, params)
    if s_out is None:
        return None
    out = n * o * _numel(s_out)
    flops = 2.0 * out * c_g * _numel(kernel)
    return flops, float(_numel(x) + _numel(w) + out)


CONV_ARGS = ("stride", "padding", "dilation", "groups")  # F.conv*d's after input/weight/bias


def conv_params(text: str) -> str:
    """Stride, padding, dilation and groups of a PyProf / DLProf-plugin conv call, from its
    range text's ``args`` (positional after input, weight, bias, or named), as a canonical
    string for :func:`call_cost` ('' when the text has none: emit_nvtx records no values)."""
    if not text.startswith("{") or ("'args'" not in text and '"args"' not in text):
        return ""
    try:
        d = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return ""
    args = d.get("args") if isinstance(d, dict) else None
    if not isinstance(args, list):
        return ""
    pos = [a for a in args if isinstance(a, dict) and not a.get("name")]
    named = {a["name"]: a.get("value") for a in args if isinstance(a, dict) and a.get("name")}
    got = {}
    for i, key in enumerate(CONV_ARGS):
        if key in named:
            got[key] = named[key]
        elif len(pos) > 3 + i and "value" in pos[3 + i]:
            got[key] = pos[3 + i]["value"]
    return (
        repr({k: (list(v) if isinstance(v, tuple) else v) for k, v in got.items()}) if got else ""
    )


def _params(text: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        v = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return {}
    return v if isinstance(v, dict) else {}


def _elementwise(shapes: list[list[int]]) -> tuple[float, float] | None:
    if not shapes:
        return None
    try:
        out = _numel(list(np.broadcast_shapes(*[tuple(s) for s in shapes])))
    except ValueError:
        return None
    return float(out), float(sum(_numel(s) for s in shapes) + out)


@lru_cache(maxsize=4096)
def call_cost(
    op_type: str, input_shapes: str, data_type: str, bprop: bool, conv: str = ""
) -> tuple[float, float]:
    """(FLOPs, bytes) of one call; (nan, nan) when the op or its shapes are not modelled.
    ``conv``: :func:`conv_params` of the call's text (stride, padding, ...), '' if unknown."""
    kind = op_kind(op_type)
    shapes = parse_shapes(input_shapes) if kind else None
    if not shapes:
        return math.nan, math.nan
    t = str(op_type).lower().rsplit("::", 1)[-1].rsplit(".", 1)[-1].strip("_")
    got = (
        _gemm(t, shapes)
        if kind == "gemm"
        else _conv(shapes, _params(conv))
        if kind == "conv"
        else None
    )
    if kind == "elementwise":
        got = _elementwise(shapes)
    if got is None:
        return math.nan, math.nan
    flops, elems = got
    factor = 2.0 if bprop and kind in ("gemm", "conv") else 1.0
    return factor * flops, factor * elems * element_bytes(data_type)


def op_costs(ops: pd.DataFrame, conv: np.ndarray | None = None) -> pd.DataFrame:
    """Per row of ``ops`` (op_type, input_shapes, data_type, direction): flops and bytes per
    call, the model's kind and the data type class. ``conv``: per row, :func:`conv_params`
    of the op's text ('' unknown). One evaluation per distinct row."""
    if len(ops) == 0:
        z = np.zeros(0)
        return pd.DataFrame({"flops": z, "bytes": z, "kind": [], "dtype": []}, index=ops.index)
    key = ops[["op_type", "input_shapes", "data_type", "direction"]].astype(str)
    cv = pd.Series(np.full(len(ops), "", object) if conv is None else conv, index=ops.index)
    joined = key["op_type"] + "\x1f" + key["input_shapes"] + "\x1f" + key["data_type"]
    joined = joined + "\x1f" + key["direction"] + "\x1f" + cv.astype(str)
    uniq, inv = np.unique(joined.to_numpy(object), return_inverse=True)
    costs = np.array(
        [
            call_cost(t, s, d, r == "bprop", c)
            for t, s, d, r, c in (u.split("\x1f") for u in uniq.tolist())
        ],
        dtype=np.float64,
    ).reshape(-1, 2)
    return pd.DataFrame(
        {
            "flops": costs[inv, 0] if len(uniq) else np.zeros(0),
            "bytes": costs[inv, 1] if len(uniq) else np.zeros(0),
            "kind": [op_kind(t) for t in ops["op_type"].astype(str)],
            "dtype": [dtype_class(d) for d in ops["data_type"].astype(str)],
        },
        index=ops.index,
    )


def roofline(
    flops: np.ndarray,
    nbytes: np.ndarray,
    gpu_ns: np.ndarray,
    peak_flops: np.ndarray,
    peak_bw: float,
) -> pd.DataFrame:
    """Achieved FLOP/s and B/s over ``gpu_ns``, arithmetic intensity, the attainable rate
    min(peak, AI * bandwidth), its share achieved and the bound (memory below the ridge point
    peak / bandwidth, else compute)."""
    sec = np.where(gpu_ns > 0, gpu_ns * 1e-9, np.nan)
    fps = flops / sec
    bps = nbytes / sec
    ai = np.where(nbytes > 0, flops / np.where(nbytes > 0, nbytes, 1.0), np.nan)
    attain = np.minimum(peak_flops, ai * peak_bw)
    ridge = peak_flops / peak_bw
    bound = np.where(np.isnan(ai) | np.isnan(ridge), "", np.where(ai < ridge, "memory", "compute"))
    return pd.DataFrame(
        {
            "flops_per_s": fps,
            "bytes_per_s": bps,
            "intensity": ai,
            "attainable_flops_per_s": attain,
            "roofline_pct": 100.0 * fps / attain,
            "bound": bound,
        }
    )


__all__ = [
    "call_cost",
    "conv_output",
    "conv_params",
    "dtype_class",
    "op_costs",
    "op_kind",
    "parse_shapes",
    "roofline",
]
