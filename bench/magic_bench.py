"""Benchmark ``%%dlprof`` against the plain nsys workflow for the same small training loop.

    python bench/magic_bench.py [--steps 50] [--repeat 5]

(a) plain: ``nsys profile`` of a script running the loop (``examples/train_loop.py``), then the
    Debian build's missing import step (QdstrmImporter; NVIDIA's builds do it inside nsys) and
    ``nsys export --type sqlite``: the wall time until a SQLite export exists.
(b) ``%%dlprof --key_node=optimizer_step`` around the same loop in an IPython shell whose sidecar
    is already running (imports and data in a ``--setup`` cell, as in a notebook): the wall time
    of the whole cell, capture + finalise + import + export + analysis + reports + display.
(c) cell end → result displayed: from the last line of the cell body (a timestamp taken in the
    sidecar) to the moment the magic returned with the Profile displayed.
(d) the first ``%%dlprof`` of a session, sidecar start included (once).

Prints a Markdown table for BENCHMARKS.md and writes bench/out/magic.json. Medians of --repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

SETUP = f"""
import os, sys, tempfile, time
import numpy as np
sys.path.insert(0, {str(ROOT / "examples")!r})
from train_loop import LAYERS, batch, step
rng = np.random.default_rng(0)
weights = [rng.standard_normal((64, 64), dtype=np.float32) * 0.1 for _ in LAYERS]
data = os.path.join(tempfile.mkdtemp(), "data.bin")
with open(data, "wb") as fh:
    fh.write(rng.standard_normal(64 * 64, dtype=np.float32).tobytes())
"""


def cell_body(steps: int) -> str:
    return (
        f"for i in range({steps}):\n"
        "    loss = step(batch(rng, data, 64), weights, 0.01, slow=False)\n"
        "print('CELL_END', repr(time.time()))\n"
    )


def plain(steps: int, out: Path) -> float:
    """nsys profile + import + export of the script, as a user would type them."""
    from jlprof.nsys import find_nsys

    info = find_nsys()
    base = out / f"plain-{time.time_ns()}"
    t0 = time.perf_counter()
    subprocess.run(
        [str(info.path), "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none",
         f"--output={base}", "--force-overwrite=true", sys.executable,
         str(ROOT / "examples" / "train_loop.py"), "--steps", str(steps)],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    rep = base.with_suffix(".nsys-rep")
    if not rep.exists():  # Debian's nsys 2022.4 leaves the .qdstrm for us to import
        assert info.importer is not None
        subprocess.run(
            [str(info.importer), "-i", f"{base}.qdstrm", "-o", str(rep)],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    subprocess.run(
        [str(info.path), "export", "--type", "sqlite", "--force-overwrite", "true", "--output",
         f"{base}.sqlite", str(rep)],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - t0


def magic_cell(ip, steps: int) -> tuple[float, float, dict[str, float]]:
    """(cell wall s, cell end -> result displayed s, per-step s) of one %%dlprof cell."""
    from IPython.utils.capture import capture_output

    t0 = time.perf_counter()
    with capture_output() as out:
        ip.run_cell(f"%%dlprof --key_node=optimizer_step -v minimal\n{cell_body(steps)}")
    done_wall = time.time()
    wall = time.perf_counter() - t0
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("CELL_END"))
    if not isinstance(ip.user_ns.get("_dlprof"), object) or not out.outputs:
        raise RuntimeError(f"no profile displayed: {out.stderr[-500:]}")
    steps_s = ip.magics_manager.registry["DlprofMagics"].last_result.timings_s
    return wall, done_wall - float(line.split()[1]), dict(steps_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    work = Path(tempfile.mkdtemp(prefix="jlprof-magic-bench-"))
    os.chdir(work)
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jlprof")
    t0 = time.perf_counter()
    with capture_output():
        ip.run_cell(f"%%dlprof --setup\n{SETUP}")
    first_wall, _, _ = magic_cell(ip, args.steps)
    cold = time.perf_counter() - t0
    plain_s, cell_s, end_s, parts = [], [], [], []
    for _ in range(args.repeat):  # interleaved, so load on the shared box hits both alike
        plain_s.append(plain(args.steps, work))
        wall, end, part = magic_cell(ip, args.steps)
        parts.append(part)
        cell_s.append(wall)
        end_s.append(end)
    ip.magics_manager.registry["DlprofMagics"].session.shutdown()
    res = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load": os.getloadavg()[0],
        "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}",
        "steps": args.steps,
        "repeat": args.repeat,
        "plain_s": plain_s,
        "cell_s": cell_s,
        "cell_end_to_result_s": end_s,
        "first_cell_with_sidecar_start_s": cold,
        "first_cell_only_s": first_wall,
        "after_cell_steps_s": parts,
    }
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "magic.json").write_text(json.dumps(res, indent=2))
    med = statistics.median
    ratio = med(cell_s) / med(plain_s)
    print(f"| measure ({res['date']}, load {res['load']:.1f}, {args.steps} steps, "
          f"median of {args.repeat}) | value |")  # fmt: skip
    print("|---|---|")
    print(f"| (a) script under `nsys profile` + import + `nsys export` | {med(plain_s):.2f} s |")
    print(
        f"| (b) `%%dlprof` cell, warm sidecar (capture → reports → display) | {med(cell_s):.2f} s |"
    )
    print(f"| (b)/(a) | **{ratio:.2f}** |")
    print(f"| (c) cell end → result displayed | {med(end_s):.2f} s |")
    for name in parts[0]:
        print(f"| (c) of which: {name} | {med(p.get(name, 0.0) for p in parts):.2f} s |")
    print(f"| (d) first `%%dlprof` incl. sidecar start + setup cell | {cold:.2f} s |")


if __name__ == "__main__":
    main()
