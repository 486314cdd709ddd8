"""A nanoGPT-shaped job: the training loop at module level, a hand-written data loader, accumulation.

    python examples/module_loop.py [--accum 4] [--steps N] [--width 1024] [--threads 1]

No ``main()`` and no DataLoader: the module's own ``while True`` loop runs ``--accum`` micro-batches
per optimizer step in a ``for micro_step in range(...)`` loop, each one the model's forward, the
next batch from ``get_batch()`` (slicing a ``np.memmap``-like array, ``torch.stack``,
``torch.from_numpy``), and backward; then gradient clipping, ``optimizer.step()`` and
``zero_grad``. As in nanoGPT's ``train.py``, the next batch is fetched between forward and
backward, so the module frame's lines wrap once per micro-batch and once per optimizer step, and
the whole micro-batch loop sits under the frame's ``for micro_step`` lines. The default MLP
(``--width 1024``) gives about 35-40 ms a micro-batch on one core here: under 5 samples at 100 Hz.

Ground truth (TRACEML_GROUND_TRUTH): one record per optimizer step, with ``micro_batches``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _groundtruth import GroundTruth

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--accum", type=int, default=4, help="micro-batches per optimizer step (default 4)")
parser.add_argument("--steps", type=int, default=10**9, help="optimizer steps (default: forever)")
parser.add_argument("--width", type=int, default=1024, help="model width (default 1024)")
parser.add_argument("--batch", type=int, default=256, help="samples per micro-batch (default 256)")
parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(args.threads)

block = 64
data = np.random.default_rng(0).integers(0, 255, size=2_000_000, dtype=np.uint16)   # stands for the memmap


def get_batch() -> tuple[torch.Tensor, torch.Tensor]:
    ix = torch.randint(len(data) - block, (args.batch,))
    x = torch.stack([torch.from_numpy(data[i:i + block].astype(np.float32)) for i in ix.tolist()])
    y = torch.from_numpy(data[ix.numpy()].astype(np.int64) % 10)
    return x / 255.0, y


model = nn.Sequential(nn.Linear(block, args.width), nn.ReLU(), nn.Linear(args.width, args.width), nn.ReLU(),
                      nn.Linear(args.width, args.width), nn.ReLU(), nn.Linear(args.width, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
gt = GroundTruth.from_env()
X, Y = get_batch()
print(f"ready pid={os.getpid()}", flush=True)
gt.start()
iter_num = 0
while True:
    for micro_step in range(args.accum):  # noqa: B007 (nanoGPT's own loop, as written there)
        loss = loss_fn(model(X), Y) / args.accum
        gt.phase("forward")
        X, Y = get_batch()
        gt.phase("input")
        loss.backward()
        gt.phase("backward")
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    gt.phase("optimizer")
    gt.step_done(args.accum)
    iter_num += 1
    if iter_num >= args.steps:
        break
gt.close()
