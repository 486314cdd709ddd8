"""Hugging Face ``transformers.Trainer.train()`` on a tiny GPT-2 (GPT2Config, nothing downloaded).

A synthetic token dataset whose ``__getitem__`` spends ``tokenize_sample`` time (--input-share of
the step, default 0.05: COMPUTE-BOUND; or --input-ms per optimizer step); the Trainer's defaults
otherwise (fused AdamW, grad clipping at 1.0, linear schedule); no saving, evaluation or logging;
``dataloader_num_workers=0``.
``--grad-accum N`` (1, 2, 4 or 8) sets ``gradient_accumulation_steps`` and splits the batch of 16
sequences into N micro-batches of 16/N, so an optimizer step stays 80-110 ms on one core.

Ground truth (TRACEML_GROUND_TRUTH): one record per optimizer step, with ``micro_batches``, taken
from a TrainerCallback, forward (pre-)hooks on the model, post-accumulate-grad hooks on its
parameters and the dataset's own ``__getitem__``. ``Trainer._run_epoch`` prefetches the whole
accumulation group with ``get_batch_samples`` and only then calls ``on_step_begin``. The intervals,
named the way a stack sampler sees them:

  input      first ``__getitem__`` after the previous step ended -> ``on_step_begin``: everything
             inside ``get_batch_samples`` from the first sample on (DataLoader fetch and collate,
             accelerate's one-batch look-ahead, ``_get_num_items_in_batch``)
  forward    forward pre-hook -> forward hook of the model: its whole ``forward`` call, the loss
             included (GPT2LMHeadModel computes it from ``labels``)
  backward   forward hook -> the last parameter's post-accumulate-grad hook (autograd's work
             inside ``accelerator.backward``)
  optimizer  last micro-batch's backward end -> ``on_step_end``: the loss bookkeeping after
             ``training_step`` (``isnan``, ``floating_point_ops``: about 0.3 ms), ``_clip_grad_norm``,
             ``optimizer.step()``, ``lr_scheduler.step()``, ``model.zero_grad()``
  wait       the rest: ``_maybe_log_save_evaluate`` and the loop after ``on_step_end``, epoch
             turnover, the start of ``get_batch_samples`` before the first sample,
             ``training_step``'s preamble (``model.train()``, ``_prepare_inputs``) and, between
             micro-batches, the bookkeeping after backward and ``on_substep_end``

SIGTERM is left at its default: the job dies at once, and its truth file is flushed every step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from torch.utils.data import Dataset, default_collate
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
from transformers.utils import logging as hf_logging

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import announce_ready, burn_cpu, device_sync, parse_args, plan_work, setup
from _groundtruth import GroundTruth

VOCAB = 1024
SEQ_LEN = 64
BATCH = 16
SAMPLES = BATCH * 64


class Marks:
    """Turns the hooks' and callbacks' events into ground-truth phase boundaries."""

    def __init__(self, gt: GroundTruth, params: int) -> None:
        self.gt = gt
        self.params = params
        self.fetching = False
        self.grads_left = 0          # post-accumulate-grad hooks still to fire in this backward
        self.micro_batches = 0

    def sample_fetch(self) -> None:
        if not self.fetching:
            self.fetching = True
            self.gt.phase("wait")

    def step_begin(self) -> None:
        self.fetching = False
        self.gt.phase("input")

    def forward_begin(self) -> None:
        if self.grads_left:          # a backward whose end went unseen: it lasted until now
            self.gt.phase("backward")
        self.gt.phase("wait")
        self.micro_batches += 1

    def forward_end(self) -> None:
        self.gt.phase("forward")
        self.grads_left = self.params

    def grad_accumulated(self) -> None:
        self.grads_left -= 1
        if self.grads_left == 0:
            self.gt.phase("backward")

    def step_end(self) -> None:
        if self.grads_left:
            self.gt.phase("backward")
            self.grads_left = 0
        self.gt.phase("optimizer")
        self.gt.step_done(self.micro_batches)
        self.micro_batches = 0


def tokenize_sample(tokens: torch.Tensor, cost_s: float) -> torch.Tensor:
    """Pretend to tokenize and pack one text sample: pure CPU work."""
    burn_cpu(cost_s)
    return tokens.clone()


class TokenSamples(Dataset):
    def __init__(self, n: int, marks: Marks | None = None) -> None:
        gen = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(0, VOCAB, (n, SEQ_LEN), generator=gen)
        self.cost_s = 0.0
        self.marks = marks

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.marks is not None:
            self.marks.sample_fetch()
        ids = tokenize_sample(self.tokens[i], self.cost_s)
        return {"input_ids": ids, "labels": ids}


class TruthCallback(TrainerCallback):
    def __init__(self, marks: Marks, compute_s: float, input_s: float) -> None:
        self.marks = marks
        self.calibration = {"compute": compute_s, "input_work": input_s}

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        announce_ready(**self.calibration)
        self.marks.gt.start()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.marks.step_begin()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.marks.step_end()


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grad-accum", type=int, choices=(1, 2, 4, 8), default=1,
                        help=f"gradient_accumulation_steps, over micro-batches of {BATCH}/N sequences (default 1)")
    parser.add_argument("--input-share", type=float, default=0.05,
                        help="tokenize_sample's share of the step (default 0.05)")
    parser.add_argument("--input-ms", type=float, default=None,
                        help=f"tokenize_sample CPU ms per {BATCH} sequences, i.e. per optimizer step "
                             "(default: sized from --input-share)")


def make_model() -> GPT2LMHeadModel:
    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ_LEN, n_embd=128, n_layer=2, n_head=4,
                        bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def calibrate(model: GPT2LMHeadModel, dataset: TokenSamples, accum: int, single_thread: bool,
              warmup: int = 2, repeats: int = 5) -> float:
    """Median seconds (thread CPU time with one thread) of one optimizer step as the Trainer does it."""
    clock = time.thread_time if single_thread else time.perf_counter
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = default_collate([dataset[i] for i in range(BATCH // accum)])
    times = []
    for i in range(warmup + repeats):
        t0 = clock()
        for _ in range(accum):
            model(**batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        model.zero_grad()
        if i >= warmup:
            times.append(clock() - t0)
    return statistics.median(times)


def main() -> None:
    args = parse_args(__doc__, add_args)
    device = setup(args)
    hf_logging.set_verbosity_error()
    model = make_model()
    gt = GroundTruth.from_env(sync=device_sync(device))
    params = list(model.parameters())
    marks = Marks(gt, len(params))
    dataset = TokenSamples(SAMPLES)

    compute_s = calibrate(model, dataset, args.grad_accum, device.type == "cpu" and args.threads == 1)
    if args.input_ms is not None:
        input_s = args.input_ms / 1000
    else:
        input_s, _ = plan_work(compute_s, args.input_share, 0.0)
    dataset.cost_s = input_s / BATCH     # per sample: BATCH samples an optimizer step
    if gt.enabled:
        dataset.marks = marks
        model.register_forward_pre_hook(lambda module, inputs: marks.forward_begin())
        model.register_forward_hook(lambda module, inputs, output: marks.forward_end())
        for p in params:
            p.register_post_accumulate_grad_hook(lambda param: marks.grad_accumulated())

    training_args = TrainingArguments(
        output_dir=os.path.join(tempfile.gettempdir(), "traceml-hf-trainer"),
        max_steps=args.steps,
        per_device_train_batch_size=BATCH // args.grad_accum,
        gradient_accumulation_steps=args.grad_accum,
        learning_rate=1e-4,
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        use_cpu=device.type == "cpu",
        seed=0,
    )
    trainer = Trainer(model=model, args=training_args, train_dataset=dataset,
                      callbacks=[TruthCallback(marks, compute_s, input_s)])
    trainer.train()
    gt.close()


if __name__ == "__main__":
    main()
