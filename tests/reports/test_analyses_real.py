"""The analyses on built exports and the real corpus, against independent computations.

* launch latency and queue time per kernel launch against NVIDIA's ``nsys stats -r
  kernexectrace`` (nsys 2022.4's name for the later ``cuda_kern_exec_trace``): API Start,
  Kernel Start, Queue Dur, launch by launch;
* idle causes against a sweep-line reference written here (elementary segments between all
  interval edges, Python counters, no ``engine.aggregate.intervals``), and the sum rule on every
  trace;
* roofline of the mmagic PyProf trace (shapes recorded) against the closed forms.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jlprof
from jlprof.engine.analyses.idle import SYNC_API
from jlprof.engine.read.trace import GLOBAL_PID_MASK
from jlprof.profile import Profile
from tests.fixtures.loops import small_training_export
from tests.fixtures.nsys_stats import cached_stats, nsys_path
from tests.fixtures.scenarios import real_traces

REAL = real_traces()
CAUSES = [
    "Memory Copy (ns)",
    "Synchronization (ns)",
    "Data Loading (ns)",
    "Host Launch Bound (ns)",
    "Other (ns)",
]


def _kernexectrace(sqlite: Path, out: Path) -> pd.DataFrame | None:
    """``nsys stats -r kernexectrace`` on ``sqlite`` (cached by content); None when skipped."""
    return cached_stats(sqlite, ("kernexectrace",), out)["kernexectrace"]


def _exports(tmp: Path) -> list[Path]:
    built = tmp / "kx_loop.sqlite"
    if not built.exists():
        small_training_export(built, steps=6)
    return [built, *REAL]


@pytest.mark.nsys
@pytest.mark.skipif(nsys_path() is None, reason="nsys (Nsight Systems CLI) is not on PATH")
@pytest.mark.parametrize(
    "which", range(1 + len(REAL)), ids=["built", *[p.parent.name for p in REAL]]
)
def test_launch_latency_matches_nsys_kernexectrace(which, tmp_path_factory):
    path = _exports(tmp_path_factory.getbasetemp())[which]
    ref = _kernexectrace(path, tmp_path_factory.mktemp("kx"))
    p = jlprof.load(path)
    ours = p.launch_stats(0, p.iterations.count - 1, per_launch=True)
    if ref is None:  # nsys skipped it: no kernel/runtime tables, so no launches here either
        assert ours.empty
        return
    ref = ref.copy()
    for c in ("API Start (ns)", "Kernel Start (ns)", "API Dur (ns)", "Kernel Dur (ns)", "DevId"):
        ref[c] = ref[c].astype(np.int64)
    ref["Queue"] = pd.to_numeric(ref["Queue Dur (ns)"], errors="coerce").fillna(0).astype(np.int64)
    ref["latency"] = ref["Kernel Start (ns)"] - ref["API Start (ns)"]
    # nsys joins kernels to runtime calls by correlationId; one row per traced launch
    assert len(ours) == len(ref)
    key = ["start", "dev", "api_start"]
    a = pd.DataFrame(
        {
            "start": ours["start_ns"],
            "dev": ours["device_id"],
            "api_start": ours["api_start_ns"],
            "latency": ours["latency_ns"],
            "queue": ours["queue_ns"],
            "api": ours["api_ns"],
            "kern": ours["kernel_ns"],
        }
    ).sort_values(key, kind="stable")
    b = pd.DataFrame(
        {
            "start": ref["Kernel Start (ns)"],
            "dev": ref["DevId"],
            "api_start": ref["API Start (ns)"],
            "latency": ref["latency"],
            "queue": ref["Queue"],
            "api": ref["API Dur (ns)"],
            "kern": ref["Kernel Dur (ns)"],
        }
    ).sort_values(key, kind="stable")
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))
    # launch-bound share, as the report counts it, from nsys' durations
    rep = p.report("launch_stats", 0, p.iterations.count - 1)
    assert rep["Launch-Bound Launches"].sum() == int((b["kern"] < b["api"]).sum())
    assert rep["Launches"].sum() == len(b)


def _sweep_idle(p: Profile) -> pd.DataFrame:
    """Per (GPU lane, iteration) idle causes by a sweep over elementary segments (reference)."""
    c = p.correlated
    g, a, inst = c.gpu, c.api, c.inst
    from jlprof.engine.aggregate.aggregate import DATALOADER, gpu_lanes

    lane, labels = gpu_lanes(c)
    bounds = p.iterations.bounds_ns
    real = ~inst["synthetic"].to_numpy(bool)
    ops = c.ops
    op_names = (ops["op_name"].astype(str) + " " + ops["op_type"].astype(str)).to_numpy()
    is_dl = np.array([bool(DATALOADER.search(n)) for n in op_names])
    rows = []
    g_pid = g["global_pid"].to_numpy(np.int64)
    a_pid = a["global_tid"].to_numpy(np.int64) & GLOBAL_PID_MASK
    i_pid = inst["global_tid"].to_numpy(np.int64) & GLOBAL_PID_MASK
    for ln in range(len(labels)):
        ivs: dict[str, list[tuple[int, int]]] = {
            k: [] for k in ("kern", "copy", "sync", "dl", "q", "host")
        }
        mine = np.flatnonzero(lane == ln)
        pids = set(g_pid[mine].tolist())
        for r in mine:
            s, e = int(g["start_ns"].iat[r]), int(g["end_ns"].iat[r])
            ivs["kern" if g["kind"].iat[r] == "kernel" else "copy"].append((s, e))
            ai = int(g["api"].iat[r])
            if ai >= 0 and int(a["end_ns"].iat[ai]) < s:
                ivs["q"].append((int(a["end_ns"].iat[ai]), s))
        for i in np.flatnonzero(np.isin(a_pid, list(pids))):
            s, e = int(a["start_ns"].iat[i]), int(a["end_ns"].iat[i])
            ivs["host"].append((s, e))
            if SYNC_API.match(str(a["name"].iat[i])):
                ivs["sync"].append((s, e))
        for i in np.flatnonzero(np.isin(i_pid, list(pids)) & real):
            s, e = int(inst["start_ns"].iat[i]), int(inst["end_ns"].iat[i])
            ivs["host"].append((s, e))
            if is_dl[int(inst["op"].iat[i])]:
                ivs["dl"].append((s, e))
        edges = sorted({*bounds.tolist(), *(t for v in ivs.values() for iv in v for t in iv)})
        edges = [t for t in edges if bounds[0] <= t <= bounds[-1]]
        events: dict[int, dict[str, int]] = {}
        for k, v in ivs.items():
            for s, e in v:
                if e > s:
                    events.setdefault(s, {}).setdefault(k, 0)
                    events[s][k] += 1
                    events.setdefault(e, {}).setdefault(k, 0)
                    events[e][k] -= 1
        # counters at bounds[0]: intervals open before it
        open_ = dict.fromkeys(ivs, 0)
        for t in sorted(x for x in events if x <= bounds[0]):
            for k, d in events[t].items():
                open_[k] += d
        acc = np.zeros((len(bounds) - 1, 6), np.int64)
        for t0, t1 in itertools.pairwise(edges):
            w = int(np.searchsorted(bounds[1:-1], t0, side="right"))
            if open_["kern"] <= 0:
                col = (
                    1
                    if open_["copy"] > 0
                    else 2
                    if open_["sync"] > 0
                    else 3
                    if open_["dl"] > 0
                    else 5
                    if open_["q"] > 0
                    else 4
                    if open_["host"] > 0
                    else 5
                )
                acc[w, 0] += t1 - t0
                acc[w, col] += t1 - t0
            for k, d in events.get(t1, {}).items():
                open_[k] += d
        for it in range(len(bounds) - 1):
            rows.append((ln, it, *acc[it].tolist()))
    return pd.DataFrame(rows, columns=["lane", "it", "idle", "copy", "sync", "dl", "host", "other"])


@pytest.mark.parametrize("path", REAL, ids=[p.parent.name for p in REAL])
def test_idle_causes_on_real_traces_match_a_sweep(path):
    p = jlprof.load(path)
    rep = p.report("idle_causes", 0, p.iterations.count - 1)
    # the parts sum to the idle time, and idle + busy to the wall time, everywhere
    assert (rep[CAUSES].sum(axis=1) == rep["GPU Idle Time (ns)"]).all()
    assert (rep["GPU Idle Time (ns)"] + rep["GPU Busy Time (ns)"] == rep["Wall Time (ns)"]).all()
    if not len(p.gpu_labels):
        return
    ref = _sweep_idle(p)
    got = rep[["GPU Idle Time (ns)", *CAUSES]].to_numpy(np.int64)
    want = ref[["idle", "copy", "sync", "dl", "host", "other"]].to_numpy(np.int64)
    np.testing.assert_array_equal(got, want)


def test_roofline_of_the_real_pyprof_trace():
    path = next(p for p in REAL if p.parent.name == "mmagic-pyprof-a100")
    p = jlprof.load(path)
    r = p.roofline()
    assert set(r["Model"]) >= {"conv", "elementwise"}
    assert (r["GPU"] == "NVIDIA A100-SXM4-40GB").all()
    conv = r[r["Input Shapes"] == "[[1,128,64,64],[144,128,7,7],[144]]"].iloc[0]
    # 2 * N * O * H * W * C * kh * kw: the PyProf args say stride 1, padding 3, dilation 1
    # (7x7 filter), so the output keeps 64x64
    flops = 2 * 1 * 144 * 64 * 64 * 128 * 7 * 7
    assert conv["FLOPs per Call"] == flops
    assert conv["Achieved TFLOP/s"] == pytest.approx(
        flops * conv["No. Calls"] / (conv["Total GPU Time (ns)"] * 1e-9) / 1e12, rel=1e-3
    )
    add = r[(r["Op Type"] == "add") & (r["Input Shapes"] == "[[1,144,64,64],[1,144,64,64]]")].iloc[
        0
    ]
    assert add["Bytes per Call"] == 3 * 144 * 64 * 64 * 4 and add["Roofline Bound"] == "memory"
