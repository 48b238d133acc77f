"""Bad Tensor Shape Detector (guide §10.10): Tensor Core eligible ops that ran no Tensor Core
kernel because of their recorded shapes or data types.

DLProf ran it for TensorFlow only; the shapes and data types come from the op's NVTX text here,
so it works for every framework that records them: TensorFlow's detailed markers, ``jlprof.torch``
and ``emit_nvtx`` (``sizes =``) for PyTorch. Rules (NVIDIA's Deep Learning Performance guide,
"Tensor Core requirements"): FP16/BF16 GEMMs and convolutions need the reduced and output
dimensions (K, N; input channels C, output channels K) to be multiples of 8, INT8 of 16;
FP64 and integer types other than INT8 never run on Tensor Cores. FP32 is the AMP detector's
case (it needs a precision change, not a shape change).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from jlprof.engine.correlate.tensorcore import explain_op_type
from jlprof.reports.finding import Finding
from jlprof.reports.tables import detail

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

ALIGN = {"float16": 8, "half": 8, "bfloat16": 8, "fp16": 8, "bf16": 8, "int8": 16, "qint8": 16}
BAD_TYPES = frozenset({"float64", "double", "int16", "int32", "int64", "uint8", "bool"})
TOP = 5
_TF_MODES = ("tensorflow1", "tensorflow2")


def _shapes(text: str) -> list[list[int]] | None:
    """``[[8,3,16,16],[4,3,3,3]]`` (jlprof.torch, TF, emit_nvtx's ``sizes``) as lists."""
    try:
        val = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(val, list):
        return None
    out = []
    for s in val:
        if not isinstance(s, list) or not all(isinstance(d, int) for d in s):
            out.append([])
        else:
            out.append(s)
    return out


def misaligned(
    op_type: str, shapes: list[list[int]], align: int, channels_last: bool
) -> dict[str, int]:
    """The dimensions of a convolution or GEMM that are not multiples of ``align``, by name."""
    kind = explain_op_type(op_type).family
    dims: dict[str, int] = {}
    if kind == "convolution" and len(shapes) >= 2 and len(shapes[0]) >= 3 and len(shapes[1]) >= 3:
        x, w = shapes[0], shapes[1]
        # NCHW input, KCRS filter (PyTorch); NHWC input, RSCK filter (TensorFlow)
        dims = {"C": x[-1], "K": w[-1]} if channels_last else {"C": x[1], "K": w[0]}
    elif kind == "matrix multiplication":
        mats = [s for s in shapes if len(s) >= 2]  # addmm's bias comes first: skip vectors
        if len(mats) >= 2:
            a, b = mats[0], mats[1]  # a [.., M, K]; b [K, N] (mm, MatMul) or [N, K] (linear)
            dims = {"K": a[-1], "N": b[-2] if b[-1] == a[-1] else b[-1]}
    return {k: v for k, v in dims.items() if v % align}


def bad_tensor_shape(p: Analysis, lo: int, hi: int) -> list[Finding]:
    det = detail(p, lo, hi)
    if "Input Shapes" not in det:
        return []
    sel = det[det["TC Eligibility"] & ~det["Using TC"] & (det["Total GPU Time (ns)"] > 0)]
    channels_last = p.mode in _TF_MODES
    ops: list[dict[str, Any]] = []
    cols = ["Op ID", "Op Type", "Data Type", "Input Shapes", "Total GPU Time (ns)"]
    for r in sel[cols].to_dict("records"):  # per op (a few hundred), not per kernel
        dtype = str(r["Data Type"] or "").lower()
        op_id, op_type, gpu_ns = r["Op ID"], r["Op Type"], int(r["Total GPU Time (ns)"])
        shapes = _shapes(str(r["Input Shapes"] or ""))
        if dtype in BAD_TYPES:
            ops.append({"op_id": op_id, "op_type": op_type, "data_type": dtype,
                        "gpu_time_ns": gpu_ns, "why": f"data type {dtype}"})  # fmt: skip
            continue
        align = ALIGN.get(dtype)
        if align is None or not shapes:
            continue
        bad = misaligned(op_type, shapes, align, channels_last)
        if bad:
            what = ", ".join(f"{k}={v}" for k, v in bad.items())
            ops.append({"op_id": op_id, "op_type": op_type, "data_type": dtype,
                        "input_shapes": shapes, "misaligned": bad, "gpu_time_ns": gpu_ns,
                        "why": f"{what} not a multiple of {align}"})  # fmt: skip
    if not ops:
        return []
    ops.sort(key=lambda o: -o["gpu_time_ns"])
    total = sum(o["gpu_time_ns"] for o in ops)
    first = ops[0]
    return [
        Finding(
            "Bad Tensor Shape Detector",
            f"{len(ops)} Tensor Core eligible op(s) ran no Tensor Core kernel because of their "
            f"tensor shape or data type ({total / 1e6:.2f} ms of GPU time), e.g. "
            f"{first['op_id']}: {first['why']}.",
            "Pad channel, hidden and vocabulary sizes (and the batch of a GEMM) to multiples "
            "of 8 for FP16/BF16 (16 for INT8), and run eligible ops in FP16/BF16/TF32 rather "
            "than FP64 or integer types.",
            {"ops": ops[:TOP], "ops_count": len(ops), "gpu_time_ns": total},
        )
    ]


__all__ = ["ALIGN", "BAD_TYPES", "bad_tensor_shape", "misaligned"]
