"""Opt-in, in-process ground truth of per-step phase times.

Set ``TRACEML_GROUND_TRUTH=/path/gt.jsonl`` to make the example scripts append
one JSON line per training step::

    {"step": 0, "pid": 4242, "start": 1700000000.1, "end": 1700000000.25,
     "phases": {"input": 0.05, "h2d": 0.0, "forward": 0.03,
                "backward": 0.05, "optimizer": 0.01, "wait": 0.01}}

Times are seconds. Intervals come from ``time.perf_counter()``; they are
anchored to the epoch with a single ``time.time()`` reading taken at creation,
so ``end - start`` equals the sum of the phases. Without the variable every
method is a cheap no-op.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import TextIO

ENV_VAR = "TRACEML_GROUND_TRUTH"
SYNC_VAR = "TRACEML_GROUND_TRUTH_SYNC"
PHASES = ("input", "h2d", "forward", "backward", "optimizer", "wait")


class GroundTruth:
    """Attributes wall time between successive marks to named phases."""

    def __init__(self, path: str | None, sync: Callable[[], None] | None = None) -> None:
        # Line-buffered append: every step is on disk as soon as it is written.
        self._file: TextIO | None = open(path, "a", buffering=1) if path else None  # noqa: SIM115
        self._sync = sync  # e.g. torch.cuda.synchronize, so GPU work lands in its phase
        self._perf0 = time.perf_counter()
        self._epoch0 = time.time()
        self._step = 0
        self._pid = os.getpid()   # which process wrote it (torchrun's restarted workers share the file)
        self._step_start = self._mark = self._perf0
        self._phases = dict.fromkeys(PHASES, 0.0)

    @classmethod
    def from_env(cls, sync: Callable[[], None] | None = None) -> GroundTruth:
        """``{rank}`` in the path becomes the process's RANK (one file per DDP rank).

        ``TRACEML_GROUND_TRUTH_SYNC=0`` leaves ``sync`` out: on a GPU each phase is then the host
        thread's own time (kernel launches in forward, the wait at ``.item()`` in wait), which is
        what its stacks show, and the job keeps its asynchronous shape. With it, every mark
        synchronizes, so a phase holds its device time but the job no longer runs ahead."""
        path = os.environ.get(ENV_VAR) or None
        if path:
            path = path.replace("{rank}", os.environ.get("RANK", "0"))
        return cls(path, None if os.environ.get(SYNC_VAR) == "0" else sync)

    @property
    def enabled(self) -> bool:
        return self._file is not None

    def _now(self) -> float:
        if self._sync is not None:
            self._sync()
        return time.perf_counter()

    def start(self) -> None:
        """Start the first step now (call right before the training loop)."""
        if self._file is None:
            return
        self._step_start = self._mark = self._now()
        self._phases = dict.fromkeys(PHASES, 0.0)

    def phase(self, name: str) -> None:
        """Attribute the time since the previous mark to ``name``; set a new mark."""
        if self._file is None:
            return
        now = self._now()
        self._phases[name] += now - self._mark
        self._mark = now

    def step_done(self, micro_batches: int | None = None, **memory: int) -> None:
        """Attribute the remainder to ``wait`` and write the step's record (with gradient
        accumulation, an optimizer step's: ``micro_batches`` says how many it took; ``memory``:
        bytes read in-process at the step's end, for the memory examples: ``rss``, ``gpu``)."""
        if self._file is None:
            return
        now = self._now()
        self._phases["wait"] += now - self._mark
        record = {
            "step": self._step,
            "pid": self._pid,
            "start": self._epoch0 + (self._step_start - self._perf0),
            "end": self._epoch0 + (now - self._perf0),
            "phases": self._phases,
        }
        if micro_batches is not None:
            record["micro_batches"] = micro_batches
        record.update(memory)
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        self._step += 1
        self._step_start = self._mark = now
        self._phases = dict.fromkeys(PHASES, 0.0)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
