"""A torch-free training-like loop (standard library only): runs on Python 3.10 to 3.13.

    python3.12 examples/pure_loop.py [--steps N] [--clock wall|cpu]

Per step: ``batch = next(batches)`` from a generator that works ~30 ms (input), then
``forward(batch)`` ~40 ms and ``backward(loss)`` ~20 ms, so steps are ~90 ms. All of it is busy
work on the CPU (never sleep), so a sampler sees these functions running. It lets the tests attach
py-spy to interpreters that have no torch (frames and line numbers differ between versions), and
it imports no ``threading`` itself: where nothing else does, py-spy reads no thread names (see
agent.threads.ThreadNames).

``--clock wall`` (default) spins until each phase's wall time has passed, so steps stay ~90 ms
while other processes compete for the cores; ``--clock cpu`` spins until this thread has had the
phase's CPU time (``time.thread_time``), so competition stretches the steps (on a loaded 2-core
machine from 90 ms to as much as 190 ms). With TRACEML_GROUND_TRUTH set it records its own
per-step times: ``input`` for the ``next()``, ``forward`` and ``backward`` for the two functions
(traceml's rules know only torch's forward and backward: it classes these as wait/other).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _groundtruth import GroundTruth

FOREVER = 10**9
INPUT_S, FORWARD_S, BACKWARD_S = 0.030, 0.040, 0.020
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}
_clock: Callable[[], float] = time.perf_counter


def spin(seconds: float) -> None:
    """Busy work for ``seconds`` on the chosen clock."""
    end = _clock() + seconds
    while _clock() < end:
        pass


def make_batches() -> Iterator[list[float]]:
    while True:
        spin(INPUT_S)
        yield [1.0] * 64


def forward(batch: list[float]) -> float:
    spin(FORWARD_S)
    return sum(batch)


def backward(loss: float) -> None:
    spin(BACKWARD_S)


def main() -> None:
    global _clock
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=FOREVER, help="training steps (default: forever)")
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="wall",
                        help="what the busy work is timed by: wall time (default) or this thread's CPU time")
    args = parser.parse_args()
    _clock = CLOCKS[args.clock]
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
