"""A random but realistic training loop as Trace frames, plus a slow reference analysis.

The reference walks Python lists with the correlation rules written out literally, so
the vectorised engine is checked against an independent computation.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from .frames import call, gpu_info, kernel, make_trace, rng


@dataclass
class Loop:
    trace: object
    ranges: list[dict]
    calls: list[dict]
    kernels: list[dict]


def training_loop(
    seed: int = 0, iters: int = 6, gpus: int = 1, idle_gpus: int = 0, overlap: float = 0.0
) -> Loop:
    """``overlap``: chance that a kernel starts while the previous one still runs (as on a
    second stream), so the GPU work mixes isolated and overlapping kernels."""
    r = np.random.default_rng(seed)
    ranges, calls, kernels = [], [], []
    corr = defaultdict(int)
    for g in range(gpus):
        pid = 100 + g
        t = int(r.integers(0, 50))
        gpu_t = t
        for _ in range(iters):
            step0 = t
            for op in ("conv", "relu", "linear"):
                o0 = t
                for _k in range(int(r.integers(1, 4))):
                    corr[pid] += 1
                    a0 = t + int(r.integers(1, 5))
                    a1 = a0 + int(r.integers(1, 8))
                    calls.append(call(a0, a1, corr[pid], pid=pid))
                    gs = max(gpu_t, a1 + int(r.integers(0, 10)))
                    if overlap and kernels and r.random() < overlap:
                        gs = max(kernels[-1]["start_ns"] + 1, a1)  # may start mid-kernel
                    ge = gs + int(r.integers(5, 60))
                    name = {
                        "conv": "volta_h884cudnn_conv",
                        "linear": "sm80_xmma_gemm_f16",
                        "relu": "elementwise_relu",
                    }[op]
                    kernels.append(kernel(gs, ge, corr[pid], pid=pid, device=g, name=name))
                    gpu_t = max(gpu_t, ge)
                    t = a1
                t += int(r.integers(1, 5))
                ranges.append(rng(op, o0, t, pid=pid))
            # an unassociated sync outside every range, then the key node
            corr[pid] += 1
            calls.append(call(t + 1, t + 3, corr[pid], pid=pid, name="cudaStreamSynchronize"))
            t += 4
            k0 = t
            t += int(r.integers(2, 20 if _ % 3 else 80))
            ranges.append(rng("optimizer_step", k0, t, pid=pid))
            ranges.append(rng("step", step0, t, pid=pid))
            t += 1
    info = [gpu_info(i) for i in range(gpus + idle_gpus)]
    return Loop(make_trace(gpu=kernels, api=calls, nvtx=ranges, gpus=info), ranges, calls, kernels)


def reference_ops(loop: Loop) -> dict[str, dict]:
    """Per op name: calls, cpu total/min/max, exclusive gpu total — by brute force."""
    owner = {}
    for ci, c in enumerate(loop.calls):
        inside = [
            i
            for i, rr in enumerate(loop.ranges)
            if rr["global_tid"] == c["global_tid"]
            and rr["start_ns"] <= c["start_ns"]
            and c["end_ns"] <= rr["end_ns"]
        ]
        owner[ci] = (
            max(inside, key=lambda i: (loop.ranges[i]["start_ns"], -loop.ranges[i]["end_ns"]))
            if inside
            else None
        )
    gpu_by_range = defaultdict(int)
    for k in loop.kernels:
        ci = next(
            i
            for i, c in enumerate(loop.calls)
            if c["correlation_id"] == k["correlation_id"]
            and (c["global_tid"] >> 24) == (k["global_pid"] >> 24)
        )
        if owner[ci] is not None:
            gpu_by_range[owner[ci]] += k["end_ns"] - k["start_ns"]
    out: dict[str, dict] = {}
    for i, rr in enumerate(loop.ranges):
        d = out.setdefault(rr["text"], {"calls": 0, "cpu": [], "gpu": []})
        d["calls"] += 1
        d["cpu"].append(rr["end_ns"] - rr["start_ns"])
        d["gpu"].append(gpu_by_range[i])
    return out
