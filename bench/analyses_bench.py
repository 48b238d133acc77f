"""What the analyses beyond DLProf cost (issue 21): first build and a range change, at scale.

    python bench/gen_export.py /tmp/b.sqlite --kernels 1000000 --seed 0
    python bench/analyses_bench.py /tmp/b.sqlite --runs 3

Per run, in a fresh process: load + correlate, then each analysis's report over all
iterations (the first call builds the whole-profile frame: idle partition, launch table) and
again over iterations 5..40 (a range change), plus ``outlier_ops`` and the detail report (which
now carries the roofline columns). Prints medians in milliseconds and the peak RSS.
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("export")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
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
