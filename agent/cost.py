"""The attacher's own CPU, by part: what sampling costs, measured where it is spent and
recorded (``cost`` frames), so the overhead is a fact of the recording like any other.

Each sampler thread times its parts with ``time.thread_time`` (CPU, not wall): starting py-spy
recorders, reading their files into frames, the per-thread CPU counters, the exit watch, the RSS
trace, the psutil poll and the `py-spy dump` for thread names. The node adds what its process
and its reaped children (the py-spy recorders and dumps) used in all, from ``os.times``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

COST_EVERY_S = 10.0   # a sampler's cost frame this often (and at its end)


class CpuParts:
    """CPU seconds of one thread, by part."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        t0 = time.thread_time()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.thread_time() - t0

    def frame(self, pid: int | None) -> dict[str, Any]:
        """A ``cost`` frame: the parts' CPU seconds since the thread began (cumulative)."""
        return {"k": "cost", "t": time.time_ns(), "pid": pid,
                "parts": {name: round(s, 4) for name, s in sorted(self.seconds.items())}}


def process_frame() -> dict[str, Any]:
    """The node's ``cost`` frame (pid None): this process's CPU and its reaped children's (the
    py-spy processes), cumulative seconds."""
    t = os.times()
    parts = {"process": round(t.user + t.system, 4), "children": round(t.children_user + t.children_system, 4)}
    return {"k": "cost", "t": time.time_ns(), "pid": None, "parts": parts}
