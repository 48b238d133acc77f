"""The Viewer panels' numbers (widgets/panels_data.py) against the reports and against
independent computations from the export itself (SQLite rows, per-iteration reports)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jlprof
from jlprof.reports import catalog
from jlprof.reports.tables import iteration as iteration_report
from jlprof.reports.tables import summary_report
from jlprof.widgets import panels_data as pdata
from tests.fixtures.loops import small_training_export
from tests.fixtures.scenarios import real_data_dir


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory):
    path = small_training_export(tmp_path_factory.mktemp("loop") / "loop.sqlite", steps=12)
    return path, jlprof.load(path)


@pytest.fixture(scope="module")
def mmagic():
    path = real_data_dir() / "mmagic-pyprof-a100" / "net.sqlite"
    return path, jlprof.load(path)


@pytest.fixture(scope="module", params=["loop", "mmagic"])
def case(request: pytest.FixtureRequest, loop, mmagic):
    return {"loop": loop, "mmagic": mmagic}[request.param]


def _ranges(p) -> list[tuple[int, int]]:
    n = p.iterations.count
    return sorted({(0, n - 1), (min(1, n - 1), max(n - 2, min(1, n - 1))), (n // 2, n // 2)})


def test_system_config_reads_the_export_and_says_not_recorded(case) -> None:
    path, p = case
    cfg = dict(zip(*pdata.system_config_rows(p)[["Setting", "Value"]].T.values, strict=True))
    with sqlite3.connect(path) as con:
        env = dict(con.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV").fetchall())
        gpus = con.execute("SELECT cuDevice, name FROM TARGET_INFO_GPU").fetchall()
    assert cfg["CPU Model"] == env["CpuDescription"]
    assert cfg["Operating System"] == env.get("OsDescription", pdata.NOT_RECORDED)
    assert cfg["CPU Cores"] == str(env["CpuCores"])
    assert cfg["GPU Driver Version"].replace(".", "") == env["NvDriverVersion"].replace(".", "")
    for dev, name in gpus:
        assert cfg[f"GPU {dev}"] == name
    assert cfg["GPU Count"] == str(len(gpus))
    # no export records a host name (nsys does not) nor, here, a cuDNN version
    assert cfg["Host Name"] == pdata.NOT_RECORDED
    assert cfg["cuDNN Version"] == pdata.NOT_RECORDED
    assert "" not in cfg.values()


def test_op_types_match_the_op_type_report(case) -> None:
    _, p = case
    for lo, hi in _ranges(p):
        got = pdata.op_types(p, lo, hi)
        rep = catalog.report(p, "op_type", lo, hi)
        assert got["op_type"].tolist() == rep["Op Name"].astype(str).tolist()
        assert got["nodes"].tolist() == rep["No. Nodes"].tolist()
        assert got["calls"].tolist() == rep["No. Calls"].tolist()
        assert got["gpu_ns"].tolist() == rep["Total GPU Time (ns)"].tolist()
        assert got["cpu_ns"].tolist() == rep["Total CPU Time (ns)"].tolist()
        assert got["tc_eligible"].tolist() == rep["TC Eligibility"].tolist()
        assert got["using_tc"].tolist() == rep["Using TC"].tolist()
        if rep["Total GPU Time (ns)"].sum():
            assert got["gpu_pct"].sum() == pytest.approx(100.0)


def test_ops_and_top_10_match_the_detail_report(case) -> None:
    _, p = case
    for lo, hi in _ranges(p):
        det = catalog.report(p, "detail", lo, hi).set_index("Op ID")
        ops = pdata.ops(p, lo, hi).set_index("op_id")
        assert len(ops) == len(p.correlated.ops)  # every op, ran or not
        ran = ops[ops["calls"] > 0]
        assert set(ran.index) == set(det.index)
        assert (ran["calls"] == det.loc[ran.index, "No. Calls"]).all()
        assert (ran["gpu_ns"] == det.loc[ran.index, "Total GPU Time (ns)"]).all()
        assert (ran["cpu_ns"] == det.loc[ran.index, "Total CPU Time (ns)"]).all()
        assert (ops.loc[ops["calls"] == 0, ["gpu_ns", "cpu_ns"]] == 0).all().all()
        top = pdata.top_ops(p, lo, hi)
        # the detail report is sorted by GPU, then CPU time: its first ten are the top ten
        want = det.head(pdata.TOP_N)
        assert top["op_id"].tolist() == want.index.tolist()
        assert top["gpu_ns"].tolist() == want["Total GPU Time (ns)"].tolist()
        total = det["Total GPU Time (ns)"].sum()
        if total:
            assert np.allclose(top["gpu_pct"], 100 * top["gpu_ns"] / total)


def _union(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of intervals (a plain sweep, independent of
    engine.aggregate.intervals)."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(zip(starts.tolist(), ends.tolist(), strict=True)):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def test_gpus_utilization_is_the_union_of_gpu_work_over_wall_time(case) -> None:
    """Per GPU: the union of its kernels, copies and sets (read from the SQLite tables),
    clipped to the range's window, over the range's wall time."""
    path, p = case
    tables = (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
    )
    with sqlite3.connect(path) as con:
        have = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        work = pd.concat(
            [pd.read_sql(f"SELECT start, end, deviceId FROM {t}", con) for t in tables if t in have]
        )
        gpus = pd.read_sql("SELECT cuDevice, name FROM TARGET_INFO_GPU", con)
    b = p.iterations.bounds_ns
    for lo, hi in _ranges(p):
        got = pdata.gpus(p, lo, hi).set_index("gpu")
        a, z = int(b[lo]), int(b[hi + 1])
        for dev, name in zip(gpus["cuDevice"], gpus["name"], strict=True):
            w = work[work["deviceId"] == dev]
            s = np.clip(w["start"].to_numpy(np.int64), a, z)
            e = np.clip(w["end"].to_numpy(np.int64), a, z)
            want = 100.0 * _union(s[e > s], e[e > s]) / (z - a)
            assert got.loc[f"GPU {dev}: {name}", "gpu_util_pct"] == pytest.approx(want, abs=1e-6)


def test_resource_pie_is_the_summary_duration_rows(case) -> None:
    _, p = case
    for lo, hi in _ranges(p):
        pie = pdata.resource_usage(p, lo, hi)
        rows = summary_report(p, lo, hi)  # the summary's own rows (its tests check them)
        want = {
            "tc": "Tensor Core Kernel Duration %",
            "memory": "Memory Duration %",
            "cpu": "CPU Duration %",
            "other": "Other Duration %",
        }
        by = pie.set_index("category")["pct"]
        for cat, row in want.items():
            assert by[cat] == pytest.approx(float(rows[row]))
        assert pie["pct"].sum() == pytest.approx(100.0, abs=0.1)  # the rows partition wall time
        assert pie["end_angle"].iloc[-1] == pytest.approx(2 * np.pi)
        assert (np.diff(pie["end_angle"]) >= 0).all()


def _kernel_rows(p, lo: int, hi: int) -> pd.DataFrame:
    """The iteration report's GPU activities, with whether each is a memory operation
    (nsys names copies and sets '[CUDA memcpy ...]', '[CUDA memset]')."""
    it = iteration_report(p, lo, hi)
    it = pd.DataFrame({c: np.asarray(it[c]) for c in it.columns})
    it["memory"] = it["Long Kernel Name"].astype(str).str.startswith("[CUDA mem")
    return it


def test_kernels_by_iteration_matches_the_iteration_report(case) -> None:
    _, p = case
    for lo, hi in _ranges(p):
        got = pdata.kernels_by_iteration(p, lo, hi).set_index("iteration")
        assert got.index.tolist() == list(range(lo, hi + 1))
        rows = _kernel_rows(p, lo, hi)
        k = rows[~rows["memory"]]
        want_n = k.groupby("Iteration").size().reindex(got.index, fill_value=0)
        want_tc = k[k["Uses TC"]].groupby("Iteration")["GPU Time (ns)"].sum()
        want_non = k[~k["Uses TC"]].groupby("Iteration")["GPU Time (ns)"].sum()
        want_mem = rows[rows["memory"]].groupby("Iteration")["GPU Time (ns)"].sum()
        assert got["kernels"].tolist() == want_n.tolist()
        assert got["tc_ns"].tolist() == want_tc.reindex(got.index, fill_value=0).tolist()
        assert got["non_tc_ns"].tolist() == want_non.reindex(got.index, fill_value=0).tolist()
        assert got["memory_ns"].tolist() == want_mem.reindex(got.index, fill_value=0).tolist()


def _busiest_ops(p, k: int = 3) -> list[int]:
    det = catalog.report(p, "detail", p.iter_start, p.iter_stop)
    ids = det["Op ID"].astype(str).head(k).tolist()
    codes = pd.Index(p.correlated.ops["op_id"].astype(str))
    return [int(codes.get_loc(i)) for i in ids]


def test_iterations_by_op_match_single_iteration_detail_reports(case) -> None:
    _, p = case
    n = p.iterations.count
    lo, hi = (1, n - 1) if n > 2 else (0, n - 1)
    for op in _busiest_ops(p):
        got = pdata.iterations_by_op(p, lo, hi, op).set_index("iteration")
        op_id = str(p.correlated.ops["op_id"].iloc[op])
        for i in range(lo, hi + 1):
            det = catalog.report(p, "detail", i, i)
            row = det[det["Op ID"].astype(str) == op_id]
            calls = int(row["No. Calls"].sum())
            assert got.loc[i, "calls"] == calls
            assert got.loc[i, "gpu_ns"] == int(row["Total GPU Time (ns)"].sum())
            assert got.loc[i, "cpu_ns"] == int(row["Total CPU Time (ns)"].sum())


def test_op_kernels_and_kernel_iterations_match_the_reports(case) -> None:
    _, p = case
    lo, hi = p.iter_start, p.iter_stop
    rows = _kernel_rows(p, lo, hi)
    checked = 0
    for op in _busiest_ops(p):
        op_id = str(p.correlated.ops["op_id"].iloc[op])
        got = pdata.op_kernels(p, lo, hi, op)
        rep = catalog.report(p, "kernel", lo, hi)
        rep = rep[rep["Op ID"].astype(str) == op_id]
        key = ["Long Kernel Name", "Total GPU Time (ns)", "Avg. GPU Time (ns)"]
        assert [tuple(r) for r in got[key].astype(str).values] == [
            tuple(r) for r in rep[key].astype(str).values
        ]
        for kernel, name in zip(got["kernel"], got["Long Kernel Name"], strict=True):
            ki = pdata.kernel_iterations(p, lo, hi, int(kernel), op).set_index("iteration")
            sel = rows[(rows["Op ID"].astype(str) == op_id) & (rows["Long Kernel Name"] == name)]
            by = sel.groupby("Iteration")["GPU Time (ns)"]
            assert ki["calls"].tolist() == by.size().reindex(ki.index, fill_value=0).tolist()
            assert ki["gpu_ns"].tolist() == by.sum().reindex(ki.index, fill_value=0).tolist()
            checked += 1
    assert checked > 0


def test_panels_data_on_a_profile_without_kernels(tmp_path: Path) -> None:
    """An NVTX-only capture (the TensorRT one): empty kernel panels, no error."""
    p = jlprof.load(real_data_dir() / "centerformer-trt-nvtx-titanrtx" / "poolformer.sqlite")
    lo, hi = p.iter_start, p.iter_stop
    assert (pdata.kernels_by_iteration(p, lo, hi)[["kernels", "tc_ns"]] == 0).all().all()
    assert pdata.gpus(p, lo, hi)["gpu_util_pct"].eq(0).all()
    top = pdata.top_ops(p, lo, hi)
    assert (top["gpu_ns"] == 0).all()
    if len(top):
        assert pdata.op_kernels(p, lo, hi, int(top["op"].iloc[0])).empty


def test_total_kernel_gpu_time_pie_is_the_gpu_activities_by_tc_and_memory(case) -> None:
    """Issue 43 item 8: the "Total Kernel GPU Time" pie, against the iteration report's rows
    (one per GPU activity) summed by hand: memory work by its nsys name, kernels by Uses TC."""
    _, p = case
    for lo, hi in _ranges(p):
        it = _kernel_rows(p, lo, hi)
        ns = it["GPU Time (ns)"].to_numpy(np.int64)
        tc = it["Uses TC"].to_numpy(bool)
        mem = it["memory"].to_numpy(bool)
        want = {"tc": ns[tc & ~mem].sum(), "non_tc": ns[~tc & ~mem].sum(), "memory": ns[mem].sum()}
        pie = pdata.kernel_gpu_time(p, lo, hi).set_index("category")
        assert pie["gpu_ns"].to_dict() == want
        total = sum(want.values())
        for cat, v in want.items():
            assert pie.loc[cat, "pct"] == pytest.approx(100.0 * v / total)
        assert pie["end_angle"].iloc[-1] == pytest.approx(2 * np.pi)
    if p.trace.source is not None and "mmagic" in str(p.trace.source):
        assert want["tc"] > 0 and want["non_tc"] > 0 and want["memory"] > 0
