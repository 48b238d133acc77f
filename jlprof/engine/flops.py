"""FLOPs and bytes of an op call from its recorded input shapes (PyProf's per-op model).

Shapes come from the op's annotation (``ops.input_shapes``: emit_nvtx ``sizes = [...]``,
PyProf/DLProf-plugin tensor ``shape`` args, jlprof.torch), one per op: the detail report's
Input Shapes. The model, per call (``s`` = bytes per element of the op's data type):

GEMM  ``linear`` (x[..., K], W[N, K]), ``matmul``/``mm`` (A[..., M, K], B[..., K, N]), ``bmm``,
      ``addmm``/``baddbmm``/``addbmm`` (bias first): FLOPs = 2*M*N*K per batch element;
      bytes = s * (|A| + |B| + |C|) (each operand read or written once: the ideal traffic).
conv  ``conv1d/2d/3d``, ``convolution``, ``cudnn_convolution``... (x[N, C, *S], W[O, C/g, *R]):
      FLOPs = 2 * N * O * prod(S_out) * (C/g) * prod(R); the output size is not recorded, so
      S_out = S (stride 1, size-preserving padding: an estimate, exact for "same" convs).
elementwise (``add``, ``mul``, ``relu``, ``gelu``...): FLOPs = output elements (one per element);
      bytes = s * (inputs' elements + output elements), the output broadcast from the inputs.

A backward (``bprop``) GEMM or conv costs twice its forward (gradients of input and weight);
a backward elementwise op as its forward. Other ops get NaN: their cost is not modelled.
All of it runs once per distinct (type, shapes, data type), never per kernel.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache

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


def _conv(shapes: list[list[int]]) -> tuple[float, float] | None:
    if len(shapes) < 2 or len(shapes[0]) < 3 or len(shapes[1]) != len(shapes[0]):
        return None
    x, w = shapes[0], shapes[1]
    n, c, spatial = x[0], x[1], x[2:]
    o, c_g, kernel = w[0], w[1], w[2:]
    if c_g <= 0 or c % c_g:
        return None
    out = n * o * _numel(spatial)
    flops = 2.0 * out * c_g * _numel(kernel)
    return flops, float(_numel(x) + _numel(w) + out)


def _elementwise(shapes: list[list[int]]) -> tuple[float, float] | None:
    if not shapes:
        return None
    try:
        out = _numel(list(np.broadcast_shapes(*[tuple(s) for s in shapes])))
    except ValueError:
        return None
    return float(out), float(sum(_numel(s) for s in shapes) + out)


@lru_cache(maxsize=4096)
def call_cost(op_type: str, input_shapes: str, data_type: str, bprop: bool) -> tuple[float, float]:
    """(FLOPs, bytes) of one call; (nan, nan) when the op or its shapes are not modelled."""
    kind = op_kind(op_type)
    shapes = parse_shapes(input_shapes) if kind else None
    if not shapes:
        return math.nan, math.nan
    t = str(op_type).lower().rsplit("::", 1)[-1].rsplit(".", 1)[-1].strip("_")
    got = _gemm(t, shapes) if kind == "gemm" else _conv(shapes) if kind == "conv" else None
    if kind == "elementwise":
        got = _elementwise(shapes)
    if got is None:
        return math.nan, math.nan
    flops, elems = got
    factor = 2.0 if bprop and kind in ("gemm", "conv") else 1.0
    return factor * flops, factor * elems * element_bytes(data_type)


def op_costs(ops: pd.DataFrame) -> pd.DataFrame:
    """Per row of ``ops`` (op_type, input_shapes, data_type, direction): flops and bytes per
    call, the model's kind and the data type class. One evaluation per distinct row."""
    if len(ops) == 0:
        z = np.zeros(0)
        return pd.DataFrame({"flops": z, "bytes": z, "kind": [], "dtype": []}, index=ops.index)
    key = ops[["op_type", "input_shapes", "data_type", "direction"]].astype(str)
    joined = key["op_type"] + "\x1f" + key["input_shapes"] + "\x1f" + key["data_type"]
    joined = joined + "\x1f" + key["direction"]
    uniq, inv = np.unique(joined.to_numpy(object), return_inverse=True)
    costs = np.array(
        [
            call_cost(t, s, d, r == "bprop")
            for t, s, d, r in (u.split("\x1f") for u in uniq.tolist())
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


__all__ = ["call_cost", "dtype_class", "op_costs", "op_kind", "parse_shapes", "roofline"]
