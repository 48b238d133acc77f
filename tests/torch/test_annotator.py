"""jlprof.torch on a real (CPU) PyTorch CNN under the real nsys: names, directions, shapes."""

from __future__ import annotations

import json
import sqlite3

import pandas as pd
import pytest

import jlprof
from jlprof.engine.correlate.annotations import annotation_facts

from .conftest import BATCH, SLOW_DATA_MS, STEPS

pytestmark = [pytest.mark.nsys, pytest.mark.slow]


@pytest.fixture(scope="module")
def detail(auto_run) -> pd.DataFrame:
    return pd.read_csv(auto_run / "dlprof_detailed.csv", keep_default_na=False).set_index("Op ID")


def _range_counts(db) -> pd.Series:
    """Independent count: NVTX push/pop rows per text, straight from SQLite."""
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT COALESCE(e.text, s.value) FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59"
        ).fetchall()
    return pd.Series([r[0] for r in rows]).value_counts()


def test_op_names_follow_the_module_hierarchy(detail):
    # guide §11.1: the block module is called twice -> /Net/block and /Net/block(2)
    for name in ("/Net/stem/convolution", "/Net/block/conv/convolution",
                 "/Net/block(2)/conv/convolution", "/Net/block/relu", "/Net/fc/addmm"):  # fmt: skip
        for direction in ("fprop", "bprop"):
            row = detail.loc[f"{name}:{direction}"]
            assert row["Op Name"] == name and row["Direction"] == direction
    assert detail.loc["/Net/stem/convolution:fprop", "Op Type"] == "convolution"
    assert detail.loc["/Net/block/conv/convolution:bprop", "Op Type"] == "convolution"
    assert "/Net/block(3)/conv/convolution:fprop" not in detail.index  # names restart each step


def test_calls_shapes_and_dtypes(detail):
    stem = detail.loc["/Net/stem/convolution:fprop"]
    assert stem["No. Calls"] == STEPS
    assert stem["Input Shapes"] == f"[[{BATCH},3,8,8],[4,3,3,3],[4]]"
    assert stem["Data Type"] == "float32"
    fc = detail.loc["/Net/fc/addmm:bprop"]  # the backward row shows its forward op's inputs
    assert fc["Input Shapes"] == f"[[10],[{BATCH},256],[256,10]]"
    assert detail.loc["/Net/fc/weight.grad:bprop", "Op Type"] == "AccumulateGrad"
    assert detail.loc["/Net/fc/weight.grad:bprop", "Input Shapes"] == "[[10,256]]"
    assert detail.loc["optimizer_step", "No. Calls"] == STEPS
    assert detail.loc["dataloader", "No. Calls"] == STEPS + 1  # the last fetch ends the loop
    assert detail.loc["/Net/fc/addmm:fprop", "TC Eligibility"]


def test_calls_match_the_raw_ranges(auto_run, detail):
    counts = _range_counts(auto_run / "nsys_profile.sqlite")
    for op_id in ("/Net/fc/addmm:bprop", "/Net/block(2)/relu:fprop", "/Net/stem/convolution:bprop"):
        name, direction = op_id.rsplit(":", 1)
        expect = counts[counts.index.str.startswith(f"{name} [") & counts.index.str.contains(
            f"|{direction}|", regex=False)].sum()  # fmt: skip
        assert detail.loc[op_id, "No. Calls"] == expect > 0


def test_iterations_from_optimizer_step(auto_run):
    p = jlprof.load(auto_run / "nsys_profile.sqlite", mode="pytorch")
    assert p.key_node == "optimizer_step"
    assert p.iterations.count == STEPS + 1
    facts = annotation_facts(p.trace)
    assert facts["annotated"] and facts["state"]["batch_size"] == BATCH
    assert facts["state"]["amp"] is False
    assert facts["steps"] == 1  # step figures are marked when they change: after step 1 only
    assert facts["slow_apis"] == []


def test_stack_traces_and_slow_api_marks(debug_run, detail):
    p = jlprof.load(debug_run, mode="pytorch")
    det = p.report("detail").set_index("Op ID")
    st = det.loc["/Net/stem/convolution:fprop", "Stack Trace"]
    assert "torch_cnn.py:" in st and "forward" in st
    facts = annotation_facts(p.trace)
    assert facts["slow_apis"] == ["detect_anomaly"]
    assert facts["state"]["detect_anomaly"] is True
    # loss.item() once per step, on top of the DataLoader's own seed draw (.item()) seen without
    base = detail.loc["/_local_scalar_dense:fprop", "No. Calls"]
    assert det.loc["/_local_scalar_dense:fprop", "No. Calls"] == base + STEPS


def test_init_is_idempotent_and_restores_what_it_patched():
    import torch
    from torch.utils.data import dataloader as dl

    import jlprof.torch as jt

    before = dl._BaseDataLoaderIter.__next__
    try:
        h1 = jt.init()
        ann = jt._annotator
        h2 = jt.init()
        assert jt._annotator is ann and h1.enabled and h2.enabled
        assert dl._BaseDataLoaderIter.__next__ is not before
        torch.ones(2) + 1  # ops run fine with the mode on (no nsys: NVTX calls are no-ops)
    finally:
        jt.shutdown()
    assert not jt.enabled() and dl._BaseDataLoaderIter.__next__ is before
    with jt.init() as h:
        assert h.enabled
    assert not jt.enabled()


def test_expert_systems_on_the_real_runs(auto_run, debug_run):
    rep = pd.read_csv(auto_run / "dlprof_expert_systems.csv")
    found = set(rep["Detector"])
    assert "AMP Detector" in found  # fp32 convolutions, autocast off
    assert not {"Slow API Detector", "Device Sync Detector", "Emit NVTX Missing Detector"} & found
    p = jlprof.load(debug_run, mode="pytorch")
    dbg = p.report("expert_systems").set_index("Detector")
    assert "torch.autograd.detect_anomaly()" in dbg.loc["Slow API Detector", "Problem"]
    assert "/_local_scalar_dense:fprop" in dbg.loc["Device Sync Detector", "Problem"]
    assert "AMP Detector" not in dbg.index  # autocast was on
    # past the start-up iteration 0 the slow Dataset dominates: BATCH x SLOW_DATA_MS per fetch
    steady = p.report("expert_systems", iter_start=1, iter_stop=STEPS).set_index("Detector")
    ev = json.loads(steady.loc["Dataloader Detector", "Evidence"])
    assert ev["fetches"] == STEPS  # fetches 2..STEPS+1 (the last one ends the loop)
    assert ev["dataloader_ns"] >= (STEPS - 1) * BATCH * SLOW_DATA_MS * 1e6
    # (the quiet case is tests/reports/test_expert_pytorch.py: in this tiny CPU loop a plain
    # TensorDataset fetch may itself take 10 % of a step on a loaded machine)


def test_autocast_is_seen(debug_run):
    p = jlprof.load(debug_run, mode="pytorch")
    state = annotation_facts(p.trace)["state"]
    assert state["amp"] is True and state["amp_dtype"] == "bfloat16"
    det = p.report("detail").set_index("Op ID")
    assert det.loc["/Net/stem/convolution:fprop", "Data Type"] == "bfloat16"
    assert det.loc["/Net/stem/convolution:bprop", "Data Type"] == "bfloat16"


def test_saved_profile_keeps_annotations_and_findings(debug_run, tmp_path):
    p = jlprof.load(debug_run, mode="pytorch")
    again = jlprof.load(p.save(tmp_path / "run.jlprof"), mode="pytorch")
    assert annotation_facts(again.trace) == annotation_facts(p.trace)
    pd.testing.assert_frame_equal(again.report("detail"), p.report("detail"))
    pd.testing.assert_frame_equal(again.report("expert_systems"), p.report("expert_systems"))
    assert jlprof.load(debug_run).framework() == "PyTorch (jlprof.torch annotations)"
