"""Report numbers against independent brute-force computations on a synthetic loop."""

import json

import numpy as np
import pytest

from jlprof.engine.read.trace import GLOBAL_PID_MASK
from jlprof.errors import AnalysisError
from jlprof.profile import REPORTS, Profile

from ..engine.frames import call, gpu_info, kernel, make_trace, rng
from ..engine.synthetic import reference_ops, training_loop


@pytest.fixture(scope="module")
def loop():
    return training_loop(seed=3, iters=7)


@pytest.fixture(scope="module")
def prof(loop):
    return Profile(loop.trace, key_node="optimizer_step")


def test_detail_matches_reference(loop, prof):
    ref = reference_ops(loop)
    det = prof.report("detail").set_index("Op Name")
    for name, r in ref.items():
        row = det.loc[name]
        assert row["No. Calls"] == r["calls"]
        assert row["Total CPU Time (ns)"] == sum(r["cpu"])
        assert row["Min CPU Time (ns)"] == min(r["cpu"])
        assert row["Max CPU Time (ns)"] == max(r["cpu"])
        assert row["Total GPU Time (ns)"] == sum(r["gpu"])
        assert row["Max GPU Time (ns)"] == max(r["gpu"])


def test_detail_over_an_iteration_range(loop, prof):
    b = prof.iterations.bounds_ns
    lo, hi = 2, 4
    keep = [r for r in loop.ranges if b[lo] <= r["start_ns"] < b[hi + 1]]
    det = prof.report("detail", iter_start=lo, iter_stop=hi).set_index("Op Name")
    for name in ("conv", "relu", "linear", "optimizer_step"):
        rs = [r for r in keep if r["text"] == name]
        assert det.loc[name, "No. Calls"] == len(rs)
        assert det.loc[name, "Total CPU Time (ns)"] == sum(r["end_ns"] - r["start_ns"] for r in rs)


def brute_busy(kernels, device, t0, t1):
    cov = set()
    for k in kernels:
        if k["device_id"] == device:
            cov.update(range(max(k["start_ns"], t0), min(k["end_ns"], t1)))
    return len(cov)


def test_gpu_utilization_averages_visible_gpus_including_idle():
    loop = training_loop(seed=1, iters=4, gpus=2, idle_gpus=1)
    p = Profile(loop.trace)
    s = p.summary()
    t0, t1 = p.iterations.bounds_ns[0], p.iterations.bounds_ns[-1]
    utils = [brute_busy(loop.kernels, d, t0, t1) / (t1 - t0) * 100 for d in range(3)]
    assert s["System Config"]["GPU Count"] == 3
    assert s["Summary Report"]["GPU Utilization %"] == pytest.approx(np.mean(utils), abs=0.01)
    assert utils[2] == 0


def test_duration_breakdown_sums_to_100(prof):
    rep = prof.summary()["Summary Report"]
    keys = [k for k in rep if k.endswith("Duration %")]
    assert len(keys) == 7
    assert sum(rep[k] for k in keys) == pytest.approx(100.0, abs=0.05)


def test_tc_duration_is_union_of_tc_kernels(loop, prof):
    tc = [k for k in loop.kernels if "884" in k["name"] or "xmma" in k["name"]]
    t0, t1 = prof.iterations.bounds_ns[0], prof.iterations.bounds_ns[-1]
    want = brute_busy(tc, 0, t0, t1) / (t1 - t0) * 100
    got = prof.summary()["Summary Report"]["Tensor Core Kernel Duration %"]
    assert got == pytest.approx(want, abs=0.01)


def test_kernel_report_totals(loop, prof):
    kr = prof.report("kernel")
    for name in {k["name"] for k in loop.kernels}:
        want = sum(k["end_ns"] - k["start_ns"] for k in loop.kernels if k["name"] == name)
        assert kr.loc[kr["Kernel Name"] == name, "Total GPU Time (ns)"].sum() == want
    assert kr["Total API Time (ns)"].sum() == sum(
        c["end_ns"] - c["start_ns"] for c in loop.calls if c["name"] == "cudaLaunchKernel"
    )


def test_tensor_report(loop, prof):
    tr = prof.report("tensor").set_index("Op Name")
    conv = sum(k["end_ns"] - k["start_ns"] for k in loop.kernels if "cudnn_conv" in k["name"])
    assert tr.loc["conv", "TC GPU Time"] == conv
    assert tr.loc["conv", "TC Utilization (%)"] == 100.0
    assert tr.loc["conv", "TC Kernel Names"] == "volta_h884cudnn_conv"
    assert "relu" not in tr.index


def test_group_node_flattens_per_iteration(loop, prof):
    g = prof.report("group_node").set_index("Name")
    steps = [r for r in loop.ranges if r["text"] == "step"]
    assert g.loc["/step", "Total CPU Time (ns)"] == sum(r["end_ns"] - r["start_ns"] for r in steps)
    assert g.loc["/step", "No. Calls Aggregated"] == sum(
        1 for r in loop.ranges if r["text"] != "step"
    )  # leaf calls: the step ranges themselves are group nodes
    assert g.loc["/step", "Max CPU Time (ns)"] == max(r["end_ns"] - r["start_ns"] for r in steps)


def test_summary_json_shape(prof, tmp_path):
    paths = prof.write_reports(tmp_path, ["summary"], ["json", "csv"])
    data = json.loads((tmp_path / "dlprof_summary.json").read_text())
    assert set(data) == {"System Config", "Summary Report", "Iterations", "All Ops", "All Kernels"}
    k = data["All Kernels"]["Kernels Using TC"]
    assert set(k) == {"GPU Time (ns)", "CPU Time (ns)", "# Kernels"}
    assert data["Iterations"]["Total Iterations"] == 8
    assert len(paths) == 2


def test_all_reports_have_the_guides_columns(prof):
    cols = {r: list(prof.report(r).columns) for r in REPORTS}
    assert cols["detail"][:4] == ["Op ID", "Op Name", "Op Type", "No. Calls"]
    assert "Total GPU Idle Time (ns)" in cols["detail"]
    assert cols["iteration"][0] == "Iteration" and "Long Kernel Name" in cols["iteration"]
    assert cols["op_type"][:3] == ["Op Name", "No. Nodes", "No. Calls"]
    assert cols["group_node"][:2] == ["Name", "No. Calls Aggregated"]
    assert cols["expert_systems"][:2] == ["Problem", "Recommendation"]


def test_pytorch_mode_adds_direction(loop):
    p = Profile(loop.trace, key_node="optimizer_step", mode="pytorch")
    assert "Direction" in p.report("detail").columns
    assert "Stack Trace" in p.report("detail").columns


def test_existing_files_kept_unless_force(prof, tmp_path):
    target = tmp_path / "dlprof_kernel.csv"
    target.write_text("mine")
    assert prof.write_reports(tmp_path, ["kernel"], ["csv"]) == []
    assert target.read_text() == "mine"
    assert prof.write_reports(tmp_path, ["kernel"], ["csv"], force=True) == [target]
    assert target.read_text().startswith("Kernel Name")


@pytest.mark.parametrize(
    ("start", "stop", "msg"),
    [
        (3, 1, "before --iter_start"),
        (0, 99, "past the last iteration"),
        (-1, None, "negative"),
        (50, None, "past the last iteration"),
    ],
)
def test_bad_iteration_ranges(prof, start, stop, msg):
    with pytest.raises(AnalysisError, match=msg):
        prof.report("summary", iter_start=start, iter_stop=stop)


def test_unknown_key_node_names_candidates(loop):
    with pytest.raises(AnalysisError, match="Candidates"):
        Profile(loop.trace, key_node="no_such_op")


def test_range_change_reuses_the_cube(prof):
    cube = prof.cube
    prof.set_range(1, 3)
    assert prof.cube is cube
    assert prof.summary()["Iterations"]["Aggregated Iterations"] == 3
    prof.set_range(None, None)


def test_cpu_only_profile():
    t = make_trace(nvtx=[rng("global_step", 0, 10), rng("global_step", 20, 30), rng("x", 12, 18)])
    p = Profile(t)
    s = p.summary()
    assert p.key_node == "global_step"
    assert s["Summary Report"]["GPU Utilization %"] == 0
    assert s["System Config"]["GPU Count"] == 0
    assert s["All Kernels"]["All Kernels"]["# Kernels"] == 0
    assert p.report("detail").set_index("Op Name").loc["x", "Total CPU Time (ns)"] == 6
    for r in REPORTS:
        p.report(r)


def test_expert_systems_fire_and_stay_quiet():
    # a steady loop on one busy GPU that uses TC everywhere: nothing to report
    ks, cs, rs = [], [], []
    for i in range(6):
        t = i * 100
        cs.append(call(t + 1, t + 2, i))
        ks.append(kernel(t + 2, t + 99, i, name="sm80_xmma_gemm_f16f16"))
        rs += [rng("matmul", t, t + 5), rng("global_step", t + 5, t + 100)]
    quiet = Profile(make_trace(gpu=ks, api=cs, nvtx=rs, gpus=[gpu_info(0)]))
    # the last interval, after the final key node, is an empty partial tail: it no longer
    # makes the range look unsteady (mean/std leave the partial intervals out)
    assert quiet.report("expert_systems", 0, 5).empty
    assert quiet.report("expert_systems").empty
    # unsteady, underused, with an idle GPU and an eligible op on non-TC kernels
    loop = training_loop(seed=5, iters=9, gpus=1, idle_gpus=1)
    loud = Profile(loop.trace, key_node="optimizer_step")
    det = set(loud.report("expert_systems")["Detector"])
    assert {"Underutilized GPU Detector", "Imbalanced GPU Detector"} <= det
    none = Profile(make_trace(nvtx=[rng("a", 0, 5), rng("a", 10, 15), rng("a", 20, 25)]))
    es = none.report("expert_systems")
    assert "No Iteration Detector" in set(es["Detector"])
    assert (
        "--key_node=a" in es.loc[es["Detector"] == "No Iteration Detector", "Recommendation"].iat[0]
    )


def test_op_type_matches_reference(loop, prof):
    ref = reference_ops(loop)  # op names are their own types in the synthetic loop
    ot = prof.report("op_type").set_index("Op Name")
    for name, r in ref.items():
        assert ot.loc[name, "No. Calls"] == r["calls"]
        assert ot.loc[name, "No. Nodes"] == 1
        assert ot.loc[name, "Total GPU Time (ns)"] == sum(r["gpu"])
        assert ot.loc[name, "Max CPU Time (ns)"] == max(r["cpu"])


def test_group_node_gpu_time_is_flattened_per_iteration(loop, prof):
    """Brute force: per iteration, the covered nanoseconds of the kernels launched in it."""
    b = prof.iterations.bounds_ns
    calls = {c["correlation_id"]: c for c in loop.calls}
    per_iter: dict[int, set[int]] = {}
    for k in loop.kernels:
        launch = calls[k["correlation_id"]]["start_ns"]
        it = int(np.searchsorted(b[1:-1], launch, side="right"))
        per_iter.setdefault(it, set()).update(range(k["start_ns"], k["end_ns"]))
    g = prof.report("group_node").set_index("Name")
    assert g.loc["/step", "Total GPU Time (ns)"] == sum(len(v) for v in per_iter.values())
    assert g.loc["/step", "Max GPU Time (ns)"] == max(len(v) for v in per_iter.values())


@pytest.mark.parametrize("overlap", [0.3, 1.0])
def test_group_node_gpu_time_with_overlapping_kernels(overlap):
    """Kernels that overlap others are flattened, isolated ones summed: brute force per op."""
    loop = training_loop(seed=5, iters=6, overlap=overlap)
    b_kernels = loop.kernels
    starts = np.array([k["start_ns"] for k in b_kernels])
    ends = np.array([k["end_ns"] for k in b_kernels])
    assert (starts[1:] < np.maximum.accumulate(ends)[:-1]).any()  # the loop really overlaps
    prof = Profile(loop.trace, key_node="optimizer_step")
    b = prof.iterations.bounds_ns
    calls = {c["correlation_id"]: c for c in loop.calls}
    op_of_call = {}
    for c in loop.calls:
        for r_ in loop.ranges:
            if (
                r_["text"] in ("conv", "relu", "linear")
                and r_["start_ns"] <= c["start_ns"]
                and (c["end_ns"] <= r_["end_ns"])
            ):
                op_of_call[c["correlation_id"]] = r_["text"]
    per: dict[tuple[str, int], set[int]] = {}
    for k in b_kernels:
        c = calls[k["correlation_id"]]
        it = int(np.searchsorted(b[1:-1], c["start_ns"], side="right"))
        for name in ("/step", "/step/" + op_of_call[k["correlation_id"]]):
            per.setdefault((name, it), set()).update(range(k["start_ns"], k["end_ns"]))
    g = prof.report("group_node").set_index("Name")
    total = lambda name: sum(len(v) for (n, _), v in per.items() if n == name)  # noqa: E731
    assert g.loc["/step", "Total GPU Time (ns)"] == total("/step")
    assert g.loc["/step", "Max GPU Time (ns)"] == max(
        len(v) for (n, _), v in per.items() if n == "/step"
    )


@pytest.mark.parametrize(("lo", "hi"), [(None, None), (1, 3)])
def test_iteration_report_rows_in_order_and_consistent(lo, hi):
    """Two GPUs: the export lists GPU 0's kernels, then GPU 1's, so rows must be reordered."""
    loop = training_loop(seed=7, iters=5, gpus=2)
    prof = Profile(loop.trace, key_node="optimizer_step")
    rep = prof.report("iteration", iter_start=lo, iter_stop=hi)
    key = list(zip(rep["Iteration"], rep["GPU Start Time (ns)"], strict=True))
    assert key == sorted(key)
    first, last = prof.range_of(lo, hi)
    assert rep["Iteration"].between(first, last).all()
    b = prof.iterations.bounds_ns
    calls = {(c["global_tid"] & GLOBAL_PID_MASK, c["correlation_id"]): c for c in loop.calls}
    expected = []
    for k in loop.kernels:
        c = calls[(k["global_pid"] & GLOBAL_PID_MASK, k["correlation_id"])]
        it = int(np.searchsorted(b[1:-1], c["start_ns"], side="right"))
        if first <= it <= last:
            expected.append(
                (it, k["start_ns"], k["end_ns"] - k["start_ns"], c["start_ns"], k["device_id"])
            )
    got = list(
        zip(
            rep["Iteration"],
            rep["GPU Start Time (ns)"],
            rep["GPU Time (ns)"],
            rep["API Call Start (ns)"],
            rep["Device ID"],
            strict=True,
        )
    )
    assert sorted(got) == sorted(expected)
    assert got == sorted(got, key=lambda r: (r[0], r[1]))
