"""Benchmark the dashboard in the browser: a real JupyterLab in headless Chromium, 1M kernels.

    python bench/bench_dashboard_browser.py [--export bench/out/big.sqlite] [--changes 8]

Opens a notebook that loads the export and displays ``p.dashboard()``, then measures in the
page (``performance.now()``):
  * initial render: running the display cell until every Bokeh canvas has been drawn;
  * range change: a key press on the range slider until the status line reports the new
    range AND BokehJS' own model of the views has the new range (the range box's edge: the
    views' patch is applied), then two animation frames (Bokeh redraws on the next frame).
    The status line carries the kernel-side time, so the browser-side share (comm
    transfer, patch decoding, layout, canvas drawing) is the difference.
Writes bench/out/dashboard_browser.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.trace_summary import CATEGORIES  # noqa: E402
from tests.ui.conftest import write_notebook  # noqa: E402
from tests.ui.lab import (  # noqa: E402
    BOKEH_VIEWS,
    CHROMIUM,
    CHROMIUM_ARGS,
    DEEP,
    open_notebook,
    start_lab,
    stop_lab,
)

FRAMES = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
# JavaScript: the status line reports iterations lo.. and every BokehJS range box starts at
# lo (the kernel sends the status just before the views' patch: both are needed; with the
# Viewer panels open, their two per-iteration charts' boxes come in the panels' patch)
UPDATED = f"""(lo) => {{
    if (!document.querySelector('.jlprof-dashboard').innerText.includes(`iterations ${{lo}}..`))
        return false;
    const boxes = ({BOKEH_VIEWS})().filter(  // the range boxes, not the select tool's overlay
        v => v.model.type === 'BoxAnnotation' && v.model.fill_color === '#ffd54f');
    return boxes.length > 0 && boxes.every(b => b.model.left === lo - 0.5);
}}"""

# JavaScript: as UPDATED, for the dashboard's views only (the iteration timeline's range box;
# with the Viewer panels open their patch follows the views' one)
VIEWS_UPDATED = f"""(lo) => {{
    if (!document.querySelector('.jlprof-dashboard').innerText.includes(`iterations ${{lo}}..`))
        return false;
    const box = ({BOKEH_VIEWS})().find(v => v.model.type === 'BoxAnnotation'
        && v.model.fill_color === '#ffd54f' && v.parent?.model?.title?.text?.startsWith?.('Iter'));
    return box !== undefined && box.model.left === lo - 0.5;
}}"""


def run_cell(page, index: int) -> None:
    page.evaluate(
        """(i) => {
            const nb = window.jupyterapp.shell.currentWidget.content;
            nb.activeCellIndex = i;
            return window.jupyterapp.commands.execute('notebook:run-cell');
        }""",
        index,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--export", type=Path, default=HERE / "out" / "big.sqlite")
    ap.add_argument("--changes", type=int, default=8)
    ap.add_argument(
        "--trace",
        action="store_true",
        help="also take a Chromium performance trace of the initial render and of one extra "
        "range change (bench/out/trace_*.json; summarise with bench/trace_summary.py)",
    )
    ap.add_argument(
        "--panels",
        action="store_true",
        help="with the Viewer panels' section open (p.dashboard(panels=True)): each range "
        "change then updates the panels too",
    )
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    (HERE / "out").mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="jlprof-bench-"))
    (tmp / "root").mkdir()
    lab = start_lab(tmp / "root", tmp / "lab.log")
    res: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        write_notebook(
            lab.root,
            "bench.ipynb",
            [
                f"import jlprof\np = jlprof.load({str(args.export.resolve())!r}, "
                "key_node='optimizer_step')\nimport jlprof.widgets.dashboard",
                f"d = p.dashboard(panels={args.panels})\nd",
            ],
        )
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            page = browser.new_context(viewport={"width": 1400, "height": 2300}).new_page()
            page.set_default_timeout(300_000)
            open_notebook(page, lab, "bench.ipynb")
            # first cell alone: load the profile (not part of the dashboard's render)
            page.wait_for_function(
                """() => {
                    const w = window.jupyterapp.shell.currentWidget;
                    const k = w.sessionContext.session && w.sessionContext.session.kernel;
                    return k && k.connectionStatus === 'connected' && k.status === 'idle';
                }"""
            )
            t = time.perf_counter()
            run_cell(page, 0)
            page.wait_for_function(
                "() => /\\[1\\]/.test(document.querySelectorAll('.jp-InputPrompt')[0].innerText)"
            )
            page.wait_for_function(
                "() => document.querySelector('.jp-Notebook-ExecutionIndicator')"
                ".getAttribute('data-status') === 'idle'"
            )
            res["load_cell_s"] = time.perf_counter() - t
            if args.trace:
                browser.start_tracing(page=page, categories=CATEGORIES)
            t0 = page.evaluate("() => performance.now()")
            run_cell(page, 1)
            page.wait_for_function(
                f"() => {{ const d = document.querySelector('.jlprof-dashboard');"
                f" return d && ({DEEP})(d, 'canvas').length >= 3 && "
                "d.innerText.includes('updated in'); }"
            )
            page.evaluate(FRAMES)
            res["initial_render_ms"] = page.evaluate("() => performance.now()") - t0
            if args.trace:
                (HERE / "out" / "trace_initial.json").write_bytes(browser.stop_tracing())
            # the range changes start once the display cell has finished (the kernel renders
            # the static copy after the widget is shown) and the page is idle: they measure
            # a range change, not the initial render's tail
            page.wait_for_function(
                "() => document.querySelector('.jp-Notebook-ExecutionIndicator')"
                ".getAttribute('data-status') === 'idle'"
            )
            page.evaluate("() => new Promise(r => requestIdleCallback(r, {timeout: 2000}))")
            handle = page.locator(".jlprof-dashboard .widget-slider .noUi-handle-lower")
            totals, kernel, views = [], [], []
            for i in range(args.changes):
                handle.focus()
                t0 = page.evaluate("() => performance.now()")
                page.keyboard.press("ArrowRight")
                page.wait_for_function(VIEWS_UPDATED, arg=i + 1, polling="raf")
                page.evaluate(FRAMES)
                views.append(page.evaluate("() => performance.now()") - t0)
                page.wait_for_function(UPDATED, arg=i + 1)
                page.evaluate(FRAMES)
                totals.append(page.evaluate("() => performance.now()") - t0)
                m = re.search(
                    r"updated in (\d+) ms", page.locator(".jlprof-dashboard").inner_text()
                )
                kernel.append(float(m.group(1)) if m else float("nan"))
            if args.trace:  # one more change, traced (not part of the figures above)
                handle.focus()
                browser.start_tracing(page=page, categories=CATEGORIES)
                time.sleep(1.0)  # the profiler's start-up (~170 ms of the page) outside the change
                page.keyboard.press("ArrowRight")
                page.wait_for_function(UPDATED, arg=args.changes + 1)
                page.evaluate(FRAMES)
                (HERE / "out" / "trace_range.json").write_bytes(browser.stop_tracing())
            page.screenshot(path=str(HERE / "out" / "dashboard_browser.png"), full_page=True)
            browser.close()
    finally:
        stop_lab(lab)
    browser_side = [t - k for t, k in zip(totals, kernel, strict=True)]
    res.update(
        {
            "range_change_total_ms": totals,
            "range_change_kernel_ms": kernel,
            "range_change_first_ms": totals[0],
            "range_change_total_median_ms": statistics.median(totals),
            "range_change_kernel_median_ms": statistics.median(kernel),
            "range_change_browser_median_ms": statistics.median(browser_side),
            "range_change_views_median_ms": statistics.median(views),
        }
    )
    (HERE / "out" / "dashboard_browser.json").write_text(json.dumps(res, indent=2))
    print("| measure (browser, headless Chromium) | value |")
    print("|---|---|")
    print(f"| load cell (jlprof.load + imports, context) | {res['load_cell_s']:.1f} s |")
    print(f"| initial render: run display cell → all canvases drawn | "
          f"{res['initial_render_ms'] / 1000:.2f} s |")  # fmt: skip
    print(f"| range change: key press → views redrawn (median of {args.changes}) | "
          f"{res['range_change_total_median_ms']:.0f} ms |")  # fmt: skip
    print(f"| … of which the dashboard's views alone redrawn (median; panels after) | "
          f"{res['range_change_views_median_ms']:.0f} ms |")  # fmt: skip
    print(f"| first range change after the display | {res['range_change_first_ms']:.0f} ms |")
    print(f"| of which kernel side (median) | {res['range_change_kernel_median_ms']:.0f} ms |")
    print(f"| of which browser side: comm + decode + draw (median) | "
          f"{res['range_change_browser_median_ms']:.0f} ms |")  # fmt: skip


if __name__ == "__main__":
    main()
