"""DDP on CPU (gloo), run under torchrun: balanced, or one rank made slow in one way.

    torchrun --nproc-per-node 2 examples/ddp.py --straggler input --slow-rank 1

--device cuda         each rank on GPU LOCAL_RANK modulo the GPUs there are (several ranks may
                      share one), still over gloo, which all-reduces CUDA tensors and, unlike
                      NCCL, lets ranks share a GPU; the batch is copied in its own phase (h2d)

--straggler input     the slow rank's Dataset preprocessing is heavier (INPUT STRAGGLER)
--straggler compute   the slow rank does extra work in its forward (COMPUTE STRAGGLER)
--straggler backward  the slow rank's backward is slower (a gradient hook): every rank's
                      backward is then equally long, because the fast ranks wait in the
                      all-reduce; only their waiting tells the culprit apart
--slow-rank -1       the slow rank is drawn at random each step (compute: no rank is always late)
--hang-at-step N      the slow rank blocks forever at step N (HANG: the others wait in backward)
--exit-at-step N      the slow rank exits with --exit-code at step N (on the first attempt only,
                      so torchrun --max-restarts 1 restarts the workers once)
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BATCH_SIZE, CLASSES, IN_FEATURES, burn_cpu, parse_args, setup
from _groundtruth import GroundTruth

WIDTH = 1536


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--straggler", choices=("none", "input", "compute", "backward"), default="none")
    parser.add_argument("--slow-rank", type=int, default=1,
                        help="the slow rank; -1: one drawn at random each step (the same draw on every rank)")
    parser.add_argument("--extra-ms", type=float, default=60.0, help="the slow rank's extra work per step")
    parser.add_argument("--base-input-ms", type=float, default=3.0, help="every rank's preprocessing per step")
    parser.add_argument("--width", type=int, default=WIDTH, help=f"model width (default {WIDTH}; 64: a 2-3 ms step)")
    parser.add_argument("--hang-at-step", type=int, default=-1)
    parser.add_argument("--exit-at-step", type=int, default=-1)
    parser.add_argument("--exit-code", type=int, default=3)


def preprocess(raw: torch.Tensor, cost_s: float) -> torch.Tensor:
    burn_cpu(cost_s)
    return raw


class Samples(Dataset):
    def __init__(self, n: int, cost_s: float) -> None:
        self.x = torch.randn(n, IN_FEATURES)
        self.y = torch.randint(0, CLASSES, (n,))
        self.cost_s = cost_s

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return preprocess(self.x[i], self.cost_s), self.y[i]


class Net(nn.Module):
    def __init__(self, extra_s: float, width: int = WIDTH) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(IN_FEATURES, width), nn.ReLU(), nn.Linear(width, width),
                                  nn.ReLU(), nn.Linear(width, CLASSES))
        self.extra_s = extra_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.extra_s:
            rank_local_extra_work(self.extra_s)
        return self.body(x)


def rank_local_extra_work(seconds: float) -> None:
    burn_cpu(seconds)


def slow_gradient_hook(seconds: float):
    def hook(grad: torch.Tensor) -> torch.Tensor:
        burn_cpu(seconds)
        return grad
    return hook


def fetch_from_slow_store() -> None:
    time.sleep(3600)  # a stuck read: this rank never reaches the next all-reduce


def main() -> None:
    args = parse_args(__doc__, add_args)
    setup(args)   # (exits where --device cuda finds none)
    device = torch.device("cpu")
    if args.device == "cuda":   # (not "auto": the CPU job stays the CPU job on a GPU machine)
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    slow = rank == args.slow_rank
    drawn = args.slow_rank == -1 and args.straggler == "compute"   # a new slow rank every step
    extra = args.extra_ms / 1000
    input_cost = (args.base_input_ms / 1000 + (extra if slow and args.straggler == "input" else 0.0)) / BATCH_SIZE
    net = Net(extra if slow and args.straggler == "compute" else 0.0, args.width).to(device)
    model = DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    if slow and args.straggler == "backward":
        model.module.body[0].weight.register_hook(slow_gradient_hook(extra))
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Samples(BATCH_SIZE * 64, input_cost), batch_size=BATCH_SIZE, drop_last=True)
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    gt = GroundTruth.from_env()
    dist.barrier()
    # one write(): with unbuffered output, print() writes the newline separately and the
    # ranks' lines interleave on the launcher's shared stdout
    sys.stdout.write(f"ready pid={os.getpid()} rank={rank}\n")
    sys.stdout.flush()
    gt.start()
    step = 0
    while step < args.steps:
        for x, y in loader:
            gt.phase("input")
            if device.type == "cuda":
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                gt.phase("h2d")
            if drawn:   # every rank draws the same rank from the step number
                model.module.extra_s = extra if random.Random(step).randrange(dist.get_world_size()) == rank else 0.0
            out = model(x)
            loss = loss_fn(out, y)
            gt.phase("forward")
            loss.backward()
            gt.phase("backward")
            opt.step()
            opt.zero_grad()
            gt.phase("optimizer")
            step += 1
            gt.step_done()
            if slow and step == args.hang_at_step:
                fetch_from_slow_store()
            if slow and step == args.exit_at_step and first_attempt:
                # at once, as a crash would: sys.exit's interpreter shutdown tears gloo down slowly,
                # and the other rank, seeing its peer go, could fail first and have torchrun
                # SIGTERM this rank before it exits with its own status
                sys.stdout.flush()
                os._exit(args.exit_code)
            if step >= args.steps:
                break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
