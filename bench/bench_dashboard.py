"""Benchmark the dashboard, kernel side: initial render and range changes at 1M kernels.

    python bench/bench_dashboard.py [--export bench/out/big.sqlite] [--changes 15]

Generate the export once with ``python bench/gen_export.py bench/out/big.sqlite --kernels
1000000 --seed 0``. Measures, in this process (the notebook kernel's side):
  * load (``jlprof.load``: read + correlate; not part of the dashboard target, for context);
  * initial render: ``Profile.dashboard()`` (cube, every view's data, the Bokeh document and
    its render bundle) plus the widget's display bundle; the static HTML fallback, which
    the kernel renders after the widget has gone out, is timed on its own;
  * range change: ``Dashboard.set_range`` over random ranges (re-aggregation, every source
    replaced, Bokeh patch messages serialised), median and max;
  * key-node change: ``Dashboard.set_key_node`` (a new cube).
Browser-side times are measured by ``bench/bench_dashboard_browser.py``.
Prints a Markdown table and writes bench/out/dashboard.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--export", type=Path, default=HERE / "out" / "big.sqlite")
    ap.add_argument("--changes", type=int, default=15)
    ap.add_argument("--key-node", default="optimizer_step")
    ap.add_argument("--panels", action="store_true", help="with the Viewer panels' section open")
    args = ap.parse_args()
    if not args.export.exists():
        sys.exit(
            f"{args.export} not found: run python bench/gen_export.py {args.export} "
            "--kernels 1000000 --seed 0"
        )
    import jlprof

    t = time.perf_counter()
    p = jlprof.load(args.export, key_node=args.key_node)
    load_s = time.perf_counter() - t
    kernels = len(p.correlated.gpu)

    t = time.perf_counter()
    import jlprof.widgets.dashboard  # Bokeh, ipywidgets: once per kernel

    import_s = time.perf_counter() - t
    t = time.perf_counter()
    dash = p.dashboard(panels=args.panels)
    build_s = time.perf_counter() - t
    from jlprof.widgets import dashboard as dmod

    dmod._bokeh_js_loaded = True  # no front end here: skip publishing BokehJS
    import IPython.display

    shown: list[dict] = []  # what Dashboard._ipython_display_ shows: widget, then static
    IPython.display.display = lambda obj, raw=False: shown.append(obj)
    t = time.perf_counter()
    dash._repr_mimebundle_()
    bundle_s = time.perf_counter() - t
    from jlprof.widgets.static import static_html

    t = time.perf_counter()
    static = static_html(p)
    static_s = time.perf_counter() - t

    n = p.iterations.count
    rnd = random.Random(0)
    changes = []
    glyphs = []
    for _ in range(args.changes):
        a = rnd.randrange(0, n - 1)
        b = rnd.randrange(a, n)
        t = time.perf_counter()
        dash.set_range(a, b)
        changes.append(time.perf_counter() - t)
        glyphs.append(len(dash.views.gpu_src.data["left"]) + len(dash.views.nvtx_src.data["left"]))
    whole = []
    for _ in range(3):
        t = time.perf_counter()
        dash.set_range(0, n - 1)
        whole.append(time.perf_counter() - t)
    t = time.perf_counter()
    dash.set_key_node(str(p.suggest_key_nodes(1)["op_name"].iloc[0]))
    key_s = time.perf_counter() - t
    res = {
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}",
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "kernels": kernels,
        "iterations": n,
        "load_s": load_s,
        "widgets_import_s": import_s,
        "dashboard_build_s": build_s,
        "mimebundle_s": bundle_s,
        "static_html_s": static_s,
        "static_html_mb": len(static) / 1e6,
        "initial_render_s": build_s + bundle_s,
        "range_change_median_ms": 1000 * statistics.median(changes),
        "range_change_max_ms": 1000 * max(changes),
        "whole_range_median_ms": 1000 * statistics.median(whole),
        "glyphs_max": max(glyphs),
        "key_node_change_s": key_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "dashboard.json").write_text(json.dumps(res, indent=2))
    print(f"| measure ({kernels:,} GPU activities, {n} iterations) | value |")
    print("|---|---|")
    print(f"| load (read + correlate, context) | {load_s:.2f} s |")
    print(f"| first import of the widget stack (once per kernel) | {import_s:.2f} s |")
    print(f"| dashboard build (all views' data + Bokeh document) | {build_s:.2f} s |")
    print(f"| widget display bundle | {bundle_s:.2f} s |")
    print(f"| **initial render** (build + widget bundle) | **{build_s + bundle_s:.2f} s** |")
    print(f"| static HTML fallback, rendered after the widget went out | {static_s:.2f} s |")
    print(f"| initial render incl. first import | {import_s + build_s + bundle_s:.2f} s |")
    print(
        f"| **range change**, all views updated ({args.changes} random ranges) | "
        f"**median {res['range_change_median_ms']:.0f} ms**, max "
        f"{res['range_change_max_ms']:.0f} ms |"
    )
    whole_ms = res["whole_range_median_ms"]
    print(f"| range change to all iterations (median of 3) | {whole_ms:.0f} ms |")
    print(f"| glyphs drawn at most (LOD cap) | {res['glyphs_max']:,} |")
    print(f"| key-node change (new cube) | {key_s:.2f} s |")
    print(f"| peak RSS | {res['peak_rss_mb']:.0f} MB |")


if __name__ == "__main__":
    main()
