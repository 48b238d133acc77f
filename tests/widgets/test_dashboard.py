"""The Dashboard widget driven through its traits and Bokeh selections, as a front end would."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import jlprof
from jlprof.errors import AnalysisError
from jlprof.profile import Profile
from jlprof.widgets import data
from jlprof.widgets.dashboard import Dashboard
from jlprof.widgets.static import static_html
from tests.fixtures.loops import small_training_export
from tests.fixtures.scenarios import KEY_NODE, cpu_only_db, real_traces

STEPS = 12


@pytest.fixture
def profile(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    path = tmp_path_factory.getbasetemp() / "dash_loop.sqlite"
    if not path.exists():
        small_training_export(path, steps=STEPS)
    return jlprof.load(path)


@pytest.fixture
def dash(profile: Profile) -> Dashboard:
    return profile.dashboard()


def _ms(ns) -> np.ndarray:
    return np.asarray(ns, dtype=np.int64) / 1e6


def test_initial_views_show_the_whole_profile(dash: Dashboard, profile: Profile) -> None:
    v = dash.views
    assert dash.range_slider.value == (0, STEPS) and dash.range_slider.max == STEPS
    assert list(v.iter_src.data["iteration"]) == list(range(STEPS + 1))
    np.testing.assert_allclose(
        v.iter_src.data["duration_ms"], _ms(profile.iterations.durations_ns())
    )
    # the slow step 2 is an outlier; the partial tail (STEPS) is short but never one
    assert sorted(v.outlier_src.data["iteration"]) == [2]
    assert (v.range_box.left, v.range_box.right) == (-0.5, STEPS + 0.5)
    assert len(v.gpu_src.data["left"]) == 3 * STEPS
    assert "key node optimizer_step" in dash.cards.value
    assert dash.key_node_box.value == "optimizer_step"
    ranked = list(profile.suggest_key_nodes(10)["op_name"])  # candidates, best first
    assert list(dash.key_node_box.options) == ranked and "optimizer_step" in ranked


def test_slider_change_updates_every_view(dash: Dashboard, profile: Profile) -> None:
    v = dash.views
    before = {
        "gpu": list(v.gpu_src.data["left"]),
        "tree": list(v.tree_src.data["gpu_ms"]),
        "kernels": list(v.kernel_src.data["calls"]),
        "tc": list(v.tc_src.data["tc_ms"]),
        "cards": dash.cards.value,
    }
    dash.range_slider.value = (3, 7)  # what the browser's slider sends
    assert (profile.iter_start, profile.iter_stop) == (3, 7)
    assert (v.range_box.left, v.range_box.right) == (2.5, 7.5)
    # every view now shows exactly the 3..7 data of the engine
    gpu, _ = data.gpu_timeline(profile, 3, 7)
    t0 = profile.correlated.t_first_ns
    assert sorted(v.gpu_src.data["left"]) == sorted(_ms(gpu["start_ns"] - t0))
    tree = data.op_tree(profile, 3, 7)
    np.testing.assert_allclose(v.tree_src.data["gpu_ms"], _ms(tree["gpu_ns"]))
    assert sorted(v.kernel_src.data["calls"]) == [5, 5, 5]
    assert list(v.tc_src.data["tc_ms"]) == [5 * 50_000 / 1e6]
    h = data.headline(profile, 3, 7)
    assert f"{h.iter_mean_ns / 1e6:.3f} ± {h.iter_std_ns / 1e6:.3f} ms" in dash.cards.value
    after = {
        "gpu": list(v.gpu_src.data["left"]),
        "tree": list(v.tree_src.data["gpu_ms"]),
        "kernels": list(v.kernel_src.data["calls"]),
        "tc": list(v.tc_src.data["tc_ms"]),
        "cards": dash.cards.value,
    }
    assert all(before[k] != after[k] for k in before)
    assert "iterations 3..7" in dash.status.value


def test_bar_names_travel_as_codes_into_a_growing_lookup(dash: Dashboard, profile: Profile) -> None:
    """The bars carry int codes; the hovers' lookup maps them back to the engine's names, and
    a range change streams only names the lookup does not hold yet."""
    v = dash.views
    lookup = v.names.src.data["name"]
    held = list(lookup)
    dash.set_range(3, 7)
    assert list(v.names.src.data["name"][: len(held)]) == held  # only grows
    lookup = np.asarray(v.names.src.data["name"], dtype=object)
    assert len(set(lookup)) == len(lookup)
    gpu, _ = data.gpu_timeline(profile, 3, 7)
    nvtx = data.nvtx_timeline(profile, 3, 7)
    for src, frame in ((v.gpu_src, gpu), (v.nvtx_src, nvtx)):
        codes = np.asarray(src.data["name"])
        assert codes.dtype == np.int32
        shown = sorted(zip(src.data["left"], lookup[codes], strict=True))
        t0 = profile.correlated.t_first_ns
        want = sorted(zip(_ms(frame["start_ns"] - t0), frame["name"], strict=True))
        assert shown == want
    # the same kernel keeps its colour: one palette index per name
    colors = dict(zip(lookup[v.gpu_src.data["name"]], v.gpu_src.data["color"], strict=True))
    dash.set_range(0, STEPS)
    lookup = np.asarray(v.names.src.data["name"], dtype=object)
    again = dict(zip(lookup[v.gpu_src.data["name"]], v.gpu_src.data["color"], strict=True))
    assert all(again[k] == c for k, c in colors.items())


def test_set_range_is_scriptable_and_checked(dash: Dashboard, profile: Profile) -> None:
    dash.set_range(1, 2)
    assert dash.range_slider.value == (1, 2)
    assert len(dash.views.gpu_src.data["left"]) == 6
    with pytest.raises(AnalysisError, match="past the last iteration"):
        dash.set_range(0, STEPS + 5)
    assert (profile.iter_start, profile.iter_stop) == (1, 2)


def test_box_select_in_the_iteration_timeline_sets_the_range(dash: Dashboard) -> None:
    dash.views.iter_src.selected.indices = [4, 5, 6]  # as BokehJS reports a box selection
    assert dash.range_slider.value == (4, 6)
    assert (dash.views.range_box.left, dash.views.range_box.right) == (3.5, 6.5)


def test_key_node_change_rebuilds_iterations(dash: Dashboard, profile: Profile) -> None:
    dash.set_range(2, 5)
    dash.key_node_box.value = "/model/conv1/conv2d"  # typed or picked in the combobox
    assert profile.key_node == "/model/conv1/conv2d"
    assert dash.range_slider.value == (0, STEPS) and dash.range_slider.max == STEPS
    ends = np.sort(profile.trace.nvtx.query("text == '/model/conv1/conv2d'")["end_ns"])
    np.testing.assert_allclose(
        np.cumsum(dash.views.iter_src.data["duration_ms"])[:-1],
        _ms(ends - profile.correlated.t_first_ns),
    )
    dash.set_key_node(None)
    assert profile.key_node == "optimizer_step"


def test_bad_key_node_is_reported_not_raised(dash: Dashboard, profile: Profile) -> None:
    dash.key_node_box.value = "no_such_range"
    assert "not an op name or op ID" in dash.status.value
    assert profile.key_node == "optimizer_step"
    assert len(dash.views.iter_src.data["iteration"]) == STEPS + 1


def test_tree_selection_filters_kernels_and_highlights_ops(dash: Dashboard) -> None:
    v = dash.views
    paths = list(v.tree_src.data["path"])
    v.tree_src.selected.indices = [paths.index("/model/relu1")]
    assert list(v.kernel_src.data["kernel"]) == ["vectorized_elementwise_kernel"]
    assert "/model/relu1" in v.kernel_title.text
    lit = np.asarray(v.gpu_src.data["alpha"]) > 0.5
    assert set(v.gpu_op[lit]) == {"/model/relu1/relu"}
    v.tree_src.selected.indices = []
    assert len(v.kernel_src.data["kernel"]) == 3
    assert (np.asarray(v.gpu_src.data["alpha"]) > 0.5).all()


def test_hint_action_sets_the_suggested_range(dash: Dashboard) -> None:
    found = data.hints(dash.profile, 0, STEPS)
    lo, hi = next(h["action"]["set_range"] for h in found if h["action"])
    buttons = [
        c
        for row in dash.hints_box.children
        for c in row.children
        if getattr(c, "description", "").startswith("use suggested range")
    ]
    assert len(buttons) == 1
    buttons[0].click()
    assert dash.range_slider.value == (lo, hi)
    assert not any(
        getattr(c, "description", "").startswith("use suggested range")
        for row in dash.hints_box.children
        for c in row.children
    )


def test_hint_rows_are_updated_in_place_not_recreated(dash: Dashboard) -> None:
    """A range change that changes the findings updates the rows' widgets (new widgets cost
    the page a view each); a reused button acts on the hint it now shows."""
    first = [row.model_id for row in dash.hints_box.children]
    found = data.hints(dash.profile, 0, STEPS)
    lo, hi = next(h["action"]["set_range"] for h in found if h["action"])
    dash.set_range(lo, hi)
    shown = [getattr(c, "description", "") for row in dash.hints_box.children for c in row.children]
    assert not [d for d in shown if d.startswith("use suggested range")]
    dash.set_range(0, STEPS)
    assert [row.model_id for row in dash.hints_box.children] == first
    [button] = [
        c
        for row in dash.hints_box.children
        for c in row.children
        if getattr(c, "description", "").startswith("use suggested range")
    ]
    button.click()
    assert dash.range_slider.value == (lo, hi)


def test_level_of_detail_caps_the_glyphs(profile: Profile) -> None:
    dash = Dashboard(profile, max_kernel_glyphs=8)
    n = len(dash.views.gpu_src.data["left"])
    assert 0 < n <= 8 and sum(dash.views.gpu_src.data["count"]) == 3 * STEPS
    assert "merged into time bins" in dash.views.lod_text
    # shown in the status line (a Bokeh Div's change would re-layout the page's document)
    assert f"{3 * STEPS:,} GPU activities shown as {n:,} bars" in dash.status.value


def test_display_is_the_widget_then_its_static_html(
    dash: Dashboard, profile: Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    import IPython.display

    shown: list[dict] = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append(obj))
    dash._ipython_display_()
    widget = [o for o in shown if "application/vnd.jupyter.widget-view+json" in o]
    static = [o for o in shown if "jlprof-static" in o.get("text/html", "")]
    assert len(widget) == 1 and len(static) == 1
    bundle = widget[0]
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == dash.model_id
    assert bundle["text/plain"] == repr(profile)
    assert "text/html" not in bundle  # JupyterLab would never show it (see static.py)
    # the static rendering went out right after the widget, as an output of its own
    assert shown.index(static[0]) == shown.index(bundle) + 1
    html = static[0]["text/html"]
    assert "Static jlprof dashboard" in html and "Bokeh.embed.embed_items" in html
    assert "Iterations found" in html and "optimizer_step" in html


def test_domain_filter_recorrelates(tmp_path: Path) -> None:
    from tests.fixtures.scenarios import rich_db

    p = jlprof.load(rich_db().write(tmp_path / "rich.sqlite"), key_node="global_step")
    dash = p.dashboard()
    assert set(dash.domain_box.options) >= {"(all domains)", "Forward", "Lib"}
    n_ranges = len(dash.views.nvtx_src.data["name"])
    dash.domain_box.value = "Lib"
    assert dash.profile is not p and dash.profile.domains == ["Lib"]
    assert "global_step" in dash.status_text  # not in Lib: the default key node is used
    assert len(dash.views.nvtx_src.data["name"]) < n_ranges
    lookup = np.asarray(dash.views.names.src.data["name"], dtype=object)
    assert set(lookup[dash.views.nvtx_src.data["name"]]) <= set(
        p.trace.nvtx.loc[p.trace.nvtx["domain"] == "Lib", "text"].astype(str)
    )


@pytest.mark.parametrize("path", real_traces(), ids=lambda p: p.parent.name)
def test_dashboard_on_every_real_trace(path: Path) -> None:
    p = jlprof.load(path)
    dash = p.dashboard()
    v = dash.views
    lo, hi = p.iter_start, p.iter_stop
    assert "updated in" in dash.status_text
    assert len(v.tree_src.data["path"]) == len(p.report("group_node", lo, hi))
    assert sum(v.gpu_src.data["count"]) == len(p.report("iteration", lo, hi))
    assert len(v.gpu_src.data["left"]) <= data.MAX_KERNEL_GLYPHS
    assert len(v.kernel_src.data["kernel"]) == len(p.report("kernel", lo, hi))
    assert list(v.tc_src.data["op"])[::-1] == list(
        p.report("tensor", lo, hi)["Op ID"].astype(str).head(15)
    )


def test_empty_views_say_why_they_are_empty(tmp_path: Path) -> None:
    """A capture without GPU work (no CUDA here): the kernel views name the reason."""
    p = jlprof.load(cpu_only_db().write(tmp_path / "cpu.sqlite"), key_node=KEY_NODE)
    assert data.why_no_kernels(p) == data.NO_KERNELS
    v = p.dashboard().views
    assert len(v.kernel_src.data["kernel"]) == 0 and len(v.tc_src.data["op"]) == 0
    assert v.kernel_title.text.endswith(f"none — {data.NO_KERNELS}")
    assert v.tc_ops.factors == [data.NO_KERNELS] and not v.tc_fig.xaxis[0].visible
    html = static_html(p)  # no live kernel: the saved notebook says it too
    assert "no GPU kernels in this capture" in html  # in the chart (JSON-escaped dash)


def test_a_selection_without_kernels_says_so(dash: Dashboard, profile: Profile) -> None:
    assert data.why_no_kernels(profile) == ""
    v = dash.views
    assert v.tc_fig.xaxis[0].visible and "rows" in v.kernel_title.text
    v.update_kernels(data.kernels(profile, 0, STEPS).head(0), None)
    v.update_tc(data.tensor_core(profile, 0, STEPS).head(0))
    assert v.kernel_title.text.endswith("none — no kernels in the selected iterations")
    assert v.tc_ops.factors == ["no Tensor Core eligible ops in the selected iterations"]
    assert not v.tc_fig.xaxis[0].visible
