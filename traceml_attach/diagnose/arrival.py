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
from traceml_attach.steps.clock import Step


def last_arrivals(steps: Mapping[str, Sequence[Step]], lo: int, hi: int,
                  policy: WhatIfPolicy = DEFAULT_WHATIF_POLICY) -> tuple[int, dict[str, int]]:
    """(steps judged, steps each rank arrived last in) over the steps that end in [lo, hi) (the
    newest of them where there are many ranks). One walk along each rank's steps (their ends only grow)."""
    if len(steps) < 2:
        return 0, {}
    # bounded cost: the newest steps only, where ranks x steps would pass policy.arrival_max_cells
    keep = max(1, policy.arrival_max_cells // len(steps))
    since = lo
    newest = _timed_tail(next(iter(steps.values())), lo, hi, lo)
    if len(newest) > keep:
        since = newest[-keep].start_ns
    timed = {rank: _timed_tail(ss, lo, hi, since) for rank, ss in steps.items()}
    if not all(timed.values()):
        return 0, {}
    ref = min(timed, key=lambda rank: len(timed[rank]))
    ref_steps = timed[ref]
    rows = {rank: ([s.end_ns for s in ts], [sum((s.blocked_sync_ns or {}).values()) / max(s.dur_ns, 1) for s in ts])
            for rank, ts in timed.items()}   # each rank's step ends and blocked shares
    at = dict.fromkeys(rows, 0)
    judged, last = 0, dict.fromkeys(rows, 0)
    margin = policy.arrival_margin_share
    for step in ref_steps:
        end, half = step.end_ns, step.dur_ns / 2
        least = second = float("inf")
        who = None
        for rank, (ends, shares) in rows.items():
            i, n = at[rank], len(ends)
            while i + 1 < n and abs(ends[i + 1] - end) <= abs(ends[i] - end):
                i += 1
            at[rank] = i
            if abs(ends[i] - end) > half:
                break
            v = shares[i]
            if v < least:
                least, second, who = v, least, rank
            elif v < second:
                second = v
        else:
            judged += 1
            if who is not None and second - least >= margin:
                last[who] += 1
    return judged, last


def _timed_tail(steps: Sequence[Step], lo: int, hi: int, since: int) -> list[Step]:
    """The covered steps with blocked time that end in [max(lo, since), hi): found by bisection
    (their ends only grow), then read forward from there."""
    out = []
    for s in steps[bisect.bisect_left(steps, max(lo, since), key=lambda s: s.end_ns):]:
        if s.end_ns >= hi:
            break
        if s.covered and s.blocked_sync_ns is not None:
            out.append(s)
    return out


def arrival(judged: int, last: Mapping[str, int], policy: WhatIfPolicy = DEFAULT_WHATIF_POLICY) -> Arrival | None:
    """The persistence verdict over ``judged`` steps; None where no step could be judged."""
    if judged <= 0 or not last:
        return None
    counts = {int(rank): n for rank, n in sorted(last.items(), key=lambda kv: int(kv[0]))}
    rank = max(counts, key=lambda r: counts[r])
    share = counts[rank] / judged
    return Arrival(judged, counts, rank, round(share, 4),
                   judged >= policy.arrival_min_steps and share >= policy.persistent_share)
