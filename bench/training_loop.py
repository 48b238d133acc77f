"""A synthetic PyTorch-style training loop, laid out in time: the model behind gen_export.py.

One process (AMP ResNet-like, one GPU busy) runs iterations of:

    main thread      mark, read(), memcpy HtoD, forward > /model/layerN > /model/layerN/conv >
                     aten::cudnn_convolution > kernels ..., backward (waits: pthread_cond_wait),
                     optimizer_step > multi_tensor_apply kernels, memcpy DtoH, cudaStreamSynchronize
    autograd thread  /model/layerN/backward > /model/layerN/conv_backward >
                     aten::convolution_backward > kernels ...

Each kernel has exactly one cudaLaunchKernel. GPU work queues on one stream: it starts once its
call has happened and the previous work is done; the synchronize at the end of every iteration
waits for the queue to drain. All times are drawn with numpy from one seeded generator.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import numpy as np

MAIN_TID = 24601  # also the pid
AUTOGRAD_TID = MAIN_TID + 7
LAYERS = 48
US = 1_000  # ns

# GPU work catalog: (name, mean duration ns, grid, block). Names as cuDNN/cuBLAS/PyTorch emit them.
NCHW2NHWC = "void cudnn::ops::nchwToNhwcKernel<__half, __half, float, false, true, (cudnnKernelDataType_t)0>(cudnn::ops::nchw2nhwc_params_t<float>, __half const*, __half*)"  # noqa: E501
NHWC2NCHW = "void cudnn::ops::nhwcToNchwKernel<__half, __half, float, true, false, (cudnnKernelDataType_t)0>(cudnn::ops::nhwc2nchw_params_t<float>, __half const*, __half*)"  # noqa: E501
FPROP = "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_warpsize2x2x1_g1_tensor16x8x16_execute_kernel__5x_cudnn"  # noqa: E501
DGRAD = "sm80_xmma_dgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nchw_tilesize128x128x32_stage4_warpsize2x2x1_g1_tensor16x8x16_kernel_cudnn"  # noqa: E501
WGRAD = "sm80_xmma_wgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_warpsize2x2x1_g1_tensor16x8x16_kernel_cudnn"  # noqa: E501
SPLITK = "void splitKreduce_kernel<32, 16, int, float, __half, float, __half, true, false, false>(cublasSplitKParams<float>, float const*, __half const*, __half*, float const*, float const*, __half const*, __half const*, __half*, void*, long, float*, int*)"  # noqa: E501
BN_FW = "void cudnn::bn_fw_tr_1C11_kernel_NCHW<__half, float, 512, true, 1>(cudnnTensorStruct, __half const*, cudnnTensorStruct, __half*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)"  # noqa: E501
BN_BW = "void cudnn::bn_bw_1C11_kernel_new<__half, float, float2, 512, true, 1>(float, float, float, float, cudnnTensorStruct, __half const*, cudnnTensorStruct, __half const*, cudnnTensorStruct, __half*, float const*, float*, float*, float const*, float const*, float)"  # noqa: E501
BN_BW_FIN = "void cudnn::bn_bw_1C11_singleread_specialized<__half, 512, 1, 1>(float, float, float, float, cudnnTensorStruct, __half const*, cudnnTensorStruct, __half const*, cudnnTensorStruct, __half*, float const*, float*, float*, float const*, float const*, float)"  # noqa: E501
RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::Half)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::Half)#1}, at::detail::Array<char*, 2>)"  # noqa: E501
RELU_BW = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::threshold_kernel_impl<c10::Half>(at::TensorIteratorBase&, c10::Half, c10::Half)::{lambda(c10::Half, c10::Half)#1}, at::detail::Array<char*, 3> >(int, at::native::(anonymous namespace)::threshold_kernel_impl<c10::Half>(at::TensorIteratorBase&, c10::Half, c10::Half)::{lambda(c10::Half, c10::Half)#1}, at::detail::Array<char*, 3>)"  # noqa: E501
GEMM = "ampere_fp16_s16816gemm_fp16_128x64_ldg8_f2f_stages_64x4_tn"
GEMM_BW = "ampere_fp16_s16816gemm_fp16_64x64_sliced1x2_ldg8_f2f_stages_64x5_nn"
BIAS = "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::AddFunctor<c10::Half> >(at::TensorIteratorBase&, at::native::AddFunctor<c10::Half> const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl<at::native::AddFunctor<c10::Half> >(at::TensorIteratorBase&, at::native::AddFunctor<c10::Half> const&)::{lambda(int)#1})"  # noqa: E501
SOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::Half, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, c10::Half const*, int)"  # noqa: E501
NLL = "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)"  # noqa: E501
NLL_BW = "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>(float*, float const*, long const*, float const*, float const*, bool, int, int, long, long)"  # noqa: E501
SOFTMAX_BW = "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, c10::Half, float, float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(c10::Half*, float const*, float const*, int)"  # noqa: E501
ADAM = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, double, bool, float*, float*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, double, bool, float*, float*)"  # noqa: E501

KERNELS: dict[str, tuple[float, tuple[int, int, int], tuple[int, int, int]]] = {
    NCHW2NHWC: (22 * US, (3136, 1, 1), (256, 1, 1)),
    FPROP: (140 * US, (392, 2, 1), (128, 1, 1)),
    NHWC2NCHW: (20 * US, (3136, 1, 1), (256, 1, 1)),
    BN_FW: (32 * US, (256, 1, 1), (512, 1, 1)),
    RELU: (14 * US, (12544, 1, 1), (128, 1, 1)),
    GEMM: (60 * US, (16, 8, 1), (128, 1, 1)),
    BIAS: (6 * US, (256, 1, 1), (128, 1, 1)),
    SOFTMAX: (9 * US, (256, 1, 1), (1024, 1, 1)),
    NLL: (5 * US, (1, 1, 1), (32, 1, 1)),
    NLL_BW: (4 * US, (1, 1, 1), (32, 1, 1)),
    SOFTMAX_BW: (8 * US, (256, 1, 1), (1024, 1, 1)),
    GEMM_BW: (70 * US, (32, 4, 1), (128, 1, 1)),
    RELU_BW: (16 * US, (12544, 1, 1), (128, 1, 1)),
    BN_BW: (45 * US, (256, 1, 1), (512, 1, 1)),
    BN_BW_FIN: (12 * US, (256, 1, 1), (512, 1, 1)),
    DGRAD: (150 * US, (392, 2, 1), (128, 1, 1)),
    WGRAD: (160 * US, (64, 8, 3), (128, 1, 1)),
    SPLITK: (18 * US, (64, 4, 1), (256, 1, 1)),
    ADAM: (40 * US, (320, 1, 1), (512, 1, 1)),
}
KERNEL_NAMES = list(KERNELS)

PUSH, POP, LAUNCH, COPY_IN, MEMSET_OP, COPY_OUT, SYNC = range(7)
INPUT_BYTES = 128 * 3 * 224 * 224 * 2  # one fp16 batch


@dataclass
class Script:
    """One thread's events in one iteration, as tokens; ``pair`` links a POP to its PUSH."""

    kind: list[int] = field(default_factory=list)
    ref: list[int] = field(default_factory=list)
    pair: list[int] = field(default_factory=list)
    ranges: list[str] = field(default_factory=list)

    def _add(self, kind: int, ref: int = -1, pair: int = -1) -> int:
        self.kind.append(kind)
        self.ref.append(ref)
        self.pair.append(pair)
        return len(self.kind) - 1

    @contextmanager
    def range(self, name: str) -> Iterator[None]:
        if name not in self.ranges:
            self.ranges.append(name)
        push = self._add(PUSH, self.ranges.index(name))
        yield
        self._add(POP, pair=push)

    @contextmanager
    def nest(self, *names: str) -> Iterator[None]:
        """Nested ranges, outermost first."""
        with ExitStack() as stack:
            for name in names:
                stack.enter_context(self.range(name))
            yield

    def launch(self, *kernels: str) -> None:
        for k in kernels:
            self._add(LAUNCH, KERNEL_NAMES.index(k))

    def op(self, kind: int) -> None:
        self._add(kind)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.array(self.kind), np.array(self.ref), np.array(self.pair)


SHAPES = ("dlprof", "pytorch")


def training_scripts(layers: int, shape: str = "dlprof") -> tuple[Script, Script, Script]:
    """Main thread before backward, the autograd thread's backward, main thread after it.

    ``shape="pytorch"`` adds what ``torch.autograd.profiler.emit_nvtx`` records around the same
    kernels: an ``aten::`` range per op and a ``...Backward0`` range per autograd node, with
    ``seq``/``op_id`` suffixes (templates: ``#k`` is the op's sequence number within an
    iteration, made global by gen_export), about 1.4 ranges a kernel as in real PyTorch runs."""
    pt = shape == "pytorch"
    fwd, bwd, opt = Script(), Script(), Script()
    seq = iter(range(1_000_000))

    def aten(*names: str, seqs: list[int] | None = None) -> list[str]:
        """emit_nvtx ranges, outermost first; the first carries an autograd ``seq``."""
        if not pt:
            return []
        k = next(seq)
        if seqs is not None:
            seqs.append(k)
        return [f"{names[0]}, seq = #{k}", *names[1:]]

    def node(name: str, k: int) -> list[str]:
        return [f"{name}, seq = #{k}"] if pt else []

    conv_seq: list[int] = []
    bn_seq: list[int] = []
    relu_seq: list[int] = []
    fwd.op(COPY_IN)
    with fwd.range("forward"):
        for i in range(layers):
            layer = f"/model/layer{i}"
            with fwd.range(layer):
                conv = [f"{layer}/conv", *aten("aten::conv2d", "aten::convolution", seqs=conv_seq)]
                conv.append("aten::cudnn_convolution")
                with fwd.nest(*conv):
                    fwd.launch(NCHW2NHWC, FPROP, NHWC2NCHW)
                bn = [
                    f"{layer}/bn",
                    *aten("aten::batch_norm", "aten::cudnn_batch_norm", seqs=bn_seq),
                ]
                with fwd.nest(*bn):
                    fwd.launch(BN_FW)
                with fwd.nest(f"{layer}/relu", *aten("aten::relu_", seqs=relu_seq)):
                    fwd.launch(RELU)
        fc_seq: list[int] = []
        with fwd.nest(
            "/model/fc", "/model/fc/linear", *aten("aten::linear", "aten::addmm", seqs=fc_seq)
        ):
            fwd.launch(GEMM, BIAS)
        loss_seq: list[int] = []
        with fwd.nest("/model/loss", *aten("aten::cross_entropy_loss", seqs=loss_seq)):
            fwd.op(MEMSET_OP)
            with fwd.nest(*aten("aten::log_softmax")):
                fwd.launch(SOFTMAX)
            with fwd.nest(*aten("aten::nll_loss_nd")):
                fwd.launch(NLL)
    loss = loss_seq[0] if pt else 0
    with bwd.nest("/model/loss/backward", *node("NllLossBackward0", loss)):
        bwd.launch(NLL_BW)
        with bwd.nest(*node("LogSoftmaxBackward0", loss)):
            bwd.launch(SOFTMAX_BW)
    fc = fc_seq[0] if pt else 0
    with bwd.nest("/model/fc/backward", "/model/fc/linear_backward", *node("AddmmBackward0", fc)):
        bwd.launch(GEMM_BW, GEMM_BW)
    for i in reversed(range(layers)):
        layer = f"/model/layer{i}"
        with bwd.range(f"{layer}/backward"):
            relu = node("ReluBackward0", relu_seq[i]) if pt else []
            with bwd.nest(f"{layer}/relu_backward", *relu):
                bwd.launch(RELU_BW)
            bn_node = node("CudnnBatchNormBackward0", bn_seq[i]) if pt else []
            with bwd.nest(f"{layer}/bn_backward", *bn_node):
                bwd.launch(BN_BW, BN_BW_FIN)
            conv_node = node("ConvolutionBackward0", conv_seq[i]) if pt else []
            with bwd.nest(f"{layer}/conv_backward", *conv_node, "aten::convolution_backward"):
                bwd.launch(NCHW2NHWC, DGRAD, WGRAD, SPLITK, NHWC2NCHW)
    with opt.nest("optimizer_step", *aten("aten::_fused_adam_")):
        opt.launch(*[ADAM] * ((layers + 1) // 2))
    opt.op(COPY_OUT)
    opt.op(SYNC)
    return fwd, bwd, opt


API_NAMES = {
    LAUNCH: "cudaLaunchKernel_v7000",
    COPY_IN: "cudaMemcpyAsync_v3020",
    MEMSET_OP: "cudaMemsetAsync_v3020",
    COPY_OUT: "cudaMemcpyAsync_v3020",
    SYNC: "cudaStreamSynchronize_v3020",
}
# Mean CPU time of each token kind (ns): NVTX push/pop, API calls; python overhead is the gap.
CPU_MEAN = {
    PUSH: 600,
    POP: 500,
    LAUNCH: 4_500,
    COPY_IN: 14_000,
    MEMSET_OP: 5_000,
    COPY_OUT: 9_000,
    SYNC: 3_000,
}
GAP_MEAN = 3_000


@dataclass
class Segment:
    """A script laid out for all iterations: token arrays and per-iteration CPU times."""

    script: Script
    tid: int
    kind: np.ndarray
    ref: np.ndarray
    pair: np.ndarray
    dur: np.ndarray  # (iterations, tokens) CPU duration of each token
    rel: np.ndarray  # (iterations, tokens) start relative to the segment start
    span: np.ndarray  # (iterations,) segment length
    api: np.ndarray  # tokens that are CUDA calls
    at: np.ndarray = field(init=False)  # (iterations, tokens) absolute start, filled by simulate

    @classmethod
    def draw(cls, script: Script, tid: int, iterations: int, rng: np.random.Generator) -> Segment:
        kind, ref, pair = script.arrays()
        mean = np.array([CPU_MEAN[k] for k in kind], dtype=float)
        shape = (iterations, len(kind))
        dur = (rng.lognormal(np.log(mean), 0.3, shape)).astype(np.int64) + 1
        gap = rng.lognormal(np.log(GAP_MEAN), 0.5, shape).astype(np.int64) + 100
        step = dur + gap
        rel = np.cumsum(step, axis=1) - step
        api = np.flatnonzero(kind >= LAUNCH)
        return cls(script, tid, kind, ref, pair, dur, rel, step.sum(axis=1), api)

    @property
    def pops(self) -> np.ndarray:
        """For every PUSH token (in order), the index of its POP."""
        pop_of = np.full(len(self.kind), -1)
        pops = np.flatnonzero(self.kind == POP)
        pop_of[self.pair[pops]] = pops
        return pop_of[self.kind == PUSH]


def gpu_durations(
    ops: np.ndarray, refs: np.ndarray, iterations: int, rng: np.random.Generator
) -> np.ndarray:
    """(iterations, ops) GPU times: a size per occurrence (layers differ) times run jitter."""
    base = np.empty(len(ops))
    for j, (kind, ref) in enumerate(zip(ops, refs, strict=True)):
        if kind == LAUNCH:
            base[j] = KERNELS[KERNEL_NAMES[ref]][0] * rng.uniform(0.5, 1.8)
        elif kind == COPY_IN:
            base[j] = INPUT_BYTES / 20.0  # ~20 GB/s pinned host-to-device
        else:
            base[j] = 2_000
    jitter = rng.lognormal(0.0, 0.06, (iterations, len(ops)))
    return (base * jitter).astype(np.int64) + 500


@dataclass
class Run:
    """The laid-out run: per-thread token times, GPU queue times, per-iteration landmarks."""

    segments: list[Segment]  # main before backward, autograd backward, main after backward
    iterations: int
    ops: np.ndarray  # token kind of every API call column (iteration-major layout)
    refs: np.ndarray  # kernel index of those columns (LAUNCH), else -1
    api_segment: np.ndarray  # segment of every API column
    gpu_pos: np.ndarray  # API columns that put work on the GPU (all but the synchronize)
    gpu_start: np.ndarray  # (iterations, len(gpu_pos))
    gpu_dur: np.ndarray  # (iterations, len(gpu_pos))
    sync_end: np.ndarray  # (iterations,) end of cudaStreamSynchronize
    iter_start: np.ndarray  # (iterations,)
    reads: np.ndarray  # (iterations,) duration of the read() at iteration start
    backward: np.ndarray  # (iterations, 2) main thread's "backward" range

    @property
    def api_start(self) -> np.ndarray:
        """(iterations, API columns) start of every CUDA call."""
        return np.hstack([s.at[:, s.api] for s in self.segments])

    @property
    def api_end(self) -> np.ndarray:
        end = self.api_start + np.hstack([s.dur[:, s.api] for s in self.segments])
        end[:, -1] = self.sync_end  # the synchronize waits for the GPU queue
        return end


def simulate(kernels: int, seed: int, layers: int = LAYERS, shape: str = "dlprof") -> Run:
    """Lay out about ``kernels`` kernels' worth of iterations, deterministically for ``seed``."""
    rng = np.random.default_rng(seed)
    scripts = training_scripts(layers, shape)
    per_iter = sum(s.kind.count(LAUNCH) for s in scripts)
    iterations = max(1, round(kernels / per_iter))
    tids = (MAIN_TID, AUTOGRAD_TID, MAIN_TID)
    segs = [Segment.draw(s, tid, iterations, rng) for s, tid in zip(scripts, tids, strict=True)]
    ops = np.array([s.kind[a] for s in segs for a in s.api])
    refs = np.array([s.ref[a] for s in segs for a in s.api])
    api_segment = np.array([k for k, s in enumerate(segs) for _ in s.api])
    gpu_pos = np.flatnonzero(ops != SYNC)
    gdur = gpu_durations(ops[gpu_pos], refs[gpu_pos], iterations, rng)
    cum = np.cumsum(gdur, axis=1)
    latency = rng.integers(1_500, 4_000, (iterations, len(gpu_pos)))
    reads = rng.integers(20_000, 90_000, iterations)

    for s in segs:
        s.at = np.empty_like(s.rel)
    gstart = np.empty_like(gdur)
    sync_end = np.empty(iterations, dtype=np.int64)
    iter_start = np.empty(iterations, dtype=np.int64)
    backward = np.empty((iterations, 2), dtype=np.int64)
    t, gpu_free = 300_000_000, 0
    for i in range(iterations):
        iter_start[i] = t
        t0 = t + reads[i] + 4_000  # after the mark and a read() of the next batch
        segs[0].at[i] = t0 + segs[0].rel[i]
        a_end = t0 + segs[0].span[i]
        segs[1].at[i] = a_end + 8_000 + segs[1].rel[i]  # the autograd thread wakes up
        b_end = a_end + 8_000 + segs[1].span[i]
        backward[i] = (a_end, b_end + 6_000)
        segs[2].at[i] = b_end + 12_000 + segs[2].rel[i]
        api_start = np.concatenate([s.at[i, s.api] for s in segs])
        ready = api_start[gpu_pos] + latency[i]
        ready[0] = max(ready[0], gpu_free)
        # e_j = max(ready_j, e_(j-1)) + d_j, solved in closed form with a running maximum.
        end = cum[i] + np.maximum.accumulate(ready - (cum[i] - gdur[i]))
        gstart[i] = end - gdur[i]
        gpu_free = int(end[-1])
        sync_start = segs[2].at[i, -1]
        sync_end[i] = max(sync_start + segs[2].dur[i, -1], gpu_free + 3_000)
        t = sync_end[i] + 25_000
    return Run(
        segs,
        iterations,
        ops,
        refs,
        api_segment,
        gpu_pos,
        gstart,
        gdur,
        sync_end,
        iter_start,
        reads,
        backward,
    )
