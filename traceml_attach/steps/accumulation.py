"""Gradient accumulation: a step is an optimizer step.

With gradient accumulation the loop frame wraps once per micro-batch (a plain ``for`` over the
loader that steps the optimizer every k-th batch, Lightning's ``accumulate_grad_batches``, HF's
inner micro-batch loop), so the step clock counts micro-batches. The optimizer's own work then
shows in one interval out of k: the intervals that hold optimizer time sit k micro-batch periods
apart, or a multiple of k where a short optimizer step went unsampled. Without accumulation the
gaps between them are 1 (or, for an optimizer step too short to be seen in every step, spread
over every whole number), so k is the gap that the others are multiples of.

``with_accumulation`` then groups the micro-batches into optimizer steps: k consecutive ones,
aligned so that each group ends with the micro-batch that stepped the optimizer. Everything
downstream (the step table, the rollups, the diagnoses) counts optimizer steps, and
``Timeline.micro_batches`` says how many micro-batches each one holds.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from traceml_attach.steps.phases import PHASES
from traceml_attach.steps.timeline import Step, Timeline

MAX_MICRO_BATCHES = 64    # larger k are not looked for
MIN_GAPS = 4              # optimizer intervals apart: at least this many gaps to judge k
MULTIPLE_SHARE = 0.8      # at least this share of the gaps are whole multiples of k
MAX_ADJACENT = 0.1        # and at most this share are one micro-batch


def micro_batches(intervals: Sequence[Step], period_ns: float | None) -> int:
    """k, the micro-batches per optimizer step, from where the optimizer's time falls among the
    intervals between the loop's observed wraps (1: no accumulation seen)."""
    if not period_ns:
        return 1
    ends = [iv.end_ns for iv in intervals if iv.covered and iv.phases_ns.get("optimizer", 0) > 0]
    gaps = [round((b - a) / period_ns) for a, b in itertools.pairwise(ends)]
    gaps = [g for g in gaps if g > 0]
    if len(gaps) < MIN_GAPS:
        return 1
    counts = Counter(gaps)
    k = min(g for g, n in counts.items() if n == max(counts.values()))
    if not 2 <= k <= MAX_MICRO_BATCHES:
        return 1
    multiples = sum(1 for g in gaps if g % k == 0) / len(gaps)
    adjacent = counts[1] / len(gaps)
    return k if multiples >= MULTIPLE_SHARE and adjacent <= MAX_ADJACENT else 1


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
        if any(b.start_ns != a.end_ns for a, b in itertools.pairwise(run)):
            continue   # a hole inside: not one optimizer step
        blocked: dict[str, int] | None = None
        if all(s.blocked_sync_ns is not None for s in run):
            blocked = {}
            for s in run:
                for phase, ns in (s.blocked_sync_ns or {}).items():
                    blocked[phase] = blocked.get(phase, 0) + ns
        out.append(Step(run[0].start_ns, run[-1].end_ns, {p: sum(s.phases_ns[p] for s in run) for p in PHASES},
                        blocked, covered=all(s.covered for s in run),
                        swallowing=any(s.swallowing for s in run)))
    return tuple(out)


def with_accumulation(tl: Timeline) -> Timeline:
    """The timeline counted in optimizer steps when its loop accumulates gradients."""
    k = micro_batches(tl.intervals, tl.clock.period_ns)
    if k == 1:
        return tl
    clock = tl.clock
    clock = replace(clock, period_ns=(clock.period_ns or 0.0) * k,
                    typical_ns=clock.typical_ns * k if clock.typical_ns is not None else None,
                    step_upper_ns=clock.step_upper_ns * k if clock.step_upper_ns is not None else None,
                    edge_steps=clock.edge_steps // k)
    return replace(tl, steps=group(tl.steps, k), clock=clock, micro_batches=k)
