"""DLProf's database written whole (``save_trace``) vs part by part (``open_dldb``), in-process.

``python bench/dldb_parts.py EXPORT.sqlite OUT_FOLDER [REPS] [PART_ROWS]`` reads the export once,
then alternates, REPS times each: ``save_trace(trace, OUT/whole_dldb.sqlite)`` and the part
writer fed ``PART_ROWS``-row ``iloc`` slices (default 1M) in the windowed engine's order (nvtx,
marks, osrt, gpus whole first, then gpu and api parts interleaved: api is spooled). It prints each
run's wall time and peak RSS above the loaded trace (VmHWM reset before each run through
``/proc/self/clear_refs``), the medians, and whether the two files are byte-identical (SHA-256).
Run it with the tree to measure first on PYTHONPATH; OUT_FOLDER needs ~2x the database's size.
"""

from __future__ import annotations

import hashlib
import itertools
import statistics
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # bench.*; jlprof from PYTHONPATH

from bench.stage_rss import reset_hwm, rss_kb


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def _parts(trace, target: Path, rows: int) -> None:
    from contextlib import ExitStack

    from jlprof.engine.read.store import FRAMES, open_dldb

    parted = ("gpu", "api")
    with open_dldb(target, meta=trace.meta, source=trace.source, warnings=trace.warnings) as db:
        for name in FRAMES:
            if name not in parted:
                db.write_frame(name, getattr(trace, name))
        with ExitStack() as stack:
            frames = [getattr(trace, n) for n in parted]
            sinks = [
                stack.enter_context(db.frame(n, f.iloc[:0]))
                for n, f in zip(parted, frames, strict=True)
            ]
            longest = max(len(f) for f in frames)
            for start in range(0, longest, rows):
                for sink, df in zip(sinks, frames, strict=True):
                    if start < len(df):
                        sink.write(df.iloc[start : start + rows])


def main(argv: list[str]) -> int:
    from jlprof.engine.read.read import read_trace
    from jlprof.engine.read.store import save_trace

    export, out = Path(argv[0]), Path(argv[1])
    reps = int(argv[2]) if len(argv) > 2 else 3
    rows = int(argv[3]) if len(argv) > 3 else 1_000_000
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    trace = read_trace(export)
    base = rss_kb("VmRSS")
    print(f"read_trace {time.perf_counter() - t:.2f} s, RSS {base / 1e6:.2f} GB, "
          f"gpu {len(trace.gpu):,} rows, api {len(trace.api):,} rows", flush=True)  # fmt: skip
    runs = {
        "save_trace": lambda p: save_trace(trace, p, "--output_path"),
        f"parts({rows:,})": lambda p: _parts(trace, p, rows),
    }
    results: dict[str, list[tuple[float, int]]] = {k: [] for k in runs}
    digests: dict[str, str] = {}
    for _, (label, run) in itertools.product(range(reps), runs.items()):
        target = out / ("whole_dldb.sqlite" if label == "save_trace" else "parts_dldb.sqlite")
        target.unlink(missing_ok=True)
        before = rss_kb("VmRSS")
        reset_hwm()
        t = time.perf_counter()
        run(target)
        wall = time.perf_counter() - t
        peak = rss_kb("VmHWM") - before
        results[label].append((wall, peak))
        size = target.stat().st_size / 1e6
        print(f"{label:>16}: {wall:6.2f} s, peak +{peak / 1e6:.2f} GB above the trace "
              f"({before / 1e6:.2f} GB), file {size:.0f} MB", flush=True)  # fmt: skip
        if label not in digests:
            digests[label] = _sha(target)
        target.unlink()
    for label, rs in results.items():
        print(f"median {label:>16}: {statistics.median(w for w, _ in rs):.2f} s, "
              f"peak +{statistics.median(p for _, p in rs) / 1e6:.2f} GB")  # fmt: skip
    same = len(set(digests.values())) == 1
    print("byte-identical:", same, {k: v[:16] for k, v in digests.items()})
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
