"""Expert systems for PyTorch (guide §10.10) and the GPU-side ones DLProf never had.

DLProf's PyTorch detectors (AMP, Dataloader, cuDNN benchmark, Slow API, Batch Size, Emit NVTX
missing) read framework state the trace cannot show; here it comes from the ``jlprof:`` marks that
``jlprof.torch`` writes (``jlprof.engine.correlate.annotations``), so every detector works from the
saved profile alone. The rest read the trace: host-bound gaps between iterations, launch-bound
steps, pageable/synchronous copies, host<->device copies inside the step, device syncs in the loop
and torch.compile recompilations. Thresholds are module constants (documented, tested).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from jlprof.engine.aggregate.aggregate import DATALOADER
from jlprof.engine.aggregate.step_evidence import Counts
from jlprof.engine.correlate.annotations import annotation_facts
from jlprof.reports.finding import Finding
from jlprof.reports.tables import detail

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

DATALOADER_PCT = 10.0  # % of the range's wall time in DataLoader fetches
BATCH_MEM_PCT = 50.0  # peak allocated / device memory below which the batch could grow
BATCH_MEM_TARGET = 0.8  # suggested batch sizes aim at this fraction of device memory
GAP_PCT = 10.0  # GPU idle between iterations, % of the iterations' wall time
LAUNCH_MIN_KERNELS = 100  # kernels per iteration before a step can be "launch-bound"
LAUNCH_TINY_NS = 10_000  # median kernel shorter than this is "tiny"
SYNC_ITER_FRACTION = 0.5  # syncs in at least this share of the iterations
TOP = 5
SYNC_OPS = frozenset({"_local_scalar_dense", "item", "is_nonzero", "nonzero", "equal"})
CONV = re.compile(r"conv", re.I)


# ---- shared evidence ----------------------------------------------------------------------
def facts(p: Analysis) -> dict[str, Any]:
    return p.memo("torch_facts", 0, 0, lambda: annotation_facts(p.trace))


def _window(p: Analysis, lo: int, hi: int) -> tuple[int, int]:
    b = p.iterations.bounds_ns
    return int(b[lo]), int(b[hi + 1])


def _annotated_ops(p: Analysis) -> np.ndarray:
    return (p.correlated.ops["direction"] != "").to_numpy(bool)


def applies(p: Analysis) -> bool:
    """PyTorch detectors run in ``pytorch`` mode or when jlprof.torch annotations are present."""
    return p.mode == "pytorch" or bool(_annotated_ops(p).any()) or facts(p)["annotated"]


def _inst_in_range(p: Analysis, lo: int, hi: int) -> np.ndarray:
    it = p.cube.inst_iter
    return (it >= lo) & (it <= hi)


def _top_ops(p: Analysis, op: np.ndarray) -> list[dict]:
    """The ops behind some events (each event's op row), most first: op ID and count."""
    return _top_counts(p, pd.Series(np.ones(len(op), np.int64), index=op).groupby(level=0).sum())


def _top_counts(p: Analysis, counts: pd.Series) -> list[dict]:
    """The ops of ``counts`` (events per op row, ascending), most first: op ID and count."""
    return _top(p, pd.DataFrame({"count": counts, "sum": counts.astype(float)}))


def _top(p: Analysis, s: pd.DataFrame, weighted: bool = False) -> list[dict]:
    """The ops of ``s`` (index: op row, ascending; ``count`` of events and ``sum`` of their
    weight) most first, the events of no op (-1) and ops with none left out: op ID and
    count (and summed weight, ``weighted``)."""
    s = s[(s.index >= 0) & (s["count"] > 0)]
    if not len(s):
        return []
    s = s.sort_values(["sum", "count"], ascending=False).head(TOP)
    ids = p.correlated.ops["op_id"].to_numpy(object)
    out = []
    for o, row in s.iterrows():
        d = {"op_id": str(ids[int(o)]), "count": int(row["count"])}
        if weighted:
            d["total"] = int(row["sum"])
        out.append(d)
    return out


# ---- DLProf's PyTorch detectors -----------------------------------------------------------
def amp(p: Analysis, lo: int, hi: int) -> list[Finding]:
    """AMP Detector: Tensor Core eligible ops run while autocast was never on."""
    f = facts(p)
    states = f["states"]
    det = detail(p, lo, hi)
    elig = det[det["TC Eligibility"]]
    if elig.empty:
        return []
    if states:
        if any(s.get("amp") for s in states):
            return []
        how = "autocast was off in every model call"
    else:  # no marks: fall back on the annotated data types
        dtypes = set(elig.get("Data Type", pd.Series(dtype=object))) - {""}
        if not dtypes or dtypes - {"float32", "float64"}:
            return []
        how = f"every Tensor Core eligible op ran in {', '.join(sorted(dtypes))}"
    top = elig.nlargest(TOP, ["Total GPU Time (ns)", "Total CPU Time (ns)"])
    ev = {
        "amp_states": [s.get("amp") for s in states],
        "tc_eligible_ops": len(elig),
        "tc_eligible_gpu_ns": int(elig["Total GPU Time (ns)"].sum()),
        "ops": list(top["Op ID"]),
    }
    return [
        Finding(
            "AMP Detector",
            f"Automatic mixed precision (AMP) is not used: {how}, and {len(elig)} op(s) could "
            f"use Tensor Cores (e.g. {top.iloc[0]['Op ID']}).",
            "Wrap the forward pass and loss in torch.autocast(device_type='cuda', "
            "dtype=torch.float16 or torch.bfloat16) and scale the loss with "
            "torch.amp.GradScaler for float16.",
            ev,
        )
    ]


def dataloader(p: Analysis, lo: int, hi: int) -> list[Finding]:
    """Dataloader Detector: a large share of the range is spent fetching batches."""
    c = p.correlated
    ops = c.ops
    is_dl = (
        ops["op_name"].astype(str).str.fullmatch(r"(?i).*dataloader|data_?load(er)?")
        | ops["op_type"].astype(str).str.contains(DATALOADER)
    ).to_numpy(bool)
    inst = c.inst
    sel = _inst_in_range(p, lo, hi) & is_dl[inst["op"].to_numpy(np.int64)]
    sel &= ~inst["synthetic"].to_numpy(bool)
    if not sel.any():
        return []
    t0, t1 = _window(p, lo, hi)
    start = np.clip(inst["start_ns"].to_numpy(np.int64)[sel], t0, t1)
    end = np.clip(inst["end_ns"].to_numpy(np.int64)[sel], t0, t1)
    order = np.argsort(start)
    start, end = start[order], end[order]
    busy = _union(start, end)
    wall = max(t1 - t0, 1)
    pct = 100.0 * busy / wall
    if pct < DATALOADER_PCT:
        return []
    ev = {
        "dataloader_ns": busy,
        "wall_ns": wall,
        "dataloader_pct": round(pct, 2),
        "fetches": int(sel.sum()),
        "avg_fetch_ns": int((end - start).mean()),
    }
    return [
        Finding(
            "Dataloader Detector",
            f"{pct:.1f}% of the aggregated range is spent in the DataLoader "
            f"({int(sel.sum())} fetches, {ev['avg_fetch_ns'] / 1e6:.2f} ms each on average).",
            "Load data in parallel with training: DataLoader(num_workers=N, pin_memory=True, "
            "persistent_workers=True, prefetch_factor=2+); move per-sample preprocessing to "
            "the GPU or do it once ahead of training.",
            ev,
        )
    ]


def _union(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of intervals sorted by start."""
    if not len(start):
        return 0
    reach = np.maximum.accumulate(end)
    prev = np.concatenate([[start[0]], reach[:-1]])
    return int(np.maximum(end - np.maximum(start, prev), 0).sum() + 0)


def cudnn_benchmark(p: Analysis, lo: int, hi: int) -> list[Finding]:
    """cuDNN Benchmark Detector: convolutions on the GPU with cudnn.benchmark off."""
    f = facts(p)
    states = f["states"]
    if not states or any(s.get("cudnn_benchmark") for s in states):
        return []
    det = detail(p, lo, hi)
    conv = det[det["Op Type"].astype(str).str.contains(CONV)]
    on_gpu = bool(any(s.get("cuda") for s in states)) or conv["Total GPU Time (ns)"].sum() > 0
    if conv.empty or not on_gpu:
        return []
    ev = {
        "conv_ops": len(conv),
        "conv_gpu_ns": int(conv["Total GPU Time (ns)"].sum()),
        "ops": list(conv.nlargest(TOP, "Total GPU Time (ns)")["Op ID"]),
        "input_shapes": sorted(set(conv["Input Shapes"]) - {""})[:TOP],
    }
    return [
        Finding(
            "cuDNN Benchmark Detector",
            f"torch.backends.cudnn.benchmark is False while {len(conv)} convolution op(s) run "
            "on the GPU: cuDNN uses its default algorithms instead of the fastest ones.",
            "Set torch.backends.cudnn.benchmark = True before training when input shapes stay "
            "the same from step to step (it re-tunes for every new shape).",
            ev,
        )
    ]


SLOW_API_ADVICE = {
    "detect_anomaly": "torch.autograd.detect_anomaly()",
    "set_detect_anomaly": "torch.autograd.set_detect_anomaly(True)",
    "gradcheck": "torch.autograd.gradcheck",
    "gradgradcheck": "torch.autograd.gradgradcheck",
    "record_function": "torch.autograd.profiler.record_function",
    "autograd_profiler": "torch.autograd.profiler.profile",
}


def slow_api(p: Analysis, lo: int, hi: int) -> list[Finding]:
    """Slow API Detector: debugging APIs left on in the profiled run."""
    f = facts(p)
    apis = list(f["slow_apis"])
    if any(s.get("detect_anomaly") for s in f["states"]) and not {
        "detect_anomaly",
        "set_detect_anomaly",
    } & set(apis):
        apis.append("detect_anomaly")
    if not apis:
        return []
    names = [SLOW_API_ADVICE.get(a, a) for a in apis]
    return [
        Finding(
            "Slow API Detector",
            f"Slow debugging API(s) used during the run: {', '.join(names)}.",
            "Use these only while debugging: remove them (or guard them with a flag) for "
            "training and profiling runs.",
            {"apis": apis},
        )
    ]


def batch_size(p: Analysis, lo: int, hi: int) -> list[Finding]:
    """Batch Size Detector: the peak GPU memory leaves much of the device unused."""
    f = facts(p)
    peak, total = f["peak_mem_bytes"], f["total_mem_bytes"]
    if not peak or not total:
        return []
    pct = 100.0 * peak / total
    if pct >= BATCH_MEM_PCT:
        return []
    batch = f["user"].get("batch_size") or f["state"].get("batch_size")
    ev: dict[str, Any] = {
        "peak_mem_bytes": int(peak),
        "total_mem_bytes": int(total),
        "peak_mem_pct": round(pct, 2),
        "batch_size": batch,
    }
    rec = "Increase the batch size (scale the learning rate with it)"
    if batch:
        suggest = int(batch * BATCH_MEM_TARGET * total / peak)
        ev["suggested_batch_size"] = suggest
        rec += f": about {suggest} would use ~{BATCH_MEM_TARGET:.0%} of the GPU memory"
    return [
        Finding(
            "Batch Size Detector",
            f"The training peaks at {peak / 2**30:.2f} GiB of {total / 2**30:.2f} GiB GPU "
            f"memory ({pct:.0f}%)" + (f" with batch size {batch}" if batch else "") + ".",
            rec + ".",
            ev,
        )
    ]


def annotation_missing(p: Analysis, lo: int, hi: int) -> list[Finding]:
    """Emit NVTX Missing Detector: pytorch mode but no (or forward-only) op annotation."""
    if p.mode != "pytorch":
        return []
    ops = p.correlated.ops
    direction = ops["direction"].astype(str)
    if not p.correlated.markers:  # no emit_nvtx, DLProf/PyProf plugin or jlprof.torch ranges
        return [
            Finding(
                "Emit NVTX Missing Detector",
                "No PyTorch ops were detected: the profile has no jlprof.torch (or "
                "emit_nvtx) op ranges, so ops, directions and shapes are unknown.",
                "Call jlprof.torch.init() before the training loop (or profile with "
                "jlprof --mode=pytorch / %%dlprof -m pytorch, which does it).",
                {"annotated_ops": 0},
            )
        ]
    key = p.key_node == "optimizer_step"
    if key and (direction == "fprop").any() and not (direction == "bprop").any():
        return [
            Finding(
                "Emit NVTX Missing Detector",
                "Forward ops are annotated but no backward (bprop) op was seen although the "
                "run has optimizer steps: the backward pass ran unannotated.",
                "Call jlprof.torch.init() on the thread that calls loss.backward(), before "
                "the first backward pass.",
                {"fprop_ops": int((direction == "fprop").sum()), "bprop_ops": 0},
            )
        ]
    return []


# ---- beyond DLProf ------------------------------------------------------------------------
def host_bound(p: Analysis, lo: int, hi: int) -> list[Finding]:
    """GPU idle between iterations: the host prepares the next step while the GPU waits."""
    if hi - lo < 1:
        return []
    e = p.step_evidence(lo, hi)
    has = e.first_ns <= e.last_ns  # iterations that launched GPU work
    if not e.n_gpu or not has.any():
        return []
    idx = np.flatnonzero(has) + lo
    consec = np.flatnonzero(np.diff(idx) == 1)
    if not len(consec):
        return []
    first, last = e.first_ns[has], e.last_ns[has]
    gaps = first[consec + 1] - last[consec]
    gaps = np.maximum(gaps, 0)
    wall = int(p.iterations.durations_ns()[idx[consec + 1]].sum())
    pct = 100.0 * gaps.sum() / max(wall, 1)
    if pct < GAP_PCT:
        return []
    worst = np.argsort(gaps)[::-1][:TOP]
    ev = {
        "idle_between_iterations_ns": int(gaps.sum()),
        "pct_of_wall": round(pct, 2),
        "median_gap_ns": int(np.median(gaps)),
        "worst_iterations": [int(idx[consec[i] + 1]) for i in worst],
        "worst_gap_ns": [int(gaps[i]) for i in worst],
    }
    return [
        Finding(
            "Host-Bound Gap Detector",
            f"The GPU sits idle between iterations for {pct:.1f}% of the time (median gap "
            f"{ev['median_gap_ns'] / 1e6:.2f} ms): the host is not ready with the next step.",
            "Overlap host work with the GPU: DataLoader workers with pin_memory and "
            ".to(device, non_blocking=True), no logging/.item() between steps, and keep "
            "per-step Python work small (or capture the step in a CUDA graph).",
            ev,
        )
    ]


def launch_bound(p: Analysis, lo: int, hi: int) -> list[Finding]:
    """Many tiny kernels: launch overhead, not GPU work, sets the pace."""
    e = p.step_evidence(lo, hi)
    kernels: Counts = e.kernel_ns
    n_kern, kernel_ns = kernels.n, kernels.total()
    n_it = hi - lo + 1
    if n_kern < LAUNCH_MIN_KERNELS * n_it:
        return []
    med = kernels.median()
    calls: Counts = e.launch_ns  # each launching call once
    # the typical launch times the launches: a one-time cost (a 900 ms module load on the
    # first launch) is not launch overhead
    launch_ns = int(calls.median() * calls.n) if calls.n else 0
    if med >= LAUNCH_TINY_NS or launch_ns < kernel_ns:
        return []
    ev = {
        "kernels_per_iteration": round(n_kern / n_it, 1),
        "median_kernel_ns": int(med),
        "kernel_ns": kernel_ns,
        "launch_api_ns": launch_ns,
        "ops": _top_counts(p, e.kernel_ops),
    }
    return [
        Finding(
            "Launch-Bound Step Detector",
            f"Each iteration launches {ev['kernels_per_iteration']:.0f} kernels with a median "
            f"run time of {med / 1e3:.1f} µs; launching them takes longer ({launch_ns / 1e6:.2f}"
            f" ms) than running them ({kernel_ns / 1e6:.2f} ms).",
            "Reduce launches: torch.compile(model) to fuse ops, CUDA graphs "
            "(torch.compile(mode='reduce-overhead') or torch.cuda.graphs), fused optimizers "
            "(foreach/fused=True), or a larger batch per launch.",
            ev,
        )
    ]


def slow_copies(p: Analysis, lo: int, hi: int) -> list[Finding]:
    """Copies from pageable host memory or through synchronous cudaMemcpy calls."""
    e = p.step_evidence(lo, hi)
    copies = e.copies
    if not e.n_memcpy or not copies["slow_n"].sum():
        return []
    ev = {
        "pageable_copies": e.pageable,
        "synchronous_copies": e.synchronous,
        "bytes": int(copies["slow_bytes"].sum()),
        "copy_ns": int(copies["slow_ns"].sum()),
        "ops": _top(p, copies[["slow_n", "slow_bytes"]].set_axis(["count", "sum"], axis=1), True),
    }
    parts = []
    if e.pageable:
        parts.append(f"{e.pageable} copies use pageable (unpinned) host memory")
    if e.synchronous:
        parts.append(f"{e.synchronous} copies are synchronous cudaMemcpy calls")
    return [
        Finding(
            "Synchronous/Pageable Copy Detector",
            "; ".join(parts) + f" ({ev['bytes'] / 2**20:.1f} MiB): the host waits for them and "
            "they cannot overlap with compute.",
            "Pin host memory (DataLoader(pin_memory=True) or tensor.pin_memory()) and copy with "
            "tensor.to(device, non_blocking=True).",
            ev,
        )
    ]


def step_copies(p: Analysis, lo: int, hi: int) -> list[Finding]:
    """Host<->device copies inside the training step (device->host, or host->device in a model)."""
    e = p.step_evidence(lo, hi)
    if not e.n_memcpy:
        return []
    copies = e.copies
    op = copies.index.to_numpy(np.int64)
    # per op: a copy is in the model when its op's name is a deep path
    op_names = p.correlated.ops["op_name"].astype(str).to_numpy(object)
    deep = np.array([n.count("/") >= 2 and not DATALOADER.search(n) for n in op_names], bool)
    in_model = np.append(deep, False)[np.where(op >= 0, op, len(deep))]
    htod_n = np.where(in_model, copies["htod_n"].to_numpy(np.int64), 0)
    bad_n = copies["dtoh_n"].to_numpy(np.int64) + htod_n
    if not bad_n.sum():
        return []
    nbytes = copies["dtoh_bytes"].to_numpy(np.int64)
    nbytes = nbytes + np.where(in_model, copies["htod_bytes"].to_numpy(np.int64), 0)
    ev = {
        "device_to_host": int(copies["dtoh_n"].sum()),
        "host_to_device_in_model": int(htod_n.sum()),
        "per_iteration": round(bad_n.sum() / (hi - lo + 1), 2),
        "bytes": int(nbytes.sum()),
        "ops": _top(p, pd.DataFrame({"count": bad_n, "sum": nbytes}, index=op), weighted=True),
    }
    where = ev["ops"][0]["op_id"] if ev["ops"] else "unannotated code"
    return [
        Finding(
            "Copies In Step Detector",
            f"{int(bad_n.sum())} host<->device copies run inside the training step "
            f"({ev['device_to_host']} device-to-host, {ev['host_to_device_in_model']} "
            f"host-to-device inside the model), e.g. in {where}.",
            "Keep tensors on the GPU inside the step: create constants with device=..., "
            "avoid .cpu()/.numpy()/.tolist() on step results, and move inputs once per batch.",
            ev,
        )
    ]


def device_syncs(p: Analysis, lo: int, hi: int) -> list[Finding]:
    """Host-device synchronisations inside the loop (``.item()``, ``.cpu()``, explicit syncs)."""
    c = p.correlated
    n_it = hi - lo + 1
    hit_iters: set[int] = set()
    ev: dict[str, Any] = {}
    # syncing ops seen by the annotation (CPU and GPU builds alike)
    op_types = c.ops["op_type"].astype(str).to_numpy(object)
    is_sync_op = np.array([t in SYNC_OPS for t in op_types], bool)
    inst_op = c.inst["op"].to_numpy(np.int64)
    sel = _inst_in_range(p, lo, hi) & is_sync_op[inst_op] & ~c.inst["synthetic"].to_numpy(bool)
    if sel.any():
        hit_iters |= set(p.cube.inst_iter[sel].tolist())
        ev["sync_ops"] = _top_ops(p, inst_op[sel])
    # explicit synchronising CUDA calls
    e = p.step_evidence(lo, hi)
    if e.sync_calls:
        hit_iters |= set((np.flatnonzero(e.sync_iter) + lo).tolist())
        ev["sync_calls"] = e.sync_calls
        ev["sync_call_names"] = sorted(e.sync_names)[:TOP]
        ev["sync_call_ops"] = _top_counts(p, e.sync_ops)
    share = len(hit_iters) / max(n_it, 1)
    if share < SYNC_ITER_FRACTION or not hit_iters:
        return []
    ev["iterations_with_syncs"] = len(hit_iters)
    ev["iterations"] = n_it
    where = (ev.get("sync_ops") or ev.get("sync_call_ops") or [{"op_id": "?"}])[0]["op_id"]
    return [
        Finding(
            "Device Sync Detector",
            f"{len(hit_iters)} of {n_it} iterations synchronise the host with the device "
            f"(e.g. {where}): the CPU stops queueing work until the GPU catches up.",
            "Avoid .item(), .cpu(), print(tensor) and torch.cuda.synchronize() in every step: "
            "accumulate metrics on the device and read them every N steps.",
            ev,
        )
    ]


def recompilations(p: Analysis, lo: int, hi: int) -> list[Finding]:
    """torch.compile compiled new graphs after warm-up (recompilations cost seconds each)."""
    pairs = sorted(facts(p)["compiled_graphs"])
    if len(pairs) < 2:
        return []
    step = np.asarray([s for s, _ in pairs], np.int64)
    graphs = np.asarray([g for _, g in pairs], np.int64)
    grew = np.diff(graphs)
    first = int(np.argmax(graphs > 0)) if (graphs > 0).any() else len(graphs)
    # growth up to the first mark with a graph is the first compilation, not a recompilation
    late = (grew > 0) & (np.arange(1, len(graphs)) > first)
    n = int(grew[late].sum())
    if n <= 0:
        return []
    steps = step[1:][late].tolist()[:10]
    return [
        Finding(
            "Recompilation Detector",
            f"torch.compile compiled {n} new graph(s) after the first step (at steps "
            f"{', '.join(map(str, steps))}): every recompilation stalls training.",
            "Find the cause with TORCH_LOGS=recompiles; mark changing dimensions dynamic "
            "(torch._dynamo.mark_dynamic or torch.compile(dynamic=True)) and keep Python "
            "scalars that change per step out of the compiled function.",
            {"compiled_graphs": [list(x) for x in pairs[:50]], "recompilations": n, "steps": steps},
        )
    ]


DETECTORS: list[Callable[[Analysis, int, int], list[Finding]]] = [
    annotation_missing,
    amp,
    dataloader,
    cudnn_benchmark,
    slow_api,
    batch_size,
    host_bound,
    launch_bound,
    slow_copies,
    step_copies,
    device_syncs,
    recompilations,
]


def findings(p: Analysis, lo: int, hi: int) -> list[Finding]:
    if not applies(p):
        return []
    out: list[Finding] = []
    for det in DETECTORS:
        out += det(p, lo, hi)
    return out
