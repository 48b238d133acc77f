"""Facts the annotator recorded as ``jlprof:`` NVTX marks (AMP, cudnn.benchmark, batch size, ...).

The trace alone cannot tell whether autocast was on or how much GPU memory was free; the
annotator (``jlprof.torch``) writes them as instant marks ``jlprof:{json}`` (format in
``docs/pytorch.md``), so expert systems work from the saved profile alone. JSON is decoded once
per unique mark text.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from jlprof.engine.read.trace import Trace

MARK_PREFIX = "jlprof:"  # = jlprof.torch.format.MARK_PREFIX (the engine must not import torch code)


def _decode(text: str) -> dict[str, Any] | None:
    if not text.startswith(MARK_PREFIX):
        return None
    try:
        obj = json.loads(text[len(MARK_PREFIX) :])
    except ValueError:
        return None
    return obj if isinstance(obj, dict) and isinstance(obj.get("event"), str) else None


def annotation_events(trace: Trace) -> pd.DataFrame:
    """One row per ``jlprof:`` mark, by time: ``ts_ns``, ``global_tid``, ``event``, ``data``."""
    m = trace.marks
    cols = ["ts_ns", "global_tid", "event", "data"]
    if m is None or not len(m):
        return pd.DataFrame(columns=cols)
    text = m["text"].astype("category")
    cats = text.cat.categories
    decoded = [_decode(str(t)) for t in cats]
    ok_cat = np.array([d is not None for d in decoded], dtype=bool)
    codes = text.cat.codes.to_numpy()
    keep = (codes >= 0) & ok_cat[np.maximum(codes, 0)]
    if not keep.any():
        return pd.DataFrame(columns=cols)
    rows = np.flatnonzero(keep)
    data = [decoded[c] for c in codes[rows]]
    out = pd.DataFrame(
        {
            "ts_ns": m["ts_ns"].to_numpy(np.int64)[rows],
            "global_tid": m["global_tid"].to_numpy(np.int64)[rows],
            "event": [d["event"] for d in data],
            "data": data,
        }
    )
    return out.sort_values("ts_ns", kind="stable").reset_index(drop=True)


def annotation_facts(trace: Trace) -> dict[str, Any]:
    """A summary for the detectors: the latest model-call state, per-step peaks, slow APIs.

    ``state`` (dict, {} when never recorded), ``states`` (all distinct states seen),
    ``peak_mem_bytes``/``total_mem_bytes`` (max over steps, None without CUDA),
    ``slow_apis`` (names, first-use order), ``compiled_graphs`` ([step, graphs so far] pairs;
    the annotator marks a step only when its figures changed), ``user`` (merged
    ``jlprof.torch.mark`` facts), ``annotated`` (init seen), ``steps`` (last step marked).
    """
    ev = annotation_events(trace)
    facts: dict[str, Any] = {
        "annotated": False,
        "state": {},
        "states": [],
        "peak_mem_bytes": None,
        "total_mem_bytes": None,
        "slow_apis": [],
        "compiled_graphs": [],
        "user": {},
        "steps": 0,
    }
    for kind, d in zip(ev["event"], ev["data"], strict=True):
        if kind == "init":
            facts["annotated"] = True
            facts.setdefault("init", d)
        elif kind == "state":
            facts["annotated"] = True
            facts["state"] = d
            if d not in facts["states"]:
                facts["states"].append(d)
        elif kind == "step":
            step = int(d.get("step", facts["steps"] + 1))
            facts["steps"] = max(facts["steps"], step)
            for key in ("peak_mem_bytes", "total_mem_bytes"):
                if d.get(key) is not None:
                    facts[key] = max(facts[key] or 0, int(d[key]))
            if "compiled_graphs" in d:
                facts["compiled_graphs"].append([step, int(d["compiled_graphs"])])
        elif kind == "slow_api":
            if d.get("api") not in facts["slow_apis"]:
                facts["slow_apis"].append(d.get("api"))
        elif kind == "user":
            facts["user"].update({k: v for k, v in d.items() if k != "event"})
    return facts
