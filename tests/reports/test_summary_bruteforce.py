"""Summary figures recomputed by brute force from the raw SQLite rows of a built export.

Nothing here goes through jlprof's reader or interval code: events come from plain SQL, and
every nanosecond of the wall-clock range is marked per GPU in a numpy boolean array, then the
guide's priority partition (TC kernels > other kernels > memory > data loader > I/O > CPU >
other) is taken nanosecond by nanosecond.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

import jlprof
from jlprof.engine.analyses.outliers import excluded
from jlprof.profile import Profile
from tests.fixtures.scenarios import (
    ITERS,
    KEY_NODE,
    LONG,
    STEP_ENDS,
    T_FIRST,
    T_LAST,
    TC_KERNELS,
    rich_db,
)

BOUNDS = [T_FIRST, *STEP_ENDS, T_LAST]


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rich_db().write(tmp_path_factory.mktemp("brute") / "rich.sqlite")


@pytest.fixture(scope="module")
def prof(export: Path) -> Profile:
    return jlprof.load(export, key_node=KEY_NODE)


@pytest.fixture(scope="module")
def raw(export: Path) -> dict:
    """The events as plain Python tuples, straight from SQL."""
    con = sqlite3.connect(export)
    q = con.execute
    gpu = []
    for table in ("KERNEL", "MEMCPY", "MEMSET"):
        name = "s.value" if table == "KERNEL" else "'memory'"
        join = "join StringIds s on s.id = k.demangledName" if table == "KERNEL" else ""
        rows = q(
            f"select k.start, k.end, k.deviceId, {name} from CUPTI_ACTIVITY_KIND_{table} k {join}"
        )
        gpu += [
            (s, e, d, "tc" if n in TC_KERNELS else "mem" if n == "memory" else "non_tc")
            for s, e, d, n in rows
        ]
    last_nvtx = q("select max(max(start), max(end)) from NVTX_EVENTS").fetchone()[0]
    ranges = q(
        "select e.start, coalesce(e.end, ?), coalesce(e.text, s.value) from NVTX_EVENTS e "
        "left join StringIds s on s.id = e.textId where e.eventType in (59, 60)",
        (last_nvtx,),
    ).fetchall()
    return {
        "gpu": gpu,
        "devices": [r[0] for r in q("select cuDevice from TARGET_INFO_GPU order by id")],
        "ranges": ranges,
        "api": q("select start, end from CUPTI_ACTIVITY_KIND_RUNTIME").fetchall(),
        "io": q("select start, end from OSRT_API").fetchall(),
    }


def mask(intervals, t0: int, t1: int) -> np.ndarray:
    """Covered nanoseconds of [t0, t1)."""
    m = np.zeros(t1 - t0, dtype=bool)
    for s, e in intervals:
        lo, hi = max(s, t0) - t0, min(e, t1) - t0
        if hi > lo:
            m[lo:hi] = True
    return m


def brute_breakdown(raw: dict, t0: int, t1: int) -> dict[str, float]:
    """Per-GPU priority partition of [t0, t1) in %, averaged over the visible GPUs."""
    host = {
        "dataloader": mask(
            [(s, e) for s, e, text in raw["ranges"] if text == "DataLoader"], t0, t1
        ),
        "io": mask(raw["io"], t0, t1),
        "cpu": mask([(s, e) for s, e, _ in raw["ranges"]] + raw["api"], t0, t1),
    }
    per_gpu = []
    for dev in raw["devices"]:
        cats = {
            c: mask([(s, e) for s, e, d, k in raw["gpu"] if d == dev and k == c], t0, t1)
            for c in ("tc", "non_tc", "mem")
        }
        taken = np.zeros(t1 - t0, dtype=bool)
        share = {}
        for name, m in (*cats.items(), *host.items()):
            share[name] = 100.0 * (m & ~taken).sum() / (t1 - t0)
            taken |= m
        share["other"] = 100.0 * (~taken).sum() / (t1 - t0)
        share["util"] = 100.0 * (cats["tc"] | cats["non_tc"] | cats["mem"]).sum() / (t1 - t0)
        per_gpu.append(share)
    return {k: float(np.mean([g[k] for g in per_gpu])) for k in per_gpu[0]}


ROWS = {
    "util": "GPU Utilization %",
    "tc": "Tensor Core Kernel Duration %",
    "non_tc": "Non-Tensor Core Kernel Duration %",
    "mem": "Memory Duration %",
    "dataloader": "Dataloader Duration %",
    "io": "I/O Duration %",
    "cpu": "CPU Duration %",
    "other": "Other Duration %",
}


def test_iterations_come_from_the_key_node_ends(prof: Profile, raw: dict) -> None:
    ends = sorted(e for _, e, text in raw["ranges"] if text == KEY_NODE)
    assert ends == list(STEP_ENDS)
    assert prof.iterations.bounds_ns.tolist() == BOUNDS
    it = prof.summary()["Iterations"]
    assert it["Total Iterations"] == ITERS + 1  # N key-node instances give N+1 iterations
    assert (it["Start Iteration"], it["Stop Iteration"]) == (0, ITERS)
    # mean and std over the complete iterations: the partial first (start-up) and last (tail)
    # intervals are left out, and the table says which
    durations = np.diff(BOUNDS)[1:-1]
    assert it["Average Iteration Time (ns)"] == pytest.approx(durations.mean(), abs=0.05)
    assert it["Iteration Time Standard Deviation (ns)"] == pytest.approx(durations.std(), abs=0.05)
    assert list(it)[-1] == "Iteration Time Standard Deviation (ns)"  # the guide's rows only
    assert excluded(prof.iterations, 0, ITERS) == [0, ITERS]
    rep = prof.summary()["Summary Report"]
    assert rep["Wall Clock Time (ns)"] == T_LAST - T_FIRST


@pytest.mark.parametrize(("lo", "hi"), [(0, ITERS), (1, 1), (1, 2), (3, 3)])
def test_utilization_and_duration_breakdown(prof: Profile, raw: dict, lo: int, hi: int) -> None:
    want = brute_breakdown(raw, BOUNDS[lo], BOUNDS[hi + 1])
    got = prof.summary(iter_start=lo, iter_stop=hi)["Summary Report"]
    assert len(raw["devices"]) == 3 and prof.summary()["System Config"]["GPU Count"] == 3
    for key, row in ROWS.items():
        assert got[row] == pytest.approx(want[key], abs=0.006), row  # jlprof rounds to 0.01
    parts = [got[ROWS[k]] for k in ("tc", "non_tc", "mem", "dataloader", "io", "cpu", "other")]
    assert sum(parts) == pytest.approx(100.0, abs=0.05)
    assert got["Wall Clock Time (ns)"] == BOUNDS[hi + 1] - BOUNDS[lo]


def test_every_category_is_exercised(raw: dict) -> None:
    """The fixture must make each category non-trivial, else the test above proves little."""
    want = brute_breakdown(raw, T_FIRST, T_LAST)
    for key in ("util", "tc", "non_tc", "mem", "dataloader", "io", "cpu", "other"):
        assert want[key] > 0.05, key
    # TC and non-TC kernels overlap on GPU 0 (GEMM and SGEMM): the priority order matters
    tc = mask([(s, e) for s, e, d, k in raw["gpu"] if d == 0 and k == "tc"], T_FIRST, T_LAST)
    non = mask([(s, e) for s, e, d, k in raw["gpu"] if d == 0 and k == "non_tc"], T_FIRST, T_LAST)
    assert (tc & non).sum() > 0


def test_kernel_past_a_boundary_stays_in_its_launch_iteration(prof: Profile) -> None:
    it = prof.report("iteration")
    long = it[it["Kernel Name"].astype(str) == LONG].sort_values("GPU Start Time (ns)")
    assert long["Iteration"].tolist() == [0, 1, 2]
    ends = (long["GPU Start Time (ns)"] + long["GPU Time (ns)"]).tolist()
    assert all(e > b for e, b in zip(ends, STEP_ENDS, strict=True))  # each runs past its boundary
    one = prof.report("iteration", iter_start=1, iter_stop=1)
    assert (one["Iteration"] == 1).all()
    assert one.loc[one["Kernel Name"].astype(str) == LONG, "GPU Start Time (ns)"].tolist() == [
        1_000 + 10_000 + 8_900
    ]
    # ... and the kernel report counts it there as well: 3 long kernels, one per iteration
    k = prof.report("kernel", iter_start=1, iter_stop=1)
    assert k.loc[k["Kernel Name"] == LONG, "Total GPU Time (ns)"].tolist() == [600]
