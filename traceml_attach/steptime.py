"""Per-rank step-time statistics from a Timeline."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from traceml_attach.classify import PHASES
from traceml_attach.timeline import Timeline, TooShort

COMPONENTS = {
    "input": ("input", "h2d"),
    "compute": ("forward", "backward", "optimizer"),
    "wait": ("wait",),
}


@dataclass(frozen=True)
class RankStepStats:
    rank: str
    pid: int
    steps: int
    step_ms: float | None                 # median step time
    phases_ms: dict[str, float] | None    # shares × median step: sums to step_ms
    shares: dict[str, float] | None       # total phase time / total step time: sums to 1
    component_median_shares: dict[str, float] | None  # median over steps of each component's share
    wait_labels: dict[str, float]         # share of the wait phase by sub-label
    too_short: TooShort | None
    loop: str | None                      # "train (train.py:42)" style description
    thread: str | None


def rank_stats(rank: str, tl: Timeline) -> RankStepStats:
    loop = f"{tl.loop.name} ({tl.loop.file})" if tl.loop else None
    wait_total = sum(tl.wait_labels_ns.values())
    ranked = sorted(tl.wait_labels_ns.items(), key=lambda kv: -kv[1])
    labels = {k: v / wait_total for k, v in ranked} if wait_total else {}
    steps = tl.steps
    if not steps or tl.too_short is not None:
        return RankStepStats(rank, tl.pid, len(steps), None, None, None, None, labels,
                             tl.too_short, loop, tl.thread_name)
    total = sum(s.dur_ns for s in steps)
    shares = {p: sum(s.phases_ns[p] for s in steps) / total for p in PHASES}
    norm = sum(shares.values()) or 1.0
    shares = {p: v / norm for p, v in shares.items()}
    step_ms = statistics.median(s.dur_ns for s in steps) / 1e6
    component = {
        name: statistics.median(sum(s.phases_ns[p] for p in phases) / s.dur_ns for s in steps)
        for name, phases in COMPONENTS.items()
    }
    return RankStepStats(
        rank, tl.pid, len(steps), step_ms, {p: shares[p] * step_ms for p in PHASES}, shares,
        component, labels, None, loop, tl.thread_name,
    )
