"""Kernels are told apart by their demangled name (issue 16): template instantiations that
share a short name are separate kernel-report rows, each with its own Tensor Core verdict."""

from __future__ import annotations

from pathlib import Path

import jlprof
from tests.fixtures.nsysdb import NsysDb

# two CUTLASS GEMMs whose short name is ``Kernel``: one tensorop (TC), one SIMT (no TC)
TENSOROP = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)"
SIMT = "void cutlass::Kernel<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>(Params)"
ELEM_A = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int)"
ELEM_B = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>(int)"


def build(tmp_path: Path) -> jlprof.Profile:
    db = NsysDb()
    db.gpu(0, "NVIDIA A100-SXM4-40GB")
    t = db.process(10).thread()
    for i in range(2):
        b = i * 10_000
        t.push_pop("step", b, b + 9_000)
        t.launch(TENSOROP, b + 100, b + 110, b + 200, b + 1_200, short_name="Kernel")
        t.launch(SIMT, b + 300, b + 310, b + 1_300, b + 3_300, short_name="Kernel")
        t.launch(ELEM_A, b + 400, b + 410, b + 3_400, b + 3_450)
        t.launch(ELEM_B, b + 500, b + 510, b + 3_500, b + 3_570)
    return jlprof.load(db.write(tmp_path / "k.sqlite"), key_node="step")


def test_namesakes_are_separate_kernels(tmp_path: Path) -> None:
    p = build(tmp_path)
    k = p.report("kernel").set_index("Long Kernel Name")
    assert len(k) == 4
    # nsys names both "Kernel"; shown by their CUTLASS configurations
    # (engine/correlate/kernel_names.py)
    assert k.loc[TENSOROP, "Kernel Name"] == "cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4"
    assert k.loc[SIMT, "Kernel Name"] == "cutlass_80_simt_sgemm_128x128_8x4_nn_align1"
    assert k.loc[TENSOROP, "Total GPU Time (ns)"] == 2_000
    assert k.loc[SIMT, "Total GPU Time (ns)"] == 4_000
    assert bool(k.loc[TENSOROP, "Uses TC"]) and not bool(k.loc[SIMT, "Uses TC"])
    assert (
        k.loc[ELEM_A, "Total GPU Time (ns)"] == 100 and k.loc[ELEM_B, "Total GPU Time (ns)"] == 140
    )


def test_tensor_and_summary_count_distinct_kernels(tmp_path: Path) -> None:
    p = build(tmp_path)
    kernels = p.summary()["All Kernels"]
    assert kernels["All Kernels"]["# Kernels"] == 4
    assert kernels["Kernels Using TC"]["# Kernels"] == 1
    assert kernels["Kernels Using TC"]["GPU Time (ns)"] == 2_000
    it = p.report("iteration")
    assert it.groupby(it["Long Kernel Name"].astype(str))["Uses TC"].nunique().eq(1).all()
