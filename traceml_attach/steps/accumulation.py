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
two nested loops mixed), or where the optimizer is seen in every optimizer step while many
intervals hold none of it, the optimizer steps are found from the optimizer's own visits
(``by_optimizer``): each return right after optimizer time ends one. How many micro-batches each
holds is then k where it was counted, else unknown (``micro_batches`` None).

A micro-batch is never given as the step: where the optimizer's visits point to accumulation that
could not be counted (doubts.py: ``doubt_of``: gaps that are multiples of one k, too few visits for the
optimizer's time, or visits kept apart in the clock's steps, ``spaced``) and fit no period of
their own, the step time is unknown, with the reason. A period fitted to the intervals' lengths
is not taken where the long intervals hold one step's compute (``lumped``: a DataLoader whose
workers deliver in bursts makes slow steps, not several). Synchronized ranks take one step: a k
that one rank counted stands for all (``shared_plans``); where none could, the gaps of all of them
are one test (``_pooled``), and one rank's doubt is every rank's; their optimizer steps must agree
(``agreeing``). ``plan_of`` is the walk over the window's intervals that a live view makes every
few seconds, not every tick.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
import statistics
from collections import Counter
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, replace

from traceml_attach.ingest.model import Span, Stack
from traceml_attach.policy import (
    ADJACENT_ODDS,
    ALIGNED_LONG,
    BLUR_SAMPLES,
    BLURRED_AGREE,
    BREAK_CHANCE,
    COUNTED_ODDS,
    ENDS_SHARE,
    FETCH_PLACE,
    FETCH_VISITS,
    INLIER,
    MARKS_UNSEEN,
    MAX_ADJACENT,
    MAX_AMBIGUOUS,
    MAX_CHANCE,
    MAX_MICRO_BATCHES,
    MAX_RATE_HZ,
    MAX_STEP_ERROR,
    MAX_UNSEEN,
    MIN_GAPS,
    MIN_INTERVALS,
    MIN_SAMPLES_PER_STEP,
    MIN_SEEN,
    MIN_WITHOUT,
    MULTIPLE_SHARE,
    ONE_SHORT_SEEN_ALL,
    ONE_SHORT_SHARE,
    OPTIMIZER_UNSEEN,
    PEER_COUNT,
    PROVISIONAL_GAPS,
    SAME_GROUPS,
    SHIFT_RATIO,
    SHORT_WITHOUT,
    STEPPING_ABOVE,
    STEPPING_LONGER,
    STEPPING_SEEN,
    SUGGESTED,
    TARGET_SAMPLES_PER_STEP,
    UNDECIDED_SEEN,
    VISITS_APART,
    VISITS_MISSED,
    WHOLE_APART,
    WHOLE_SLACK,
    round_up,
)
from traceml_attach.steps.batch_timeline import Segment, SegmentView, Timeline, judged_uneven
from traceml_attach.steps.clock import (
    IRREGULAR,
    SHIFTED,
    SHORT,
    UNDECIDED,
    UNEVEN,
    Step,
    StepClock,
    clock_of,
    could_hide,
    edge_sides,
    expand,
    guesses,
    hidden_by_chance,
    mean_at_risk,
    mean_refused,
    median_holds,
    one_work,
    poisson_tail,
    slow_share,
    uneven_clock,
)
from traceml_attach.steps.doubts import (
    binom_tail,
    doubt_of,
    lumped,
    lumped_in,
    may_be_undecided,
    optimizer_unseen,
    phase_unseen,
    suggested_words,
    undecided,
    undecided_words,
)
from traceml_attach.steps.period import (
    by_turns,
    count_posteriors,
    drawn_by_chance,
    fit_at,
    in_valley,
    jitter,
    steady_median,
    step_counts,
    strays,
)
from traceml_attach.steps.phases import PHASES

# where a job's steps changed length: the moment (ns) and the lengths before and after it
Regimes = tuple[float, float, float]


def micro_batches(intervals: Sequence[Step], period_ns: float | None) -> int:
    """k, the micro-batches per optimizer step, from where the optimizer's time falls among the
    intervals between the loop's observed returns (1: no accumulation seen)."""
    return _counted(*_multiples(intervals, period_ns))


def _counted(k: int, chance: float, gaps: int) -> int:
    """k where the gaps count it (enough of them, beyond chance), else 1."""
    return k if gaps >= MIN_GAPS and chance <= MAX_CHANCE else 1


def _gaps(intervals: Sequence[Step], period_ns: float, counts: Sequence[int] | None = None,
          phase: str = "optimizer", unseen: float | None = None) -> tuple[list[int], float]:
    """The gaps, in micro-batches, between the intervals that hold optimizer time, and the share
    of the micro-batches the optimizer was seen in. ``counts``: each interval's micro-batches where
    the clock counted them (every boundary seen); else ``micro_count`` (``unseen``: the clock's
    e^-λ, as ``micro_counts``)."""
    # each interval's place in micro-batches, counted (not timed: a time over the period drifts by
    # the optimizer's own time once per step, and by the jitter of every micro-batch); the
    # optimizer's own time is no micro-batch's, nor the input waited for beyond the usual (``micro_counts``)
    marks, steps, end = [], 0, None
    usual = usual_input(intervals, unseen) if counts is None else None
    for i, iv in enumerate(intervals):
        if end is not None and iv.start_ns > end:
            steps += round((iv.start_ns - end) / period_ns)   # a hole between intervals
        steps += counts[i] if counts is not None else micro_count(iv, period_ns, usual)
        end = iv.end_ns
        if iv.covered and iv.phases_ns.get(phase, 0) > 0:
            marks.append(steps)
    return [b - a for a, b in itertools.pairwise(marks)], min(len(marks) / max(steps, 1), 0.999)


def _multiples(intervals: Sequence[Step], period_ns: float | None) -> tuple[int, float, int]:
    """The k that the gaps between the intervals holding optimizer time are multiples of, the
    chance of that many multiples without accumulation, and the number of gaps ((1, 1.0, n) when
    none stands out)."""
    if not period_ns:
        return 1, 1.0, 0
    return _multiples_in(*_gaps(intervals, period_ns))


def _multiples_in(gaps: Sequence[int], p: float, min_seen: float = MIN_SEEN) -> tuple[int, float, int]:
    if not gaps or sum(1 for g in gaps if g == 1) > MAX_ADJACENT * len(gaps):
        return 1, 1.0, len(gaps)
    # Without accumulation, the optimizer is seen in a step with some chance p (the share of steps
    # it was seen in), so a gap is a multiple of k with chance p(1-p)^(k-1) / (1-(1-p)^k).
    # The largest k that the gaps are multiples of (a short optimizer step goes unseen now and then,
    # which makes a gap of 2k or 3k, never one that k does not divide)
    best = (1, 1.0, len(gaps))
    for k in range(min(MAX_MICRO_BATCHES, max(gaps)), 1, -1):
        hits = sum(1 for g in gaps if g % k == 0)
        if hits < MULTIPLE_SHARE * len(gaps) or p * k < min_seen:
            continue
        chance = _chance_of(gaps, p, k)
        if chance <= MAX_CHANCE:
            return _multiple_of(gaps, p, k, min_seen) or (k, chance, len(gaps))
        if chance < best[1]:
            best = (k, chance, len(gaps))
    return best


def _chance_of(gaps: Sequence[int], p: float, k: int) -> float:
    """The chance that as many of the gaps as are multiples of k are so without accumulation."""
    return binom_tail(len(gaps), sum(1 for g in gaps if g % k == 0), p * (1 - p) ** (k - 1) / (1 - (1 - p) ** k))


def _multiple_of(gaps: Sequence[int], p: float, k: int, min_seen: float) -> tuple[int, float, int] | None:
    """A multiple of ``k`` that the gaps make COUNTED_ODDS times likelier than no accumulation and
    likelier than any other k (``undecided``: geometric gaps, a tenth of them miscounted), seen in
    ``min_seen`` of its optimizer steps. Every multiple of 4 is one of 2, so where miscounted
    micro-batches leave too few multiples of the true k for MULTIPLE_SHARE, a divisor passes:
    nanoGPT's train.py with 4 micro-batches had 45 gaps of 4 and 14 of 8 among 90, none of 2, and
    was counted as 2 (44.3 ms steps for 89.3); k = 4 is 4.7e19 times likelier than none."""
    odds = undecided(gaps, p)
    if odds is None or odds[0] <= k or odds[0] % k or odds[1] < COUNTED_ODDS or odds[0] * p < min_seen:
        return None
    return odds[0], _chance_of(gaps, p, odds[0]), len(gaps)


def group(steps: Sequence[Step], k: int) -> tuple[Step, ...]:
    """Consecutive runs of k micro-batch steps as optimizer steps, aligned so that the most groups
    end with a step that holds optimizer time; incomplete groups at either end are left out."""
    if k <= 1 or len(steps) < k:
        return tuple(steps)
    offset = _offset(steps, k)
    out = []
    for i in range(offset, len(steps) - k + 1, k):
        run = steps[i:i + k]
        if all(a.end_ns == b.start_ns for a, b in itertools.pairwise(run)):   # no hole inside
            out.append(merged_steps(run))
    return tuple(out)


def _offset(steps: Sequence[Step], k: int) -> int:
    """Where ``group``'s first run of k starts: the most runs end with a step that holds optimizer time."""
    stepped = [s.phases_ns.get("optimizer", 0) > 0 for s in steps]
    return max(range(k), key=lambda o: (sum(stepped[i + k - 1] for i in range(o, len(steps) - k + 1, k)), -o))


def _visits_end_groups(steps: Sequence[Step], k: int) -> bool:
    """Whether the optimizer's visits among the micro-batch ``steps`` end ``group``'s runs of k (ENDS_SHARE
    of them, MIN_GAPS or more): the runs are its steps, and a period its visits fit that the runs stray
    from is a divisor of theirs."""
    offset = _offset(steps, k)
    ends = {i + k - 1 for i in range(offset, len(steps) - k + 1, k)}
    last = max(ends, default=-1)   # visits inside the runs only: the incomplete ones at either end are no step
    visits = [i for i in range(offset, last + 1) if steps[i].phases_ns.get("optimizer", 0) > 0]
    return len(visits) >= MIN_GAPS and sum(1 for i in visits if i in ends) >= ENDS_SHARE * len(visits)


def merged_steps(run: Sequence[Step]) -> Step:
    """Consecutive steps as one."""
    blocked: dict[str, int] | None = None
    if all(s.blocked_sync_ns is not None for s in run):
        blocked = {}
        for s in run:
            for phase, ns in (s.blocked_sync_ns or {}).items():
                blocked[phase] = blocked.get(phase, 0) + ns
    works = [s.work_ns for s in run]
    return Step(run[0].start_ns, run[-1].end_ns, {p: sum(s.phases_ns.get(p, 0) for s in run) for p in PHASES},
                blocked, covered=all(s.covered for s in run), swallowing=any(s.swallowing for s in run),
                held=any(s.held for s in run),
                aside_ns=sum(s.aside_ns for s in run),
                work_ns=None if None in works else sum(w or 0 for w in works), stalled=any(s.stalled for s in run))




def marks_steps(intervals: Sequence[Step], rate_hz: int, lengths: bool = True) -> float | None:
    """The optimizer's chance of going unseen when its visits, not the returns, should mark the
    steps: it is seen in practically every optimizer step while many intervals hold none of it
    (accumulation, or a loop whose returns split a step). None otherwise. Judged on the chance less
    the longest visit (``optimizer_unseen``'s ``trim``), as one stalled visit of a few raises it.

    Fewer intervals without it, or it missed more often, still mark the steps where those without
    it are far shorter than those with it (``_without_short``) and that many would be chance at most
    MAX_CHANCE, where ``lengths`` (the returns' clock is known: micro-batches too short to time make
    no lengths to compare). 2 ranks accumulating 2 micro-batches of 30-ms steps whose 2 workers
    deliver in bursts (a ready micro-batch of 3 ms, the other waiting for its input), at 400 Hz: the
    ready one's return showed in one step in five, 78 of 392 intervals held no optimizer (4.2 ms to
    the others' 29.3, median) at e^-λ 5.2%, and the intervals were taken for steps (+22%)."""
    covered = [iv for iv in intervals if iv.covered]
    if len(covered) < MIN_GAPS:
        return None
    unseen = optimizer_unseen(covered, rate_hz)
    trimmed = optimizer_unseen(covered, rate_hz, trim=True)
    without = sum(1 for iv in covered if iv.phases_ns.get("optimizer", 0) == 0)
    if unseen is None or trimmed is None:
        return None

    def beyond_chance() -> bool:   # that many intervals without it by chance at most MAX_CHANCE
        return binom_tail(len(covered), without, trimmed) <= MAX_CHANCE

    few = without < MIN_WITHOUT * len(covered)
    # ...or, missed a little more often, where that many intervals without it would be chance at
    # most MAX_CHANCE: a 143-ms optimizer at 50 Hz (e^-λ 1.1%) in 14 of 19 intervals, 2 micro-batches
    # of 650-ms steps whose DataLoader's workers deliver in bursts (5 such would be chance 2e-6),
    # had the intervals taken for steps (-18%)
    doubtful = trimmed > OPTIMIZER_UNSEEN and (trimmed > MARKS_UNSEEN or not beyond_chance())
    # (the lengths read only where those refuse: a live tick asks this of every rank)
    if (few or doubtful) and not (lengths and _without_short(covered) and beyond_chance()):
        return None
    return unseen


def _without_short(covered: Sequence[Step]) -> bool:
    """Whether the intervals that hold none of the optimizer are far shorter than those that hold
    some: not steps whose optimizer sampling missed (those are as long as the rest), but the
    micro-batches between them."""
    without = [iv.dur_ns for iv in covered if iv.phases_ns.get("optimizer", 0) == 0]
    with_ = [iv.dur_ns for iv in covered if iv.phases_ns.get("optimizer", 0) > 0]
    return (len(without) >= MIN_GAPS and len(with_) >= MIN_GAPS
            and statistics.median(without) <= SHORT_WITHOUT * statistics.median(with_))


def _one_short_unknown(tl: Timeline, k: int, timed_why: str | None = None) -> StepClock:
    """The clock where ``k`` was counted though the clock missed returns (``Plan.one_short``) and
    the optimizer's visits align no steps whose median holds (``by_counted_returns``).
    ``timed_why``: every return was seen, and only the gaps timed over the period were one short
    (``Plan.timed_short``): the micro-batches' lengths, not returns missed, are why, and this is why
    the steps the visits align give no step time (``_aligned_on_visits``)."""
    if timed_why is None:
        reason = (f"the optimizer's visits count {k} micro-batches to an optimizer step, but some returns between "
                  "them went unseen, and the optimizer steps its visits align are too few or too uneven to time "
                  "within 5%: sample faster or longer")
        return StepClock("unknown", None, None, None, reason, unseen=tl.clock.unseen)
    steps = _visit_runs(tl.intervals, k)
    durations = sorted(s.dur_ns for s in steps)
    varied = len(steps) >= 2 and not steady_median(durations, len(steps))
    how = "vary too much for a typical step" if varied else "give no step time"
    reason = (f"every return was seen, and the optimizer's visits count {k} micro-batches to an optimizer step; "
              "the micro-batches' lengths vary too much for one period to count them, and the "
              f"{len(steps)} optimizer steps the visits align {how}: {timed_why}; sample longer")
    return StepClock("unknown", None, None, None, reason, unseen=tl.clock.unseen)


def _timed_short(tl: Timeline, k: int) -> bool:
    """Whether the gaps between the optimizer's visits were one short of multiples of ``k`` only as
    timed over the returns' period (``visit_gaps``): where the clock saw every return, the gaps
    counted in its own steps (``_whole_gaps``) are not. Timed over one period, the micro-batches of
    a job that sped up from 350 to 130 ms in a 10-s snapshot (examples/grad_accum.py, 4 a step, its
    CPU shared) counted as two where they were long: 2 of 11 gaps one short (8, 7, 7, 4, ...), where
    its steps, every return seen (e^-λ 0.02%), made 4, 4, ... and one 8 (a visit missed). It was
    said unknown for returns that went unseen; its own steps had varied by 43%."""
    counted = _whole_gaps(tl)
    return counted is not None and not _returns_missed(counted[0], k, ONE_SHORT_SEEN_ALL)


def _marked_unknown(tl: Timeline) -> StepClock:
    """Why ``tl``'s step time is unknown where the optimizer, seen in practically every optimizer
    step, ran in only some of the intervals between its returns (``marks_steps``: the returns are
    micro-batches, or split a step), and its visits timed no step (``by_optimizer``) nor counted k.
    Not the returns' clock: one rank accumulating 3 micro-batches of a 1.3-s step, a 310-ms
    optimizer in every third interval, 7 visits in 10 s, was given the 470-ms micro-batch (-58%)."""
    covered, seen = _optimizer_seen(tl)
    longer = "; a longer window would hold more of them" if seen < 2 * MIN_INTERVALS else ""
    reason = (f"the optimizer, seen in practically every optimizer step, ran in only {seen} of the {len(covered)} "
              "intervals between the loop's returns: the returns are micro-batches of longer optimizer steps "
              f"(gradient accumulation) or split a step, and its visits timed no step of their own{longer}")
    return StepClock("unknown", None, None, tl.clock.concentration, reason, unseen=tl.clock.unseen)


def by_optimizer(tl: Timeline, unseen: float | None = None, *, breaks: bool = False,
                 regimes: Regimes | None = None) -> Timeline | None:
    """Optimizer steps from the optimizer's own visits: micro-batches too short to be told apart,
    the wraps of an outer and an inner loop mixed (HF's step loop around its micro-batch loop), or
    an optimizer seen in every step while the returns are micro-batches. Each return right after
    optimizer time ends an optimizer step (one visit across a return ends one, at the later); the
    times between the ends of those visits are whole numbers of optimizer steps (a short optimizer
    step goes unseen now and then), and the step period is fitted to them as to any loop's returns,
    with ``unseen`` the chance that an optimizer step goes unseen (``optimizer_unseen``: every step
    is then seen when it is small). None when no period fits. ``breaks``: a comb that holds on one
    side of a moment and breaks on the other (``_comb_breaks``) counts no steps, where the comb
    would be the step's answer. ``regimes``: where the steps changed length, as a peer's returns
    found it (``_regimes_on_peers``); by default as ``tl``'s own did (``_visits_by_regimes``)."""
    stepped, broken = _visit_steps(tl, unseen, breaks, regimes)
    return broken if broken is not None else stepped


def _visit_steps(tl: Timeline, unseen: float | None, breaks: bool, given: Regimes | None = None
                 ) -> tuple[Timeline | None, Timeline | None]:
    """``by_optimizer``'s steps, and where ``breaks``, the unknown its comb gives instead where it
    breaks (``_comb_breaks``): (the steps, that unknown or None). Both from one fit: a caller that
    vets the steps first (``_with_accumulation``) takes the unknown only where they stand."""
    if tl.loop is None:
        return None, None
    groups, lengths = visit_groups(tl)
    if unseen is None and _ends_every_interval(tl, groups):
        # its visits are the returns already fitted, and a period fitted to them without the
        # returns' own chance of going unseen would split every slow step into several
        return None, None
    # counted between the visits' own ends, which end their optimizer steps to within a sample: the
    # returns after them lag by however many micro-batches went by unseen
    clock, counts = clock_of(lengths, unseen, tl.rate_hz)
    regimes = _visits_by_regimes(tl, groups, lengths, clock, given or _found_regimes(tl, groups))
    if regimes is not None:
        clock, counts = regimes
    if not clock.known and clock.cause in (None, SHIFTED) and unseen is not None:
        averaged = _visits_mean(tl, groups, lengths, unseen)
        if averaged is not None or clock.cause is None:
            return averaged, None
    if clock.cause == SHIFTED:
        # the optimizer steps changed length beyond chance, one side too short to count: no period
        # of the job's holds (8 ranks, 6 optimizer steps of 700 ms, then 13 of 350: the visits'
        # 350-ms comb of the other paths counted 27 steps for 20, -26% on the mean)
        return replace(tl, steps=tuple(groups), clock=clock, micro_batches=None, step_floor=len(groups)), None
    one = clock.method == "comb" and clock.shift_ns is None   # (each regime's counts were checked on its own period)
    if not clock.known or (one and lumped_in(groups, clock.period_ns or 0.0, tl.rate_hz)):
        return None, None
    strays = _short_strays(lengths, counts, clock.period_ns or 0.0, tl.rate_hz) if one else None
    if strays is not None:
        unknown = StepClock("unknown", None, None, clock.concentration,
                            _strays_reason(clock.period_ns or 0.0, strays, "between them"))
        return replace(tl, steps=tuple(groups), clock=unknown, micro_batches=None, step_floor=len(groups)), None
    # (a comb counted on each side of a change, ``clock.by_regimes``, is not one period's)
    breaking = (_comb_breaks(lengths, counts, clock.period_ns or 0.0)
                if breaks and clock.method == "comb" and clock.shift_ns is None else None)
    broken = None
    if breaking is not None:
        # as a change ``clock.by_regimes`` found with a side too short to count: its peers' one
        # period does not hold either (``_shifted_on_peers``); twice the rate shows the optimizer
        # twice as often there (diagnose/rate.py ``faster``)
        faster = min(MAX_RATE_HZ, round_up(2 * tl.rate_hz, 50))
        unknown = StepClock("unknown", None, None, clock.concentration,
                            _breaks_reason(clock.period_ns or 0.0, breaking, len(lengths)),
                            suggested_rate_hz=faster if faster > tl.rate_hz else None, cause=SHIFTED)
        broken = replace(tl, steps=tuple(groups), clock=unknown, micro_batches=None, step_floor=len(groups))
    # more groups as long as several steps than the optimizer goes unseen by chance: the rest are
    # one slow step each (``clock.slow_share``)
    chance = Counter(n for group, n in zip(groups, counts, strict=True) if not group.swallowing)
    holding = slow_share(chance, clock.unseen)
    work = one_work(groups, counts)
    steps = expand(groups, counts, holding=holding, work=work)
    # the median step, as ``build_timeline`` takes it on every clock. The comb's period is the mean
    # step, which synchronized ranks share and which averages the micro-batches' jitter out (it was
    # taken here where no slow step was found), but optimizer steps are not symmetric about their
    # median: Lightning's input straggler (2 gloo ranks, accumulate_grad_batches=2) had a mean step
    # 3% over its median, and one 12-s window in ten read +5.2%. On the grid (symmetric jitter) the
    # median leaves one 8-rank point at 50 Hz unknown (its ranks' medians 5% apart): 2,490 -> 2,482
    # known, none beyond 5%, the counts as they were
    typical = statistics.median(_timed(groups, lengths, counts, steps))
    moved, added = guesses(zip(groups, counts, strict=True), None, None, None, None, holding, work)
    if not median_holds(sorted(s.dur_ns for s in steps), moved):
        return replace(tl, steps=steps, clock=uneven_clock(clock), micro_batches=None,
                       step_floor=len(steps) - added), broken
    # the optimizer steps seen whole (one visit to the next) too uneven for their median to hold
    # (``steady_median``: micro-batches whose input a DataLoader's workers deliver in bursts make
    # optimizer steps of two lengths or more): the mean of the steps counted, said so (as
    # steps/mean.py where no accumulation is). The median of steps split evenly from longer groups
    # was neither (4 ranks, 3 micro-batches of 50 ms, 2 workers: 50.5 ms for a median of 55.2 and a
    # mean of 50.1)
    mean = False
    whole = sorted(float(length) for length, n in zip(lengths, counts, strict=True) if n == 1)
    seen = statistics.median(whole) if whole else None
    # ...or where the steps split from longer groups move the median off the whole ones' (their even
    # split pulls it toward the mean: 8 such ranks read 8.5-10.7% under the job's median)
    uneven = seen is not None and clock.method != "wraps" and (
        not steady_median(whole, sum(counts)) or abs(typical / seen - 1) > MAX_STEP_ERROR / 2)
    # ...or, every optimizer step seen (``clock_of`` held their median steady), two lengths by turns
    # whose gap jitter and the samples' lag fill, the median in the valley between them (``in_valley``),
    # or between the lengths of every other step (``by_turns``)
    # ...or where the optimizer steps changed length within the window (``clock.by_regimes``)
    # ...or where the steps are few samples long and their median is their mean: the samples' lag at
    # each end (a Laplace of scale 1/rate on every visit-to-visit length) blurs any steps into one
    # symmetric hump, whose median it pulls toward the mean by up to ln 2 / rate where the job's steps
    # are of two lengths or more, so the median seen may be the blur's; the mean, it leaves as it was.
    # 8 ranks of 2 micro-batches a step, 3 workers delivering in bursts, at 400 Hz over 30 s: steps of
    # 18 and 24 ms, one in three short (the job's median 23.2 ms, its mean 21.9), whose visits' lengths
    # (8 to 38 ms) gave medians of 21.8-22.3 ms beside means within 1.7% of them (-4.6% to -6.3%)
    average = sum(s.dur_ns for s in steps) / len(steps)
    blurred = typical * tl.rate_hz / 1e9 < BLUR_SAMPLES and abs(typical / average - 1) <= BLURRED_AGREE
    varied = seen is not None and (uneven or in_valley(whole, seen) or by_turns(lengths, counts, seen))
    if clock.shift_ns is not None or blurred or varied:
        typical, mean = average, True
    clock = replace(clock, typical_ns=typical, edge_steps=_edges(tl, steps, clock.period_ns), mean=mean,
                    blurred=mean and clock.shift_ns is None and not varied)
    return replace(tl, steps=steps, clock=clock, micro_batches=None), broken


def _visits_by_regimes(tl: Timeline, groups: Sequence[Step], lengths: Sequence[int], clock: StepClock,
                       regimes: Regimes | None) -> tuple[StepClock, tuple[int, ...]] | None:
    """The optimizer's visits counted on each side of the change the returns' clock found
    (``clock.by_regimes``: ``tl.clock.shift_ns``), where the visits' own ``clock`` fitted one period
    to them: that period is the faster side's optimizer step (the slower side's gaps are whole
    multiples of it, not the reverse), and the slower side's is as many times longer as its returns
    are. A job 2x slower for its first 6.5 s of 30, 4 micro-batches a step, the optimizer 1% of the
    step at 100 Hz: its visits, a sixth of them seen, fitted 200 ms and counted each 400-ms step
    there as two (149 steps for the job's 132, the mean -10.8%), where its returns had found
    micro-batches of 99 ms, then 51. ``regimes``: the change (``regimes_of``). None where no change
    was found, or the visits counted on the two periods stray from them more often than
    MAX_AMBIGUOUS."""
    if not clock.known or clock.shift_ns is not None or not clock.period_ns or regimes is None or not groups:
        return None
    cut_ns, first, last = regimes
    fast = min(first, last)
    before, after = clock.period_ns * first / fast, clock.period_ns * last / fast
    counts = []
    for g, length in zip(groups, lengths, strict=True):
        head = min(max(cut_ns - g.start_ns, 0), g.end_ns - g.start_ns)
        steps = head / before + (g.end_ns - g.start_ns - head) / after
        counts.append(max(1, round(steps * length / max(g.end_ns - g.start_ns, 1))))
    astray = sum(1 for g, length, n in zip(groups, lengths, counts, strict=True)
                 if strays(length, n, before if (g.start_ns + g.end_ns) / 2 < cut_ns else after, tl.rate_hz))
    if astray > MAX_AMBIGUOUS * len(groups):
        return None
    return StepClock(clock.method, sum(lengths) / sum(counts), len(counts) / sum(counts), clock.concentration,
                     unseen=clock.unseen, mean=True, shift_ns=(before, after)), tuple(counts)


def _found_regimes(tl: Timeline, groups: Sequence[Step]) -> Regimes | None:
    """``regimes_of`` ``tl``, a change its returns found but could not count among them, where the
    optimizer's visits (``groups``) are MIN_INTERVALS or more on either side of it, as a side of a
    change needs as many intervals for a period of its own (``clock.by_regimes``): 8 ranks, 6
    optimizer steps of 700 ms, then 13 of 350, at 50 Hz: one rank's 7 visits before the change,
    counted on it, gave 21 steps for 20 where its peers said the side was too short to count."""
    regimes = regimes_of(tl, found=True)
    if regimes is None or tl.clock.shift_ns is not None:
        return regimes
    before = sum(1 for g in groups if g.end_ns <= regimes[0])
    return regimes if min(before, len(groups) - before) >= MIN_INTERVALS else None


def regimes_of(tl: Timeline, found: bool = False) -> Regimes | None:
    """Where ``tl``'s returns' clock counted its steps on each side of a change of length at least
    SHIFT_RATIO (``clock.by_regimes``), or, where ``found``, found one it could not count
    (``StepClock.changed_ns``): the change's moment (``_regime_cut``) and the two lengths."""
    change = tl.clock.shift_ns or (tl.clock.changed_ns if found else None)
    if change is None or not tl.steps:
        return None
    first, last = change
    if max(first, last) / min(first, last) < SHIFT_RATIO:
        return None
    return _regime_cut(tl.steps, first, last), first, last


def _regime_cut(steps: Sequence[Step], first: float, last: float) -> float:
    """Where ``steps`` (in order) go from lengths near ``first`` to lengths near ``last``: the start
    of the step that puts the most of them on their side (each nearer one length than the other,
    by ratio)."""
    nearer_last = [abs(math.log(s.dur_ns / last)) < abs(math.log(s.dur_ns / first)) if s.dur_ns > 0 else False
                   for s in steps]
    best, at, score = -1, 0, sum(nearer_last)   # cut before step 0: every step on the later side
    for i, later in enumerate(nearer_last):
        if score > best:
            best, at = score, i
        score += -1 if later else 1
    if score > best:
        at = len(steps)
    return steps[at].start_ns if at < len(steps) else steps[-1].end_ns


def _short_strays(intervals: Sequence[float], counts: Sequence[int], period: float, rate_hz: float
                 ) -> tuple[int, int] | None:
    """(strays, whole) where more of the intervals counted as one step fall short of ``period`` by
    more than INLIER of it and two samples' blur (``strays``' margin, on the short side) than chance
    allows (at most MAX_CHANCE of so many), ``whole`` the intervals counted as one; None where they
    do not. One step is about as long as another on a comb, each interval blurred by where its ends'
    samples fell (the difference of two exponential lags of 1/rate: a Laplace) and by the steps'
    own jitter (a normal of ``jitter``'s spread), so an interval that short is a step of another
    length: steps of two lengths (a DataLoader's workers delivering in bursts), whose sums a period
    fits by chance and counts wrong. 8 ranks of bursty 5-ms steps at 400 Hz, the optimizer's
    visits on a comb of 19 ms, 16 of 110 single ones under 8.5 ms where 0.8 were expected: 530 steps
    counted for the job's 814 (+53% on the mean). On the quick grid it refuses no comb that was right;
    of the right combs whose steps were then given as their mean, none had more than one such gap."""
    blur = 1e9 / max(rate_hz, 1.0)
    below = period * (1 - INLIER) - 2 * blur
    whole = [i for i, n in zip(intervals, counts, strict=True) if n == 1]
    short = sum(1 for i in whole if i < below)
    if not short:
        return None
    spread = jitter(intervals, period, rate_hz)
    # P(normal(spread) + Laplace(blur) < below - period), the normal's mass summed over ±6 spreads
    total = weights = 0.0
    for j in range(-48, 49):
        z = j / 8
        w = math.exp(-z * z / 2)
        t = below - period - spread * z
        total += w * (0.5 * math.exp(t / blur) if t < 0 else 1 - 0.5 * math.exp(-t / blur))
        weights += w
    return (short, len(whole)) if binom_tail(len(whole), short, total / weights) <= MAX_CHANCE else None


def _comb_breaks(intervals: Sequence[float], counts: Sequence[int], period: float
                 ) -> tuple[int, int, int, bool] | None:
    """(off, gaps, others_off, late): a stretch of ``gaps`` at either end of the visits' gaps
    (``intervals`` in time order, counted as ``counts`` periods), the last ones where ``late``, of
    which ``off`` fall INLIER of ``period`` or more off their multiple of it, so many more than the
    gaps before or after it (``others_off`` of them off) that the window's off gaps
    fall there that often at most BREAK_CHANCE likely over every stretch looked at (the
    hypergeometric tail: the window's own off gaps are the measure, whatever made them), as many of
    them off the stretch's own period too (its median step); None where no such stretch is. A comb
    holds through a window where the steps keep their length; where they change, on the side whose
    steps differ the visits fall between its teeth (steps half as long put every other visit half a
    period off), however well the other side, with most of the visits, fits it."""
    n = len(intervals)
    off = [abs(i - c * period) >= INLIER * period for i, c in zip(intervals, counts, strict=True)]
    total = sum(off)
    if n < 2 * MIN_GAPS or total < 3:
        return None
    before = list(itertools.accumulate(off, initial=0))
    cuts = range(MIN_GAPS, n - MIN_GAPS + 1, max(1, n // 40))   # (as ``period.shift_cut`` looks)
    limit = BREAK_CHANCE / (2 * len(cuts))
    best: tuple[float, tuple[int, int, int, int]] | None = None
    for cut in cuts:
        for k, m, span in ((total - before[cut], n - cut, (cut, n - 1)), (before[cut], cut, (0, cut - 1))):
            if k < 3 or k * (n - m) <= (total - k) * m:   # (more often off than the rest)
                continue
            chance = drawn_by_chance(n, total, m, k)
            if chance <= limit and (best is None or chance < best[0]):
                best = (chance, (k, m, *span))
    if best is None:
        return None
    # ...and still so on that stretch's own period (its median step per period): steps that drift in
    # length (the grid's ramp) put a stretch's gaps off a period fitted to the whole window, but on
    # one of their own; steps of another length, half as long, put them off any period near it
    k, m, first, last = best[1]
    stretch = range(first, last + 1)
    own = statistics.median(intervals[i] / counts[i] for i in stretch)
    k_own = sum(1 for i in stretch if abs(intervals[i] - max(1, round(intervals[i] / own)) * own) >= INLIER * own)
    if drawn_by_chance(n, total - k + k_own, m, k_own) > limit:
        return None
    return k_own, m, total - k, first > 0


def _breaks_reason(period: float, broken: tuple[int, int, int, bool], total: int) -> str:
    """Why a comb of the optimizer's visits counts no steps: ``broken`` (``_comb_breaks``) of the
    ``total`` gaps between them."""
    off, gaps, others_off, late = broken
    return (f"the optimizer's visits fit a period of {period / 1e6:.1f} ms, but {off} of the "
            f"{'last' if late else 'first'} {gaps} of the {total} gaps between them fall between its steps, where "
            f"{others_off} of the {total - gaps} {'before' if late else 'after'} them do: the steps changed length "
            "within the window, and the visits are too few on that side to count it")


def _strays_reason(period: float, strays: tuple[int, int], where: str) -> str:
    """Why a comb of the optimizer's visits counts no steps: ``strays`` (``_short_strays``) of the
    gaps ``where`` they were taken."""
    return (f"the optimizer's visits fit a period of {period / 1e6:.1f} ms, but {strays[0]} of the {strays[1]} gaps "
            f"{where} taken for one step are far shorter than it, more than sampling's blur and the steps' jitter "
            "make by chance: the steps come in lengths too different (a DataLoader's workers delivering in bursts) "
            "for a period to count those the visits missed")


def _visits_mean(tl: Timeline, groups: Sequence[Step], lengths: Sequence[int], unseen: float) -> Timeline | None:
    """``tl`` in the optimizer steps its visits mark, every one seen (``unseen``, the optimizer's
    e^-λ, at most MAX_UNSEEN), where they vary too much for a median (``clock_of`` refused them as
    jittery): their mean, said so, as steps/mean.py gives where no accumulation is, and on the same
    terms (``clock.mean_refused``). None where they do not hold one. (2 micro-batches a
    step whose 4 workers deliver in bursts: steps of 80 and 180 ms by turns, the visits in every one,
    the median between them.)"""
    n = len(lengths)
    if unseen > MAX_UNSEEN or n < MIN_INTERVALS or any(group.swallowing for group in groups):
        return None
    hidden = _hidden_visits(tl, groups)
    if mean_refused(n, could_hide(lengths) if hidden is None else hidden, unseen) is not None:
        return None
    mean = sum(lengths) / n
    clock = StepClock("wraps", mean, 1.0, None, unseen=unseen, typical_ns=mean,
                      edge_steps=_edges(tl, groups, mean), mean=True)
    return replace(tl, steps=tuple(groups), clock=clock, micro_batches=None)


def _hidden_visits(tl: Timeline, groups: Sequence[Step]) -> int | None:
    """The optimizer's visits that ``groups`` could hide, counted in returns where every return was
    seen (e^-λ of the returns at most MAX_UNSEEN): a group of n times the usual run of returns or more
    could hide n - 1; None where returns went unseen. Their lengths cannot tell: optimizer steps of
    80 and 180 ms by turns put their median on either kind, and on the short one every long step is
    twice it, while each of them is a run of 2 returns."""
    unseen = tl.clock.unseen
    if unseen is None or unseen > MAX_UNSEEN or not groups:
        return None
    starts = [iv.start_ns for iv in tl.intervals]
    runs = [bisect.bisect_left(starts, g.end_ns) - bisect.bisect_left(starts, g.start_ns) for g in groups]
    usual = Counter(runs).most_common(1)[0][0]
    return sum(r // usual - 1 for r in runs if r >= 2 * usual)   # a group holds its own returns: usual >= 1


def _timed(groups: Sequence[Step], lengths: Sequence[int], counts: Sequence[int], steps: Sequence[Step]) -> list[float]:
    """The optimizer steps' lengths between the visits' own ends (``visit_groups``' ``lengths``), as
    ``expand`` made ``steps`` of the ``groups``: a group kept whole one step of its length, one split
    in n, n of a nth. The groups end at the returns after the visits, which lag by the micro-batches
    that went by unseen: 3 workers delivering in bursts, 4 micro-batches of a 470-700-ms step, nested
    loops, gave groups of 462 and 785 ms for visits 541 and 705 apart, and their median was 473 ms for
    the job's 542 (-12.7%)."""
    out: list[float] = []
    j = 0
    for group, length, n in zip(groups, lengths, counts, strict=True):
        if j < len(steps) and steps[j] is group:   # kept whole
            out.append(float(length))
            j += 1
        else:
            out.extend([length / n] * n)
            j += n
    return out


def _ends_every_interval(tl: Timeline, groups: Sequence[Step]) -> bool:
    """Whether the optimizer's visits (``visit_groups``) end (nearly) every interval between the
    returns: then they are the returns themselves, no step of their own."""
    return len(groups) >= SAME_GROUPS * sum(1 for iv in tl.intervals if iv.covered)


def _returns_close(tl: Timeline) -> bool:
    """Whether the returns are under TARGET_SAMPLES_PER_STEP samples apart: micro-batches that
    short are counted by their lengths, each blurred by a sample at either end, and uneven ones (the
    last holds the all-reduce's wait, the optimizer, the next fetch) are miscounted; longer ones are
    counted right (``_gaps``). Only there are the optimizer's visits fitted against them
    (``_visits_apart``, ``_pooled_visits``): the fit on every plan cost a live view's tick 17 ms at
    64 ranks, where a recorded DDP stream's returns were 13 samples apart."""
    period = tl.clock.period_ns
    return period is not None and period * tl.rate_hz / 1e9 <= TARGET_SAMPLES_PER_STEP


def visit_groups(tl: Timeline) -> tuple[list[Step], list[int]]:
    """The runs of intervals between the optimizer's visits (``by_optimizer``), and each one's
    length between its visits' ends, less its eval and checkpoints."""
    groups: list[Step] = []
    lengths: list[int] = []    # each group's length between its visits' ends
    run: list[Step] = []
    mark: int | None = None    # the end of the visit that began the run, with no hole since
    end = None
    for iv in tl.intervals:
        if end is not None and iv.start_ns != end:
            run, mark = [], None   # a hole: the next step starts at the next optimizer visit
        end = iv.end_ns
        run.append(iv)
        if iv.covered and iv.phases_ns.get("optimizer", 0) > 0:
            at = visit_end(tl.segments, iv)
            if at is None:
                continue   # only zero_grad(): where it starts an optimizer step, not where one ends
            if at == mark and len(run) == 1:
                # one visit across a return (``step()`` at the end of a step, ``zero_grad()`` at the
                # start of the next): the later interval ends its step
                if groups:
                    groups[-1] = merged_steps([groups[-1], iv])
                run = []
                continue
            if mark is not None:
                group = merged_steps(run)
                groups.append(group)
                lengths.append(max(at - mark - group.aside_ns, 1))
            run, mark = [], at
    return groups, lengths


def visit_end(segments: Sequence[Segment], iv: Step) -> int | None:
    """The end of the last optimizer visit (a run of optimizer segments without a gap) that begins
    in the interval ``iv``: it may run past the interval's end (``zero_grad()`` at the start of the
    next step). None where the optimizer segments that begin in it only clear the gradients and a
    forward or backward pass follows them: ``zero_grad()`` that begins an optimizer step apart from
    the update (Lightning clears them in the first micro-batch's closure and updates in the last
    one's: such a visit split a step in two, issue 23). Only the interval's own segments are read:
    a live window's are made on demand."""
    # a live window's segments are found by their spans' starts, one to one, without making them
    starts: Sequence[Segment] | Sequence[Span] = segments.spans if isinstance(segments, SegmentView) else segments
    i = max(bisect.bisect_left(starts, iv.start_ns, key=lambda x: x.ts_ns) - 1, 0)
    end: int | None = None
    begun = iv.start_ns   # where the last visit began
    updates = False       # an optimizer segment that begins in the interval and does not only clear
    worked = iv.start_ns  # where the last forward or backward segment in the interval began
    for k in range(i, len(segments)):
        seg = segments[k]
        optimizer = seg.phase == "optimizer"
        if seg.ts_ns >= iv.end_ns and not (optimizer and end is not None and seg.ts_ns <= end):
            break
        if optimizer:
            if end is not None and seg.ts_ns <= end:
                end = max(end, seg.ts_ns + seg.dur_ns)
            else:
                end, begun = seg.ts_ns + seg.dur_ns, seg.ts_ns
            updates = updates or (seg.ts_ns >= iv.start_ns and not _clears(seg.span.stack))
        elif seg.phase in ("forward", "backward") and seg.ts_ns >= iv.start_ns:
            worked = seg.ts_ns
    # gradients cleared with the pass still to come: a step begins there (a visit carried across
    # the return from the last step's update, or clearing after the update, still ends one)
    if end is not None and not updates and iv.start_ns <= begun < worked:
        return None
    return end if end is not None else iv.end_ns


def _clears(stack: Stack) -> bool:
    """Whether a stack clears the gradients (``zero_grad``, a framework's ``optimizer_zero_grad``)."""
    return any(f.name.endswith("zero_grad") for f in stack)


def _visits_too_few(tl: Timeline, stepped: Timeline) -> bool:
    """Whether the optimizer steps that ``by_optimizer`` fitted are many more than the optimizer's
    visits seen: a period that leaves more than VISITS_MISSED of the optimizer steps, and three
    times the chance its own work goes unseen (``optimizer_unseen``), without a visit is a divisor
    of the visits' gaps, no step's. 2 synchronized ranks accumulating 3 micro-batches of a 30-ms
    step whose 2 workers deliver in bursts, at 500 Hz: 300 visits (an optimizer of 2.9 samples,
    5.8% of them unseen) in gaps of 16-60 ms were fitted 12.2 ms, 821 steps for the job's 328 (-60%)."""
    expected = optimizer_unseen(tl.intervals, tl.rate_hz)
    if expected is None or not stepped.step_count:
        return False
    missed = 1 - len(visit_groups(tl)[0]) / stepped.step_count
    return missed > max(VISITS_MISSED, 3 * expected)


def _hides_marks(tl: Timeline, stepped: Timeline, marks: float | None) -> bool:
    """Whether ``stepped``, fitted to the optimizer's visits as to any returns (no chance of one
    going unseen), counts more of its steps hidden between them than the visits' own chance of
    going unseen (``marks``: they mark the steps, ``marks_steps``) leaves at MAX_CHANCE. An
    optimizer 19% of the step, seen in every one (e^-λ 0.1%), 2 micro-batches a step of 1 s, then
    of 0.5 s for the last 8 of 13: the fit took the first 5 for two steps each, as it would where
    visits go unseen (18 steps for 13, -28% on the mean)."""
    if marks is None:
        return False
    hidden = len(stepped.steps) - len(visit_groups(tl)[0])
    return hidden > 0 and poisson_tail(hidden, marks * len(stepped.steps)) <= MAX_CHANCE


def _below(stepped: Timeline, seen_step_ns: float) -> bool:
    """Whether the optimizer steps that ``by_optimizer`` fitted are shorter than the steps seen whole
    on a rank that saw every boundary (``_seen_step``): in a job whose steps vary (a worker's slow
    batch), a period fitted to the optimizer's visits can be a divisor that counts one slow step as
    several; an optimizer step is never shorter than the micro-batches or steps it is made of."""
    typical = stepped.clock.typical_ns
    return typical is not None and typical < (1 - MAX_STEP_ERROR) * seen_step_ns


# the steps nearest each edge whose returns say how many a step holds (``_edge_runs``: a live tick
# asks this of every rank, and what k is at an edge its nearest steps tell)
EDGE_STEPS = 64
_START = operator.attrgetter("start_ns")


def _edges(tl: Timeline, steps: Sequence[Step], period_ns: float | None) -> int:
    """Whole optimizer steps between the window's edges and the first and last optimizer step
    found (``timeline.edge_steps``): the micro-batches before the first return that ends one, and
    those that ``group`` leaves out at either end, still hold whole steps when long enough; counted
    in returns where they tell (``_edge_runs``)."""
    if not steps:
        return 0
    sides = edge_sides((steps[0].start_ns, steps[-1].end_ns), tl.start_seen_ns, tl.end_ns, period_ns, tl.rate_hz)
    runs = _edge_runs(tl, steps)
    return sum(side if run is None else run for side, run in zip(sides, runs, strict=True))


def _edge_runs(tl: Timeline, steps: Sequence[Step]) -> tuple[int | None, int | None]:
    """The whole optimizer steps before the first one found and after the last, counted in
    returns; None for a side where they do not tell (it is measured on the period, as
    ``edge_steps`` does). Only where every return was seen (the returns' e^-λ at most MAX_UNSEEN)
    and FETCH_PLACE of the EDGE_STEPS steps nearest that edge hold the same number k of them
    (``_returns_a_step``): the stretch before the first return and after the last is then shorter
    than a micro-batch. Before the first step found, the returns end at the visit that ends it, so k
    of them are a step, where k goes into them (a return missed after all leaves a remainder). After
    the last, fewer than k returns are no whole step where the window ends before the return that
    would end one could show (``_runs_after``); k or more may be one whose visit went unseen. The
    period tips on a step a little shorter or longer than it: accumulating 3 micro-batches of
    320-ms steps on 8 ranks, each counted 30 of the window's 31; 4 of 800 ms, 12 of 11."""
    unseen = tl.clock.unseen
    if unseen is None or unseen > MAX_UNSEEN:
        return None, None
    return _runs_before(tl, steps[:EDGE_STEPS]), _runs_after(tl, steps[-EDGE_STEPS:])


def _returns_a_step(tl: Timeline, steps: Sequence[Step]) -> tuple[list[int], int, int | None]:
    """Each of ``steps``' first interval (its place in ``tl.intervals``), the place of the first
    interval after the last of them, and k, the returns that FETCH_PLACE of them hold (None where
    fewer do). Each step holds the intervals up to the next one's: one before a hole holds the
    hole's too, which the mode outweighs."""
    at = [bisect.bisect_left(tl.intervals, s.start_ns, key=_START) for s in steps]
    last = bisect.bisect_left(tl.intervals, steps[-1].end_ns, key=_START)
    k, n = Counter(b - a for a, b in itertools.pairwise((*at, last))).most_common(1)[0]
    return at, last, k if k >= 1 and n >= FETCH_PLACE * len(steps) else None


def _runs_before(tl: Timeline, steps: Sequence[Step]) -> int | None:
    """``_edge_runs`` before the first of ``steps``: the whole steps that the returns before it
    hold, k a step, or None."""
    at, _, k = _returns_a_step(tl, steps)
    before = tl.intervals[:at[0]]
    if k is None or not before or len(before) % k or not all(iv.covered and not iv.swallowing for iv in before):
        return None
    if any(a.end_ns != b.start_ns for a, b in itertools.pairwise((*before, steps[0]))):
        return None
    return len(before) // k


def _runs_after(tl: Timeline, steps: Sequence[Step]) -> int | None:
    """``_edge_runs`` after the last of ``steps``: no whole step where the returns after it are
    fewer than k and the stretch from the last return to the window's edge is shorter than the
    median of the steps' last intervals that would end one (the return that ends a step is seen
    once the loop frame is back, and a step whose next one waits for its input shows it late: 4
    micro-batches whose 4 workers deliver in bursts, the last step's return 878 ms open at the
    window's edge), or where the window ends in the optimizer's visit; None where it may hold one."""
    if tl.end_ns is None:
        return None
    at, last, k = _returns_a_step(tl, steps)
    after = tl.intervals[last:]
    if k is None or len(after) >= k or not all(iv.covered and not iv.swallowing for iv in after):
        return None
    short = k - len(after)
    ends = [sum(iv.dur_ns for iv in tl.intervals[b - short:b])
            for a, b in itertools.pairwise((*at, last)) if b - a == k]
    open_ns = tl.end_ns - (after[-1].end_ns if after else tl.intervals[last - 1].end_ns) + 1e9 / max(tl.rate_hz, 1)
    if ends and open_ns < statistics.median(ends):
        return 0
    # ...or where the window ends in the optimizer's visit, so far shorter than the steps' visits
    # (their last intervals' optimizer time): the step it ends goes on past the edge
    so_far = _in_visit(tl.segments, tl.rate_hz)
    if so_far is None:
        return None
    visits = [tl.intervals[b - 1].phases_ns.get("optimizer", 0) for b in [*at[1:], last]]
    return 0 if so_far < statistics.median(visits) else None


def _in_visit(segments: Sequence[Segment], rate_hz: int) -> float | None:
    """How long the optimizer's visit that the segments end in had run at their end, a sample's lag
    added; None where they end in none."""
    if not segments or segments[-1].phase != "optimizer":
        return None
    end = start = segments[-1].ts_ns + segments[-1].dur_ns
    for i in range(len(segments) - 1, -1, -1):
        seg = segments[i]
        if seg.phase != "optimizer" or seg.ts_ns + seg.dur_ns < start:
            break
        start = seg.ts_ns
    return end - start + 1e9 / max(rate_hz, 1)


@dataclass(frozen=True)
class Plan:
    """How a timeline's returns become optimizer steps: a walk over every interval of the window,
    which a live view makes every few seconds (diagnose/incremental.py), not every tick."""

    k: int = 1                     # micro-batches per optimizer step (1: no accumulation counted)
    marks: float | None = None     # the optimizer's chance of going unseen, where its visits mark the steps
    doubt: str | None = None       # why the steps may be micro-batches, though k could not be counted
    # the doubt leaves the optimizer's visits no step either: long intervals are slow steps, not
    # several (``lumped``), or the visits fit no whole number of the returns (``_visits_apart``)
    no_visit_step: bool = False
    # the doubt (if any) is only that the gaps between the optimizer's visits could not rule
    # accumulation out (``undecided``): synchronized ranks weigh all their gaps together (``_pooled``)
    undecided: bool = False
    # where nothing was decided, the evidence that synchronized ranks pool (``_pooled``): the gaps
    # in micro-batches between the optimizer's visits, and the share of micro-batches it was seen in
    gaps: tuple[int, ...] = ()
    seen: float = 0.0
    odds: tuple[int, float] | None = None   # ``undecided`` of the gaps, where ``undecided``
    # the separate runs of the optimizer's visits that the gaps come from (each a stretch where it
    # was seen): 2 where the visits before a rate change are weighed too (``with_earlier``);
    # visits = gaps + runs
    runs: int = 1
    # k was counted from gaps a micro-batch short of its multiples now and then (``_by_odds``): the
    # clock missed returns, so k of them are no optimizer step; the optimizer's visits align them
    one_short: bool = False
    # ...where every return was seen and only the gaps timed over the period were one short: the
    # visits still align the steps, but what keeps them unknown is the micro-batches' lengths
    # (``_timed_short``), and the reason says so
    timed_short: bool = False
    # the doubt is that the gaps were multiples of one k, by a chance of at most SUGGESTED without
    # accumulation, short of counting it (``doubts.suggested_words``): a few more visits may count it
    suggested: bool = False
    # the chance that one micro-batch of a gap was counted wrong (``step_miscount``), where the
    # intervals' counts were weighed for it: synchronized ranks pool each rank's with its gaps
    miscount: float = 0.0
    # ``odds`` are the ones that only the long gaps' miscounts (``miscount``) allow: a doubt, never a k
    # counted (``decided``, ``_pooled``)
    loose: bool = False

    @property
    def provisional(self) -> bool:
        """Whether a few more of the optimizer's visits may turn this plan: no k was counted, and
        the only doubt is that the gaps could not rule accumulation out (``undecided``) or fell
        short of counting the k they suggest (``suggested``), on fewer than PROVISIONAL_GAPS gaps.
        8 ranks accumulating 16 micro-batches of a 1.3-s step: the live view kept a plan that
        said "not yet certain" for seconds after the window's one more visit counted k."""
        return (self.undecided or self.suggested) and len(self.gaps) < PROVISIONAL_GAPS


def plan_of(tl: Timeline) -> Plan:
    marks = marks_steps(tl.intervals, tl.rate_hz, tl.clock.known) if tl.loop is not None else None
    if not tl.clock.known:
        return Plan(1, marks)
    slow = lumped(tl)
    if slow is not None:
        return Plan(1, None, slow, no_visit_step=True)
    gaps, seen = visit_gaps(tl)
    multiples = _multiples_in(gaps, seen)
    k = _counted(*multiples)
    if k > 1 and _returns_missed(gaps, k, ONE_SHORT_SEEN_ALL if tl.clock.method == "wraps" else ONE_SHORT_SHARE):
        # the gaps a return short say that runs of k returns are no optimizer steps: the optimizer's
        # visits align them (4 micro-batches of an 80-ms step, 3 workers in bursts, at 500 Hz: 10 of
        # 60 gaps one short; grouped by 4 returns, 117 steps of 80.4 ms for the job's 123 of 75.6)
        return Plan(k, marks, one_short=True, timed_short=_timed_short(tl, k))
    counted = _whole_gaps(tl) if k == 1 else None
    whole = _counted_whole(tl, counted) if counted is not None else None
    if whole is not None:
        gaps, seen, by_odds = whole
        multiples = _multiples_in(gaps, seen)
        k = _counted(*multiples)
        if k == 1 and by_odds > 1:
            return Plan(by_odds, marks, one_short=True)
    if k > 1 or marks is not None:
        return Plan(k, marks)
    doubt = doubt_of(tl, multiples)
    if doubt is not None:
        return Plan(1, None, doubt, gaps=tuple(gaps), seen=seen, suggested=multiples[1] <= SUGGESTED)
    apart = _visits_apart(tl)
    if apart is not None:
        return Plan(1, None, apart[0], no_visit_step=not apart[1], gaps=tuple(gaps), seen=seen)
    plan = _undecided_plan(gaps, seen, 1, tl=tl)
    if plan.doubt is None and counted is not None and counted[0] != gaps:
        # every boundary seen: the gaps counted in its steps can leave accumulation undecided where
        # the gaps timed over the period do not. Micro-batches of two lengths by turns (2 workers
        # delivering in bursts, 115 and 400 ms, 2 a step) made a period, their mean, that counted
        # the long ones as two: timed, the visits were 2-8 apart and ruled nothing out; counted,
        # every gap of 11 was even (48,000 times likelier with 2 micro-batches a step), and the
        # micro-batches' mean was given as the step (-49%)
        other = _undecided_plan(*counted, 1)
        if other.doubt is not None:
            return other
    return plan


def _undecided_plan(gaps: Sequence[int], seen: float, runs: int, miscount: float | Sequence[float] = 0.0,
                    tl: Timeline | None = None) -> Plan:
    """The plan where the gaps between the optimizer's visits neither counted k nor raised another
    doubt: unknown where they cannot rule accumulation out either (``undecided``), their long gaps
    weighed as the likelier miscounted where ``miscount`` (each micro-batch's chance, one for all or
    each gap's; of ``tl``, ``step_miscount``, where that could matter) says the counts are unsure."""
    odds, loose = undecided(gaps, seen), False
    if odds is None:
        if tl is not None and may_be_undecided(gaps, seen):
            miscount = step_miscount(tl)
        odds = undecided(gaps, seen, miscount)   # (none where no gap's count is unsure)
        loose = odds is not None
    doubt = (undecided_words(odds, len(gaps) + runs, seen, gaps, loose=loose)
             if odds is not None and _unjudged(gaps, odds) else None)
    per_step = miscount if isinstance(miscount, (int, float)) else max(miscount, default=0.0)
    return Plan(1, None, doubt, gaps=tuple(gaps), seen=seen, undecided=True, odds=odds, runs=runs,
                miscount=per_step, loose=loose)


def step_miscount(tl: Timeline) -> float:
    """The chance that one step (a micro-batch, where the optimizer's gaps are counted in them) is
    counted wrong where ``visit_gaps`` times the intervals over one period: their count posteriors'
    doubt (``period.count_posteriors``) over the steps they count. A job whose speed drifted through
    the window (1.5 times slower at its start, 2 micro-batches of 25 ms a step, its optimizer seen in
    5% of them) had the gaps between the optimizer's visits timed over the mean period odd now and
    then, 11 of 42 (19, 13, 61, 23, 39, ...), where every one holds an even number; a tenth of the
    gaps miscounted, whatever their length, ruled accumulation out, and the micro-batch was given as
    the step (-49%). 0 where the clock counted each side of a change on its own (``counted_in``)."""
    clock = tl.clock
    if not clock.known or not clock.period_ns or clock.shift_ns is not None:
        return 0.0
    posts = count_posteriors([iv.end_ns - iv.start_ns for iv in tl.intervals if iv.covered], clock.period_ns,
                             clock.unseen, tl.rate_hz)
    steps = sum(n for n, _ in posts)
    return sum(1.0 - p for _, p in posts) / steps if steps else 0.0


def visit_gaps(tl: Timeline, start_ns: int | None = None, end_ns: int | None = None) -> tuple[list[int], float]:
    """``_gaps`` of ``tl``'s intervals that lie inside [start_ns, end_ns] (all by default), on its
    own period: the evidence on gradient accumulation that ``plan_of`` weighs. None of it
    (``([], 0.0)``) without a period."""
    period = tl.clock.period_ns
    if not period:
        return [], 0.0
    inside = [i for i, iv in enumerate(tl.intervals)
              if (start_ns is None or iv.start_ns >= start_ns) and (end_ns is None or iv.end_ns <= end_ns)]
    intervals = [tl.intervals[i] for i in inside]
    if tl.clock.shift_ns is not None:
        # counted on each side of a change (``clock.by_regimes``): as its clock counted them, not timed
        # over the mean of both periods (a job 2x slower for a fifth of the window, 4 micro-batches a
        # step: the gaps there timed 7 and 15 on the mean, where its own clock counted 4 and 8)
        counted = counted_in(tl)
        return _gaps(intervals, period, [counted[i] for i in inside])
    return _gaps(intervals, period, unseen=tl.clock.unseen)


def counted_in(tl: Timeline) -> list[int]:
    """How many of ``tl``'s steps begin in each of its intervals (at least 1): the counts its clock
    made, where no one period gives them again (a clock of two periods, ``clock.by_regimes``)."""
    starts = sorted(s.start_ns for s in tl.steps)
    return [max(1, bisect.bisect_left(starts, iv.end_ns) - bisect.bisect_left(starts, iv.start_ns))
            for iv in tl.intervals]


def _counted_whole(tl: Timeline, counted: tuple[list[int], float]) -> tuple[list[int], float, int] | None:
    """Where ``tl``'s clock saw every boundary, the gaps between the optimizer's visits counted in
    its steps as the clock counted them (each interval one but for a clear multiple, whatever its
    length), where they count k > 1 and the gaps timed over the period (``visit_gaps``) did not;
    else None. Timed, micro-batches whose input a DataLoader's workers deliver in bursts (3
    workers, 25 and 75 ms by turns, 4 to an optimizer step of 180 ms) count 1 and 3: no k divided
    the gaps, and the 28-ms micro-batch was given as the step (-85%). Counted, the fast ranks'
    micro-batches behind a straggler, whose last one holds the all-reduce's wait and returns
    within it, count more than k (``micro_count`` leaves that wait out): so timed first. With
    them, ``_by_odds``'s k (1: none) on them and the input's visits counted alike. ``counted``: the
    optimizer's gaps so counted (``_whole_gaps``)."""
    gaps, seen = counted
    if _counted(*_multiples_in(gaps, seen)) > 1:
        return gaps, seen, 1
    k = _by_odds(gaps, seen, _whole_gaps(tl, "input") or ([], 0.0))
    return (gaps, seen, k) if k > 1 else None


def _whole_gaps(tl: Timeline, phase: str = "optimizer") -> tuple[list[int], float] | None:
    """Where ``tl``'s clock saw every boundary, the gaps between the visits of ``phase`` counted in
    its steps as the clock counted them (``_counted_whole``); else None."""
    if tl.clock.method != "wraps" or not tl.clock.period_ns:
        return None
    starts = [s.start_ns for s in tl.steps]
    counts = [max(1, bisect.bisect_left(starts, iv.end_ns) - bisect.bisect_left(starts, iv.start_ns))
              for iv in tl.intervals]
    return _gaps(tl.intervals, tl.clock.period_ns, counts, phase)


def _by_odds(gaps: Sequence[int], seen: float, inputs: tuple[Sequence[int], float]) -> int:
    """k where the gaps, counted in the clock's steps, count it though fewer than MULTIPLE_SHARE of
    them are its multiples (``_one_short_k``), the optimizer seen in UNDECIDED_SEEN of its optimizer
    steps, or the input's visits (``inputs``: their gaps counted alike) counting the same k so; else 1.
    A micro-batch boundary the clock did not see makes a gap one short of a multiple: 3 workers
    delivering in bursts, 4 micro-batches to an 80-ms optimizer step at 500 Hz, had each
    micro-batch's backward (3 samples) go unseen 1 time in 25, and with it the return after it:
    55 of 75 gaps were multiples of 4 and 15 one short (3, 7, 11, 15, 19), where none would be
    expected one short without accumulation more than any other length; k = 4 was 8e20 times
    likelier than none, the optimizer seen in 64% of its steps, and the 14.5-ms micro-batch was given
    as the step (-81%). The recorded 2-rank DDP stream without accumulation, repeated for ten minutes
    (``ddp_input_straggler``), made k = 5 likelier 4.4e5 times, every gap a multiple of 5 or one short,
    but its optimizer seen in 52% of its steps. HF Trainer fetches a step's micro-batches at once
    (``get_batch_samples``): with 4 of them at 400 Hz its optimizer showed in 47% of its optimizer
    steps (31 gaps of 44 multiples of 4, 11 one short, 1.5e8:1), its input in 83% (58 of 79 multiples,
    17 one short, 1.8e25:1), where that DDP stream fetches every step (every gap 1). It was the 22-ms
    micro-batch given as the step (-75%)."""
    k = _one_short_k(gaps, seen)
    if k == 1 or k * seen >= UNDECIDED_SEEN:
        return k
    input_gaps, input_seen = inputs
    return k if _one_short_k(input_gaps, input_seen) == k and k * input_seen >= UNDECIDED_SEEN else 1


def _one_short_k(gaps: Sequence[int], seen: float) -> int:
    """k where the gaps make it COUNTED_ODDS times likelier than no accumulation and than any other
    k (``undecided``), from MIN_GAPS gaps or more, seen in MIN_SEEN of its optimizer steps, k >= 3,
    and MULTIPLE_SHARE of them multiples of k or one short of one (``_one_short``); else 1. Only one
    short: returns missed, nothing else (the DDP stream above, its optimizer seen every 10th step in
    a long stretch, 11 gaps of 10 and 4, 5, 24, made k = 10 3.7e5 times likelier than none). One
    short of a multiple of 2 is any odd gap: k = 2 is not counted so."""
    odds = undecided(gaps, seen)
    if odds is None or len(gaps) < MIN_GAPS or odds[1] < COUNTED_ODDS or odds[0] * seen < MIN_SEEN:
        return 1
    k = odds[0]
    return k if k >= 3 and _one_short(gaps, k) else 1


def _returns_missed(gaps: Sequence[int], k: int, share: float = ONE_SHORT_SHARE) -> bool:
    """Whether the gaps that counted ``k`` (``visit_gaps``) show returns that neither the clock
    saw nor timing made up: ``share`` of them one short of a multiple of k (ONE_SHORT_SHARE, or
    ONE_SHORT_SEEN_ALL where the clock saw every return by its e^-λ), MULTIPLE_SHARE
    multiples or one short (``_one_short``). One of 35 so (a long micro-batch timed as two) leaves
    runs of k returns the steps: 3 workers delivering in bursts, 4 micro-batches of a 200-ms
    step at 300 Hz, 49 steps within 1%. 20 of 205 do not: 4 of an 80-ms step at 500 Hz over 30 s,
    grouped by 4 returns, were 356 for the job's 372 (+6.5% on the step)."""
    return (k >= 3 and sum(1 for g in gaps if g % k == k - 1) >= share * len(gaps)
            and _one_short(gaps, k))


def _one_short(gaps: Sequence[int], k: int) -> bool:
    """Whether MULTIPLE_SHARE of the gaps are multiples of k or one short of one."""
    return sum(1 for g in gaps if g % k in (0, k - 1)) >= MULTIPLE_SHARE * len(gaps)


def with_earlier(plan: Plan, gaps: Sequence[int], seen: float) -> Plan:
    """``plan`` weighed together with the optimizer's visits before the rank's rate changed
    (``gaps`` in steps counted at the old rate, in the share ``seen`` of them; ``visit_gaps``).
    After a raise the steps are found from the change on (diagnose/rate.py), but the raise came
    because the visits before it could not settle accumulation (an optimizer seen too rarely),
    and the visits after it alone are fewer still: a 10-s snapshot of a 2-rank DDP job with a
    0.4-ms optimizer in 120-ms steps, raised to 300 Hz after 6 s, had 5 gaps on the two ranks
    after the raise (4 of them multiples of 3: 9:1 for k = 3, so unknown) and 12 with the ones
    before (no k stands; ``tests/fixtures/truth_ddp_raised``). Only a plan
    that nothing but those gaps decided (``Plan.undecided``) is weighed again; the two runs' shares
    seen are pooled as the synchronized ranks' are (``_pooled``)."""
    if not plan.undecided or not gaps:
        return plan
    joined = [*gaps, *plan.gaps]
    seen = (seen * len(gaps) + plan.seen * len(plan.gaps)) / len(joined)
    runs = (plan.runs if plan.seen > 0 else 0) + 1   # a run with no visit adds none
    k, chance, n = _multiples_in(joined, seen)
    if _counted(k, chance, n) > 1:
        return Plan(k)
    if chance <= SUGGESTED:
        return Plan(1, None, suggested_words(k), gaps=tuple(joined), seen=seen, runs=runs)
    # (the gaps before the change counted at the old rate, taken as surely as ever)
    return _undecided_plan(joined, seen, runs, [0.0] * len(gaps) + [plan.miscount] * len(plan.gaps))


def _visits_apart(tl: Timeline) -> tuple[str, bool] | None:
    """Why the returns are not optimizer steps where the optimizer's own visits fit a step at
    least WHOLE_APART times the returns' period (``by_optimizer``), and whether that step is the
    optimizer step: where the ratio is a whole number k within WHOLE_SLACK, the returns are
    micro-batches, k of them to a step (counted too unevenly for ``_gaps``: the last micro-batch
    holds the all-reduce's wait, the optimizer and the next fetch); otherwise the returns and the
    visits fit no one step. Without accumulation the visits fall at whole steps, and a period fitted
    to them is the returns' own. None where the visits fit no step, or the returns'."""
    # where every boundary is seen (method "wraps"), micro-batches are counted exactly and k with
    # them (``_multiples_in``); a period fitted to a few visits there is noise (a recorded DDP
    # stream's short optimizer, ddp_input_straggler, fitted no whole number of its 128 ms steps)
    if tl.clock.method not in ("comb", "joint"):
        return None
    # cheap before the fit (a live view plans every rank every few seconds): the visits must be
    # enough for a period (one fewer gaps than visits), and in at most 1/WHOLE_APART of the
    # intervals, as k >= 2 micro-batches to one visit make them. There, too, a period fitted to
    # short returns may be no step at all (bursty delivery at 3.6 samples a step), which visits at
    # no whole number of them show
    period = tl.clock.period_ns
    covered = sum(1 for iv in tl.intervals if iv.covered)
    held = sum(1 for iv in tl.intervals if iv.covered and iv.phases_ns.get("optimizer", 0) > 0)
    if not period or held <= MIN_INTERVALS or held * WHOLE_APART > covered or not _returns_close(tl):
        return None
    stepped = by_optimizer(tl)
    if stepped is None or not stepped.clock.period_ns:
        return None
    visits = stepped.clock.period_ns
    if tl.clock.shift_ns is not None:
        # the returns counted on each side of a change (``clock.by_regimes``): the faster side's
        # optimizer step is k of its returns (the visits counted on each side, ``_visits_by_regimes``)
        period = min(tl.clock.shift_ns)
        visits = min(stepped.clock.shift_ns) if stepped.clock.shift_ns is not None else visits
    return _apart(visits, period)


def _apart(visits_ns: float, period_ns: float, where: str = "") -> tuple[str, bool] | None:
    """``_visits_apart``'s verdict on a period fitted to the optimizer's visits against the
    returns' period ``period_ns``; ``where``: whose visits, in words."""
    ratio = visits_ns / period_ns
    if ratio < WHOLE_APART:
        return None
    why = (f"the optimizer's visits{where} fit a step of {visits_ns / 1e6:.0f} ms, {ratio:.1f} times the "
           f"{period_ns / 1e6:.0f} ms between the loop's returns")
    if abs(ratio - round(ratio)) <= WHOLE_SLACK:
        return why + f": those are micro-batches, about {round(ratio)} to an optimizer step", True
    return why + ", and no whole number of them: the returns and the optimizer fit no one step", False


def _pooled_visits(timelines: dict[str, Timeline], plans: dict[str, Plan]) -> dict[str, Plan]:
    """Synchronized ranks step their optimizers together: where no rank counted k, none marks its
    steps by its visits and none has another doubt, but each saw its optimizer too few times for a
    period of its own (``_visits_apart``), the lengths between the visits of all of them are one
    fit. A period at least WHOLE_APART times their returns' (``_apart``) leaves each rank's step
    to its own visits where they give one, else unknown: a straggler's fast ranks hold the
    all-reduce's wait in the last micro-batch, miscounted, and their gaps outweighed a rank whose
    gaps were all multiples of k (k = 2 on 4 ranks at 50 Hz, the optimizer seen ~10 times a rank,
    read the micro-batch: -50%; k = 8 on 2 ranks, 11 optimizer steps in the window: -91%)."""
    if any(p.k > 1 or p.marks is not None or (p.doubt is not None and not p.undecided) for p in plans.values()):
        return plans
    # only where some rank's own gaps left it in doubt (``undecided``), which ``_pooled`` would
    # drop: a live view pools every tick, and the visits' walk costs each rank a walk of its window
    if not any(p.undecided and p.doubt is not None for p in plans.values()):
        return plans
    lengths: list[int] = []
    periods, rates = set(), set()
    for tl in timelines.values():
        period = tl.clock.period_ns
        if tl.loop is None or not period or not _returns_close(tl):
            return plans
        groups, own = visit_groups(tl)
        if _ends_every_interval(tl, groups):
            continue
        lengths += own
        periods.add(period)
        rates.add(tl.rate_hz)
    if len(rates) != 1 or len(periods) != 1 or len(lengths) < MIN_INTERVALS:
        return plans
    clock, _ = clock_of(lengths, None, rates.pop())
    if not clock.known or not clock.period_ns:
        return plans
    verdict = _apart(clock.period_ns, periods.pop(), f" on the {len(timelines)} synchronized ranks together")
    if verdict is None:
        return plans
    # each rank's own visits may still give its step (``with_accumulation``), else it is unknown
    return {rank: replace(p, doubt=verdict[0], no_visit_step=not verdict[1], undecided=False)
            for rank, p in plans.items()}


def _unjudged(gaps: Sequence[int], odds: tuple[int, float]) -> bool:
    """Whether odds from ``undecided`` may be a doubt: where the optimizer was seen in steps one
    apart more often than MAX_ADJACENT allows, which ``_multiples_in`` takes as no accumulation,
    only odds of ADJACENT_ODDS or more (an input-bound job without it had 8 of 9 gaps even by
    chance, 123:1, and one of 1; HF Trainer with 4 micro-batches, whose optimizer frames show in
    other micro-batches too, 6 gaps of 1 in 48 and 5,733:1). Odds beyond doubt count k (``decided``)."""
    return sum(1 for g in gaps if g == 1) <= MAX_ADJACENT * len(gaps) or odds[1] >= ADJACENT_ODDS


def decided(plan: Plan) -> Plan:
    """``plan`` with k counted where its gaps make one k at least COUNTED_ODDS times likelier than
    none (``Plan.odds``) and show the optimizer in MIN_SEEN of its optimizer steps: the multiples
    were miscounted now and then (more than MULTIPLE_SHARE allows), but are beyond doubt all the same."""
    odds = plan.odds
    if not plan.undecided or plan.loose or not _beyond_doubt(odds, plan.seen):
        return plan
    return replace(plan, k=odds[0], doubt=None, undecided=False) if odds is not None else plan


def _beyond_doubt(odds: tuple[int, float] | None, seen: float) -> bool:
    return odds is not None and odds[1] >= COUNTED_ODDS and odds[0] * seen >= MIN_SEEN


def _whole_intervals(tl: Timeline, stepped: Timeline) -> bool:
    """Whether an optimizer step fitted to the visits (``stepped``) spans several of the intervals
    between the returns, where those are every boundary (at least VISITS_APART times their mean):
    without accumulation the visits fall in random steps, and a period fitted to the sums of
    several steps of several lengths (a DataLoader delivering in bursts) is their mean, no step's.
    Nor where the returns' comb, refused as it drifted beyond their shortest intervals (``drifted_ns``),
    and the visits fit no one step (``_apart``), as they must where the returns are a step's pieces
    and the visits its ends: 2 workers delivering in bursts under HF's loop, 7-ms steps at 500 Hz,
    gave returns whose comb drifted to 10 ms and visits that fit 16.9 ms, 1.7 times it, a pair of
    steps (+96%)."""
    unseen = tl.clock.unseen
    covered = [iv.counted_ns for iv in tl.intervals if iv.covered]
    period = stepped.clock.period_ns
    if tl.clock.drifted_ns and period:
        apart = _apart(period, tl.clock.drifted_ns)
        if apart is not None and not apart[1]:
            return False
    if unseen is None or unseen > MAX_UNSEEN or len(covered) < MIN_INTERVALS or not period:
        return True
    return period >= VISITS_APART * statistics.fmean(covered)


def shared_plans(plans: dict[str, Plan]) -> dict[str, Plan]:
    """Synchronized ranks take one step: the micro-batches per step that some rank counted stand
    for every rank that counted none (a fast rank waits in the all-reduce of the last micro-batch
    only, which blurs its count: DDP's ``no_sync`` for the others)."""
    ks = [p.k for p in plans.values() if p.k > 1]
    if not ks:
        return _pooled(plans)
    k = max(sorted(set(ks)), key=ks.count)   # the most common; the smallest of a tie
    return {rank: replace(p, k=k, doubt=None) if p.k == 1 else p for rank, p in plans.items()}


def _pooled(plans: dict[str, Plan]) -> dict[str, Plan]:
    """Synchronized ranks step their optimizers together, and each is sampled by a sampler of its
    own: where no rank's visits alone were enough to count k (a short optimizer step, seen in a
    few optimizer steps of each rank), the gaps of all of them together are the same test with
    more evidence. Where they still fall short of counting, a chance of at most SUGGESTED, or one
    rank's doubt, makes every rank's step time unknown: their steps are one."""
    pool = {rank: p for rank, p in plans.items() if p.k == 1 and p.marks is None and not p.no_visit_step}
    gaps = [g for p in pool.values() for g in p.gaps]
    if len(pool) < 2 or not gaps:
        return plans
    # a rank's few gaps that could not rule accumulation out are weighed with the others' below; not
    # a rank whose own counts were so unsure that its long gaps alone left it in doubt (``Plan.loose``):
    # its peers' gaps, counted surely, do not count its micro-batches (a straggler's peers' last
    # micro-batch, which holds the all-reduce's wait, counted as two now and then)
    plans = {rank: replace(p, doubt=None) if rank in pool and p.undecided and not p.loose else p
             for rank, p in plans.items()}
    pool = {rank: plans[rank] for rank in pool}
    seen = sum(p.seen * len(p.gaps) for p in pool.values()) / len(gaps)
    # seen in at least MIN_SEEN of the optimizer steps, as for one rank: a few visits of a shorter
    # optimizer are spaced apart by chance as often as not, as a real DDP stream showed (gaps of 10,
    # 10, 5, 4, 10 micro-batches, no accumulation)
    k, chance, n = _multiples_in(gaps, seen)
    if _counted(k, chance, n) > 1:
        return {rank: replace(p, k=k, doubt=None) if rank in pool else p for rank, p in plans.items()}
    odds = undecided(gaps, seen) if any(p.undecided for p in pool.values()) else None
    loose = False
    if odds is None and any(p.undecided and p.miscount > 0.0 for p in pool.values()):
        # (a doubt only: the long gaps weighed as the likelier miscounted, each rank's by its own counts)
        odds = undecided(gaps, seen, [p.miscount for p in pool.values() for _ in p.gaps])
        loose = odds is not None
    elif odds is not None and _beyond_doubt(odds, seen):
        return {rank: replace(p, k=odds[0], doubt=None, undecided=False) if rank in pool and p.undecided else p
                for rank, p in plans.items()}
    doubts = [p.doubt for p in pool.values() if p.doubt is not None]
    undecided_too = False
    if chance <= SUGGESTED:
        doubt = (f"on the {len(pool)} synchronized ranks together, the optimizer was seen only every {k} or a "
                 f"multiple of {k} of the steps counted ({n} gaps), which points to gradient accumulation of {k} "
                 "micro-batches, not yet certain in this window; sample longer")
    elif doubts:
        doubt = f"another rank, which steps with this one: {doubts[0]}"
    elif odds is not None and _unjudged(gaps, odds):
        visits = len(gaps) + sum(p.runs for p in pool.values())
        doubt, undecided_too = undecided_words(odds, visits, seen, gaps, len(pool), loose), True
    else:
        return plans
    return {rank: replace(p, doubt=doubt, undecided=undecided_too, seen=seen, odds=odds, loose=loose)
            if rank in pool and p.doubt is None else p for rank, p in plans.items()}


def agreeing(timelines: dict[str, Timeline], aligned: Container[str] = ()) -> dict[str, Timeline]:
    """Synchronized ranks' optimizer steps, which are one step: where their known step times
    spread by more than MAX_STEP_ERROR, those that stray that far from the rank that saw every
    boundary (method "wraps": the most certain) are unknown, and all of them without such a rank.
    A rank whose steps were aligned on its optimizer's visits (``aligned``: ``by_counted_returns``,
    its own clock unknown) is not such a rank: its steps are whole, but their ends are where the
    visits put them. On 8 ranks accumulating 2 micro-batches with bursty input, one rank's returns
    ended half its intervals 50-100 ms from any micro-batch's end; its aligned pairs' median (174
    ms) was taken over five ranks whose optimizer visits gave 202 ms, right (-14%)."""
    known = {rank: tl.clock.typical_ns for rank, tl in timelines.items() if tl.clock.typical_ns}
    if len(known) < 2 or max(known.values()) <= (1 + MAX_STEP_ERROR) * min(known.values()):
        return timelines
    sure = [rank for rank in known if timelines[rank].clock.method == "wraps" and rank not in aligned]
    ref = statistics.median(known[rank] for rank in sure) if sure else None
    out = dict(timelines)
    for rank, typical in known.items():
        if ref is not None and abs(typical / ref - 1) <= MAX_STEP_ERROR:
            continue
        why = (f"this rank's step ({typical / 1e6:.0f} ms) strays from the one of the ranks that saw every boundary "
               f"({ref / 1e6:.0f} ms), though the ranks step together" if ref is not None else
               "the synchronized ranks' step times disagree by more than 5%, and no rank saw every boundary")
        tl = timelines[rank]
        clock = StepClock("unknown", None, None, tl.clock.concentration, why, None, None, unseen=tl.clock.unseen)
        out[rank] = _floor(replace(tl, clock=clock))
    return out


def accumulated(timelines: dict[str, Timeline], plans: dict[str, Plan], synchronized: bool) -> dict[str, Timeline]:
    """Every rank's timeline in optimizer steps, on its ``plans`` (``plan_of``); synchronized ranks
    share their k and must agree on their step (``shared_plans``, ``agreeing``)."""
    plans = shared_plans(_pooled_visits(timelines, plans)) if synchronized else {
        rank: decided(p) for rank, p in plans.items()}
    shortest = _seen_step(timelines.values()) if synchronized else None
    micro = synchronized and any(_micro_returns(tl) for tl in timelines.values())
    out = {rank: with_accumulation(tl, plans[rank], shortest, micro) for rank, tl in timelines.items()}
    k = _returns_k(timelines) if micro else 1
    aligned: set[str] = set()
    if k > 1:
        for rank, tl in timelines.items():
            stepped = by_counted_returns(tl, k) if not out[rank].clock.known and _seen_whole(tl) else None
            if stepped is not None:
                out[rank] = stepped
                aligned.add(rank)
    if synchronized:
        out = _strays_on_peers(timelines, out)
    if synchronized and any(tl.clock.cause == UNEVEN for tl in out.values()):
        # the ranks take the same steps: where slow steps left one rank's median unknown
        # (``judged_uneven``), a peer counted on its period (or its own) has no truer one; each
        # interval of theirs holds a step at least
        out = {rank: replace(tl, clock=uneven_clock(tl.clock), step_floor=len(tl.intervals)) if tl.clock.known
               else tl for rank, tl in out.items()}
    if synchronized:
        out = _regimes_on_peers(timelines, _blurred_on_peers(_shifted_on_peers(out)))
    return _visits_on_peers(timelines, out, agreeing(out, aligned)) if synchronized else out


def _shifted_on_peers(out: dict[str, Timeline]) -> dict[str, Timeline]:
    """Synchronized ranks take the same steps: where one rank saw them change length beyond chance
    with a side too short to count (cause SHIFTED, ``clock.by_regimes``), a peer's one period over the
    whole window (its own test did not find the change, its samples fell otherwise) counts the other
    side's steps as several or as parts, and none of them is given. 8 ranks, 6 optimizer steps of
    700 ms, then 13 of 350 at 50 Hz: two ranks found the change, the six others' 350-ms comb counted
    27 steps for 20 (-26% on the mean), which ``_visits_on_peers`` then gave the two. A peer counted
    on each side of the change (``StepClock.shift_ns``) keeps its own, as does one that saw every
    step and gives their mean (``_visits_mean``, steps/mean.py), which holds across a change."""
    shifted = next((tl.clock for tl in out.values() if tl.clock.cause == SHIFTED), None)
    if shifted is None:
        return out
    return {rank: replace(tl, clock=replace(shifted, unseen=tl.clock.unseen), micro_batches=None,
                          step_floor=len(tl.steps))
            if tl.clock.known and tl.clock.shift_ns is None and not (tl.clock.mean and tl.clock.method == "wraps")
            else tl for rank, tl in out.items()}


def _blurred_on_peers(out: dict[str, Timeline]) -> dict[str, Timeline]:
    """Synchronized ranks take the same steps: where one rank that saw every boundary found them
    too uneven for a median (cause IRREGULAR: the samples' lag moves it, ``judged_blurred``), a peer
    counted on the period they share ("joint") has no truer median, though its own steps passed the
    test; it is unknown for the same cause, and given the mean where the others are
    (steps/mean.py). 4 ranks of ~36-ms steps whose 6 workers deliver in bursts, at 400 Hz: three ranks'
    lag moved their medians 3-15%, the fourth, on their period, gave 32.8 ms for the job's median 36.4
    (-10%) beside the others' mean 43.3 (the job's 43.4)."""
    irregular = next(((rank, tl.clock) for rank, tl in out.items()
                      if not tl.clock.known and tl.clock.cause == IRREGULAR and tl.clock.reason), None)
    if irregular is None:
        return out
    rank, clock = irregular
    return {r: replace(tl, clock=StepClock("unknown", None, None, tl.clock.concentration,
                                           f"on rank {rank}, {clock.reason}", unseen=tl.clock.unseen,
                                           cause=IRREGULAR))
            if tl.clock.known and tl.clock.method == "joint" and not tl.clock.mean else tl
            for r, tl in out.items()}


def _regimes_on_peers(timelines: dict[str, Timeline], out: dict[str, Timeline]) -> dict[str, Timeline]:
    """Synchronized ranks take the same steps: where one rank's returns found them change length
    (``regimes_of``), whatever its own count came to, a rank whose optimizer's visits one period
    counted (its returns too short to show the change: 50-ms micro-batches at 100 Hz, a tenth unseen)
    has them counted on the same two sides (``_visits_by_regimes``). 4 ranks, 2x slower for 6.5 s of
    30: the rank that found the change counted 129 optimizer steps for the job's 132, its three peers
    143-148 on one 200-ms period, and the ranks disagreed; over 10 s at 100 Hz the rank that found it
    was left unknown, and its peers' one period gave the job's mean -8.2%."""
    source = next((regimes for tl in timelines.values() if (regimes := regimes_of(tl)) is not None), None)
    if source is None:
        return out
    fixed = dict(out)
    for rank, tl in out.items():
        if (tl.clock.known and tl.clock.shift_ns is None and tl.micro_batches is None
                and tl.clock.method in ("comb", "joint")):
            stepped = by_optimizer(timelines[rank], regimes=source)
            if stepped is not None and stepped.clock.known and stepped.clock.shift_ns is not None:
                fixed[rank] = stepped
    return fixed


def _strays_on_peers(timelines: dict[str, Timeline], out: dict[str, Timeline]) -> dict[str, Timeline]:
    """Synchronized ranks step their optimizers together, so every rank's optimizer visits mark the
    same optimizer steps: a rank whose steps a comb fitted to its own visits counted (``by_optimizer``:
    its returns gave no such clock) is unknown where the gaps between the visits of all the ranks at
    its rate, counted on its period, fall short of it beyond chance (``_short_strays``), as its own
    few may not show. 2 ranks of bursty ~5-ms steps at 50 Hz: one rank's visits fitted 163 ms (2 of
    its 12 single gaps short of it), the other's fitted none and had 3 short ones: 185 steps for the
    job's 1,456 (+683% on the median)."""
    fitted = [rank for rank, tl in out.items() if tl.clock.method == "comb" and tl.micro_batches is None
              and tl.clock.period_ns != timelines[rank].clock.period_ns]
    if not fitted:
        return out
    visits = {rank: visit_groups(tl)[1] for rank, tl in timelines.items() if tl.loop is not None}
    out = dict(out)
    for rank in fitted:
        tl = out[rank]
        period = tl.clock.period_ns or 0.0
        lengths = [float(g) for peer, gaps in visits.items() if timelines[peer].rate_hz == tl.rate_hz for g in gaps]
        strays = _short_strays(lengths, step_counts(lengths, period), period, tl.rate_hz)
        if strays is None:
            continue
        reason = _strays_reason(period, strays, "between the visits of the ranks that step together")
        out[rank] = replace(tl, clock=StepClock("unknown", None, None, tl.clock.concentration, reason),
                            step_floor=len(tl.steps))
    return out


def _visits_on_peers(timelines: dict[str, Timeline], own: dict[str, Timeline],
                     agreed: dict[str, Timeline]) -> dict[str, Timeline]:
    """Synchronized ranks step together: a rank whose own optimizer step is unknown (``own``),
    where the others' agree on theirs (``agreed``), has their step when its optimizer's visits sit
    on it (``_visits_at``). Its visits fitted no period of their own (its gaps' counts unsure by
    their jitter, its visits few, or at no whole number of its returns behind a straggler), but a
    period given is checked where one to fit is not: on 8 ranks with k = 2 and a 30% straggler,
    three ranks were unknown beside five within 0.3% of the truth (``accum:30:2/long:300:8``)."""
    known = [tl for tl in agreed.values() if tl.clock.typical_ns]
    waiting = [rank for rank, tl in own.items() if not tl.clock.known]   # ``agreeing`` never makes one known
    if not known or not waiting:
        return agreed
    ref = statistics.median(tl.clock.typical_ns or 0.0 for tl in known)
    count = statistics.median(tl.step_count for tl in known)
    micro = {tl.micro_batches for tl in known}
    mean = all(tl.clock.mean for tl in known)   # the peers' step is their mean: so is this rank's
    blurred = mean and all(tl.clock.blurred for tl in known)
    out = dict(agreed)
    for rank in waiting:
        stepped = _visits_at(timelines[rank], ref, mean, blurred)
        # ...and the steps counted from them are the peers' (one window, one step): an off count
        # is gaps miscounted (k = 2 at 50 Hz, 20% jitter: 74 steps beside peers' 69-72, truth 70)
        if stepped is not None and abs(stepped.step_count - count) <= PEER_COUNT * count:
            out[rank] = replace(stepped, micro_batches=next(iter(micro)) if len(micro) == 1 else None)
    return out


def _visits_at(tl: Timeline, period: float, mean: bool = False, blurred: bool = False) -> Timeline | None:
    """``tl`` in optimizer steps of ``period`` (its synchronized peers'), counted between its
    optimizer's visits where those sit on that period (``fit_at``); None where they do not, or
    where they are the returns themselves."""
    if tl.loop is None:
        return None
    groups, lengths = visit_groups(tl)
    if _ends_every_interval(tl, groups) and not _seen_whole(tl):
        return None
    fit = fit_at(lengths, period, tl.rate_hz)
    if fit.period_ns is None:
        return None
    steps = expand(groups, fit.counts)
    clock = StepClock("joint", period, len(fit.counts) / sum(fit.counts), fit.concentration, typical_ns=period,
                      edge_steps=_edges(tl, steps, period), mean=mean, blurred=blurred)
    return replace(tl, steps=steps, clock=clock, step_floor=None)


def _seen_whole(tl: Timeline) -> bool:
    """Whether ``tl``'s returns were every one seen, and vary too much for a typical one (IRREGULAR):
    each interval between them is one return's (one micro-batch, where they are micro-batches)."""
    return tl.clock.irregular and tl.clock.unseen is not None and tl.clock.unseen <= MAX_UNSEEN


def _returns_k(timelines: dict[str, Timeline]) -> int:
    """k, the micro-batches per optimizer step, where synchronized ranks saw every return and the
    returns vary too much for a typical step (``_seen_whole``) while a rank shows them as
    micro-batches (``_micro_returns``): each interval is one micro-batch, so the gaps between the
    optimizer's visits are counted in intervals, not in a period that no typical return gives; the
    ranks' gaps together are one test (``_multiples_in``, counted as ``_counted``). 1 where none is
    counted. (4 ranks accumulating 3 micro-batches of an 800-ms step behind a 30% straggler: the
    waiting ranks' last micro-batch holds the all-reduce's wait, and 11 visits a rank in 10 s were
    too few to time the step by, but 40 gaps of exactly 3 intervals are no chance.)"""
    return _k_in_returns(tl for tl in timelines.values() if _seen_whole(tl))


def _k_in_returns(timelines: Iterable[Timeline]) -> int:
    """k counted from the gaps between the optimizer's visits in intervals (``_index_gaps``), the
    timelines' gaps together one test (``_multiples_in``, counted as ``_counted``); 1 where none is."""
    gaps: list[int] = []
    visits = intervals = 0
    for tl in timelines:
        own, seen, covered = _index_gaps(tl.intervals)
        gaps += own
        visits += seen
        intervals += covered
    return _k_of_gaps(gaps, visits, intervals)


def _k_of_gaps(gaps: Sequence[int], visits: int, intervals: int) -> int:
    """``_k_in_returns`` of gaps (in intervals), visits and intervals already gathered."""
    if not gaps or not intervals:
        return 1
    return _counted(*_multiples_in(gaps, min(visits / intervals, 0.999)))


def _index_gaps(intervals: Sequence[Step]) -> tuple[list[int], int, int]:
    """The gaps, in intervals, between the intervals that hold optimizer time (inside each of
    ``_covered_runs``: none across a hole or a drop-out), the visits, and the intervals covered."""
    gaps: list[int] = []
    visits = covered = 0
    for run in _covered_runs(intervals):
        at = _visits_in(run)
        gaps += [b - a for a, b in itertools.pairwise(at)]
        visits += len(at)
        covered += len(run)
    return gaps, visits, covered


def _covered_runs(intervals: Sequence[Step]) -> list[list[Step]]:
    """The intervals that sampling covered, in runs of ones that follow each other: a hole, or an
    interval sampling did not cover (a sampler drop-out, which may hide returns), ends a run."""
    runs: list[list[Step]] = []
    run: list[Step] = []
    for iv in intervals:
        if run and (iv.start_ns != run[-1].end_ns or not iv.covered):
            runs.append(run)
            run = []
        if iv.covered:
            run.append(iv)
    return [*runs, run] if run else runs


def _visits_in(run: Sequence[Step]) -> list[int]:
    """The places in ``run`` of the intervals that hold optimizer time."""
    return [i for i, iv in enumerate(run) if iv.phases_ns.get("optimizer", 0) > 0]


def by_counted_returns(tl: Timeline, k: int) -> Timeline | None:
    """``tl`` in optimizer steps of ``k`` of its returns each (``_returns_k``), where every return
    was seen (``_seen_whole``): each visit of the optimizer ends a step, and the intervals between
    two visits are as many steps as k goes into them, rounded (``_visit_runs``); each step's length
    is measured whole, and their clock is any seen steps' (``clock_of``: the median must hold).
    None where it does not (``_aligned_on_visits`` says why)."""
    aligned = _aligned_on_visits(tl, k)
    return None if isinstance(aligned, str) else aligned


def _aligned_on_visits(tl: Timeline, k: int) -> Timeline | str:
    """``by_counted_returns``'s timeline, or why its steps give no step time."""
    steps = _visit_runs(tl.intervals, k)
    if len(steps) < 2:
        return f"{len(steps)} of them is too few to time"
    timed = _whole_steps_clock(steps, [s.dur_ns for s in steps], tl.clock.unseen, tl.rate_hz)
    if isinstance(timed, str):
        return timed
    # no edge steps: every whole run of k intervals is a step already, and what is left at either
    # end (fewer than k intervals, and the part of a return before the first one seen) holds none
    clock, typical, mean = timed
    clock = replace(clock, typical_ns=typical, edge_steps=0, mean=mean)
    return replace(tl, steps=steps, clock=clock, micro_batches=k, step_floor=None)


def _whole_steps_clock(steps: Sequence[Step], lengths: Sequence[int], unseen: float | None, rate_hz: int
                       ) -> tuple[StepClock, float, bool] | str:
    """The clock of ``steps`` each measured whole (``by_counted_returns``, ``by_fetch``; ``lengths``
    as counted), its typical step, and whether that is their mean: every boundary seen (method
    ``wraps``), at most ALIGNED_LONG of them as long as several (a step or two that the clock would
    count as several, a visit missed where a return was too: HF Trainer with 4 micro-batches, 1 of
    98 steps aligned on the visits, move the median by nothing and the count by what the steps'
    count allows); the median step, or, where it does not hold, the mean, where a missed boundary is
    unlikely to move it (steps/mean.py: 8 ranks, 2 micro-batches whose input 3 workers deliver in
    bursts, 174 ms for a median of 203, the 48 steps counted right). Where neither stands, why not."""
    clock, counts = clock_of(lengths, unseen, rate_hz)
    if clock.method != "wraps":
        why = (clock.reason or "they fit no step clock").split(":")[0]
        return f"no clock of theirs holds ({why})"
    long = sum(1 for n in counts if n != 1)
    if long > ALIGNED_LONG * len(counts):
        return f"{long} of the {len(counts)} are as long as several"
    durations = sorted(float(s.dur_ns) for s in steps)
    mean = clock.shift_ns is not None or not steady_median(durations, len(steps))   # (``clock.by_regimes``)
    if mean and mean_at_risk(len(steps), unseen):
        return "too few of them were seen for their mean to hold within 5%"
    return clock, sum(durations) / len(durations) if mean else statistics.median(durations), mean


def by_fetch(tl: Timeline) -> Timeline | None:
    """``tl`` in optimizer steps that each begin at an interval holding input time, where the loop
    fetches an optimizer step's micro-batches before the first of them (HF Trainer's
    ``get_batch_samples``): the input is then seen once an optimizer step, a return or more apart
    (at least FETCH_PLACE of the gaps between fetches 2 intervals or more), and the optimizer,
    wherever it is seen, ends the step before a fetch: at least FETCH_VISITS of its visits (MIN_GAPS
    or more) in the interval right before one, or a whole number of steps' returns before one (the
    fetch after it unseen). A DataLoader whose workers deliver in bursts shows
    its waits in some micro-batches too, but the optimizer then falls elsewhere among them, or in
    the fetch's own interval (3 workers, 3 micro-batches a step: the last micro-batch of each step
    waited for its input, then stepped the optimizer, and two gaps in five were one). The steps are
    counted on the fetches' clock (``clock_of``, every fetch seen but for MAX_UNSEEN), each measured
    whole, as ``by_counted_returns``; where more fetches went unseen, on the comb of the runs between
    those seen (``_fetch_comb``). HF Trainer with 4 micro-batches and a tokenizer taking 20% of
    the step (one interval in four holding the fetch, twice the others): the micro-batches' period
    read the long ones as slow steps (``lumped``), and its optimizer, in half the steps, fitted no
    period of its own (``by_optimizer``). None where the fetches mark no steps."""
    found = _fetch_runs(tl)
    return None if found is None else _fetched_whole(tl, found)


# ``_fetch_runs``: the runs of intervals with the places of the fetches that begin a step in each, the
# gaps between those fetches in returns, the steps from one fetch to the next, and the chance that a
# fetch goes unseen
FetchRuns = tuple[list[tuple[list[Step], list[int]]], list[int], list[Step], float | None]


def _fetch_runs(tl: Timeline) -> FetchRuns | None:
    """``by_fetch``'s tests of the fetches and the optimizer's visits, and what passes them; None where
    the fetches mark no steps."""
    runs = [(run, [i for i, iv in enumerate(run) if iv.phases_ns.get("input", 0) > 0])
            for run in _covered_runs(tl.intervals)]
    gaps = [b - a for _, fetches in runs for a, b in itertools.pairwise(fetches)]
    if len(gaps) < MIN_INTERVALS or sum(1 for g in gaps if g >= 2) < FETCH_PLACE * len(gaps):
        return None
    k = Counter(gaps).most_common(1)[0][0]
    runs = [(run, _step_fetches(fetches, k)) for run, fetches in runs]
    gaps = [b - a for _, fetches in runs for a, b in itertools.pairwise(fetches)]
    before = elsewhere = 0
    for run, fetches in runs:
        for i in _visits_in(run):
            if fetches and fetches[0] <= i < fetches[-1]:   # inside a step begun and ended by fetches
                after = fetches[bisect.bisect_right(fetches, i)] - i
                before, elsewhere = (before + 1, elsewhere) if (after - 1) % k == 0 else (before, elsewhere + 1)
    if len(gaps) < MIN_INTERVALS or before + elsewhere < MIN_GAPS or before < FETCH_VISITS * (before + elsewhere):
        return None
    # each run between two fetches ends with the optimizer, seen in some of them; where the fetches
    # come twice or more an optimizer step (a loader whose 2 workers deliver in bursts makes every
    # other micro-batch wait), only every k-th run can, and the runs that did are k apart: two runs
    # in a row that did must be seen (4 micro-batches of a 1.3-s step, fetched at the first and the
    # third: 7 visits, each two runs apart, too few to count k = 2, made 14 steps of the job's 7)
    ended = [[j for j, (a, b) in enumerate(itertools.pairwise(fetches)) if _visits_in(run[b - 1:b])]
             for run, fetches in runs]
    apart = [b - a for marks in ended for a, b in itertools.pairwise(marks)]
    if 1 not in apart or _counted(*_multiples_in(apart, min(sum(map(len, ended)) / len(gaps), 0.999))) > 1:
        return None
    steps = [merged_steps(run[a:b]) for run, fetches in runs for a, b in itertools.pairwise(fetches)]
    return runs, gaps, steps, phase_unseen(tl.intervals, tl.rate_hz, "input")


def _fetched_whole(tl: Timeline, found: FetchRuns) -> Timeline | None:
    """``by_fetch``'s steps where every fetch was seen (``_whole_steps_clock``), else None."""
    runs, gaps, steps, unseen = found
    timed = _whole_steps_clock(steps, [s.counted_ns for s in steps], unseen, tl.rate_hz)
    if isinstance(timed, str):
        return None
    clock, typical, mean = timed
    # k where the returns between the fetches were all seen, and nearly every gap is k of them
    k, most = Counter(gaps).most_common(1)[0]
    seen_all = tl.clock.unseen is not None and tl.clock.unseen <= MAX_UNSEEN
    said = k if seen_all and most >= FETCH_PLACE * len(gaps) else None
    clock = replace(clock, typical_ns=typical, edge_steps=_fetch_edges(tl, runs, clock.period_ns or typical), mean=mean)
    return replace(tl, steps=tuple(steps), clock=clock, micro_batches=said, step_floor=None)


def _fetch_comb(tl: Timeline, found: FetchRuns) -> Timeline | None:
    """``by_fetch``'s optimizer steps where fetches went unseen too often for every run between two
    seen to be one step (``_whole_steps_clock`` wants them all seen): the runs counted on their comb
    (``clock_of``, at the chance that a fetch goes unseen), each of n steps as n equal ones, the
    median of those the typical step. None where no comb holds (nor one on each side of a change,
    which gives a mean). HF Trainer with 4 micro-batches at
    400 Hz, its fetch 5% of the step: 75 runs for 92 steps (13 of two, 2 of three), 97.8 ms apart;
    92 steps of 96.4 ms for the job's 92 of 96.1, where the step was unknown."""
    runs, _, steps, unseen = found
    clock, counts = clock_of([s.counted_ns for s in steps], unseen, tl.rate_hz)
    if clock.method != "comb" or clock.period_ns is None or clock.shift_ns is not None or clock.mean:
        return None
    expanded = expand(steps, counts, unseen)
    typical = statistics.median(s.dur_ns for s in expanded)
    clock = replace(clock, typical_ns=typical, edge_steps=_fetch_edges(tl, runs, clock.period_ns))
    return replace(tl, steps=tuple(expanded), clock=clock, micro_batches=None, step_floor=None)


def _step_fetches(fetches: Sequence[int], k: int) -> list[int]:
    """The ``fetches`` (places among the intervals) that begin a step, where most are ``k`` apart:
    not one whose gaps either side are each under k and add up to k, a micro-batch of the step that
    waited for its input too (2 workers delivering in bursts: 19 steps of 2 micro-batches made 20)."""
    kept: list[int] = []
    for j, at in enumerate(fetches):
        after = fetches[j + 1] if j + 1 < len(fetches) else None
        if kept and after is not None and at - kept[-1] < k and after - at < k and after - kept[-1] == k:
            continue
        kept.append(at)
    return kept


def _fetch_edges(tl: Timeline, runs: Sequence[tuple[Sequence[Step], Sequence[int]]], period_ns: float) -> int:
    """The whole steps before the first fetch of ``runs`` and after the last (``by_fetch``): a step
    at most on either side, where a period fits between the fetch and the window's edge (a wrap
    seen a sampling interval after its boundary, as ``clock.edge_steps``). Not more: a fetch further
    in would have been seen, but the intervals at either edge are open, and the return that ends
    the last step can be too (a fetch by the caller's loop is a return only once the loop frame is
    back: ``batch_timeline.outer_back``)."""
    starts = [run[i].start_ns for run, fetches in runs for i in fetches]
    if not starts:
        return 0
    sides = edge_sides((min(starts), max(starts)), tl.start_seen_ns, tl.end_ns, period_ns, tl.rate_hz)
    return sum(min(1, side) for side in sides)


def _visit_runs(intervals: Sequence[Step], k: int) -> list[Step]:
    """Optimizer steps of about ``k`` intervals each, every one ending at an interval that holds
    optimizer time (a visit) or k intervals before one: the intervals between two visits are
    round(n / k) steps, the last ones k intervals each (the first takes the rest: a boundary missed
    or counted twice costs one step its length, not every later step its alignment, as ``group``'s
    one offset for the window would); a visit under k / 2 intervals after the one before is the
    same optimizer step's (``zero_grad`` after the return). Whole runs of k before the first visit
    and after the last are steps too. Each of ``_covered_runs`` is counted on its own."""
    return [step for run in _covered_runs(intervals) for step in _run_steps(run, k)]


def _run_steps(intervals: Sequence[Step], k: int) -> list[Step]:
    """``_visit_runs`` of one run of covered intervals, each one after the other."""
    visits = _visits_in(intervals)
    if not visits:
        return []
    spans: list[tuple[int, int]] = []   # [first, last + 1) intervals of each step
    anchor = visits[0]
    spans += [(anchor + 1 - (n + 1) * k, anchor + 1 - n * k) for n in reversed(range((anchor + 1) // k))]
    for visit in visits[1:]:
        m = round((visit - anchor) / k)
        if m == 0:
            continue
        cuts = [anchor + 1, *(visit + 1 - (m - j) * k for j in range(1, m)), visit + 1]
        spans += itertools.pairwise(cuts)
        anchor = visit
    spans += [(anchor + 1 + n * k, anchor + 1 + (n + 1) * k) for n in range((len(intervals) - 1 - anchor) // k)]
    return [merged_steps(intervals[a:b]) for a, b in spans]


def _seen_step(timelines: Iterable[Timeline]) -> float | None:
    """Where synchronized ranks' steps vary too much for a typical one (``StepClock.irregular``):
    the median interval of the ranks that saw every boundary, which no step of theirs (a step or a
    micro-batch) is shorter than; None elsewhere."""
    seen = [iv.dur_ns for tl in timelines if tl.clock.irregular and tl.clock.unseen is not None
            and tl.clock.unseen <= MAX_UNSEEN and len(tl.intervals) >= MIN_INTERVALS for iv in tl.intervals]
    return float(statistics.median(seen)) if seen else None


def with_accumulation(tl: Timeline, plan: Plan | None = None, seen_step_ns: float | None = None,
                      micro_batched: bool = False) -> Timeline:
    """The timeline counted in optimizer steps when its loop accumulates gradients (``plan``: as
    ``plan_of`` makes it, when already known; ``seen_step_ns``: ``_seen_step`` of its job's ranks;
    ``micro_batched``: a rank of its job shows its returns as micro-batches, ``_micro_returns``);
    first, where its fetches begin its optimizer steps (``by_fetch``), in those; last, where nothing
    counted them, on the comb of the runs between the fetches seen."""
    found = _fetch_runs(tl) if tl.loop is not None else None
    fetched = _fetched_whole(tl, found) if found is not None else None
    if fetched is not None:
        return fetched
    counted = _with_accumulation(tl, plan, seen_step_ns, micro_batched)
    # where nothing else counts them, the runs between the fetches seen on their comb (``_fetch_comb``):
    # last, as the fetches' own edges are less sure than the rules' above (ranks of 2 micro-batches of
    # 800-ms steps, a fetch missed at times: 12 steps for the job's 11 on the comb)
    if found is not None and not counted.clock.known and counted.clock.cause != SHIFTED:
        return _fetch_comb(tl, found) or counted
    return counted


def _with_accumulation(tl: Timeline, plan: Plan | None, seen_step_ns: float | None,
                       micro_batched: bool) -> Timeline:
    plan = plan or decided(plan_of(tl))
    if plan.marks is not None or (plan.doubt is not None and not plan.no_visit_step):
        # the optimizer's visits mark the steps: with none missed, or fitted like any returns
        stepped = by_optimizer(tl, plan.marks, breaks=True)
        if stepped is not None:
            return replace(stepped, micro_batches=_said_k(tl, plan.k) if plan.k > 1 else None)
    if not tl.clock.known:
        stepped, broken = _visit_steps(tl, None, True)
        # (an unknown one, the optimizer steps changed length, is the answer: ``SHIFTED``)
        if stepped is not None and stepped.clock.known and (
                (seen_step_ns is not None and _below(stepped, seen_step_ns))
                or not _whole_intervals(tl, stepped) or _visits_too_few(tl, stepped)
                or _hides_marks(tl, stepped, plan.marks)):
            stepped = None
        elif stepped is not None and stepped.clock.method == "comb":
            # (a comb that stands is the step's answer: unless it breaks on one side of a change)
            stepped = broken if broken is not None else stepped
        return stepped or _floor(_short_returns(tl, micro_batched))
    if plan.doubt is not None:
        odds = plan.odds if plan.undecided else None
        cause, rate = (UNDECIDED, _seen_more(tl.rate_hz, plan.seen, odds[0])) if odds else (None, None)
        clock = StepClock("unknown", None, None, tl.clock.concentration, plan.doubt, rate, None,
                          unseen=tl.clock.unseen, cause=cause)
        return _floor(replace(tl, clock=clock, micro_batches=None))
    k = plan.k
    if plan.one_short:
        aligned = _aligned_on_visits(tl, k)
        if not isinstance(aligned, str):
            return aligned
        why = aligned if plan.timed_short else None
        return _floor(replace(tl, clock=_one_short_unknown(tl, k, why), micro_batches=None))
    if k == 1 and plan.marks is not None:
        return _floor(replace(tl, clock=_marked_unknown(tl), micro_batches=None))
    if k == 1:
        return judged_uneven(tl)
    clock = tl.clock
    micro = clock.period_ns or 0.0
    # (micro-batches whose length changed within the window: as their clock counted them, each side on
    # its own period, not on the mean of both: ``clock.by_regimes``)
    counts = counted_in(tl) if clock.shift_ns is not None else micro_counts(tl.intervals, micro, clock.unseen)
    worked = _micro_work(tl.intervals)
    micro_steps = expand(worked, counts, clock.unseen, work=one_work(worked, counts))
    steps = group(micro_steps, k)
    if not steps:
        return tl
    # an optimizer step is k micro-batches and the optimizer's own work: total time over the
    # optimizer steps (k times the micro-batch period would leave the optimizer out); the median
    # where a slow micro-batch was kept whole (its step is slow, and the mean would take it in)
    period = sum(s.dur_ns for s in steps) / len(steps)
    slow = len(micro_steps) < sum(counts)
    typical = statistics.median(s.dur_ns for s in steps) if clock.method == "wraps" or slow else period
    mean = clock.shift_ns is not None or (
        clock.method == "wraps" and not steady_median(sorted(s.dur_ns for s in steps), len(steps)))
    if mean:
        # every micro-batch seen, the optimizer steps too uneven for a median (a DataLoader's workers
        # delivering in bursts: 2 micro-batches a step, steps of ~100 and ~290 ms, whose median of 49
        # sat at the gap, 123 ms for the job's 109): their mean, as where no accumulation is
        # (steps/mean.py), said so, where a missed boundary is unlikely to move it
        if mean_at_risk(len(steps), clock.unseen):
            reason = ("every micro-batch was seen, and the optimizer steps they make vary too much for a typical one "
                      f"(irregular steps), and too few of them were seen for their mean to hold within "
                      f"{100 * MAX_STEP_ERROR:.0f}%: sample longer")
            unknown = StepClock("unknown", None, None, None, reason, unseen=clock.unseen)
            return replace(tl, steps=steps, clock=unknown, micro_batches=k, step_floor=len(steps))
        typical = period
    visits = by_optimizer(tl)
    theirs = visits.clock.typical_ns if visits is not None else None
    if (visits is not None and theirs and abs(typical / theirs - 1) > MAX_STEP_ERROR
            and not _visits_end_groups(micro_steps, k)):
        # the optimizer's own visits, one per optimizer step, fit a step of their own that k
        # micro-batches stray from: the returns are not all micro-batches (an outer loop's wraps
        # among them), or were miscounted; the visits are the steps' own mark. Not where the visits
        # end the runs of k micro-batches: 3 workers delivering in bursts, 2 micro-batches a step,
        # made steps of 160, 160 and 80 ms by turns; the visits, every one at a run's end, fitted
        # 78 ms, the divisor of their gaps (-49%), and the runs' median was the job's (-0.5%)
        return replace(visits, micro_batches=None)
    # (the micro-batches' two periods said as the optimizer steps', each scaled as the mean of both is:
    # the summary and its note speak of steps)
    shift = None if clock.shift_ns is None or not micro else (clock.shift_ns[0] * period / micro,
                                                               clock.shift_ns[1] * period / micro)
    clock = replace(clock, period_ns=period, typical_ns=typical, mean=mean,
                    step_upper_ns=clock.step_upper_ns * k if clock.step_upper_ns is not None else None,
                    edge_steps=_edges(tl, steps, period), shift_ns=shift)
    return replace(tl, steps=steps, clock=clock,
                   micro_batches=_said_k(tl, k, not _split_in_place(tl.intervals, counts, k)))


def _said_k(tl: Timeline, k: int, sure: bool = True) -> int | None:
    """The micro-batches a step is said to hold: ``k``, timed over the micro-batch period (``sure``:
    no long micro-batch counted as two at one place of the step, ``_split_in_place``), unless the
    returns count otherwise. Where this rank saw every return (its own e^-λ at most MAX_UNSEEN, on
    its own clock or on the one its ranks share), the gaps between the optimizer's visits counted in
    returns (``_index_gaps``) count the micro-batches themselves: where each is a multiple of one k
    (``_k_in_returns``), that k is said, timed or not; else a timed k is said where the returns fit
    it, or fit none and no gap counted fewer returns than k by more than sampling misses by chance;
    else none is (None). A micro-batch that is always longer than the others (it fetches the step's
    input, or holds the all-reduce's wait) times as two: 8 micro-batches of an 800-ms step whose
    first one also loaded the input (112 ms for ~65), every return seen at 500 Hz, timed 9 to a
    step, counted 8 in each gap; 8 ranks accumulating 12 micro-batches of 500-ms steps, every return
    seen at 400 Hz, timed 13 on 7 of them, counted 12 in each of 19 gaps on every rank."""
    clock = tl.clock
    if clock.method not in ("wraps", "joint") or clock.unseen is None or clock.unseen > MAX_UNSEEN:
        return k if sure else None
    gaps, visits, covered = _index_gaps(tl.intervals)
    counted = _k_of_gaps(gaps, visits, covered)
    if counted > 1 and len(gaps) >= MIN_GAPS and all(g % counted == 0 for g in gaps):
        return counted
    if not sure:
        return None
    if counted == 1:
        return k if not gaps or hidden_by_chance(k - max(gaps), clock.unseen) else None
    return k if counted == k else None


def _micro_work(intervals: Sequence[Step]) -> list[Step]:
    """The intervals with their time on a CPU less their optimizer's time, as ``micro_counts``
    counts them (the optimizer's own time is no micro-batch's), for ``expand`` to tell a slow
    micro-batch from two by it (``clock.worked``): the thread works through an optimizer step on the
    CPU, or launching its kernels. 4 micro-batches of 29 ms, a 2- or 10-ms optimizer, a third of
    the steps slowed up to twice by other work on the cores, 8 runs: 72-83 optimizer steps counted
    for 71-77 (up to +15%), then each within 1.4% (``tests/test_simulated_steps.py``)."""
    return [replace(iv, work_ns=max(iv.work_ns - iv.phases_ns.get("optimizer", 0), 0))
            if iv.work_ns is not None and iv.phases_ns.get("optimizer", 0) else iv for iv in intervals]


def _split_in_place(intervals: Sequence[Step], counts: Sequence[int], k: int) -> bool:
    """Whether the intervals counted as several micro-batches (``counts``, ``micro_counts``'s) sit at
    one place of the optimizer step beyond chance: a boundary goes unseen at random, so a count that
    splits an interval at the same place step after step is a long micro-batch among short ones,
    which the micro-batch period divides, and k is unsure (the optimizer steps, whole, stay right). On the H100, a
    GPU-paced host's micro-batches took 18, 18, 18 and 36 ms (its copy waited for the queue in one):
    59 of the 116 intervals counted as two sat one place before the optimizer's, and k was 5 for 4."""
    places: Counter[int] = Counter()
    at: int | None = None        # micro-batches since the optimizer's last visit
    for iv, n in zip(intervals, counts, strict=True):
        if iv.covered and iv.phases_ns.get("optimizer", 0) > 0:
            at = 0
        if at is None:
            continue
        if n > 1:
            places[at % k] += 1
        at += n
    split = sum(places.values())
    return split >= MIN_GAPS and k * binom_tail(split, max(places.values()), 1 / k) <= MAX_CHANCE


def _seen_more(rate_hz: int, seen: float, k: int) -> int | None:
    """A rate at which an optimizer seen in the share ``seen`` of the steps counted would be seen in
    UNDECIDED_SEEN of its optimizer steps, were they k of those steps (a visit this rare is shorter
    than a sample apart, so its chance grows with the rate): there k is counted (``_multiples_in``),
    and without accumulation the gaps of one step that k never makes rule it out. Rounded up to
    50 Hz, at most MAX_RATE_HZ; None where that is no faster."""
    if seen <= 0:
        return None
    rate = min(MAX_RATE_HZ, math.ceil(rate_hz * UNDECIDED_SEEN / (seen * k) / 50) * 50)
    return rate if rate > rate_hz else None


def _stepping_longer(intervals: Sequence[Step]) -> bool:
    """Whether the intervals the optimizer was seen in are the long ones: their median at least
    STEPPING_LONGER times the others', and nine in ten of them longer than the others' median. A
    micro-batch that steps the optimizer behind the all-reduce's wait is; the steps of a job whose
    input comes in bursts show the optimizer whatever their length (half of them above the others'
    median; one rank of 8 on the grid at 1.39 times their median by chance)."""
    stepping = [iv.dur_ns for iv in intervals if iv.phases_ns.get("optimizer", 0) > 0]
    others = [iv.dur_ns for iv in intervals if iv.phases_ns.get("optimizer", 0) <= 0]
    if not stepping or not others:
        return False
    median = statistics.median(others)
    above = sum(1 for d in stepping if d > median)
    return statistics.median(stepping) >= STEPPING_LONGER * median and above >= STEPPING_ABOVE * len(stepping)


def _optimizer_seen(tl: Timeline) -> tuple[list[Step], int]:
    """The intervals between the returns that sampling covered, and how many showed the optimizer."""
    covered = [iv for iv in tl.intervals if iv.covered]
    return covered, sum(1 for iv in covered if iv.phases_ns.get("optimizer", 0) > 0)


def _micro_returns(tl: Timeline) -> bool:
    """Whether a rank whose returns, every one seen, vary too much (IRREGULAR) shows them as
    micro-batches: the optimizer seen in some of the intervals between them, at most STEPPING_SEEN
    of them, and those the long ones (``_stepping_longer``). (Lightning's 2 micro-batches at 350
    Hz showed the optimizer in 21 of 40 and 32 of 60: its ``zero_grad`` spills into the next
    interval now and then.)"""
    return tl.clock.cause == IRREGULAR and stepping_some(tl)


def stepping_some(tl: Timeline) -> bool:
    """Whether the optimizer was seen in some of ``tl``'s intervals, at most STEPPING_SEEN of them,
    and those the long ones (``_stepping_longer``): as a micro-batch that steps the optimizer shows."""
    covered, seen = _optimizer_seen(tl)
    return 0 < seen <= STEPPING_SEEN * len(covered) and _stepping_longer(covered)


def _short_returns(tl: Timeline, micro_batched: bool = False) -> Timeline:
    """A clock unknown because the returns come too close together to tell apart (SHORT), where
    the optimizer was seen in at most half of the intervals between them, or because a
    synchronized rank saw every one and they vary too much (IRREGULAR), where a rank of the job
    shows them as micro-batches (``micro_batched``: ``_micro_returns``), says what they may be:
    micro-batches of longer optimizer steps (whose own visits fit no step here), not only steps;
    and its micro-batches a step are unknown, not 1 (an HF Trainer accumulating 4, its returns at
    100 Hz too close to tell apart, said "1 micro-batch a step" beside that reason). Where the
    returns are too close, the visits cannot say which: an optimizer under a sample a visit is seen
    about as often either way (an input-bound CUDA job, no accumulation: 127 of 587 intervals where
    visits spread over every step give 112.9 ± 9.2; the HF Trainer accumulating 4: 18 of 312 for
    22.7 ± 4.5), so the reason says it is seen too seldom to tell, not that it was seen "only" so
    often. (8 ranks accumulating 2 micro-batches of 250 ms behind a straggler: the last micro-batch,
    which waits for the all-reduce and steps the optimizer, ran 330 ms on the waiting ranks, the
    other 170, and 10 s held 11 visits of the optimizer, too few for a step of their own.)"""
    clock = tl.clock
    covered, seen = _optimizer_seen(tl)
    if clock.cause == IRREGULAR and micro_batched and 0 < seen <= STEPPING_SEEN * len(covered):
        # a longer window helps where the visits are few (at 20 s, the 8 ranks above were known
        # within 0.2%); Lightning's 32 visits in 12 s fitted none for other reasons
        longer = "; a longer one would hold more of them" if seen < 2 * MIN_INTERVALS else ""
        reason = ("the loop's returns, every one seen on a synchronized rank, vary too much for a typical step, "
                  f"and the optimizer ran in only {seen} of this rank's {len(covered)} intervals between them: "
                  "they may be micro-batches of longer optimizer steps (gradient accumulation; the micro-batch "
                  "that steps the optimizer takes longer), and the optimizer's visits fit no step of their own "
                  f"in this window{longer}")
        return replace(tl, clock=replace(clock, reason=reason), micro_batches=None)
    if clock.cause != SHORT or not covered or 2 * seen > len(covered):
        return tl
    shortest_ms = MIN_SAMPLES_PER_STEP * 1e3 / tl.rate_hz
    reason = (f"the loop's returns come less than {MIN_SAMPLES_PER_STEP:.0f} samples apart ({shortest_ms:.0f} ms at "
              f"{tl.rate_hz} Hz), too close to tell apart; the optimizer, seen in {seen} of the {len(covered)} "
              "intervals between them, is seen too seldom to tell steps from micro-batches of longer optimizer "
              "steps, and its visits fit no step of their own")
    return replace(tl, clock=replace(clock, reason=reason), micro_batches=None)


def _floor(tl: Timeline) -> Timeline:
    """An unknown clock's step count where its returns may be micro-batches: the optimizer's visits
    (each in an optimizer step of its own) bound the steps from below; the returns do not."""
    visits = sum(1 for iv in tl.intervals if iv.covered and iv.phases_ns.get("optimizer", 0) > 0)
    return replace(tl, step_floor=visits) if visits and visits < len(tl.intervals) else tl


def micro_counts(intervals: Sequence[Step], period_ns: float, unseen: float | None = None) -> tuple[int, ...]:
    """The micro-batches in each interval between observed returns: the optimizer's own time is
    no micro-batch's (an interval of one micro-batch and a long optimizer step is one, not two),
    nor is the time blocked in the all-reduce, where it was measured (the last micro-batch's), nor,
    where the clock saw every return (``unseen``, its e^-λ, at most MAX_UNSEEN), the input waited
    for beyond the usual interval's (``usual_input``): one rank accumulating 4
    micro-batches of a 500-ms step whose 4 workers deliver in bursts had one micro-batch a step wait
    ~110 ms for its input, twice the others' length; counted as two, it made every gap between the
    optimizer's visits a multiple of 5, and a 30-s window gave groups of 5 returns as the step (48
    steps of 611 ms for the job's 60 of 498). Where returns go unseen, an interval of two
    micro-batches holds twice their input, and the excess is a micro-batch's: a recorded GPU job
    accumulating 4, its input 88% of a micro-batch (e^-λ 5.5%), counted 98 steps of 92.3 ms so
    for the job's 101 of 89.8 (100 of 90.3 with it counted)."""
    usual = usual_input(intervals, unseen)
    return tuple(micro_count(iv, period_ns, usual) for iv in intervals)


def usual_input(intervals: Sequence[Step], unseen: float | None) -> int | None:
    """The median input time of the covered ``intervals`` (0 where most hold none), where the
    clock's e^-λ (``unseen``) says it saw every return; None otherwise (``micro_counts``)."""
    inputs = [iv.phases_ns.get("input", 0) for iv in intervals if iv.covered]
    return int(statistics.median(inputs)) if inputs and unseen is not None and unseen <= MAX_UNSEEN else None


def micro_count(iv: Step, period_ns: float, usual_input_ns: int | None = None) -> int:
    """``micro_counts`` of one interval: the input beyond ``usual_input_ns`` left out, where given."""
    blocked = sum(iv.blocked_sync_ns.values()) if iv.blocked_sync_ns else 0
    waited = 0 if usual_input_ns is None else max(0, iv.phases_ns.get("input", 0) - usual_input_ns)
    own_ns = iv.end_ns - iv.start_ns - iv.aside_ns - iv.phases_ns.get("optimizer", 0) - blocked - waited
    return max(round(own_ns / period_ns), 1)
