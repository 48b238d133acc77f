"""The dashboard's Analyses section: built when opened, fed from the analyses' reports."""

from __future__ import annotations

import numpy as np
import pytest

import jlprof
from jlprof.profile import Profile
from jlprof.widgets import analyses as av
from tests.fixtures.loops import small_training_export
from tests.fixtures.scenarios import real_traces

STEPS = 12


@pytest.fixture
def profile(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    path = tmp_path_factory.getbasetemp() / "analyses_loop.sqlite"
    if not path.exists():
        small_training_export(path, steps=STEPS)
    return jlprof.load(path)


def test_closed_section_computes_nothing_until_opened(profile: Profile) -> None:
    d = profile.dashboard()
    assert d.analyses.views is None and d.analyses in d.children
    d.set_range(2, 5)  # a refresh while closed is free
    assert d.analyses.views is None
    d.analyses.expand()
    v = d.analyses.views
    assert v is not None and list(v.idle_src.data["iteration"]) == [2, 3, 4, 5]


def test_views_show_the_reports_numbers(profile: Profile) -> None:
    d = profile.dashboard()
    d.analyses.expand()
    v = d.analyses.views
    rep = profile.report("idle_causes")
    busy = rep[rep["GPU Busy Time (ns)"].groupby(rep["GPU"]).transform("sum") > 0]
    for c, col in (("sync", "Synchronization (ns)"), ("host_launch", "Host Launch Bound (ns)")):
        want = busy.groupby("Iteration")[col].mean().to_numpy() / 1e6
        np.testing.assert_allclose(v.idle_src.data[f"{c}_ms"], want)
    # the slow step 2 is the outlier offered; its optimizer_step ran 30 us longer on the host
    assert v.pick.options == ["2"] and v.pick.value == "2"
    assert v.why_src.data["op"][0] == "optimizer_step"
    assert v.why_src.data["cpu_delta_us"][0] == pytest.approx(30.0, abs=1.0)
    # histogram counts every launch of the range once
    assert int(np.sum(v.launch_src.data["count"])) == len(profile.launch_stats(per_launch=True))
    d.set_range(3, 8)  # follows the range once open
    assert list(v.out_src.data["iteration"]) == list(range(3, 9))
    assert v.pick.options == []


def test_roofline_tab_on_the_real_pyprof_trace() -> None:
    path = next(p for p in real_traces() if p.parent.name == "mmagic-pyprof-a100")
    p = jlprof.load(path)
    pts, roofs = av.roofline_data(p, 0, 0)
    r = p.roofline()
    assert len(pts) == int(((r["Total FLOPs"] > 0) & (r["Total GPU Time (ns)"] > 0)).sum()) > 0
    assert roofs["model"] == "A100 40GB" and roofs["peaks"]["tf32"] == 156.0
    lines = av._roofs(roofs, pts)
    # each roof is min(peak, AI * bandwidth): flat at the peak right of the ridge point
    assert "fp16/bf16" in lines["label"]  # one roof for equal peaks
    for xs, ys, dts in zip(lines["xs"], lines["ys"], lines["label"], strict=True):
        assert all(ys[-1] == roofs["peaks"][dt] for dt in dts.split("/"))
        assert ys[0] == pytest.approx(xs[0] * roofs["bw"] / 1e12)


def test_pyprof_tab_shows_the_prof_report_of_the_range(tmp_path) -> None:
    """The PyProf tab's rows are the ``prof`` report's for the selected iterations (whose FLOPs
    tests/engine/test_prof.py works from PyProf's conv2d formula), and follow the range."""
    from tests.fixtures.torch_traces import plugin_db

    p = jlprof.load(plugin_db(3).write(tmp_path / "p.sqlite"), key_node="Conv2d")
    v = av.AnalysesViews()
    v.update(p, 0, 2)  # another tab open: not computed (its cost is PyProf's, per kernel)
    assert len(v.prof_src.data["idx"]) == 0
    v.layout.active = av.PROF_TAB
    fields = {"idx": "Idx", "dir": "Direction", "op": "Op", "kernel": "Kernel",
              "params": "Params", "sil": "Sil(ns)", "flops": "FLOPs", "bytes": "Bytes"}  # fmt: skip
    for lo, hi in ((1, 1), (0, 2)):
        v.update(p, lo, hi)
        want = p.report("prof", iter_start=lo, iter_stop=hi)
        assert 0 < len(want) == len(v.prof_src.data["idx"])
        for f, col in fields.items():
            assert list(v.prof_src.data[f]) == want[col].tolist(), f
        assert v.prof_note.text.startswith(f"{len(want)} kernels launched in iterations")
    assert 2 * 8 * 4 * 14 * 14 * 3 * 3 * 3 in list(v.prof_src.data["flops"])
    assert [t.title for t in v.layout.tabs][-1] == "PyProf"


def test_pyprof_tab_caps_its_rows(tmp_path, monkeypatch) -> None:
    from tests.fixtures.torch_traces import plugin_db

    p = jlprof.load(plugin_db(3).write(tmp_path / "p.sqlite"), key_node="Conv2d")
    monkeypatch.setattr(av, "PROF_ROWS", 2)
    rows, note = av.prof_data(p, 0, 2)
    want = p.report("prof", iter_start=0, iter_stop=2)
    assert len(want) > 2 and rows["Idx"].tolist() == want["Idx"].head(2).tolist()
    assert "the first 2 shown" in note


def test_opening_the_pyprof_tab_computes_it_for_the_range(profile: Profile) -> None:
    d = profile.dashboard()
    d.set_range(2, 4)
    d.analyses.expand()
    v = d.analyses.views
    assert len(v.prof_src.data["idx"]) == 0
    v.layout.active = av.PROF_TAB  # what the browser's tab click sends
    want = profile.report("prof", iter_start=2, iter_stop=4)
    assert len(want) > 0 and list(v.prof_src.data["idx"]) == want["Idx"].tolist()
    d.set_range(5, 5)  # follows the range while open
    want = profile.report("prof", iter_start=5, iter_stop=5)
    assert len(want) > 0 and list(v.prof_src.data["idx"]) == want["Idx"].tolist()
