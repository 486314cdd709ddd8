"""A `while True:` loop over `next(it)`, input-bound, with a few ms of compute.

    python examples/while_next.py [--input-ms 77] [--width 512]

One slow DataLoader worker makes each batch in ``--input-ms`` (a stand-in for reading and
decoding from slow storage); the training thread waits for it in ``next(it)`` for about 92% of
every step and then trains a small model for 5-7 ms (the worker makes the next batch meanwhile,
so a step lasts about ``--input-ms``; the sampler is infinite, so ``next(it)`` never stops).
Everything outside the input phase is shorter than one 10 ms sampling interval, so most steps
show no sample outside ``next(it)``: the shape that made wrap-counting merge steps (issue 9).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CLASSES, IN_FEATURES, announce_ready, make_mlp, parse_args, setup
from _groundtruth import GroundTruth

BATCH = 64


class SlowBatches(Dataset):
    """Each index is a whole batch that takes ``cost_s`` to produce (blocking, like slow I/O)."""

    def __init__(self, cost_s: float) -> None:
        self.cost_s = cost_s
        self.x = torch.randn(BATCH, IN_FEATURES)
        self.y = torch.randint(0, CLASSES, (BATCH,))

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.cost_s)
        return self.x, self.y


class Forever(Sampler[int]):
    """0, 1, 2, ... without end: the loop never sees StopIteration."""

    def __iter__(self):
        return itertools.count()


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input-ms", type=float, default=77.0, help="time to make one batch (default 77)")
    parser.add_argument("--width", type=int, default=512, help="model width (default 512: 5-7 ms of compute)")


def main() -> None:
    args = parse_args(__doc__, add_args)
    device = setup(args)
    model = make_mlp(args.width).to(device)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # batch_size=None: the dataset yields whole batches; one worker, so the loop waits for it
    loader = DataLoader(SlowBatches(args.input_ms / 1000), batch_size=None, sampler=Forever(), num_workers=1)
    it = iter(loader)
    gt = GroundTruth.from_env()
    announce_ready()
    gt.start()
    step = 0
    while True:
        x, y = next(it)
        gt.phase("input")
        loss = loss_fn(model(x.to(device)), y.to(device))
        gt.phase("forward")
        loss.backward()
        gt.phase("backward")
        opt.step()
        opt.zero_grad()
        gt.phase("optimizer")
        step += 1
        gt.step_done()
        if step >= args.steps:
            break
    gt.close()


if __name__ == "__main__":
    main()
