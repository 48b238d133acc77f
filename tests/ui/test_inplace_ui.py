"""In-place mode in a real JupyterLab (headless Chromium): ``%dlprof enable`` ends the kernel,
the server extension's provisioner starts it again under ``nsys launch``, and a ``%%dlprof``
cell run in the notebook's own kernel shows the dashboard, whose cards hold the engine's numbers
for the run folder's profile and whose range slider re-aggregates (as in test_dashboard.py)."""

from __future__ import annotations

import shutil
import sqlite3
from typing import Any

import pytest

import jlprof
from jlprof import runs
from jlprof.nsys import session as nsys_session
from tests.ui.conftest import write_notebook
from tests.ui.lab import DASHBOARD, LabServer, open_notebook, screenshot, wait_idle

STEPS = 8
PATH = "inplace/profile_in_place.ipynb"
CELLS = [
    "%load_ext jlprof\n%dlprof enable",
    "%load_ext jlprof\n%dlprof kernel status",
    "import time\n\nimport nvtx\n\n\n"
    "def step():\n"
    '    with nvtx.annotate("train_step"), nvtx.annotate("optimizer_step"):\n'
    "        time.sleep(0.005)",
    f"%%dlprof --key_node=optimizer_step\nfor i in range({STEPS}):\n    step()",
]

# the notebook's kernel, connected and idle (JupyterLab's own session model)
KERNEL_IDLE = """() => {
    const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const k = w && w.sessionContext && w.sessionContext.session
        && w.sessionContext.session.kernel;
    return !!k && k.connectionStatus === 'connected' && k.status === 'idle';
}"""
# run cells from index i on with JupyterLab's commands (run-cell, or run-all-below)
RUN_FROM = """([i, command]) => {
    const app = window.jupyterapp;
    const w = app.shell.currentWidget;
    app.shell.activateById(w.id);
    w.content.activate();
    w.content.activeCellIndex = i;
    return app.commands.execute(command);
}"""
# what the shown notebook's dashboard shows (tests/ui/lab.py DASHBOARD)
SHOWN = f"""() => ({DASHBOARD})(
    document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jlprof-dashboard'))"""


def _dismiss_dialogs(page: Any) -> None:
    """JupyterLab's "Kernel Restarting" dialog (the kernel ended itself) and news toasts."""
    for sel in (".jp-Dialog .jp-mod-accept", ".jp-Notification-Toast-close"):
        found = page.locator(sel)
        if found.count():
            found.first.click()


def _cell_text(page: Any, index: int) -> str:
    return page.evaluate(
        """(i) => window.jupyterapp.shell.currentWidget.content.widgets[i]
                    .node.querySelector('.jp-Cell-outputWrapper').innerText""",
        index,
    )


@pytest.fixture
def inplace_lab(lab_server: LabServer, page: Any):
    if shutil.which("nsys") is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH")
    write_notebook(lab_server.root, PATH, CELLS)
    yield lab_server
    screenshot(page, "inplace-last")  # before the page is left (the page fixture's is blank)
    page.goto("about:blank")
    status, kernels = lab_server.api("api/kernels")
    for k in kernels if status == 200 else []:
        lab_server.api(f"api/kernels/{k['id']}", method="DELETE")
    shutil.rmtree(lab_server.root / "inplace", ignore_errors=True)
    lab_server.api("lab/api/workspaces/default", method="DELETE")


def test_enable_then_profile_in_place_shows_the_dashboard(inplace_lab: LabServer, page) -> None:
    lab = inplace_lab
    open_notebook(page, lab, PATH)
    # this notebook's kernel (the session-wide server may hold other tests' kernels)
    status, sessions = lab.api("api/sessions")
    kernels = [s["kernel"] for s in sessions if s.get("path") == PATH] if status == 200 else []
    assert len(kernels) == 1, sessions
    name = nsys_session.session_name(kernels[0]["id"])
    assert nsys_session.agent_pids(name) == []  # a plain kernel so far

    page.evaluate(RUN_FROM, [0, "notebook:run-cell"])
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.content.widgets[0]"
        ".node.innerText.includes('restarting this kernel under nsys launch')",
        timeout=60_000,
    )
    # the kernel ends itself; the server restarts it through jlprof's provisioner, under nsys
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
        " !== 'idle'",
        timeout=30_000,
    )
    _dismiss_dialogs(page)
    page.wait_for_function(KERNEL_IDLE, timeout=120_000)
    _dismiss_dialogs(page)
    assert nsys_session.agent_pids(name), "the restarted kernel runs under nsys launch"

    page.evaluate(RUN_FROM, [1, "notebook:run-all-below"])
    try:
        page.wait_for_function(
            f"""() => {{ const s = ({SHOWN})();
                return !!s && 'Iterations found' in s.cards && s.canvases >= 3
                    && s.text.includes('updated in'); }}""",
            timeout=180_000,
        )
    except Exception as exc:
        outputs = [_cell_text(page, i) for i in range(len(CELLS))]
        raise AssertionError(f"no dashboard: {exc}\n{outputs}\n{page.evaluate(SHOWN)}") from None
    wait_idle(page, 60_000)
    _dismiss_dialogs(page)
    status_text = _cell_text(page, 1)
    assert f"nsys session {name}" in status_text and "Launched" in status_text, status_text
    assert "jlprof: profile ok" in _cell_text(page, 3)

    # the numbers shown: the engine's for the run folder's profile, and raw SQL's
    [folder] = runs.list_runs(lab.root / "inplace")
    assert runs.read_manifest(folder)["status"] == "ok"
    db = folder / "nsys_profile.sqlite"
    p = jlprof.load(str(db), key_node="optimizer_step")
    names = (
        "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id "
        "WHERE coalesce(e.text, s.value)"
    )
    with sqlite3.connect(db) as con:
        ends = [r[0] for r in con.execute(f"SELECT e.end {names} = 'optimizer_step' ORDER BY 1")]
        ranges = con.execute(f"SELECT count(*) {names} IN ('train_step', 'optimizer_step')")
        ranges = ranges.fetchone()[0]
    assert len(ends) == STEPS and ranges == 2 * STEPS  # the whole loop, in the capture
    shown = page.evaluate(SHOWN)
    cards, head = shown["cards"], p.headline()
    n = STEPS + 1  # the key nodes cut STEPS + 1 intervals; the first and last are partial
    assert (
        cards["Iterations found"]
        == [str(n), "key node optimizer_step"]
        == [str(head["iterations"]), f"key node {head['key_node']}"]
    )
    assert cards["GPU utilization"][0] == cards["Tensor Core utilization"][0] == "0.0 %"
    mean, note = cards["Iteration time"]
    # complete iterations: from one optimizer_step's end to the next one's (guide ch. 7)
    by_sql = (ends[-1] - ends[0]) / (STEPS - 1) / 1e6
    got = float(mean.split(" ± ")[0])
    assert abs(got - by_sql) < 0.0015, (mean, by_sql)
    assert mean.startswith(f"{head['avg_iter_ns'] / 1e6:.3f} ± ")
    assert (
        note
        == f"mean ± std over {n - 2} complete iteration(s); partial interval 0 and {n - 1} left out"
    )
    assert f"GPU timeline: 0 GPU activities, {2 * STEPS} NVTX ranges" in shown["text"]
    page.set_viewport_size({"width": 1400, "height": 2300})
    screenshot(page, "inplace-dashboard-initial")

    # the range slider re-aggregates in the (in-place) kernel, as in the sidecar's dashboard
    handle = page.locator(".jlprof-dashboard .widget-slider .noUi-handle-lower")
    handle.focus()
    for _ in range(2):
        page.keyboard.press("ArrowRight")
    page.wait_for_function(
        f"() => document.querySelector('.jlprof-dashboard').innerText"
        f".includes('iterations 2..{n - 1}')",
        timeout=30_000,
    )
    page.wait_for_function(
        "() => document.querySelector('.jlprof-dashboard .jlprof-cards').innerText"
        f".includes('over {n - 3} complete iteration(s); partial interval {n - 1} left out')",
        timeout=30_000,
    )
    # intervals 2..n-2: from the 2nd key node's end to the last one's
    mean = page.evaluate(SHOWN)["cards"]["Iteration time"][0]
    by_sql = (ends[-1] - ends[1]) / (STEPS - 2) / 1e6
    assert abs(float(mean.split(" ± ")[0]) - by_sql) < 0.0015, (mean, by_sql)
    screenshot(page, "inplace-dashboard-range")
