"""A live window's intervals between observed wraps: counted on a carried step clock, expanded
into steps and summed as they come and go. This is the live half of ``batch_timeline._clock``,
``batch_timeline.expand`` and ``steptime.step_totals``; live_tracker.py describes the whole design.

Each interval is counted once, when it closes, on the clock carried from the last fit (the
posterior of ``period.count_posteriors``, with the spread of that fit). A known clock is
checked warm every REFIT_S: its period is total time over total steps of the intervals on its
comb, kept as running sums (``refine_map``'s estimator), and the comb's concentration at one,
two and three periods, the share of unsure counts and the jitter are kept or recomputed
cheaply, for ``fit_period``'s own checks. A failed check, a new thread or loop, or an unknown
clock (every RETRY_S, or as its intervals grow) asks for a full fit like the batch's
(``clock_of``), which the caller rations (``cold_cost``); with fewer than MIN_INTERVALS
intervals a full fit is cheap and runs every tick.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from itertools import chain
from operator import attrgetter
from typing import Protocol

from traceml_attach.policy import (
    HARMONIC_KEEP,
    INLIER,
    MAX_UNSEEN,
    MIN_CONCENTRATION,
    MIN_INTERVALS,
    MIN_RAYLEIGH_Z,
    MIN_SAMPLES_PER_STEP,
)
from traceml_attach.steps.clock import (
    Guesses,
    Step,
    StepClock,
    Work,
    chance_cut,
    chance_depth,
    clock_of,
    expand,
    guesses,
    missed_share,
    one_on_cpu,
    one_share,
    one_work_of,
    optimizer_marked,
    outside_samples,
    shared_unseen,
    slow_share,
    steady_share,
    sure_counts,
    work_of,
    work_ratio,
)
from traceml_attach.steps.live_sums import StepSums
from traceml_attach.steps.movinglog import Log, LogView
from traceml_attach.steps.period import (
    Posterior,
    count_spread,
    jitter,
    pins_median,
    shift_cut,
    split_pairs,
    strays,
    too_ambiguous,
)
from traceml_attach.steps.steptime import StepTotals

NS = 1_000_000_000
REFIT_S = 8.0              # a known clock is checked warm this often (staggered over the ranks)
RETRY_S = 15.0             # an unknown clock is fitted again this often, or when its intervals grew...
RETRY_GROWTH = 1.25        # ...by a quarter, or at each new interval while there are fewer than
CHEAP_FIT = 40             # this many (a full fit costs ~40 µs per interval)
RECOUNT = 0.02             # intervals are recounted when their counting period moved by this much
RETRIG = 0.005             # the comb's running sums are recomputed when the period moved by this much
TAIL = 8                   # an interval this close to the newest is re-expanded in place
SAME_PERIOD = 0.005        # a shared period this close to the rank's own: its counts are the own ones
RID = attrgetter("rid")
# clock.missed_share, chance_cut, one_outside, slow_share and one_work, as the intervals were expanded
Expansion = tuple[float | None, int | None, float | None, float | None, Work | None]


class Swallowing(Protocol):
    """Whether an interval's long spans are far longer than their stacks' usual spans (the
    tracker knows the spans; see ``timeline._intervals``)."""

    def swallowing(self, long_spans: Sequence[tuple[int, int, int]]) -> tuple[bool, bool]: ...

    def forget_usual(self) -> None: ...

    def stalled(self, start_ns: int, end_ns: int) -> bool: ...


class Interval:
    """An interval between two observed wraps, with its step counts and its steps."""

    __slots__ = ("alive", "dur", "inlier", "long_spans", "n", "n_own", "pending", "rid", "step", "steps", "sure",
                 "sync", "trig")

    def __init__(self, rid: int, step: Step) -> None:
        self.rid = rid
        self.step = step
        self.dur = step.counted_ns   # as the batch counts (``timeline._clock``)
        self.n_own = 1           # steps on the rank's own clock...
        self.sure = True         # ...whether that count is sure (posterior ≥ SURE)...
        self.inlier = False      # ...and whether it sits on that clock's comb
        self.trig: tuple[float, ...] | None = None   # cos, sin of kθ, k = 1..3, θ = 2π dur / trig period
        self.n = 1               # steps it counts as (own, shared or one each)
        self.steps: tuple[Step, ...] = (step,)
        self.long_spans: tuple[tuple[int, int, int], ...] = ()  # (id(stack), ns, start) of its spans ≥ 8 intervals
        self.sync: tuple[tuple[int, int, str], ...] = ()   # (lo, hi, phase) to read blocked time from
        self.pending = False     # its CPU counter has not reached its end yet
        self.alive = True        # still in the window


def _keep(values: list[float], value: float | None, sign: int) -> None:
    """Add (1) or take away (-1) ``value`` (None: nothing) in ``values``, kept in order."""
    if value is None:
        return
    if sign > 0:
        bisect.insort(values, value)
    else:
        del values[bisect.bisect_left(values, value)]


def _trig(dur: float, period: float) -> tuple[float, ...]:
    theta = 2 * math.pi * dur / period
    c, s = math.cos(theta), math.sin(theta)
    c2, s2 = c * c - s * s, 2 * c * s
    return (c, s, c2, s2, c * c2 - s * s2, s * c2 + c * s2)


class IntervalWindow:
    """The intervals of one thread's window, in time order (see the module doc)."""

    def __init__(self, rate_hz: int, stagger: float, spans: Swallowing) -> None:
        self.rate_hz = rate_hz
        self.interval_ns = 1e9 / max(rate_hz, 1)
        self.two_samples_ns = 2.6e9 / max(rate_hz, 1)   # above it, outside_samples is 3 or more
        self.stagger = stagger
        self.spans = spans
        self.records: list[Interval] = []
        self.intervals: Log[Step] = Log()     # each record's interval Step, in step with records
        self.flat: Log[Step] = Log()          # every record's steps in order, while flat_ok
        self.flat_ok = True
        self.rid = 0
        self.sums = StepSums()                # running sums over the steps (steptime.step_totals)
        self.n_total = 0                      # the steps the intervals count as
        # how many intervals that swallowed no drop-out count each number of steps, and the steps
        # all intervals count (clock.missed_share, chance_cut)
        self.counted: Counter[int] = Counter()
        self.counted_steps = 0
        # clock.missed_share, chance_cut and one_outside of them, as the intervals were last expanded
        self.expansion: Expansion = (None, None, None, None, None)
        # the shares of their time outside the dominant place of those that count one step, in
        # order (clock.one_outside)
        self.one_shares: list[float] = []
        # their time on a CPU, in order, and the intervals counted as several steps whose time on a
        # CPU is known, by id (clock.one_work)
        self.one_works: list[float] = []
        self.one_on_cpu: list[float] = []
        # every interval's time on a CPU over its length, in order (clock.tells_work)
        self.ratios: list[float] = []
        self.several: dict[int, Interval] = {}
        # of the intervals that swallowed no drop-out, those with one sample outside the dominant
        # place, with two, and all (clock.sparse_visits)
        self.sparse: Counter[int] = Counter()
        # what a guess decided (clock.guesses), with what it was worked out for
        self._guesses: tuple[tuple, Guesses] | None = None
        self.clock = StepClock("unknown", None)
        self.unseen: float | None = None
        # e^-λ as of this tick (the tracker's measure, which ``keep`` is given), where ``unseen`` is
        # as of the last fit: ``slow_share`` weighs the intervals of several steps against it, as
        # the batch does against the window's own
        self.measure: Callable[[], float | None] | None = None
        self._fresh: tuple[int, float | None] | None = None
        self.tick_ns = 0
        # the most boundaries chance can hide (clock.chance_depth); while it is known, an interval
        # of more steps is one slow step unless it swallowed a drop-out, which is judged then
        self.certain = False
        self.depth: int | None = None
        self.count_period: float | None = None   # own counts were made with this period...
        self.spread = 0.0                         # ...and this posterior spread
        self.trig_period: float | None = None
        self.mode = "own"                         # own | joint | ones: what ``n`` counts
        self.joint_period: float | None = None
        self.joint_spread = 0.0
        self.joint_count: Posterior | None = None   # counts on the shared period...
        self.joint_same = False                     # ...unless it is the own one
        self.own_count: Posterior | None = None
        self.next_warm_ns: int | None = None
        self.last_cold_ns: int | None = None
        self.cold_m = 0
        self.cold_due = False
        self.shift_key = (0, 0)                   # (newest interval, intervals) when a change was last looked for
        self.fitted = False                       # fitted since this window began
        self._reset_own_sums()

    def __len__(self) -> int:
        return len(self.records)

    # --- intervals coming and going ----------------------------------------------------------

    def add(self, start: int, end: int, phases: dict[str, int], blocked: dict[str, int] | None,
            long_spans: Sequence[tuple[int, int, int]], sync: Sequence[tuple[int, int, str]], pending: bool,
            aside: int = 0, outside: int = 0, work: int | None = None, stalled: bool = False) -> Interval:
        swallowing, held = (self.spans.swallowing(long_spans) if self.certain and long_spans else (False, False))
        self.rid += 1
        step = Step(start, end, phases, blocked, swallowing=swallowing, held=held, aside_ns=aside,
                    outside_ns=outside, work_ns=work, stalled=stalled)
        record = Interval(self.rid, step)
        record.long_spans, record.pending = tuple(long_spans), pending
        if pending:   # read again when the CPU counter has reached its end
            record.sync = tuple(sync)
        if self.own_count is not None:
            self._count_own(record)
        if self.trig_period is not None:   # a comb's concentration (not kept for "wraps")
            record.trig = _trig(record.dur, self.trig_period)
        if self.mode == "own" or (self.mode == "joint" and self.joint_same):
            record.n = record.n_own
        elif self.mode == "joint" and self.joint_count is not None:
            record.n = self.joint_count(record.dur)[0]
        if record.n != 1:
            record.steps = self._expand(record)
        self._tally(record, 1)
        self.records.append(record)
        self.intervals.append(step)
        if self.flat_ok:
            self.flat.extend(record.steps)
        self._add(record, 1)
        self._own_sums(record, 1)
        return record

    def drop_before(self, start_ns: int | None) -> None:
        """Forget the intervals that begin before ``start_ns`` (None: all of them)."""
        k = 0
        while k < len(self.records) and (start_ns is None or self.records[k].step.start_ns < start_ns):
            k += 1
        if not k:
            return
        gone = self.records[:k]
        for record in gone:
            self._add(record, -1)
            self._own_sums(record, -1)
            self._tally(record, -1)
            record.alive = False
        del self.records[:k]
        self.intervals.drop(k)
        if self.flat_ok:
            self.flat.drop(sum(len(r.steps) for r in gone))

    def restep(self, record: Interval, step: Step) -> None:
        """Replace an interval's measurement (its CPU counter came, its swallowing changed)."""
        if step == record.step or not record.alive:
            return
        self._tally(record, -1)
        record.step = step
        self._tally(record, 1)
        self.intervals[self._index(record)] = step
        self._set_steps(record, self._expand(record))

    def _index(self, record: Interval) -> int:
        return bisect.bisect_left(self.records, record.rid, key=RID)

    def _expand(self, record: Interval) -> tuple[Step, ...]:
        if record.n == 1:
            return (record.step,)
        missed, cut, outside, holding, work = self.expansion
        return expand((record.step,), (record.n,), self._unseen(), cut, missed, outside, holding, work)

    def _unseen_now(self) -> float | None:
        """``_unseen`` as of this tick (measured once a tick, and only where it is asked)."""
        if self.measure is None:
            return self._unseen()
        if self._fresh is None or self._fresh[0] != self.tick_ns:
            now = self.measure()
            self._fresh = (self.tick_ns, shared_unseen(now) if self.mode == "joint" else now)
        return self._fresh[1]

    def _unseen(self) -> float | None:
        """The chance of an unseen boundary the counts are expanded at: a synchronized rank counted
        on the reference's period at clock.shared_unseen, as sync.share_period."""
        return shared_unseen(self.unseen) if self.mode == "joint" else self.unseen

    def _set_steps(self, record: Interval, steps: tuple[Step, ...]) -> None:
        old = record.steps
        self._add(record, -1)
        if self.flat_ok:
            i = self._index(record)
            if len(self.records) - i <= TAIL:
                end = len(self.flat) - sum(len(r.steps) for r in self.records[i + 1:])
                self.flat.splice(end - len(old), end, steps)
            else:
                self.flat_ok = False
        record.steps = steps
        self._add(record, 1)

    def _set_n(self, record: Interval, n: int) -> None:
        if n != record.n:
            self._tally(record, -1)
            record.n = n
            self._tally(record, 1)
            self._set_steps(record, self._expand(record))

    def _tally(self, record: Interval, sign: int) -> None:
        """Count (1) or uncount (-1) an interval in ``counted``, ``counted_steps``."""
        self.counted_steps += sign * record.n
        _keep(self.one_shares, one_share(record.step, record.n), sign)
        _keep(self.ratios, work_ratio(record.step), sign)
        work = one_work_of(record.step, record.n)
        if work is not None:
            _keep(self.one_works, work, sign)
            _keep(self.one_on_cpu, one_on_cpu(record.step), sign)
        elif record.n > 1 and record.step.work_ns is not None and not record.step.swallowing:
            if sign > 0:
                self.several[record.rid] = record
            else:
                del self.several[record.rid]
        if not record.step.swallowing:
            self.counted[record.n] += sign
            if record.step.outside_ns <= self.two_samples_ns:   # cheap before clock.outside_samples
                samples = outside_samples(record.step, self.rate_hz)
                if samples <= 2:
                    self.sparse[samples] += sign
            self.sparse[0] += sign

    def _add(self, record: Interval, sign: int) -> None:
        """Add (1) or take away (-1) an interval's steps from the running step totals."""
        self.n_total += sign * record.n
        self.sums.add(record.steps, sign)

    def _reexpand(self) -> None:
        """Every interval expanded again (its count or the clock's certainty changed)."""
        self.expansion = self._expansion()
        self.flat_ok = False
        self.sums = StepSums()
        self.n_total = 0
        for record in self.records:
            record.steps = self._expand(record)
            self._add(record, 1)

    # --- the own clock -----------------------------------------------------------------------

    def _reset_own_sums(self) -> None:
        self.inl_ns = self.inl_n = self.ambiguous = self.whole = self.own_total = 0
        self.short = self.short_ambiguous = 0   # intervals of one step or two, and the unsure of them
        self.trig_sums = [0.0] * 6

    def _counters(self) -> None:
        """The posteriors that count new intervals, for the clocks as they now stand. On a shared
        period within SAME_PERIOD of the rank's own (the same step, nearly always), the own
        count serves both."""
        rate = self.rate_hz
        period = self.count_period
        self.own_count = None if period is None else Posterior(period, self.spread, self.unseen, rate)
        self.joint_same, self.joint_count = False, None
        if self.mode == "joint" and self.joint_period is not None:
            self.joint_same = period is not None and abs(self.joint_period / period - 1) <= SAME_PERIOD
            if not self.joint_same:
                self.joint_count = Posterior(self.joint_period, self.joint_spread, self.unseen, rate)

    def _count_own(self, record: Interval) -> None:
        assert self.own_count is not None
        n, sure = self.own_count.sure(record.dur)
        period = self.own_count.period
        record.n_own, record.sure = n, sure
        record.inlier = abs(record.dur - n * period) <= INLIER * n * period

    def _own_sums(self, record: Interval, sign: int) -> None:
        if record.inlier:
            self.inl_ns += sign * record.dur
            self.inl_n += sign * record.n_own
        self.ambiguous += sign * (not record.sure)
        if record.n_own <= 2:
            self.short += sign
            far = self.count_period is not None and strays(record.dur, record.n_own, self.count_period, self.rate_hz)
            self.short_ambiguous += sign * (not record.sure or far)
        self.whole += sign * (record.n_own == 1)
        self.own_total += sign * record.n_own
        trig = record.trig
        if trig is not None:
            sums = self.trig_sums
            sums[0] += sign * trig[0]
            sums[1] += sign * trig[1]
            sums[2] += sign * trig[2]
            sums[3] += sign * trig[3]
            sums[4] += sign * trig[4]
            sums[5] += sign * trig[5]

    def _recount_own(self, period: float | None, counts: Iterable[int] | None = None, comb: bool = True) -> None:
        """Every interval counted again on the own clock of ``period`` (None: one step each); a
        full fit's ``counts`` stand (the same MAP counts, as ``refine_map`` left them). The
        comb's running sums are kept only for a ``comb`` clock."""
        self.count_period = period
        self.trig_period = period if comb else None
        self._reset_own_sums()
        if period is not None:
            self.spread = count_spread([float(r.dur) for r in self.records], period, self.rate_hz)
        self._counters()
        given: Iterable[int | None] = counts if counts is not None else [None] * len(self.records)
        for record, n in zip(self.records, given, strict=True):
            if period is None:
                record.n_own, record.sure, record.inlier, record.trig = 1, True, False, None
            else:
                self._count_own(record)
                if n is not None and n != record.n_own:
                    record.n_own = n
                    record.inlier = abs(record.dur - n * period) <= INLIER * n * period
                record.trig = _trig(record.dur, period) if comb else None
            self._own_sums(record, 1)
        if self.mode == "own" or (self.mode == "joint" and self.joint_same):
            self._recount(lambda r: r.n_own)

    def _recount(self, count: Callable[[Interval], int], force: bool = False) -> None:
        """Count every interval again; expand them again where a count changed (``force``: in any
        case, as a change between own and joint counting changes how they expand)."""
        changed = force
        for record in self.records:
            n = count(record)
            if n != record.n:
                self._tally(record, -1)
                record.n = n
                self._tally(record, 1)
                changed = True
        if changed:
            self._reexpand()

    def set_unseen(self, unseen: float | None) -> None:
        if unseen != self.unseen:
            self.unseen = unseen
            self._counters()
        depth = chance_depth(unseen)
        if depth == self.depth:
            return
        old, self.depth = self.depth, depth
        was, self.certain = self.certain, depth is not None
        if self.certain and not was:   # a sampler drop-out's steps are expanded otherwise
            self.spans.forget_usual()
            for record in self.records:
                if record.long_spans:
                    swallowing, held = self.spans.swallowing(record.long_spans)
                    if (swallowing, held) != (record.step.swallowing, record.step.held):
                        self._tally(record, -1)
                        record.step = replace(record.step, swallowing=swallowing, held=held)
                        self._tally(record, 1)
                        self.intervals[self._index(record)] = record.step
        elif old is not None and depth is not None:
            # only the intervals of more steps than the shallower depth allows change
            least = min(old, depth)
            if not any(record.n - 1 > least for record in self.records):
                return
        self._reexpand()

    def keep(self, now_ns: int, unseen: Callable[[], float | None]) -> None:
        """Once a tick: a cheap full fit, a warm check when due, or a full fit asked for;
        ``unseen`` measures the chance that a boundary goes unseen, when needed."""
        self.measure, self.tick_ns = unseen, now_ns
        m = len(self.records)
        if m < MIN_INTERVALS or self.clock.shift_ns is not None:
            # (a clock of two periods, the steps' length changed within the window: no carried period
            # counts the intervals that come and go, and the change leaves the window in time)
            self.cold(now_ns, unseen())
        elif self.clock.known:
            if self.next_warm_ns is None or now_ns >= self.next_warm_ns:
                self._warm(now_ns, unseen())
            elif (self.rid, m) != self.shift_key and self._shifted():
                self.cold_due = True
        elif m != self.cold_m and (m < CHEAP_FIT or m >= RETRY_GROWTH * self.cold_m or self.last_cold_ns is None
                                   or now_ns - self.last_cold_ns >= RETRY_S * NS):
            self.cold_due = True

    def _shifted(self) -> bool:
        """Whether the steps changed length within the window (``period.shift_cut`` on the intervals as
        counted): asked at each tick whose intervals came or went, as the batch asks it of every window,
        so the live view counts each side on its own (a full fit) when the batch does."""
        self.shift_key = (self.rid, len(self.records))
        if self.count_period is None:
            return False
        return shift_cut([float(r.dur) for r in self.records], [r.n_own for r in self.records],
                         self.count_period) is not None

    @property
    def cold_cost(self) -> int:
        """What a full fit costs, in intervals (~40 µs each)."""
        return len(self.records)

    def cold(self, now_ns: int, unseen: float | None) -> None:
        """Fit the clock as the batch does (``clock_of``) on the window's intervals."""
        self.set_unseen(unseen)
        durations = [r.dur for r in self.records]
        clock, counts = clock_of(durations, self.unseen, self.rate_hz, optimizer_marked(r.step for r in self.records))
        self.clock = clock
        self.last_cold_ns, self.cold_m, self.cold_due, self.fitted = now_ns, len(durations), False, True
        self.next_warm_ns = now_ns + int(REFIT_S * NS * (1 + self.stagger))
        # (two periods, ``clock.by_regimes``: its counts stand, the newest side's period counts what comes)
        period = clock.period_ns if clock.shift_ns is None else clock.shift_ns[1]
        self._recount_own(period, counts, comb=clock.method == "comb")

    def _warm(self, now_ns: int, unseen: float | None) -> None:
        """Check the carried clock on the window's intervals; a failed check asks for a full fit."""
        self.next_warm_ns = now_ns + int(REFIT_S * NS)
        self.set_unseen(unseen)
        m = len(self.records)
        wraps = m >= 2 and self.unseen is not None and self.unseen <= MAX_UNSEEN
        if (self.clock.method == "wraps") != wraps or not self.inl_n or self.count_period is None:
            self.cold_due = True
            return
        period = self.inl_ns / self.inl_n
        if abs(period / self.count_period - 1) > RECOUNT:
            self._recount_own(period, comb=not wraps)
            period = self.inl_ns / self.inl_n if self.inl_n else period
        durs = [float(r.dur) for r in self.records]
        jit = jitter(durs, period, self.rate_hz)
        self.spread = math.hypot(jit, self.interval_ns)
        if not wraps and (self.trig_period is None or abs(period / self.trig_period - 1) > RETRIG):
            self.trig_period = period
            self.trig_sums = [0.0] * 6
            for record in self.records:
                record.trig = _trig(record.dur, period)
                for k, v in enumerate(record.trig):
                    self.trig_sums[k] += v
        if self.mode == "joint" and self.joint_period is not None:
            near = abs(self.joint_period / period - 1) <= SAME_PERIOD
            self.joint_spread = self.spread if near else count_spread(durs, self.joint_period, self.rate_hz)
        self._counters()
        if self.certain:
            self.spans.forget_usual()
            for record in self.records:
                if record.long_spans:
                    swallowing, held = self.spans.swallowing(record.long_spans)
                    self.restep(record, replace(record.step, swallowing=swallowing, held=held))
        ok = self.whole > 0 and pins_median(self.whole, self.own_total, jit, period)
        ok = ok and not (wraps and split_pairs(durs, period)   # clock_of's check, warm
                         and not optimizer_marked(r.step for r in self.records))
        r_bar = None
        if not wraps:
            r_bar = math.hypot(self.trig_sums[0], self.trig_sums[1]) / m
            longest = sorted(durs)[m // 10] * 1.2 + 2 * self.interval_ns   # fit_period's longest candidate
            harmonic = any(k * period <= longest and HARMONIC_KEEP * r_bar <= math.hypot(
                self.trig_sums[2 * k - 2], self.trig_sums[2 * k - 1]) / m for k in (2, 3))
            ok = (ok and not harmonic and period >= MIN_SAMPLES_PER_STEP * self.interval_ns
                  and r_bar >= MIN_CONCENTRATION and m * r_bar * r_bar >= MIN_RAYLEIGH_Z
                  and not too_ambiguous(self.ambiguous, m, self.short_ambiguous, self.short, self.own_total))
        # ...and no change of the steps' length within the window (``period.shift_cut``), which a full
        # fit counts on each side
        ok = ok and shift_cut(durs, [r.n_own for r in self.records], period) is None
        if not ok:
            self.cold_due = True
            return
        self.clock = StepClock("wraps" if wraps else "comb", period, m / self.own_total, r_bar, unseen=self.unseen)

    # --- counting on a shared clock ----------------------------------------------------------

    def count_own(self) -> None:
        if self.mode != "own":
            joint, self.mode = self.mode == "joint", "own"
            self._recount(lambda r: r.n_own, force=joint)

    def count_ones(self) -> None:
        if self.mode != "ones":
            self.mode = "ones"
            self._recount(lambda r: 1)

    def count_joint(self, period: float) -> None:
        """Count the intervals in steps of another rank's ``period`` (synchronized ranks)."""
        if self.mode == "joint" and self.joint_period and abs(period / self.joint_period - 1) <= RECOUNT:
            return
        joined, self.mode = self.mode != "joint", "joint"
        self.joint_period = period
        near = self.count_period is not None and abs(period / self.count_period - 1) <= SAME_PERIOD
        self.joint_spread = self.spread if near else count_spread([float(r.dur) for r in self.records], period,
                                                                   self.rate_hz)
        self._counters()
        count = self.joint_count
        self._recount(lambda r: r.n_own if count is None else count(r.dur)[0], force=joined)

    @property
    def quality(self) -> tuple[float, float, float]:
        """As ``sync._quality``: the rank whose counts need no draw, then the one that shows its loop
        best, sets a shared clock."""
        unseen = self.clock.unseen if self.clock.unseen is not None else 1.0
        return (sure_counts(unseen, self.ratios), -unseen, len(self.records) * (self.clock.concentration or 1.0) ** 2)

    @property
    def visible(self) -> float:
        return len(self.records) / self.n_total if self.n_total else 1.0

    # --- what the batch gives ----------------------------------------------------------------

    def _expansion(self) -> Expansion:
        """``clock.missed_share``, ``chance_cut``, ``one_outside``, ``slow_share`` and ``one_work`` of the
        intervals' own counts (as build_timeline expands them)."""
        unseen = self._unseen()
        missed = missed_share(self.counted, self.counted_steps, unseen)
        outside = steady_share(self.one_shares) if self.counted_steps > len(self.records) else None
        sparse = self.sparse
        # (e^-λ as of this tick only where some interval counts several steps: else there is none)
        holding = (slow_share(self.counted, self._unseen_now(), (sparse[1], sparse[2], sparse[0]))
                   if self.counted_steps > len(self.records) else None)
        several = self.counted_steps > len(self.records)
        work = (work_of(self.one_works, self.one_on_cpu, ((r.step, r.n) for r in self.several.values()))
                if several else None)
        return missed, chance_cut(self.counted, self.counted_steps, missed, unseen), outside, holding, work

    def settle(self) -> None:
        """Expand every interval again where the counts seen so far move how they expand."""
        if self._expansion() != self.expansion:
            self._reexpand()

    def steps(self) -> LogView[Step]:
        self.settle()
        if not self.flat_ok:
            self.flat.reset(chain.from_iterable(r.steps for r in self.records))
            self.flat_ok = True
        return self.flat.view()

    def median_step(self) -> float:
        self.settle()
        return self.sums.median()

    def guesses(self) -> Guesses:
        """``clock.guesses`` of the intervals as they are expanded (as build_timeline takes them),
        worked out once per change of the intervals or their expansion."""
        self.settle()
        missed, cut, outside, holding, work = self.expansion
        if holding is None:
            return 0, 0
        key = (self.rid, len(self.records), self.counted_steps, self.sums.n_steps, self.expansion)
        if self._guesses is None or self._guesses[0] != key:
            counted = ((r.step, r.n) for r in self.records)
            self._guesses = (key, guesses(counted, self._unseen(), cut, missed, outside, holding, work))
        return self._guesses[1]

    def totals(self, step_ms: float | None) -> StepTotals:
        """The running sums over the window's steps (``steptime.step_totals``)."""
        self.settle()
        return self.sums.totals(step_ms, (s for r in self.records for s in r.steps))
