"""Gradient accumulation in a plain loop: --accum micro-batches of forward + backward per optimizer step.

--accum (default 4) micro-batches of --micro-batch samples (default 256) make one optimizer step;
every N-th micro-batch ends with ``opt.step()`` and ``opt.zero_grad()``. Per-sample
``decode_sample`` is sized at start-up so that input is --input-share (default 0.05:
COMPUTE-BOUND) of the step, spread over the N fetches (one before every micro-batch).
``--autocast`` runs forward and loss under bf16 CPU autocast; ``--compile`` runs the model
through ``torch.compile`` (inductor; compiled during calibration, before ``ready``). About 75 ms
a micro-batch on one core, 300 ms an optimizer step (--micro-batch 64: about 70 ms an optimizer
step, micro-batches too short to be told apart at 100 Hz). ``--stream`` makes the micro-batches in a
hand-written generator (no DataLoader); ``--opt-repeat R`` runs the update R times (a long optimizer).

Ground truth (TRACEML_GROUND_TRUTH): one record per optimizer step, with ``micro_batches``; the
phases are marked around each part of the loop as in the other plain examples.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, default_collate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    BATCH_SIZE,
    EncodedSamples,
    announce_ready,
    device_sync,
    make_mlp,
    parse_args,
    plan_work,
    setup,
)
from _groundtruth import GroundTruth

WIDTH = 1280


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--accum", type=int, choices=(1, 2, 4, 8, 16), default=4,
                        help="micro-batches per optimizer step (default 4)")
    parser.add_argument("--micro-batch", type=int, default=BATCH_SIZE,
                        help=f"samples per micro-batch (default {BATCH_SIZE})")
    parser.add_argument("--autocast", action="store_true", help="forward and loss under bf16 CPU autocast")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--input-share", type=float, default=0.05,
                        help="decode_sample's share of the step (default 0.05)")
    parser.add_argument("--width", type=int, default=WIDTH, help=f"model width (default {WIDTH})")
    parser.add_argument("--stream", action="store_true",
                        help="micro-batches from a hand-written generator instead of a DataLoader")
    parser.add_argument("--opt-repeat", type=int, default=1,
                        help="optimizer.step() runs this many times per optimizer step (default 1; a long update)")


def calibrate(model: nn.Module, loss_fn: nn.Module, opt: torch.optim.Optimizer, dataset: EncodedSamples,
              args: argparse.Namespace, device: torch.device, warmup: int = 2,
              repeats: int = 5) -> tuple[float, float]:
    """Median seconds (work clock) to fetch an optimizer step's micro-batches and to train on them.

    The first calls compile the model with --compile.
    """
    # the clock setup() sizes burn_cpu in: thread CPU time when one thread does all the work
    clock = time.thread_time if device.type == "cpu" and args.threads == 1 else time.perf_counter
    sync = device_sync(device) or (lambda: None)
    fetch_s, compute_s = [], []
    for i in range(warmup + repeats):
        fetch = compute = 0.0
        for _ in range(args.accum):
            idx = torch.randint(len(dataset), (args.micro_batch,)).tolist()
            t0 = clock()
            x, y = default_collate([dataset[j] for j in idx])
            t1 = clock()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.autocast):
                loss = loss_fn(model(x.to(device)), y.to(device)) / args.accum
            loss.backward()
            sync()
            fetch, compute = fetch + t1 - t0, compute + clock() - t1
        t0 = clock()
        for _ in range(args.opt_repeat):
            opt.step()
        opt.zero_grad()
        sync()
        if i >= warmup:
            fetch_s.append(fetch)
            compute_s.append(compute + clock() - t0)
    return statistics.median(fetch_s), statistics.median(compute_s)


def stream(dataset: EncodedSamples, size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Micro-batches of random samples, made by hand (no DataLoader), for one pass of the data."""
    for _ in range(len(dataset) // size):
        idx = torch.randint(len(dataset), (size,)).tolist()
        yield default_collate([dataset[j] for j in idx])


def main() -> None:
    args = parse_args(__doc__, add_args)
    device = setup(args)
    model = make_mlp(args.width).to(device)
    if args.compile:
        model = torch.compile(model)  # type: ignore[assignment]
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    dataset = EncodedSamples(BATCH_SIZE * 64)
    fetch_s, compute_s = calibrate(model, loss_fn, opt, dataset, args, device)
    input_s, _ = plan_work(compute_s, args.input_share, 0.0, input_base_s=fetch_s)
    dataset.decode_cost_s = input_s / (args.micro_batch * args.accum)

    loader: Iterable[tuple[torch.Tensor, torch.Tensor]] = (
        stream(dataset, args.micro_batch) if args.stream
        else DataLoader(dataset, batch_size=args.micro_batch, shuffle=True, drop_last=True))
    gt = GroundTruth.from_env(sync=device_sync(device))
    announce_ready(compute=compute_s, input_work=input_s)
    gt.start()
    step = micro_batches = 0
    while step < args.steps:
        if args.stream:
            loader = stream(dataset, args.micro_batch)
        for x, y in loader:
            gt.phase("input")
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            gt.phase("h2d")
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.autocast):
                loss = loss_fn(model(x), y) / args.accum
            gt.phase("forward")
            loss.backward()
            gt.phase("backward")
            micro_batches += 1
            if micro_batches < args.accum:
                continue
            for _ in range(args.opt_repeat):
                opt.step()
            opt.zero_grad()
            gt.phase("optimizer")
            step += 1
            gt.step_done(micro_batches)
            micro_batches = 0
            if step >= args.steps:
                break
    gt.close()


if __name__ == "__main__":
    main()
