"""COMPUTE-BOUND example: a wide MLP on in-memory data.

Forward + backward + optimizer take at least 95% of each step; the data is
already a tensor in memory (TensorDataset) and logging is rare.

On a GPU the MLP is made wide enough that a step's kernels take at least
``GPU_STEP_S`` (a 1792-wide one takes ~1 ms on an H100, where the DataLoader's
collation then is most of the step: input-bound). The host only syncs every 50
steps (``loss.item()`` for its log line), so it runs ahead of the GPU and waits
for it there.
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
GPU_STEP_S = 0.04
GPU_WIDTHS = (4096, 8192, 12288, 16384, 24576)


def gpu_width(loss_fn: nn.Module, dataset: TensorDataset, device: torch.device) -> int:
    """The narrowest of GPU_WIDTHS whose step takes GPU_STEP_S (the widest that fits, else)."""
    def step_s(width: int) -> float:
        model = make_mlp(width).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        return calibrate(model, loss_fn, opt, device, dataset, warmup=2, repeats=3)[1]

    width = WIDTH
    for w in GPU_WIDTHS:
        try:
            compute_s = step_s(w)
        except torch.OutOfMemoryError:
            break
        finally:
            torch.cuda.empty_cache()
        width = w
        if compute_s >= GPU_STEP_S:
            break
    return width


def main() -> None:
    args = parse_args(__doc__)
    device = setup(args)
    loss_fn = nn.CrossEntropyLoss()
    dataset = TensorDataset(*random_data(BATCH_SIZE * 100))
    model = make_mlp(gpu_width(loss_fn, dataset, device) if device.type == "cuda" else WIDTH).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
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
