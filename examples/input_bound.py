"""INPUT-BOUND example: per-sample decoding in the Dataset starves the model.

``decode_sample`` (a stand-in for JPEG decode + augmentation) is sized at
start-up so that fetching a batch with ``--workers 0`` takes as long as the
training compute, i.e. input is about 50% of each step.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    BATCH_SIZE,
    EncodedSamples,
    announce_ready,
    calibrate,
    device_sync,
    make_mlp,
    parse_args,
    pinned,
    plan_work,
    setup,
)
from _groundtruth import GroundTruth

WIDTH = 1280


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=0, help="DataLoader num_workers (default 0)")
    parser.add_argument("--input-share", type=float, default=0.5,
                        help="input's share of the step (default 0.5; 0.9 with a small --width: a few ms of compute)")
    parser.add_argument("--width", type=int, default=WIDTH, help=f"model width (default {WIDTH})")
    parser.add_argument("--slow-input-after-s", type=float, default=None,
                        help="from this many seconds after ready on, decoding takes --slow-input-factor times as "
                             "long (a change point: tests/test_changes.py; --workers 0 only)")
    parser.add_argument("--slow-input-factor", type=float, default=2.0)


def main() -> None:
    args = parse_args(__doc__, add_args)
    device = setup(args)
    model = make_mlp(args.width).to(device)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dataset = EncodedSamples(BATCH_SIZE * 100)

    # Calibrate: batch decoding is sized so that input is --input-share of the step.
    measured = calibrate(model, loss_fn, opt, device, dataset)
    fetch_s, compute_s = (pinned(key, lambda v=v: v) for key, v in zip(("fetch_s", "compute_s"), measured, strict=True))
    input_s, _ = plan_work(compute_s, args.input_share, 0.0, input_base_s=fetch_s)
    dataset.decode_cost_s = input_s / BATCH_SIZE

    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, drop_last=True,
                        num_workers=args.workers, persistent_workers=args.workers > 0,
                        pin_memory=device.type == "cuda")
    gt = GroundTruth.from_env(sync=device_sync(device))
    announce_ready(compute=compute_s, input_work=input_s)
    gt.start()
    step = 0
    slow_at = None if args.slow_input_after_s is None else time.monotonic() + args.slow_input_after_s
    while step < args.steps:
        for x, y in loader:
            if slow_at is not None and time.monotonic() >= slow_at:
                dataset.decode_cost_s *= args.slow_input_factor
                slow_at = None
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
