"""Time the Profiles sidebar's listing (jlprof.server.listing) on a big tree.

Builds N run folders (manifest + small files) among M unrelated files in a temporary folder,
then times the first page, a middle page and the walk alone. Prints measured figures only.

    python bench/labext_listing.py --runs 2000 --files 50000
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from jlprof.server import listing


def build(root: Path, runs: int, files: int) -> None:
    for i in range(runs):
        folder = root / f"proj{i % 20}" / "jlprof_runs" / f"run{i:06d}"
        folder.mkdir(parents=True)
        (folder / "nsys_profile.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x00" * 84)
        (folder / "dlprof_summary.json").write_text("{}")
        (folder / "jlprof_run.json").write_text(
            json.dumps(
                {"format": "jlprof-run/1", "iterations": i, "database": "nsys_profile.sqlite"}
            )
        )
        os.utime(folder / "jlprof_run.json", (1e9 + i, 1e9 + i))
    for j in range(files):
        d = root / "data" / f"d{j // 1000}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{j}.txt").write_bytes(b"")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--files", type=int, default=50000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root, args.runs, args.files)
        for label, call in (
            ("walk only", lambda: listing.walk(root, root.resolve())),
            ("first page (100)", lambda: listing.list_profiles(root, limit=100)),
            ("middle page (100)", lambda: listing.list_profiles(root, offset=args.runs // 2)),
        ):
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            print(f"{label}: best {min(times) * 1e3:.0f} ms of 3")
        page = listing.list_profiles(root, limit=100)
        print(f"total {page['total']} profiles, truncated={page['truncated']}")


if __name__ == "__main__":
    main()
