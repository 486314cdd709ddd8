"""The mean step, where every boundary was seen and the steps vary too much for a median.

A rank that saw every boundary of its steps (``clock_of``'s first branch: e^-λ at most MAX_UNSEEN)
has its intervals for its steps. Where those vary too much for their median to hold within
MAX_STEP_ERROR (``steady_median``: steps of two lengths by turns, as a DataLoader whose workers
deliver in bursts makes; steps slowed at random by other work on the cores), or where the samples' lag
at each end moves it (``batch_timeline.judged_blurred``: one slow step in three), no typical step can be
given: a few steps more or fewer move the median from one length to the other. Their mean can: the
intervals' time over their number, which a boundary more or less moves by one step in all of them.
That is the job's throughput, and it is given as the mean, said so (``StepClock.mean``), never as a
typical step.

A missed boundary moves a median little and a mean by a whole step in all of them, so the mean is
given only where that is unlikely to matter: the chance that sampling hid enough boundaries to move
it beyond MAX_STEP_ERROR, at e^-λ a boundary, is under MEAN_RISK (``clock.mean_at_risk``); it holds even
if every interval as long as two median ones or more hid the boundaries it could, but those its
thread's CPU time says are one slow step (``clock.could_hide_worked``), or the ranks it steps with
(``_peers_say_one``: none of them saw a boundary inside it); ranks that step together
each saw every boundary and their means, over the steps they all hold, agree within MEAN_AGREE (a
rank whose e^-λ is wrong counts fewer, longer steps than its peers; where most agree on the
shortest, the others are such ranks, and have no mean); those that agree are all given the mean of
the one whose intervals hold the most steps (``_one_mean``). Never where the intervals may be
micro-batches: the optimizer seen in some of them only, the long ones
(``accumulation.stepping_some``), or its visits, weighed on the mean as on any known step, counting
micro-batches or unable to rule them out (``_not_one_micro_batch``).
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable, Iterable
from dataclasses import replace

from traceml_attach.policy import MAX_STEP_ERROR, MAX_UNSEEN, MEAN_AGREE, MIN_INTERVALS, PEERS_ASKED
from traceml_attach.steps.accumulation import accumulated, plan_of, stepping_some
from traceml_attach.steps.batch_timeline import Timeline
from traceml_attach.steps.clock import (
    IRREGULAR,
    Step,
    StepClock,
    could_hide_worked,
    edge_steps,
    mean_refused,
    median_offset,
)


def with_mean(timelines: dict[str, Timeline], synchronized: bool) -> dict[str, Timeline]:
    """``timelines`` with the mean step (``mean_clock``) given to the ranks that saw every boundary
    of steps too uneven for a median; the rest as they were, or with why their mean is not given
    either."""
    varied = {rank: tl for rank, tl in timelines.items() if _varied_whole(tl)}
    if not varied:
        return timelines
    if not synchronized:   # each rank's steps its own
        out = dict(timelines)
        for rank, tl in varied.items():
            out.update(_with_means({rank: tl}, {rank: tl}, False))
        return out
    if len(varied) != sum(1 for tl in timelines.values() if tl.intervals):
        return timelines   # a rank that left boundaries unseen: its steps are not its intervals
    return _with_means(timelines, varied, True)


def _with_means(timelines: dict[str, Timeline], varied: dict[str, Timeline], synchronized: bool
                ) -> dict[str, Timeline]:
    """``with_mean`` of the ``varied`` ranks of ``timelines``: each given its mean, or none (why)."""
    order = list(varied)
    means = {rank: mean_clock(tl, _peers_say_one(tl, _peers(order, i, varied)) if synchronized else None)
             for i, (rank, tl) in enumerate(varied.items())}
    given = {rank: clock for rank, clock in means.items() if isinstance(clock, StepClock)}
    why = next((f"nor their mean: {clock}" for clock in means.values() if isinstance(clock, str)), None)
    strays: dict[str, str] = {}
    edges = {rank: edge for rank, clock in given.items() if (edge := _edge_moves(timelines[rank], clock)) is not None}
    if why is None and edges and (not synchronized or len(edges) == len(given)):
        why = f"nor their mean: {next(iter(edges.values()))}"
    if why is None and synchronized:
        common = _common_means({rank: timelines[rank] for rank in given})
        short, long = min(common, key=common.__getitem__), max(common, key=common.__getitem__)
        lo, hi = common[short], common[long]
        agree = [rank for rank, mean in common.items() if mean <= (1 + MEAN_AGREE) * lo]
        if hi > (1 + MEAN_AGREE) * lo and 2 * len(agree) <= len(common):
            why = (f"nor their mean: the ranks step together, yet their means disagree ({lo / 1e6:.1f} ms on rank "
                   f"{short}, {hi / 1e6:.1f} on rank {long}), so a rank left some boundaries unseen")
        # a boundary unseen only lengthens a mean: where most ranks agree on the shortest, the
        # others left boundaries unseen, and no mean of theirs is given (8 ranks slowed at random
        # by a loader in Python, 144 steps: six within 1% of 68.8 ms, two at 69.8 and 70.3)
        strays = {rank: (f"nor its mean: {common[rank] / 1e6:.1f} ms, longer than the {lo / 1e6:.1f} ms that "
                         f"{len(agree)} of the {len(common)} ranks agree on, so this rank left some boundaries unseen")
                  for rank in common if rank not in agree}
        # a rank whose edge may hide a step its peers saw: theirs stand, its own does not
        strays.update({rank: f"nor its mean: {edge}" for rank, edge in edges.items() if rank not in strays})
    if why is not None:
        return {rank: replace(tl, clock=replace(tl.clock, reason=f"{tl.clock.reason}; {why}"))
                if rank in varied and tl.clock.reason else tl for rank, tl in timelines.items()}
    if synchronized:
        given = {**given, **_one_mean(timelines, {rank: clock for rank, clock in given.items() if rank not in strays})}
    out = dict(timelines)
    for rank in given:
        tl = timelines[rank]
        if rank in strays:
            reason = "; ".join(filter(None, (tl.clock.reason, strays[rank])))
            out[rank] = replace(tl, clock=replace(tl.clock, reason=reason))
        else:
            out[rank] = replace(tl, clock=given[rank], step_floor=None)
    micro, weighed = _not_one_micro_batch(out, [r for r in given if r not in strays], synchronized)
    if micro is None:
        return out
    refused = {rank: replace(tl, clock=replace(tl.clock, reason=f"{tl.clock.reason}; nor their mean: {micro}"))
               if rank in given and tl.clock.reason else tl for rank, tl in timelines.items()}
    # a rank whose intervals the optimizer's visits counted as micro-batches, its optimizer steps
    # unknown, says so in its counts: micro-batches per step, and the optimizer steps seen (its
    # intervals, counted as steps, said "1 micro-batch a step" beside a reason that said otherwise)
    for rank in given:
        counted = weighed[rank]
        if counted.micro_batches != 1 and not counted.clock.known:
            refused[rank] = replace(counted, clock=replace(
                counted.clock, reason=refused[rank].clock.reason or counted.clock.reason))
    return refused


def _not_one_micro_batch(timelines: dict[str, Timeline], given: Iterable[str], synchronized: bool
                         ) -> tuple[str | None, dict[str, Timeline]]:
    """Why the steps given a mean are not each one optimizer step (None: they are), and the
    timelines as the optimizer's visits weighed them: the visits, weighed on the mean as on any
    known step (``accumulation.plan_of``, ``accumulated``), must leave each rank of ``given``
    known, of one micro-batch a step."""
    plans = {rank: plan_of(tl) for rank, tl in timelines.items()}
    out = accumulated(timelines, plans, synchronized)
    for rank in given:
        tl = out[rank]
        if not tl.clock.known:
            return tl.clock.reason or "weighed with the optimizer's visits, it is no optimizer step's", out
        if tl.micro_batches != 1:
            k = f"{tl.micro_batches} " if tl.micro_batches else ""
            return f"the optimizer's visits make the steps seen {k}micro-batches of an optimizer step", out
    return None, out


def _one_mean(timelines: dict[str, Timeline], given: dict[str, StepClock]) -> dict[str, StepClock]:
    """Ranks that step together, given their means: each given that of the rank whose intervals
    hold the most steps (the fewest missing at the window's edges). Over their own spans they hold a
    few different steps at either end, and steps that vary enough for a mean vary enough for those
    few to move it: 2 ranks of an input straggler slowed by a loaded machine (steps of 380 to 900
    ms), 15 steps in the live window, were given 630 and 580 ms, the window's mean 579 (CI, stop 62)."""
    if len(given) < 2:
        return given
    ref = max(sorted(given), key=lambda rank: sum(1 for iv in timelines[rank].intervals if not iv.swallowing))
    mean = given[ref].typical_ns
    return {rank: replace(clock, period_ns=mean, typical_ns=mean) for rank, clock in given.items()}


def _common_means(timelines: dict[str, Timeline]) -> dict[str, float]:
    """Each rank's mean over its intervals (those seen whole) whose middles lie in the span every
    rank's intervals cover (half a step from either end, so the blur of a boundary there does not
    move one in or out): ranks that step together then measure the same steps. Over their own spans
    they measure a few different ones at either end, which moves a mean by a share of the spread
    of the steps: 4 ranks whose 6 workers deliver in bursts (steps of 15 ms to 1.2 s), two of them
    without a 1.2-s step at an edge, 38 steps of 248.2 ms beside 39 of 252.3, and 248.2-248.6 over
    the span they share. Where the span holds none of a rank's, its mean over its own."""
    lo = max(tl.intervals[0].start_ns for tl in timelines.values())
    hi = min(tl.intervals[-1].end_ns for tl in timelines.values())
    out = {}
    for rank, tl in timelines.items():
        whole = [iv for iv in tl.intervals if not iv.swallowing]
        inside = [iv.dur_ns for iv in whole if lo <= (iv.start_ns + iv.end_ns) // 2 <= hi]
        out[rank] = statistics.fmean(inside or [iv.dur_ns for iv in whole])
    return out


def _varied_whole(tl: Timeline) -> bool:
    """Whether ``tl``'s clock is unknown only because its steps, every boundary seen, vary too
    much for a median (``clock_of``, ``sync.varied_clock``), and nothing says its intervals are
    micro-batches."""
    clock = tl.clock
    if clock.known or clock.cause not in (None, IRREGULAR) or tl.micro_batches != 1:
        return False
    if clock.unseen is None or clock.unseen > MAX_UNSEEN or len(tl.intervals) < MIN_INTERVALS:
        return False
    return not stepping_some(tl)


def mean_clock(tl: Timeline, one_step: Callable[[Step], bool] | None = None) -> StepClock | str:
    """The mean of ``tl``'s intervals, each one step (every boundary seen; those that swallowed a
    sampler drop-out left out: their steps are not known), where it holds; else why it does not.
    ``one_step``: what the ranks it steps with say of its long intervals (``_peers_say_one``)."""
    whole = [iv for iv in tl.intervals if not iv.swallowing]
    n = len(whole)
    why = mean_refused(n, could_hide_worked(whole, one_step) if n >= MIN_INTERVALS else 0, tl.clock.unseen or 0.0)
    if why is not None:
        return why
    mean = sum(s.dur_ns for s in whole) / n
    edges = edge_steps(tl.bounds, tl.start_seen_ns, tl.end_ns, mean, tl.rate_hz, tl.clock.unseen)
    return StepClock("wraps", mean, 1.0, None, unseen=tl.clock.unseen, typical_ns=mean, edge_steps=edges, mean=True)


def _peers(order: list[str], i: int, timelines: dict[str, Timeline]) -> list[Timeline]:
    """The PEERS_ASKED ranks after ``order[i]`` (round the end), whose boundaries ``_peers_say_one``
    asks about its long intervals."""
    after = order[i + 1:] + order[:i]
    return [timelines[rank] for rank in after[:PEERS_ASKED]]


def _peers_say_one(tl: Timeline, peers: list[Timeline]) -> Callable[[Step], bool]:
    """Whether an interval of ``tl`` is one slow step by the ranks that step with it (``peers``, each
    of which saw every boundary too; ``_peers``): at least one of them covers it, and none of those saw a
    boundary inside it, more than half a short interval from its ends once their boundaries
    are shifted by their median offset from this rank's. A slow step holds every rank; a boundary
    this rank missed, its peers see (each at its own e^-λ, so all of them miss one together at the
    product of theirs). Bursty loaders on 4 ranks (steps of 30 ms and more, every boundary seen)
    were refused a mean because their long intervals "could hide" steps that no rank saw."""
    whole = sorted(iv.dur_ns for iv in tl.intervals if not iv.swallowing)
    own = sorted(tl.bounds)
    if not whole or not own:
        return lambda iv: False
    # half the short steps' length (their 10th percentile): the ranks' boundaries of one step lie a
    # few ms apart beyond their median offset (4 ms either way at 400 Hz), a missed one a step away
    margin = whole[len(whole) // 10] / 2
    shifted: list[list[float]] = []   # each peer's boundaries in this rank's time, once first asked

    def one(iv: Step) -> bool:
        if not shifted:
            for peer in peers:
                if peer.bounds:   # (their offset is steady: 64 of them tell its median)
                    shift = median_offset(peer.bounds[::max(1, len(peer.bounds) // 64)], own)
                    shifted.append(sorted(b - shift for b in peer.bounds))
        lo, hi = iv.start_ns + margin, iv.end_ns - margin
        covering = [bounds for bounds in shifted if bounds[0] <= lo and bounds[-1] >= hi]
        return bool(covering) and all(bisect.bisect_right(bounds, lo) == bisect.bisect_left(bounds, hi)
                                      for bounds in covering)

    return one


def _edge_moves(tl: Timeline, clock: StepClock) -> str | None:
    """Why the window's edges leave ``clock``'s mean unknown (None: they do not). Before the
    first boundary seen and after the last, the window may hold a whole step whose other boundary
    no sample showed (the window began at it); where one as long as that edge would move the mean
    beyond MAX_STEP_ERROR, the mean is not known to within it. 2 ranks whose 8 workers deliver in
    bursts (steps of 80 ms, two in eight of 1.05 s): one rank's first sample came after the window's
    first boundary, 1.08 s before its first return, and its mean over 30 steps was 273 ms where the
    window's 31 made 298 (-8.2%); its peer saw that boundary and gave 298 (it stands: ``_with_means``)."""
    mean = clock.typical_ns
    if not mean or not tl.intervals or tl.start_seen_ns is None or tl.end_ns is None:
        return None
    n = sum(1 for iv in tl.intervals if not iv.swallowing)   # mean_clock's steps
    for edge, where in ((tl.intervals[0].start_ns - tl.start_seen_ns, "before its first boundary seen"),
                        (tl.end_ns - tl.intervals[-1].end_ns, "after its last")):
        moved = (edge - mean) / (n + 1) / mean
        if moved > MAX_STEP_ERROR:
            return (f"the {edge / 1e6:.0f} ms {where} may hold a whole step, which would move the mean of "
                    f"{n} steps by {100 * moved:.0f}%")
    return None
