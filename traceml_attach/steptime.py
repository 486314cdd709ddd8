"""Per-rank step-time statistics from a Timeline."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from traceml_attach.classify import PHASES
from traceml_attach.timeline import Step, Timeline, TooShort

TYPICAL_MAX = 2.0  # steps longer than this many medians are not typical

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
    component_median_shares: dict[str, float] | None  # each component's share of the typical step
    wait_labels: dict[str, float]         # share of the wait phase by sub-label
    too_short: TooShort | None
    loop: str | None                      # "train (train.py:42)" style description
    thread: str | None
    # Median per step of the time blocked inside synchronizing phases (backward's all-reduce,
    # collectives): what a fast rank spends waiting for a slow one. None without CPU counters.
    sync_wait_ms: float | None = None
    # phases_ms less that blocked time: the work each phase really did on this rank
    active_ms: dict[str, float] | None = None
    coverage: float | None = None   # share of the window in which the training thread's stack was seen


def rank_stats(rank: str, tl: Timeline) -> RankStepStats:
    loop = f"{tl.loop.name} ({tl.loop.file})" if tl.loop else None
    wait_total = sum(tl.wait_labels_ns.values())
    ranked = sorted(tl.wait_labels_ns.items(), key=lambda kv: -kv[1])
    labels = {k: v / wait_total for k, v in ranked} if wait_total else {}
    steps = tl.steps
    coverage = tl.coverage
    if not steps or tl.too_short is not None:
        return RankStepStats(rank, tl.pid, len(steps), None, None, None, None, labels,
                             tl.too_short, loop, tl.thread_name, coverage=coverage)
    total = sum(s.dur_ns for s in steps)
    shares = {p: sum(s.phases_ns[p] for s in steps) / total for p in PHASES}
    norm = sum(shares.values()) or 1.0
    shares = {p: v / norm for p, v in shares.items()}
    step_ms = statistics.median(s.dur_ns for s in steps) / 1e6
    # The typical step's composition: total phase time over total step time, leaving out
    # steps longer than TYPICAL_MAX x the median (an occasional eval or checkpoint). Per-step
    # shares are quantized by sampling (a 4 ms phase is absent from most 10 ms-sampled
    # steps), so their median is biased towards 0 for short phases; this ratio is not.
    typical = [s for s in steps if s.dur_ns <= TYPICAL_MAX * step_ms * 1e6] or list(steps)
    typical_ns = sum(s.dur_ns for s in typical)
    component = {
        name: sum(s.phases_ns[p] for s in typical for p in phases) / typical_ns
        for name, phases in COMPONENTS.items()
    }
    phases_ms = {p: shares[p] * step_ms for p in PHASES}
    sync_wait, active = _sync(steps, phases_ms, step_ms)
    return RankStepStats(
        rank, tl.pid, len(steps), step_ms, phases_ms, shares,
        component, labels, None, loop, tl.thread_name, sync_wait, active, coverage,
    )


def _sync(steps: tuple[Step, ...], phases_ms: dict[str, float], step_ms: float
          ) -> tuple[float | None, dict[str, float] | None]:
    measured = [s for s in steps if s.blocked_sync_ns is not None]
    if len(measured) < max(2, len(steps) // 2):
        return None, None
    total = sum(s.dur_ns for s in measured)
    active = dict(phases_ms)
    for phase in PHASES:
        blocked = sum((s.blocked_sync_ns or {}).get(phase, 0) for s in measured)
        active[phase] = max(0.0, phases_ms[phase] - blocked / total * step_ms)
    wait_ms = statistics.median(sum((s.blocked_sync_ns or {}).values()) for s in measured) / 1e6
    return wait_ms, active
