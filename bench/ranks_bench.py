"""Scale benchmark for many ranks on Dask (``jlprof.load_ranks``, docs/ranks.md).

    python bench/ranks_bench.py --ranks 8 16 32 64 --kernels 100000 [--workers 2]

Writes ``--distinct`` different 100k-kernel exports (``bench/gen_export.py``, seeds 0..) and
hard-links them as ``rank_000.sqlite`` … (rank r gets export r mod distinct): every rank is a
full read + correlation + reduction on a worker, as in a real job. For each rank count: wall
time of ``load_ranks`` on a LocalCluster of ``--workers`` processes, seconds per rank per worker,
and the driver's peak RSS (it receives only aggregates).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gen_export import generate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--kernels", type=int, default=100_000)
    ap.add_argument("--distinct", type=int, default=4)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/jlprof_ranks_bench"))
    args = ap.parse_args()
    src = args.dir / "src"
    src.mkdir(parents=True, exist_ok=True)
    bases = []
    for s in range(args.distinct):
        f = src / f"k{args.kernels}_s{s}.sqlite"
        if not f.exists():
            generate(f, args.kernels, s)
        bases.append(f)
    print(f"exports: {[b.stat().st_size >> 20 for b in bases]} MiB", flush=True)

    from distributed import LocalCluster

    import jlprof

    cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, host="127.0.0.1",
                           dashboard_address=None, silence_logs=40)  # fmt: skip
    results = []
    try:
        for n in args.ranks:
            job = args.dir / f"job{n}"
            job.mkdir(exist_ok=True)
            for r in range(n):
                link = job / f"rank_{r:03d}.sqlite"
                if not link.exists():
                    os.link(bases[r % len(bases)], link)
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            ranks = jlprof.load_ranks(job, scheduler=cluster.scheduler_address, progress=True)
            wall = time.perf_counter() - t0
            row = {
                "ranks": n,
                "kernels_per_rank": args.kernels,
                "workers": args.workers,
                "wall_s": round(wall, 2),
                "s_per_rank_per_worker": round(wall * args.workers / n, 3),
                "driver_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10,
                "load_before": round(load, 2),
                "stragglers": int(ranks.report("ranks")["Straggler"].sum()),
            }
            results.append(row)
            print(json.dumps(row), flush=True)
    finally:
        cluster.close()
    per = sorted(r["s_per_rank_per_worker"] for r in results)[len(results) // 2]
    print(f"median s/rank/worker {per}; 1,024 ranks on 16 workers ≈ {1024 / 16 * per:.0f} s")


if __name__ == "__main__":
    main()
