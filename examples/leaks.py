"""Memory shapes, each written the way training scripts write them, with their ground truth.

``--shape``:

- ``loss``: ``total_loss += loss`` without ``.item()``: every step's loss and its autograd graph
  stay reachable from ``total_loss``, and with ``backward(retain_graph=True)`` (what silences the
  error its second backward raises) the graph keeps its saved tensors, activations and all: tens
  of MB a second (the classic mistake of seed 001; the issue's job went +1.4 GB in 15 s).
- ``eval_loss``: a held-out loss summed every step without ``torch.no_grad()`` and never
  backpropagated: each step keeps a whole forward graph, activations and all (hundreds of MB a
  minute; the shape of the issue's job: +1.4 GB in 15 s).
- ``outputs``: the model's features appended to a list each step for later analysis, without
  ``.detach()``: the features and their graph's nodes stay (batch x width floats a step).
- ``slow``: a log that keeps every step's per-sample losses as Python floats (``log.append({...})``):
  about 2.5 KB a step, a few MB a minute (``--input-ms`` sets the pace).
- ``cache``: a Dataset that caches every decoded sample (``--sample-kb``, 16) in a dict, read by
  ``--workers`` (2) DataLoader workers: each worker's RSS grows by what it caches.
- ``flat``: a large, steady footprint (``--footprint-mb`` of buffers, default 1024).
- ``jump``: steady, but ``--jump-after-s`` (30) after it is ready an eval set of ``--jump-mb``
  (300) is built and kept, once: a one-off rise, not a leak.

Each step also decodes its batch for ``--input-ms`` (20) of CPU, so that steps take tens of ms
(``--width``, 1024, sizes the model).

Ground truth (``TRACEML_GROUND_TRUTH``): each step's phases, and ``rss``, the process's own RSS
read in-process at the end of the step (``/proc/self/statm``); with ``--device cuda``, ``gpu``,
what its caching allocator holds (``torch.cuda.memory_reserved``: NVML's reading less the context).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    BATCH_SIZE,
    CLASSES,
    IN_FEATURES,
    announce_ready,
    burn_cpu,
    device_sync,
    parse_args,
    random_data,
    setup,
)
from _groundtruth import GroundTruth

SHAPES = ("loss", "eval_loss", "outputs", "slow", "cache", "flat", "jump")


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", choices=SHAPES, default="loss")
    parser.add_argument("--width", type=int, default=1024, help="model width (default 1024)")
    parser.add_argument("--input-ms", type=float, default=20.0, help="CPU ms to decode each batch (default 20)")
    parser.add_argument("--workers", type=int, default=2, help="cache: DataLoader workers (default 2)")
    parser.add_argument("--sample-kb", type=float, default=16.0, help="cache: KB cached per sample (default 16)")
    parser.add_argument("--footprint-mb", type=float, default=1024.0, help="flat: MB of steady buffers (1024)")
    parser.add_argument("--jump-after-s", type=float, default=30.0,
                        help="jump: seconds after ready when the eval set is built (30)")
    parser.add_argument("--jump-mb", type=float, default=300.0, help="jump: its size in MB (300)")


class CachingDataset(Dataset):
    """Decodes each sample once and keeps it: every worker fills a cache of its own."""

    def __init__(self, n: int, sample_kb: float, decode_s: float) -> None:
        self.n = n
        self.floats = max(int(sample_kb * 1024) // 4, IN_FEATURES)
        self.decode_s = decode_s
        self.cache: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if i not in self.cache:
            burn_cpu(self.decode_s)
            self.cache[i] = torch.randn(self.floats)   # "decoded": kept for next time
        return self.cache[i][:IN_FEATURES].clone(), i % CLASSES


def batches(args: argparse.Namespace):
    """Endless (x, y) batches: in memory, or from the caching Dataset's workers."""
    if args.shape == "cache":
        dataset = CachingDataset(10**7, args.sample_kb, args.input_ms / 1e3 / BATCH_SIZE)
        loader = DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=args.workers,
                            persistent_workers=args.workers > 0)
        while True:
            for x, y in loader:
                yield x.to(args.device), y.to(args.device)
    x_all, y_all = random_data(BATCH_SIZE * 16)
    while True:
        for i in range(0, len(y_all), BATCH_SIZE):
            burn_cpu(args.input_ms / 1e3)   # decode the batch
            yield x_all[i:i + BATCH_SIZE].to(args.device), y_all[i:i + BATCH_SIZE].to(args.device)


def memory_now(args: argparse.Namespace) -> dict[str, int]:
    """The ground truth's memory: the process's RSS (statm) and, on a GPU, what its caching
    allocator holds (what NVML counts, less the CUDA context)."""
    with open("/proc/self/statm") as fh:
        out = {"rss": int(fh.read().split()[1]) * 4096}
    if args.device.type == "cuda":
        out["gpu"] = torch.cuda.memory_reserved()
    return out


def main() -> None:
    args = parse_args(__doc__, add_args)
    args.device = setup(args)
    body = nn.Sequential(nn.Linear(IN_FEATURES, args.width), nn.ReLU())
    model = nn.Sequential(body, nn.Linear(args.width, CLASSES)).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    footprint = [torch.ones(int(args.footprint_mb * 2**20) // 4, device=args.device)] if args.shape == "flat" else []
    gt = GroundTruth.from_env(sync=device_sync(args.device))
    announce_ready()
    gt.start()
    train = {"loss": train_summing_loss, "eval_loss": train_with_eval_loss, "outputs": train_keeping_outputs,
             "slow": train_logging_every_step}
    train.get(args.shape, train_plain)(args, model, opt, gt)
    del footprint


# Each loop below is the whole training loop of a script of its shape: the line that keeps memory
# is in the loop itself, as such scripts write it.

def train_summing_loss(args: argparse.Namespace, model: nn.Module, opt: torch.optim.Optimizer, gt: GroundTruth) -> None:
    loss_fn = nn.CrossEntropyLoss()
    total_loss = 0.0
    for step, (x, y) in enumerate(batches(args)):
        if step >= args.steps:
            break
        gt.phase("input")
        loss = loss_fn(model(x), y)
        gt.phase("forward")
        loss.backward(retain_graph=True)
        gt.phase("backward")
        opt.step()
        opt.zero_grad()
        gt.phase("optimizer")
        total_loss += loss   # the bug: the loss with its graph, summed (loss.item() is the fix)
        gt.step_done(**memory_now(args))


def train_with_eval_loss(args: argparse.Namespace, model: nn.Module, opt: torch.optim.Optimizer,
                         gt: GroundTruth) -> None:
    loss_fn = nn.CrossEntropyLoss()
    x_val, y_val = (t.to(args.device) for t in random_data(BATCH_SIZE))
    val_total = 0.0
    for step, (x, y) in enumerate(batches(args)):
        if step >= args.steps:
            break
        gt.phase("input")
        loss = loss_fn(model(x), y)
        gt.phase("forward")
        loss.backward()
        gt.phase("backward")
        opt.step()
        opt.zero_grad()
        gt.phase("optimizer")
        val_total += loss_fn(model(x_val), y_val)   # the bug: no torch.no_grad(), and summed with its graph
        gt.phase("wait")
        gt.step_done(**memory_now(args))


def train_keeping_outputs(args: argparse.Namespace, model: nn.Module, opt: torch.optim.Optimizer,
                          gt: GroundTruth) -> None:
    loss_fn = nn.CrossEntropyLoss()
    body, head = model[0], model[1]
    history = []
    for step, (x, y) in enumerate(batches(args)):
        if step >= args.steps:
            break
        gt.phase("input")
        feats = body(x)
        loss = loss_fn(head(feats), y)
        gt.phase("forward")
        loss.backward()
        gt.phase("backward")
        opt.step()
        opt.zero_grad()
        gt.phase("optimizer")
        history.append(feats)   # the bug: kept for later analysis without .detach()
        gt.step_done(**memory_now(args))


def train_logging_every_step(args: argparse.Namespace, model: nn.Module, opt: torch.optim.Optimizer,
                             gt: GroundTruth) -> None:
    loss_fn = nn.CrossEntropyLoss(reduction="none")
    log = []
    for step, (x, y) in enumerate(batches(args)):
        if step >= args.steps:
            break
        gt.phase("input")
        per_sample = loss_fn(model(x), y)
        loss = per_sample.mean()
        gt.phase("forward")
        loss.backward()
        gt.phase("backward")
        opt.step()
        opt.zero_grad()
        gt.phase("optimizer")
        log.append({"step": step, "losses": per_sample[:64].tolist()})   # the bug: never trimmed
        gt.step_done(**memory_now(args))


def train_plain(args: argparse.Namespace, model: nn.Module, opt: torch.optim.Optimizer, gt: GroundTruth) -> None:
    """cache, flat and jump: nothing kept in the loop (the cache is the Dataset's, in its workers)."""
    loss_fn = nn.CrossEntropyLoss()
    eval_set = None
    jump_at = time.monotonic() + args.jump_after_s
    for step, (x, y) in enumerate(batches(args)):
        if step >= args.steps:
            break
        gt.phase("input")
        loss = loss_fn(model(x), y)
        gt.phase("forward")
        loss.backward()
        gt.phase("backward")
        opt.step()
        opt.zero_grad()
        gt.phase("optimizer")
        if args.shape == "jump" and eval_set is None and time.monotonic() >= jump_at:
            eval_set = torch.randn(int(args.jump_mb * 2**20) // 4, device=args.device)   # built once, kept
        gt.step_done(**memory_now(args))


if __name__ == "__main__":
    main()
