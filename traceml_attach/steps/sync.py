"""One step clock for ranks that synchronize every step.

Under DDP every rank's step is as long as the slowest one's: the fast ranks wait in the
all-reduce, and all of them leave it together. Their loops are not equally visible, though: a
rank that waits 90% of every step in backward shows few wraps, and on its own its step would be
unknown or merged. The rank that shows its loop best (the fewest boundaries unseen) sets the
clock. When it saw every boundary, its boundaries, aligned in time with each other rank's wraps
(a fixed offset apart, whatever the step time does), say how many steps each of that rank's
intervals holds; otherwise its period does. Every rank then reports the reference's step time.
Two ranks that each saw every boundary and still measured different periods are a measurement
problem, reported as such, never a skew between them.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from traceml_attach.policy import (
    AGREE,
    MAX_STEP_ERROR,
    MAX_UNSEEN,
    MIN_INTERVALS,
    RANKS_MEDIAN,
    REF_MARGIN,
    SEEN_APART,
    SLOW_HIDDEN,
)
from traceml_attach.steps.accumulation import marks_steps
from traceml_attach.steps.batch_timeline import Timeline, without_period
from traceml_attach.steps.clock import (
    IRREGULAR,
    UNEVEN,
    StepClock,
    edge_steps,
    expand_counted,
    lengths_say_slow,
    median_offset,
    shared_unseen,
    sure_counts,
    work_ratio,
)
from traceml_attach.steps.live_tracker import RankTracker
from traceml_attach.steps.period import counted_at, map_counts

# a rank's claim to set the shared clock: its counts need no draw (``sure_counts``), then the
# boundaries it leaves unseen (-e^-λ), then its intervals weighed by its comb's concentration
Quality = tuple[float, float, float]


def _quality(tl: Timeline) -> Quality:
    clock = tl.clock
    unseen = clock.unseen if clock.unseen is not None else 1.0
    ratios = sorted(r for r in map(work_ratio, tl.intervals) if r is not None)
    return (sure_counts(unseen, ratios), -unseen, len(tl.intervals) * (clock.concentration or 1.0) ** 2)


def ranks_median(reference: StepClock, own: Iterable[tuple[StepClock, float | None]]) -> float:
    """The typical step that synchronized ranks share: the median of the typical steps of the ranks
    (``own``: each one's own clock and typical step) whose clock is the ``reference``'s kind (its
    method; a median, or a mean) and within MAX_STEP_ERROR of its step, where RANKS_MEDIAN of them or
    more are; else the reference's own. The ranks take the same steps, and each rank's median is
    theirs blurred by where its own samples fell, so the median over the ranks holds where one
    rank's strays: 8 ranks of ~34-ms steps, 40% of them slowed, at 400 Hz, each saw every boundary,
    their medians 34.3-35.4 ms for the job's 33.7; the reference (the surest clock) gave its 35.4
    (+5.1%) to all, their median is 34.8 (+3.3%). Not over two ranks, whose median is their mean,
    which one rank's stray step moves: on 2 ranks of the grid (``accum_bursty:500:2/3:50:2:1941000``)
    -0.3% became -9.2%. Quick grid: 1,093 rank-windows moved, their mean error 0.62% -> 0.43%, the
    largest 4.7% -> 2.9%."""
    mine = reference.typical_ns
    assert mine is not None
    kind = (reference.method, reference.mean)
    typical = [t for clock, t in own
               if t and (clock.method, clock.mean) == kind and abs(t / mine - 1) <= MAX_STEP_ERROR]
    return float(statistics.median(typical)) if len(typical) >= RANKS_MEDIAN else mine


def _aligned_counts(tl: Timeline, ref_bounds: list[int]) -> tuple[int, ...]:
    """How many of the reference's steps each of ``tl``'s intervals holds: the steps whose middle
    falls inside it (half a step from any boundary, so the blur of either rank's boundaries does
    not move them), after shifting by the median offset between this rank's wraps and the
    reference's boundaries (``clock.median_offset``)."""
    shift = median_offset(tl.bounds, ref_bounds)
    middles = [(a + b) / 2 for a, b in itertools.pairwise(ref_bounds)]
    counts = []
    for step in tl.intervals:
        lo = bisect.bisect_right(middles, step.start_ns - shift)
        hi = bisect.bisect_right(middles, step.end_ns - shift)
        counts.append(max(1, hi - lo))
    return tuple(counts)


def share_period(timelines: dict[str, Timeline]) -> tuple[dict[str, Timeline], str | None]:
    """The timelines of synchronized ranks, counted on one clock (or all unknown, and why). Each
    rank's intervals are counted at the rate they were sampled at (``Timeline.rate_hz``). Where
    the ranks' returns are no steps they take together (``apart``), each keeps its own clock, and
    the second value says why (``noted`` gives it to the ranks whose step stays unknown)."""
    own = {rank: tl for rank, tl in timelines.items() if tl.clock.known}
    if not own:
        return timelines, None
    # a rank whose returns the optimizer's visits say are no steps (``marks_steps``: micro-batches,
    # or returns that split a step) times no step for the others: 2 ranks accumulating 2 micro-batches
    # of 650-ms steps, one seeing returns inside its steps (19 intervals for 14 steps, 566 ms), were
    # both given its median (-18%), where the other's own intervals were its steps
    ref = max(own, key=lambda r: _quality(own[r]))
    if marks_steps(own[ref].intervals, own[ref].rate_hz) is not None:
        stepping = [r for r, tl in own.items() if r != ref and marks_steps(tl.intervals, tl.rate_hz) is None]
        ref = max(stepping, key=lambda r: _quality(own[r])) if stepping else ref
    period = own[ref].clock.period_ns
    assert period is not None
    varied = [r for r, tl in timelines.items() if _saw_them_vary(tl.clock, len(tl.intervals))]
    if varied:
        # (but a rank that did not see every boundary, counted on each side of a change or on its
        # local step where the steps drift, gives their mean, no typical step of two lengths:
        # ``clock.by_regimes``, ``clock.drift_clock``. A job 2.5 times slower at the start: one of 8
        # ranks saw every boundary and no typical step; the 7 others, counted on their local step,
        # gave the job's mean within 0.2%. One that saw them all has its mean from steps/mean.py)
        unknown = varied_clock(varied[0])
        return {r: t if _counts_a_mean(t.clock) else without_period(t, replace(unknown, unseen=t.clock.unseen))
                for r, t in timelines.items()}, None
    for rank, tl in own.items():
        assert tl.clock.period_ns is not None
        # only two ranks that each saw every boundary can contradict each other
        both_saw_all = tl.clock.method == "wraps" and own[ref].clock.method == "wraps"
        if both_saw_all and abs(tl.clock.period_ns - period) > AGREE * period:
            reason = (f"ranks that synchronize every step measured different step periods "
                      f"({period / 1e6:.1f} ms on rank {ref}, {tl.clock.period_ns / 1e6:.1f} ms on rank {rank})")
            unknown = StepClock("unknown", None, None, None, reason)
            return {r: without_period(t, unknown) for r, t in timelines.items()}, None
    reference = own[ref]
    note = apart({rank: (tl.clock, len(tl.intervals)) for rank, tl in own.items()}, ref)
    if note is not None:
        return timelines, note
    if reference.clock.shift_ns is not None:
        # the steps changed length within the window (``clock.by_regimes``): no one period counts the
        # others' intervals, and each rank counted its own on each side of the change
        return timelines, None
    ref_bounds = [s.start_ns for s in reference.steps] + ([reference.steps[-1].end_ns] if reference.steps else [])
    if reference.clock.typical_ns:   # (the typical step the ranks share: the median of theirs)
        typical = ranks_median(reference.clock, [(tl.clock, tl.clock.typical_ns) for tl in own.values()])
        reference = replace(reference, clock=replace(reference.clock, typical_ns=typical))
        timelines = {**timelines, ref: reference}
    out = {}
    for rank, tl in timelines.items():
        if rank == ref or not tl.intervals:
            out[rank] = tl
            continue
        # the reference's own boundaries when it saw them all (they follow a drifting step time);
        # else its period, each interval counted as its most probable number of steps
        if reference.clock.method == "wraps":
            counts = _aligned_counts(tl, ref_bounds)
        else:
            counts = map_counts([float(s.counted_ns) for s in tl.intervals], period, tl.clock.unseen, tl.rate_hz)
        edges = edge_steps(tl.bounds, tl.start_seen_ns, tl.end_ns, period, tl.rate_hz, tl.clock.unseen)
        clock = replace(reference.clock, method="joint", visible=len(counts) / sum(counts),
                        concentration=None, unseen=tl.clock.unseen, edge_steps=edges)
        steps, guessed = expand_counted(tl.intervals, counts, shared_unseen(tl.clock.unseen), tl.rate_hz)
        out[rank] = replace(tl, steps=steps, clock=clock, guessed=guessed)
    return out, None


def apart(clocks: dict[str, tuple[StepClock, int]], ref: str) -> str | None:
    """Why synchronized ranks' returns are no steps they take together, or None where they may be:
    a rank's own returns (its clock and intervals, ``clocks``), nearly all seen (SEEN_APART), fit a
    period that strays from the reference's (``ref``) by more than AGREE, where the reference's are
    nearly all seen too. Its returns are then micro-batches between the ranks' synchronizations,
    and no rank's are counted on another's period (nor those of a rank whose own returns fit no
    period: it may step either way). 8 ranks accumulating 16 micro-batches behind a 30% straggler:
    the straggler's returns came every 81 ms, the others' every 60 ms; counted on the straggler's
    period, each waiting last micro-batch made 5, and their groups of 16 gave 6 optimizer steps of
    1,421-1,454 ms for the job's 7 of 1,303 (+9 to +12%)."""
    theirs = clocks[ref][0]
    if theirs.period_ns is None or theirs.unseen is None or theirs.unseen > SEEN_APART:
        return None
    for rank, (clock, intervals) in clocks.items():
        period = clock.period_ns
        if (period is not None and clock.unseen is not None and clock.unseen <= SEEN_APART
                and intervals >= MIN_INTERVALS and abs(period - theirs.period_ns) > AGREE * theirs.period_ns):
            return (f"rank {rank}'s returns came every {period / 1e6:.1f} ms and rank {ref}'s every "
                    f"{theirs.period_ns / 1e6:.1f} ms, each nearly all seen, though the ranks synchronize: the returns "
                    "are not the steps they take together but what lies between their synchronizations "
                    "(micro-batches of gradient accumulation), and each rank's are counted on its own")
    return None


def noted(timelines: dict[str, Timeline], note: str | None) -> dict[str, Timeline]:
    """The timelines with ``share_period``'s note (why the ranks' returns are no shared steps) after
    the reason of each rank whose step is unknown."""
    if note is None:
        return timelines
    return {rank: tl if tl.clock.known else
            replace(tl, clock=replace(tl.clock, reason=f"{tl.clock.reason}; {note}" if tl.clock.reason else note))
            for rank, tl in timelines.items()}


def _saw_all(clock: StepClock, intervals: int) -> bool:
    """Every boundary seen (``clock_of``'s first branch), with enough intervals to judge them."""
    return clock.unseen is not None and clock.unseen <= MAX_UNSEEN and intervals >= MIN_INTERVALS


def _saw_them_vary(clock: StepClock, intervals: int) -> bool:
    """Every boundary seen and still no typical step."""
    return not clock.known and _saw_all(clock, intervals)


def _counts_a_mean(clock: StepClock) -> bool:
    """Whether a rank's own clock counted its steps on two periods or a drifting one, boundaries
    unseen (not "wraps"), and gives their mean: ``varied_clock`` leaves it standing."""
    return clock.shift_ns is not None and clock.method != "wraps"


def varied_clock(rank: str) -> StepClock:
    """Every rank's clock where one rank saw every boundary and found its steps too uneven for a
    typical step (``StepClock.irregular``). The ranks take the same steps, so no other rank's clock
    stands for them, not even one that saw every boundary too and found its own steady (steps of
    two lengths by turns put the median of a few more or fewer of them on either length)."""
    # "returns", not "steps": where those returns are micro-batches, that rank's own step may still be
    # timed by its optimizer's visits (accumulation.with_accumulation), and the summary then gives it
    reason = (f"rank {rank} saw every return of its loop and the intervals between them vary too much for a typical "
              f"step ({IRREGULAR}); the "
              "ranks step together, so no other rank's clock stands for them (an input pipeline that delivers in "
              "bursts makes steps of two or more lengths)")
    return StepClock("unknown", None, reason=reason, cause=IRREGULAR)


# One rank's intervals as ``slow_not_unseen`` weighs them at a period: how many, the chance that a
# boundary goes unseen (e^-λ; None where unmeasured), the steps they count as now (a screen), and
# what is dearer to know, asked only past the screen: whether the visits e^-λ is measured on vary too
# much for it to bound anything (period.visits_vary), whether too many of their counts are unsure,
# and the steps they count (period.counted_at), and, where asked (a rank alone: ``slow_not_unseen``),
# whether those counted as two steps are shorter than two counted as one, where its CPU time does not
# decide them (clock.lengths_say_slow; False where not asked)
Counted = tuple[int, float | None, int, Callable[[bool], tuple[bool, bool, int, bool]]]


def slow_clock(timelines: dict[str, Timeline], counted: Callable[[str, float], Counted], sync: bool
               ) -> StepClock | None:
    """The clock of synchronized ranks (``share_period``, ``share_tracked``, then gradient
    accumulation; ``sync``), or of a rank alone, counted on a reference's comb that took slow steps
    for several (``slow_not_unseen``), or None. ``counted`` gives a rank's intervals counted at a period
    (``counted_of`` for a batch timeline, ``RankTracker.counted_at`` live). Not where a rank's
    steps are optimizer steps of several micro-batches: the comb was the micro-batches', and the
    optimizer's visits counted the steps (a straggler's all-reduce in the last micro-batch
    makes them uneven, and they are no steps of their own)."""
    combs = [tl.clock.period_ns for tl in timelines.values() if tl.clock.method == "comb"]
    if (not sync and len(timelines) != 1) or len(combs) != 1 or combs[0] is None \
            or any(tl.micro_batches != 1 for tl in timelines.values()):
        return None
    period = combs[0]
    return slow_not_unseen([counted(rank, period) for rank in timelines], period)


def counted_of(timelines: dict[str, Timeline]) -> Callable[[str, float], Counted]:
    """``slow_clock``'s ``counted`` for batch timelines."""
    return lambda rank, period: _counted(timelines[rank], period)


def _counted(tl: Timeline, period: float) -> Counted:
    """``slow_clock``'s view of a batch timeline: its steps as counted (the screen), the rest
    counted again at ``period`` only when asked."""
    durations = [float(s.counted_ns) for s in tl.intervals]

    def exact(lengths: bool) -> tuple[bool, bool, int, bool]:
        if len(durations) < MIN_INTERVALS or tl.clock.unseen is None:
            return tl.visits_vary, False, len(durations), False
        unsure, steps, counts = counted_at(durations, period, tl.clock.unseen, tl.rate_hz)
        return tl.visits_vary, unsure, steps, lengths and lengths_say_slow(tl.intervals, durations, counts)

    return len(durations), tl.clock.unseen, len(tl.steps), exact


def _hidden(ranks: Sequence[tuple[int, float, int]]) -> tuple[int, float]:
    """The steps that (intervals, e^-λ, steps counted) of the ranks count hidden in longer
    intervals, and how many e^-λ expects."""
    return (sum(steps - intervals for intervals, _, steps in ranks),
            sum(intervals * unseen / (1 - unseen) for intervals, unseen, _ in ranks))


def beyond_chance(hidden: int, expected: float, bar: float = 1.0, times: float = SLOW_HIDDEN) -> bool:
    """More steps hidden than ``bar`` times: ``times`` the expected, plus three standard deviations
    and three."""
    return hidden > bar * (times * expected + 3 * math.sqrt(expected) + 3)


def slow_not_unseen(ranks: Sequence[Counted], period: float) -> StepClock | None:
    """The clock of synchronized ranks, or of a rank alone, whose reference fitted a comb at
    ``period`` where its long intervals are slow steps rather than boundaries unseen; None where the
    period stands. Of the ranks with MIN_INTERVALS and a measured e^-λ on visits alike enough for it
    to bound anything, they count more steps hidden in their intervals than e^-λ expects, beyond
    chance, and their counts or their lengths say so too: where there are several, SLOW_HIDDEN
    times as many, and most cannot tell their intervals of one step from two at that period
    (``too_ambiguous``): the ranks take the same steps, so one rank that passed its own checks
    passed them by chance, and the period, the median split of the slow steps, is no step
    (policy.SLOW_HIDDEN); a rank alone, its intervals of two steps are shorter than two of one
    (``clock.lengths_say_slow``, policy.TWOS_SHORT_Z), which boundaries hidden where e^-λ is wrong
    (the visits it is measured on unlike a step's) do not make. The steps as counted screen first, at half the
    bar: the rest costs a count of every interval of every rank, which a live tick of 64 ranks
    cannot pay every second."""
    judged = [(n, u, steps, exact) for n, u, steps, exact in ranks if u is not None and u < 1 and n >= MIN_INTERVALS]
    if not judged or not beyond_chance(*_hidden([(n, u, steps) for n, u, steps, _ in judged]), bar=0.5):
        return None
    kept, unsure_ranks, short_ranks = [], 0, 0
    for n, u, _, exact in judged:
        vary, unsure, steps, short = exact(len(ranks) == 1)   # (the lengths judge a rank alone only)
        if not vary:
            kept.append((n, u, steps))
            unsure_ranks += unsure
            short_ranks += short
    hidden, expected = _hidden(kept)
    if len(kept) == 1 and len(ranks) == 1 and short_ranks and beyond_chance(hidden, expected, times=1.0):
        why = "and those counted as two steps are shorter than two of the others"
    elif len(kept) >= 2 and beyond_chance(hidden, expected) and 2 * unsure_ranks > len(kept):
        why = f"and {unsure_ranks} of {len(kept)} ranks cannot tell their intervals of one step from two there"
    else:
        return None
    whose = "synchronized ranks'" if len(ranks) > 1 else "rank's"
    reason = (f"the {whose} intervals fit a step of {period / 1e6:.1f} ms only by counting {hidden} "
              f"steps hidden in longer ones, where the boundaries they leave unseen would hide about "
              f"{expected:.0f}, {why}: the long intervals are slow steps (an input pipeline, or other work on the "
              "cores, slowing some steps), too uneven for their median to be given within "
              f"{100 * MAX_STEP_ERROR:.0f}%")
    return StepClock("unknown", None, reason=reason, cause=UNEVEN)


def _better(new: Quality, old: Quality) -> bool:
    """``new`` (a rank's ``quality``) beats ``old``: its counts need no draw where the old one's do
    (``sure_counts``), or, alike in that, it beats it by more than REF_MARGIN."""
    if new[0] != old[0]:
        return new[0] > old[0]
    (new_unseen, new_q), (old_unseen, old_q) = (-new[1], new[2]), (-old[1], old[2])
    if new_unseen < (1 - REF_MARGIN) * old_unseen:
        return True
    return new_unseen <= old_unseen and new_q > (1 + REF_MARGIN) * old_q


def share_tracked(trackers: dict[str, RankTracker], ref: str | None = None
                  ) -> tuple[dict[str, Timeline], str | None, str | None]:
    """``share_period`` for live trackers. Each rank's intervals are counted on the reference's
    period: the batch aligns them with the boundaries of a reference that saw every one, which
    counts an interval as one step where the reference has none around it (a hole, the window's
    edge); live, the reference's period is refit every few seconds, which follows a drifting
    step too. The reference of the last tick (``ref``) stays while no rank is clearly better;
    returns the timelines, the reference and ``share_period``'s note."""
    own = {rank: t for rank, t in trackers.items() if t.clock.known}
    if not own:
        for t in trackers.values():
            t.count_own()
        return {rank: t.timeline() for rank, t in trackers.items()}, None, None
    best = max(own, key=lambda r: own[r].quality)
    if ref not in own or _better(own[best].quality, own[ref].quality):
        ref = best
    varied = [rank for rank, t in trackers.items() if _saw_them_vary(t.clock, t.intervals)]
    if varied:   # (as the batch: a rank whose clock gives the mean of two lengths or a drift keeps it)
        unknown = varied_clock(varied[0])
        out = {}
        for r, each in trackers.items():
            if _counts_a_mean(each.clock):
                each.count_own()
                out[r] = each.timeline()
            else:
                each.count_ones()
                out[r] = each.timeline(replace(unknown, unseen=each.clock.unseen))
        return out, ref, None
    reference = own[ref]
    period = reference.clock.period_ns
    assert period is not None
    for rank, t in own.items():
        assert t.clock.period_ns is not None
        both_saw_all = t.clock.method == "wraps" and reference.clock.method == "wraps"
        if both_saw_all and abs(t.clock.period_ns - period) > AGREE * period:
            reason = (f"ranks that synchronize every step measured different step periods "
                      f"({period / 1e6:.1f} ms on rank {ref}, {t.clock.period_ns / 1e6:.1f} ms on rank {rank})")
            unknown = StepClock("unknown", None, None, None, reason)
            for each in trackers.values():
                each.count_ones()
            return {r: each.timeline(unknown) for r, each in trackers.items()}, ref, None
    # after the check above, as the batch: two ranks that each saw every boundary are a contradiction
    note = apart({rank: (t.clock, t.intervals) for rank, t in own.items()}, ref)
    if note is not None or reference.clock.shift_ns is not None:   # (as the batch: each rank's own clock)
        for t in trackers.values():
            t.count_own()
        return {rank: t.timeline() for rank, t in trackers.items()}, ref, note
    reference.count_own()
    ref_tl = reference.timeline()
    if ref_tl.clock.typical_ns:   # (as the batch: the median of the ranks' own typical steps)
        typical = ranks_median(ref_tl.clock, [(t.clock, t.window.median_step()) for t in own.values()])
        ref_tl = replace(ref_tl, clock=replace(ref_tl.clock, typical_ns=typical))
    out = {}
    for rank, t in trackers.items():
        if rank == ref:
            out[rank] = ref_tl
        elif not t.intervals:
            t.count_own()
            out[rank] = t.timeline()
        else:
            t.count_joint(period)
            out[rank] = t.timeline(t.joint_clock(ref_tl.clock))
    return out, ref, None
