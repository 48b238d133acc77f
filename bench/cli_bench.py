"""Time what users run: the whole ``jlprof`` command as a process, next to a raw fetch and
NVIDIA's ``nsys stats -r nvtxkernsum`` on the same export, in the same run (issue 18).

    python bench/cli_bench.py EXPORT [--formats csv,json] [--repeat 3] [--nsys-repeat 3]

Per repetition, interleaved (a b c a b c ...), each a child process under ``/usr/bin/time``
(wall seconds and peak RSS):
  (a) a plain Python ``sqlite3`` fetch of the columns jlprof reads (``run_bench.FETCH``);
  (b) ``jlprof --database EXPORT --key_node optimizer_step --reports all --formats F`` into a
      new, empty folder on the same file system (the files written are counted and sized, then
      removed outside the timing; ``sync`` runs before every timed command so one command's
      write-back does not slow the next);
  (c) ``nsys stats -r nvtxkernsum`` (skipped without nsys; ``--nsys-repeat`` may be smaller).
With a baseline (``--baseline-src`` / ``--baseline-args``) the two jlprof commands swap places
every repetition: the one run right after the fetch was slower in 5 of 5 pairs at 1M kernels
(2026-11-27 07:40 UTC, 2.49–3.34 s against 2.38–2.81 s for the same code), while pairs
alternated by hand were even.
The load average (``/proc/loadavg``) is recorded before every command, and the free space of
the scratch folder's file system before the first: on a nearly full disk (8 GB free of 252 GB,
2026-11-26) the same 1M command spent twice the system time writing and the 10M one took 11 s
longer, so a figure without it cannot be compared. Prints the medians as a Markdown row and
writes ``bench/out/cli_bench_<export stem>.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bench.run_bench import FETCH  # noqa: E402

FETCH_CHILD = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
for sql in sys.argv[2:]:
    con.execute(sql).fetchall()
"""


def load() -> str:
    return Path("/proc/loadavg").read_text().split(" ")[0]


def timed(cmd: list[str], env: dict | None = None, cwd: Path | None = None) -> dict:
    """Wall seconds, CPU seconds (user + system: steadier than wall on a shared box) and peak
    RSS (MB) of ``cmd`` through GNU time."""
    subprocess.run(["sync"], check=False)
    before = load()
    res = subprocess.run(
        ["/usr/bin/time", "-f", "TIME %e %M %U %S", *cmd],
        capture_output=True, text=True, env=env, cwd=cwd,
    )  # fmt: skip
    line = [x for x in res.stderr.splitlines() if x.startswith("TIME ")][-1].split()
    out = {"wall_s": float(line[1]), "rss_mb": int(line[2]) / 1024, "rc": res.returncode}
    out["cpu_s"] = float(line[3]) + float(line[4])
    out["load_before"] = before
    if res.returncode:
        out["stderr_tail"] = res.stderr[-2000:]
    return out


def fetch(export: Path) -> dict:
    return timed([sys.executable, "-c", FETCH_CHILD, str(export), *FETCH])


def cli(
    export: Path, formats: str, scratch: Path, src: Path = ROOT, extra: tuple[str, ...] = ()
) -> dict:
    out = Path(tempfile.mkdtemp(prefix="cli-", dir=scratch))
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, "-m", "jlprof", f"--database={export}", "--key_node=optimizer_step",
           "--reports=all", f"--formats={formats}", f"--output_path={out}",
           "--profile_name=bench", "-v", "quiet", *extra]  # fmt: skip
    r = timed(cmd, env, cwd=src)  # `python -m` puts the working folder first on sys.path
    files = sorted(p for p in out.iterdir() if p.is_file())
    if r["rc"]:
        raise SystemExit(f"the command failed: {' '.join(cmd)}\n{r['stderr_tail']}")
    r["files"] = len(files)
    r["bytes_written"] = sum(p.stat().st_size for p in files)
    shutil.rmtree(out)
    return r


def nsys_stats(export: Path, scratch: Path) -> dict | None:
    nsys = shutil.which("nsys")
    if not nsys:
        return None
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        return timed([nsys, "stats", "-q", "-r", "nvtxkernsum", "--format", "csv",
                      "-o", f"{tmp}/out", str(export)])  # fmt: skip


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("export", type=Path)
    ap.add_argument("--formats", default="csv,json")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--nsys-repeat", type=int, default=None, help="default: --repeat")
    ap.add_argument("--scratch", type=Path, default=None, help="folder for the outputs")
    ap.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="another jlprof source tree (e.g. `git archive main`) to time the same command with",
    )
    ap.add_argument(
        "--args",
        default="",
        help="more jlprof options for the timed command (e.g. --windowed=true)",
    )
    ap.add_argument(
        "--baseline-args",
        default=None,
        help="jlprof options for a baseline run of this tree (e.g. --windowed=false)",
    )
    args = ap.parse_args()
    args.export = args.export.resolve()  # the commands run from other folders
    scratch = args.scratch or args.export.parent
    n_nsys = args.repeat if args.nsys_repeat is None else args.nsys_repeat
    runs: dict[str, list] = {"fetch": [], "cli": [], "nsys": [], "cli_baseline": []}
    disk = shutil.disk_usage(scratch)
    free_gb = disk.free / 1e9
    print(f"scratch {scratch}: {free_gb:.1f} GB free of {disk.total / 1e9:.0f} GB", flush=True)
    for i in range(args.repeat):
        runs["fetch"].append(fetch(args.export))
        print("fetch", runs["fetch"][-1], flush=True)
        extra = tuple(args.args.split())
        arms: list[tuple[str, Path, tuple[str, ...]]] = [("cli", ROOT, extra)]
        if args.baseline_src or args.baseline_args is not None:
            base = tuple((args.baseline_args or "").split())
            arms.append(("cli_baseline", args.baseline_src or ROOT, base))
        for name, src, more in arms[:: -1 if i % 2 else 1]:  # the arm after the fetch alternates
            runs[name].append(cli(args.export, args.formats, scratch, src, more))
            print(name, runs[name][-1], flush=True)
        if i < n_nsys:
            r = nsys_stats(args.export, scratch)
            if r is not None:
                runs["nsys"].append(r)
                print("nsys", r, flush=True)
    summary = {
        "export": str(args.export),
        "export_mb": args.export.stat().st_size / 1e6,
        "formats": args.formats,
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.python_version()}",
        "loads_before": [r["load_before"] for v in runs.values() for r in v],
        "disk_free_gb_before": round(free_gb, 1),
        "median": {
            k: {
                "wall_s": med(v, "wall_s"),
                "cpu_s": med(v, "cpu_s"),
                "rss_mb": med(v, "rss_mb"),
                "n": len(v),
            }
            for k, v in runs.items()
            if v
        },
        "runs": runs,
    }
    m = summary["median"]
    ratio = m["cli"]["wall_s"] / m["fetch"]["wall_s"]
    nsys_ratio = m["nsys"]["wall_s"] / m["cli"]["wall_s"] if "nsys" in m else float("nan")
    summary["cli_over_fetch"] = ratio
    summary["nsys_over_cli"] = nsys_ratio
    out = HERE / "out" / f"cli_bench_{args.export.stem}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))
    files = runs["cli"][-1]
    print(
        f"| {args.export.name} | {args.formats} | {m['fetch']['wall_s']:.2f} s, "
        f"{m['fetch']['rss_mb']:.0f} MB | {m['cli']['wall_s']:.2f} s "
        f"(cpu {m['cli']['cpu_s']:.2f} s),"
        f" {m['cli']['rss_mb']:.0f} MB"
        f" ({files['files']} files, {files['bytes_written'] / 1e6:.0f} MB) | {ratio:.2f} | "
        + (
            f"{m['nsys']['wall_s']:.1f} s, {m['nsys']['rss_mb']:.0f} MB (n={m['nsys']['n']}) | "
            f"{nsys_ratio:.1f} |"
            if "nsys" in m
            else "– | – |"
        )
        + f" loads {', '.join(summary['loads_before'])}; {free_gb:.0f} GB free |"
    )
    if "cli_baseline" in m:
        b = m["cli_baseline"]
        print(
            f"baseline ({args.baseline_src}): {b['wall_s']:.2f} s (cpu {b['cpu_s']:.2f} s), "
            f"{b['rss_mb']:.0f} MB"
        )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
