"""A tiny PyTorch CNN training loop, for ``jlprof --mode=pytorch`` and the jlprof.torch tests.

    jlprof --mode=pytorch --reports=detail,expert_systems python examples/torch_cnn.py --steps 4

The script never imports jlprof: in ``pytorch`` mode jlprof enables its annotation when the
script imports torch. ``--annotate`` calls ``jlprof.torch.init()`` itself (plain ``nsys`` runs).
The other flags switch on what the expert systems look for (a slow debugging API, AMP, ...).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Block(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(x))


class Net(nn.Module):
    """Two calls of one block (names ``/Net/block``, ``/Net/block(2)``) and a classifier."""

    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.block = Block(width, width)
        self.fc = nn.Linear(width * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.block(self.block(self.stem(x)))
        return self.fc(x.flatten(1))


class SlowDataset(torch.utils.data.Dataset):
    """Every sample costs ``delay_s`` of host time, as a heavy decode/augment would."""

    def __init__(self, inner: TensorDataset, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int):
        time.sleep(self.delay_s)
        return self.inner[i]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--annotate", action="store_true", help="call jlprof.torch.init() here")
    ap.add_argument("--stack", action="store_true", help="with --annotate: record stack traces")
    ap.add_argument("--amp", action="store_true", help="bfloat16 autocast around the forward")
    ap.add_argument("--benchmark", action="store_true", help="torch.backends.cudnn.benchmark")
    ap.add_argument("--anomaly", action="store_true", help="torch.autograd.detect_anomaly()")
    ap.add_argument("--item", action="store_true", help="loss.item() every step (a host sync)")
    ap.add_argument(
        "--slow-data", type=float, default=0.0, metavar="MS", help="sleep per sample in the Dataset"
    )
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = args.benchmark
    if args.annotate:
        import jlprof.torch

        jlprof.torch.init(stack_trace=args.stack)
    n = args.steps * args.batch
    data = TensorDataset(torch.randn(n, 3, 8, 8), torch.randint(0, 10, (n,)))
    if args.slow_data:
        data = SlowDataset(data, args.slow_data / 1e3)
    loader = DataLoader(data, batch_size=args.batch)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
            if args.anomaly:
                with torch.autograd.detect_anomaly():
                    loss = F.cross_entropy(model(x), y)
            else:
                loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.item:
            loss.item()
    print(f"trained {args.steps} steps")


if __name__ == "__main__":
    main()
