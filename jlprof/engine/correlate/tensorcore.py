"""Tensor Core (TC) classification: which kernels use Tensor Cores, which ops could.

DLProf decided both questions from names alone (user guide §4.4 and chapter 5): a kernel
"uses TC" when its name says so, an op is "TC eligible" when its op type is a convolution,
matrix product, RNN or attention. Nsight Systems records no instruction mix, so names are all
an nsys export offers; jlprof keeps that method but writes the rules down, covers the
architectures DLProf never saw (Ampere to Blackwell), and lets users add rules.

Two ordered tables, first match wins:

``KERNEL_RULES``
    regex on the kernel name (the demangled name where there is one: the short name of a
    CUTLASS kernel is just ``Kernel``) → uses TC or not. Hard negatives (SIMT, FFMA, GEMV,
    pre-Volta) come first because the positive markers (``xmma``, ``gemm``) also appear in
    CUDA-core kernels; descriptive negatives come last and only serve ``explain_kernel``.
``OP_TYPE_RULES``
    regex on a normalised op type (``normalize_op_type``) → TC eligible or not.

Both are consulted once per *unique* name: a 1M-kernel trace has a few hundred kernel names,
so ``kernel_uses_tc`` factorises, classifies the uniques and maps back with one ``take``.
User rules (``register_kernel_rule``, ``register_op_type_rule``) go in front of the built-ins.
See ``docs/tensor_cores.md`` for sources and known limits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "DEFAULT_KERNEL_RULE",
    "DEFAULT_OP_TYPE_RULE",
    "KERNEL_RULES",
    "OP_TYPE_RULES",
    "KernelRule",
    "OpTypeRule",
    "explain_kernel",
    "explain_op_type",
    "kernel_rules",
    "kernel_tc_table",
    "kernel_uses_tc",
    "normalize_op_type",
    "op_type_rules",
    "op_type_tc_eligible",
    "register_kernel_rule",
    "register_op_type_rule",
    "reset_rules",
]


# --------------------------------------------------------------------------------------------
# Rule records
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelRule:
    """One kernel-name rule: ``pattern`` is searched (case-insensitive) in the kernel name.

    ``examples`` are names the rule is meant for, matched by *this* rule under first-match
    order; the tests check every example, so a new rule that shadows an old one fails loudly.
    Use ``(?-i:...)`` inside a pattern where letter case carries meaning.
    """

    pattern: str
    uses_tc: bool
    family: str
    arch: str
    reason: str
    examples: tuple[str, ...] = ()
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.pattern, re.IGNORECASE))

    def matches(self, name: str) -> bool:
        """True when the pattern occurs anywhere in ``name``."""
        return self.regex.search(name) is not None


@dataclass(frozen=True)
class OpTypeRule:
    """One op-type rule.

    ``target="token"`` rules are full-matched against each normalised token of an op type
    (see ``normalize_op_type``); ``target="raw"`` rules are searched in the lower-cased raw
    string first, for exclusions that normalisation would hide (TensorRT reformat nodes).
    """

    pattern: str
    eligible: bool
    family: str
    frameworks: str
    reason: str
    examples: tuple[str, ...] = ()
    target: str = "token"
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.target not in ("token", "raw"):
            raise ValueError(f"target must be 'token' or 'raw', not {self.target!r}")
        object.__setattr__(self, "regex", re.compile(self.pattern, re.IGNORECASE))

    def matches(self, text: str) -> bool:
        """Full match for tokens, search for raw strings."""
        if self.target == "raw":
            return self.regex.search(text) is not None
        return self.regex.fullmatch(text) is not None


def _k(
    pattern: str, uses_tc: bool, family: str, arch: str, reason: str, *examples: str
) -> KernelRule:
    return KernelRule(pattern, uses_tc, family, arch, reason, tuple(examples))


def _o(
    pattern: str,
    eligible: bool,
    family: str,
    frameworks: str,
    reason: str,
    *examples: str,
    target: str = "token",
) -> OpTypeRule:
    return OpTypeRule(pattern, eligible, family, frameworks, reason, tuple(examples), target)


# --------------------------------------------------------------------------------------------
# Kernel-name rules (ordered; first match wins)
# --------------------------------------------------------------------------------------------
# Sources: NVIDIA PyProf ``prof/tc.py`` and the TensorFlow profiler's
# ``kernel_stats_utils.cc`` (the DLProf-era substring lists: h884, s884, h1688, s1688, hmma,
# i8816, 16816, i16832, c1688, xmma_*), cuBLAS/cuDNN/CUTLASS kernel-name conventions, and the
# real third-party exports (A100, H100, H200, RTX 3070; tests/data/real). Examples marked "real" in
# tests/engine/test_tensorcore.py come from those exports.

_PRE_VOLTA = r"(?:sm_?[1-6][0-9]|maxwell|pascal|kepler|fermi)"

KERNEL_RULES: tuple[KernelRule, ...] = (
    # ---- hard negatives: CUDA-core kernels that carry a positive-looking marker ------------
    _k(
        r"simt|(?-i:UniversalFMA)",
        False,
        "CUTLASS / cuBLAS SIMT",
        "any",
        "SIMT kernels (OpClassSimt, MmaSimt, cutlass_*_simt_*, CuTe UniversalFMA) do their "
        "math with FMA on CUDA cores, even inside a tensorop-style template",
        "void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(T1::Params)",
        "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_simt",
    ),
    _k(
        r"(?<![a-z0-9])(?:ffma2?|hfma2?|dfma|fma)(?![a-z0-9])",
        False,
        "cuBLAS / cuDNN / TensorRT xmma (FMA)",
        "any",
        "xmma kernels whose math instruction is FFMA/HFMA2/DFMA run on CUDA cores "
        "(FP32 GEMM and convolution without TF32)",
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_"
        "aligna4_alignc4_execute_kernel__5x_cublas",
        "sm80_xmma_fprop_implicit_gemm_indexed_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize64x64x8_"
        "stage3_warpsize1x4x1_g1_ffma_aligna4_alignc4",
    ),
    _k(
        rf"^(?:void\s+)?(?:trt_)?{_PRE_VOLTA}_|_sm[1-6][0-9](?![0-9])|arch::Sm[1-6][0-9](?![0-9])",
        False,
        "pre-Volta build",
        "Maxwell / Pascal (sm5x, sm6x)",
        "built for a GPU without Tensor Cores (compute capability < 7.0)",
        "trt_maxwell_scudnn_128x32_relu_interior_nn_v1",
        "sm50_xmma_fprop_conv2d_c1_k1_f32f32_f32_f32_nchwkcrs_nchw_tilesize10x40x8_"
        "threadsize4x4_r3s3_u1v1_xcorr_zerobeta_execute_kernel_trt",
        "fmha_cutlassF_f32_aligned_64x64_rf_sm50(PyTorchMemEffAttention::AttentionKernel"
        "<float, cutlass::arch::Sm50, true, 64, 64, 64, true, true>::Params)",
    ),
    _k(
        r"gemv|(?<![a-z])(?:dot|axpy|scal|nrm2|asum|ger|swap|rot)_kernel|splitkreduce"
        r"|gemmk1_kernel|gemmsn_",
        False,
        "cuBLAS BLAS-1/2 and helpers",
        "any",
        "matrix-vector and vector kernels, split-K reductions and cuBLAS's small-N/k=1 GEMMs "
        "run on CUDA cores",
        "std::enable_if<!T7, void>::type internal::gemvx::kernel<int, int, float2, float2, "
        "float2, float2, (bool)0, (bool)1, (bool)1, (bool)0, (int)6, (bool)0, "
        "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<const float2>, "
        "cublasGemvTensorStridedBatched<const float2>, cublasGemvTensorStridedBatched<float2>, "
        "float2>>(T13)",
        "void splitKreduce_kernel<(int)32, (int)16, int, float, float, float, float, (bool)1, "
        "(bool)0, (bool)0>(cublasSplitKParams<T6>, const T4 *, const T5 *, T5 *, const T6 *, "
        "const T6 *, const T7 *, const T4 *, T7 *, void *, long, T6 *, int *)",
        "gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>",
        "gemmSN_TN_kernel",
    ),
    _k(
        r"(?<![a-z0-9])(?:fp16_|bf16_)?(?:[sdczh]{1,2}gemm|gcgemm|[sdh]cudnn)(?![a-z0-9])",
        False,
        "cuBLAS / cuDNN SIMT (sgemm, hgemm, scudnn)",
        "Kepler → Ada",
        "classic cuBLAS/cuDNN kernels named by data type without an MMA shape "
        "(volta_sgemm, ampere_sgemm, *_scudnn_*, implicit_convolve_sgemm) use CUDA cores",
        "ampere_sgemm_128x32_nn",
        "ampere_sgemm_64x32_sliced1x4_nn",
        "volta_scudnn_128x64_relu_interior_nn_v1",
        "void cudnn::detail::implicit_convolve_sgemm<float, float, 128, 6, 7, 3, 3, 5, 1, true, "
        "false, true>(int, int, int, float const*, int, float*, float*, kernel_conv_params, "
        "int, float, float, int, float*, float*, int, int)",
    ),
    _k(
        r"flash_[a-z_]*?(?:dot_do_o|convert_d|combine|clear_d)|FlashAttnBwd(?:Pre|Post)process"
        r"|flash::prepare",
        False,
        "FlashAttention helpers",
        "Ampere+",
        "FlashAttention's pre/post-processing kernels (dO·O row sums, dQ conversion, split-KV "
        "combine) are elementwise or reductions",
        "void flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<64, 128, 128, 8, 2, 4, 2, "
        "false, false, cutlass::half_t, Flash_kernel_traits<64, 128, 128, 8, cutlass::half_t>>>"
        "(Flash_bwd_params)",
        "flash_fwd_splitkv_combine_kernel",
        "flash_bwd_convert_dq_kernel",
    ),
    _k(
        r"fmha_cutlass[FB]_f32[a-z0-9_]*_sm7[0-9](?![0-9])",
        False,
        "memory-efficient attention (xformers / PyTorch), FP32",
        "Volta / Turing",
        "xformers/PyTorch mem-efficient attention uses SIMT GEMMs for FP32 below sm80",
        "fmha_cutlassF_f32_aligned_64x64_rf_sm75",
    ),
    # ---- positives -------------------------------------------------------------------------
    _k(
        r"tensorop",
        True,
        "CUTLASS tensorop",
        "Volta → Blackwell",
        "CUTLASS kernels of the TensorOp operator class (cutlass_*_tensorop_*, cutlass3x_sm*"
        "_tensorop_*, OpClassTensorOp, MmaTensorOp, block-scaled/sparse tensorop) issue MMA",
        "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_64x64_32x5_"
        "nhwc_align4>(T1::Params)",
        "cutlass_80_tensorop_s16816gemm_f16_256x128_32x3_nn_align8",
        "cutlass3x_sm90_tensorop_s64x128x16gemm_f16_f16_f32_void_f16_128x128x64_1x1x1_0_tnn_"
        "align8_warpspecialized_pingpong_epi_tma",
        "cutlass3x_sm100_bstensorop_s256x128x64gemm_ue8m0xe4m3_ue8m0xe4m3_f32_bf16_bf16_"
        "256x128x128_2x1x1_0_tnt_align32_2sm",
    ),
    _k(
        r"(?<![a-z0-9])[hsdiczb](?:884|1684|1688|16816|16832|16864|8816|8832|161616|32816|83216)"
        r"(?![0-9])",
        True,
        "cuBLAS / cuDNN / CUTLASS MMA shape",
        "Volta (884) → Turing (1688, 8816) → Ampere+ (16816, 16832)",
        "the MMA instruction shape in the name (h884, s884, h1688, s1688, i8816, s16816, "
        "i16832, c1688, d884, ...) is the Tensor Core instruction the kernel is built on",
        "volta_h884gemm_256x128_ldg8_nn",
        "volta_fp16_s884cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc2nchw_tn_v1",
        "turing_fp16_s1688cudnn_fp16_256x128_ldg8_relu_f2f_exp_interior_nhwc_tn_v1",
        "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_nn",
        "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn",
        "ampere_bf16_s1688gemm_bf16_128x128_ldg8_f2f_stages_32x1_nn",
        "turing_i8816gemm_int8_128x128_ldg16_stages_64x2_nt",
        "ampere_i16832gemm_int8_256x128_ldg16_stages_64x3_nt",
        "trt_turing_h1688cudnn_256x64_sliced1x2_ldg8_relu_exp_large_nhwc_tn_v1",
    ),
    _k(
        r"(?<![a-z])(?:hmma|imma|dmma|bmma|wmma|wgmma|gmma)(?![a-z])"
        r"|(?-i:(?<![A-Z])(?:GMMA|UMMA)|Gmma|Umma|Wgmma|tcgen05)",
        True,
        "MMA instruction (hmma/imma/wmma/wgmma/tcgen05)",
        "Volta → Blackwell",
        "the name or signature names a Tensor Core instruction or API: hmma/imma/dmma, the "
        "nvcuda::wmma fragment API, Hopper GMMA/wgmma, Blackwell UMMA/tcgen05",
        "void tcnn::kernel_mlp_fused<64, 8, __half, (tcnn::Activation)0, true>(tcnn::Activation, "
        "__half const*, __half const*, __half*, __half*, unsigned int, unsigned int, unsigned "
        "int, unsigned int, unsigned int, nvcuda::wmma::layout_t, nvcuda::wmma::layout_t)",
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, "
        "int, int>, cutlass::gemm::collective::CollectiveMma<cutlass::gemm::"
        "MainloopSm90TmaGmmaWarpSpecializedCooperative<4, cute::tuple<cute::C<2>, cute::C<1>, "
        "cute::C<1>>, cutlass::gemm::KernelTmaWarpSpecializedCooperative>>>>"
        "(T1::Params)",
        "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x64_4x1x1_"
        "kernel0_0",
    ),
    _k(
        r"xmma",
        True,
        "cuBLAS / cuDNN / TensorRT xmma",
        "Volta → Blackwell (sm70+ builds)",
        "xmma is NVIDIA's Tensor Core GEMM/convolution library behind cuBLAS, cuDNN and "
        "TensorRT (sm80_xmma_*, sm90_xmma_*, xmma_new::*); FMA and pre-Volta builds are "
        "excluded by earlier rules",
        "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize64x32x64"
        "_stage5_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn_infer",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
        "segment_k_off_kernel__5x_cublas",
        "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_"
        "segment_k_off_kernel__5x_cublas",
        "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32_stage4_warpsize2x2x1_"
        "tensor16x8x16_execute_kernel_cublas",
    ),
    _k(
        r"(?<![a-z0-9])nvjet_",
        True,
        "cuBLAS nvjet",
        "Hopper / Blackwell",
        "cuBLAS 12.x's JIT-generated nvjet GEMMs (nvjet_hsh_*, nvjet_tst_*, nvjet_sm100_*) "
        "are built on wgmma/tcgen05",
        "nvjet_tst_192x192_64x3_1x2_h_bz_coopB_NTN",
        "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN",
        "nvjet_sm100_tst_128x256_64x6_2x1_2cta_v_bz_TNT",
    ),
    _k(
        r"(?-i:SM(?:7[05]|8[0-9]|9[0-9]a?|1[0-9]{2}a?)_[0-9]+x[0-9]+x[0-9]+_|SM1[0-9]{2}_MMA_)",
        True,
        "CuTe MMA atom",
        "Volta → Blackwell",
        "a CuTe MMA atom (SM80_16x8x16_F32F16F16F32_TN, SM90_64x128x16_F32BF16BF16_SS, "
        "SM100_MMA_*) in the template arguments",
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, "
        "int, int>, cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm80CpAsync"
        "<3>, cute::TiledMMA<cute::MMA_Atom<cute::SM80_16x8x16_F32F16F16F32_TN>>>>>(T1::Params)",
    ),
    _k(
        r"(?<![a-z])flash_(?:fwd|bwd)_|FlashAttn(?:Fwd|Bwd)Sm[0-9]+|fmha_(?:fprop|dgrad)_fp16",
        True,
        "FlashAttention",
        "Turing (FA1) / Ampere+ (FA2) / Hopper (FA3)",
        "FlashAttention's forward/backward main loops compute QKᵀ and PV with mma.sync/wgmma",
        "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
        "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t>>, "
        "false, true, false, false, true, true, false, false>(Flash_fwd_params)",
        "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits"
        "<64, 128, 128, 8, 2, 4, 2, false, false, cutlass::half_t>, true, false, false, false, "
        "false, true, false>(pytorch_flash::Flash_bwd_params)",
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"
        "flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1>>>"
        ">>>(T1::Params)",
        "fmha_fprop_fp16_sm80_loop_kernel",
    ),
    _k(
        r"fmha_cutlass[FB]_",
        True,
        "memory-efficient attention (xformers / PyTorch)",
        "Volta+ (FP16/BF16), Ampere+ (FP32 as 3xTF32)",
        "CUTLASS-based mem-efficient attention uses TensorOp GEMMs for FP16/BF16 from sm70 and "
        "for FP32 (OpMultiplyAddFastF32) from sm80; FP32 below sm80 and sm50 builds are "
        "excluded by earlier rules",
        "fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel"
        "<cutlass::half_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
        "fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackward"
        "Kernel<cutlass::arch::Sm80, cutlass::bfloat16_t, true, false, true, 64, 64, 64, false>"
        "::Params)",
        "fmha_cutlassF_f32_aligned_64x64_rf_sm80",
    ),
    _k(
        r"cudnn_generated_fort_native_sdpa|fmha_v2_|fused_multihead_attention",
        True,
        "cuDNN / TensorRT fused attention",
        "Turing → Blackwell",
        "cuDNN's runtime-compiled SDPA kernels and TensorRT's fused MHA (fmha_v2) are "
        "Tensor Core kernels",
        "cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x64_4x1x1_kernel0_0",
        "fmha_v2_flash_attention_fp16_64_128_S_64_sm80_kernel",
    ),
    _k(
        r"(?<![a-z0-9])nvfuser_matmul_|deep_gemm::",
        True,
        "generated GEMMs (nvFuser matmul scheduler, DeepGEMM)",
        "Ampere → Blackwell",
        "nvFuser's matmul scheduler only takes fusions with an MmaOp, and DeepGEMM kernels are "
        "wgmma/tcgen05 GEMMs",
        "nvfuser_matmul_f0_c1_r0_g0",
        "void deep_gemm::fp8_gemm_kernel<128, 128, 128, 1, 8>(float*, int*, unsigned int)",
    ),
    # ---- descriptive negatives (default would say False anyway; these explain why) ---------
    _k(
        r"nccl(?:Dev)?Kernel",
        False,
        "NCCL",
        "any",
        "collective communication kernels move and reduce data",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096UL>)",
    ),
    _k(
        r"winograd|fft|implicit_convolve|explicit_convolve|wgrad_alg|dgrad_engine|dgrad2d"
        r"|wgrad2d|conv2d_c1_k1|nchwtonhwc|nhwctonchw|cudnn::",
        False,
        "cuDNN (no TC marker)",
        "any",
        "cuDNN kernels without an MMA marker (FFT, Winograd, direct and depthwise convolution, "
        "layout transforms) run on CUDA cores",
        "void fft2d_r2c_32x32<float, (bool)0, (unsigned int)1, (bool)0>(float2 *, const T1 *, "
        "int, int, int, int, int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, "
        "int)",
        "void cudnn::ops::nchwToNhwcKernel<float, float, float, (bool)0, (bool)1, "
        "(cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<T3>, const T1 *, T2 *)",
    ),
    _k(
        r"(?<![a-z0-9])nvfuser_(?:pointwise|reduction|inner_persistent|outer_persistent"
        r"|inner_outer_persistent|transpose|resize)_",
        False,
        "nvFuser (non-matmul schedulers)",
        "any",
        "nvFuser's pointwise, reduction, persistent, transpose and resize schedulers emit no MMA",
        "<unnamed>::nvfuser_pointwise_f0_c1_r0_g0(<unnamed>::Tensor<float, (int)2, (int)2>, "
        "<unnamed>::Tensor<float, (int)2, (int)2>)",
    ),
    _k(
        r"^triton_(?:poi|red|per)_",
        False,
        "Triton / TorchInductor pointwise and reductions",
        "any",
        "TorchInductor's pointwise (poi), reduction (red) and persistent-reduction (per) "
        "kernels contain no tl.dot",
        "triton_poi_fused_add_mul_silu_23",
    ),
    _k(
        r"^triton_",
        False,
        "Triton (unknown)",
        "any",
        "a Triton kernel may use Tensor Cores through tl.dot (TorchInductor templates "
        "triton_tem_*), but the name does not tell the data type; counted as non-TC, as "
        "DLProf did for custom kernels; register a rule if you know better",
        "triton_tem_fused_mm_0",
    ),
    _k(
        r"at::native::|elementwise_kernel|reduce_kernel|CatArrayBatchedCopy",
        False,
        "PyTorch ATen",
        "any",
        "ATen elementwise, reduction and copy kernels run on CUDA cores",
        "void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, "
        "at::detail::Array<char *, (int)1>>(int, T2, T3)",
    ),
)

DEFAULT_KERNEL_RULE = KernelRule(
    r"(?!)",
    False,
    "(no rule)",
    "any",
    "no Tensor Core marker in the name; like DLProf, unknown kernels count as non-TC "
    "(custom kernels that use Tensor Cores are missed)",
)


# --------------------------------------------------------------------------------------------
# Op-type rules (ordered; first match wins per token)
# --------------------------------------------------------------------------------------------
# Tokens are normalised by ``normalize_op_type``: lower case, no namespace / scope / module
# prefix, no underscores, no direction or version suffix. So ``aten::conv_transpose2d``,
# ``ConvTranspose`` (ONNX) and ``ConvTranspose2d`` (module) all arrive as ``convtranspose...``
# and ``ConvolutionBackward0``, ``Conv2DBackpropInputV2``, ``MmBackward0`` lose their suffix.
# Sources: DLProf guide ch. 5 ("most Convolution and GEMM operations"), the TensorFlow
# profiler's IsOpTensorCoreEligible, PyTorch's autocast lower-precision op list (as used by
# torch_tb_profiler), ONNX and TensorRT layer types.

OP_TYPE_RULES: tuple[OpTypeRule, ...] = (
    _o(
        r"reformatting copynode|^reformat",
        False,
        "TensorRT reformat",
        "TensorRT",
        "TensorRT reformat/copy nodes move data between layouts, even when named after the "
        "convolution they feed",
        "Reformatting CopyNode for Input Tensor 0 to /blocks.2/blocks.2.6/fc/fc.2_1/Conv",
        target="raw",
    ),
    _o(
        r".*forcpu|mkldnn.*|miopen.*",
        False,
        "CPU / ROCm variant",
        "PyTorch",
        "CPU (oneDNN, *_for_cpu) and ROCm (MIOpen) variants never run on NVIDIA Tensor Cores",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::mkldnn_convolution",
    ),
    _o(
        r"thnnfused(?:lstm|gru)cell",
        False,
        "RNN cell pointwise part",
        "PyTorch",
        "_thnn_fused_lstm_cell/_thnn_fused_gru_cell only apply the gate nonlinearities; the "
        "cell's GEMMs are separate linear/addmm ops (autocast lists them for precision, not "
        "for Tensor Cores)",
        "aten::_thnn_fused_lstm_cell",
    ),
    _o(
        r"convdepthwise[23]d",
        False,
        "native depthwise convolution",
        "PyTorch",
        "PyTorch's own depthwise kernels (_conv_depthwise2d, conv_depthwise3d) are CUDA-core "
        "code; depthwise convolutions that cuDNN takes show up as conv2d/convolution",
        "aten::_conv_depthwise2d",
    ),
    _o(
        r"mv|addmv|dot|vdot|ger|addr|outer|inner",
        False,
        "vector product",
        "PyTorch",
        "matrix-vector and vector products are memory bound; cuBLAS runs them with gemv/dot "
        "kernels",
        "aten::addmv",
        "aten::dot",
    ),
    _o(
        r"(?:cudnn|thnn|slow|xla|fused|quantized|qlinear|depthwise)?"
        r"(?:conv|convolution|deconv|deconvolution)(?:transpose)?(?:dilated)?(?:[123]d)?"
        r"(?:transpose)?(?:tbc|nogroup|overrideable|relu|addrelu|biasactivation|integer|native)?",
        True,
        "convolution",
        "PyTorch, TensorFlow, ONNX, TensorRT",
        "convolutions run as implicit GEMMs in cuDNN, with Tensor Core kernels for FP16/BF16/"
        "TF32/INT8",
        "aten::conv2d",
        "aten::_convolution",
        "aten::cudnn_convolution",
        "aten::conv_transpose2d",
        "ConvolutionBackward0",
        "Conv2D",
        "Conv2DBackpropInput",
        "Conv3DBackpropFilterV2",
        "DepthwiseConv2dNative",
        "_FusedConv2D",
        "Conv",
        "ConvTranspose",
        "Deconvolution",
        "/blocks.0/blocks.0.0/Pad + /blocks.0/blocks.0.1/Conv + /blocks.0/blocks.0.3/Relu",
    ),
    _o(
        r"mm|bmm|addmm|addbmm|baddbmm|matmul|batchmatmul|fusedmatmul|linear|bilinear|trilinear"
        r"|einsum|xlaeinsum|tensordot|chainmatmul|linalgmultidot|multidot|addmmactivation"
        r"|scaledmm|intmm|groupedmm|scaledgroupedmm|fullyconnected|matrixmultiply|matmulinteger"
        r"|qlinearmatmul|xladot|xladotgeneral|dotgeneral|[a-z0-9]*gemm",
        True,
        "matrix multiplication",
        "PyTorch, TensorFlow, XLA, ONNX, TensorRT",
        "matrix products run as cuBLAS/cuBLASLt/CUTLASS GEMMs, with Tensor Core kernels for "
        "FP16/BF16/TF32/FP8/INT8",
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::matmul",
        "aten::linear",
        "aten::einsum",
        "aten::_scaled_mm",
        "MmBackward0",
        "AddmmBackward0",
        "MatMul",
        "BatchMatMulV2",
        "_FusedMatMul",
        "Einsum",
        "XlaDotV2",
        "Gemm",
        "FullyConnected",
        "MatrixMultiply",
        "model/dense/MatMul",
    ),
    _o(
        r"lstm|gru|rnn|rnntanh|rnnrelu|lstmcell|grucell|rnncell|rnntanhcell|rnnrelucell"
        r"|cudnnrnn|quantizedlstm|blocklstm|lstmblockcell|grublockcell",
        True,
        "recurrent",
        "PyTorch, TensorFlow, ONNX, TensorRT",
        "RNN layers are GEMMs over the sequence (cuDNN RNN or per-step linear); Tensor Core "
        "kernels for FP16/BF16/TF32",
        "aten::lstm",
        "aten::gru",
        "aten::rnn_tanh",
        "aten::lstm_cell",
        "aten::_cudnn_rnn",
        "CudnnRnnBackward0",
        "CudnnRNN",
        "CudnnRNNV3",
        "CudnnRNNBackpropV3",
        "LSTM",
        "GRUCell",
        "RNNv2",
    ),
    _o(
        r"scaleddotproduct[a-z]*attention(?:math)?|[a-z]*flashattn[a-z]*|[a-z]*flashattention"
        r"[a-z]*|efficientattention|memoryefficientattention|flexattention|(?:native)?"
        r"multiheadattention|multiheadselfattention|selfattention|crossattention|attention"
        r"|sdpa|fmha|cudnnattention|transformerencoderlayer|transformerdecoderlayer",
        True,
        "attention",
        "PyTorch, xformers, flash-attn, ONNX",
        "attention is two batched GEMMs (QKᵀ, PV), fused (FlashAttention, cuDNN, "
        "mem-efficient) or not (math path)",
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
        "ScaledDotProductFlashAttentionBackward0",
        "aten::_flash_attention_forward",
        "aten::_efficient_attention_backward",
        "aten::_native_multi_head_attention",
        "MultiheadAttention",
        "FlashAttnFunc",
        "flash_attn_varlen_func",
        "Attention",
    ),
)

DEFAULT_OP_TYPE_RULE = OpTypeRule(
    r"(?!)",
    False,
    "(no rule)",
    "any",
    "not a convolution, matrix product, RNN or attention op type",
)


# --------------------------------------------------------------------------------------------
# Registry: user rules in front of the built-ins
# --------------------------------------------------------------------------------------------

_user_kernel_rules: list[KernelRule] = []
_user_op_type_rules: list[OpTypeRule] = []


def kernel_rules() -> tuple[KernelRule, ...]:
    """The active kernel rules in match order: user rules (newest first), then built-ins."""
    return (*reversed(_user_kernel_rules), *KERNEL_RULES)


def op_type_rules() -> tuple[OpTypeRule, ...]:
    """The active op-type rules in match order: user rules (newest first), then built-ins."""
    return (*reversed(_user_op_type_rules), *OP_TYPE_RULES)


def register_kernel_rule(
    pattern: str | KernelRule,
    uses_tc: bool | None = None,
    *,
    family: str = "user rule",
    arch: str = "any",
    reason: str = "registered by the user",
    literal: bool = False,
    examples: Iterable[str] = (),
) -> KernelRule:
    """Add a kernel rule that wins over every built-in (and over older user rules).

    ``pattern`` is a case-insensitive regex searched in the name, or the exact name when
    ``literal``. Returns the rule, e.g. for ``explain_kernel`` comparisons.
    """
    if isinstance(pattern, KernelRule):
        rule = pattern
    else:
        if uses_tc is None:
            raise TypeError("register_kernel_rule needs uses_tc=True/False with a pattern")
        regex = "^" + re.escape(pattern) + "$" if literal else pattern
        rule = KernelRule(regex, bool(uses_tc), family, arch, reason, tuple(examples))
    _user_kernel_rules.append(rule)
    _classify_kernel_cached.cache_clear()
    return rule


def register_op_type_rule(
    pattern: str | OpTypeRule,
    eligible: bool | None = None,
    *,
    family: str = "user rule",
    frameworks: str = "any",
    reason: str = "registered by the user",
    target: str = "token",
    examples: Iterable[str] = (),
) -> OpTypeRule:
    """Add an op-type rule that wins over every built-in (and over older user rules).

    With ``target="token"`` the regex must fully match a normalised token (see
    ``normalize_op_type``: lower case, no underscores); ``target="raw"`` searches the raw,
    lower-cased op type.
    """
    if isinstance(pattern, OpTypeRule):
        rule = pattern
    else:
        if eligible is None:
            raise TypeError("register_op_type_rule needs eligible=True/False with a pattern")
        rule = OpTypeRule(
            pattern, bool(eligible), family, frameworks, reason, tuple(examples), target
        )
    _user_op_type_rules.append(rule)
    _classify_op_type_cached.cache_clear()
    return rule


def reset_rules() -> None:
    """Drop every user rule (tests, or a notebook that wants the built-in behaviour back)."""
    _user_kernel_rules.clear()
    _user_op_type_rules.clear()
    _classify_kernel_cached.cache_clear()
    _classify_op_type_cached.cache_clear()


# --------------------------------------------------------------------------------------------
# Scalar classification
# --------------------------------------------------------------------------------------------


def _first_kernel_rule(name: str, rules: Sequence[KernelRule]) -> KernelRule:
    for rule in rules:
        if rule.regex.search(name) is not None:
            return rule
    return DEFAULT_KERNEL_RULE


@lru_cache(maxsize=65536)
def _classify_kernel_cached(name: str) -> KernelRule:
    return _first_kernel_rule(name, kernel_rules())


def explain_kernel(name: Any, rules: Sequence[KernelRule] | None = None) -> KernelRule:
    """The rule that decides ``name`` (``DEFAULT_KERNEL_RULE`` when none matches).

    Its ``uses_tc``, ``family`` and ``reason`` are the evidence the expert systems cite.
    ``rules`` replaces the active table for this call only.
    """
    if not isinstance(name, str) or not name:
        return DEFAULT_KERNEL_RULE
    if rules is not None:
        return _first_kernel_rule(name, rules)
    return _classify_kernel_cached(name)


_SEP_PARTS = re.compile(r"\s+\+\s+|\s*\|\|\s*")
_TRAILING_GROUP = re.compile(r"\s*[\(\[][^()\[\]/]*[\)\]]\s*$")
_WRAPPER = re.compile(r"^[a-z0-9_]*\(", re.IGNORECASE)
_DIRECTION = re.compile(
    r"(?:backward[a-z]*|backprop[a-z]*|grad(?:input|weight|filter|bias)?|forward|fwd|bwd"
    r"|fprop|bprop|dgrad|wgrad)$"
)
_VERSION = re.compile(r"(?<!con)v[0-9]+$")
_DIGITS = re.compile(r"[0-9]+$")


def normalize_op_type(op_type: str) -> str:
    """Canonical token of one op type, so framework spellings meet in one table.

    ``aten::conv_transpose2d`` → ``convtranspose2d``; ``ConvolutionBackward0`` →
    ``convolution``; ``model/conv2d_6/Conv2D/Conv2DBackpropInput`` → ``conv2d``;
    ``BatchMatMulV2`` → ``batchmatmul``; ``linear (fprop)`` / ``linear(2)`` → ``linear``;
    ``aten::addmm, seq = 12`` (``emit_nvtx``) → ``addmm``. TensorRT fusions
    (``A + B``) are split by ``explain_op_type``, not here.
    """
    s = str(op_type).strip()
    s = s.split(", ", 1)[0].strip()  # emit_nvtx: "aten::mm, seq = 3, sizes = [...]"
    while True:  # "(fprop)", "(2)", "[bprop]" suffixes, possibly stacked
        t = _TRAILING_GROUP.sub("", s)
        if t == s:
            break
        s = t
    while True:  # TensorRT "PWN(PWN(a), b" wrappers
        t = _WRAPPER.sub("", s).rstrip(")").strip()
        if t == s:
            break
        s = t
    s = s.rsplit("/", 1)[-1].strip("{}[]() ")  # TF/ONNX scopes, TensorRT "{ForeignNode[...]}"
    s = s.rsplit("::", 1)[-1]  # aten::, prim::, cudnn::
    s = s.rsplit(".", 1)[-1]  # torch.nn.functional.conv2d, nn.Linear
    s = re.sub(r"[\s_\-]+", "", s.lower())
    while True:
        t = _DIGITS.sub("", _VERSION.sub("", s))
        t = _DIRECTION.sub("", t)
        if t == s:
            break
        s = t
    return s


def _op_type_tokens(op_type: str) -> list[str]:
    parts = [p for p in _SEP_PARTS.split(str(op_type)) if p.strip()]
    return [normalize_op_type(p) for p in parts] or [""]


def _first_op_type_rule(op_type: str, rules: Sequence[OpTypeRule]) -> OpTypeRule:
    raw = op_type.lower()
    for rule in rules:
        if rule.target == "raw" and rule.regex.search(raw) is not None:
            return rule
    token_rules = [r for r in rules if r.target == "token"]
    first: OpTypeRule | None = None
    for token in _op_type_tokens(op_type):
        if not token:
            continue
        hit = next((r for r in token_rules if r.regex.fullmatch(token)), DEFAULT_OP_TYPE_RULE)
        if hit.eligible:
            return hit
        if first is None:
            first = hit
    return first or DEFAULT_OP_TYPE_RULE


@lru_cache(maxsize=65536)
def _classify_op_type_cached(op_type: str) -> OpTypeRule:
    return _first_op_type_rule(op_type, op_type_rules())


def explain_op_type(op_type: Any, rules: Sequence[OpTypeRule] | None = None) -> OpTypeRule:
    """The rule that decides ``op_type`` (``DEFAULT_OP_TYPE_RULE`` when none matches).

    A TensorRT fusion (``/x/Conv + /x/Relu``) is eligible when any of its parts is: the
    first eligible part's rule is returned, else the first part's.
    """
    if not isinstance(op_type, str) or not op_type.strip():
        return DEFAULT_OP_TYPE_RULE
    if rules is not None:
        return _first_op_type_rule(op_type, rules)
    return _classify_op_type_cached(op_type)


# --------------------------------------------------------------------------------------------
# Vectorised classification
# --------------------------------------------------------------------------------------------


def _codes_and_uniques(values: Any) -> tuple[np.ndarray, list[Any]]:
    """Integer codes (-1 = missing) and the unique values; categoricals are used as they are."""
    if isinstance(values, (pd.Series, pd.Index)) and isinstance(values.dtype, pd.CategoricalDtype):
        values = values.array
    if isinstance(values, pd.Categorical):
        return np.asarray(values.codes), list(values.categories)
    if not isinstance(values, (pd.Series, pd.Index, np.ndarray, pd.api.extensions.ExtensionArray)):
        values = np.asarray(list(values), dtype=object)
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    return np.asarray(codes), list(uniques)


def _vectorised(values: Any, verdict: Callable[[Any], bool]) -> np.ndarray:
    codes, uniques = _codes_and_uniques(values)
    if len(codes) == 0:
        return np.zeros(0, dtype=bool)
    table = np.fromiter((verdict(u) for u in uniques), dtype=bool, count=len(uniques))
    # one extra False slot at the end so the -1 (missing) code maps to False
    table = np.append(table, False)
    return table[codes]


def kernel_uses_tc(names: Any, rules: Sequence[KernelRule] | None = None) -> np.ndarray:
    """Bool array: does each kernel use Tensor Cores (judged from its name)?

    Pass demangled names (``Trace.gpu.long_name``): short names hide the evidence of
    templated kernels (a CUTLASS GEMM's short name is ``Kernel`` whether it is SIMT or
    tensorop). Accepts a Series, Categorical or any sequence; each unique name is classified
    once. Missing names are False.
    """
    if rules is not None:
        rules = tuple(rules)
        return _vectorised(names, lambda n: explain_kernel(n, rules).uses_tc)
    return _vectorised(names, lambda n: explain_kernel(n).uses_tc)


def op_type_tc_eligible(op_types: Any, rules: Sequence[OpTypeRule] | None = None) -> np.ndarray:
    """Bool array: could each op type use Tensor Cores (DLProf's "TC Eligibility")?

    Vectorised like ``kernel_uses_tc``: unique op types are classified once.
    """
    if rules is not None:
        rules = tuple(rules)
        return _vectorised(op_types, lambda t: explain_op_type(t, rules).eligible)
    return _vectorised(op_types, lambda t: explain_op_type(t).eligible)


def kernel_tc_table(names: Any) -> pd.DataFrame:
    """One row per unique kernel name with the verdict and the deciding rule.

    The evidence behind the Tensor Core report's kernel lists and the expert systems'
    "eligible but not using TC" findings.
    """
    _, uniques = _codes_and_uniques(names)
    rows = []
    for name in uniques:
        if not isinstance(name, str):
            continue
        rule = explain_kernel(name)
        rows.append((name, rule.uses_tc, rule.family, rule.arch, rule.reason, rule.pattern))
    return pd.DataFrame(
        rows, columns=["name", "uses_tc", "family", "arch", "reason", "pattern"]
    ).astype({"uses_tc": bool})
