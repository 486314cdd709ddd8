"""A DeepSpeed training loop on CPU (gloo): ``engine(x)``, ``engine.backward(loss)``, ``engine.step()``.

    python examples/deepspeed_job.py [--zero-stage 0|1|2] [--grad-accum N] [--width W]
    torchrun --nproc-per-node 2 examples/deepspeed_job.py

Needs ``deepspeed`` (``DS_BUILD_OPS=0 pip install --no-build-isolation deepspeed``). Run alone
it is one rank of a world of one: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT
(a free port) are set where missing, and DS_ACCELERATOR defaults to ``cpu``. The first run
on a machine JIT-builds DeepSpeed's shared-memory comm op with g++ (≈ 35 s, cached under
~/.cache/torch_extensions); later starts take ≈ 4 s. The torch SGD optimizer is passed in
(``optimizer=``), so no compiled DeepSpeed optimizer is needed; ZeRO stages 1 and 2 wrap it
in ``DeepSpeedZeroOptimizer``. With ``--grad-accum N`` a training step is N micro-batches,
each with its own ``engine.step()`` (DeepSpeed's convention: only the last one updates).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BATCH_SIZE, CLASSES, IN_FEATURES, parse_args, random_data, setup
from _groundtruth import GroundTruth

WIDTH = 1664


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zero-stage", type=int, choices=(0, 1, 2), default=0)
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per training step")
    parser.add_argument("--width", type=int, default=WIDTH, help=f"model width (default {WIDTH})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def single_process_env() -> None:
    """Environment for a world of one, unless a launcher (torchrun, deepspeed) set it."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))


def make_model(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(IN_FEATURES, width), nn.ReLU(), nn.Linear(width, width),
                         nn.ReLU(), nn.Linear(width, CLASSES))


def main() -> None:
    args = parse_args(__doc__, add_args)
    if args.grad_accum < 1:
        raise SystemExit("--grad-accum must be >= 1")
    setup(args)
    single_process_env()
    import deepspeed  # after DS_ACCELERATOR is set: it picks the accelerator on import

    model = make_model(args.width)
    config = {
        "train_micro_batch_size_per_gpu": BATCH_SIZE,
        "gradient_accumulation_steps": args.grad_accum,
        "train_batch_size": BATCH_SIZE * args.grad_accum * int(os.environ["WORLD_SIZE"]),
        "zero_optimization": {"stage": args.zero_stage},
        "zero_allow_untested_optimizer": True,  # torch SGD under ZeRO 1/2
        "steps_per_print": 10**9,
    }
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(),
        optimizer=torch.optim.SGD(model.parameters(), lr=0.01), config=config,
    )
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(TensorDataset(*random_data(BATCH_SIZE * 64)), batch_size=BATCH_SIZE,
                        shuffle=True, drop_last=True)
    gt = GroundTruth.from_env()
    sys.stdout.write(f"ready pid={os.getpid()} rank={os.environ['RANK']}\n")  # one write(): see ddp.py
    sys.stdout.flush()
    gt.start()
    step = micro = 0
    while step < args.steps:
        for x, y in loader:
            gt.phase("input")
            loss = loss_fn(engine(x), y)
            gt.phase("forward")
            engine.backward(loss)
            gt.phase("backward")
            engine.step()
            gt.phase("optimizer")
            micro += 1
            if micro % args.grad_accum:
                continue
            step += 1
            gt.step_done()
            if step >= args.steps:
                break
    gt.close()
    engine.destroy()


if __name__ == "__main__":
    main()
