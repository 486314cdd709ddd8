"""A job written the way public scripts write it, with no DataLoader and no torch.optim.

    python examples/hand_written.py [--hidden 256] [--batch 32] [--block 64] [--steps N]

The shapes of nanoGPT's ``train.py`` and PyTorch's ``word_language_model`` example, as they are
written there:

- ``get_batch()`` opens the token file as an ``np.memmap`` on every call, slices ``--batch`` random
  windows of ``--block`` tokens out of it, and makes tensors with ``torch.from_numpy`` and
  ``torch.stack`` (then ``.pin_memory().to(device, non_blocking=True)`` on a GPU, ``.to(device)``
  here);
- ``model.zero_grad()`` before the forward pass (a ``Module`` method, not the optimizer's);
- an LSTM language model's forward and backward;
- ``clip_grad_norm_`` and a hand-written SGD: ``for p in model.parameters():
  p.data.add_(p.grad, alpha=-lr)``.

The defaults make a compute-bound step (~150 ms on one core here, input ~1%). A tiny model fed many
short windows, ``--vocab 32 --hidden 8 --batch 2048 --block 4``, makes an input-bound one (~45 ms,
input ~80%): slicing the memmap window by window is most of the step.

``--loader text`` makes the batches another way nobody names for a batch: ``encode_windows()``
tokenizes random windows of an in-memory text character by character in Python (a dict lookup a
character, ``torch.tensor`` of the lists: no memmap, no ``from_numpy``). With ``--hidden 8 --batch
1024 --block 16`` it is most of the step.

``--log-every N`` prints the loss every N steps as scripts do, formatting the tensor itself
(``f"{loss:.4f}"``, ``Tensor.__format__``: on a CPU-only job there is no device to wait for, so
this is logging).

``--metric`` computes the batch's accuracy under ``with torch.no_grad()`` each step (a metric of
the step, not eval); ``--eval-every N`` runs nanoGPT's ``@torch.no_grad()`` ``estimate_loss()``
(``--eval-iters`` forward passes on fresh batches) and a ``torch.save`` checkpoint at the top of
every N-th iteration, which makes that iteration one long step.

Ground truth (TRACEML_GROUND_TRUTH): input is ``get_batch()`` (or ``encode_windows()``), optimizer
is ``zero_grad`` and the update (clipping included), forward and backward as usual; the metric, the
evaluation and the checkpoint are wait.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _groundtruth import GroundTruth

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--hidden", type=int, default=256, help="LSTM width (default 256)")
parser.add_argument("--batch", type=int, default=32, help="windows per batch (default 32)")
parser.add_argument("--block", type=int, default=64, help="tokens per window (default 64)")
parser.add_argument("--vocab", type=int, default=2048, help="tokens in the vocabulary (default 2048)")
parser.add_argument("--metric", action="store_true",
                    help="each step, the batch's accuracy under `with torch.no_grad()` (a metric of the step)")
parser.add_argument("--eval-every", type=int, default=0, metavar="N",
                    help="every N steps, nanoGPT's @torch.no_grad() estimate_loss() (--eval-iters forward passes) "
                         "and a checkpoint with torch.save, in that iteration (default 0: never)")
parser.add_argument("--eval-iters", type=int, default=20, help="forward passes per evaluation (default 20)")
parser.add_argument("--loader", choices=("memmap", "text"), default="memmap",
                    help="memmap: nanoGPT's get_batch (default); text: windows of a text encoded in Python")
parser.add_argument("--log-every", type=int, default=0, metavar="N",
                    help="print the step's loss tensor, formatted (f\"{loss:.4f}\"), every N steps (0: never)")
parser.add_argument("--steps", type=int, default=10**9, help="steps (default: forever)")
parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(args.threads)
device = torch.device("cpu")
VOCAB = args.vocab
lr, clip = 0.5, 0.25

# the token file that nanoGPT's prepare.py writes (train.bin, uint16 tokens)
data_dir = tempfile.mkdtemp(prefix="traceml-hand-written-")
atexit.register(shutil.rmtree, data_dir, ignore_errors=True)


def _stopped(*_: object) -> None:   # terminated: the token file goes too
    shutil.rmtree(data_dir, ignore_errors=True)
    os._exit(0)


signal.signal(signal.SIGTERM, _stopped)
np.random.default_rng(0).integers(0, VOCAB, size=4_000_000, dtype=np.uint16).tofile(os.path.join(data_dir, "train.bin"))


TEXT = "".join(np.random.default_rng(1).choice(list("abcdefghijklmnopqrstuvwxyz .,\n"), size=1_000_000))
STOI = {ch: i for i, ch in enumerate(sorted(set(TEXT)))}


def encode_windows() -> tuple[torch.Tensor, torch.Tensor]:
    ix = torch.randint(len(TEXT) - args.block - 1, (args.batch,)).tolist()
    x = torch.tensor([[STOI[ch] for ch in TEXT[i:i + args.block]] for i in ix])
    y = torch.tensor([[STOI[ch] for ch in TEXT[i + 1:i + 1 + args.block]] for i in ix])
    return x.to(device), y.to(device)


def get_batch() -> tuple[torch.Tensor, torch.Tensor]:
    # nanoGPT recreates the memmap every batch to avoid a memory leak
    data = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - args.block, (args.batch,))
    x = torch.stack([torch.from_numpy((data[i:i + args.block]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + args.block]).astype(np.int64)) for i in ix])
    if device.type == "cuda":
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    else:
        x, y = x.to(device), y.to(device)
    return x, y


class RNNModel(nn.Module):
    def __init__(self, ntoken: int, nhid: int) -> None:
        super().__init__()
        self.encoder = nn.Embedding(ntoken, nhid)
        self.rnn = nn.LSTM(nhid, nhid, 2, batch_first=True)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output, _ = self.rnn(self.encoder(x))
        return self.decoder(output)


model = RNNModel(VOCAB, args.hidden).to(device)
criterion = nn.CrossEntropyLoss()


@torch.no_grad()
def estimate_loss() -> float:
    model.eval()
    losses = torch.zeros(args.eval_iters)
    for k in range(args.eval_iters):
        x, y = get_batch()
        losses[k] = criterion(model(x).view(-1, VOCAB), y.view(-1)).item()
    model.train()
    return float(losses.mean())


gt = GroundTruth.from_env()
print(f"ready pid={os.getpid()}", flush=True)
gt.start()
step = 0
while step < args.steps:
    if args.eval_every and step % args.eval_every == 0 and step > 0:
        val_loss = estimate_loss()
        torch.save({"model": model.state_dict(), "step": step, "val_loss": val_loss},
                    os.path.join(data_dir, "ckpt.pt"))
        gt.phase("wait")   # the iteration that evaluates and checkpoints is one long step
    x, y = get_batch() if args.loader == "memmap" else encode_windows()
    gt.phase("input")
    model.zero_grad()
    gt.phase("optimizer")
    output = model(x)
    loss = criterion(output.view(-1, VOCAB), y.view(-1))
    gt.phase("forward")
    if args.metric:
        with torch.no_grad():
            accuracy = (output.argmax(-1) == y).float().mean()
        gt.phase("wait")
    loss.backward()
    gt.phase("backward")
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
    gt.phase("optimizer")
    if args.log_every and step % args.log_every == 0:
        print(f"step {step}: loss {loss:.4f}, {output[0, :2, :4]}", flush=True)
        gt.phase("wait")
    gt.step_done()
    step += 1
gt.close()
