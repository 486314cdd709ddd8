"""Gradient accumulation: a step is an optimizer step.

With gradient accumulation the loop frame wraps once per micro-batch (a plain ``for`` over the
loader that steps the optimizer every k-th batch, Lightning's ``accumulate_grad_batches``, HF's
inner micro-batch loop), so the step clock counts micro-batches. The optimizer's own work then
shows in one interval out of k: the intervals that hold optimizer time sit k micro-batch periods
apart, or a multiple of k where a short optimizer step went unsampled. Without accumulation the
gaps between them are 1 (or, for an optimizer step too short to be seen in every step, spread
over every whole number), so k is the largest number that (nearly) all the gaps are multiples of.

``with_accumulation`` then groups the micro-batches into optimizer steps: k consecutive ones,
aligned so that each group ends with the micro-batch that stepped the optimizer. Everything
downstream (the step table, the rollups, the diagnoses) counts optimizer steps, and
``Timeline.micro_batches`` says how many micro-batches each one holds.

Where the micro-batches cannot be counted (shorter than the sampler can tell apart, or wraps of
two nested loops mixed), the optimizer steps are found from the optimizer alone (``by_optimizer``),
and how many micro-batches each holds is unknown (``micro_batches`` None).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import replace

from traceml_attach.steps.phases import PHASES
from traceml_attach.steps.timeline import Step, Timeline, clock_of, expand

MAX_MICRO_BATCHES = 64    # larger k are not looked for
MIN_GAPS = 6              # optimizer intervals apart: at least this many gaps to judge k
MULTIPLE_SHARE = 0.8      # at least this share of the gaps are whole multiples of k...
MAX_ADJACENT = 0.1        # ...at most this share are one micro-batch...
MIN_SEEN = 0.3            # ...the optimizer was seen in at least this share of the optimizer steps...
# ...and that many multiples would arise by chance without accumulation (the optimizer seen in
# random steps) with at most this probability: a live view tests every rank at every tick
MAX_CHANCE = 1e-5


def micro_batches(intervals: Sequence[Step], period_ns: float | None) -> int:
    """k, the micro-batches per optimizer step, from where the optimizer's time falls among the
    intervals between the loop's observed wraps (1: no accumulation seen)."""
    if not period_ns:
        return 1
    # each interval's place in micro-batches, counted (not timed: a time over the period drifts by
    # the optimizer's own time once per step, and by the jitter of every micro-batch); the
    # optimizer's own time is no micro-batch's
    marks, steps, end = [], 0, None
    for iv in intervals:
        if end is not None and iv.start_ns > end:
            steps += round((iv.start_ns - end) / period_ns)   # a hole between intervals
        steps += max(round((iv.dur_ns - iv.phases_ns.get("optimizer", 0)) / period_ns), 1)
        end = iv.end_ns
        if iv.covered and iv.phases_ns.get("optimizer", 0) > 0:
            marks.append(steps)
    gaps = [b - a for a, b in itertools.pairwise(marks)]
    if len(gaps) < MIN_GAPS or sum(1 for g in gaps if g == 1) > MAX_ADJACENT * len(gaps):
        return 1
    # Without accumulation, the optimizer is seen in a step with some chance p (the share of steps
    # it was seen in), so a gap is a multiple of k with chance p(1-p)^(k-1) / (1-(1-p)^k).
    p = min(len(marks) / max(steps, 1), 0.999)
    # the largest k that the gaps are multiples of (a short optimizer step goes unseen now and then,
    # which makes a gap of 2k or 3k, never one that k does not divide)
    for k in range(min(MAX_MICRO_BATCHES, max(gaps)), 1, -1):
        hits = sum(1 for g in gaps if g % k == 0)
        if hits < MULTIPLE_SHARE * len(gaps) or len(marks) * k < MIN_SEEN * steps:
            continue
        chance = p * (1 - p) ** (k - 1) / (1 - (1 - p) ** k)
        if _tail(len(gaps), hits, chance) <= MAX_CHANCE:
            return k
    return 1


def _tail(n: int, m: int, q: float) -> float:
    """P(at least m of n independent events of chance q)."""
    return sum(math.comb(n, i) * q ** i * (1 - q) ** (n - i) for i in range(m, n + 1))


def group(steps: Sequence[Step], k: int) -> tuple[Step, ...]:
    """Consecutive runs of k micro-batch steps as optimizer steps, aligned so that the most groups
    end with a step that holds optimizer time; incomplete groups at either end are left out."""
    if k <= 1 or len(steps) < k:
        return tuple(steps)
    stepped = [s.phases_ns.get("optimizer", 0) > 0 for s in steps]
    offset = max(range(k), key=lambda o: (sum(stepped[i + k - 1] for i in range(o, len(steps) - k + 1, k)), -o))
    out = []
    for i in range(offset, len(steps) - k + 1, k):
        run = steps[i:i + k]
        if all(a.end_ns == b.start_ns for a, b in itertools.pairwise(run)):   # no hole inside
            out.append(_merged(run))
    return tuple(out)


def _merged(run: Sequence[Step]) -> Step:
    """Consecutive steps as one."""
    blocked: dict[str, int] | None = None
    if all(s.blocked_sync_ns is not None for s in run):
        blocked = {}
        for s in run:
            for phase, ns in (s.blocked_sync_ns or {}).items():
                blocked[phase] = blocked.get(phase, 0) + ns
    return Step(run[0].start_ns, run[-1].end_ns, {p: sum(s.phases_ns[p] for s in run) for p in PHASES},
                blocked, covered=all(s.covered for s in run), swallowing=any(s.swallowing for s in run))


def by_optimizer(tl: Timeline) -> Timeline | None:
    """Optimizer steps where the loop's own clock is unknown: micro-batches too short to be told
    apart, or the wraps of an outer and an inner loop mixed (HF's step loop around its micro-batch
    loop). Each wrap right after optimizer time ends an optimizer step; the intervals between such
    wraps are whole numbers of optimizer steps (a short optimizer step goes unseen now and then),
    and the step period is fitted to them as to any loop's wraps. None when no period fits."""
    if tl.loop is None:
        return None
    groups: list[Step] = []
    run: list[Step] = []
    started = False            # a wrap after optimizer time was seen, with no hole since
    end = None
    for iv in tl.intervals:
        if end is not None and iv.start_ns != end:
            run, started = [], False   # a hole: the next step starts at the next optimizer wrap
        end = iv.end_ns
        run.append(iv)
        if iv.covered and iv.phases_ns.get("optimizer", 0) > 0:
            if started:
                groups.append(_merged(run))
            run, started = [], True
    clock, counts = clock_of([g.dur_ns for g in groups], None, tl.rate_hz)
    if not clock.known:
        return None
    steps = expand(groups, counts)
    typical = clock.period_ns if clock.method == "comb" else statistics.median(s.dur_ns for s in steps)
    return replace(tl, steps=steps, clock=replace(clock, typical_ns=typical), micro_batches=None)


def with_accumulation(tl: Timeline, k: int | None = None) -> Timeline:
    """The timeline counted in optimizer steps when its loop accumulates gradients (``k``: the
    micro-batches per step, when already known)."""
    if not tl.clock.known:
        return by_optimizer(tl) or tl
    if k is None:
        k = micro_batches(tl.intervals, tl.clock.period_ns)
    if k == 1:
        return tl
    clock = tl.clock
    clock = replace(clock, period_ns=(clock.period_ns or 0.0) * k,
                    typical_ns=clock.typical_ns * k if clock.typical_ns is not None else None,
                    step_upper_ns=clock.step_upper_ns * k if clock.step_upper_ns is not None else None,
                    edge_steps=clock.edge_steps // k)
    return replace(tl, steps=group(tl.steps, k), clock=clock, micro_batches=k)
