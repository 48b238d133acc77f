"""Each view's data for a selection, checked against the engine's reports and raw events."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jlprof
from jlprof.profile import Profile
from jlprof.widgets import data
from tests.fixtures.loops import small_training_export
from tests.fixtures.scenarios import real_data_dir

STEPS = 12  # iterations 0..12: step 2 is 30 us slower, iteration 12 is the short tail
CONV_NS, RELU_NS, ADAM_NS = 50_000, 10_000, 6_000  # kernel durations the loop fixture uses


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    path = small_training_export(tmp_path_factory.mktemp("loop") / "loop.sqlite", steps=STEPS)
    return jlprof.load(path)


@pytest.fixture(scope="module")
def real() -> Profile:
    return jlprof.load(
        real_data_dir() / "centerformer-trt-nvtx-titanrtx/poolformer.sqlite",
        key_node="poolformer_forward",
    )


@pytest.mark.parametrize(("lo", "hi"), [(0, 12), (3, 7), (2, 2)])
def test_iteration_categories_reproduce_the_summary(loop: Profile, lo: int, hi: int) -> None:
    frame = data.iterations(loop)
    assert len(frame) == loop.iterations.count == STEPS + 1
    sel = frame[(frame["iteration"] >= lo) & (frame["iteration"] <= hi)]
    rep = loop.summary(lo, hi)["Summary Report"]
    wall = sel["duration_ns"].sum()
    assert wall == rep["Wall Clock Time (ns)"]
    for cat, row in [
        ("tc", "Tensor Core Kernel Duration %"),
        ("non_tc", "Non-Tensor Core Kernel Duration %"),
        ("memory", "Memory Duration %"),
        ("dataloader", "Dataloader Duration %"),
        ("cpu", "CPU Duration %"),
        ("other", "Other Duration %"),
    ]:
        assert 100 * sel[f"{cat}_ns"].sum() / wall == pytest.approx(rep[row], abs=0.006)
    # the categories partition each iteration's wall time
    parts = frame[[f"{c}_ns" for c in data.ITER_CATEGORIES]].sum(axis=1)
    np.testing.assert_allclose(parts, frame["duration_ns"])


def test_iteration_windows_and_outliers(loop: Profile) -> None:
    frame = data.iterations(loop)
    # windows follow the key node's ends: iteration k ends where optimizer_step k ends
    nv = loop.trace.nvtx
    ends = np.sort(nv.loc[nv["text"] == "optimizer_step", "end_ns"].to_numpy())
    np.testing.assert_array_equal(frame["end_ns"].to_numpy()[:-1], ends)
    # step 2 has 30 us more optimizer time; the tail after the last step is tiny
    # outliers: above median + 3 scaled MADs of the complete iterations 1..STEPS-1, written
    # out here; the partial first interval and the tail are marked, never flagged
    dur = frame["duration_ns"].to_numpy()
    full = dur[1:-1].astype(float)
    med = float(np.median(full))
    mad = 1.4826 * float(np.median(np.abs(full - med)))
    expected = {i for i in range(1, len(dur) - 1) if dur[i] > med + 3 * mad}
    assert set(np.flatnonzero(frame["outlier"])) == expected == {2}
    assert np.flatnonzero(frame["partial"]).tolist() == [0, STEPS]


def test_headline_cards_follow_the_range(loop: Profile) -> None:
    a = data.headline(loop, 0, STEPS)
    b = data.headline(loop, 3, 7)
    dur = loop.iterations.durations_ns()
    assert a.iterations_found == STEPS + 1 and b.aggregated == 5
    assert b.iter_mean_ns == pytest.approx(dur[3:8].mean(), abs=0.1)
    assert b.iter_std_ns == pytest.approx(dur[3:8].std(), abs=0.1)
    assert a.iter_mean_ns != b.iter_mean_ns
    # GPU util over 3..7: union of kernel time per visible GPU over wall, averaged over 2 GPUs
    g = loop.correlated.gpu
    bounds = loop.iterations.bounds_ns
    t0, t1 = bounds[3], bounds[8]
    busy = (g["end_ns"].clip(upper=t1) - g["start_ns"].clip(lower=t0)).clip(lower=0).sum()
    assert b.gpu_util_pct == pytest.approx(100 * busy / (t1 - t0) / 2, abs=0.01)
    assert b.tc_util_pct == 100.0  # the only TC-eligible op (conv2d) runs only TC kernels


def test_op_tree_is_depth_first_with_group_figures(loop: Profile) -> None:
    tree = data.op_tree(loop, 3, 7)
    assert list(tree["path"]) == ["/model", "/model/conv1", "/model/relu1", "/train_step"]
    seen: set[str] = set()
    for _, row in tree.iterrows():
        assert row["parent"] == "" or row["parent"] in seen
        seen.add(row["path"])
    gn = loop.report("group_node", 3, 7).set_index("Name")
    for _, row in tree.iterrows():
        assert row["gpu_ns"] == gn.loc[row["path"], "Total GPU Time (ns)"]
        assert row["calls"] == gn.loc[row["path"], "No. Calls Aggregated"]
    model = tree.set_index("path").loc["/model"]
    assert model["gpu_ns"] == 5 * (CONV_NS + RELU_NS)  # the fixture's kernels, by construction
    assert model["tc_eligible_ops"] == 5 and model["tc_ops"] == 5  # conv2d, once per step
    assert model["depth"] == 0 and tree.set_index("path").loc["/model/conv1", "depth"] == 1


def test_kernel_table_filtered_by_tree_node(loop: Profile) -> None:
    it = loop.report("iteration", 3, 7)
    for node, expect in [(None, CONV_NS + RELU_NS + ADAM_NS), ("/model", CONV_NS + RELU_NS)]:
        k = data.kernels(loop, 3, 7, node)
        assert k["Total GPU Time (ns)"].sum() == 5 * expect
        rows = it if node is None else it[it["Op Name"].astype(str).str.startswith(node + "/")]
        assert k["Total GPU Time (ns)"].sum() == rows["GPU Time (ns)"].sum()
        assert set(k["Kernel Name"]) == set(rows["Kernel Name"].astype(str))
    assert data.kernels(loop, 3, 7, "/model/relu1")["Kernel Name"].tolist() == [
        "vectorized_elementwise_kernel"
    ]


def test_tensor_core_view_matches_the_tensor_report(loop: Profile) -> None:
    tc = data.tensor_core(loop, 0, 4)
    rep = loop.report("tensor", 0, 4)
    assert tc["op"].tolist() == rep["Op ID"].tolist() == ["/model/conv1/conv2d"]
    assert tc["gpu_ns"].iloc[0] == 5 * CONV_NS == tc["tc_ns"].iloc[0]
    assert tc["non_tc_ns"].iloc[0] == 0 and tc["tc_util_pct"].iloc[0] == 100.0


def test_hints_offer_the_steady_range(loop: Profile) -> None:
    hints = data.hints(loop, 0, STEPS)
    bad = [h for h in hints if h["detector"] == "Bad Iteration Range Detector"]
    assert len(bad) == 1
    lo, hi = bad[0]["action"]["set_range"]
    frame = data.iterations(loop)
    assert not frame["outlier"].iloc[lo : hi + 1].any() and hi - lo >= 2
    assert not [h for h in data.hints(loop, lo, hi) if h["detector"] == bad[0]["detector"]]


def test_gpu_timeline_lists_the_iteration_reports_work(loop: Profile) -> None:
    frame, merged = data.gpu_timeline(loop, 3, 7)
    assert not merged
    it = loop.report("iteration", 3, 7)
    got = sorted(zip(frame["start_ns"], frame["dur_ns"], frame["name"], strict=True))
    want = sorted(
        zip(it["GPU Start Time (ns)"], it["GPU Time (ns)"], it["Kernel Name"].astype(str),
            strict=True)
    )  # fmt: skip
    assert got == want
    assert set(frame["lane"]) == {"GPU 0 stream 7"}
    by_op = frame.groupby("op")["dur_ns"].sum()
    assert by_op["/model/conv1/conv2d"] == 5 * CONV_NS and by_op["optimizer_step"] == 5 * ADAM_NS


def test_gpu_timeline_merges_above_the_glyph_cap(loop: Profile) -> None:
    full, _ = data.gpu_timeline(loop, 0, STEPS)
    frame, merged = data.gpu_timeline(loop, 0, STEPS, max_glyphs=5)
    assert merged and len(frame) <= 5
    assert frame["count"].sum() == len(full)
    assert frame["busy_ns"].sum() == full["dur_ns"].sum()
    # every merged bar spans exactly the work it stands for
    for _, bar in frame.iterrows():
        inside = full[(full["start_ns"] >= bar["start_ns"]) & (full["start_ns"] <= bar["end_ns"])]
        assert len(inside) >= bar["count"]
        assert inside["end_ns"].max() >= bar["end_ns"]
    assert set(frame["name"]) <= set(full["name"])


def test_nvtx_timeline_ranges_of_the_selected_iterations(loop: Profile) -> None:
    frame = data.nvtx_timeline(loop, 3, 7)
    b = loop.iterations.bounds_ns
    nv = loop.trace.nvtx
    want = nv[(nv["start_ns"] >= b[3]) & (nv["start_ns"] < b[8])]
    assert sorted(frame["start_ns"]) == sorted(want["start_ns"])
    assert sorted(frame["name"]) == sorted(want["text"].astype(str))
    capped = data.nvtx_timeline(loop, 3, 7, max_glyphs=4)
    assert len(capped) == 4
    assert capped["dur_ns"].min() >= np.sort(frame["dur_ns"].to_numpy())[-4]


def test_real_trace_iterations(real: Profile) -> None:
    frame = data.iterations(real)
    assert len(frame) == real.iterations.count == 189
    rep = real.summary(10, 50)["Summary Report"]
    sel = frame.iloc[10:51]
    assert 100 * sel["cpu_ns"].sum() / sel["duration_ns"].sum() == pytest.approx(
        rep["CPU Duration %"], abs=0.006
    )
    # a TensorRT inference capture without GPU rows: no kernels, ranges on the threads
    assert data.gpu_timeline(real, 10, 50)[0].empty
    nv = data.nvtx_timeline(real, 10, 50)
    assert (nv["name"] == "poolformer_forward").sum() == 41
    assert isinstance(data.op_tree(real, 10, 50), pd.DataFrame)


def test_kernel_only_trace_without_nvtx(tmp_path: Path) -> None:
    """A real multi-GPU trace with its NVTX table dropped: more kernels than the timeline draws."""
    path = tmp_path / "kernels_only.sqlite"
    src = real_data_dir() / "nsysai-fastvideo-wan-train-fsdp-2gpu"
    shutil.copyfile(src / "nsysai-fastvideo-wan-train-fsdp-2gpu.sqlite", path)
    with sqlite3.connect(path) as con:
        con.execute("DROP TABLE NVTX_EVENTS")
    con.close()
    p = jlprof.load(path)
    assert len(p.correlated.gpu) > data.MAX_KERNEL_GLYPHS
    frame, merged = data.gpu_timeline(p, 0, 0)
    assert merged and len(frame) <= data.MAX_KERNEL_GLYPHS
    assert frame["count"].sum() == len(p.correlated.gpu)
    assert data.op_tree(p, 0, 0).empty and data.nvtx_timeline(p, 0, 0).empty


@pytest.mark.parametrize(("lo", "hi"), [(0, STEPS), (3, 7), (2, 2)])
def test_kernel_table_rows_are_the_kernel_reports(loop: Profile, lo: int, hi: int) -> None:
    """The table is built from the (kernel, op) frame, not the report: same rows, same order."""
    k = data.kernels(loop, lo, hi)
    rep = loop.report("kernel", lo, hi)
    assert len(k) == len(rep) > 0
    for col in ("Kernel Name", "Op ID", "Op Name", "Uses TC", "Total GPU Time (ns)",
                "Avg. GPU Time (ns)", "Long Kernel Name"):  # fmt: skip
        assert k[col].tolist() == rep[col].tolist(), col


def test_kernel_table_calls(loop: Profile) -> None:
    k = data.kernels(loop, 3, 7).set_index("Kernel Name")
    it = loop.report("iteration", 3, 7)
    counts = it["Kernel Name"].astype(str).value_counts()
    for name, n in counts.items():
        assert k.loc[name, "Calls"] == n == 5


def _timeline_both_ways(p: Profile, lo: int, hi: int, cap: int) -> tuple:
    fast = data.gpu_timeline(p, lo, hi, cap)
    data._FAST_BINS = False
    try:
        slow = data.gpu_timeline(p, lo, hi, cap)
    finally:
        data._FAST_BINS = True
    return fast, slow


@pytest.mark.parametrize("cap", [1, 3, 5, 12, 40])
def test_binned_timeline_by_binary_search_equals_the_row_by_row_one(loop: Profile, cap) -> None:
    for lo, hi in [(0, STEPS), (3, 7), (5, 5), (1, STEPS - 1)]:
        (fast, m1), (slow, m2) = _timeline_both_ways(loop, lo, hi, cap)
        assert m1 == m2
        pd.testing.assert_frame_equal(fast, slow, obj=f"{lo}..{hi} cap {cap}")


def test_binned_timeline_equal_on_several_gpus_and_streams() -> None:
    from tests.engine.synthetic import training_loop

    p = Profile(
        training_loop(seed=11, iters=8, gpus=2, overlap=0.4).trace, key_node="optimizer_step"
    )
    for lo, hi in [(0, 7), (2, 5), (6, 6)]:
        for cap in (2, 7, 30):
            (fast, _), (slow, _) = _timeline_both_ways(p, lo, hi, cap)
            pd.testing.assert_frame_equal(fast, slow, obj=f"{lo}..{hi} cap {cap}")


@pytest.mark.parametrize(
    ("lo", "hi", "n"), [(0, 99, 50), (40, 40, 10), (7, 9, 5000), (200, 300, 5)]
)
def test_first_hits_by_growing_chunks_equal_one_full_pass(lo: int, hi: int, n: int) -> None:
    """The NVTX timeline's scan for the longest ranges in a range of iterations stops early;
    it must find the same rows as a full pass (narrow ranges need several chunks)."""
    it = np.random.default_rng(1).integers(0, 100, 200_000)
    want = np.flatnonzero((it >= lo) & (it <= hi))[:n]
    got = data._first_hits(it, lo, hi, n)
    assert np.array_equal(got, want) and len(got) == min(n, ((it >= lo) & (it <= hi)).sum())
