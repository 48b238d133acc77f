"""In-place mode vs the sidecar: cell end → Profile shown, and a kernel under ``nsys launch``.

    JUPYTER_PATH=jupyter-config python bench/inplace_bench.py [--steps 50] [--repeat 5]

Two real kernels through nbclient, in a temporary folder: ``python3`` (``%%dlprof`` runs the
cell in the sidecar; the loop's function defined in a ``--setup`` cell) and ``jlprof-inplace``
(the notebook's own kernel under ``nsys launch``; ``%%dlprof`` = ``nsys start``/``stop``).
(a) cell end → Profile ready: the sum of the steps after the cell body that ``-v detailed``
prints (stop capture, finalise, import, export, analyse, reports); (b) the whole cell's wall
time as the client sees it. (c) not capturing: a loop of NVTX ranges and a plain Python loop
timed in each kernel's own process (best of 5), the sidecar's notebook kernel being a plain one.
Medians of --repeat, the two kernels interleaved. Prints Markdown rows for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time

import nbformat
from nbclient import NotebookClient

DEF = (
    "import time\nimport nvtx\n"
    "def step():\n"
    '    with nvtx.annotate("train_step"), nvtx.annotate("optimizer_step"):\n'
    "        sum(range(20000))\n"
)
LOOPS = (
    "import time, nvtx\n"
    "def ranges(n=100000):\n    t = time.perf_counter()\n    for _ in range(n):\n"
    '        with nvtx.annotate("x"):\n            pass\n    return time.perf_counter() - t\n'
    "def plain(n=2000000):\n    t = time.perf_counter()\n    s = 0\n    for i in range(n):\n"
    "        s += i\n    return time.perf_counter() - t\n"
    "print('LOOPS', min(ranges() for _ in range(5)), min(plain() for _ in range(5)))"
)


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


def run(kernel: str, steps: int, repeat: int, tmp: str) -> dict[str, list[float]]:
    setup = ("%%dlprof --setup\n" if kernel == "python3" else "") + DEF
    prof = f"%%dlprof -v detailed --key_node=optimizer_step\nfor _ in range({steps}):\n    step()"
    srcs = ["%load_ext jlprof", setup, *[prof] * repeat, LOOPS]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in srcs]
    client = NotebookClient(
        nb, kernel_name=kernel, timeout=600, resources={"metadata": {"path": tmp}}
    )
    out: dict[str, list[float]] = {"after": [], "cell": [], "ranges": [], "plain": []}
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            t0 = time.perf_counter()
            client.execute_cell(cell, i)
            wall = time.perf_counter() - t0
            text = _text(cell)
            if "after the cell:" in text:
                line = text.split("after the cell:")[1].splitlines()[0]
                parts = re.findall(r"([a-zA-Z][a-zA-Z ]*?) ([\d.]+) s", line)
                out["after"].append(sum(float(v) for _, v in parts))
                for name, v in parts:
                    out.setdefault(name.strip(), []).append(float(v))
                out["cell"].append(wall)
            if "LOOPS" in text:
                r, p = text.split("LOOPS")[1].split()[:2]
                out["ranges"].append(float(r))
                out["plain"].append(float(p))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    agg: dict[str, dict[str, list[float]]] = {"python3": {}, "jlprof-inplace": {}}
    for _ in range(args.rounds):
        for kernel in agg:
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    got = run(kernel, args.steps, args.repeat, tmp)
                except RuntimeError as exc:  # counted, never hidden: the note says how many
                    print(f"{kernel}: {exc}")
                    agg[kernel].setdefault("failed", []).append(1.0)
                    continue
                for k, v in got.items():
                    agg[kernel].setdefault(k, []).extend(v)
    for kernel, vals in agg.items():
        med = {k: statistics.median(v) for k, v in vals.items()}
        print(
            f"| {kernel} | {med['after']:.2f} s | {med['cell']:.2f} s | "
            f"{med['ranges'] * 1e3:.0f} ms | {med['plain'] * 1e3:.0f} ms | n={len(vals['after'])}, "
            f"failed starts {len(vals.get('failed', []))} |"
        )
        steps = [k for k in vals if k not in ("after", "cell", "ranges", "plain", "failed")]
        print(
            f"  {kernel} steps: "
            + ", ".join(f"{k} {statistics.median(vals[k]):.2f} s" for k in steps)
        )


if __name__ == "__main__":
    main()
