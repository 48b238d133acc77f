"""Report fixes found on real traces (issue 16): group nodes on several GPUs, leaf-call counts,
a one-time launch cost, NVTX-only captures, the emit_nvtx hint."""

from __future__ import annotations

from pathlib import Path

import jlprof
from jlprof.profile import Profile
from jlprof.reports import expert_pytorch as E
from tests.engine.frames import call, gpu_info, kernel, make_trace, rng
from tests.fixtures.scenarios import cpu_only_db
from tests.fixtures.torch_traces import emit_nvtx_db


def test_group_node_sums_gpu_time_across_gpus() -> None:
    """Per iteration a 'step' group with one op per GPU; the kernels overlap in time on two
    GPUs, so a union would count the overlap once: the guide sums the GPUs."""
    ks, cs, rs = [], [], []
    for i in range(3):
        t = i * 1_000
        rs += [rng("step", t, t + 900), rng("gpu0", t + 10, t + 20), rng("gpu1", t + 30, t + 40)]
        cs += [call(t + 11, t + 12, 2 * i), call(t + 31, t + 32, 2 * i + 1)]
        ks += [
            kernel(t + 100, t + 400, 2 * i, device=0),
            kernel(t + 200, t + 600, 2 * i + 1, device=1),
        ]
    p = Profile(
        make_trace(gpu=ks, api=cs, nvtx=rs, gpus=[gpu_info(0), gpu_info(1)]), key_node="step"
    )
    g = p.report("group_node", 0, 2).set_index("Name")
    assert g.loc["/step", "Total GPU Time (ns)"] == 3 * (300 + 400)  # not 3 * 500 (the union)
    assert g.loc["/step", "Max GPU Time (ns)"] == 700


def test_calls_aggregated_counts_leaf_calls(tmp_path: Path) -> None:
    iters = 5
    p = jlprof.load(emit_nvtx_db(iters).write(tmp_path / "e.sqlite"))
    g = p.report("group_node").set_index("Name")
    # per Batch: aten::cudnn_convolution (under conv2d > convolution), empty, relu, addmm
    assert g.loc["/Batch #", "No. Calls Aggregated"] == 4 * iters
    assert g.loc["/Batch #/aten::conv2d", "No. Calls Aggregated"] == iters


def test_launch_bound_ignores_a_one_time_launch_cost() -> None:
    """240 tiny kernels (2 µs) launched by 1 µs calls: GPU-bound, even though the first launch
    took 900 ms (lazy module loading)."""
    ks, cs, rs = [], [], []
    t = 0
    for i in range(2):
        rs.append(rng("global_step", t, t + 1_000_000_000))
        for j in range(120):
            corr = i * 1000 + j
            first = 900_000_000 if (i, j) == (0, 0) else 1_000
            cs.append(call(t + 10, t + 10 + first, corr))
            ks.append(kernel(t + 10 + first + 100, t + 10 + first + 2_100, corr))
            t += first + 3_000
        t = (i + 1) * 1_000_000_000
    p = Profile(make_trace(gpu=ks, api=cs, nvtx=rs, gpus=[gpu_info(0)]), mode="pytorch")
    assert E.launch_bound(p, 0, 1) == []


def test_nvtx_only_capture_says_no_gpu_work(tmp_path: Path) -> None:
    p = jlprof.load(cpu_only_db().write(tmp_path / "cpu.sqlite"))
    rep = p.report("expert_systems")
    text = " ".join(rep["Problem"].astype(str))
    assert "No GPU work was captured" in text
    assert "unused" not in text


def test_emit_nvtx_trace_is_not_missing_annotations(tmp_path: Path) -> None:
    p = jlprof.load(emit_nvtx_db(3).write(tmp_path / "e.sqlite"))
    lo, hi = p.range_of(None, None)
    assert E.annotation_missing(p, lo, hi) == []
