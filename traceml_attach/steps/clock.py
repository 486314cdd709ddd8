"""Step clocks: how the intervals between the returns seen become steps, and whether their
length is known (``StepClock``). Shared by the batch engine (batch_timeline.py), the live one
(live_tracker.py, live_intervals.py) and the counting of optimizer steps (accumulation.py).

A period is fitted to the intervals (``period.fit_period``) and each interval counted in
periods; where sampling cannot have missed a boundary by chance, the intervals are the steps
(``clock_of``). Where no period can be established, the clock is unknown and says why, and
what would help: a higher rate only where it would (``unknown_clock``).
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from traceml_attach.policy import (
    CHANCE_UNSEEN,
    DRIFT_CHANCE,
    DRIFT_HALF,
    DRIFT_RATIO,
    DRIFT_SLACK,
    DRIFT_UNSEEN,
    DRIFT_Z,
    DROPOUT_UNSEEN,
    INLIER,
    MAX_AMBIGUOUS,
    MAX_STEP_ERROR,
    MAX_UNSEEN,
    MEAN_RISK,
    MIN_INTERVALS,
    MIN_SAMPLES_PER_STEP,
    MIN_STEADY,
    MOSTLY_UNSEEN,
    ON_CPU,
    SEVERAL_WORK,
    SHIFT_RATIO,
    SPLIT_MARKED,
    STEADY_OUTSIDE,
    STEADY_WORK,
    TARGET_SAMPLES_PER_STEP,
)
from traceml_attach.steps.period import (
    PeriodFit,
    fit_period,
    holds_over,
    pinned,
    refine_map,
    shift_cut,
    split_pairs,
    steady_median,
    strays,
    suggested_rate_hz,
    twos_short,
)


@dataclass(frozen=True, slots=True)   # a live window holds thousands
class Step:
    start_ns: int
    end_ns: int
    phases_ns: dict[str, int]
    # Time the thread was blocked (not on a CPU or waiting for one) inside synchronizing
    # phases (backward, collectives), by phase; None without CPU counters for the step.
    blocked_sync_ns: dict[str, int] | None = None
    # False: one of several steps in an interval whose boundaries sampling cannot have missed by
    # chance (a py-spy drop-out); it counts as a step, its time is not attributed to phases.
    covered: bool = True
    # (observed intervals) it holds a span far longer than its stack's usual span, through which
    # the thread worked: the sampler saw nothing change for that long where the thread usually
    # moves on (see ``expand``). ``swallowing``: it may have dropped out (it waited for a core, or
    # its counters are unknown); ``held``: it sampled on, and the thread held that stack
    swallowing: bool = False
    held: bool = False
    # (observed intervals) its time in an evaluation or a checkpoint (ASIDE_LABELS): an iteration
    # that evaluates is one step, counted on the time it spent training (``counted_ns``)
    aside_ns: int = 0
    # (observed intervals) its time outside the loop's dominant place (its line, and its phase
    # there: ``batch_timeline._outside``): how it splits tells one slow step from several
    # (``slow_throughout``)
    outside_ns: int = 0
    # (observed intervals) the thread's time on a CPU through it, from its counters (None
    # without them): how many steps' work it did tells one slow step from several (``worked``)
    work_ns: int | None = None
    # (observed intervals) its sampler waited for a core through it for a sample's interval or
    # more (its counters): a short visit elsewhere can have gone unsampled even where it sampled
    # on through one long span (``held``)
    stalled: bool = False

    @property
    def counted_ns(self) -> int:
        """The length its step count is judged on: the interval less its eval and checkpoints."""
        return self.dur_ns - self.aside_ns

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


# the causes of an unknown clock that code acts on (StepClock.cause); IRREGULAR is also the words
# its reason says
SHORT = "short"
IRREGULAR = "irregular steps"
UNDECIDED = "accumulation undecided"
UNEVEN = "uneven steps"
SPLIT = "split intervals"
# a rank that saw every boundary by its e^-λ missed many that its peers saw (``peersplit._vouched``):
# a faster rate shows them (diagnose/rate.py)
MISSED = "boundaries missed"
# the steps changed length within the window beyond chance, and a side of the change too short for a
# period of its own (``by_regimes``): synchronized peers, which take the same steps, have no one
# period that holds either (``accumulation.accumulated``)
SHIFTED = "steps changed length"


# (visits of one sample, of two, all seen): ``hidden_share``'s counts
Sparse = tuple[int, int, int]
# (intervals a draw decided, steps it added): ``guesses``
Guesses = tuple[int, int]


@dataclass(frozen=True)
class StepClock:
    """How the steps were counted, and whether their length is known.

    method: "comb" (a period fitted to this thread's wraps), "joint" (a period shared by
    synchronized ranks), "wraps" (every boundary was seen), or "unknown".
    """

    method: str
    period_ns: float | None          # the fitted step period; None when unknown
    visible: float | None = None     # share of the step boundaries seen as wraps
    concentration: float | None = None   # how tightly the wraps sit on the period's comb (0..1)
    reason: str | None = None        # why unknown
    suggested_rate_hz: int | None = None
    step_upper_ns: float | None = None   # no step is longer than about this (unknown clocks)
    typical_ns: float | None = None  # the median step once the intervals are counted in periods
    unseen: float | None = None      # chance that sampling misses a boundary (e^-λ), when measurable
    # whole periods before the first and after the last wrap seen: steps too, without phase times
    edge_steps: int = 0
    # why unknown, where code acts on it: SHORT (returns too close together to tell apart:
    # ``unknown_clock``), IRREGULAR (a synchronized rank saw its steps vary: ``sync.share_period``)
    # UNDECIDED (the optimizer seen too rarely to tell micro-batches from steps: a faster rate
    # shows it more often, ``accumulation.with_accumulation``) or UNEVEN (slow steps beyond chance
    # whose counts a guess decided move the median: ``uneven_clock``)
    cause: str | None = None
    # typical_ns is the steps' mean, not their median: every boundary seen, the steps vary too
    # much for a median to hold (steps/mean.py)
    mean: bool = False
    # unknown because the returns' comb drifted beyond their shortest intervals: the period it
    # drifted to (``PeriodFit.drifted_ns``), no step's, which the optimizer's visits are weighed against
    drifted_ns: float | None = None
    # counted on the comb of the boundaries its synchronized peers saw too (``union.by_union``): its
    # own returns' e^-λ, which a faster rate would lower (``unseen`` is then the union's)
    own_unseen: float | None = None
    # the steps changed length within the window: each side's period (before, after), each side
    # counted on its own (``by_regimes``); period_ns is then their mean step
    shift_ns: tuple[float, float] | None = None
    # unknown, though the intervals changed length within the window (``by_regimes``: a side with no
    # clock of its own, both lengths MIN_SAMPLES_PER_STEP long or more): their median on either side
    # (before, after), which the optimizer's visits are counted on (``accumulation._found_regimes``)
    changed_ns: tuple[float, float] | None = None
    # typical_ns is the steps' mean (``mean``) because they are few samples long, and the samples'
    # lag at each end can move their median where it cannot move their mean (``accumulation._visit_steps``)
    blurred: bool = False

    @property
    def known(self) -> bool:
        return self.period_ns is not None

    @property
    def irregular(self) -> bool:
        """Unknown because a synchronized rank saw every boundary and its steps vary too much for a
        typical one (``sync.share_period``)."""
        return self.period_ns is None and self.cause == IRREGULAR

    def shared(self, visible: float | None, unseen: float | None, edge_steps: int) -> StepClock:
        """This clock as another synchronized rank's ("joint"): its own visibility, chance of an
        unseen boundary and edge steps (``dataclasses.replace``, without its cost per rank and tick)."""
        return StepClock("joint", self.period_ns, visible, None, self.reason, self.suggested_rate_hz,
                         self.step_upper_ns, self.typical_ns, unseen, edge_steps, mean=self.mean,
                         shift_ns=self.shift_ns, blurred=self.blurred)


def median_offset(points: Iterable[int], ref: Sequence[int]) -> float:
    """The median of each of ``points`` less its nearest of ``ref`` (sorted): how far one rank's
    boundaries lie from another's that step with it (0 where either has none)."""
    n = len(ref)
    if not n:
        return 0.0
    offsets = []
    for point in points:   # (a live tick asks this of 3 peers of every rank: no list or key per point)
        k = bisect.bisect_left(ref, point)
        if k == 0:
            offsets.append(point - ref[0])
        elif k == n:
            offsets.append(point - ref[-1])
        else:
            before, after = point - ref[k - 1], point - ref[k]   # (>= 0, <= 0: the nearer, the earlier on a tie)
            offsets.append(before if before <= -after else after)
    return statistics.median(offsets) if offsets else 0.0


def edge_steps(bounds: Sequence[int], first_ns: int | None, last_ns: int | None, period_ns: float | None,
               rate_hz: int, unseen: float | None = None, shift_ns: tuple[float, float] | None = None) -> int:
    """Whole steps between the window's edges and the first and last wrap seen. Each edge ends
    or starts at a boundary, so it holds floor(length / period) of them; a wrap is seen on
    average one sampling interval after its boundary, which moves that boundary back. An edge
    that would hide more boundaries than chance can (``hidden_by_chance``) holds none: it is the
    rest of one slow step (a DataLoader's workers starting, a stall the window began in). Where
    the steps changed length within the window (``shift_ns``: ``StepClock.shift_ns``), each edge
    is counted on its own side's period."""
    return sum(edge_sides(bounds, first_ns, last_ns, period_ns, rate_hz, unseen, shift_ns))


def edge_sides(bounds: Sequence[int], first_ns: int | None, last_ns: int | None, period_ns: float | None,
               rate_hz: int, unseen: float | None = None, shift_ns: tuple[float, float] | None = None
               ) -> tuple[int, int]:
    """``edge_steps`` before the first wrap seen and after the last, each."""
    if not bounds or first_ns is None or last_ns is None or not period_ns:
        return 0, 0
    lag = 1e9 / max(rate_hz, 1)
    head, tail = shift_ns if shift_ns is not None else (period_ns, period_ns)
    before = int(max(bounds[0] - lag - first_ns, 0) // head)
    after = int(max(last_ns - bounds[-1] + lag, 0) // tail)
    return before if hidden_by_chance(before, unseen) else 0, after if hidden_by_chance(after, unseen) else 0


def chance_depth(unseen: float | None) -> int | None:
    """The most boundaries in a row that sampling can miss by chance (``hidden_by_chance``);
    None: any number."""
    if unseen is None or unseen > CHANCE_UNSEEN:
        return None
    if unseen <= 0.0:
        return 0
    k = int(math.log(DROPOUT_UNSEEN) / math.log(unseen))
    while unseen ** (k + 1) >= DROPOUT_UNSEEN:
        k += 1
    while k > 0 and unseen ** k < DROPOUT_UNSEEN:
        k -= 1
    return k


def hidden_by_chance(k: int, unseen: float | None) -> bool:
    """Whether sampling can have missed ``k`` boundaries in a row by chance. Where every boundary
    shows (``unseen``, e^-λ, at most CHANCE_UNSEEN), each goes unseen with that probability, and all
    k must with at least DROPOUT_UNSEEN; beyond that, a stretch that long without a wrap is one
    slow step, or the sampler dropped out (a span that swallowed the stacks in between). Where
    boundaries go unseen more often, λ is an average over visits of uneven length (the short
    ones are missed far more often than e^-λ), and any number may be missed (None: unmeasured)."""
    depth = chance_depth(unseen)
    return depth is None or k <= depth


def missed_share(counts: Mapping[int, int], total: int, unseen: float | None) -> float | None:
    """The chance that a boundary goes unseen, as the intervals are expanded by (``expand``):
    ``unseen`` (e^-λ), or the share of the steps that end an interval of two (one boundary missed)
    where that is more. λ averages visits of uneven length, and the short ones are missed far more
    often than e^-λ: 8 synchronized ranks whose DataLoader delivers in bursts wait out two steps in
    three in backward, and the ~1 ms visits outside it between them go unseen half the time (74
    intervals of two in 523 steps, where e^-λ = 0.009 expects 5). ``counts`` holds how many
    intervals that swallowed no drop-out (``Step.swallowing``: not missed by chance) count each
    number of steps, ``total`` the steps of all of them. None stays None (unmeasured: any count
    stands)."""
    if unseen is None:
        return None
    return max(unseen, counts.get(2, 0) / total) if total > 0 else unseen


def slow_share(counts: Mapping[int, int], unseen: float | None, sparse: Sparse | None = None) -> float | None:
    """The share of the intervals counted as several steps that did hide missed boundaries, where
    more were counted so than sampling misses boundaries (the rest are one slow step each:
    ``expand``); None where chance makes them all.

    Each boundary goes unseen with a chance of at most e^-λ (``unseen``) or what the visits seen
    outside the dominant place say (``hidden_share`` of ``sparse``; None: no such visits), the more
    of the two; then
    that share of the intervals hold more than one step. More of them than a Poisson count of
    that mean reaches with DROPOUT_UNSEEN are steps slowed to about two or more, and no sampling
    tells which: the duration of one step slowed to two is two steps', and so is its split between
    the loop's dominant place and the rest where the slow part was the dominant place. A job that
    reads its batches in Python on two cores that py-spy shares slowed one step in four to 1.3-2x,
    and 32 intervals counted as several in 137, where e^-λ = 0.035 expects 5, made 171 steps of
    the job's 147 (+16%). ``counts`` are as ``missed_share`` has them.

    Judged only where e^-λ is at most CHANCE_UNSEEN, as ``hidden_by_chance`` bounds runs of misses
    there: more often, λ averages visits too uneven to say how many go unseen (a Lightning job on
    two ranks at e^-λ = 0.14 had its intervals of two taken for slow steps), and a live window does
    not look for sampler drop-outs."""
    if unseen is None or unseen > CHANCE_UNSEEN:
        return None
    intervals = sum(counts.values())
    several = intervals - counts.get(1, 0)
    expect = intervals * max(unseen, hidden_share(*sparse) if sparse is not None else 0.0)
    if not several or poisson_tail(several, expect) >= DROPOUT_UNSEEN:
        return None
    return expect / several


_GOLDEN, _MASK = 0x9E3779B97F4A7C15, (1 << 64) - 1   # holds_missed: Fibonacci hashing of a start


def holds_missed(step: Step, share: float) -> bool:
    """Whether an interval counted as several steps is one of the ``share`` of them that hide
    missed boundaries (``slow_share``), where none can be told from a slow step: a fixed draw from
    its start, the same wherever it is judged (the batch, a live window), so that ``share`` of them
    count their steps and the job's step count holds."""
    return ((step.start_ns * _GOLDEN) & _MASK) < share * (1 << 64)


def hidden_share(ones: int, twos: int, seen: int) -> float:
    """The share of the visits outside the dominant place that sampling missed, from the ``seen``
    ones (one a boundary: each interval's), ``ones`` of them seen in one sample and ``twos`` in
    two: Chao's estimate of the unseen, f₁(f₁ - 1) / 2(f₂ + 1), which holds for visits of uneven
    length (a Poisson count per visit at its own rate) where e^-λ of their mean does not."""
    hidden = ones * (ones - 1) / (2 * (twos + 1))
    return hidden / (seen + hidden) if seen + hidden > 0 else 0.0


def sparse_visits(intervals: Iterable[Step], rate_hz: float) -> Sparse:
    """``hidden_share``'s counts of the intervals that swallowed no drop-out: those whose time
    outside the dominant place was one sample, two samples, and all of them."""
    tally = Counter(outside_samples(step, rate_hz) for step in intervals if not step.swallowing)
    return tally[1], tally[2], sum(tally.values())


def outside_samples(step: Step, rate_hz: float) -> int:
    """How many samples the interval's time outside the dominant place held (at least one: the
    visit that showed its boundary)."""
    return max(1, round(step.outside_ns * rate_hz / 1e9))


def chance_cut(counts: Mapping[int, int], total: int, missed: float | None, unseen: float | None = None) -> int | None:
    """The fewest boundaries in a row (two or more) that the intervals hide more often than chance
    can; None where they hide none that often, or where boundaries go unseen too often for chance
    to bound at all (``chance_depth`` of ``unseen``, e^-λ, None).

    ``counts`` and ``total`` are as ``missed_share`` has them, ``missed`` its result. Missed
    boundaries come in runs like coin flips: of the N steps' boundaries, about N·missed^k start
    runs of k or more. More intervals of k or more than a Poisson count of that mean reaches with
    DROPOUT_UNSEEN are not runs of missed boundaries but slow steps (or drop-outs: ``expand``
    tells them apart). Deepest first, each depth counting the intervals not yet found beyond
    chance: a loader's garbage collections of 2.7 steps every few steps (18 intervals of three
    steps beside 10 of two, in 206 steps) were counted as 3 steps each, 147 counted for the job's
    121. A share of intervals of two just over CHANCE_UNSEEN (22 in 438 steps) leaves the cut
    where it was: the 32 intervals of three beside them are as far beyond chance."""
    if missed is None or not counts or chance_depth(missed if unseen is None else unseen) is None:
        return None
    deepest = max(counts) - 1
    cut = deepest + 1
    for k in range(deepest, 1, -1):
        seen = sum(m for n, m in counts.items() if k <= n - 1 < cut)
        if seen and poisson_tail(seen, total * missed ** k) < DROPOUT_UNSEEN:
            cut = k
    return cut if cut <= deepest else None


def mean_at_risk(n: int, unseen: float | None) -> bool:
    """Whether the chance that sampling hid more than MAX_STEP_ERROR of ``n`` steps' boundaries, each
    at ``unseen`` (e^-λ), is over MEAN_RISK: the mean of the intervals seen would then be beyond
    MAX_STEP_ERROR (a median hardly moves; steps/mean.py)."""
    return poisson_tail(math.floor(MAX_STEP_ERROR * n) + 1, n * (unseen or 0.0)) > MEAN_RISK


def mean_refused(n: int, hidden: int, unseen: float) -> str | None:
    """Why a mean over ``n`` steps seen whole is not given (None: it is): too few of them, more than
    MAX_STEP_ERROR of them that its long intervals could hide (``hidden``: ``could_hide`` or what
    tells better), or sampling likely to have hidden that many by chance (``mean_at_risk``). The
    terms of every mean given: steps/mean.py's, and the optimizer steps' (``accumulation``)."""
    if n < MIN_INTERVALS:
        return f"only {n} steps were seen whole"
    if hidden > MAX_STEP_ERROR * n:
        return (f"intervals as long as two steps or more, or that worked as long on a CPU, could hide more than "
                f"{100 * MAX_STEP_ERROR:.0f}% of the steps")
    if mean_at_risk(n, unseen):
        m = math.floor(MAX_STEP_ERROR * n) + 1
        return (f"over {n} steps, {m} {'boundary' if m == 1 else 'boundaries'} that sampling missed by chance "
                f"(e^-λ {unseen:.2g} each) would move it beyond {100 * MAX_STEP_ERROR:.0f}%: sample longer")
    return None


def _medians_long(durations: Sequence[float]) -> list[int]:
    """How many median ones each of ``durations`` is, where that is two or more; else 1."""
    median = statistics.median(durations)
    return [int(d // median) if d >= 2 * median else 1 for d in durations]


def could_hide(durations: Sequence[float]) -> int:
    """The boundaries that intervals of ``durations`` could hide: one n median ones long or more,
    n - 1 (where e^-λ is wrong, a mean takes them in; steps/mean.py)."""
    return sum(n - 1 for n in _medians_long(durations))


def could_hide_worked(intervals: Sequence[Step], one_step: Callable[[Step], bool] | None = None) -> int:
    """``could_hide`` of the ``intervals``, but for those whose thread's time on a CPU says they are
    one slow step (``worked``: nearer one step's work than n steps'). Steps of two lengths by turns
    (a DataLoader's workers delivering in bursts, the loop waiting off the CPU for the batch) put the
    median on the short kind as often as not, and then every long step is twice it, yet works one
    step's time. ``one_step`` says of others that they are one step (the boundaries of ranks that
    step together: steps/mean.py).

    And that time the other way: an interval that worked about m steps' time (``_work_count``, m of
    two or more) could hide m - 1 boundaries, however long it is: two ~100-ms steps seen as one of 195
    ms (under two medians), or a ready batch's step seen with the long wait for the next burst (2.3 s
    that worked 202 ms, one slow step by its work against 23 medians' length). One rank, 6 workers
    delivering in bursts, at 100 Hz over 30 s: 6 of the 59 boundaries hidden so, none by e^-λ, and
    the mean of the 53 intervals was given +11.3%."""
    counts = _medians_long([iv.dur_ns for iv in intervals])
    step_ns = steady_work(sorted(w for iv, n in zip(intervals, counts, strict=True)
                                 if (w := one_work_of(iv, n)) is not None))
    work = one_work(intervals, counts)
    hidden = 0
    for iv, n in zip(intervals, counts, strict=True):
        if one_step is not None and one_step(iv):
            continue
        m = _work_count(iv, step_ns)
        if n > 1 and worked(iv, n, work) != 1:
            hidden += n - 1
        elif m is not None and m >= 2:
            hidden += m - 1
    return hidden


def _work_count(step: Step, step_ns: float | None) -> int | None:
    """How many steps' time on a CPU an interval worked, against one step's ``step_ns`` (None where
    either is unknown, or the interval swallowed a sampler drop-out)."""
    if not step_ns or step.work_ns is None or step.swallowing:
        return None
    return round(step.work_ns / step_ns)


def poisson_tail(m: int, mean: float) -> float:
    """P(X >= m) for X Poisson with ``mean`` (its terms in logs: a mean of hundreds of runs, a
    long window's, underflows e^-mean)."""
    if mean <= 0.0:
        return 0.0 if m > 0 else 1.0
    log_mean = math.log(mean)
    below = sum(math.exp(i * log_mean - mean - math.lgamma(i + 1)) for i in range(m))
    return max(0.0, 1.0 - below)


def shared_unseen(unseen: float | None) -> float | None:
    """The ``unseen`` a synchronized rank's intervals are expanded with when they are counted on
    another rank's steps (its period or its boundaries, ``sync.share_period``): those counts are
    the job's steps, and a long interval holds them (a slow step holds every rank), so no count
    is taken for one slow step of its own (``hidden_by_chance``); but where no boundary can go
    unseen by chance (e^-λ < DROPOUT_UNSEEN), a long interval without a swallowing span still
    is one step."""
    return unseen if unseen is not None and unseen < DROPOUT_UNSEEN else None


def expand(intervals: Sequence[Step], counts: Sequence[int], unseen: float | None = None,
           cut: int | None = None, missed: float | None = None,
           outside: float | None = None, holding: float | None = None,
           work: Work | None = None) -> tuple[Step, ...]:
    """Each interval as its ``count`` steps: equal parts of its time and of each phase.

    Where sampling cannot have missed the interval's count - 1 boundaries by chance
    (``hidden_by_chance``: at ``unseen``, or ``missed`` for an interval whose one stack the thread
    ``held`` while the sampler sampled on, ``missed_share``), or the intervals miss ``cut`` or
    more too often for chance (``chance_cut``), or its time splits between the loop's dominant
    place and the rest as one step's does (``slow_throughout`` at ``outside``), or it is not one
    of the ``holding`` share of them that hide boundaries where more are counted as several steps
    than chance makes (``slow_share``, ``holds_missed``), an interval as long as several steps is
    either a
    sampler drop-out, which shows as a span that swallowed the stacks in between (its steps
    count, their time is not covered), or one slow step (a checkpoint, an eval, a DataLoader
    refilling, a garbage collection): with every boundary visible, no boundary is invented in it.
    Before all of these, where the thread's time on a CPU through it says how many steps it holds
    (``worked``, at ``work`` a step), that decides."""
    out: list[Step] = []
    for step, n in zip(intervals, counts, strict=True):
        said = worked(step, n, work)
        certain = (said == 1 if said is not None else
                   one_slow(step, n, unseen, cut, missed, outside)
                   or (holding is not None and n > 1 and not holds_missed(step, holding)))
        if n == 1 or (certain and not step.swallowing):
            out.append(step)
            continue
        blocked = {k: v // n for k, v in step.blocked_sync_ns.items()} if step.blocked_sync_ns is not None else None
        phases = {k: v // n for k, v in step.phases_ns.items()}
        for k in range(n):
            out.append(Step(step.start_ns + step.dur_ns * k // n, step.start_ns + step.dur_ns * (k + 1) // n,
                            phases, blocked, covered=not certain))
    return tuple(out)


def one_slow(step: Step, n: int, unseen: float | None, cut: int | None, missed: float | None,
             outside: float | None) -> bool:
    """Whether ``expand`` takes an interval counted as ``n`` steps for one slow step (or a drop-out)
    by what sampling can and cannot miss, before any ``holding`` draw."""
    chance = missed if step.held and missed is not None else unseen
    return (not hidden_by_chance(n - 1, chance) or (cut is not None and n - 1 >= cut)
            or slow_throughout(step, n, outside))


def guessed(step: Step, n: int, unseen: float | None, cut: int | None, missed: float | None,
            outside: float | None, holding: float | None) -> bool:
    """Whether ``expand``'s ``holding`` draw, or the thread's time on a CPU before it, decides how
    many steps an interval holds (not where sampling decided, or no draw is made): each such
    interval moves the median by a rank or so (``median_holds``)."""
    return (holding is not None and n > 1 and not step.swallowing
            and not one_slow(step, n, unseen, cut, missed, outside))


def worked(step: Step, n: int, work: Work | None) -> int | None:
    """How many steps an interval counted as ``n`` holds by the thread's time on a CPU through it
    (``Step.work_ns``) against a step's (``work``: ``one_work``): 1 (one slow step: the thread
    waited, for a core or for another rank, through the rest) where that is nearer one step's than
    ``n`` steps', else ``n`` (boundaries the sampler missed) where the job's slow steps are not
    slowed on the CPU (``Work.several``), and unless the sampler sampled on, never waiting for a
    core, through one stack the thread held (``Step.held``, not ``Step.stalled``: a garbage
    collection works on the CPU); None where it cannot tell: one count, no counters, a span the
    sampler dropped out through. (Those two ranks' sampler waited 6-11 ms through each interval
    that hid a boundary in one long span: a visit elsewhere of 3-10 ms went unsampled.)

    Sampling misses boundaries far more often than its rate says where the sampler waits for a
    core: 2 gloo ranks of 33-ms steps with the attacher on 2 cores (its py-spy queued 16% of the
    time) hid about 17 boundaries in 212 steps where e^-λ expects 4, and the draw (``slow_share``) took
    10 of those intervals for slow steps: 201 steps counted, +4.3% on the step time. Through the
    thread's counters the intervals that hid a boundary worked 1.8-2.2 steps' time, the one slow
    step 1.1."""
    if work is None or n < 2 or step.work_ns is None or step.swallowing:
        return None
    if step.work_ns < work.step_ns * (1 + n) / 2:
        return 1
    return n if work.several and (step.stalled or not step.held) else None


def lengths_say_slow(intervals: Sequence[Step], durations: Sequence[float], counts: Sequence[int]) -> bool:
    """``period.twos_short`` on the intervals (``durations``, counted as ``counts``) whose steps the
    thread's time on a CPU leaves undecided (``worked``): where it says how many steps an interval
    holds, that decides. A sampler starved for a core hides boundaries by the dozen, and steps slowed
    on other work stretch some intervals as long as two: their lengths alone mix the two kinds
    (stop 87: a 32-ms job, a third of its steps slowed up to twice, its sampler waiting 8 ms 25
    times a second, had its 297 steps counted right by their work and would have lost them)."""
    work = one_work(intervals, counts)
    kept = [(d, n) for step, d, n in zip(intervals, durations, counts, strict=True) if worked(step, n, work) is None]
    return twos_short([d for d, _ in kept], [n for _, n in kept])


@dataclass(frozen=True, slots=True)
class Work:
    """A step's time on a CPU (``one_work``), and whether an interval that worked about ``n`` of
    them holds ``n`` steps (``several``), not one step that worked longer."""
    step_ns: float
    several: bool


def one_work(intervals: Sequence[Step], counts: Sequence[int]) -> Work | None:
    """A step's time on a CPU (``worked``): the median over the intervals of one step, where it
    holds steady (``steady_work``) and some interval counts several; else None.

    An interval that worked as long as ``n`` steps is ``n`` steps only where the job's slow steps
    are not slowed on the CPU: a loader in Python on two busy cores ran one step in four 1.3-2x as
    long, on the CPU throughout, and its intervals counted as two worked 1.5-2 steps' time (their
    median 1.77); its garbage collections, 2.6-2.9 steps' time on the CPU in one stack, were
    counted as three. So ``several`` holds only where those at or beyond halfway to their count
    worked their count's time (the median of work less count within SEVERAL_WORK of a step), and
    where a step of one interval is on a CPU for at most ON_CPU of its time (the median): where
    the thread works through its whole step, its work is its time and says nothing that the
    time does not. A CUDA job's host thread spun 280 ms in ``loss.item()`` every 50th step, one
    step that worked 5.2 steps' time (its one-step intervals were on a CPU 98% of their time)."""
    if all(n == 1 for n in counts):
        return None
    ones = [step for step, n in zip(intervals, counts, strict=True) if one_work_of(step, n) is not None]
    return work_of(sorted(float(step.work_ns or 0) for step in ones), sorted(one_on_cpu(step) for step in ones),
                   [(step, n) for step, n in zip(intervals, counts, strict=True) if n > 1])


def work_of(works: Sequence[float], on_cpu: Sequence[float], several: Iterable[tuple[Step, int]]) -> Work | None:
    """``one_work`` of one step's ``works`` and the shares of its time ``on_cpu`` (``one_work_of``,
    ``one_on_cpu``; each in order) and the intervals counted as ``several`` steps."""
    step_ns = steady_work(works)
    if step_ns is None:
        return None
    m = len(on_cpu)
    if (on_cpu[(m - 1) // 2] + on_cpu[m // 2]) / 2 > ON_CPU:
        return Work(step_ns, False)
    short = [step.work_ns / step_ns - n for step, n in several
             if step.work_ns is not None and not step.swallowing and step.work_ns >= step_ns * (1 + n) / 2]
    return Work(step_ns, bool(short) and statistics.median(short) >= -SEVERAL_WORK)


def tells_work(ratios: Sequence[float]) -> bool:
    """Whether a thread's intervals' time on a CPU against their length (``work_ratio`` of each,
    ``ratios`` in order) can tell its slow steps from several steps (``worked``): on a CPU for at
    most ON_CPU of their time, steadily (their spread, IQR / 1.349, at most STEADY_WORK of their
    median), over at least MIN_STEADY of them. Judged on every interval, whatever it counts as, so
    that a rank counted on another's clock is judged as on its own (``sync._quality``)."""
    mid = steady(ratios, STEADY_WORK)
    return mid is not None and mid <= ON_CPU


def sure_counts(unseen: float, ratios: Sequence[float]) -> float:
    """1.0 where a rank's own counts need no draw between one slow step and several: it saw every
    boundary (e^-λ at most MAX_UNSEEN), or its thread's time on a CPU tells them apart
    (``tells_work`` of its intervals' ``ratios``); else 0.0 (``sync._quality``). Such a rank sets
    the clock before one that sees more boundaries but must draw: 2 gloo ranks on 2 cores that
    py-spy waited for, the rank that waits in the all-reduce (on a CPU 24% of its step, unsteadily)
    at e^-λ = 0.018 beside the straggler (84%, steadily) at 0.020: its draw counted 193 steps for
    the job's 215, the straggler's work 216."""
    return 1.0 if unseen <= MAX_UNSEEN or tells_work(ratios) else 0.0


def work_ratio(step: Step) -> float | None:
    """An interval's time on a CPU over its length (``tells_work``), where its counters are known
    and it swallowed no drop-out."""
    return step.work_ns / step.dur_ns if step.work_ns is not None and not step.swallowing and step.dur_ns > 0 else None


def one_on_cpu(step: Step) -> float:
    """The share of an interval's time on a CPU (``one_work``), where its counters are known."""
    return (step.work_ns or 0) / step.dur_ns if step.dur_ns > 0 else 0.0


def one_work_of(step: Step, n: int) -> float | None:
    """An interval's time on a CPU as ``one_work`` takes it: where it is one step that swallowed
    no drop-out, and its counters are known; else None."""
    return float(step.work_ns) if n == 1 and not step.swallowing and step.work_ns is not None else None


def steady_work(works: Sequence[float]) -> float | None:
    """The median of one step's ``works``, in order (``one_work``), where they hold steady
    (``steady``, within STEADY_WORK); else None."""
    return steady(works, STEADY_WORK)


def median_holds(durations: Sequence[float], moved: int) -> bool:
    """Whether the median of the steps' ``durations`` (sorted) stays within MAX_STEP_ERROR of
    itself over the ranks that the intervals a draw counted (``guessed``: ``moved`` of them, each
    one slow step or several) can move it, a rank each. A job that reads its batches in Python on
    two cores that py-spy shares slowed one step in four to 1.3-2x: with as many of its intervals
    of two holding a missed boundary as chance makes, its median came out 10% long (the job's own
    68th percentile); with each of them two steps, 2% short, and its count 16% high."""
    return not moved or not durations or holds_over(durations, moved)


def slow_throughout(step: Step, n: int, outside: float | None) -> bool:
    """Whether an interval as long as ``n`` steps is one step slowed throughout, not ``n`` steps
    with ``n`` - 1 boundaries unseen (``outside``: the share of its time that an interval of one
    step shows outside the loop's dominant place, ``one_outside``).

    A boundary goes unseen where a whole visit to one side of the cycle went unsampled: the span
    seen before it runs on through it. Where that visit was outside the dominant place, the
    interval shows one step's time outside it, a share of about ``outside`` / ``n``; where it was
    in the dominant place (a backward too short to be seen in every step), one step's time in it,
    and a share of about 1 - (1 - ``outside``) / ``n`` outside. One step slowed throughout (a job
    whose cores other work took for a moment) keeps one step's share. Nearer to it than halfway
    to either, the interval is one slow step: nanoGPT's loop on two cores it keeps busy ran
    45-77 ms iterations among 25-32 ms ones, mostly as a py-spy window started or ended, and each
    was counted as two or three steps (counts 2-5% high; tests/fixtures/truth_nanogpt)."""
    if outside is None or n < 2 or step.dur_ns <= 0:
        return False
    share, half = step.outside_ns / step.dur_ns, (1 + 1 / n) / 2
    return outside * half <= share <= 1 - (1 - outside) * half


def one_outside(intervals: Sequence[Step], counts: Sequence[int]) -> float | None:
    """The share of its time that an interval of one step shows outside the loop's dominant place
    (their median: ``slow_throughout``); None where no interval counts several steps, or where that
    share is too uneven from step to step for one interval's to say how many steps it holds (its
    spread beyond STEADY_OUTSIDE of it: bursty delivery, visits too short to be seen whole)."""
    if all(n == 1 for n in counts):
        return None
    shares = (one_share(step, n) for step, n in zip(intervals, counts, strict=True))
    return steady_share(sorted(share for share in shares if share is not None))


def one_share(step: Step, n: int) -> float | None:
    """The share of an interval counted as ``n`` steps that ``one_outside`` takes: its time outside
    the dominant place, where it is one step that swallowed no drop-out; else None."""
    return step.outside_ns / step.dur_ns if n == 1 and not step.swallowing and step.dur_ns > 0 else None


def steady_share(shares: Sequence[float]) -> float | None:
    """The median of ``shares``, in order (``one_outside``), where they hold steady (``steady``,
    within STEADY_OUTSIDE); else None."""
    return steady(shares, STEADY_OUTSIDE)


def steady(values: Sequence[float], within: float) -> float | None:
    """The median of ``values`` (in order) where they hold steady: their spread (IQR / 1.349) at
    most ``within`` of it, over at least MIN_STEADY of them; else None."""
    m = len(values)
    if m < MIN_STEADY:
        return None
    mid = (values[(m - 1) // 2] + values[m // 2]) / 2
    spread = (values[3 * m // 4] - values[m // 4]) / 1.349
    return mid if mid > 0 and spread <= within * mid else None


def expand_counted(intervals: Sequence[Step], counts: Sequence[int], unseen: float | None,
                   rate_hz: float) -> tuple[tuple[Step, ...], Guesses]:
    """``expand`` at the chance of a missed boundary that the counts themselves show
    (``missed_share``, ``chance_cut``, ``slow_share``, over the intervals that swallowed no
    drop-out); and what a guess decided of them (``guesses``)."""
    chance = Counter(n for step, n in zip(intervals, counts, strict=True) if not step.swallowing)
    total = sum(counts)
    missed = missed_share(chance, total, unseen)
    cut, outside = chance_cut(chance, total, missed, unseen), one_outside(intervals, counts)
    holding = slow_share(chance, unseen, sparse_visits(intervals, rate_hz))
    work = one_work(intervals, counts)
    moved = guesses(zip(intervals, counts, strict=True), unseen, cut, missed, outside, holding, work)
    return expand(intervals, counts, unseen, cut, missed, outside, holding, work), moved


def guesses(counted: Iterable[tuple[Step, int]], unseen: float | None, cut: int | None, missed: float | None,
            outside: float | None, holding: float | None, work: Work | None = None) -> Guesses:
    """How many of the intervals, each counted as its number of steps, ``expand``'s ``holding``
    draw would decide (``guessed``: the ranks they can move the median by, ``median_holds``), and
    the steps it added where it took one for several (which a count surely seen leaves out). Those
    that the thread's time on a CPU decided instead (``worked``) count as guessed all the same:
    that time is read through counters 20 ms apart, and a misjudged interval moves the median by
    a rank as a misdrawn one does. (8 synchronized ranks whose input ran 1.3-2.2x as long in two
    steps in five had their intervals of two steps told from slow steps that way, every count
    right, and the median still 5.0% long: the slow steps' boundaries blur into the median.)"""
    if holding is None:
        return 0, 0
    moved = added = 0
    for step, n in counted:
        if guessed(step, n, unseen, cut, missed, outside, holding):
            said = worked(step, n, work)
            moved += 1
            added += n - 1 if (said == n if said is not None else holds_missed(step, holding)) else 0
    return moved, added


def uneven_clock(clock: StepClock) -> StepClock:
    """``clock`` made unknown where the steps' median does not hold (``median_holds``) over the
    intervals that a guess counted as one slow step or as several (``slow_share``)."""
    reason = ("slow steps (more intervals as long as two steps or more than sampling misses boundaries by "
              "chance, and which of them hide a boundary cannot be told) make the steps too uneven for their "
              f"median to be given within {100 * MAX_STEP_ERROR:.0f}% (on a busy machine, other work takes "
              "the job's cores)")
    return StepClock("unknown", None, None, clock.concentration, reason, unseen=clock.unseen, cause=UNEVEN)


def clock_of(durations: Sequence[int], unseen: float | None, rate_hz: int, marked: bool = False,
             drift: bool = True) -> tuple[StepClock, tuple[int, ...]]:
    """The step clock of the intervals between observed wraps, and each one's step count;
    ``unseen`` is the chance that sampling misses a boundary (``_unseen``); ``marked``: the
    optimizer ran in practically every interval (``optimizer_marked``), so an interval without it
    is no step, and intervals split in pairs are a step split, not steps whose boundaries hid.
    Where the steps changed length within the window (``period.shift_cut``), each side is counted
    on its own (``by_regimes``), whether one period holds over both or not; where no period holds
    and the steps drift in length, on their local step (``drift_clock``; not with ``drift`` False)."""
    clock, counts = one_clock(durations, unseen, rate_hz, marked)
    floats = [float(d) for d in durations]
    if clock.known:
        cut = shift_cut(floats, counts, clock.period_ns or 0.0)
        return (clock, counts) if cut is None else by_regimes(durations, cut, unseen, rate_hz, marked, clock, counts)
    if len(floats) < MIN_INTERVALS:
        return clock, counts
    # no one period holds, perhaps as the steps changed length (30-ms steps, then as many of 60: no
    # median holds over both): each side's own, where both have one (else the unknown stands, its reason)
    median = statistics.median(floats)
    cut = shift_cut(floats, [max(1, round(f / median)) for f in floats], median)
    changed = None
    if cut is not None:
        regimes = by_regimes(durations, cut, unseen, rate_hz, marked, clock, counts)
        if regimes[0].known:
            return regimes
        # ...where neither that nor a drift counts them, the change that ``by_regimes`` found stands:
        # the optimizer's visits are counted on it (``accumulation._found_regimes``)
        changed = regimes[0].changed_ns
    drifting = drift_clock(floats, unseen, rate_hz) if drift else None
    if drifting is not None:
        return drifting
    return (clock if changed is None else replace(clock, changed_ns=changed)), counts


def running_median(values: Sequence[float], half: int) -> list[float]:
    """Each value's local level: the median of the values within ``half`` places of it (fewer at
    the ends), kept sorted as the window slides."""
    window = sorted(values[:half])
    out = []
    for i in range(len(values)):
        if i + half < len(values):
            bisect.insort(window, values[i + half])
        if i - half - 1 >= 0:
            del window[bisect.bisect_left(window, values[i - half - 1])]
        n = len(window)
        out.append(window[n // 2] if n % 2 else (window[n // 2 - 1] + window[n // 2]) / 2)
    return out


def trends(values: Sequence[float], rising: bool) -> bool:
    """Whether ``values`` drift one way through the window: the medians of their four quarters in
    order (``rising``, or falling), each within DRIFT_SLACK of the last where it goes back, and the
    last quarter's values beyond the first's by a rank-sum test at DRIFT_Z (a normal z: random slow
    steps that happen to crowd one end do not pass: one job's 36 intervals, a tenth of its steps
    slowed 1.3-2.2 times at random, had local steps 201 ms in its first quarter and 266 in its last,
    whose quarters' medians went 201, 216, 267, 233)."""
    quarter = len(values) // 4
    medians = [statistics.median(values[i * quarter:(i + 1) * quarter]) for i in range(4)]
    if not rising:
        medians = [-x for x in medians]
    if any(b < a - DRIFT_SLACK * abs(a) for a, b in itertools.pairwise(medians)):
        return False
    low, high = values[:quarter], values[-quarter:]
    if not rising:
        low, high = high, low
    ranked = sorted((v, i < quarter) for i, v in enumerate([*low, *high]))
    low_ranks = sum(rank + 1 for rank, (_, is_low) in enumerate(ranked) if is_low)
    n = quarter
    u = n * n + n * (n + 1) / 2 - low_ranks   # pairs with the later value the higher
    z = (u - n * n / 2) / math.sqrt(n * n * (2 * n + 1) / 12)
    return z >= DRIFT_Z


def drift_clock(durations: Sequence[float], unseen: float | None, rate_hz: int
                ) -> tuple[StepClock, tuple[int, ...]] | None:
    """The clock of steps that drift in length through the window, nearly every boundary seen
    (e^-λ at most DRIFT_UNSEEN, over MAX_UNSEEN), where no one period fits: each interval counted
    on its local step, the median of the DRIFT_HALF intervals either side (``running_median``:
    nearly all of them one step each, it is one step's length). Given as their mean
    (``StepClock.mean``), with the local steps at the start and the end (the first and last
    quarters' medians) as ``shift_ns``. None unless: at least 3 x MIN_INTERVALS intervals; the
    local step at least MIN_SAMPLES_PER_STEP samples throughout; the two quarters DRIFT_RATIO apart
    or more (a steady job whose comb was refused was refused for a cause a local step does not
    mend), the intervals drifting that way throughout (``trends``); at most MAX_AMBIGUOUS of the
    intervals astray of their count (``period.strays``); and no more counted as several than
    boundaries unseen by chance make (DRIFT_CHANCE: slow steps are not told from several here). A
    job 2.5 times slower at the start, its 34-ms steps 17 ms by the end at 400 Hz, e^-λ 1.5%: 412
    intervals, no period ("steps may be shorter than 5 samples")."""
    m = len(durations)
    # (every boundary seen, e^-λ at most MAX_UNSEEN: the intervals are the steps, and steps/mean.py
    # gives their mean where no median holds)
    if unseen is None or not MAX_UNSEEN < unseen <= DRIFT_UNSEEN or m < 3 * MIN_INTERVALS:
        return None
    local = running_median(durations, DRIFT_HALF)
    if min(local) * rate_hz / 1e9 < MIN_SAMPLES_PER_STEP:
        return None
    quarter = m // 4
    first, last = statistics.median(local[:quarter]), statistics.median(local[-quarter:])
    if max(first, last) / min(first, last) < DRIFT_RATIO or not trends(durations, first < last):
        return None
    counts = tuple(max(1, round(d / p)) for d, p in zip(durations, local, strict=True))
    if sum(1 for d, n, p in zip(durations, counts, local, strict=True) if strays(d, n, p, rate_hz)) > MAX_AMBIGUOUS * m:
        return None
    hidden = sum(n - 1 for n in counts)
    if poisson_tail(hidden, unseen * sum(counts)) <= DRIFT_CHANCE:   # (unseen > MAX_UNSEEN here)
        return None
    clock = StepClock("comb", sum(durations) / sum(counts), m / sum(counts), None, unseen=unseen, mean=True,
                      shift_ns=(first, last))
    return clock, counts


def typical_step(clock: StepClock, median: Callable[[], float]) -> float:
    """A known clock's typical step: its steps' ``median``, or, where it gives their mean (a clock of
    two periods, ``by_regimes``), its period, their mean. As build_timeline, the live tracker and the
    union of peers' boundaries take it."""
    return clock.period_ns if clock.mean and clock.period_ns else median()


def by_regimes(durations: Sequence[int], cut: int, unseen: float | None, rate_hz: int, marked: bool,
               clock: StepClock, counts: tuple[int, ...]) -> tuple[StepClock, tuple[int, ...]]:
    """The intervals on either side of ``cut``, where the steps changed length, each counted on
    a clock of its own (``one_clock``): a job slowed 2x mid-window, its 60-ms steps counted as two
    each on the 30-ms steps' period (333 steps for its 196, -50% on the median), is counted 30 ms,
    then 60. Where both sides agree within SHIFT_RATIO, the one clock (``clock``, ``counts``) stands;
    where either side has no clock of its own, the step time is unknown, and says why.

    A side of under MIN_INTERVALS intervals (a change near the window's edge) is too short for a
    clock of its own: the one clock stands where its steps as that clock counts them cannot move the
    rest's median beyond MAX_STEP_ERROR (``holds_over``), else the step time is unknown. (The first
    input_slows recording's live window that ended 5 intervals into its slowdown, 320-400 ms each,
    kept its step time so: two steps each on the one clock's 164-ms period. Counted one step each,
    as the split says they are, the draw that tells slow steps from several (``guesses``) found
    them too many slow steps, and the window's step time unknown.)

    The steps' typical length is then their mean (``_regimes_clock``)."""
    first, second = (statistics.median(part) for part in (durations[:cut], durations[cut:]))
    change = (f"the steps changed length within the window (intervals of about {first / 1e6:.0f} ms, then "
              f"{second / 1e6:.0f} ms), which no one period counts")
    if min(cut, len(durations) - cut) < MIN_INTERVALS:
        early = cut < MIN_INTERVALS
        edge, rest = (slice(0, cut), slice(cut, None)) if early else (slice(cut, None), slice(0, cut))
        steps = sorted(d / n for d, n in zip(durations[rest], counts[rest], strict=True) for _ in range(n))
        if steps and holds_over(steps, sum(counts[edge])):
            return clock, counts
        which = "before" if early else "after"
        fit = PeriodFit(None, tuple(1 for _ in durations), None, why="shifted")
        reason = (f"{change}, and too few intervals {which} the change for a period of their own (a period needs "
                  f"{MIN_INTERVALS}): sample longer")
        return replace(unknown_clock(fit, len(durations), rate_hz, unseen), reason=reason, unseen=unseen,
                       suggested_rate_hz=None, cause=SHIFTED), tuple(1 for _ in durations)
    # Each side on its own clock only: not its intervals counted as they stand where its clock is
    # unknown, though the window's e^-λ says every boundary was seen (that is the other side's too:
    # 10 intervals of 600-800 ms after the first input_slows recording's input doubled were one step
    # each on the window's e^-λ of 0.3%, though the job's next windows timed its steps at 320-350 ms)
    (before, a), (after, b) = (one_clock(part, unseen, rate_hz, marked) for part in (durations[:cut], durations[cut:]))
    pa, pb = before.period_ns, after.period_ns
    if pa and pb:
        if max(pa, pb) / min(pa, pb) < SHIFT_RATIO:
            return clock, counts
        moved = refined_cut(durations, cut, pa, pb)
        if moved != cut:
            cut = moved
            (before, a), (after, b) = (one_clock(part, unseen, rate_hz, marked)
                                       for part in (durations[:cut], durations[cut:]))
            pa, pb = before.period_ns, after.period_ns
            if not (pa and pb) and clock.known:
                return clock, counts
            # (one clock unknown: a side whose clock the moved cut lost is no clock, as below. 4
            # micro-batches of 25 ms, then of 12.5 at 400 Hz: moved 2 intervals, the faster side, 5
            # samples a micro-batch, had none, and the visits' one 50-ms comb then counted each 100-ms
            # optimizer step before the change as two, 198 steps for 137: ``StepClock.changed_ns``)
        if pa and pb:
            method = before.method if before.method == after.method else "comb"
            return _regimes_clock(method, durations, a + b, unseen, (pa, pb)), a + b
    which, failed = ("before", before) if not pa else ("after", after)
    # (the change said, for the optimizer's visits to be counted on, where both lengths are long enough
    # to time: intervals of steps too short to tell apart are no length of theirs, as a recorded GPU
    # job's 18-ms micro-batches at 100 Hz, 64 ms then 21, were not)
    timed = min(first, second) * rate_hz / 1e9 >= MIN_SAMPLES_PER_STEP
    return replace(failed, reason=f"{change}; of those {which} the change: {failed.reason}", unseen=unseen,
                   changed_ns=(first, second) if timed else None), tuple(1 for _ in durations)


def refined_cut(durations: Sequence[int], cut: int, before_ns: float, after_ns: float) -> int:
    """``cut`` moved to where the longer period's side fits its comb as far as it can: the split
    (``period.shift_cut``) is looked for every m / 40 intervals, and the shorter period fits the
    longer one's intervals too (an interval of one 200-ms step is two of 100), so only the longer
    one's comb tells where it ends. Within two strides either way, the cut whose longer side holds
    the most intervals on its comb (within INLIER of a whole number of periods) less 3 for each off
    it (one that is, on the shorter comb, an odd number of its periods). 120 steps of 200 ms, then
    300 of 100, half their boundaries seen at 100 Hz (tests/test_regimes.py, seed 2): the split,
    some 10 intervals before the change, counted 444 steps for the job's 418 (+6%, the mean -5.8%);
    moved, 424 (+1.4%); over 10 seeds, counts within 1.4% and means within 1.4%."""
    m = len(durations)
    stride = 2 * max(1, m // 40) + 1   # (the best split's marks can sit a stride off the change: a stretch's ends blur)
    late = after_ns > before_ns   # the longer steps after the cut
    period = max(before_ns, after_ns)
    scores = [1 if abs(d / period - max(1, round(d / period))) <= INLIER else -3 for d in durations]
    upto = list(itertools.accumulate(scores, initial=0))   # (a two-period clock is fitted at every live tick)
    best: tuple[int, int] | None = None
    for c in range(max(MIN_INTERVALS, cut - stride), min(m - MIN_INTERVALS, cut + stride) + 1):
        score = upto[m] - upto[c] if late else upto[c]
        if best is None or score > best[0]:
            best = (score, c)
    return cut if best is None else best[1]


def _regimes_clock(method: str, durations: Sequence[int], counts: tuple[int, ...], unseen: float | None,
                   shift_ns: tuple[float, float]) -> StepClock:
    """``by_regimes``' clock of the ``durations`` counted as ``counts``: their mean step, given as
    the typical one (``StepClock.mean``). No median of steps of two lengths is one to give: where
    neither length holds the most steps by far, a few steps more or fewer move it from one to the
    other; where one does, it lies off the middle of that side's steps, where the samples' lag at
    each end widens them most (200 steps of 30 ms, then 100 of 60, every boundary seen at 400 Hz:
    a median 3.4-5.7% over the job's, which ``period.blur_moves`` put at 2.0-3.8%). Their mean,
    the window's time over its steps, is what the counts give whole."""
    return StepClock(method, sum(durations) / sum(counts), len(counts) / sum(counts), None, unseen=unseen,
                     mean=True, shift_ns=shift_ns)


def one_clock(durations: Sequence[int], unseen: float | None, rate_hz: int, marked: bool = False
              ) -> tuple[StepClock, tuple[int, ...]]:
    """``clock_of`` at one speed: one period for every interval."""
    ones = tuple(1 for _ in durations)
    split = False
    if len(durations) >= 2 and unseen is not None and unseen <= MAX_UNSEEN:
        # every boundary is visible: the intervals are the steps (but for clear multiples), and
        # they may drift (a job that slows down) without a fixed period to fit
        floats = [float(d) for d in durations]
        period, counts = refine_map(floats, statistics.median(durations), unseen, rate_hz)
        whole = sorted(d for d, n in zip(floats, counts, strict=True) if n == 1)
        # a tenth of the intervals under MIN_SAMPLES_PER_STEP: steps that short go unseen whatever
        # λ says (it is counted per interval seen, each then many steps: ~4 ms steps at 400 Hz on
        # a GPU gave e^-λ = 1e-7), so that is why the steps vary, and no longer window would help
        tenth = sorted(floats)[len(floats) // 10]
        short = tenth * rate_hz / 1e9 < MIN_SAMPLES_PER_STEP
        # under half that, the short steps are too many to be the blur of longer ones (a sample's
        # lag at each end takes 2.5 of them off a 5-sample step 4% of the time): steps that short
        # hide their boundaries, and the intervals seen are not every step, however steady
        # (bursty delivery at 500 Hz: two 4 ms steps in three, the median interval 12 times theirs)
        hiding = tenth * rate_hz / 1e9 < MIN_SAMPLES_PER_STEP / 2
        # intervals split in pairs that make one typical one (many near it: ``steady_median``) are no
        # steps seen whole (``split_pairs``): the boundaries seen are not all of them, whatever e^-λ
        # says, and the comb fit below decides. Where the median is no typical interval (steps of two
        # lengths by turns, 49, 49, 176, 180 ms), two short ones can add up to it by chance
        steady = steady_median(whole, sum(counts))
        split = not hiding and not marked and steady and split_pairs(floats, period)
        if not hiding and not split and pinned(floats, counts, period, rate_hz) and steady:
            return StepClock("wraps", period, len(counts) / sum(counts), None, unseen=unseen), counts
        if not split:
            fit = PeriodFit(None, ones, None, tenth if short else min(floats), why="short" if short else "jittery")
            return replace(unknown_clock(fit, len(durations), rate_hz, unseen), unseen=unseen), ones
    fit = fit_period(durations, rate_hz, unseen)
    if fit.known:
        return StepClock("comb", fit.period_ns, fit.visible, fit.concentration, unseen=unseen), fit.counts
    clock = replace(unknown_clock(fit, len(durations), rate_hz, unseen), unseen=unseen)
    if fit.drifted_ns is not None:
        clock = replace(clock, drifted_ns=fit.drifted_ns)
    if split:   # not every boundary seen, though e^-λ says so: no mean of the intervals either (steps/mean.py)
        clock = replace(clock, cause=SPLIT, reason=f"{clock.reason}; intervals that come in pairs adding up to "
                        "the typical one show that some boundaries went unseen")
    return clock, ones


def optimizer_marked(intervals: Iterable[Step]) -> bool:
    """Whether the optimizer ran in at least SPLIT_MARKED of the ``intervals`` that are covered
    (``clock_of``'s ``marked``). 4 ranks accumulating 2 micro-batches of 230-ms steps, a 55-ms
    optimizer in each, showed a micro-batch's return in one step in ten: the pieces, 137 + 78 ms,
    one without the optimizer, split a step; the steps were the other intervals (+0.2%)."""
    covered = [iv for iv in intervals if iv.covered]
    with_it = sum(1 for iv in covered if iv.phases_ns.get("optimizer", 0) > 0)
    return bool(covered) and with_it >= SPLIT_MARKED * len(covered)


def unseen_share(unseen: float) -> str:
    """The share of boundaries that go unseen, in words. ``unseen`` (e^-λ) is counted over the
    intervals between the boundaries seen, each one or more steps, so it errs low: "or more"."""
    return "nearly all" if unseen >= 0.995 else f"{100 * unseen:.0f}% or more"


def _mostly_unseen(unseen: float, rate_hz: int) -> str:
    """Why most boundaries go unseen, in words (``unseen_share``)."""
    return (f"{unseen_share(unseen)} of the step boundaries go unseen, as a step spends too little time "
            f"outside its main phase for {rate_hz} Hz to catch it there")


def unknown_clock(fit: PeriodFit, observed: int, rate_hz: int, unseen: float | None = None) -> StepClock:
    """Why no step time can be given, and what would give one: a higher rate only where the
    steps may be too short for this one (the shortest intervals seen are under
    TARGET_SAMPLES_PER_STEP samples, or the fit says so) or their boundaries mostly go unseen
    (``unseen``, e^-λ), never for regular steps already long enough."""
    shortest_ms = MIN_SAMPLES_PER_STEP * 1e3 / rate_hz
    upper = fit.upper_bound_ns
    # a higher rate helps steps that may be short, and boundaries that mostly go unseen (a rate
    # that doubles the samples outside the dominant place doubles λ); not regular long steps
    mostly_unseen = unseen is not None and unseen > MOSTLY_UNSEEN
    short = upper is None or upper * rate_hz / 1e9 < TARGET_SAMPLES_PER_STEP or unseen is None or mostly_unseen
    # a short period fitted to intervals that are all long, most boundaries unseen, is a harmonic
    # of the few seen, not steps under MIN_SAMPLES_PER_STEP
    harmonic = mostly_unseen and upper is not None and upper * rate_hz / 1e9 >= MIN_SAMPLES_PER_STEP
    cause = None
    if fit.why == "jittery":
        reason = (f"the steps vary too much for the {observed} boundaries seen to give the typical step "
                  f"within {100 * MAX_STEP_ERROR:.0f}%: sample longer")
    elif observed < MIN_INTERVALS:
        reason = (f"only {observed} step boundar{'y was' if observed == 1 else 'ies were'} seen "
                  f"(a period needs {MIN_INTERVALS}): sample longer")
        if unseen is not None and mostly_unseen:
            reason += f"; {_mostly_unseen(unseen, rate_hz)}, so a faster rate would show more of them"
        # a faster rate only where the boundaries mostly go unseen: few returns in a window are no
        # sign of short steps (those return often), but of a job that is not stepping (a hang, a
        # restarted worker in init_process_group: "sample faster: --rate 850" beside "sample longer")
        # or of long steps
        short = mostly_unseen
    elif fit.why == "ambiguous":
        reason = (f"too many of the {observed} intervals between the boundaries seen could hold one step or "
                  f"two at {rate_hz} Hz")
        short = True   # the blur of where the samples fell: a higher rate narrows it
    elif fit.why == "short" and not harmonic:
        reason = (f"steps shorter than {MIN_SAMPLES_PER_STEP:.0f} samples ({shortest_ms:.0f} ms at {rate_hz} Hz) "
                  "cannot be told apart, and the boundaries seen fit no longer period")
        short, cause = True, SHORT
    elif unseen is not None and mostly_unseen:
        reason = f"the {observed} boundaries seen fit no step period: {_mostly_unseen(unseen, rate_hz)}"
    elif short:
        reason = (f"the {observed} boundaries seen fit no step period (steps may be shorter than "
                  f"{MIN_SAMPLES_PER_STEP:.0f} samples, {shortest_ms:.0f} ms at {rate_hz} Hz, or too irregular)")
    else:
        reason = (f"the {observed} boundaries seen fit no regular step period, though the steps are long enough "
                  f"for {rate_hz} Hz: the steps are irregular, or most of their boundaries go unseen; a longer "
                  "window, or a [[loop]] rule naming the step's own loop frame, would help")
    rate = suggested_rate_hz(upper, rate_hz) if short and fit.why != "jittery" else None
    return StepClock("unknown", None, None, fit.concentration, reason, rate, upper, cause=cause)
