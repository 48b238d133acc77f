"""PyProf's kernel table (``python -m pyprof.prof``): one row per kernel, 20 columns.

PyProf (NVIDIA/PyProf, Apache-2.0, ``pyprof/parse`` + ``pyprof/prof``) bins the NVTX ranges
around each kernel's launching call into layer (``layer:``), trace (``traceMarker``), module
repr (``strRepr``), PyProf op (``{'mod', 'op', 'args'}``), sequence (emit_nvtx ``, seq =``)
and other markers, then asks a per-op model for the kernel's parameters, FLOPs, bytes and
Tensor Core use. This module does the same from the correlated trace:

- the enclosing ranges are the launching call's innermost range and its parents (the call's
  thread, DESIGN.md rule 2), walked once per distinct innermost range;
- the op is the **outermost** PyProf op marker, as PyProf takes it (``F.linear``, not the
  ``addmm`` it calls; a wrapper range that was never popped, e.g. ``__getattr__`` in
  mmagic-pyprof-a100, names every later kernel, in PyProf as here); a backward kernel without
  one takes the last forward kernel's marker with the same sequence id (``findFpropKernel``);
- ``seq`` is parsed with :mod:`jlprof.engine.correlate.emit_nvtx` (every PyTorch spelling, ``op_id``
  suffix included): the kernel's sequence id as PyProf's ``parse.py`` picks it (forward: the
  first id above the previous kernel's), ``altseq`` the other ids of the enclosing ranges;
- the models (:func:`op_model`) are PyProf's for linear, conv1d/2d, addmm/mm/bmm/matmul,
  pointwise ops, copy/clone/contiguous, embedding, dropout, norm, softmax, log_softmax,
  batch_norm and the activations; any other op, or a call whose arguments PyProf's model
  asserts against (where PyProf stops with an AssertionError), gets PyProf's fallback (``T=``
  shapes, 0 FLOPs, 0 bytes). The formulas are PyProf's as it computes them, quirks included (its
  linear GEMM bytes ``M*N + M*K + N*K*size`` scale only the weight by the element size), so
  the table prints what PyProf printed.

:func:`format_params` is PyProf's ``Data.setParams``: a parameter dict as ``M=64,N=8,K=32,fp16,``.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable
from functools import lru_cache
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from jlprof.engine.correlate import emit_nvtx

if TYPE_CHECKING:
    from jlprof.engine.correlate.correlate import Correlated

COLUMNS = ("idx", "seq", "altseq", "tid", "layer", "trace", "dir", "sub", "mod", "op",
           "kernel", "params", "sil", "tc", "device", "stream", "grid", "block", "flops",
           "bytes")  # fmt: skip
DEFAULT_COLUMNS = ("idx", "dir", "sub", "mod", "op", "kernel", "params", "sil")

# PyProf's tc.py: kernel-name fragments of Tensor Core kernels
TC_WHITELIST = ("h884", "s884", "h1688", "s1688", "hmma", "i8816", "16816",
                "dgrad_1x1_stride_2x2", "first_layer_wgrad_kernel", "conv1x1", "conv2d_c1_k1",
                "direct_group", "xmma_implicit_gemm", "xmma_sparse_conv",
                "xmma_warp_specialized_implicit_gemm", "xmma_gemm", "xmma_sparse_gemm",
                "c1688")  # fmt: skip
# PyProf's Dtype table: (bytes, printed name)
DTYPES = {"uint8": (1, "uint8"), "int8": (1, "int8"), "byte": (1, "byte"), "char": (1, "char"),
          "bool": (1, "bool"), "float16": (2, "fp16"), "half": (2, "fp16"),
          "bfloat16": (2, "bf16"), "int16": (2, "int16"), "short": (2, "int16"),
          "float32": (4, "fp32"), "float": (4, "fp32"), "int32": (4, "int32"),
          "int": (4, "int32"), "int64": (8, "int64"), "long": (8, "int64"),
          "float64": (8, "fp64"), "double": (8, "fp64")}  # fmt: skip
# trace frames PyProf's filterTrace drops (library code between the user's line and the op)
TRACE_SKIP = ("/torch/nn/modules/", "/torch/nn/functional.py", "/torch/tensor.py",
              "/torch/autograd/__init__.py", "/torch/_jit_internal.py",
              "/pyprof/nvtx/nvmarker.py", "/apex/optimizers/", "/torch/_utils.py",
              "/torch/optim/")  # fmt: skip
_BPROP = ("_backward, seq =", "Backward, seq =", "Backward0, seq =")


def _size(t: str) -> int:
    return DTYPES.get(str(t).replace("torch.", ""), (4, ""))[0]


def _tname(t: Any) -> str:
    if isinstance(t, str):
        return DTYPES.get(t.replace("torch.", ""), (0, t))[1]
    return str(t)


def format_params(params: dict[str, Any] | str) -> str:
    """PyProf's ``Data.setParams``: ``key=value,`` per entry, a ``type`` entry as its short
    name (``fp16,``), spaces dropped; a string is kept as it is. The one shapes -> text rule
    of this table (``{'M': 64, 'N': (8, 4), 'type': 'float16'}`` -> ``M=64,N=(8,4),fp16,``)."""
    if isinstance(params, str):
        return params
    out = ""
    for key, value in params.items():
        if "type" not in key:
            out += f"{key}={value},"
        elif isinstance(value, str):
            out += f"{_tname(value)},"
        else:
            out += f"{value}"
    return out.replace(" ", "")


def short_name(name: str) -> str:
    """PyProf's ``getShortName`` of a demangled kernel name (template and argument lists,
    ``void`` and the ``at::``/``native::``/``cuda::`` namespaces dropped); a mangled
    (``_Z...``, nvprof's) name is reduced to its qualified function name first."""
    if name.startswith("_Z"):
        name = _mangled_function(name)
    s = name.replace("<unnamed>::", "").split("<")[0]  # newer demanglers' anonymous namespace
    for drop in ("void ", "at::", "cuda::", "native::", "(anonymous namespace)::"):
        s = s.replace(drop, "")
    return s.split("(")[0].replace(" ", "_")


_SOURCE = re.compile(r"(\d+)")


def _mangled_function(name: str) -> str:
    """``_ZN2at6native18elementwise_kernelILi128E...`` -> ``at::native::elementwise_kernel``:
    the Itanium nested name's source names up to its template arguments (enough for a
    kernel's short name; no full demangler)."""
    i = 2
    nested = name[i : i + 1] == "N"
    i += 1 if nested else 0
    parts: list[str] = []
    while i < len(name):
        if name.startswith("St", i):
            parts.append("std")
            i += 2
            continue
        if name[i] == "L":  # internal linkage prefix
            i += 1
            continue
        m = _SOURCE.match(name, i)
        if m is None:
            break
        n = int(m.group(1))
        ident = name[m.end() : m.end() + n]
        parts.append("(anonymous namespace)" if ident.startswith("_GLOBAL__N") else ident)
        i = m.end() + n
        if not nested:
            break
    return "::".join(parts) or name


def _numel(shape: Any) -> int:
    return math.prod(int(d) for d in shape) if shape else 1


def _positional(args: list[dict]) -> list[dict]:
    return [a for a in args if isinstance(a, dict) and a.get("name", "") == ""]


def _named(args: list[dict], key: str) -> dict | None:
    for a in args:
        if isinstance(a, dict) and a.get("name") == key:
            return a
    return None


def _tc(kernel: str) -> int:
    return int(any(p in kernel for p in TC_WHITELIST))


Model = tuple  # (params, FLOPs, bytes, tc[, op name when the model renames it])

GEMM_KERNELS = ("gemm", "gemv", "dot_kernel", "splitKreduce_kernel", "reduce_1Block_kernel",
                "cutlass")  # fmt: skip


def _linear(args: list[dict], d: str, sub: int, kernel: str) -> Model:
    x, w = args[0], args[1]
    t = x["dtype"]
    xs, ws = tuple(x["shape"]), tuple(w["shape"])
    n_t, k = xs[:-1], xs[-1]
    m = ws[0]
    n: Any = n_t[0] if len(n_t) == 1 else n_t
    nn = _numel(n_t)
    s = _size(t)
    if any(g in kernel for g in GEMM_KERNELS):
        tc: Any = _tc(kernel)
        if d == "bprop" and sub == 0:
            p: dict[str, Any] = {"M": k, "N": n, "K": m, "type": t}
        elif d == "bprop" and sub == 1:
            p = {"M": k, "N": m, "K": n, "type": t}
        elif d == "bprop":  # extra reduction kernels
            return {"X": xs, "W": ws, "type": t}, 0.0, 0.0, tc
        else:
            p = {"M": m, "N": n, "K": k, "type": t}
        # PyProf's byte count as it computes it: only N*K is scaled by the element size
        return p, 2.0 * m * nn * k, float(m * nn + m * k + nn * k * s), tc
    bias: Model = ({"M": m, "N": n, "type": t}, float(m * nn), float(2 * m * nn * s), "-")
    return (*bias, "bias")  # PyProf names a linear's bias kernel op "bias"


CONV_AUX = ("nchwToNhwc", "nhwcToNchw", "OffsetsKernel", "generateWinogradTilesKernel",
            "winogradWgradData", "winogradWgradOutput", "winogradWgradDelta",
            "compute_gemm_pointers", "flip_filter", "fft2d_r2c_", "fft2d_c2r_", "fft1d_r2c",
            "fft1d_c2r", "scaleTensor_kernel")  # fmt: skip
CONV_MAIN = ("_s884cudnn_", "_s1688cudnn_", "_scudnn_", "2d_grouped_direct_kernel",
             "cudnn::detail::implicit_convolve_sgemm", "cudnn::detail::dgrad2d_alg1_1",
             "cudnn::detail::wgrad_alg0_engine", "cudnn::detail::dgrad_engine",
             "dgrad_1x1_stride_2x2", "spatialDepthwiseConvolutionUpdateOutput",
             "winograd3x3Kernel", "_sgemm_", "fermiPlusCgemmLDS128_batched",
             "_gcgemm_")  # fmt: skip


def _arg(args: list[dict], pos: int, key: str, default: Any) -> Any:
    if len(args) > pos and args[pos].get("name", "") == "":
        return args[pos].get("value", default)
    a = _named(args, key)
    return a.get("value", default) if a else default


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[-1]))
    return (int(v), int(v))


def _conv(op: str, args: list[dict], kernel: str) -> Model:
    i, w = args[0], args[1]
    t = i["dtype"]
    stride, pad = _arg(args, 3, "stride", 1), _arg(args, 4, "padding", 0)
    dil, g = _arg(args, 5, "dilation", 1), int(_arg(args, 6, "groups", 1))
    if op == "conv1d":
        n, c, wd = i["shape"]
        k, _, s_ = w["shape"]
        h = r = 1
        ph, uh, dh = 0, 1, 1
        pw, vw, dw = _pair(pad)[0], _pair(stride)[0], _pair(dil)[0]
    else:
        n, c, h, wd = i["shape"]
        k, _, r, s_ = w["shape"]
        (ph, pw), (uh, vw), (dh, dw) = _pair(pad), _pair(stride), _pair(dil)
    p_ = int(1 + (h + 2 * ph - ((r - 1) * dh + 1)) / uh)
    q_ = int(1 + (wd + 2 * pw - ((s_ - 1) * dw + 1)) / vw)
    params = {"N": n, "C": c, "H": h, "W": wd, "K": k, "P": p_, "Q": q_, "R": r,
              "S": s_, "ph": ph, "pw": pw, "U": uh, "V": vw, "dh": dh, "dw": dw, "g": g,
              "type": t}  # fmt: skip

    def cost(c_: float, k_: float, g_: int) -> tuple[float, float]:
        f = 2 * n * k_ * p_ * q_ * c_ * r * s_ / g_
        e = n * c_ * h * wd + k_ * c_ * r * s_ / g_ + n * k_ * p_ * q_
        return f, e * _size(t)

    if any(x in kernel for x in CONV_AUX):
        f, b = 0.0, 0.0
    elif any(x in kernel for x in CONV_MAIN):
        one_kernel = g == 1 or any(
            x in kernel for x in ("2d_grouped_direct_kernel", "spatialDepthwiseConvolution")
        )
        f, b = cost(c, k, g) if one_kernel else cost(c / g, k / g, 1)
    elif "calc_bias_diff" in kernel:
        e = n * k * p_ * q_
        f, b = float(e), float(2 * e * _size(t))
    else:
        f, b = 0.0, 0.0
    return params, f, b, 1 if _tc(kernel) else "-"


def _gemm_like(op: str, args: list[dict], kernel: str) -> Model:
    pos = _positional(args)
    if op in ("addmm", "addmm_"):
        _, a, b_ = pos[:3]
        (m, k), (_, n) = a["shape"], b_["shape"]
        t = a["dtype"]
        p = {"M": n, "N": m, "K": k, "type": t}
        return p, 2.0 * m * n * k, float(_size(t) * (m * n + m * k + n * k)), _tc(kernel)
    if op == "mm":
        a, b_ = pos[:2]
        (m, k), (_, n) = a["shape"], b_["shape"]
        t = a["dtype"]
        p = {"M": n, "N": m, "K": k, "type": t}
        return p, 2.0 * m * n * k, float(_size(t) * (m * n + m * k + n * k)), _tc(kernel)
    if op == "bmm":
        a, b_ = pos[:2]
        (bb, m, k), (_, _, n) = a["shape"], b_["shape"]
        t = a["dtype"]
        p = {"B": bb, "M": n, "N": m, "K": k, "type": t}
        flops = 2.0 * bb * m * n * k
        return p, flops, float(_size(t) * bb * (m * n + m * k + n * k)), _tc(kernel)
    # matmul / __matmul__
    a, b_ = pos[:2]
    t = a["dtype"]
    sa, sb = list(a["shape"]), list(b_["shape"])
    p = {"A": tuple(sa), "B": tuple(sb), "type": t}
    non_gemm = ("kernelPointwiseApply2", "reduce_1Block_kernel", "elementwise_kernel")
    if kernel in non_gemm:
        return p, 0.0, float(2 * _size(t) * _numel(sa)), "-"
    a2 = sa if len(sa) > 1 else [1, *sa]
    b2 = sb if len(sb) > 1 else [*sb, 1]
    m, k, n = a2[-2], a2[-1], b2[-1]
    batch = _numel(np.broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2])))
    tc = "-" if kernel in (*non_gemm, "dot_kernel") else _tc(kernel)
    return p, 2.0 * batch * m * n * k, float(_size(t) * (m * n + m * k + n * k)), tc


UNARY = {"abs", "abs_", "neg", "neg_", "reciprocal", "reciprocal_", "__abs__", "__neg__",
         "__invert__", "ceil", "ceil_", "clamp", "clamp_", "floor", "floor_", "frac", "frac_",
         "round", "round_", "sign", "sign_", "trunc", "trunc_"}  # fmt: skip
TRANSCENDENTAL = {"exp", "exp_", "exp1m", "exp1m_", "log", "log_", "log10", "log10_", "log1p",
                  "log1p_", "log2", "log2_", "rsqrt", "rsqrt_", "sqrt", "sqrt_", "acos", "acos_",
                  "asin", "asin_", "atan", "atan_", "atan2", "atan2_", "cos", "cos_", "cosh",
                  "cosh_", "sin", "sin_", "sinh", "sinh_", "tan", "tan_", "sigmoid", "sigmoid_",
                  "tanh", "tanh_", "erf", "erf_", "erfc", "erfc_", "erfinv",
                  "erfinv_"}  # fmt: skip
COMPARE = {"lt", "lt_", "gt", "gt_", "ge", "ge_", "le", "le_", "eq", "eq_", "ne", "ne_",
           "__lt__", "__gt__", "__ge__", "__le__", "__eq__", "__ne__"}  # fmt: skip
BINARY = {"add", "add_", "div", "div_", "mul", "mul_", "remainder", "remainder_", "sub", "sub_",
          "__add__", "__sub__", "__mul__", "__floordiv__", "__truediv__", "__mod__", "__radd__",
          "__rsub__", "__rmul__", "__rdiv__", "__rtruediv__", "__rfloordiv__", "fmod", "fmod_",
          "__iadd__", "__isub__", "__imul__", "__itruediv__", "__and__", "__or__", "__xor__",
          "__lshift__", "__rshift__", "__iand__", "__ior__", "__ixor__", "__ilshift__",
          "__irshift__"} | COMPARE  # fmt: skip
POWER = {"pow", "pow_", "__pow__", "__rpow__"}
TERNARY = {"addcdiv", "addcdiv_", "addcmul", "addcmul_"}
POINTWISE = UNARY | TRANSCENDENTAL | BINARY | POWER | TERNARY


def _pointwise(op: str, args: list[dict], d: str) -> Model | None:
    ts: list[tuple[list[int], str]] = []
    for a in _positional(args):
        if a.get("type") == "tensor":
            ts.append((list(a["shape"]), a["dtype"]))
        elif a.get("type") in ("float", "int"):
            ts.append(([], a["type"]))
        else:
            return None
    params = ";".join(str(s).replace(" ", "") + _tname(t) for s, t in ts)

    def nbytes(s: list[int], t: str) -> int:
        return _numel(s) * _size(t)

    def out() -> tuple[list[int], str]:
        return list(np.broadcast_shapes(*[tuple(s) for s, _ in ts])), ts[0][1]

    if not ts:
        return None
    if op in UNARY:
        return params, float(_numel(ts[0][0])), float(2 * nbytes(*ts[0])), "-"
    if op in TRANSCENDENTAL:
        if len(ts) != 1:  # where PyProf's model asserts, the fallback answers
            return None
        return params, float(20 * _numel(ts[0][0])), float(2 * nbytes(*ts[0])), "-"
    if op in TERNARY:
        ts = [x for x in ts if x[0]]
    if len(ts) != (3 if op in TERNARY else 2):  # e.g. the old add_(alpha, other): PyProf stops
        return None
    o, ot = out()
    if op in BINARY and d == "bprop":
        if op in ("add", "__add__", "sub", "__sub__", "__isub__"):
            return params, 0.0, float(2 * nbytes(o, ot)), "-"
        if op in ("__mul__", "__imul__", "__rmul__", "div", "__truediv__"):
            return params, float(_numel(o)), float(3 * nbytes(o, ot)), "-"
        return None
    b = sum(nbytes(s, t) for s, t in ts) + nbytes(o, "bool" if op in COMPARE else ot)
    f = {True: 20, False: 3 if op in TERNARY else 1}[op in POWER] * _numel(o)
    return params, float(f), float(b), "-"


def _copy_like(op: str, args: list[dict]) -> Model | None:
    if op == "copy_" and len(args) == 2:
        dst, src = args
        p = {"T": tuple(src["shape"]), "stype": src["dtype"], "dtype": dst["dtype"]}
        return (
            p,
            0.0,
            float(_numel(src["shape"]) * (_size(src["dtype"]) + _size(dst["dtype"]))),
            "-",
        )
    if op in ("clone", "contiguous") and len(args) == 1:
        t = args[0]
        nb = 2 * _numel(t["shape"]) * _size(t["dtype"])
        return {"T": tuple(t["shape"]), "type": t["dtype"]}, 0.0, float(nb), "-"
    return None


def _tensor(a: dict) -> tuple[list[int], str]:
    return list(a["shape"]), a["dtype"]


def _tstr(shape: list[int], dtype: str) -> str:
    """PyProf's ``str(Tensor)``: ``[35,20,200]fp32``."""
    return str(list(shape)).replace(" ", "") + _tname(dtype)


ACTIVATION = {"celu", "elu", "elu_", "hardshrink", "hardtanh", "hardtanh_", "leaky_relu",
              "leaky_relu_", "logsigmoid", "prelu", "relu", "relu_", "relu6", "rrelu", "rrelu_",
              "selu", "sigmoid", "softplus", "softshrink", "softsign", "tanh", "tanhshrink",
              "threshold", "threshold_"}  # fmt: skip


def _layers(op: str, args: list[dict], d: str, sub: int) -> Model | None:
    """PyProf's embedding, dropout, norm, softmax, log_softmax, batch_norm and activation
    models (``pyprof/prof/{embedding,dropout,reduction,softmax,normalization,activation}.py``)."""
    pos = _positional(args)
    if op == "embedding":
        (si, ti), (se, te) = _tensor(args[0]), _tensor(args[1])
        n = _numel(si)
        b = n * _size(ti) + 2 * n * se[1] * _size(te) if d == "fprop" else 3 * n * se[1] * _size(te)
        b = 0 if d != "fprop" and sub > 0 else b
        return f"{_tstr(si, ti)};{_tstr(se, te)}", 0.0, float(b), "-"
    if op == "dropout":
        sh, t = _tensor(args[0])
        return _tstr(sh, t), float(5 * _numel(sh)), float(2 * _numel(sh) * _size(t)), "-"
    if op == "norm":
        sh, t = _tensor(args[0])
        e = _numel(sh)
        f, b = (2 * e + 1, e * _size(t)) if sub == 0 else (0, 0)
        return {"T": tuple(sh), "type": t}, float(f), float(b), "-"
    if op in ("softmax", "log_softmax", "batch_norm") or op in ACTIVATION:
        sh, t = _tensor(pos[0] if op in ("softmax", "log_softmax") or op in ACTIVATION else args[0])
        e, nb = _numel(sh), _numel(sh) * _size(t)
        if op == "softmax":
            return _tstr(sh, t), float(40 * e), float(nb * (3 if d == "fprop" else 5)), "-"
        if op == "log_softmax":
            return _tstr(sh, t), float(21 * e), float(nb * (3 if d == "fprop" else 5)), "-"
        if op == "batch_norm":
            b = 0 if sub > 0 else nb * (4 if d == "fprop" else 5)
            return _tstr(sh, t), float(8 * e), float(b), "-"
        return _tstr(sh, t), float(e), float(nb * (2 if d == "fprop" else 3)), "-"
    return None


def _fallback(args: list[dict]) -> Model:
    shapes = [tuple(a["shape"]) for a in args if a.get("type") == "tensor"]
    types = [a["dtype"] for a in args if a.get("type") == "tensor"]
    return {"T": shapes, "type": types}, 0.0, 0.0, "-"


def op_model(
    op: str, args: list[dict], direction: str, sub: int, kernel: str
) -> tuple[dict[str, Any] | str, float, float, Any, str]:
    """PyProf's per-op model (``prof.py``'s ``foo``) for one kernel of op ``op`` called with
    ``args`` (the marker's list): (params, FLOPs, bytes, tc, op name: ``bias`` for a linear's
    bias kernel, else ``op``). An op or argument list the models do not take gets PyProf's
    fallback: its tensor shapes, 0 and 0."""
    fn: Callable[[], Model | None]
    if op == "linear":
        fn = lambda: _linear(args, direction, sub, kernel)  # noqa: E731
    elif op in ("conv1d", "conv2d"):
        fn = lambda: _conv(op, args, kernel)  # noqa: E731
    elif op in ("addmm", "addmm_", "mm", "bmm", "matmul", "__matmul__"):
        fn = lambda: _gemm_like(op, args, kernel)  # noqa: E731
    elif op in POINTWISE:  # before the activations, as PyProf (sigmoid, tanh)
        fn = lambda: _pointwise(op, args, direction)  # noqa: E731
    elif op in ("embedding", "dropout", "norm", "softmax", "log_softmax", "batch_norm") or (
        op in ACTIVATION
    ):
        fn = lambda: _layers(op, args, direction, sub)  # noqa: E731
    else:
        fn = lambda: _copy_like(op, args)  # noqa: E731
    try:
        got = fn()
    except (KeyError, ValueError, TypeError, IndexError, ZeroDivisionError):
        got = None
    if got is None:
        try:
            got = _fallback(args)
        except (KeyError, TypeError):
            got = ({"T": [], "type": []}, 0.0, 0.0, "-")
    return (*got[:4], got[4] if len(got) > 4 else op)


def _eval(text: str) -> dict | None:
    try:
        d = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return d if isinstance(d, dict) else None


def _seq_key(m: str) -> str:
    """PyProf's ``seqcompare``: by sequence id text, then name."""
    parts = m.split(" = ")
    return parts[1] + parts[0] if len(parts) > 1 else m


def _prune(marks: list[str]) -> list[str]:
    """PyProf's ``prune``: drop a marker with the previous one's sequence id and a name
    containing (or contained in) the previous name."""
    out = marks[:1]
    for prev, m in pairwise(marks):
        name, _, seq = m.partition(",")
        pname, _, pseq = prev.partition(",")
        if not (seq == pseq and (name in pname or pname in name)):
            out.append(m)
    return out


def _sanitize(name: str) -> str:
    for drop in ("torch", "autograd", "_backward", "::", "jit", "(anonymous namespace)"):
        name = name.replace(drop, "")
    return name.partition("Backward")[0]


@lru_cache(maxsize=1 << 16)
def _classify(m: str) -> tuple[str, Any, bool]:
    """PyProf's bin of one range text, decoded once per distinct text: (kind, value, opens a
    backward node). ``pyprof``: the marker dict; ``layer``: the name; ``trace``: the kept
    frames, ``,``-joined; ``seq``: the sequence id (-1 unparsed); ``skip``/``repr``/``other``."""
    if "CheckpointFunctionBackward" in m:
        return "skip", None, False
    e = emit_nvtx.parse(m) if ", seq" in m or ", stashed seq" in m else None
    bprop = any(b in m for b in _BPROP) or bool(e and e.node)
    if "mod" in m and "op" in m and "args" in m and "type" in m:
        d = _eval(m)
        return ("pyprof", d, bprop) if d is not None and "op" in d else ("skip", None, bprop)
    if "layer:" in m:
        return "layer", m.split(":")[1], bprop
    if "traceMarker" in m:
        d = _eval(m)
        frames = d.get("traceMarker") if d else None
        keep = [str(f) for f in frames if not any(s in str(f) for s in TRACE_SKIP)] if (
            isinstance(frames, list)) else []  # fmt: skip
        return "trace", ",".join(keep), bprop
    if "strRepr" in m:
        return "repr", None, bprop
    if ", seq = " in m or ", stashed seq = " in m:
        return "seq", e.seq if e is not None else -1, bprop
    return "other", None, bprop


class _Markers:
    """PyProf's ``getMarkerInfo`` bins for one stack of enclosing range texts (outermost first)."""

    __slots__ = ("bprop", "layer", "op", "ops", "other", "seq", "seq_texts", "trace")

    def __init__(self, texts: list[str]) -> None:
        self.layer: list[str] = []
        self.trace = ""
        self.op: dict | None = None
        pyprof: list[dict] = []
        seq_texts: list[str] = []
        other: list[str] = []
        trace_texts = []
        self.bprop = False
        for m in texts:
            kind, value, bprop = _classify(m)
            self.bprop = self.bprop or bprop
            if kind == "pyprof":
                pyprof.append(value)
            elif kind == "layer":
                self.layer.append(value)
            elif kind == "trace":
                trace_texts.append(m)
            elif kind == "seq":
                seq_texts.append(m)
            elif kind == "other" and m not in other:
                other.append(m)
        self.op = pyprof[0] if pyprof else None  # the outermost, as PyProf (module docstring)
        self.seq_texts = _prune(sorted(set(seq_texts), key=_seq_key))
        self.other = other
        self.seq = sorted({_classify(m)[1] for m in self.seq_texts} - {-1})
        # PyProf's setOp: every PyProf marker's op, else the backward nodes', else the
        # sequence markers' names, else the first other text; the sub-sequence id compares
        # these lists between consecutive kernels
        if pyprof:
            self.ops = tuple(str(d["op"]) for d in pyprof)
        else:
            back = [_sanitize(m.split(",")[0]) for m in self.seq_texts
                    if "backward, seq = " in m or "Backward, seq = " in m]  # fmt: skip
            fwd = [m.split(",")[0] for m in self.seq_texts if ", seq = " in m]
            self.ops = tuple(back or fwd or other[:1])
        if trace_texts:
            self.trace = _classify(trace_texts[-1])[1]


def _innermost(c: Correlated, calls: np.ndarray) -> list[tuple[int, ...]]:
    """Per API call row, the innermost range around it on each NVTX lane (thread x domain)
    of its thread (``start <= call start``, ``call end <= end``: DESIGN.md rule 2, every
    range, not the merged emit_nvtx call the ops use)."""
    out: list[list[int]] = [[] for _ in range(len(calls))]
    if c.nvtx is None or not len(c.nvtx) or c.range_lane is None or c.lane_tid is None:
        return [()] * len(calls)
    lane = np.asarray(c.range_lane, np.int64)
    start = c.nvtx["start_ns"].to_numpy(np.int64)
    end = c.nvtx["end_ns"].to_numpy(np.int64)
    parent = c.inst["parent"].to_numpy(np.int64)[: len(lane)]
    a_tid = c.trace.api["global_tid"].to_numpy(np.int64)[calls]
    a_start = c.trace.api["start_ns"].to_numpy(np.int64)[calls]
    a_end = c.trace.api["end_ns"].to_numpy(np.int64)[calls]
    order = np.lexsort((start, lane))
    bounds = np.searchsorted(lane[order], np.arange(len(c.lane_tid) + 1))
    for ln, tid in enumerate(np.asarray(c.lane_tid, np.int64).tolist()):
        rows = order[bounds[ln] : bounds[ln + 1]]
        q = np.flatnonzero(a_tid == tid)
        if not len(rows) or not len(q):
            continue
        pos = np.searchsorted(start[rows], a_start[q], side="right") - 1
        q, cand = q[pos >= 0], rows[pos[pos >= 0]]
        act = np.flatnonzero(end[cand] < a_end[q])
        while len(act):  # ends too early: climb to the first enclosing range
            cand[act] = parent[cand[act]]
            act = act[cand[act] >= 0]
            act = act[end[cand[act]] < a_end[q[act]]]
        for i, j in zip(q.tolist(), cand.tolist(), strict=True):
            if j >= 0:
                out[i].append(j)
    return [tuple(sorted(x)) for x in out]


def _stacks(c: Correlated, inner: list[tuple[int, ...]]) -> dict[tuple[int, ...], _Markers]:
    """The markers of each distinct set of innermost ranges: the ranges and their parents,
    outermost (earliest start) first. Each stack is decoded once."""
    out: dict[tuple[int, ...], _Markers] = {}
    if c.nvtx is None or not len(c.nvtx):
        return {k: _Markers([]) for k in set(inner)}
    parent = c.inst["parent"].to_numpy(np.int64)[: len(c.nvtx)].tolist()
    start = c.nvtx["start_ns"].to_numpy(np.int64).tolist()
    text = c.nvtx["text"].astype("category")
    cats = [str(x) for x in text.cat.categories] + [""]  # code -1: no text
    codes = text.cat.codes.to_numpy().tolist()
    for key in set(inner):
        rows: set[int] = set()
        for j in key:
            while j >= 0 and j not in rows:
                rows.add(j)
                j = parent[j]
        ordered = sorted(rows, key=lambda r: (start[r], r))
        out[key] = _Markers([cats[codes[r]] for r in ordered])
    return out


def prof_table(c: Correlated) -> pd.DataFrame:
    """One row per kernel, by start time, with PyProf's 20 columns (:data:`COLUMNS`) and
    ``gpu_row`` (the kernel's row of the trace's ``gpu`` frame). ``flops``/``bytes`` are 0
    where the op is not modelled or no PyProf marker encloses the kernel; ``params``, ``tc``,
    ``dir``, ``mod``, ``op`` are ``na`` (``params``: ``na=na,``, as PyProf prints it) where
    nothing was recorded."""
    g = c.trace.gpu
    is_kernel = (g["kind"] == "kernel").to_numpy()
    rows = np.flatnonzero(is_kernel)
    start = g["start_ns"].to_numpy(np.int64)[rows]
    rows = rows[np.argsort(start, kind="stable")]
    n = len(rows)
    api = c.gpu["api"].to_numpy(np.int64)[rows] if n else np.zeros(0, np.int64)
    api_tid = c.trace.api["global_tid"].to_numpy(np.int64)
    calls, call_of = np.unique(api[api >= 0], return_inverse=True)
    inner_calls = _innermost(c, calls)
    inner: list[tuple[int, ...]] = [()] * n
    for r, k in zip(np.flatnonzero(api >= 0).tolist(), call_of.tolist(), strict=True):
        inner[r] = inner_calls[k]
    stacks = _stacks(c, inner)
    tid = np.where(api >= 0, api_tid[np.maximum(api, 0)] & 0xFFFFFF, -1) if n else api
    names = g["long_name"].astype("category")  # one short name per distinct kernel name
    cat_short = np.array([short_name(str(x)) for x in names.cat.categories] + [""], dtype=object)
    short = cat_short[names.cat.codes.to_numpy()[rows]].tolist()
    gx = {k: g[k].to_numpy(np.int64)[rows] for k in ("grid_x", "grid_y", "grid_z", "block_x",
                                                     "block_y", "block_z")}  # fmt: skip
    recs: dict[str, list] = {k: [] for k in COLUMNS if k not in ("idx", "tid", "sil", "device",
                                                                "stream", "kernel")}  # fmt: skip
    # PyProf's findFpropKernel searches the kernels so far, latest first, for a forward one
    # with a sequence id (then an alternate id): the latest such kernel per id, kept as
    # they come (marker, op, mod, layer, trace), answers it without the search
    last_fprop: tuple[dict[int, tuple], dict[int, tuple]] = ({}, {})
    prev_seq, prev_sub, prev_op = -1, -1, ()
    modelled: dict[tuple, tuple] = {}
    for r in range(n):
        mk = stacks[inner[r]]
        d = "bprop" if mk.bprop else "fprop"
        seq = list(mk.seq)
        if 0 in seq and len(seq) > 1:  # PyProf: seq 0 (inner ops' default) yields to others
            seq.remove(0)
        marker, layer, trace = mk.op, mk.layer, mk.trace
        op = mk.ops[0] if mk.ops else ""
        mod = str(marker.get("mod", "")) if marker else ""
        if d == "bprop" and marker is None and seq:  # PyProf's findFpropKernel: by seq id,
            for found in last_fprop:  # then by alternate id
                h = found.get(seq[0])
                if h is not None:
                    marker, op, mod, layer, trace = h
                    break
        sub = 0
        if seq:  # PyProf's subSeqId: a kernel repeating the previous seq and op
            if d == "fprop":
                later = [s for s in seq if s > prev_seq]
                cur = later[0] if later else prev_seq
            else:
                cur = seq[0]
            if cur == prev_seq and mk.ops == prev_op:  # the kernel's own ops, as PyProf
                sub = prev_sub + 1
            prev_seq, prev_sub, prev_op = cur, sub, mk.ops
            alt = sorted(set(seq) - {cur})  # PyProf: the other ids are the alternates
            seq = [cur] if cur in seq else []
        else:
            alt = []
        if d == "fprop":  # its own markers, by its ids
            own = (mk.op, op, mod, mk.layer, mk.trace)
            for ids, found in zip((seq, alt), last_fprop, strict=True):
                for k in ids:
                    found[k] = own
        if marker is not None and isinstance(marker.get("args"), list):
            key = (id(marker), op, d, sub, short[r])  # markers are shared per distinct text
            if key not in modelled:
                params, flops, nbytes, tc, op2 = op_model(op, marker["args"], d, sub, short[r])
                modelled[key] = (format_params(params), flops, nbytes, tc, op2)
            ptext, flops, nbytes, tc, op = modelled[key]
        else:  # PyProf's defaults: params {"na": "na"}
            ptext, flops, nbytes, tc = "na=na,", 0.0, 0.0, "na"
        recs["seq"].append(",".join(map(str, seq)) or "-")
        recs["altseq"].append(",".join(map(str, alt)) or "-")
        recs["layer"].append(":".join(layer) or "-")
        recs["trace"].append(trace or "-")
        recs["dir"].append(d)
        recs["sub"].append(sub)
        recs["mod"].append(mod or "na")
        recs["op"].append(op or "na")
        recs["params"].append(ptext)
        recs["tc"].append(str(tc))
        recs["grid"].append(f"{gx['grid_x'][r]},{gx['grid_y'][r]},{gx['grid_z'][r]}")
        recs["block"].append(f"{gx['block_x'][r]},{gx['block_y'][r]},{gx['block_z'][r]}")
        recs["flops"].append(int(flops) if math.isfinite(flops) else 0)
        recs["bytes"].append(int(nbytes) if math.isfinite(nbytes) else 0)
    cols: dict[str, Any] = {
        "idx": np.arange(1, n + 1, dtype=np.int64),
        "tid": tid.astype(np.int64),
        "kernel": short,
        "sil": (g["end_ns"].to_numpy(np.int64) - g["start_ns"].to_numpy(np.int64))[rows],
        "device": g["device_id"].to_numpy(np.int64)[rows],
        "stream": g["stream_id"].to_numpy(np.int64)[rows],
    }
    cols.update(recs)
    out = pd.DataFrame({k: cols[k] for k in COLUMNS})
    for k in ("sub", "flops", "bytes"):
        out[k] = out[k].astype(np.int64)
    out["gpu_row"] = rows.astype(np.int64)
    return out


__all__ = ["COLUMNS", "DEFAULT_COLUMNS", "format_params", "op_model", "prof_table", "short_name"]
