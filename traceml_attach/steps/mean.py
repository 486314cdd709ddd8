"""The mean step, where every boundary was seen and the steps vary too much for a median.

A rank that saw every boundary of its steps (``clock_of``'s first branch: e^-λ at most MAX_UNSEEN)
has its intervals for its steps. Where those vary too much for their median to hold within
MAX_STEP_ERROR (``steady_median``: steps of two lengths by turns, as a DataLoader whose workers
deliver in bursts makes; steps slowed at random by other work on the cores), no typical step can be
given: a few steps more or fewer move the median from one length to the other. Their mean can: the
intervals' time over their number, which a boundary more or less moves by one step in all of them.
That is the job's throughput, and it is given as the mean, said so (``StepClock.mean``), never as a
typical step.

e^-λ is measured on the visits outside the loop's dominant place, and steps that vary may hide a
boundary it does not expect (a slowed step's input running on into the next). So the mean is given
only where it holds even if every interval as long as two median ones or more hid the boundaries it
could (``_could_hide``: at most MAX_STEP_ERROR of the steps more); where ranks step together, only
where every one of them saw every boundary and their means agree within MEAN_AGREE; and never where
the intervals may be micro-batches (the optimizer seen in some of them only: gradient accumulation,
whose micro-batches are no steps).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace

from traceml_attach.policy import MAX_STEP_ERROR, MAX_UNSEEN, MEAN_AGREE, MIN_INTERVALS, STEPPING_SEEN
from traceml_attach.steps.batch_timeline import Timeline
from traceml_attach.steps.clock import IRREGULAR, Step, StepClock, edge_steps


def with_mean(timelines: dict[str, Timeline], synchronized: bool) -> dict[str, Timeline]:
    """``timelines`` with the mean step (``mean_clock``) given to the ranks that saw every boundary
    of steps too uneven for a median; the rest as they were, or with why their mean is not given
    either."""
    varied = {rank: tl for rank, tl in timelines.items() if _varied_whole(tl)}
    if not varied:
        return timelines
    if synchronized and len(varied) != sum(1 for tl in timelines.values() if tl.intervals):
        return timelines   # a rank that left boundaries unseen: its steps are not its intervals
    means = {rank: mean_clock(tl) for rank, tl in varied.items()}
    given = {rank: clock for rank, clock in means.items() if clock is not None}
    why = None
    if len(given) != len(varied):
        why = ("nor their mean: intervals as long as two steps or more could hide more than "
               f"{100 * MAX_STEP_ERROR:.0f}% of the steps")
    elif synchronized:
        short, long = (min(given, key=lambda r: _period(given[r])), max(given, key=lambda r: _period(given[r])))
        lo, hi = _period(given[short]), _period(given[long])
        if hi > (1 + MEAN_AGREE) * lo:
            why = (f"nor their mean: the ranks step together, yet their means disagree ({lo / 1e6:.1f} ms on rank "
                   f"{short}, {hi / 1e6:.1f} on rank {long}), so a rank left some boundaries unseen")
    if why is not None:
        return {rank: replace(tl, clock=replace(tl.clock, reason=f"{tl.clock.reason}; {why}"))
                if rank in varied and tl.clock.reason else tl for rank, tl in timelines.items()}
    return {rank: replace(tl, clock=given[rank]) if rank in given else tl for rank, tl in timelines.items()}


def _period(clock: StepClock) -> float:
    return clock.period_ns or 0.0


def _varied_whole(tl: Timeline) -> bool:
    """Whether ``tl``'s clock is unknown only because its steps, every boundary seen, vary too
    much for a median (``clock_of``, ``sync.varied_clock``), and nothing says its intervals are
    micro-batches."""
    clock = tl.clock
    if clock.known or clock.cause not in (None, IRREGULAR) or tl.micro_batches != 1 or tl.step_floor is not None:
        return False
    if clock.unseen is None or clock.unseen > MAX_UNSEEN or len(tl.intervals) < MIN_INTERVALS:
        return False
    covered = [iv for iv in tl.intervals if iv.covered]
    seen = sum(1 for iv in covered if iv.phases_ns.get("optimizer", 0) > 0)
    return not 0 < seen <= STEPPING_SEEN * len(covered)


def mean_clock(tl: Timeline) -> StepClock | None:
    """The mean of ``tl``'s intervals, each one step (every boundary seen; those that swallowed a
    sampler drop-out left out: their steps are not known), where it holds (``_could_hide``)."""
    whole = [iv for iv in tl.intervals if not iv.swallowing]
    if len(whole) < MIN_INTERVALS or _could_hide(whole) > MAX_STEP_ERROR * len(whole):
        return None
    mean = sum(s.dur_ns for s in whole) / len(whole)
    edges = edge_steps(tl.bounds, tl.start_seen_ns, tl.end_ns, mean, tl.rate_hz, tl.clock.unseen)
    return StepClock("wraps", mean, 1.0, None, unseen=tl.clock.unseen, typical_ns=mean, edge_steps=edges, mean=True)


def _could_hide(steps: Sequence[Step]) -> int:
    """The boundaries that ``steps`` could hide: an interval n median ones long or more, n - 1."""
    median = statistics.median(s.dur_ns for s in steps)
    return sum(int(s.dur_ns // median) - 1 for s in steps if s.dur_ns >= 2 * median)
