"""``opt.step(closure)``: zero_grad, forward, loss and backward run inside the optimizer's step.

The LBFGS-style loop shape, with SGD (momentum 0.9) so that the optimizer's own work inside
``torch/optim/`` stays small. Per-sample ``decode_sample`` is sized at start-up so that input is
--input-share (default 0.05) of the step. About 100 ms a step on one core.

Ground truth (TRACEML_GROUND_TRUTH): one record per step, marked in the loop and in the closure:
input until the batch is in hand; optimizer from there to the end of ``opt.zero_grad()`` in the
closure (the way into ``SGD.step`` included); forward (model and loss) and backward inside the
closure; optimizer again from the closure's return to ``opt.step`` returning (the SGD update).
"""

from __future__ import annotations

import argparse
import sys
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
    plan_work,
    setup,
)
from _groundtruth import GroundTruth

WIDTH = 1408


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input-share", type=float, default=0.05,
                        help="decode_sample's share of the step (default 0.05)")
    parser.add_argument("--width", type=int, default=WIDTH, help=f"model width (default {WIDTH})")


def main() -> None:
    args = parse_args(__doc__, add_args)
    device = setup(args)
    model = make_mlp(args.width).to(device)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dataset = EncodedSamples(BATCH_SIZE * 64)
    fetch_s, compute_s = calibrate(model, loss_fn, opt, device, dataset)
    input_s, _ = plan_work(compute_s, args.input_share, 0.0, input_base_s=fetch_s)
    dataset.decode_cost_s = input_s / BATCH_SIZE

    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, drop_last=True)
    gt = GroundTruth.from_env(sync=device_sync(device))
    announce_ready(compute=compute_s, input_work=input_s)
    gt.start()
    step = 0
    while step < args.steps:
        for x, y in loader:
            gt.phase("input")
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            gt.phase("h2d")

            # called before the next batch is drawn: binding x and y now only quiets the linter
            def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
                opt.zero_grad()
                gt.phase("optimizer")
                loss = loss_fn(model(x), y)
                gt.phase("forward")
                loss.backward()
                gt.phase("backward")
                return loss

            opt.step(closure)
            gt.phase("optimizer")
            step += 1
            gt.step_done()
            if step >= args.steps:
                break
    gt.close()


if __name__ == "__main__":
    main()
