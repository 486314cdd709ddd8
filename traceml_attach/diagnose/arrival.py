"""Straggler persistence: step by step, which rank arrived last at the collective.

In a synchronized step every rank leaves the collective together, so the rank that arrived last
is the one blocked the least in it (the others' blocked time tells how long they waited for it).
Steps are matched across ranks by their end (the collective's end is the step boundary everyone
shares); a step is judged only where every rank has one with CPU-counter blocked time. A step where
the two least blocked ranks are closer than the policy's margin counts for no rank: sampling cannot
tell them apart.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

from traceml_attach.diagnose.report import Arrival
from traceml_attach.policy import DEFAULT_WHATIF_POLICY, WhatIfPolicy
from traceml_attach.steps.timeline import Step


def last_arrivals(steps: Mapping[str, Sequence[Step]], lo: int, hi: int,
                  policy: WhatIfPolicy = DEFAULT_WHATIF_POLICY) -> tuple[int, dict[str, int]]:
    """(steps judged, steps each rank arrived last in) over the steps that end in [lo, hi)."""
    timed = {rank: [s for s in ss if s.covered and s.blocked_sync_ns is not None and lo <= s.end_ns < hi]
             for rank, ss in steps.items()}
    if len(timed) < 2 or not all(timed.values()):
        return 0, {}
    ends = {rank: [s.end_ns for s in ss] for rank, ss in timed.items()}
    ref = min(timed, key=lambda rank: len(timed[rank]))
    judged, last = 0, dict.fromkeys(timed, 0)
    for step in timed[ref]:
        blocked: dict[str, float] = {}
        for rank, ss in timed.items():
            match = _nearest(ss, ends[rank], step.end_ns)
            if match is None or abs(match.end_ns - step.end_ns) > step.dur_ns / 2:
                break
            blocked[rank] = sum((match.blocked_sync_ns or {}).values()) / max(match.dur_ns, 1)
        else:
            judged += 1
            least, second = sorted(blocked.values())[:2]
            if second - least >= policy.arrival_margin_share:
                last[min(blocked, key=lambda rank: blocked[rank])] += 1
    return judged, last


def _nearest(steps: Sequence[Step], ends: list[int], end_ns: int) -> Step | None:
    at = bisect.bisect_left(ends, end_ns)
    near = [i for i in (at - 1, at) if 0 <= i < len(steps)]
    return steps[min(near, key=lambda i: abs(ends[i] - end_ns))] if near else None


def arrival(judged: int, last: Mapping[str, int], policy: WhatIfPolicy = DEFAULT_WHATIF_POLICY) -> Arrival | None:
    """The persistence verdict over ``judged`` steps; None where no step could be judged."""
    if judged <= 0 or not last:
        return None
    counts = {int(rank): n for rank, n in sorted(last.items(), key=lambda kv: int(kv[0]))}
    rank = max(counts, key=lambda r: counts[r])
    share = counts[rank] / judged
    return Arrival(judged, counts, rank, round(share, 4),
                   judged >= policy.arrival_min_steps and share >= policy.persistent_share)
