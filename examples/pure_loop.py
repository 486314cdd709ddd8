"""A torch-free training-like loop (standard library only): runs on Python 3.10 to 3.13.

    python3.12 examples/pure_loop.py [--steps N]

Per step: ``batch = next(batches)`` from a generator that works ~30 ms (input), then
``forward(batch)`` ~40 ms and ``backward(...)`` ~20 ms of busy work, so steps are ~90 ms. It lets
the tests attach py-spy to interpreters that have no torch (line numbers and frames differ
between Python versions). With TRACEML_GROUND_TRUTH set it records its own per-step times.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _groundtruth import GroundTruth


def spin(seconds: float) -> None:
    """Busy work for ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def make_batches() -> Iterator[list[float]]:
    while True:
        spin(0.030)
        yield [1.0] * 64


def forward(batch: list[float]) -> float:
    spin(0.040)
    return sum(batch)


def backward(loss: float) -> None:
    spin(0.020)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=10**9, help="steps to run (default: forever)")
    args = parser.parse_args()
    batches = make_batches()
    gt = GroundTruth.from_env()
    print(f"ready pid={os.getpid()}", flush=True)
    gt.start()
    for _ in range(args.steps):
        batch = next(batches)
        gt.phase("input")
        loss = forward(batch)
        gt.phase("forward")
        backward(loss)
        gt.phase("backward")
        gt.step_done()
    gt.close()


if __name__ == "__main__":
    main()
