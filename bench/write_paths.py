"""The user's command writing its files on several file systems, code variants side by side
(issue 45 item 3: does writing big files past the page cache pay?).

    python bench/write_paths.py EXPORT --target ext4=/mnt/ext4 --target tmpfs=/mnt/tmpfs ... \\
        --variant probe=. --variant cache=.,JLPROF_DIRECT_IO=0 --variant direct=.,always_direct \\
        [--variant old=/tmp/old-tree] [--variant one=.,no_thread] [--rounds 4] [--base cache]

A variant is NAME=TREE (a folder holding the ``jlprof`` package: ``git archive REV jlprof |
tar -x -C TREE`` for another revision), then settings K=V and patches, by commas. The file
systems are folders given by the caller (docs/writing-files.md: how ext4, xfs, tmpfs and
overlayfs were mounted for the measured table).

Each run is ``python -m jlprof --database EXPORT --key_node optimizer_step --reports all
--formats csv,json -v quiet --output_path TARGET/jlprof-out`` under ``/usr/bin/time`` (wall,
user and system CPU of the process and its threads, peak RSS), with ``PYTHONPATH`` the
variant's source tree and its environment settings. ``always_direct`` starts the command with
the probe's class (``jlprof.writer._Slices``; ``jlprof.outputs``' before issue 45) made never
to probe, so every streamed file's bytes past 64 MiB go past the cache; ``no_thread`` with
every file written by the caller's thread (``written_file``'s ``background`` ignored). The
output folder is removed and ``sync`` run before every command (one run's write-back must not
slow the next). Rounds: every target, and within it every variant, the variants' order
rotated each round (the box is shared: alternation matters); the 1-minute load is recorded
with every run. In the first round every variant's files are hashed and must equal the first
variant's. Prints one Markdown table (medians, ranges, and the median of the paired ratios
to one variant: same round, same file system) and writes
``bench/out/write_paths_<stem>.json``; ``--table FILE.json...`` prints that table again from
saved runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: what the ``always_direct`` and ``no_thread`` variants change before the command starts
PATCHES = {
    # the probe's class never probes: past the cache from 64 MiB
    "always_direct": (
        "init = w._Slices.__init__\n"
        "w._Slices.__init__ = lambda self, f, probe=True: init(self, f, False)\n"
    ),
    # every file written by the caller's thread (no background writer)
    "no_thread": (
        "wf = o.written_file\n"
        "o.written_file = lambda target, flag='--output_path', **_: wf(target, flag)\n"
    ),
}


def prelude(patches: list[str]) -> str:
    body = "".join(PATCHES[p] for p in patches)
    run = "runpy.run_module('jlprof', run_name='__main__', alter_sys=True)\n"
    # the probe lives in jlprof.writer since issue 45, in jlprof.outputs before
    find = "try:\n    import jlprof.writer as w\nexcept ImportError:\n    w = o\n"
    return "import runpy, jlprof.outputs as o\n" + find + body + run


def load() -> str:
    return Path("/proc/loadavg").read_text().split(" ")[0]


def parse_variant(spec: str) -> tuple[str, Path, dict[str, str], list[str]]:
    name, _, rest = spec.partition("=")
    tree, *opts = rest.split(",")
    env, patches = {}, []
    for o in opts:
        if o in PATCHES:
            patches.append(o)
        else:
            k, _, v = o.partition("=")
            env[k] = v
    return name, Path(tree).resolve(), env, patches


def run(export: Path, out: Path, tree: Path, env: dict[str, str], patches: list[str]) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(["sync"], check=False)
    args = [
        f"--database={export}",
        "--key_node=optimizer_step",
        "--reports=all",
        "--formats=csv,json",
        "-v",
        "quiet",
        f"--output_path={out}",
    ]
    entry = ["-c", prelude(patches), *args] if patches else ["-m", "jlprof", *args]
    base = {k: v for k, v in os.environ.items() if not k.startswith("JLPROF_")}
    full_env = {**base, "PYTHONPATH": str(tree), **env}
    before = load()
    p = subprocess.run(
        ["/usr/bin/time", "-f", "TIME %e %M %U %S", sys.executable, *entry],
        env=full_env,
        cwd="/",
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise SystemExit(f"the command failed ({p.returncode}):\n{p.stderr[-2000:]}")
    line = [x for x in p.stderr.splitlines() if x.startswith("TIME ")][-1].split()
    wall, rss_kb, user, system = float(line[1]), int(line[2]), float(line[3]), float(line[4])
    files = sorted(f for f in out.rglob("*") if f.is_file())
    return {
        "wall": wall,
        "user": user,
        "system": system,
        "cpu": round(user + system, 2),
        "rss_mb": round(rss_kb / 1024),
        "load": before,
        "bytes": sum(f.stat().st_size for f in files),
        "files": len(files),
    }


def digests(folder: Path) -> dict[str, str]:
    out = {}
    for f in sorted(folder.rglob("*")):
        if f.is_file() and not f.name.endswith(".sqlite"):  # the database holds a run time
            h = hashlib.blake2b(digest_size=16)
            with f.open("rb") as fh:
                while chunk := fh.read(1 << 22):
                    h.update(chunk)
            out[str(f.relative_to(folder))] = h.hexdigest()
    return out


def _ratio(rows: list[dict], v: str, base: str, key: str) -> float:
    """The median over rounds of ``v``'s ``key`` divided by ``base``'s in the same round on
    the same file system (run minutes apart at most, under about the same load)."""
    got = {x["round"]: x[key] for x in rows if x["variant"] == base}
    return statistics.median(x[key] / got[x["round"]] for x in rows if x["variant"] == v)


def table(rows: list[dict], base: str) -> None:
    """Medians (ranges) per file system and variant; ``×base``: the median of the paired
    ratios to the variant ``base`` (same round, same file system)."""
    print(
        f"\n| fs | variant | rounds | wall s | wall ×{base} | user + system s | CPU ×{base} "
        "| system s | peak RSS MB | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for fs in dict.fromkeys(x["fs"] for x in rows):
        for v in dict.fromkeys(x["variant"] for x in rows):
            rs = [x for x in rows if x["fs"] == fs and x["variant"] == v]
            if not rs:
                continue
            w, c = [x["wall"] for x in rs], [x["cpu"] for x in rs]
            s, m = [x["system"] for x in rs], [x["rss_mb"] for x in rs]
            on_fs = [x for x in rows if x["fs"] == fs]
            rw, rc = _ratio(on_fs, v, base, "wall"), _ratio(on_fs, v, base, "cpu")
            loads = [float(x["load"]) for x in rs]
            print(
                f"| {fs} | {v} | {len(rs)} "
                f"| {statistics.median(w):.2f} ({min(w):.2f}–{max(w):.2f}) | {rw:.3f} "
                f"| {statistics.median(c):.2f} ({min(c):.2f}–{max(c):.2f}) | {rc:.3f} "
                f"| {statistics.median(s):.2f} ({min(s):.2f}–{max(s):.2f}) "
                f"| {statistics.median(m):.0f} | {min(loads):.1f}–{max(loads):.1f} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("export", type=Path, nargs="?")
    ap.add_argument("--target", action="append", help="NAME=FOLDER")
    ap.add_argument("--variant", action="append", help="NAME=TREE[,K=V][,PATCH]")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs first (first target)")
    ap.add_argument("--base", help="the variant the ratios are to (default: the first)")
    ap.add_argument("--table", type=Path, nargs="+", help="only print the table of these JSONs")
    a = ap.parse_args()
    if a.table:
        runs = [x for f in a.table for x in json.loads(f.read_text())["runs"]]
        table(runs, a.base or runs[0]["variant"])
        return
    if not (a.export and a.target and a.variant):
        ap.error("EXPORT, --target and --variant are needed (or --table)")
    export = a.export.resolve()
    targets = [(n, Path(d)) for n, _, d in (t.partition("=") for t in a.target)]
    variants = [parse_variant(v) for v in a.variant]
    for _ in range(a.warmup):
        _name, tree, env, patches = variants[0]
        run(export, targets[0][1] / "jlprof-out", tree, env, patches)
    rows: list[dict] = []
    for r in range(a.rounds):
        for t, (tname, folder) in enumerate(targets):
            k = (r + t) % len(variants)
            ref: dict[str, str] | None = None
            for vname, tree, env, patches in variants[k:] + variants[:k]:
                out = folder / "jlprof-out"
                res = run(export, out, tree, env, patches)
                res.update(round=r, fs=tname, variant=vname)
                rows.append(res)
                print(json.dumps(res), flush=True)
                if r == 0:
                    d = digests(out)
                    if ref is None:
                        ref = d
                    elif d != ref:
                        raise SystemExit(
                            f"{vname} on {tname}: files differ from the first variant's"
                        )
                shutil.rmtree(out, ignore_errors=True)
    subprocess.run(["sync"], check=False)
    table(rows, a.base or variants[0][0])
    dest = HERE / "out" / f"write_paths_{export.stem}.json"
    dest.parent.mkdir(exist_ok=True)
    meta = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "argv": sys.argv}
    dest.write_text(json.dumps({**meta, "runs": rows}, indent=1))
    print(f"\nwrote {dest}")


if __name__ == "__main__":
    main()
