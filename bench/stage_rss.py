"""Peak RSS per stage of one ``jlprof`` command, in-process (issue 18's memory figures).

``python bench/stage_rss.py JLPROF-ARGS...`` runs ``jlprof.cli.main(ARGS)`` with a thread
polling /proc/self/status (VmRSS) every 0.1 s, and VmHWM reset at each stage start
(``/proc/self/clear_refs``) for the exact peak, and prints, at each stage change, the stage
that ended, its wall time, its peak RSS and the RSS when it ended, and the process's user and
system CPU time and minor page faults in it (all threads: the database's writer too).
Stages are the CLI's progress names plus the cube's parts (``build_cube``, ``_time_iter``,
``_group_iter``), marked by wrapping those functions. Run it with the tree to measure first
on PYTHONPATH.
"""

from __future__ import annotations

import functools
import resource
import sys
import threading
import time


def rss_kb(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_hwm() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0): each stage's exact peak, not polled."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class _Stages:
    def __init__(self) -> None:
        self.name = "start"
        self.t = time.perf_counter()
        self.t0 = self.t
        self.peak = rss_kb()
        self.lock = threading.Lock()
        self.rows: list[tuple[str, float, int, int]] = []
        self.hwm = reset_hwm()
        self.usage = resource.getrusage(resource.RUSAGE_SELF)

    def poll(self) -> None:
        with self.lock:
            self.peak = max(self.peak, rss_kb())

    def enter(self, name: str) -> None:
        with self.lock:
            now, rss = time.perf_counter(), rss_kb()
            self.peak = max(self.peak, rss, rss_kb("VmHWM") if self.hwm else 0)
            row = (self.name, now - self.t, self.peak, rss)
            self.rows.append(row)
            gb = f"peak {row[2] / 1e6:.2f} GB, after {row[3] / 1e6:.2f} GB"
            u0, self.usage = self.usage, resource.getrusage(resource.RUSAGE_SELF)
            cpu = (f"user {self.usage.ru_utime - u0.ru_utime:.2f} s, "
                   f"sys {self.usage.ru_stime - u0.ru_stime:.2f} s, "
                   f"{self.usage.ru_minflt - u0.ru_minflt} faults")  # fmt: skip
            print(f"[stage_rss {now - self.t0:7.2f}s] end {row[0]!r}: {row[1]:.2f} s, {gb}, {cpu}",
                  flush=True)  # fmt: skip
            self.name, self.t, self.peak = name, now, rss
            self.hwm = reset_hwm()


def main(argv: list[str]) -> int:
    from jlprof import cli, console
    from jlprof.engine import analysis
    from jlprof.engine.aggregate import aggregate

    st = _Stages()
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.1):
            st.poll()

    threading.Thread(target=loop, daemon=True).start()
    orig_call = console.StageProgress.__call__

    def call(self, name: str) -> None:
        st.enter(name)
        orig_call(self, name)

    console.StageProgress.__call__ = call

    def marked(mod, attr: str) -> None:
        fn = getattr(mod, attr)

        @functools.wraps(fn)
        def wrapper(*a, **k):
            outer = st.name
            st.enter(attr)
            try:
                return fn(*a, **k)
            finally:
                st.enter(f"{outer} (after {attr})")

        setattr(mod, attr, wrapper)

    marked(analysis, "build_cube")
    for attr in ("_kernel_iter", "_time_iter", "_group_iter"):
        marked(aggregate, attr)
    try:
        return cli.main(argv)
    finally:
        st.enter("end")
        stop.set()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
