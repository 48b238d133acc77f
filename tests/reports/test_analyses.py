"""The analyses beyond DLProf against truths known by construction and brute-force references.

* idle causes: a hand-built timeline whose every nanosecond's cause is written down, and random
  loops checked against a per-nanosecond simulation of the documented priority rules;
* launch statistics: latencies and queue times set by construction;
* robust outlier iterations: the issue's 16-iteration run with jitter, one slow step and a tail;
* FLOPs/bytes: closed forms of GEMM, conv and elementwise shapes, and achieved rates against the
  ops' GPU times.
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

import jlprof
from jlprof.engine.analyses import flops as fl
from jlprof.engine.analyses.gpu_peaks import gpu_peaks
from jlprof.engine.analyses.idle import SYNC_API
from jlprof.engine.analyses.outliers import excluded
from jlprof.profile import Profile
from tests.engine.frames import call, gpu_info, kernel, make_trace, rng
from tests.engine.synthetic import training_loop
from tests.fixtures.loops import small_training_export
from tests.fixtures.torch_traces import DUR, GEMM_BWD, GEMM_FWD, emit_nvtx_db

CAUSE_COLS = [
    "Memory Copy (ns)",
    "Synchronization (ns)",
    "Data Loading (ns)",
    "Host Launch Bound (ns)",
    "Other (ns)",
]


# ---- idle causes --------------------------------------------------------------------------


def _hand_trace():
    """One GPU, one process; the causes of each idle stretch are set by construction."""
    gpu = [
        kernel(100, 200, 1, name="k1"),
        kernel(200, 250, 2, name="[CUDA memcpy HtoD]", kind="memcpy"),
        kernel(470, 500, 3, name="k2"),
        kernel(600, 700, 5, name="k3"),
    ]
    api = [
        call(90, 95, 1),
        call(195, 198, 2, name="cudaMemcpyAsync"),
        call(240, 300, 4, name="cudaDeviceSynchronize"),
        call(440, 460, 3),
        call(590, 595, 5),
    ]
    nvtx = [rng("dataloader", 300, 400), rng("forward", 400, 470)]
    return make_trace(gpu=gpu, api=api, nvtx=nvtx, gpus=[gpu_info(0)])


def test_idle_causes_of_a_hand_built_timeline():
    p = Profile(_hand_trace())
    r = p.report("idle_causes").iloc[0]
    # window [90, 700]; kernels busy 100+30+100
    assert r["Wall Time (ns)"] == 610 and r["GPU Busy Time (ns)"] == 230
    assert r["GPU Idle Time (ns)"] == 380
    assert r["Memory Copy (ns)"] == 50  # [200, 250): the copy
    assert r["Synchronization (ns)"] == 50  # [250, 300): cudaDeviceSynchronize waiting
    assert r["Data Loading (ns)"] == 100  # [300, 400)
    # nothing queued, host busy: the launch call [90, 95); [400, 460) inside "forward" and
    # its launch call; the launch call [590, 595)
    assert r["Host Launch Bound (ns)"] == 5 + 60 + 5
    # other: queued (call returned, kernel not started) [95, 100), [460, 470), [595, 600);
    # nothing queued and no host activity [500, 590)
    assert r["Other (ns)"] == 5 + 10 + 5 + 90
    assert r[CAUSE_COLS].sum() == r["GPU Idle Time (ns)"]


def _brute_idle(trace, bounds: np.ndarray) -> dict[tuple[int, int], dict[str, int]]:
    """Per (device, iteration): the cause of every idle nanosecond, by the documented rules."""
    g, a, n = trace.gpu, trace.api, trace.nvtx
    t0, t1 = int(bounds[0]), int(bounds[-1])
    T = t1 - t0
    pid_of = lambda gt: gt >> 24  # noqa: E731 - (vm, pid) of a globalTid
    calls = {(pid_of(int(r.global_tid)), int(r.correlation_id)): r for r in a.itertuples()}
    out = {}
    for dev in sorted(set(g["device_id"])):
        mine = g[g["device_id"] == dev]
        pids = {int(x) >> 24 for x in mine["global_pid"]}
        flags = {k: np.zeros(T, bool) for k in ("kern", "copy", "sync", "dl", "queued", "host")}

        def mark(key, s, e, flags=flags):
            flags[key][max(s - t0, 0) : max(min(e, t1) - t0, 0)] = True

        for r in mine.itertuples():
            mark("kern" if r.kind == "kernel" else "copy", r.start_ns, r.end_ns)
            c = calls.get((int(r.global_pid) >> 24, int(r.correlation_id)))
            if c is not None and c.end_ns < r.start_ns:
                mark("queued", c.end_ns, r.start_ns)
        for c in a.itertuples():
            if pid_of(int(c.global_tid)) in pids:
                mark("host", c.start_ns, c.end_ns)
                if SYNC_API.match(str(c.name)):
                    mark("sync", c.start_ns, c.end_ns)
        for r in n.itertuples():
            if pid_of(int(r.global_tid)) in pids:
                mark("host", r.start_ns, r.end_ns)
                if "dataloader" in str(r.text).lower():
                    mark("dl", r.start_ns, r.end_ns)
        f = flags
        idle = ~f["kern"]
        copy = idle & f["copy"]
        sync = idle & ~copy & f["sync"]
        dl = idle & ~copy & ~sync & f["dl"]
        rest = idle & ~copy & ~sync & ~dl
        host = rest & ~f["queued"] & f["host"]
        other = rest & ~host
        for k in range(len(bounds) - 1):
            s, e = int(bounds[k]) - t0, int(bounds[k + 1]) - t0
            out[(int(dev), k)] = {
                "GPU Idle Time (ns)": int(idle[s:e].sum()),
                "Memory Copy (ns)": int(copy[s:e].sum()),
                "Synchronization (ns)": int(sync[s:e].sum()),
                "Data Loading (ns)": int(dl[s:e].sum()),
                "Host Launch Bound (ns)": int(host[s:e].sum()),
                "Other (ns)": int(other[s:e].sum()),
            }
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_idle_causes_match_a_per_nanosecond_simulation(seed):
    loop = training_loop(seed=seed, iters=5, gpus=2, overlap=0.3)
    trace = loop.trace
    # then, per GPU, a copy, a sync, a dataloader fetch and a late launch after the loop:
    # every cause occurs (and the random part mixes them wherever they fall)
    end = max(int(k["end_ns"]) for k in loop.kernels) + 100
    extra_k, extra_c, extra_r = [], [], []
    for dev in range(2):
        pid = 100 + dev
        s = end + 1_000 * dev
        extra_c.append(call(s, s + 5, 10_000, pid=pid, name="cudaMemcpyAsync"))
        extra_k.append(kernel(s + 10, s + 60, 10_000, pid=pid, device=dev, kind="memcpy"))
        extra_c.append(call(s + 40, s + 120, 10_001, pid=pid, name="cudaStreamSynchronize"))
        extra_r.append(rng("DataLoader fetch", s + 130, s + 200, pid=pid))
        extra_c.append(call(s + 260, s + 270, 10_002, pid=pid))
        extra_k.append(kernel(s + 300, s + 310, 10_002, pid=pid, device=dev))
    trace = make_trace(
        gpu=loop.kernels + extra_k,
        api=loop.calls + extra_c,
        nvtx=loop.ranges + extra_r,
        gpus=[gpu_info(0), gpu_info(1)],
    )
    p = Profile(trace, key_node="optimizer_step")
    rep = p.report("idle_causes")
    ref = _brute_idle(trace, p.iterations.bounds_ns)
    assert len(rep) == 2 * p.iterations.count
    for row in rep.itertuples(index=False):
        dev = int(row.GPU.split(":")[0].split()[-1])
        want = ref[(dev, int(row.Iteration))]
        got = dict(zip(rep.columns, row, strict=True))
        assert {k: int(got[k]) for k in want} == want
        assert sum(int(got[c]) for c in CAUSE_COLS) == int(got["GPU Idle Time (ns)"])
    causes = rep[CAUSE_COLS].sum()
    assert (causes > 0).all(), causes  # the scenario exercises every cause
    by_gpu = p.idle_causes(by="gpu")
    assert by_gpu["GPU Idle Time (ns)"].sum() == rep["GPU Idle Time (ns)"].sum()


# ---- launch statistics ---------------------------------------------------------------------


def test_launch_latency_queue_and_launch_bound_by_construction():
    rows_k, rows_c, truth = [], [], defaultdict(list)
    t = 0
    for i in range(40):
        api0, api_len = t, 10 + i % 5
        lat = 30 + (i % 7) * 3 if i != 17 else 5_000  # one latency outlier
        k_len = 5 if i % 4 == 0 else 50  # every 4th kernel is shorter than its call
        name = "short" if i % 2 else "long"
        rows_c.append(call(api0, api0 + api_len, i + 1))
        rows_k.append(kernel(api0 + lat, api0 + lat + k_len, i + 1, name=name))
        truth[name].append((lat, max(lat - api_len, 0), k_len < api_len))
        t += 6_000
    p = Profile(make_trace(gpu=rows_k, api=rows_c, gpus=[gpu_info(0)]))
    per = p.launch_stats(per_launch=True)
    assert per["latency_ns"].tolist() == [
        lat
        for _, (lat, *_r) in sorted(
            (i, truth["short" if i % 2 else "long"][i // 2]) for i in range(40)
        )
    ]
    rep = p.report("launch_stats").set_index("Kernel Name")
    for name, rows in truth.items():
        lat = np.array([r[0] for r in rows], float)
        q = np.array([r[1] for r in rows], float)
        lb = np.array([r[2] for r in rows])
        row = rep.loc[name]
        assert row["Launches"] == len(rows)
        assert row["Avg. Launch Latency (ns)"] == pytest.approx(lat.mean(), abs=0.05)
        assert row["Median Launch Latency (ns)"] == pytest.approx(np.median(lat), abs=0.05)
        assert row["Max Launch Latency (ns)"] == lat.max()
        assert row["Avg. Queue Time (ns)"] == pytest.approx(q.mean(), abs=0.05)
        assert row["Launch-Bound Launches"] == lb.sum()
        assert row["Launch-Bound %"] == pytest.approx(100 * lb.mean(), abs=0.01)
    # one outlier: launch 17 ("short"), above median + 3 scaled MADs of that kernel's launches
    for name, rows in truth.items():
        lat = np.array([r[0] for r in rows], float)
        med = np.median(lat)
        thr = med + 3 * 1.4826 * np.median(np.abs(lat - med))
        assert rep.loc[name, "Latency Outliers"] == (lat > thr).sum()
    assert rep["Latency Outliers"].to_dict() == {"short": 1, "long": 0}


# ---- robust outlier iterations ----------------------------------------------------------------


def _sixteen_iterations(durations: list[int], tail: int):
    """A run whose key node ``step`` ends iteration k at the cumulative durations; the
    kernels fill each step (20 ns gaps) and the capture ends ``tail`` ns after the last."""
    ks, cs, rs = [], [], []
    t = 0
    for i, d in enumerate(durations):
        cs.append(call(t + 1, t + 3, i + 1))
        ks.append(kernel(t + 5, t + d - 20, i + 1, name="gemm"))
        rs.append(rng("step", t + d - 10, t + d))
        t += d
    cs.append(call(t, t + tail, 999, name="cudaDeviceSynchronize"))
    return make_trace(gpu=ks, api=cs, nvtx=rs, gpus=[gpu_info(0)])


def test_sixteen_iterations_one_slow_step_and_a_short_tail():
    r = np.random.default_rng(0)
    dur = [int(x) for x in 100_000 + r.integers(-4_000, 4_000, size=16)]  # +-4 % jitter
    dur[9] = 160_000  # one slow step
    p = Profile(_sixteen_iterations(dur, tail=2_500), key_node="step")
    assert p.iterations.count == 17  # 16 key-node ends: 16 intervals + the tail
    o = p.iteration_outliers()
    full = p.iterations.durations_ns()[1:-1].astype(float)
    med = np.median(full)
    mad = 1.4826 * np.median(np.abs(full - med))
    assert o["Outlier"].sum() == 1 and o.loc[o["Outlier"], "Iteration"].tolist() == [9]
    assert o["Outlier Threshold (ns)"].iloc[0] == pytest.approx(med + 3 * mad, abs=0.1)
    assert o["Partial Interval"].tolist() == [True] + [False] * 15 + [True]
    # the old +-10 % band would have flagged the tail and every step near its edge
    its = p.summary()["Iterations"]
    assert its["Average Iteration Time (ns)"] == pytest.approx(full.mean(), abs=0.05)
    assert its["Iteration Time Standard Deviation (ns)"] == pytest.approx(full.std(), abs=0.05)
    assert excluded(p.iterations, 0, 16) == [0, 16]
    # why 9 is slow: its gemm kernel ran 60 us longer than the median step's
    why = p.outlier_ops(9)
    top = why.iloc[0]
    assert top["Op Name"] == "unassociated_gemm"  # the kernels launched outside any range
    gpu9 = 160_000 - 25  # each step's kernel fills it but for 25 ns
    med_gpu = np.median([d - 25 for d in p.iterations.durations_ns()[1:-1]])
    assert top["GPU Time (ns)"] == gpu9
    assert top["Delta GPU Time (ns)"] == pytest.approx(gpu9 - med_gpu, abs=0.5)
    assert top["Delta CPU Time (ns)"] == 0  # same launch call time: the GPU made it slow


# ---- FLOPs, bytes, roofline -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("op_type", "shapes", "dtype", "flops", "elems"),
    [
        ("linear", "[[32,64],[128,64],[128]]", "float16", 2 * 32 * 128 * 64,
         32 * 64 + 128 * 64 + 32 * 128 + 128),
        ("aten::mm", "[[8,16],[16,4]]", "float32", 2 * 8 * 4 * 16, 8 * 16 + 16 * 4 + 8 * 4),
        ("bmm", "[[3,8,16],[3,16,4]]", "bfloat16", 2 * 3 * 8 * 4 * 16,
         3 * 8 * 16 + 3 * 16 * 4 + 3 * 8 * 4),
        ("addmm", "[[4],[8,16],[16,4]]", "float32", 2 * 8 * 4 * 16, 8 * 16 + 16 * 4 + 8 * 4),
        ("conv2d", "[[2,8,10,10],[16,8,3,3],[16]]", "float32", 2 * 2 * 16 * 100 * 8 * 9,
         2 * 8 * 100 + 16 * 8 * 9 + 2 * 16 * 100),
        ("conv2d", "[[1,8,5,5],[8,2,3,3]]", "float32", 2 * 1 * 8 * 25 * 2 * 9,
         8 * 25 + 8 * 2 * 9 + 8 * 25),  # groups = 4
        ("add", "[[4,1,6],[5,6]]", "float32", 4 * 5 * 6, 4 * 6 + 5 * 6 + 4 * 5 * 6),
        ("aten::relu_", "[[7,3]]", "float16", 21, 42),
    ],
)  # fmt: skip
def test_call_cost_closed_forms(op_type, shapes, dtype, flops, elems):
    f, b = fl.call_cost(op_type, shapes, dtype, False)
    assert f == flops
    assert b == elems * fl.element_bytes(dtype)
    fb, bb = fl.call_cost(op_type, shapes, dtype, True)
    factor = 1 if fl.op_kind(op_type) == "elementwise" else 2
    assert (fb, bb) == (factor * flops, factor * elems * fl.element_bytes(dtype))


def test_unmodelled_ops_and_bad_shapes_are_nan():
    assert np.isnan(fl.call_cost("softmax", "[[4,4]]", "float32", False)[0])
    assert np.isnan(fl.call_cost("mm", "[[4,5],[6,7]]", "float32", False)[0])  # K mismatch
    assert np.isnan(fl.call_cost("mm", "", "float32", False)[0])
    assert np.isnan(fl.call_cost("linear", "not shapes", "float32", False)[0])


def test_peaks_by_gpu_name():
    assert gpu_peaks("NVIDIA A100-SXM4-80GB")[0] == "A100 80GB SXM"
    assert gpu_peaks("NVIDIA A100-SXM4-40GB")[2] == 1555e9
    assert gpu_peaks("NVIDIA A10")[0] == "A10"
    assert gpu_peaks("NVIDIA L40S")[0] == "L40S" and gpu_peaks("NVIDIA L4")[0] == "L4"
    assert gpu_peaks("NVIDIA H100 80GB HBM3")[1]["bf16"] == 989.4e12
    assert gpu_peaks("NVIDIA H100 PCIe")[0] == "H100 PCIe"
    assert gpu_peaks("NVIDIA H200")[2] == 4800e9
    assert gpu_peaks("Tesla V100-SXM2-16GB")[1]["fp16"] == 125e12
    assert "tf32" not in gpu_peaks("Tesla T4")[1]
    assert gpu_peaks("NVIDIA B200")[1]["fp8"] == 4500e12
    assert gpu_peaks("NVIDIA TITAN RTX") is None


def _gemm_trace(n_calls: int, k_ns: int, m=256, n=512, k=128):
    """emit_nvtx-style ``aten::mm`` ranges with shapes, each launching one TC GEMM kernel."""
    text = f"aten::mm, seq = 1, op_id = 1, sizes = [[{m}, {k}], [{k}, {n}]]"
    ks, cs, rs = [], [], []
    for i in range(n_calls):
        t = i * 10_000
        rs.append(rng(text, t, t + 50))
        cs.append(call(t + 10, t + 20, i + 1))
        ks.append(kernel(t + 100, t + 100 + k_ns, i + 1, name="sm80_xmma_gemm_f32f32_tf32"))
    return make_trace(gpu=ks, api=cs, nvtx=rs, gpus=[gpu_info(0, "NVIDIA A100-SXM4-40GB")])


def test_roofline_of_generated_gemms():
    m, n, k, calls, k_ns = 256, 512, 128, 7, 4_000
    p = Profile(_gemm_trace(calls, k_ns, m, n, k))
    r = p.roofline().set_index("Op Type").loc["mm"]
    flops = 2 * m * n * k
    nbytes = 4 * (m * k + k * n + m * n)  # float32 by default when no type is recorded
    assert r["FLOPs per Call"] == flops and r["Total FLOPs"] == flops * calls
    assert r["Bytes per Call"] == nbytes
    sec = calls * k_ns * 1e-9
    assert r["Achieved TFLOP/s"] == pytest.approx(flops * calls / sec / 1e12, rel=1e-3)
    assert r["Achieved GB/s"] == pytest.approx(nbytes * calls / sec / 1e9, rel=1e-3)
    ai = flops / nbytes
    assert r["Arithmetic Intensity (FLOP/B)"] == pytest.approx(ai, rel=1e-3)
    # a TC kernel on an fp32 op runs as TF32: A100 156 TFLOP/s, 1,555 GB/s
    assert r["Roofline Data Type"] == "tf32" and r["Peak TFLOP/s"] == 156.0
    attain = min(156e12, ai * 1555e9)
    assert r["Roofline %"] == pytest.approx(100 * flops * calls / sec / attain, rel=1e-3)
    assert r["Roofline Bound"] == ("memory" if ai < 156e12 / 1555e9 else "compute")
    assert r["Main Kernel"] == "sm80_xmma_gemm_f32f32_tf32"
    # the detail report carries the same columns, after DLProf's
    d = p.report("detail")
    cols = list(d.columns)
    assert cols.index("FLOPs per Call") > cols.index("Input Shapes")
    row = d.set_index("Op Type").loc["mm"]
    assert row["Total FLOPs"] == flops * calls


def test_every_analysis_is_a_report_and_a_file(tmp_path):
    p = Profile(_hand_trace(), profile_name="t21")
    files = p.write_reports(
        tmp_path,
        reports=["idle_causes", "launch_stats", "iteration_outliers", "roofline"],
        formats=["csv", "json"],
    )
    names = sorted(f.name for f in files)
    assert names == sorted(
        f"t21_{r}.{e}"
        for r in ("idle_causes", "launch_stats", "iteration_outliers", "roofline")
        for e in ("csv", "json")
    )
    back = pd.read_csv(tmp_path / "t21_idle_causes.csv")
    assert (
        back["GPU Idle Time (ns)"].tolist()
        == p.report("idle_causes")["GPU Idle Time (ns)"].tolist()
    )


def test_roofline_of_a_generated_emit_nvtx_export(tmp_path):
    """emit_nvtx ``sizes`` in a built nsys export: every op's cost from its shapes."""
    path = emit_nvtx_db(4).write(tmp_path / "emit.sqlite")
    p = jlprof.load(path)
    r = p.roofline().set_index(["Op Name", "Direction"])
    lin_f = 2 * 8 * 10 * 784
    lin_b = 4 * (8 * 784 + 10 * 784 + 8 * 10 + 10)
    assert r.loc[("aten::linear", "fprop"), "FLOPs per Call"] == lin_f
    assert r.loc[("aten::linear", "fprop"), "Bytes per Call"] == lin_b
    # the backward node linked to it (AddmmBackward0) counts twice: input and weight gradients
    assert r.loc[("aten::linear", "bprop"), "FLOPs per Call"] == 2 * lin_f
    # its rate is over the GEMM kernel's fixed duration, 4 calls
    fwd = r.loc[("aten::linear", "fprop")]
    assert fwd["Total GPU Time (ns)"] == 4 * DUR[GEMM_FWD]
    assert fwd["Achieved TFLOP/s"] == pytest.approx(lin_f / (DUR[GEMM_FWD] * 1e-9) / 1e12, 1e-3)
    assert r.loc[("aten::linear", "bprop"), "Main Kernel"] == "ampere_sgemm_64x64_nt"
    assert r.loc[("aten::linear", "bprop"), "Main Kernel GPU Time (ns)"] == 4 * DUR[GEMM_BWD]
    # conv: 2*N*O*H*W*C*kh*kw with the input's H, W (the documented stride-1 estimate)
    assert r.loc[("aten::conv2d", "fprop"), "FLOPs per Call"] == 2 * 8 * 4 * 16 * 16 * 3 * 9
    # relu: one FLOP per element, read + write
    relu = r.loc[("aten::relu", "fprop")]
    assert (relu["FLOPs per Call"], relu["Bytes per Call"]) == (8 * 4 * 14 * 14, 2 * 4 * 6272)
    assert relu["Roofline Bound"] == "memory"


def test_cli_writes_the_analyses(tmp_path):
    db = small_training_export(tmp_path / "loop.sqlite", steps=6)
    names = ["idle_causes", "launch_stats", "iteration_outliers", "roofline"]
    proc = subprocess.run(
        [sys.executable, "-m", "jlprof", "--database", str(db), "--reports", ",".join(names),
         "--formats", "csv,json", "--output_path", str(tmp_path / "out"), "--profile_name", "cli"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # the progress line says what the summary's mean ± std left out (its rows are the guide's)
    assert "mean ± std iteration time leaves out the partial intervals 0, 6" in proc.stderr
    p = jlprof.load(db)
    for n in names:
        got = pd.read_csv(tmp_path / "out" / f"cli_{n}.csv", keep_default_na=False)
        assert len(got) == len(p.report(n))
        assert (tmp_path / "out" / f"cli_{n}.json").is_file()
    o = pd.read_csv(tmp_path / "out" / "cli_iteration_outliers.csv")
    assert o["Partial Interval"].tolist() == [True] + [False] * 5 + [True]
    idle = pd.read_csv(tmp_path / "out" / "cli_idle_causes.csv")
    assert (idle[CAUSE_COLS].sum(axis=1) == idle["GPU Idle Time (ns)"]).all()


def test_sparse_median_pads_absent_iterations_with_zeros():
    from jlprof.reports.analyses import _sparse_median

    r = np.random.default_rng(4)
    n_ops, n = 7, 9
    dense = np.zeros((n_ops, n))
    mask = r.random((n_ops, n)) < 0.6
    dense[mask] = r.integers(1, 100, mask.sum())
    op, col = np.nonzero(mask)
    got = _sparse_median(op, dense[op, col], n_ops, n)
    np.testing.assert_allclose(got, np.median(dense, axis=1))


def test_conv_output_size_from_pyprof_args():
    from tests.fixtures.torch_traces import STRIDED_CONV as text

    params = fl.conv_params(text)
    # stride 2, padding 1, dilation 2, groups 2: out = (32 + 2 - 2*4 - 1) // 2 + 1 = 13
    f, b = fl.call_cost("conv2d", "[[2,8,32,32],[16,4,5,5]]", "float16", False, params)
    out = 2 * 16 * 13 * 13
    assert f == 2 * out * 4 * 25
    assert b == 2 * (2 * 8 * 32 * 32 + 16 * 4 * 25 + out)
    assert fl.conv_params("aten::conv2d, seq = 3") == ""  # emit_nvtx: no values recorded
    assert "'padding': 'same'" in fl.conv_params(text.replace("'value': (1, 1)", "'value': 'same'"))


def test_busy_time_per_device_in_slices_is_the_exact_group_sum():
    """The roofline's GPU (the busiest device) from 1M-row slices: the same integer sums as a
    group-by over all rows, whatever the slice size; a tie goes to the lowest device ID."""
    from jlprof.engine.aggregate.intervals import busy_ns_per_device
    from jlprof.reports import roofline

    rng = np.random.default_rng(7)
    n = 10_007
    dev = rng.choice([3, 0, 1], n)
    start = rng.integers(0, 10**12, n)
    end = start + rng.integers(0, 10**9, n)
    want = pd.Series(end - start).groupby(dev).sum().to_dict()
    for rows in (1, 97, n, 2 * n):
        got = busy_ns_per_device(dev, start, end, rows)
        assert got == {int(k): int(v) for k, v in want.items()}
    tie = busy_ns_per_device(np.array([5, 2]), np.array([0, 0]), np.array([4, 4]))
    assert roofline._busiest(tie) == 2
    assert roofline._busiest({**tie, 9: 5}) == 9
