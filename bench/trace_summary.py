"""Summarise a Chromium performance trace (Playwright ``browser.start_tracing``) of the page.

    python bench/trace_summary.py TRACE.json [--top 25]

Prints, for the renderer's main thread inside the traced window: wall time, busy time, the
top-level task time split by what the work was (script, style/layout, paint, parsing, GC,
...), and the JavaScript functions with the most self time (from the V8 CPU-profile samples
the trace carries when the ``disabled-by-default-v8.cpu_profiler`` category is on).
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

CATEGORIES = [
    "devtools.timeline",
    "disabled-by-default-devtools.timeline",
    "v8.execute",
    "disabled-by-default-v8.cpu_profiler",
    "blink.user_timing",
]

# event names of the devtools timeline, grouped as DevTools' summary groups them
GROUPS = {
    "scripting": {"FunctionCall", "EvaluateScript", "v8.compile", "v8.compileModule",
                  "EventDispatch", "TimerFire", "FireAnimationFrame", "RunMicrotasks",
                  "v8.evaluateModule", "V8.CompileCode", "XHRReadyStateChange"},
    "gc": {"MinorGC", "MajorGC", "V8.GCScavenger", "V8.GCCompactor", "BlinkGC.AtomicPhase",
           "ThreadState::performIdleLazySweep"},
    "style+layout": {"UpdateLayoutTree", "Layout", "RecalculateStyles", "UpdateLayerTree",
                     "ScheduleStyleRecalculation", "InvalidateLayout", "HitTest"},
    "paint+composite": {"Paint", "PaintImage", "CompositeLayers", "RasterTask", "PrePaint",
                        "Layerize", "Commit", "UpdateLayer"},
    "parse HTML/CSS": {"ParseHTML", "ParseAuthorStyleSheet"},
}  # fmt: skip


def _main_thread(events: list[dict]) -> tuple[int, int]:
    for e in events:
        if e.get("name") == "thread_name" and e["args"].get("name") == "CrRendererMain":
            return e["pid"], e["tid"]
    raise SystemExit("no CrRendererMain thread in the trace")


def summarise(path: Path, top: int = 25) -> dict:
    raw = json.loads(path.read_text())
    events = raw["traceEvents"] if isinstance(raw, dict) else raw
    pid, tid = _main_thread(events)
    main = [e for e in events if e.get("pid") == pid and e.get("tid") == tid and "ts" in e]
    xs = sorted(
        (e for e in main if e.get("ph") == "X" and "dur" in e), key=lambda e: (e["ts"], -e["dur"])
    )
    tasks = [e for e in xs if e["name"] == "RunTask"]
    t0 = min(e["ts"] for e in xs)
    t1 = max(e["ts"] + e["dur"] for e in xs)
    busy = sum(e["dur"] for e in tasks) / 1e3
    # self time per named event: duration minus that of its children (X events nest by time)
    selft: collections.Counter[str] = collections.Counter()
    stack: list[list] = []  # [end, name, child_time]
    for e in xs:
        while stack and stack[-1][0] <= e["ts"]:
            _end, name, child, dur = stack.pop()
            selft[name] += dur - child
        if stack:
            stack[-1][2] += e["dur"]
        stack.append([e["ts"] + e["dur"], e["name"], 0, e["dur"]])
    while stack:
        _end, name, child, dur = stack.pop()
        selft[name] += dur - child
    selft.pop("RunTask", None)
    groups: collections.Counter[str] = collections.Counter()
    for name, us in selft.items():
        g = next((g for g, names in GROUPS.items() if name in names), "other")
        groups[g] += us / 1e3
    # JS functions from the CPU profile samples
    nodes: dict[int, dict] = {}
    samples: list[int] = []
    deltas: list[int] = []
    for e in events:
        if e.get("name") == "ProfileChunk" and e.get("pid") == pid:
            d = e["args"]["data"]
            cp = d.get("cpuProfile", {})
            for n in cp.get("nodes", []):
                nodes[n["id"]] = n
            samples += cp.get("samples", [])
            deltas += d.get("timeDeltas", [])
    fn: collections.Counter[str] = collections.Counter()
    for s, dt in zip(samples, deltas, strict=False):
        n = nodes.get(s)
        if n is None:
            continue
        cf = n["callFrame"]
        url = cf.get("url", "").rsplit("/", 1)[-1][:40]
        fn[f"{cf.get('functionName') or '(anon)'} [{url}:{cf.get('lineNumber', -1)}]"] += dt / 1e3
    return {
        "window_ms": (t1 - t0) / 1e3,
        "main_thread_busy_ms": busy,
        "groups_ms": dict(groups.most_common()),
        "events_self_ms": {k: v / 1e3 for k, v in selft.most_common(top)},
        "js_self_ms": dict(fn.most_common(top)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    s = summarise(a.trace, a.top)
    print(f"window {s['window_ms']:.0f} ms, main thread busy {s['main_thread_busy_ms']:.0f} ms")
    for title in ("groups_ms", "events_self_ms", "js_self_ms"):
        print(f"-- {title}")
        for k, v in s[title].items():
            print(f"{v:9.1f}  {k}")


if __name__ == "__main__":
    main()
