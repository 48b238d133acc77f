"""A displayed Profile in a real ipykernel: the dashboard widget plus text and static HTML,
and what a kernel-less viewer (nbconvert's HTML export) then shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.loops import small_training_export

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

WIDGET = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("display")
    path = small_training_export(tmp / "loop.sqlite", steps=6)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(f"import jlprof\np = jlprof.load({str(path)!r})\np"),
        nbformat.v4.new_code_cell("d = p.dashboard()\nd.set_range(1, 3)\nd.last_update_ms > 0"),
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    # JupyterLab saves no widget state by default: the saved notebook has the outputs only
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", store_widget_state=False
    )
    client.execute()
    return nb


def test_displayed_profile_is_the_dashboard_with_fallbacks(executed) -> None:
    outs = executed.cells[0].outputs
    widget = [o for o in outs if WIDGET in o.get("data", {})]
    assert len(widget) == 1, [list(o.get("data", {})) for o in outs]
    data = widget[0]["data"]
    assert data["text/plain"].startswith("<jlprof.Profile loop.sqlite: key node optimizer_step")
    # no text/html in the widget's bundle: JupyterLab would never show it (see static.py)
    assert set(data) == {WIDGET, "text/plain"}
    # the static rendering is the output just after the widget
    first = outs.index(widget[0])
    static = outs[first + 1]["data"]["text/html"]
    assert "Static jlprof dashboard" in static
    assert "Bokeh.embed.embed_items" in static  # the figures, standalone, embedded lazily
    assert "<script type='application/json' class='jlprof-static-js'>" in static
    assert "jupyter-widgets" in static  # the rule that hides a failed widget output
    # BokehJS was put on the page first (inline) so the live widget can render: the bundles
    # of its models (tables, widgets), not MathJax's nor WebGL's
    from bokeh.resources import INLINE, Resources

    loads = [str(o.get("data", {})) for o in outs[:first]]
    assert any("Bokeh" in s and "DataTable" in s for s in loads)
    assert not any("bokeh-gl" in s for s in loads)
    every = sum(len(js) for js in INLINE.js_raw)
    mathjax = sum(len(js) for js in Resources(mode="inline", components=["bokeh-mathjax"]).js_raw)
    # (the load output carries the JavaScript twice: for the classic notebook and for Lab)
    largest = max(len(str(v)) for o in outs[:first] for v in o.get("data", {}).values())
    assert largest < every - mathjax
    assert executed.cells[1].outputs[0]["data"]["text/plain"] == "True"


def test_static_scripts_cannot_end_their_tag_early(executed) -> None:
    """The inlined BokehJS and embedding script travel as JSON in one script tag: nothing in
    them may close it, and the JSON must give back the scripts."""
    import json
    import re

    static = next(
        o["data"]["text/html"]
        for o in executed.cells[0].outputs
        if "jlprof-static" in str(o.get("data", {}).get("text/html", ""))
    )
    m = re.search(r"<script type='application/json' class='jlprof-static-js'>(.*?)</script>",
                  static, re.S)  # fmt: skip
    assert m is not None
    bokehjs, embed = json.loads(m.group(1))
    assert "Bokeh" in bokehjs and len(bokehjs) > 500_000  # all of BokehJS, inline
    assert "embed_items" in embed


def test_nbconvert_html_shows_the_static_rendering(executed) -> None:
    from nbconvert import HTMLExporter

    page, _ = HTMLExporter().from_notebook_node(executed)
    assert "Static jlprof dashboard" in page
    assert "Iterations found" in page and "Bokeh.embed.embed_items" in page


def test_terminal_ipython_shows_text_only(tmp_path: Path, capsys) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    import jlprof

    p = jlprof.load(small_training_export(tmp_path / "loop.sqlite", steps=3))
    shell = InteractiveShell.instance()
    try:
        shell.user_ns["p"] = p
        shell.run_cell("from IPython.display import display; display(p)")
    finally:
        InteractiveShell.clear_instance()
    out = capsys.readouterr().out
    assert "<jlprof.Profile loop.sqlite: key node optimizer_step" in out
