"""Expert systems, first set (guide §10.10): framework-agnostic detectors.

Each detector returns :class:`Finding` objects: the guide's Problem and Recommendation,
plus the evidence (ops, iterations, numbers) and, where one fits, an ``action`` a UI can
apply (e.g. ``{"set_range": [3, 40]}``). Thresholds are module constants so they are
documented and testable.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jlprof.engine.analyses.outliers import MIN_SAMPLE, OUTLIER_K, iteration_outliers
from jlprof.engine.analyses.outliers import steady as steady_iterations
from jlprof.reports import expert_pytorch  # framework-aware detectors (guide §10.10)
from jlprof.reports.expert_shapes import bad_tensor_shape
from jlprof.reports.expert_tensorflow import no_fusion
from jlprof.reports.finding import Finding
from jlprof.reports.tables import detail, duration_breakdown

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

RANGE_CV_LIMIT = 0.15  # robust CV (scaled MAD / median) above which a range is "bad"
STEADY_BAND = 0.10  # a steady iteration is within ±10 % of the median; an outlier beyond it
LOW_UTIL_PCT = 50.0  # guide: "overall GPU utilization is below 50%"
IMBALANCE_PCT = 20.0  # points between the busiest and the least busy visible GPU
TC_TOP = 5  # how many TC-eligible ops to name as evidence


def bad_iteration_range(p: Analysis, lo: int, hi: int) -> list[Finding]:
    """A lot of variation between iterations, judged robustly (docs/reports.md): a complete
    iteration that is an outlier (``engine.analyses.outliers``: above median + k scaled MADs) by
    more than STEADY_BAND of the median, or a robust CV (scaled MAD / median) above the limit.
    Recommends the longest run of complete iterations within STEADY_BAND of the median with
    no outlier in it; the mean-based CV is evidence only (one slow step moves it)."""
    its = p.iterations
    dur = its.durations_ns()[lo : hi + 1].astype(float)
    full = its.durations_ns()[steady_iterations(its, lo, hi)].astype(float)
    if len(dur) < 3 or full.mean() <= 0:
        return []
    robust = iteration_outliers(its, lo, hi)
    med = float(robust["median_ns"].iloc[0])
    mad = float(robust["mad_ns"].iloc[0])
    if med <= 0 or int((~robust["partial"]).sum()) < MIN_SAMPLE:
        return []
    out = robust["outlier"].to_numpy(bool)
    material = out & (dur - med > STEADY_BAND * med)
    robust_cv = mad / med
    if not material.any() and robust_cv <= RANGE_CV_LIMIT:
        return []
    cv = float(full.std() / full.mean())  # the partial first/last intervals left out
    steady = ~robust["partial"].to_numpy(bool) & ~out & (np.abs(dur - med) <= STEADY_BAND * med)
    best, best_len, run_start = (lo, lo), 0, None
    for i, ok in enumerate(np.append(steady, False)):  # one pass over iterations, not events
        if ok and run_start is None:
            run_start = i
        elif not ok and run_start is not None:
            if i - run_start > best_len:
                best_len, best = i - run_start, (lo + run_start, lo + i - 1)
            run_start = None
    outliers = robust["iteration"][out].astype(int).tolist()[:10]
    ev = {
        "iteration_cv": round(cv, 3),
        "robust_cv": round(robust_cv, 3),
        "median_iteration_ns": int(med),
        "outliers": outliers,
        "outlier_ns": [int(dur[i - lo]) for i in outliers],
        "outlier_rule": f"> median + {OUTLIER_K:g} scaled MADs (partial intervals excluded)",
    }
    if best_len >= 2:
        rec = (
            f"Try limiting the iteration range to a steady range by rerunning with "
            f"--database and setting --iter_start={best[0]} --iter_stop={best[1]}"
        )
        action = {"set_range": [best[0], best[1]]}
    else:
        rec = "No steady run of iterations was found; profile more iterations (e.g. 20-50)."
        action = None
    if material.any():
        worst = float((dur[out] - med).max() / med)
        why = (
            f"{int(out.sum())} outlier iteration(s), up to {worst:.0%} above the "
            f"median of {med / 1e6:.3g} ms"
        )
    else:
        why = f"robust iteration time CV {robust_cv:.0%}"
    return [
        Finding(
            "Bad Iteration Range Detector",
            f"The aggregated iteration range of {lo} to {hi} contains a lot of variation ({why}).",
            rec,
            ev,
            action,
        )
    ]


def no_iterations(p: Analysis, lo: int, hi: int) -> list[Finding]:
    """Key node absent: the whole profile is one iteration; name the best candidates."""
    if p.key_node is not None:
        return []
    cands = p.suggest_key_nodes(3)
    names = list(cands["op_name"])
    rec = "Specify a key node that runs once per iteration with --key_node" + (
        f", e.g. --key_node={names[0]} (candidates: {', '.join(names)})."
        if names
        else "; annotate each training step with an NVTX range (e.g. optimizer_step)."
    )
    ev = {"candidates": cands.to_dict(orient="records")}
    action = {"set_key_node": names[0]} if names else None
    return [
        Finding(
            "No Iteration Detector",
            "No iterations were found: the key node is unspecified or not in the profile "
            "(the default global_step / optimizer_step ranges are absent).",
            rec,
            ev,
            action,
        )
    ]


def underutilized_gpu(p: Analysis, lo: int, hi: int) -> list[Finding]:
    labels = p.gpu_labels
    if not p.n_gpu_rows:
        return [
            Finding(
                "Underutilized GPU Detector",
                "No GPU work was captured: the profile holds no kernels, copies or memsets.",
                "Profile with CUDA tracing (nsys profile -t cuda,nvtx) on a machine whose GPU "
                "the program uses; check that the model and data are moved to the GPU.",
                {"gpu_activities": 0, "visible_gpus": len(labels)},
            )
        ]
    if not labels:
        return []
    util = duration_breakdown(p, lo, hi)["gpu_util"].to_numpy()
    unused = [labels[i] for i in np.flatnonzero(util <= 0.0)]
    avg = float(util.mean())
    if avg >= LOW_UTIL_PCT and not unused:
        return []
    ev = {
        "gpu_utilization_pct": {labels[i]: round(float(u), 2) for i, u in enumerate(util)},
        "average_pct": round(avg, 2),
        "unused_gpus": unused,
    }
    parts = []
    if avg < LOW_UTIL_PCT:
        parts.append(f"GPU utilization is {avg:.1f}% (below {LOW_UTIL_PCT:.0f}%)")
    if unused:
        parts.append(f"{len(unused)} of {len(labels)} visible GPUs are unused")
    rec = (
        "Keep the GPU fed: increase the batch size, overlap data loading with compute "
        "(DataLoader num_workers, pin_memory), and remove host syncs in the step"
    )
    if unused:
        rec += "; use all visible GPUs (data parallel) or limit CUDA_VISIBLE_DEVICES to those used"
    return [Finding("Underutilized GPU Detector", "; ".join(parts) + ".", rec + ".", ev)]


def imbalanced_gpus(p: Analysis, lo: int, hi: int) -> list[Finding]:
    labels = p.gpu_labels
    if len(labels) < 2:
        return []
    util = duration_breakdown(p, lo, hi)["gpu_util"].to_numpy()
    spread = float(util.max() - util.min())
    if spread <= IMBALANCE_PCT:
        return []
    ev = {
        "gpu_utilization_pct": {labels[i]: round(float(u), 2) for i, u in enumerate(util)},
        "spread_pct_points": round(spread, 2),
    }
    return [
        Finding(
            "Imbalanced GPU Detector",
            f"GPU utilization differs by {spread:.1f} points between visible GPUs "
            f"({labels[int(util.argmax())]} {util.max():.1f}% vs "
            f"{labels[int(util.argmin())]} {util.min():.1f}%).",
            "Balance the work across GPUs (equal shards per rank, same batch size), or "
            "hide unused GPUs with CUDA_VISIBLE_DEVICES.",
            ev,
        )
    ]


def tc_not_used(p: Analysis, lo: int, hi: int) -> list[Finding]:
    det = detail(p, lo, hi)
    sel = det[det["TC Eligibility"] & ~det["Using TC"] & (det["Total GPU Time (ns)"] > 0)]
    if sel.empty:
        return []
    top = sel.nlargest(TC_TOP, "Total GPU Time (ns)")
    total = int(sel["Total GPU Time (ns)"].sum())
    ev = {
        "ops": [
            {
                "op_id": r["Op ID"],
                "op_type": r["Op Type"],
                "gpu_time_ns": int(r["Total GPU Time (ns)"]),
            }
            for _, r in top.iterrows()
        ],
        "eligible_not_using": len(sel),
        "gpu_time_ns": total,
    }
    return [
        Finding(
            "Tensor Core Usage Detector",
            f"{len(sel)} Tensor Core eligible op(s) ran no Tensor Core kernels "
            f"({total / 1e6:.2f} ms of GPU time), e.g. {top.iloc[0]['Op ID']}.",
            "Enable mixed precision (torch.autocast / AMP, TF32 on Ampere+), and keep "
            "channel, batch and hidden sizes multiples of 8 (16 for int8).",
            ev,
        )
    ]


DETECTORS: list[Callable[[Analysis, int, int], list[Finding]]] = [
    no_iterations,
    bad_iteration_range,
    underutilized_gpu,
    imbalanced_gpus,
    tc_not_used,
    bad_tensor_shape,
    no_fusion,
]


def findings(p: Analysis, lo: int, hi: int) -> list[Finding]:
    out: list[Finding] = []
    for det in DETECTORS:
        out += det(p, lo, hi)
    return out + expert_pytorch.findings(p, lo, hi)


def run_all(p: Analysis, lo: int, hi: int) -> pd.DataFrame:
    """The expert systems report: Problem, Recommendation, then our Detector and Evidence."""
    rows = [
        {
            "Problem": f.problem,
            "Recommendation": f.recommendation,
            "Detector": f.detector,
            "Evidence": json.dumps(f.evidence, default=str),
        }
        for f in findings(p, lo, hi)
    ]
    return pd.DataFrame(rows, columns=["Problem", "Recommendation", "Detector", "Evidence"])
