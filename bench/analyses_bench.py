"""What the analyses beyond DLProf cost (issue 21): first build and a range change, at scale.

    python bench/gen_export.py /tmp/b.sqlite --kernels 1000000 --seed 0
    python bench/analyses_bench.py /tmp/b.sqlite --runs 3
    python bench/analyses_bench.py /tmp/b.sqlite --runs 3 --all   # DLProf's 8 vs all reports

Per run, in a fresh process: load + correlate, then each analysis's report over all
iterations (the first call builds the whole-profile frame: idle partition, launch table) and
again over iterations 5..40 (a range change), plus ``outlier_ops`` and the detail report (which
now carries the roofline columns). Prints medians in milliseconds and the peak RSS.
``--all``: instead, load + DLProf's eight reports vs load + every report (``REPORTS``, with the
analyses), each in a fresh process, interleaved: what ``--reports=all`` pays for the analyses.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import jlprof
t = time.perf_counter()
p = jlprof.load(sys.argv[1], key_node="optimizer_step")
out = {"load_s": time.perf_counter() - t}
ms = lambda t: 1e3 * (time.perf_counter() - t)
for r in ("idle_causes", "launch_stats", "iteration_outliers", "roofline", "detail"):
    t = time.perf_counter(); p.report(r); out[f"{r}_first_ms"] = ms(t)
    t = time.perf_counter(); p.report(r, 5, 40); out[f"{r}_range_ms"] = ms(t)
t = time.perf_counter(); p.outlier_ops(10); out["outlier_ops_ms"] = ms(t)
out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


ALL = r"""
import sys, time, jlprof
from jlprof.reports import REPORTS
t = time.perf_counter()
p = jlprof.load(sys.argv[1])
for r in REPORTS[: int(sys.argv[2])]:
    p.report(r)
print(time.perf_counter() - t)
"""


def compare_all(export: str, runs: int) -> None:
    from jlprof.reports import REPORTS

    got: dict[int, list[float]] = {8: [], len(REPORTS): []}
    for _ in range(runs):
        for n in got:
            proc = subprocess.run(
                [sys.executable, "-c", ALL, export, str(n)], capture_output=True, text=True,
                check=True,
            )  # fmt: skip
            got[n].append(float(proc.stdout.strip().splitlines()[-1]))
    for n, v in got.items():
        print(f"load + {n:2d} reports: median {statistics.median(v):.2f} s   runs {v}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("export")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--all", action="store_true", help="DLProf's 8 reports vs all of them")
    a = ap.parse_args()
    if a.all:
        compare_all(a.export, a.runs)
        return
    runs = []
    for _ in range(a.runs):
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, a.export], capture_output=True, text=True, check=True
        )
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    for k in runs[0]:
        vals = [r[k] for r in runs]
        print(
            f"{k:28s} median {statistics.median(vals):10.1f}   runs {[round(v, 1) for v in vals]}"
        )


if __name__ == "__main__":
    main()
