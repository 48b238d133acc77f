"""Kernels whose function name says nothing ("Kernel", "kernel") are shown by what identifies
them; the demangled name stays their identity, one hover away (issue 43, item 12)."""

from __future__ import annotations

import sqlite3

import pytest

import jlprof
from jlprof.engine.correlate.kernel_names import telling_name
from tests.fixtures.scenarios import real_data_dir

CUTLASS = (
    "void cutlass_cudnn::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_256x64_16x4_nhwc>"
    "(T1::Params)"
)


@pytest.mark.parametrize(
    ("short", "long", "want"),
    [
        ("Kernel", CUTLASS, "cutlass_tensorop_s1688fprop_optimized_tf32_256x64_16x4_nhwc"),
        ("kernel", "void internal::gemvx::kernel<int, int, float2>(T1)", "gemvx::kernel"),
        ("kernel_entry", "kernel_entry(int *)", "kernel_entry"),  # nothing more to say
        ("Kernel", "void Kernel<float, (int)4>(T1 *)", "Kernel"),  # the arguments are types
        ("relu", "void relu<cutlass_long_config_name_x>(float *)", "relu"),  # says enough
        (
            "device_kernel",
            "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<int>>(T1::Params)",
            "cutlass::device_kernel",
        ),
    ],
)
def test_telling_name(short, long, want):
    assert telling_name(short, long) == want


def test_real_a100_trace_names_its_cutlass_and_cublas_kernels():
    """mmagic-pyprof-a100: nsys names three kernels "Kernel"/"kernel" (raw SQL below); the
    kernel report shows each by its CUTLASS configuration or namespace, its time unchanged."""
    path = real_data_dir() / "mmagic-pyprof-a100" / "net.sqlite"
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT d.value, sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.shortName JOIN StringIds d ON d.id = k.demangledName "
        "WHERE s.value IN ('Kernel', 'kernel') GROUP BY d.value"
    ).fetchall()
    con.close()
    # by hand from the demangled names: the template argument, else namespace::function
    want = {
        "cutlass_80_simt_sgemm_128x32_8x5_nn_align1": "void cutlass::Kernel<cutlass_80_simt_",
        "cutlass_tensorop_s1688fprop_optimized_tf32_64x64_32x5_nhwc_align4": "void cutlass_cudnn",
        "gemvx::kernel": "std::enable_if<!T7, void>::type internal::gemvx::kernel<",
    }
    assert len(rows) == 3
    k = jlprof.load(path).report("kernel")
    assert not k["Kernel Name"].isin(["Kernel", "kernel"]).any()
    for long_name, total in rows:
        mine = k[k["Long Kernel Name"] == long_name]
        (name,) = set(mine["Kernel Name"])
        assert long_name.startswith(want[name])
        assert mine["Total GPU Time (ns)"].sum() == total
