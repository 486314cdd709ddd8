"""Lightning ``Trainer.fit`` on an MLP whose Dataset items are slow to make (INPUT-BOUND by default).

``decode_sample`` in ``Dataset.__getitem__`` is sized at start-up so that input is --input-share
(default 0.6) of the step, or takes --input-ms per optimizer step. ``--accumulate N`` sets
``accumulate_grad_batches`` and splits the batch of 256 into N micro-batches of 256/N. About 150 ms
a step on one core. Under torchrun it runs DDP over gloo, one rank a process:

    torchrun --nproc-per-node 2 examples/lightning_job.py --straggler input --slow-rank 1 --extra-ms 48

(the slow rank's ``decode_sample`` takes --extra-ms more per step: INPUT STRAGGLER).

Lightning's automatic optimization runs ``training_step`` and backward in a closure *inside*
``optimizer.step(closure)``; zero_grad runs inside it too, between ``training_step`` and backward
(first micro-batch of an accumulation group only). Ground truth (TRACEML_GROUND_TRUTH, ``{rank}``
in the path for one file a rank): one record per optimizer step, with ``micro_batches``, from a
``lightning.Callback``, a forward pre-hook on the user's network, a step post-hook on the torch
optimizer and the dataset's own ``__getitem__``. The intervals, as a stack sampler sees them:

  input      first ``__getitem__`` after the previous micro-batch -> ``on_train_batch_start``: the
             fetcher's ``next()`` from the first sample on (Lightning prefetches one batch ahead, so
             this builds the *next* batch), collate, ``batch_to_device``
  forward    forward pre-hook of the network -> ``on_before_zero_grad`` or ``on_before_backward``:
             the network's forward and the loss in ``training_step``, Lightning's handling of its
             output, DDP's post-forward
  backward   ``on_before_backward`` -> ``on_after_backward`` (the all-reduce included under DDP)
  optimizer  ``on_before_zero_grad`` -> ``on_before_backward`` (``optimizer.zero_grad``) and
             ``on_after_backward`` -> the optimizer's step post-hook (the end of the closure, then
             the AdamW update itself)
  wait       the rest: Lightning's loop between micro-batches (the per-batch SIGTERM broadcast under
             DDP, progress and logger bookkeeping, ``on_train_batch_end``), the fetcher's ``next()``
             before the first sample, and the way down from ``on_train_batch_start`` through
             ``optimizer.step`` into ``training_step``

SIGTERM: Lightning's own handler (which raises SIGTERMException a step later) is replaced by the
default one when training starts, so the job dies at once; its truth file is flushed every step.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.strategies import DDPStrategy
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


class Marks:
    """Turns the callback's, hooks' and dataset's events into ground-truth phase boundaries."""

    def __init__(self, gt: GroundTruth) -> None:
        self.gt = gt
        self.fetching = False
        self.zeroing = False
        self.stepped = False
        self.micro_batches = 0

    def sample_fetch(self) -> None:
        if not self.fetching:
            self.fetching = True
            self.gt.phase("wait")

    def batch_start(self) -> None:
        self.fetching = False
        self.gt.phase("input")

    def forward_begin(self) -> None:
        self.gt.phase("wait")
        self.micro_batches += 1

    def zero_grad_begin(self) -> None:
        self.gt.phase("forward")
        self.zeroing = True

    def backward_begin(self) -> None:
        self.gt.phase("optimizer" if self.zeroing else "forward")
        self.zeroing = False

    def backward_end(self) -> None:
        self.gt.phase("backward")

    def optimizer_stepped(self) -> None:
        self.gt.phase("optimizer")
        self.stepped = True

    def batch_end(self) -> None:
        if self.stepped:
            self.gt.step_done(self.micro_batches)
            self.stepped = False
            self.micro_batches = 0


class MarkedSamples(EncodedSamples):
    """EncodedSamples that tell the ground truth when a fetch starts."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.marks: Marks | None = None

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.marks is not None:
            self.marks.sample_fetch()
        return super().__getitem__(i)


class Classifier(L.LightningModule):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.net = make_mlp(width)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class TruthCallback(L.Callback):
    def __init__(self, marks: Marks, calibration_s: dict[str, float]) -> None:
        self.marks = marks
        self.calibration_s = calibration_s

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        marks = self.marks
        if marks.gt.enabled:
            assert isinstance(pl_module, Classifier)
            pl_module.net.register_forward_pre_hook(lambda module, inputs: marks.forward_begin())
            trainer.optimizers[0].register_step_post_hook(lambda opt, args, kwargs: marks.optimizer_stepped())
        parts = " ".join(f"{k}={v * 1e3:.1f}ms" for k, v in self.calibration_s.items())
        print(f"calibrated {parts}", file=sys.stderr, flush=True)
        rank = f" rank={trainer.global_rank}" if trainer.world_size > 1 else ""
        # one write(): the ranks share the launcher's stdout, and print() writes the newline apart
        sys.stdout.write(f"ready pid={os.getpid()}{rank}\n")
        sys.stdout.flush()
        marks.gt.start()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self.marks.batch_start()

    def on_before_zero_grad(self, trainer: L.Trainer, pl_module: L.LightningModule,
                            optimizer: torch.optim.Optimizer) -> None:
        self.marks.zero_grad_begin()

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor) -> None:
        self.marks.backward_begin()

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.marks.backward_end()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.marks.batch_end()


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input-share", type=float, default=0.6,
                        help="decode_sample's share of the step (default 0.6)")
    parser.add_argument("--input-ms", type=float, default=None,
                        help=f"decode_sample CPU ms per {BATCH_SIZE} samples, i.e. per optimizer step "
                             "(default: sized from --input-share)")
    parser.add_argument("--accumulate", type=int, choices=(1, 2, 4, 8), default=1,
                        help=f"accumulate_grad_batches, over micro-batches of {BATCH_SIZE}/N samples (default 1)")
    parser.add_argument("--width", type=int, default=WIDTH, help=f"model width (default {WIDTH})")
    add_input_straggler_args(parser)


def main() -> None:
    args = parse_args(__doc__, add_args)
    device = setup(args)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    rank = int(os.environ.get("RANK", 0))
    devices = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    model = Classifier(args.width)
    dataset = MarkedSamples(BATCH_SIZE * 64)

    fetch_s, compute_s = calibrate(model.net, torch.nn.CrossEntropyLoss(), torch.optim.AdamW(model.parameters()),
                                   device, dataset)
    if args.input_ms is not None:
        input_s = args.input_ms / 1000
    else:
        input_s, _ = plan_work(compute_s, args.input_share, 0.0, input_base_s=fetch_s)
    input_s += straggler_input_s(args, rank)
    dataset.decode_cost_s = input_s / BATCH_SIZE

    gt = GroundTruth.from_env(sync=device_sync(device))
    marks = Marks(gt)
    if marks.gt.enabled:
        dataset.marks = marks
    loader = DataLoader(dataset, batch_size=BATCH_SIZE // args.accumulate, shuffle=True, drop_last=True)
    trainer = L.Trainer(
        accelerator=device.type,
        devices=devices,
        strategy=DDPStrategy(process_group_backend="gloo") if devices > 1 else "auto",
        max_steps=args.steps,
        accumulate_grad_batches=args.accumulate,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        callbacks=[TruthCallback(marks, {"compute": compute_s, "input_work": input_s})],
    )
    trainer.fit(model, train_dataloaders=loader)
    marks.gt.close()


if __name__ == "__main__":
    main()
