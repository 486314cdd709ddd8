"""A plain training loop driven by ``accelerate.Accelerator``: ``prepare()``, ``accelerator.backward``.

Per-sample ``decode_sample`` in ``Dataset.__getitem__`` is sized at start-up so that input is
--input-share (default 0.3: INPUT-BOUND) of the step. ``--grad-accum N`` wraps each micro-batch in
``accelerator.accumulate(model)`` (``gradient_accumulation_steps=N``) and splits the batch of 256 into
N micro-batches of 256/N; the prepared optimizer skips its step and zero_grad until
``accelerator.sync_gradients``. About 90 ms a step on one core. Under torchrun the Accelerator
picks up the launcher's environment and runs DDP over gloo:

    torchrun --nproc-per-node 2 examples/accelerate_job.py --straggler input --slow-rank 1 --input-share 0.05

(the slow rank's ``decode_sample`` takes --extra-ms more per step: INPUT STRAGGLER).

Ground truth (TRACEML_GROUND_TRUTH, ``{rank}`` in the path for one file a rank): one record per
optimizer step (when ``accelerator.sync_gradients``), with ``micro_batches``, marked around each
part of the loop as in the other plain examples. Under DDP the all-reduce is inside
``accelerator.backward``, so a fast rank waits in backward.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    BATCH_SIZE,
    EncodedSamples,
    add_input_straggler_args,
    calibrate,
    device_sync,
    make_mlp,
    parse_args,
    plan_work,
    setup,
    straggler_input_s,
)
from _groundtruth import GroundTruth

WIDTH = 1024


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input-share", type=float, default=0.3,
                        help="decode_sample's share of the step (default 0.3)")
    parser.add_argument("--grad-accum", type=int, choices=(1, 2, 4, 8), default=1,
                        help=f"gradient_accumulation_steps, over micro-batches of {BATCH_SIZE}/N samples (default 1)")
    parser.add_argument("--width", type=int, default=WIDTH, help=f"model width (default {WIDTH})")
    add_input_straggler_args(parser)


def main() -> None:
    args = parse_args(__doc__, add_args)
    device = setup(args)
    accelerator = Accelerator(cpu=device.type == "cpu", gradient_accumulation_steps=args.grad_accum)
    rank = accelerator.process_index
    model = make_mlp(args.width)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    dataset = EncodedSamples(BATCH_SIZE * 64)

    fetch_s, compute_s = calibrate(model, loss_fn, torch.optim.AdamW(model.parameters()), device, dataset)
    input_s, _ = plan_work(compute_s, args.input_share, 0.0, input_base_s=fetch_s)
    input_s += straggler_input_s(args, rank)
    dataset.decode_cost_s = input_s / BATCH_SIZE

    loader = DataLoader(dataset, batch_size=BATCH_SIZE // args.grad_accum, shuffle=True, drop_last=True)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    gt = GroundTruth.from_env(sync=device_sync(device))
    print(f"calibrated compute={compute_s * 1e3:.1f}ms input_work={input_s * 1e3:.1f}ms", file=sys.stderr, flush=True)
    ranked = f" rank={rank}" if accelerator.num_processes > 1 else ""
    # one write(): the ranks share the launcher's stdout, and print() writes the newline apart
    sys.stdout.write(f"ready pid={os.getpid()}{ranked}\n")
    sys.stdout.flush()
    gt.start()
    step = micro = 0
    while step < args.steps:
        for x, y in loader:
            gt.phase("input")
            with accelerator.accumulate(model):
                gt.phase("wait")
                loss = loss_fn(model(x), y)
                gt.phase("forward")
                accelerator.backward(loss)
                gt.phase("backward")
                opt.step()
                opt.zero_grad()
                gt.phase("optimizer")
            micro += 1
            if accelerator.sync_gradients:
                step += 1
                gt.step_done(micro)
                micro = 0
                if step >= args.steps:
                    break
    gt.close()
    accelerator.end_training()


if __name__ == "__main__":
    main()
