"""A small CPU "training loop" annotated with NVTX, for the jlprof demo and tests.

It runs anywhere (numpy only, no GPU) and marks what a real PyTorch loop would:
``dataloader`` fetches, ``/model/<layer>/<op>`` forward and backward ops nested in a
``train_step``, and ``optimizer_step`` once per step — jlprof's default key node.

    jlprof --key_node=optimizer_step --reports=all python examples/train_loop.py --steps 8
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import nvtx

LAYERS = (("conv1", "conv2d"), ("relu1", "relu"), ("fc1", "linear"))


def batch(rng: np.random.Generator, path: str, size: int) -> np.ndarray:
    with nvtx.annotate("dataloader"):
        with open(path, "rb") as fh:  # real file I/O, seen by nsys's OS-runtime trace
            raw = fh.read()
        x = np.frombuffer(raw, dtype=np.float32)[: size * 64].reshape(size, 64).copy()
        return x + rng.standard_normal(x.shape, dtype=np.float32) * 0.01


def step(x: np.ndarray, w: list[np.ndarray], lr: float, slow: bool) -> float:
    acts = [x]
    with nvtx.annotate("train_step"):
        for (layer, op), wi in zip(LAYERS, w, strict=True):
            with nvtx.annotate(f"/model/{layer}/{op}"):
                a = acts[-1] @ wi if op != "relu" else np.maximum(acts[-1], 0) @ wi
                acts.append(a)
        loss = float((acts[-1] ** 2).mean())
        for (layer, op), wi, a in reversed(list(zip(LAYERS, w, acts[:-1], strict=True))):
            with nvtx.annotate(f"/model/{layer}/{op}_backward"):
                wi -= lr * (a.T @ acts[-1]) / len(a) * 1e-6
        if slow:
            time.sleep(0.004)  # a hiccup the bad-iteration-range detector should see
        with nvtx.annotate("optimizer_step"):
            for wi in w:
                wi *= 0.9999
    return loss


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    w = [rng.standard_normal((64, 64), dtype=np.float32) * 0.1 for _ in LAYERS]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.bin")
        with open(path, "wb") as fh:
            fh.write(rng.standard_normal(args.batch * 64, dtype=np.float32).tobytes())
        for i in range(args.steps):
            loss = step(batch(rng, path, args.batch), w, 0.01, slow=(i == 0))
        print(f"trained {args.steps} steps, final loss {loss:.4f}")


if __name__ == "__main__":
    main()
