"""A compact HTML summary of a Profile (the notebook repr until the dashboard lands)."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from jlprof.reports import catalog

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis


def profile_html(p: Analysis, top: int = 10) -> str:
    h = catalog.headline(p)
    det = catalog.report(p, "detail").head(top)
    cols = [
        "Op Name",
        "Op Type",
        "No. Calls",
        "Total GPU Time (ns)",
        "Total CPU Time (ns)",
        "Using TC",
    ]
    kn = html.escape(h["key_node"] or "none found")
    head = (
        f"<b>jlprof</b> {html.escape(h['source'])}<br>"
        f"key node <code>{kn}</code> · {h['iterations']} iterations · range "
        f"{h['range'][0]}..{h['range'][1]} · wall {h['wall_ns'] / 1e6:.2f} ms · "
        f"GPU util {h['gpu_util_pct']:.1f}% · TC util {h['tc_util_pct']:.1f}% · "
        f"avg iteration {h['avg_iter_ns'] / 1e6:.3f} ms"
    )
    return f"<div class='jlprof-profile'>{head}{det[cols].to_html(index=False, escape=True)}</div>"
