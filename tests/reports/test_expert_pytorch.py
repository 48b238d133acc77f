"""PyTorch expert systems: each detector fires on the run built to trigger it, and only there.

Exports come from ``tests/fixtures/torch_loops.py`` (GPU work from the nsys schema, NVTX texts
and ``jlprof:`` marks from ``jlprof.torch.format``); evidence numbers are checked against the
knobs that built the export.
"""

from __future__ import annotations

import pytest

import jlprof
from jlprof.reports import expert_pytorch as E
from tests.fixtures.torch_loops import GIB, Knobs, torch_training_export

HEALTHY = {"amp": True}  # the fixture's defaults plus AMP: nothing to report


def run(tmp_path, mode="pytorch", **knobs):
    k = Knobs(**{**HEALTHY, **knobs})
    tmp_path.mkdir(parents=True, exist_ok=True)
    p = jlprof.load(torch_training_export(tmp_path / "t.sqlite", k), mode=mode)
    lo, hi = p.range_of(None, None)
    return {f.detector: f for f in E.findings(p, lo, hi)}, p


def test_a_healthy_run_has_no_pytorch_findings(tmp_path):
    found, p = run(tmp_path)
    assert found == {}
    assert p.iterations.count == Knobs().steps + 1
    # and the expert-systems report lists the PyTorch detectors beside the generic ones
    rep = p.report("expert_systems")
    assert not rep["Detector"].isin([d.__name__ for d in E.DETECTORS]).any()


def test_amp_detector(tmp_path):
    found, _ = run(tmp_path, amp=False)
    f = found["AMP Detector"]
    assert f.evidence["amp_states"] == [False] and f.evidence["tc_eligible_ops"] == 4
    assert "torch.autocast" in f.recommendation


def test_amp_detector_without_marks_uses_data_types(tmp_path):
    found, _ = run(tmp_path, amp=False, state=False)
    assert found["AMP Detector"].evidence["amp_states"] == []
    found16, _ = run(tmp_path / "b", amp=False, state=False, dtype="float16")
    assert "AMP Detector" not in found16


def test_dataloader_detector(tmp_path):
    k = Knobs(fetch_ns=100_000)
    found, p = run(tmp_path, fetch_ns=k.fetch_ns)
    ev = found["Dataloader Detector"].evidence
    assert ev["fetches"] == k.steps and ev["dataloader_ns"] == k.steps * k.fetch_ns
    t0, t1 = p.iterations.bounds_ns[0], p.iterations.bounds_ns[-1]
    assert ev["wall_ns"] == t1 - t0
    assert ev["dataloader_pct"] == round(100 * ev["dataloader_ns"] / ev["wall_ns"], 2)


def test_cudnn_benchmark_detector(tmp_path):
    found, _ = run(tmp_path, benchmark=False)
    ev = found["cuDNN Benchmark Detector"].evidence
    assert ev["conv_ops"] == 2  # the convolution's fprop and bprop
    assert ev["input_shapes"] == ["[[32,3,32,32],[16,3,3,3],[16]]"]


def test_slow_api_detector(tmp_path):
    found, _ = run(tmp_path, slow_apis=("gradcheck", "record_function"))
    assert found["Slow API Detector"].evidence["apis"] == ["gradcheck", "record_function"]
    found, _ = run(tmp_path / "b", anomaly=True)
    assert found["Slow API Detector"].evidence["apis"] == ["detect_anomaly"]


def test_batch_size_detector(tmp_path):
    found, _ = run(tmp_path, peak_mem=4 * GIB, total_mem=40 * GIB, batch=32)
    ev = found["Batch Size Detector"].evidence
    assert ev["peak_mem_pct"] == 10.0 and ev["batch_size"] == 32
    assert ev["suggested_batch_size"] == int(32 * 0.8 * 40 / 4)
    found, _ = run(tmp_path / "b", peak_mem=None, total_mem=None)  # CPU run: nothing to say
    assert "Batch Size Detector" not in found


def test_annotation_missing_detector(tmp_path):
    found, _ = run(tmp_path, annotate=False)
    assert found["Emit NVTX Missing Detector"].evidence == {"annotated_ops": 0}
    found, _ = run(tmp_path / "b", bprop=False)
    assert found["Emit NVTX Missing Detector"].evidence["bprop_ops"] == 0
    found, _ = run(tmp_path / "c", mode="simple", annotate=False)
    assert found == {}  # simple mode without annotations: PyTorch detectors stay out


def test_host_bound_gap_detector(tmp_path):
    found, _ = run(tmp_path, gap_ns=300_000)
    ev = found["Host-Bound Gap Detector"].evidence
    assert ev["median_gap_ns"] >= 300_000  # the idle time the fixture inserted, at least
    assert ev["pct_of_wall"] > E.GAP_PCT


def test_launch_bound_detector(tmp_path):
    k = Knobs(tiny_kernels=150)
    found, p = run(tmp_path, tiny_kernels=k.tiny_kernels)
    ev = found["Launch-Bound Step Detector"].evidence
    kernels = k.steps * (k.tiny_kernels + 5)  # 5 regular kernels per step
    assert ev["kernels_per_iteration"] == round(kernels / p.iterations.count, 1)
    assert ev["median_kernel_ns"] == 2_000
    assert ev["ops"][0] == {"op_id": "/Net/act/add:fprop", "count": k.steps * k.tiny_kernels}
    found, _ = run(tmp_path / "b", tiny_kernels=20)
    assert "Launch-Bound Step Detector" not in found


def test_pageable_and_sync_copy_detector(tmp_path):
    found, _ = run(tmp_path, pageable=True)
    ev = found["Synchronous/Pageable Copy Detector"].evidence
    assert ev["pageable_copies"] == Knobs().steps and ev["synchronous_copies"] == 0
    assert ev["bytes"] == Knobs().steps * 32 * 3 * 32 * 32 * 4
    assert ev["ops"][0]["op_id"] == "/copy_:fprop"
    found, _ = run(tmp_path / "b", sync_memcpy=True)
    ev = found["Synchronous/Pageable Copy Detector"].evidence
    assert ev["synchronous_copies"] == Knobs().steps and ev["pageable_copies"] == 0


def test_copies_in_step_detector(tmp_path):
    found, _ = run(tmp_path, item=True)
    ev = found["Copies In Step Detector"].evidence
    assert ev["device_to_host"] == Knobs().steps and ev["host_to_device_in_model"] == 0
    found, _ = run(tmp_path / "b", htod_in_model=True)
    ev = found["Copies In Step Detector"].evidence
    assert ev["host_to_device_in_model"] == Knobs().steps and ev["device_to_host"] == 0
    assert ev["ops"][0]["op_id"] == "/Net/scale/lift_fresh:fprop"


def test_device_sync_detector(tmp_path):
    found, p = run(tmp_path, item=True)
    ev = found["Device Sync Detector"].evidence
    assert ev["sync_calls"] == Knobs().steps
    assert ev["sync_ops"][0] == {"op_id": "/_local_scalar_dense:fprop", "count": Knobs().steps}
    assert ev["iterations_with_syncs"] == Knobs().steps and ev["iterations"] == p.iterations.count


@pytest.mark.parametrize(
    ("graphs", "expect"),
    [([1, 1, 2, 2, 3, 3], 2), ([1, 1, 1, 1, 1, 1], 0), ([0, 2, 2, 2, 2, 2], 0)],
)
def test_recompilation_detector(tmp_path, graphs, expect):
    found, _ = run(tmp_path, compiled_graphs=graphs)
    if expect:
        assert found["Recompilation Detector"].evidence["recompilations"] == expect
    else:
        assert "Recompilation Detector" not in found
