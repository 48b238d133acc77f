"""Wall time and peak RSS of the launch plan and of reading every window, beside read_trace.

    python bench/window_read.py EXPORT.sqlite [--calls 1000000] [--whole] [--sqlite3]

Phases, each timed and with its own peak RSS (VmHWM reset at its start through
``/proc/self/clear_refs``): ``plan`` (:func:`plan_windows`), ``windows`` (every window read
one after another through one :class:`WindowReader`, each dropped before the next), and with
``--whole`` instead ``read_trace`` alone (run it as a process of its own: its peak is the
figure to compare with). Prints the load (``uptime``) first, the windows' over-read (GPU rows
SQLite handed back per GPU row kept) and the plan's own arrays' sizes. Run it with the tree
to measure first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.stage_rss import reset_hwm, rss_kb
from jlprof.engine.read.read import read_trace
from jlprof.engine.windowed.windows import WindowReader, plan_windows


class Phase:
    """``with Phase(name):`` prints the phase's wall time, CPU time and peak RSS."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> Phase:
        gc.collect()
        reset_hwm()
        self.rss0 = rss_kb("VmRSS")
        self.cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self.t0
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        user, system = cpu.ru_utime - self.cpu0.ru_utime, cpu.ru_stime - self.cpu0.ru_stime
        print(
            f"{self.name}: wall {wall:.2f} s, cpu user {user:.2f} s + sys {system:.2f} s, "
            f"peak RSS {rss_kb('VmHWM') / 1024:.0f} MB (at start {self.rss0 / 1024:.0f} MB, "
            f"at end {rss_kb('VmRSS') / 1024:.0f} MB)",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("export", type=Path)
    ap.add_argument("--calls", type=int, default=1_000_000, help="API calls per window")
    ap.add_argument("--whole", action="store_true", help="time read_trace instead")
    ap.add_argument("--sqlite3", action="store_true", help="read without connectorx")
    a = ap.parse_args()
    cx = False if a.sqlite3 else None
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(
        f"pid {os.getpid()}, {a.export}, RSS at start {rss_kb('VmRSS') / 1024:.0f} MB", flush=True
    )
    if a.whole:
        with Phase("read_trace"):
            trace = read_trace(a.export, use_connectorx=cx)
        print(f"  api {len(trace.api):,} rows, gpu {len(trace.gpu):,} rows")
        return
    with Phase("plan"):
        plan = plan_windows(a.export, a.calls, use_connectorx=cx)
    arrays = ("window", "launched", "isolated", "window_start_ns", "gpu_order", "gpu_bounds")
    held = sum(getattr(plan, n).nbytes for n in arrays)
    print(
        f"  {plan.n_windows} windows of {a.calls:,} calls; api {plan.n_api:,} rows, "
        f"gpu {plan.n_gpu:,} rows ({int(plan.launched.sum()):,} launched); "
        f"plan arrays {held / 2**20:.0f} MB"
    )
    with Phase("windows"), WindowReader(plan) as reader:
        for w in range(plan.n_windows):
            t = time.perf_counter()
            got = reader.read(w)
            print(
                f"  window {w}: api {len(got.api):,} gpu {len(got.gpu):,} rows, "
                f"{time.perf_counter() - t:.2f} s, RSS {rss_kb('VmRSS') / 1024:.0f} MB",
                flush=True,
            )
            del got
        ratio = reader.gpu_rows_read / max(reader.gpu_rows_kept, 1)
        print(
            f"  over-read: {reader.gpu_rows_read:,} GPU rows read for "
            f"{reader.gpu_rows_kept:,} kept ({ratio:.4f}x)"
        )
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
