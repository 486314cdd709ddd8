"""WAIT-HEAVY example: the loop spends ~40% of each step outside the model.

Every step syncs on ``loss.item()`` for logging and runs a slow
``report_metrics`` (busy CPU work); every few steps it writes a checkpoint
with ``torch.save``. Data is in memory, so input stays under 5%.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    BATCH_SIZE,
    announce_ready,
    burn_cpu,
    calibrate,
    device_sync,
    make_mlp,
    median_time,
    parse_args,
    pinned,
    plan_work,
    random_data,
    setup,
)
from _groundtruth import GroundTruth

WIDTH = 1408
CHECKPOINT_EVERY = 10  # steps
WAIT_SHARE = 0.40


def report_metrics(losses: list[float], cost_s: float) -> float:
    """Pretend to compute and ship metrics: pure CPU work. Returns the mean loss."""
    burn_cpu(cost_s)
    return statistics.fmean(losses[-50:])


def save_checkpoint(model: nn.Module, opt: torch.optim.Optimizer, step: int, path: Path) -> None:
    torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, path)


def add_args(parser: argparse.ArgumentParser) -> None:
    # the fixes, for bench/whatif_bench.py's second runs (calibrated as without them)
    parser.add_argument("--no-metrics", action="store_true", help="skip report_metrics (the slow per-step logging)")
    parser.add_argument("--no-checkpoint", action="store_true", help="never write the checkpoint")


def main() -> None:
    args = parse_args(__doc__, add_args)
    device = setup(args)
    model = make_mlp(WIDTH).to(device)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dataset = TensorDataset(*random_data(BATCH_SIZE * 100))
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, drop_last=True,
                        pin_memory=device.type == "cuda")
    ckpt_dir = tempfile.TemporaryDirectory(prefix="traceml-ckpt-")  # removed at exit
    # SIGTERM (how tests and tools stop us) becomes SystemExit, so the exit cleanup runs.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    ckpt_path = Path(ckpt_dir.name) / "last.pt"

    # Calibrate: metrics + amortised checkpoint cost = WAIT_SHARE of the step.
    _, measured_s = calibrate(model, loss_fn, opt, device, dataset)
    compute_s = pinned("compute_s", lambda: measured_s)
    ckpt_s = pinned("ckpt_s", lambda: median_time(lambda: save_checkpoint(model, opt, 0, ckpt_path), 3, device))
    _, metrics_s = plan_work(compute_s, 0.0, WAIT_SHARE, wait_base_s=ckpt_s / CHECKPOINT_EVERY)

    gt = GroundTruth.from_env(sync=device_sync(device))
    announce_ready(compute=compute_s, checkpoint=ckpt_s, wait_work=metrics_s)
    gt.start()
    step = 0
    losses: list[float] = []
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
            losses.append(loss.item())
            mean_loss = losses[-1] if args.no_metrics else report_metrics(losses, metrics_s)
            if step % CHECKPOINT_EVERY == 0 and not args.no_checkpoint:
                save_checkpoint(model, opt, step, ckpt_path)
            if step % 50 == 0:
                print(f"step {step} loss {mean_loss:.4f}", flush=True)
            gt.step_done()
            if step >= args.steps:
                break
    gt.close()


if __name__ == "__main__":
    main()
