"""Time ``Profile.compare`` (the A/B diff, docs/diff.md) on two large exports.

python bench/gen_export.py /tmp/g0.sqlite --kernels 1000000 --seed 0
python bench/gen_export.py /tmp/g1.sqlite --kernels 1000000 --seed 1
python bench/diff_bench.py /tmp/g0.sqlite /tmp/g1.sqlite
"""

from __future__ import annotations

import resource
import sys
import time

import jlprof


def main(base: str, new: str) -> None:
    t0 = time.perf_counter()
    a = jlprof.load(base)
    t1 = time.perf_counter()
    b = jlprof.load(new)
    t2 = time.perf_counter()
    r = a.compare(b)
    t3 = time.perf_counter()
    r2 = a.compare(b, iter_start=5, iter_stop=1000, other_iter_start=5, other_iter_stop=500)
    t4 = time.perf_counter()
    r.to_markdown()
    t5 = time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(
        f"load base {t1 - t0:.2f} s, load new {t2 - t1:.2f} s, compare (all iterations, first "
        f"time) {t3 - t2:.2f} s, compare (other ranges, normalised) {t4 - t3:.2f} s, markdown "
        f"{t5 - t4:.3f} s; verdicts {r.verdict}/{r2.verdict}; ops {len(r.ops)}, kernels "
        f"{len(r.kernels)}; iterations {a.iterations.count}/{b.iterations.count}; "
        f"peak RSS {rss:.2f} GB"
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
