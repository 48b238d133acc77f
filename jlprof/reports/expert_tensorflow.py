"""No Fusion Detector (guide §10.10, TensorFlow 1.x in DLProf; here for ``-m tensorflow1`` and
``-m tensorflow2``): fusion is off when convolutions and matrix products run beside separate
bias-add and activation ops and no fused op (Grappler's remapper: ``_FusedConv2D``,
``_FusedMatMul``, ``_FusedBatchNormEx``; XLA clusters) appears anywhere in the profile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jlprof.reports.finding import Finding
from jlprof.reports.tables import detail

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

MODES = ("tensorflow1", "tensorflow2")
PRODUCERS = frozenset({"Conv2D", "Conv3D", "DepthwiseConv2dNative", "MatMul", "BatchMatMulV2"})
FUSABLE = frozenset({"BiasAdd", "Relu", "Relu6", "Elu", "LeakyRelu", "Selu", "Sigmoid", "Tanh"})
TOP = 5


def _fused(op_type: str) -> bool:
    return op_type.startswith(("_Fused", "XLA ", "_XlaRun")) or op_type in ("XlaLaunch",)


def no_fusion(p: Analysis, lo: int, hi: int) -> list[Finding]:
    if p.mode not in MODES:
        return []
    det = detail(p, lo, hi)
    types = det["Op Type"].astype(str)
    if not types.isin(PRODUCERS).any() or types.map(_fused).any():
        return []
    loose = det[types.isin(FUSABLE) & (det["Total GPU Time (ns)"] > 0)]
    if loose.empty:
        return []
    gpu_ns = int(loose["Total GPU Time (ns)"].sum())
    top = loose.nlargest(TOP, "Total GPU Time (ns)")
    return [
        Finding(
            "No Fusion Detector",
            f"Fusion appears disabled: {len(loose)} bias-add/activation op(s) run as separate "
            f"kernels after convolutions and matrix products ({gpu_ns / 1e6:.2f} ms of GPU "
            "time), and no fused op (_FusedConv2D, _FusedMatMul, XLA cluster) ran.",
            "Keep Grappler's remapper on (RewriterConfig remapping is ON by default; do not "
            "turn it off) or enable XLA auto-clustering (TF_XLA_FLAGS=--tf_xla_auto_jit=2), so "
            "that Conv2D/MatMul + BiasAdd + activation run as one kernel.",
            {
                "ops": list(top["Op ID"]),
                "fusable_ops": len(loose),
                "gpu_time_ns": gpu_ns,
                "op_types": sorted(set(loose["Op Type"])),
            },
        )
    ]


__all__ = ["FUSABLE", "PRODUCERS", "no_fusion"]
