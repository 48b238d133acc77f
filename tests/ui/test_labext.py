"""The jlprof JupyterLab extension in a real JupyterLab (headless Chromium).

Asserts on what the extension does: the %%dlprof header it inserts (from its settings), that
the cell is run, the Profiles sidebar's entries (numbers from a real Profile.headline()), its
paging and refresh, and the notebook it creates to reopen a profile, which the real %dlprof runs
and whose output shows the profile's reports: the dashboard's cards and kernel table, checked
against the engine's figures computed here. Waits are on explicit states (the notebook's own
models, the dashboard's drawn rows), never on sleeps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

import jlprof
from tests.server.profiles import make_run, nsys_export_bytes
from tests.ui.conftest import write_notebook
from tests.ui.lab import ARTIFACTS, DASHBOARD, DEEP, LabServer, open_notebook, screenshot, wait_idle

SETTINGS = "lab/api/settings/jlprof:plugin"
NOTIFICATIONS = "lab/api/settings/@jupyterlab/apputils-extension:notification"
RUN_ID = "20261123-180000-ab12"


def cell_source(page: Any, index: int = 0) -> str:
    return page.evaluate(
        """(i) => window.jupyterapp.shell.currentWidget.content.widgets[i]
                     .model.sharedModel.getSource()""",
        index,
    )


def set_settings(lab: LabServer, **values: Any) -> None:
    status, body = lab.api(SETTINGS, method="PUT", body={"raw": json.dumps(values)})
    assert status == 204, body


@pytest.fixture
def header_settings(lab_server: LabServer):
    set_settings(lab_server, keyNode="train_step", reports="summary, kernel")
    yield
    set_settings(lab_server)


@pytest.fixture(autouse=True)
def quiet_lab(lab_server: LabServer, page: Any, request: pytest.FixtureRequest):
    """A clean lab for each test, no "Jupyter news?" toast; console and server log kept.

    Clean: no kernels left running by earlier tests and no saved layout to restore their
    notebooks from (the previous test's page is closed by now). The logs go beside the
    screenshots (``test-artifacts/ui/<test>.console.log`` and ``.server.log``): what a flaky
    run leaves behind to find its cause.
    """
    status, sessions = lab_server.api("api/sessions")
    for sess in sessions if status == 200 else []:
        lab_server.api(f"api/sessions/{sess['id']}", method="DELETE")
    lab_server.api("lab/api/workspaces/default", method="DELETE")
    news_off = {"raw": json.dumps({"fetchNews": "false"})}
    status, body = lab_server.api(NOTIFICATIONS, method="PUT", body=news_off)
    assert status == 204, body
    lines: list[str] = []
    page.on("console", lambda m: lines.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: lines.append(f"pageerror: {e}"))
    yield
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{request.node.name}.console.log").write_text("\n".join(lines) + "\n")
    (ARTIFACTS / f"{request.node.name}.server.log").write_text(lab_server.log_tail(400) + "\n")


def open_in_jlprof(page: Any, file_type: str) -> None:
    """File browser, labext/traces/: select the file of ``file_type``, then "Open in jlprof"."""
    page.evaluate(
        "() => window.jupyterapp.commands.execute('filebrowser:go-to-path', "
        "{path: 'labext/traces/'})"
    )
    item = page.locator(f'.jp-DirListing-item[data-file-type="{file_type}"]')
    item.click()  # selected first: the command opens the file browser's selection
    page.wait_for_selector(f'.jp-DirListing-item.jp-mod-selected[data-file-type="{file_type}"]')
    item.click(button="right")
    page.locator(".lm-Menu-item", has_text="Open in jlprof").click()


def opened_shows_t_reports(page: Any, lab_server: LabServer, traces: Path, nb: str) -> None:
    """The notebook "Open in jlprof" made for traces/t opens, runs and shows t's reports."""
    wait_notebook_open(page, nb)
    assert _notebook_sources(lab_server, nb) == ["%load_ext jlprof", "%dlprof --database t.sqlite"]
    wait_ran(page, nb)
    assert_shows_reports(shown_reports(page, nb), expected_reports(traces / "t.sqlite"))


def test_profile_cell_commands(lab_server: LabServer, page: Any, header_settings: None) -> None:
    write_notebook(lab_server.root, "labext/cmd.ipynb", ["print(6 * 7)"])
    open_notebook(page, lab_server, "labext/cmd.ipynb")
    focus_notebook(page, "labext/cmd.ipynb")
    header = "%%dlprof --key_node=train_step --reports=summary,kernel"
    # other tests' notebooks may be restored in hidden tabs: only the visible one counts
    cell = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell").first
    cell.locator(".jp-InputArea-prompt").click()
    assert page.evaluate("() => window.jupyterapp.shell.currentWidget.context.path") == (
        "labext/cmd.ipynb"
    )

    # the cell toolbar button toggles the header (options from the settings) on and off
    button = cell.locator('.jp-cell-toolbar [data-command="jlprof:toggle-header"]')
    button.click()
    assert cell_source(page) == f"{header}\nprint(6 * 7)"
    screenshot(page, "labext-header-inserted")
    button.click()
    assert cell_source(page) == "print(6 * 7)"

    # the keyboard shortcut does the same (command mode)
    cell.locator(".jp-InputArea-prompt").click()
    page.keyboard.press("Alt+p")
    assert cell_source(page) == f"{header}\nprint(6 * 7)"
    page.keyboard.press("Alt+p")
    assert cell_source(page) == "print(6 * 7)"

    # context menu: "Profile and Run" adds the header and runs the cell
    assert cell.locator(".jp-InputPrompt").inner_text().strip() in ("[ ]:", "[ ]")
    cell.locator(".jp-InputArea-editor").click(button="right")
    page.locator(".lm-Menu-item", has_text="Profile and Run This Cell").click()
    page.wait_for_function(
        """() => /\\[\\d+\\]/.test(document.querySelector(
            '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt').textContent)"""
    )
    wait_idle(page)
    assert cell_source(page) == f"{header}\nprint(6 * 7)"
    # the kernel really ran it: an execution count and an output (whatever %%dlprof prints)
    assert cell.locator(".jp-OutputArea-output").count() >= 1
    screenshot(page, "labext-profile-and-run")

    # the command palette lists the commands
    page.keyboard.press("Control+Shift+c")
    page.locator(".lm-CommandPalette-input").fill("dlprof")
    labels = page.locator(".lm-CommandPalette-itemLabel").all_inner_texts()
    assert any("Toggle %%dlprof" in t for t in labels), labels
    assert any("Profile and Run" in t for t in labels), labels
    page.keyboard.press("Escape")


def _run_folder(root: Path, tmp: Path) -> tuple[Path, dict[str, Any]]:
    """A run folder like the magic's, its manifest numbers from the engine itself."""
    export = nsys_export_bytes(tmp)
    db = tmp / "nsys_profile.sqlite"
    db.write_bytes(export)
    head = jlprof.load(str(db)).headline()
    numbers = {k: head[k] for k in ("iterations", "wall_ns", "gpu_util_pct", "tc_util_pct")}
    numbers["avg_iter_ns"] = head["avg_iter_ns"]
    folder = make_run(root / "labext", RUN_ID, export, key_node=head["key_node"], **numbers)
    return folder, numbers


def _ns(ns: float) -> str:
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if abs(ns) >= scale:
            return f"{ns / scale:.2f} {unit}"
    return f"{round(ns)} ns"


def wait_notebook_open(page: Any, path: str) -> None:
    """Wait until ``path`` is open with its cells on the page, then make it the current notebook.

    Fails on an error dialog: the extension once created the notebook as Untitled.ipynb and
    renamed it, and a file browser listing that folder meanwhile got a 404 from the server (a
    file vanished during the listing) and showed "Directory not found", taking the focus.
    """
    page.wait_for_function(
        """(p) => {
            for (const w of window.jupyterapp.shell.widgets('main')) {
                if (w.context && w.context.path === p && w.content.widgets.length > 0) return true;
            }
            return false;
        }""",
        arg=path,
    )
    dialog = page.locator(".jp-Dialog")
    assert not dialog.count(), dialog.first.inner_text()
    page.evaluate(
        "(p) => window.jupyterapp.commands.execute('docmanager:open', {path: p}).then(() => 0)",
        path,
    )
    page.wait_for_function(
        """(p) => {
            const w = window.jupyterapp.shell.currentWidget;
            return w && w.context && w.context.path === p && w.content.widgets.length > 0;
        }""",
        arg=path,
    )


def focus_notebook(page: Any, path: str) -> None:
    """Make ``path`` the current notebook (the restored workspace may bring others to front)."""
    page.evaluate(
        "(p) => window.jupyterapp.commands.execute('docmanager:open', {path: p}).then(() => 0)",
        path,
    )
    wait_notebook_open(page, path)
    page.wait_for_function(
        """() => {
            const k = window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel;
            return !!k && k.connectionStatus === 'connected' && k.status === 'idle';
        }"""
    )


def wait_ran(page: Any, path: str, timeout_ms: int = 120_000) -> None:
    """Wait until every code cell of the open notebook ``path`` has run and its kernel is idle.

    Read from that notebook's own models, not from the DOM: the page holds one execution
    indicator and one set of prompts per open notebook, and the first in the document may
    belong to another (idle) notebook.
    """
    page.wait_for_function(
        """(p) => {
            for (const w of window.jupyterapp.shell.widgets('main')) {
                if (!(w.context && w.context.path === p)) continue;
                const k = w.sessionContext.session?.kernel;
                const cells = w.content.widgets.filter(c => c.model.type === 'code');
                return !!k && k.status === 'idle' && cells.length > 0 && cells.every(
                    c => c.model.executionCount !== null && c.model.executionState !== 'running');
            }
            return false;
        }""",
        arg=path,
        timeout=timeout_ms,
    )


# the panel of an open notebook
PANEL = """(p) => window.jupyterapp.shell.widgets('main').find(
    w => w.context && w.context.path === p).node"""
# what notebook p's dashboard shows (tests/ui/lab.py DASHBOARD)
SHOWN = f"""(p) => {{
    const node = ({PANEL})(p);
    return ({DASHBOARD})(node && node.querySelector('.jlprof-dashboard'));
}}"""


def shown_reports(page: Any, path: str, timeout_ms: int = 120_000) -> dict[str, Any]:
    """What notebook ``path``'s output shows of the profile, once the dashboard has drawn.

    Waits for the cards (an ipywidgets HTML) and for the Bokeh kernel table's title and rows:
    the table is drawn last, after BokehJS (inlined in the output) has loaded.
    """
    page.wait_for_function(
        f"""(p) => {{
            const s = ({SHOWN})(p);
            return !!s && 'Iterations found' in s.cards && !!s.kernel_title
                && s.rows.length > 0;
        }}""",
        arg=path,
        timeout=timeout_ms,
    )
    return page.evaluate(SHOWN, path)


def screenshot_kernels(page: Any, path: str, name: str) -> None:
    """Screenshot with the kernel table scrolled into view (the notebook scrolls inside)."""
    page.evaluate(
        f"""(p) => ({DEEP})(({PANEL})(p), '.slick-row')
            .filter(r => /^(yes|no)$/.test(r.lastElementChild.innerText.trim()))[0]
            .scrollIntoView({{block: 'center'}})""",
        path,
    )
    screenshot(page, name)


def expected_reports(db: Path) -> dict[str, Any]:
    """The same figures computed here by the engine: headline numbers and the kernel report."""
    p = jlprof.load(str(db))
    head = p.headline()
    lo, hi = head["range"]
    kernels = p.report("kernel")
    rows = [
        [
            str(r["Kernel Name"]),
            str(round(r["Total GPU Time (ns)"] / r["Avg. GPU Time (ns)"])),
            f"{r['Avg. GPU Time (ns)'] / 1e3:,.3f}",
            "yes" if r["Uses TC"] else "no",
        ]
        for _, r in kernels.iterrows()
    ]
    # the partial intervals (before the first key node, after the last: a key node splits the
    # profile into 3 or more) are left out of mean ± std, unless nothing else is in the range
    n = p.iterations.count
    partial = [i for i in (0, n - 1) if n >= 3 and lo <= i <= hi]
    partial = partial if hi - lo + 1 > len(partial) else []
    return {"head": head, "aggregated": hi - lo + 1, "partial": partial, "kernel_rows": rows}


def assert_shows_reports(shown: dict[str, Any], want: dict[str, Any]) -> None:
    """The dashboard's cards and kernel table hold the engine's numbers for the profile."""
    head, cards = want["head"], shown["cards"]
    assert cards["Iterations found"] == [str(head["iterations"]), f"key node {head['key_node']}"]
    assert cards["GPU utilization"][0] == f"{head['gpu_util_pct']:.1f} %"
    assert cards["Tensor Core utilization"][0] == f"{head['tc_util_pct']:.1f} %"
    mean, note = cards["Iteration time"]
    assert re.fullmatch(rf"{head['avg_iter_ns'] / 1e6:.3f} ± \d+\.\d{{3}} ms", mean), mean
    part = want["partial"]
    if part:
        which = " and ".join(map(str, part))
        assert note == (
            f"mean ± std over {want['aggregated'] - len(part)} complete iteration(s); "
            f"partial interval {which} left out"
        )
    else:
        assert note == f"mean ± std over {want['aggregated']} iteration(s)"
    rows = want["kernel_rows"]
    assert shown["kernel_title"] == f"Kernels (all ops): {len(rows)} rows"
    # the table draws only the rows in its viewport (about nine of them): the first ones
    got = [[r[0], r[2], r[4], r[5]] for r in shown["rows"]]
    assert len(got) >= min(5, len(rows)), got
    assert got == rows[: len(got)], (got, rows)


def _notebook_sources(lab: LabServer, path: str) -> list[str]:
    status, body = lab.api(f"api/contents/{path}")
    assert status == 200, body
    return [
        "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        for c in body["content"]["cells"]
    ]


def test_sidebar_lists_and_opens_profiles(lab_server: LabServer, page: Any, tmp_path: Path) -> None:
    folder, numbers = _run_folder(lab_server.root, tmp_path)
    traces = lab_server.root / "labext" / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    (traces / "t.nsys-rep").write_bytes(b"nsys report bytes")
    (traces / "t.sqlite").write_bytes(nsys_export_bytes(tmp_path))
    os.utime(folder / "jlprof_run.json")  # newest: first in the list

    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(lab_server.lab_url(), wait_until="domcontentloaded")
    page.locator('.jp-SideBar [data-id="jlprof-profiles"]').click()
    item = page.locator(f'.jlprof-ProfileItem[data-path="labext/jlprof_runs/{RUN_ID}"]')
    item.wait_for()
    expected = (
        f"{numbers['iterations']} iter · {_ns(numbers['avg_iter_ns'])}/iter · "
        f"wall {_ns(numbers['wall_ns'])} · GPU {numbers['gpu_util_pct']:.1f}% · "
        f"TC {numbers['tc_util_pct']:.1f}%"
    )
    assert item.locator(".jlprof-ProfileItem-headline").inner_text() == expected
    size = sum(f.stat().st_size for f in folder.iterdir())
    assert f"{size / 1024:.1f} KiB" in item.locator(".jlprof-ProfileItem-meta").inner_text()
    assert "2026-11-23 18:00 UTC" in item.locator(".jlprof-ProfileItem-meta").inner_text()
    raw = page.locator('.jlprof-ProfileItem[data-path="labext/traces/t.nsys-rep"]')
    assert "nsys-rep" in raw.locator(".jlprof-ProfileItem-kind").inner_text()
    screenshot(page, "labext-sidebar")

    # Open: a new notebook beside the profiled one that reanalyses the run's export
    item.locator(".jlprof-ProfileItem-open").click()
    nb_path = "labext/profile-nsys_profile.ipynb"
    wait_notebook_open(page, nb_path)
    assert _notebook_sources(lab_server, nb_path) == [
        "%load_ext jlprof",
        f"%dlprof --database jlprof_runs/{RUN_ID}/nsys_profile.sqlite",
    ]
    # ... which runs (runOnOpen): the real %dlprof re-analyses the export and the output
    # shows the profile's reports with the same numbers as the engine computes here
    wait_ran(page, nb_path)
    want = expected_reports(folder / "nsys_profile.sqlite")
    assert_shows_reports(shown_reports(page, nb_path), want)
    screenshot(page, "labext-opened-profile")
    screenshot_kernels(page, nb_path, "labext-opened-profile-kernels")

    # file browser: "Open in jlprof" on a .nsys-rep opens its export the same way
    open_in_jlprof(page, "jlprof-nsys-rep")
    nb2 = "labext/traces/profile-t.ipynb"
    opened_shows_t_reports(page, lab_server, traces, nb2)
    screenshot(page, "labext-open-from-file-browser")
    screenshot_kernels(page, nb2, "labext-open-from-file-browser-kernels")

    # "Insert in current notebook" adds the cells below the active one, path relative to it
    # (after the opened notebook has run: runOnOpen moves the active cell)
    page.evaluate("() => { window.jupyterapp.shell.currentWidget.content.activeCellIndex = 0; }")
    page.locator('.jp-SideBar [data-id="jlprof-profiles"]').click()
    item.locator(".jlprof-ProfileItem-insert").click()
    sources = page.evaluate(
        """() => window.jupyterapp.shell.currentWidget.content.widgets
                     .map(c => c.model.sharedModel.getSource())"""
    )
    assert sources == [
        "%load_ext jlprof",
        "%load_ext jlprof",
        f"%dlprof --database ../jlprof_runs/{RUN_ID}/nsys_profile.sqlite",
        "%dlprof --database t.sqlite",
    ], sources
    screenshot(page, "labext-inserted-cells")

    # ... and on an nsys .sqlite; profile-t.ipynb exists now: the new one is numbered
    open_in_jlprof(page, "jlprof-nsys-sqlite")
    nb3 = "labext/traces/profile-t-2.ipynb"
    opened_shows_t_reports(page, lab_server, traces, nb3)
    screenshot_kernels(page, nb3, "labext-open-sqlite-from-file-browser-kernels")

    # what jupyterlab.browser_check looks for (it would download a browser, so not run here)
    assert page.evaluate("() => window.jupyterapp.isPluginActivated('jlprof:plugin')")
    assert not [e for e in errors if "jlprof" in e], errors
    assert not [e for e in errors if "Directory not found" in e], errors


@pytest.fixture
def no_run_on_open(lab_server: LabServer):
    set_settings(lab_server, runOnOpen=False)
    yield
    set_settings(lab_server)


def test_open_profile_keeps_notebooks_and_setting(
    lab_server: LabServer, page: Any, tmp_path: Path, no_run_on_open: None
) -> None:
    """Opening never overwrites a notebook of the same name, and runOnOpen=false is obeyed."""
    make_run(lab_server.root / "reopen", RUN_ID, nsys_export_bytes(tmp_path))
    mine = write_notebook(lab_server.root, "reopen/profile-nsys_profile.ipynb", ["print('mine')"])
    before = mine.read_bytes()
    status, entry = lab_server.api(f"jlprof/profile?path=reopen/jlprof_runs/{RUN_ID}")
    assert status == 200, entry
    page.goto(lab_server.lab_url(), wait_until="domcontentloaded")
    page.wait_for_function("() => !!window.jupyterapp")
    page.evaluate("() => window.jupyterapp.restored.then(() => 0)")  # settings loaded
    # the command resolves once the notebook is open, after running it when runOnOpen is set
    page.evaluate(
        """(e) => window.jupyterapp.commands.execute('jlprof:open-profile',
                      {database: e.database, openDir: e.open_dir}).then(() => 0)""",
        entry,
    )
    path = "reopen/profile-nsys_profile-2.ipynb"
    wait_notebook_open(page, path)
    assert _notebook_sources(lab_server, path) == [
        "%load_ext jlprof",
        f"%dlprof --database jlprof_runs/{RUN_ID}/nsys_profile.sqlite",
    ]
    counts = page.evaluate(
        """(p) => window.jupyterapp.shell.widgets('main').find(w => w.context?.path === p)
                     .content.widgets.map(c => c.model.executionCount)""",
        path,
    )
    assert counts == [None, None]
    assert mine.read_bytes() == before
    screenshot(page, "labext-open-not-run")


def test_sidebar_pages_and_refreshes(lab_server: LabServer, page: Any) -> None:
    """The sidebar shows the server's list 50 at a time ("More…"), and Refresh finds new files."""
    many = lab_server.root / "paged"
    many.mkdir()
    for i in range(60):
        (many / f"t{i:02d}.nsys-rep").write_bytes(b"nsys report bytes")
        os.utime(many / f"t{i:02d}.nsys-rep", (1_000_000 + i, 1_000_000 + i))
    status, body = lab_server.api("jlprof/profiles?limit=500")
    assert status == 200 and not body["truncated"], body
    total, paths = body["total"], [e["path"] for e in body["items"]]
    assert total == len(paths) > 60

    page.goto(lab_server.lab_url(), wait_until="domcontentloaded")
    page.locator('.jp-SideBar [data-id="jlprof-profiles"]').click()  # a clean layout: opens it
    items = page.locator(".jlprof-Sidebar .jlprof-ProfileItem")
    status_line = page.locator(".jlprof-Sidebar-status")
    more = page.locator(".jlprof-Sidebar-more")
    page.wait_for_function(
        "(n) => document.querySelector('.jlprof-Sidebar-status').innerText === `${n} profiles`",
        arg=total,
    )
    shown = [items.nth(i).get_attribute("data-path") for i in range(items.count())]
    assert shown == paths[:50]
    assert more.is_visible()
    screenshot(page, "labext-sidebar-page-1")
    more.click()
    page.wait_for_function(
        "(n) => document.querySelectorAll('.jlprof-Sidebar .jlprof-ProfileItem').length === n",
        arg=min(total, 100),
    )
    shown = [items.nth(i).get_attribute("data-path") for i in range(items.count())]
    assert shown == paths[:100]
    assert more.is_visible() == (total > 100)
    assert status_line.inner_text() == f"{total} profiles"

    # a new file, newest of all: Refresh lists it first, from the first page again
    (many / "new.nsys-rep").write_bytes(b"nsys report bytes")
    page.locator(".jlprof-Sidebar-refresh").click()
    page.wait_for_function(
        "(n) => document.querySelector('.jlprof-Sidebar-status').innerText === `${n} profiles`",
        arg=total + 1,
    )
    assert items.first.get_attribute("data-path") == "paged/new.nsys-rep"
    assert items.count() == 50


def test_open_vanished_profile_says_why(lab_server: LabServer, page: Any, tmp_path: Path) -> None:
    """A sidebar entry whose folder was deleted since it was listed: a clear error, no notebook."""
    make_run(lab_server.root / "gone", RUN_ID, nsys_export_bytes(tmp_path))
    page.goto(lab_server.lab_url(), wait_until="domcontentloaded")
    page.locator('.jp-SideBar [data-id="jlprof-profiles"]').click()  # a clean layout: opens it
    item = page.locator(f'.jlprof-ProfileItem[data-path="gone/jlprof_runs/{RUN_ID}"]')
    item.wait_for()
    shutil.rmtree(lab_server.root / "gone")
    item.locator(".jlprof-ProfileItem-open").click()
    toast = page.locator(".jp-Notification-Toast-error", has_text="jlprof:")
    toast.wait_for()
    text = toast.inner_text()
    assert text == "jlprof: the folder 'gone' no longer exists: refresh the Profiles sidebar"
    page.wait_for_function(  # slid in (for the screenshot)
        """() => { const r = document.querySelector('.jp-Notification-Toast-error')
                     .getBoundingClientRect(); return r.width > 0 && r.right <= innerWidth; }"""
    )
    screenshot(page, "labext-open-vanished-profile")
    assert not (lab_server.root / "gone").exists()
    assert (
        page.evaluate(
            "() => [...window.jupyterapp.shell.widgets('main')].filter(w => w.context).length"
        )
        == 0
    )


# the kernel's own word on whether it runs under nsys (not the extension's expression)
KERNEL_NSYS_SESSION = """async (p) => {
    const w = window.jupyterapp.shell.widgets('main').find(x => x.context && x.context.path === p);
    const k = w.sessionContext.session.kernel;
    const reply = await k.requestExecute({code: '', silent: true, store_history: false,
        user_expressions: {s: "__import__('os').environ.get('JLPROF_NSYS_SESSION', '')"}}).done;
    return reply.content.user_expressions.s.data['text/plain'];
}"""


@pytest.mark.nsys
@pytest.mark.slow
def test_in_place_mode_enables_then_profiles(lab_server: LabServer, page: Any) -> None:
    """Setting Mode=in-place: the profile command asks, restarts the kernel under nsys
    (%dlprof enable) and leaves the cell to run; the next one profiles in place, and the
    Profiles sidebar lists that run folder like a sidecar run."""
    if shutil.which("nsys") is None:
        pytest.skip("nsys is not on PATH")
    nb = "labext/inplace.ipynb"
    write_notebook(lab_server.root, nb, ["print(6 * 7)"])
    set_settings(lab_server, mode="in-place")
    try:
        open_notebook(page, lab_server, nb)
        focus_notebook(page, nb)
        assert page.evaluate(KERNEL_NSYS_SESSION, nb) == "''"
        before = {e["path"] for e in lab_server.api("jlprof/profiles?limit=500")[1]["items"]}
        run = "() => { window.jupyterapp.commands.execute('jlprof:profile-and-run'); return 0; }"
        page.evaluate(run)
        dialog = page.locator(".jp-Dialog", has_text="Restart the kernel under nsys?")
        dialog.wait_for()
        assert "variables are lost" in dialog.inner_text()
        screenshot(page, "labext-inplace-confirm")
        dialog.locator("button", has_text="Restart in Place").click()
        # once the kernel is back under nsys the header is added, the cell left to the user
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.content.widgets[0].model.sharedModel"
            ".getSource().startsWith('%%dlprof')",
            timeout=150_000,
        )
        assert cell_source(page) == "%%dlprof\nprint(6 * 7)"
        assert page.evaluate(KERNEL_NSYS_SESSION, nb).startswith("'jlprof-")
        page.locator(".jp-toast-message", has_text="the kernel runs in place").wait_for()
        page.keyboard.press("Escape")  # JupyterLab's own "kernel restarting" note, if shown
        # now in place: no question, the cell runs and is captured in this kernel
        page.evaluate(run)
        wait_ran(page, nb, timeout_ms=240_000)
        assert page.locator(".jp-Dialog", has_text="Restart the kernel").count() == 0
        out = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output")
        assert "42" in out.first.inner_text()
        status, body = lab_server.api("jlprof/profiles?limit=500")
        assert status == 200, body
        new = [e for e in body["items"] if e["path"] not in before]
        assert [e["kind"] for e in new] == ["run"], new
        assert new[0]["path"].startswith("labext/jlprof_runs/")
        folder = lab_server.root / new[0]["path"]
        assert (folder / "jlprof_run.json").is_file()
        # the sidebar shows it (the same list)
        page.locator('.jp-SideBar [data-id="jlprof-profiles"]').click()
        page.locator(".jlprof-Sidebar-refresh").click()
        page.locator(f'.jlprof-ProfileItem[data-path="{new[0]["path"]}"]').wait_for()
        screenshot(page, "labext-inplace-sidebar")
    finally:
        set_settings(lab_server)
