"""Short kernel names that say which kernel it is.

nsys's short name is the function's own name: for ``void cutlass_cudnn::Kernel<cutlass_
tensorop_s1688fprop_optimized_tf32_256x64_16x4_nhwc>(T1::Params)`` it is ``Kernel``, shared by
every CUTLASS/cuDNN kernel of that template. Where the function name says nothing
(:data:`UNTELLING`), the short name shown is the template argument that identifies the kernel
(a CUTLASS configuration name), else the function qualified by its namespace
(``gemvx::kernel``). The demangled name, the kernel's identity, is unchanged.
"""

from __future__ import annotations

import re

import numpy as np

#: Function names (compared lower-case) that tell no kernel from another.
UNTELLING = frozenset({"kernel", "kernel_entry", "kernel2", "device_kernel", "global_kernel"})

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*")
# a template argument names the kernel when it is a configuration-like identifier: long,
# with underscores (cutlass_80_simt_sgemm_128x32_8x5_nn_align1), not a type like int or float2
_TELLING_ARG = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+){2,}")
_MIN_ARG = 12


def telling_name(short: str, long: str) -> str:
    """``short`` itself unless it is in :data:`UNTELLING` and ``long`` (the demangled name)
    says more: its first template argument when that is a configuration name, else
    ``namespace::short``."""
    if short.lower() not in UNTELLING or not long:
        return short
    at = _function_at(short, long)
    if at < 0:
        return short
    after = at + len(short)
    if after < len(long) and long[after] == "<":
        arg = _first_template_arg(long, after)
        name = arg.split("::")[-1]
        if len(name) >= _MIN_ARG and _TELLING_ARG.fullmatch(name):
            return name
    before = long[:at]
    if before.endswith("::"):
        m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)::$", before)
        if m:
            return f"{m.group(1)}::{short}"
    return short


def _function_at(short: str, long: str) -> int:
    """Where the function's own name starts in the demangled name (followed by ``<`` or
    ``(``, preceded by ``::``, a space or nothing); -1 when not found."""
    for m in re.finditer(re.escape(short) + r"(?=[<(])", long):
        i = m.start()
        if i == 0 or long[i - 1] in ": ":
            return i
    return -1


def _first_template_arg(long: str, lt: int) -> str:
    """The first top-level argument of the template list opening at ``long[lt] == '<'``."""
    depth, i = 0, lt
    for i in range(lt, len(long)):
        c = long[i]
        if c in "<([":
            depth += 1
        elif c in ">)]":
            depth -= 1
            if depth == 0:
                break
        elif c == "," and depth == 1:
            break
    arg = long[lt + 1 : i].strip()
    m = _IDENT.match(arg)
    return m.group(0) if m and m.end() == len(arg) else ""


def telling_names(short: np.ndarray, long: np.ndarray) -> np.ndarray:
    """:func:`telling_name` of each pair (object arrays of equal length); a copy."""
    out = np.asarray(short, dtype=object).copy()
    for i, s in enumerate(out):
        if isinstance(s, str) and s.lower() in UNTELLING:
            out[i] = telling_name(s, str(long[i]))
    return out
