"""COMPUTE-BOUND example: a wide MLP on in-memory data.

Forward + backward + optimizer take at least 95% of each step; the data is
already a tensor in memory (TensorDataset) and logging is rare.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    BATCH_SIZE,
    announce_ready,
    calibrate,
    device_sync,
    make_mlp,
    parse_args,
    random_data,
    setup,
)
from _groundtruth import GroundTruth

WIDTH = 1792


def main() -> None:
    args = parse_args(__doc__)
    device = setup(args)
    model = make_mlp(WIDTH).to(device)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dataset = TensorDataset(*random_data(BATCH_SIZE * 100))
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, drop_last=True,
                        pin_memory=device.type == "cuda")
    _, compute_s = calibrate(model, loss_fn, opt, device, dataset)  # warm-up; nothing to size

    gt = GroundTruth.from_env(sync=device_sync(device))
    announce_ready(compute=compute_s)
    gt.start()
    step = 0
    while step < args.steps:
        for x, y in loader:
            gt.phase("input")
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            gt.phase("h2d")
            out = model(x)
            loss = loss_fn(out, y)
            gt.phase("forward")
            loss.backward()
            gt.phase("backward")
            opt.step()
            opt.zero_grad()
            gt.phase("optimizer")
            step += 1
            if step % 50 == 0:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
            gt.step_done()
            if step >= args.steps:
                break
    gt.close()


if __name__ == "__main__":
    main()
