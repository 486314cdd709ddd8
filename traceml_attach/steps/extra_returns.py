"""Returns that begin no step: short intervals whose lack of optimizer visits says they are none.

A rank counted one micro-batch a step takes every return of its loop for a step boundary. Where an
optimizer step holds micro-batches of very different lengths, its returns are not all boundaries,
yet the optimizer is seen too seldom to count the micro-batches (``accumulation.plan_of``): two
micro-batches a step, one waiting 13 ms for a bursty DataLoader's batch and one taking 1 ms with
the batch already delivered, show the second return in one step of six at 400 Hz. Those steps
were counted twice, the 1-ms piece as a step of its own: 516-592 steps for the job's 499 (+3-19%),
while the median (19.8 ms for 20.0) held.

The optimizer runs once a step, however long the step is: sampling at a steady rate sees it in a
share p of the steps, short or long. Where the intervals shorter than SHORT_RETURN of the typical
step show it far less often than the longer ones (in at most EXTRA_RETURN_SHARE of their share,
and by chance at most EXTRA_RETURN_CHANCE likely: Fisher's exact test), they are no steps: each of
them without a visit joins the neighbour that makes the nearer to one typical step. Short steps
of their own (a burst of delivered batches, each one step: the grid's bursty jobs, down to 0.07 of
the median) show the optimizer as often as the long ones, and are kept: nearly as often where
their ends blur (4 synchronized ranks of 30-ms steps, 4 workers, at 400 Hz: 76% of 91 short steps
against 87% of 277, by chance 1.1%), and the share keeps a difference that small from deciding.
Quick grid (docs/steps.md, "Returns that begin no step"): counts beyond 3% 148 -> 120, the live
view's 30-s windows 102 -> 75; 28 rank-windows mended, none broken, no step time changed.

Where the piece after such a return ends the step, it holds the optimizer as often as a whole step
and the visits cannot tell; synchronized peers can (``without_peers_returns``): they take the same
steps, so short steps that one rank shows far more often than a peer are returns inside a step."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from traceml_attach.policy import AGREE, EXTRA_RETURN_CHANCE, EXTRA_RETURN_SHARE, INLIER, SHORT_RETURN
from traceml_attach.steps.accumulation import merged_steps
from traceml_attach.steps.batch_timeline import Timeline
from traceml_attach.steps.clock import Step

MIN_STEPS = 10   # fewer steps say too little of how often the optimizer is seen


def without_returns(timelines: dict[str, Timeline], sync: bool) -> dict[str, Timeline]:
    """The ranks' ``timelines`` without the returns that begin no step: each rank's that the
    optimizer's visits tell (``without_extra_returns``), then those its synchronized peers do
    (``without_peers_returns``)."""
    return without_peers_returns({rank: without_extra_returns(tl) for rank, tl in timelines.items()}, sync)


def without_extra_returns(tl: Timeline) -> Timeline:
    """``tl`` with its short steps that are no steps (see the module's doc) joined to a neighbour;
    ``tl`` itself where there are none."""
    typical = tl.clock.typical_ns
    steps = tl.steps
    if (typical is None or tl.micro_batches != 1 or tl.step_floor is not None or len(steps) < MIN_STEPS
            or min(s.end_ns - s.start_ns for s in steps) >= SHORT_RETURN * typical):
        return tl
    short = [i for i, s in enumerate(steps) if s.covered and s.dur_ns < SHORT_RETURN * typical]
    long = [s for s in steps if s.covered and s.dur_ns >= SHORT_RETURN * typical]
    if not short or not long:
        return tl
    visited = sum(1 for i in short if _visited(steps[i]))
    others = sum(1 for s in long if _visited(s))
    if (visited / len(short) > EXTRA_RETURN_SHARE * others / len(long)
            or fewer_by_chance(visited, len(short), others, len(long)) > EXTRA_RETURN_CHANCE):
        return tl
    extra = {i for i in short if not _visited(steps[i])}
    return replace(tl, steps=tuple(_joined(steps, extra, typical)))


def _visited(step: Step) -> bool:
    return step.phases_ns.get("optimizer", 0) > 0


def _completes(steps: Sequence[Step], i: int, typical: float) -> bool:
    """Whether ``steps[i]`` and an adjoining step make one ``typical`` step, within INLIER of it."""
    step = steps[i]
    return any(0 <= j < len(steps) and (steps[j].end_ns == step.start_ns if j < i else steps[j].start_ns == step.end_ns)
               and abs(steps[j].dur_ns + step.dur_ns - typical) <= INLIER * typical for j in (i - 1, i + 1))


def fewer_by_chance(visited: int, of: int, others_visited: int, others: int) -> float:
    """How likely ``visited`` or fewer of ``of`` steps show the optimizer where ``others_visited`` of
    ``others`` do, were both alike (Fisher's exact test, one-sided: the hypergeometric tail). 1 (no
    evidence) where the counts are more than their steps together can hold, no draw: the steps seen
    whole are the comb's share of those covered, and the short returns can outnumber them where it
    is low (the grid's bursty family met it under a change to e^-λ tried at stop 89, and the analysis
    raised ZeroDivisionError)."""
    total = visited + others_visited
    ways = math.comb(of + others, total)
    if not ways:
        return 1.0
    return sum(math.comb(of, j) * math.comb(others, total - j) for j in range(visited + 1)) / ways


def _joined(steps: Sequence[Step], extra: set[int], typical: float) -> list[Step]:
    """``steps`` with each of ``extra`` joined to the adjoining step (not one of ``extra``) that makes
    the nearer to ``typical``; one without such a neighbour stays."""
    out: list[Step] = []
    i = 0
    while i < len(steps):
        step = steps[i]
        if i not in extra:
            out.append(step)
            i += 1
            continue
        before = out[-1] if out and out[-1].end_ns == step.start_ns else None
        after = (steps[i + 1] if i + 1 < len(steps) and i + 1 not in extra
                 and steps[i + 1].start_ns == step.end_ns else None)
        miss_before = math.inf if before is None else abs(before.dur_ns + step.dur_ns - typical)
        miss_after = math.inf if after is None else abs(after.dur_ns + step.dur_ns - typical)
        if before is not None and miss_before <= miss_after:
            out[-1] = merged_steps((before, step))
            i += 1
        elif after is not None:
            out.append(merged_steps((step, after)))
            i += 2
        else:
            out.append(step)
            i += 1
    return out


def without_peers_returns(timelines: dict[str, Timeline], sync: bool) -> dict[str, Timeline]:
    """The synchronized ranks' ``timelines`` with the short steps of a rank that shows far more of
    them than a peer joined to a neighbour (``_joined``), as ``without_extra_returns`` joins those
    the optimizer's visits tell. Synchronized ranks take the same steps: a step under SHORT_RETURN of
    the typical one on one rank is as short on every rank, and a peer that sees its boundaries shows
    it as often. Where a rank's short steps are more common than on the peers that show fewest of
    them, of their steps seen whole (``StepClock.visible``), by chance at most EXTRA_RETURN_CHANCE
    (Fisher's exact test), they are returns inside a step. 8 ranks accumulating 2 micro-batches of
    20-ms steps whose 2 workers deliver in bursts, at 400 Hz: the 1-ms micro-batch's return, seen
    now and then, split a step in two, and the piece after it holds the optimizer as often as a
    whole step does (the piece ends the step), so the visits cannot tell; rank 0 showed 107 short
    steps in 602 for the job's 501 (+20%), ranks 2 and 4 one and none of ~500."""
    if not sync:
        return timelines
    # rank -> (its typical step, its short steps, its steps seen whole)
    short: dict[str, tuple[float, set[int], int]] = {}
    for rank, tl in timelines.items():
        typical = tl.clock.typical_ns
        # (not where the steps drift or changed length, given as their mean: a short step there may be
        # one of the fast stretch's, 0.4 of the typical on a 2.5x ramp; a mean given for the blur of
        # steps few samples long, ``StepClock.blurred``, is of steps on one period)
        varied = tl.clock.mean and not tl.clock.blurred
        if typical is None or tl.step_floor is not None or varied or tl.clock.shift_ns is not None:
            continue
        whole = round(sum(1 for s in tl.steps if s.covered) * (tl.clock.visible or 0.0))
        if whole >= MIN_STEPS:
            extra = {i for i, s in enumerate(tl.steps) if s.covered and s.dur_ns < SHORT_RETURN * typical}
            short[rank] = (typical, extra, whole)
    if len(short) < 2:
        return timelines
    # the peers that show fewest, pooled where they tie (4 ranks of 230-ms steps at 300 Hz: three with
    # none of 43, the fourth with 5 of 48: one of the three alone, 4% by chance; the three, 0.15%)
    least = min(len(extra) / whole for _, extra, whole in short.values())
    refs = [rank for rank, (_, extra, whole) in short.items() if len(extra) / whole == least]
    theirs = short[refs[0]][0]
    fewest, seen = sum(len(short[rank][1]) for rank in refs), sum(short[rank][2] for rank in refs)
    out = dict(timelines)
    for rank, (typical, extra, whole) in short.items():
        tl = timelines[rank]
        # (a rank whose steps group its returns by k, or by the optimizer's visits, may show the way,
        # as its steps are the job's; only the returns of one counted a micro-batch a step are joined)
        if (rank in refs or not extra or tl.micro_batches != 1 or abs(typical / theirs - 1) > AGREE
                or fewer_by_chance(fewest, seen, len(extra), whole) > EXTRA_RETURN_CHANCE):
            continue
        # ...each one that makes one typical step with a neighbour (within INLIER of it): a short step
        # that is the blur of where the samples fell (a boundary seen late) makes two with the long
        # one before it, and one and a half with the next (8 ranks of 13-ms steps at 400 Hz, 5.2
        # samples a step: 41 short on a rank that counted 785 for the job's 768; all joined, 744)
        completing = {i for i in extra if _completes(tl.steps, i, typical)}
        out[rank] = replace(tl, steps=tuple(_joined(tl.steps, completing, typical)))
    return out
