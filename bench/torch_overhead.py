"""Cost of jlprof.torch: per op and per training step, against the same loop un-annotated.

    python bench/torch_overhead.py            # without a profiler, then under nsys
    python bench/torch_overhead.py --no-nsys  # only the in-process figures

One training step (forward, loss, backward, SGD step) of two small CPU models: the CNN of
``examples/torch_cnn.py`` (batch 8) and an 8-layer MLP (batch 16). The step is timed in blocks
of ``--steps`` steps, alternating un-annotated and annotated blocks (``init()``/``shutdown()``
between them) so that machine noise hits both alike; the figure is the median over ``--rounds``
rounds. Times are the training thread's CPU time (``time.thread_time``; torch runs with one
intra-op thread), so other load on a shared machine does not count. Ops per step are counted
once by the annotator itself (NVTX ranges pushed), so

    overhead per op = (annotated step - plain step) / ops per step.

A third block runs under a bare ``TorchDispatchMode`` that only calls each op: the part of the
cost that any dispatch-mode annotation pays, whatever it does.

Under nsys (``-t nvtx``, the trace jlprof needs for annotation) the NVTX calls are recorded,
so that run shows the cost a profiled user sees. Prints a Markdown table for BENCHMARKS.md and
writes bench/out/torch_overhead.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _models():
    import torch
    from torch import nn

    spec = importlib.util.spec_from_file_location("torch_cnn", ROOT / "examples" / "torch_cnn.py")
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    torch.manual_seed(0)
    mlp = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(64, 64), nn.ReLU())])
    return {
        "cnn (examples/torch_cnn.py, batch 8)": (ex.Net(), torch.randn(8, 3, 8, 8), 10),
        "mlp 8x(Linear 64 + ReLU), batch 16": (mlp, torch.randn(16, 64), 64),
    }


def _step_fn(model, x, n_out):
    import torch
    import torch.nn.functional as F

    y = torch.zeros(len(x), dtype=torch.long) % n_out
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def _time(step, n: int) -> float:
    """CPU time of this thread per step: on a shared box, time spent descheduled is not ours."""
    t = time.thread_time()
    for _ in range(n):
        step()
    return (time.thread_time() - t) / n


def _ops_per_step(step) -> int:
    """NVTX ranges one annotated step pushes (the annotator's own count)."""
    import jlprof.torch as jt
    from jlprof.torch import annotator

    count = [0]
    real = annotator._lib_push

    def counting(attrs, handle):
        count[0] += 1
        real(attrs, handle)

    annotator._lib_push = counting
    try:
        with jt.init():
            step()
            count[0] = 0
            step()
    finally:
        annotator._lib_push = real
    return count[0] - 1  # the optimizer_step range is not an op


def _bare_mode():
    """A TorchDispatchMode that only calls the op: PyTorch's own cost of any dispatch mode."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Bare(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func._op(*args, **(kwargs or {}))

    return Bare()


def measure(steps: int, rounds: int) -> list[dict]:
    import torch

    import jlprof.torch as jt

    torch.set_num_threads(1)  # a shared 2-core box: one thread keeps the figures steady
    out = []
    for label, (model, x, n_out) in _models().items():
        step = _step_fn(model, x, n_out)
        for _ in range(5):
            step()
        ops = _ops_per_step(step)
        plain, ann, bare = [], [], []
        for _ in range(rounds):
            plain.append(_time(step, steps))
            with _bare_mode():
                bare.append(_time(step, steps))
            with jt.init():
                _time(step, 2)  # warm the text cache of a fresh annotator
                ann.append(_time(step, steps))
        p, a, b = statistics.median(plain), statistics.median(ann), statistics.median(bare)
        out.append(
            {
                "model": label,
                "ops_per_step": ops,
                "plain_step_us": round(p * 1e6, 1),
                "annotated_step_us": round(a * 1e6, 1),
                "overhead_step_pct": round(100 * (a - p) / p, 1),
                "overhead_per_op_us": round((a - p) * 1e6 / ops, 2),
                "bare_mode_per_op_us": round((b - p) * 1e6 / ops, 2),
            }
        )
    return out


def _under_nsys(steps: int, rounds: int) -> list[dict] | None:
    nsys = shutil.which("nsys")
    if nsys is None:
        return None
    from jlprof import nsys as jn

    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp) / "res.json"
        cmd = jn.profile_command(
            [sys.executable, str(Path(__file__)), "--child", str(res), "--steps", str(steps),
             "--rounds", str(rounds)],
            Path(tmp) / "bench", trace=("nvtx",), force=True,
        )  # fmt: skip
        r = jn.run_profile(cmd, on_output=lambda _line: None, timeout=900)
        if r.returncode != 0 or not res.exists():
            print(f"nsys run failed (exit {r.returncode})", file=sys.stderr)
            return None
        return json.loads(res.read_text())


def _table(title: str, rows: list[dict]) -> str:
    lines = [
        f"**{title}**",
        "",
        "| model | ops/step | plain step (µs) | annotated step (µs) | step overhead "
        "| per op (µs) | of which a bare dispatch mode (µs) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['ops_per_step']} | {r['plain_step_us']} | "
            f"{r['annotated_step_us']} | {r['overhead_step_pct']}% | {r['overhead_per_op_us']} | "
            f"{r['bare_mode_per_op_us']} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40, help="steps per timed block")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-nsys", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        Path(a.child).write_text(json.dumps(measure(a.steps, a.rounds)))
        return
    import torch

    results = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average_1min": os.getloadavg()[0],
        "no_profiler": measure(a.steps, a.rounds),
        "under_nsys": None if a.no_nsys else _under_nsys(a.steps, a.rounds),
    }
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "torch_overhead.json").write_text(json.dumps(results, indent=2))
    print(f"{results['date']}, torch {results['torch']}, {results['machine']}, "
          f"load average {results['load_average_1min']:.2f}\n")  # fmt: skip
    print(_table("No profiler attached (NVTX calls inert)", results["no_profiler"]))
    if results["under_nsys"]:
        print()
        print(_table("Under nsys profile -t nvtx (NVTX recorded)", results["under_nsys"]))


if __name__ == "__main__":
    main()
