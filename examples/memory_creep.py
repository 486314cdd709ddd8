"""MEMORY CREEP example: the loop keeps every step's loss with its graph alive.

``history.append(loss)`` (instead of ``loss.item()``) keeps each step's activations
reachable, so host memory grows by several MB per step; the classic leak of seed 001.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BATCH_SIZE, announce_ready, device_sync, make_mlp, parse_args, random_data, setup
from _groundtruth import GroundTruth

WIDTH = 1024


def main() -> None:
    args = parse_args(__doc__)
    device = setup(args)
    model = make_mlp(WIDTH).to(device)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    x_all, y_all = random_data(BATCH_SIZE * 16)
    history = []  # the bug: graph-backed losses kept forever
    gt = GroundTruth.from_env(sync=device_sync(device))
    announce_ready()
    gt.start()
    step = 0
    while step < args.steps:
        for i in range(0, len(y_all), BATCH_SIZE):
            x = x_all[i:i + BATCH_SIZE].to(device)
            y = y_all[i:i + BATCH_SIZE].to(device)
            gt.phase("input")
            loss = loss_fn(model(x), y)
            gt.phase("forward")
            loss.backward(retain_graph=True)
            gt.phase("backward")
            opt.step()
            opt.zero_grad()
            gt.phase("optimizer")
            history.append(loss)
            step += 1
            gt.step_done()
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
