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
