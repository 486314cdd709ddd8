"""The step engine's live form: one process's timeline, carried from tick to tick, every span
read once (the batch form: batch_timeline.py).

``build_timeline`` reads a whole window each time it is asked. A live view asks every second
for a 30 s window that moved by one second, so nearly all of that work (64 ranks: ~0.7 s a
tick) is repeated. A RankTracker keeps one process's window and moves it instead:

- **Spans, stacks and the training thread** are read and kept by the SpanWindow it extends
  (live_spans.py): every span read once, each distinct stack looked at once while it is in the
  window (live_stacks.py), the thread chosen from running per-thread sums.
- **The loop frame** is carried and looked for again every LOOP_RECHECK_S (more often while
  the window is young or none was found); near the tie between nested loops the current one
  stays (LOOP_TIE_MARGIN). A new thread or loop rebuilds the rank's state from its window.
- **Step boundaries** are found as spans arrive. The open interval since the last boundary
  is carried; each interval is measured once, when it closes (its blocked time once the CPU
  counter has reached its end: live_counters.py), and leaves when its first boundary leaves the window.
- **The step clock, the counts and the step statistics** are kept by an IntervalWindow
  (live_intervals.py): counted as they close on a carried clock, checked warm every few seconds,
  fitted like the batch when a check fails; running sums for ``steptime.StepTotals``.
- **Hot frames** (shares of the window per function) are worked out from the per-stack times
  every HOT_S (~15 rows a rank: worth not redoing every second).
- **What a tick hands out** (segments, boundaries, intervals, steps) are views of append-only
  logs (movinglog.py), not copies: a tick's cost stays with what changed, not with the window.

The schedules (warm checks, loop checks, hot frames) run on data time, the newest span's end.

Where the result differs from the batch (tests/test_tracker.py holds it to the batch): the
part of the window's first span before the window counts for the thread and loop choices and
the dominant line (the batch clips it); the thread and loop keep their choice near ties; a
clock that passes its warm checks is refined, not fitted afresh, and is checked every few
seconds, not every tick; the hot frames are up to HOT_S old; an interval's ``swallowing`` (a
sampler drop-out) is judged only while it can matter (the chance of an unseen boundary is measured,
``expand``); and a
synchronized rank's intervals are counted on the reference's period, not aligned with its
boundaries (sync.share_tracked).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from traceml_attach.ingest.model import Span, Stack, os_pid
from traceml_attach.ingest.stream import Recording
from traceml_attach.policy import MAX_SPAN_GAP_INTERVALS, MIN_INTERVALS, SWALLOW_RATIO
from traceml_attach.steps.batch_timeline import (
    ASIDE_LABELS,
    CYCLE_RANK,
    SYNC_PHASES,
    Place,
    SegmentView,
    Timeline,
    blocked_through,
    framework_of,
    inside,
    loop_feeding,
    outer_back,
    returns,
    sampler_dropped,
    stalled,
)
from traceml_attach.steps.classify import Rules, classify
from traceml_attach.steps.clock import StepClock, edge_steps, lengths_say_slow, typical_step
from traceml_attach.steps.hotframes import HotFrame, hot_frames_of
from traceml_attach.steps.live_counters import CounterJoin
from traceml_attach.steps.live_intervals import IntervalWindow
from traceml_attach.steps.live_spans import SpanWindow
from traceml_attach.steps.live_stacks import StackInfo, dominant_place, pick_loop, visits_of, where, window_outputs
from traceml_attach.steps.loopframe import LoopFrame, find_loop, loop_candidates, thread_label
from traceml_attach.steps.movinglog import Log
from traceml_attach.steps.period import counted_at, visit_samples, visits_vary
from traceml_attach.steps.phases import PHASES
from traceml_attach.steps.steptime import StepTotals

NS = 1_000_000_000
LOOP_RECHECK_S = 60.0      # the loop frame is looked for again this often...
NO_LOOP_RECHECK_S = 5.0    # ...and at most this long apart while none was found
HOT_S = 5.0                # the hot frames (shares of the 30 s window) are worked out again this often
_NO_PHASES = dict.fromkeys(PHASES, 0)


class RankTracker(SpanWindow):
    """One process's window, moved tick by tick (see the module doc)."""

    def __init__(self, pid: int, rules: Rules, rate_hz: int, stagger: float = 0.0) -> None:
        super().__init__(pid, rules)
        self.rate_hz = rate_hz
        self.hole_ns = MAX_SPAN_GAP_INTERVALS * int(1e9 / max(rate_hz, 1))
        self.long_ns = 8 * 1e9 / max(rate_hz, 1)   # a span this long may have swallowed a boundary
        self.stagger = stagger % 1.0
        self.loop: LoopFrame | None = None
        self.epoch = 0
        self.next_loop_ns: int | None = None
        self.loop_checks = 0
        self.counters = CounterJoin()        # the main thread's CPU counters, joined to the intervals
        self.sampler = CounterJoin()         # its py-spy recorders' (whether one waited for a core)
        self.sources: Mapping[str, str] = {}    # the job's own files (the loop's data flow: dataflow.py)
        self.usual: dict[int, float] = {}    # id(stack) -> its median span on the thread
        self._work: tuple[tuple[int, int], float | None] | None = None   # (window key, step_work)
        self._out: tuple = ()                # this tick's clipped edges, per-stack times and wait labels
        self._joint: tuple | None = None     # (what it was made of, the shared clock as this rank's)
        self._hot: dict[str, list[HotFrame]] | None = None
        self._hot_due = 0
        self._hot_epoch = -1
        self._counted: tuple[tuple, tuple[bool, bool, int, bool]] | None = None
        self._reset_thread()

    def _reset_thread(self) -> None:
        for info in self.stacks.values():
            info.ns = info.segs = 0
        self.seg_count = 0                         # spans of the training thread read (its segments)
        self.seg_ns = 0                            # their time in the window
        self.prev_end: int | None = None
        self.last_path: tuple[tuple[str, str], ...] | None = None
        self.stuck_since: int | None = None
        self.dominant: Place | None = None
        self.visits: deque[list[int]] = deque()   # [end, ns] of each visit outside the dominant place
        self.visit_ns = 0
        self.in_visit = False
        self.prev_line: int | None = None
        self.prev_rank: int | None = None          # the last work phase seen on prev_line (CYCLE_RANK)
        self.prev_loop_end = 0
        self.above: Stack | None = None             # the frames above the loop frame at its last visit
        self.back_at: int | None = None             # the first span since then where one went back (outer_back)
        self.back_spans: list[tuple[Span, StackInfo]] = []   # the spans since back_at
        self.back_hole = False                      # a hole since back_at
        self.bounds: Log[int] = Log()
        self.bound_prev: Log[int] = Log()          # end of the loop-frame span before each bound
        self.open_start: int | None = None
        self.open_spans: list[tuple[Span, StackInfo]] = []
        self.open_hole = False
        self.counters.pending = []
        self.usual = {}
        self.window = IntervalWindow(self.rate_hz, self.stagger, self)

    # --- reading spans -----------------------------------------------------------------------

    def advance(self, rec: Recording, start_ns: int, end_ns: int) -> None:
        """Read the new spans that start before end_ns, forget those that ended by start_ns,
        and keep the thread, loop and clock up to date."""
        self.counters.rows = rec.cpu.get(self.pid, [])
        self.sampler.rows = rec.sampler_cpu.get(self.pid, [])
        self.sources = rec.sources
        mine = self.read_new(rec, start_ns, end_ns)
        if mine:
            self._segments(mine)
        grew = bool(mine)
        self._expire(start_ns)
        self._choose_thread()
        young = self.first_ns is not None and end_ns - self.first_ns < LOOP_RECHECK_S * NS
        if self.next_loop_ns is None or end_ns >= self.next_loop_ns or (self.loop is None and grew and young):
            self._check_loop()
        if self.counters.pending:
            self.counters.resolve(self.window, end_ns)
        self.window.keep(end_ns, self._measure_unseen)

    def _classify(self, info: StackInfo) -> None:
        loop = self.loop
        verdict = classify(info.stack, self.rules, loop.depth if loop else None, loop_feeding(loop, self.sources))
        info.phase, info.label, info.decider, info.framework = verdict.phase, verdict.label, verdict.depth, \
            verdict.framework
        info.depth_line = info.loop_line = None
        info.rank = CYCLE_RANK.get(verdict.phase)
        if loop is not None and len(info.stack) > loop.depth:
            frame = info.stack[loop.depth]
            info.depth_line = frame.line
            if frame.name == loop.name and frame.file == loop.file:
                info.loop_line = frame.line
        info.place = (info.depth_line, info.rank)
        info.epoch = self.epoch

    def _segments(self, items: Iterable[tuple[Span, StackInfo]]) -> None:
        """Spans of the training thread in time order (its segments): the holes between them,
        the call path, the visits outside the dominant place and the step boundaries, as
        ``timeline._holes``, ``_stuck_since``, ``_unseen`` and ``_boundaries`` find them."""
        epoch, loop, dominant, hole_ns, start_ns = self.epoch, self.loop, self.dominant, self.hole_ns, self.start_ns
        prev_end, last_path, stuck = self.prev_end, self.last_path, self.stuck_since
        visits, in_visit, prev_line, prev_loop_end = self.visits, self.in_visit, self.prev_line, self.prev_loop_end
        prev_rank, above, back_at, back_spans = self.prev_rank, self.above, self.back_at, self.back_spans
        back_hole = self.back_hole
        open_start, open_spans, open_hole = self.open_start, self.open_spans, self.open_hole
        count = seg_ns = visit_ns = 0
        for span, info in items:
            if info.epoch != epoch:
                self._classify(info)
            ts, dur = span.ts_ns, span.dur_ns
            end = ts + dur
            count += 1
            seg_ns += dur
            info.ns += dur
            info.segs += 1
            if prev_end is not None and ts - prev_end > hole_ns:
                # the interval across a hole is dropped: the open one, or the one from back_at on
                if back_at is None:
                    open_hole = True
                else:
                    back_hole = True
            prev_end = end
            path = info.path
            if path is not last_path and path != last_path:
                stuck = ts
            last_path = path
            if loop is None:
                continue
            if inside(info.place, dominant):
                in_visit = False
            elif in_visit:
                visit = visits[-1]
                visit[0] = end
                visit[1] += dur
                visit_ns += dur
            else:
                visits.append([end, dur])
                visit_ns += dur
                in_visit = True
            line = info.loop_line
            if line is not None:
                back, rank = returns(line, info.rank, prev_line, prev_rank)
                if back or back_at is not None:   # a return to the cycle's start: a boundary
                    at = ts if back_at is None else back_at
                    self.bounds.append(at)
                    self.bound_prev.append(prev_loop_end)
                    if open_start is not None and not open_hole and open_start >= start_ns:
                        self._close(open_start, at, open_spans)
                    open_start, open_spans, open_hole = at, back_spans, back_hole
                prev_line, prev_rank, prev_loop_end = line, rank, end
                above, back_at, back_spans, back_hole = info.stack, None, [], False
            elif above is not None:
                if back_at is None and outer_back(info.stack, loop.depth, above):
                    back_at = ts
                if back_at is not None:
                    back_spans.append((span, info))
            if open_start is not None:
                open_spans.append((span, info))
        self.seg_count += count
        self.seg_ns += seg_ns
        self.visit_ns += visit_ns
        self.prev_end, self.last_path, self.stuck_since = prev_end, last_path, stuck
        self.in_visit, self.prev_line, self.prev_loop_end = in_visit, prev_line, prev_loop_end
        self.prev_rank, self.above, self.back_at, self.back_spans = prev_rank, above, back_at, back_spans
        self.back_hole = back_hole
        self.open_start, self.open_spans, self.open_hole = open_start, open_spans, open_hole

    def _expire(self, start_ns: int) -> None:
        self.seg_ns -= self._expire_spans(start_ns)
        while self.visits and self.visits[0][0] <= start_ns:
            self.visit_ns -= self.visits.popleft()[1]
        # a boundary counts while the loop-frame span before it is in the window (as the batch's)
        while self.bounds and (self.bounds[0] < start_ns or self.bound_prev[0] <= start_ns):
            self.bounds.popleft()
            self.bound_prev.popleft()
        self.window.drop_before(self.bounds[0] if self.bounds else None)
        if self.open_start is not None and self.open_start < start_ns:
            self.open_spans = []   # it will close outside the window: not one of its intervals

    # --- thread and loop ---------------------------------------------------------------------

    def _choose_thread(self) -> None:
        best = self._training_thread()
        if best != self.tid:
            self.tid = best
            self.loop = find_loop(self.by_tid.get(best, ()), self.rules.loops) if best is not None else None
            self.epoch += 1
            self._rebuild()
            self.loop_checks = 0
            self._schedule_loop()

    def _schedule_loop(self) -> None:
        """A loop found is looked for again after 2, 4, 8, 16, 32 s, then every LOOP_RECHECK_S;
        none found, after 1 s, backing off to NO_LOOP_RECHECK_S."""
        if self.loop is not None:
            every = min(LOOP_RECHECK_S, 2.0 ** self.loop_checks)
        else:
            every = min(NO_LOOP_RECHECK_S, 1.0 + 0.25 * self.loop_checks)
        self.loop_checks += 1
        self.next_loop_ns = self.end_ns + int(every * NS * (0.75 + 0.5 * self.stagger))

    def _check_loop(self) -> None:
        if self.tid is not None:
            weighted = [(info.stack, info.ns) for info in self.stacks.values() if info.segs]
            loop = pick_loop(loop_candidates(self.by_tid.get(self.tid, ()), weighted, self.rules.loops), self.loop)
            if where(loop) != where(self.loop):
                self.loop = loop
                self.epoch += 1
                self._rebuild()
        self._schedule_loop()

    def _rebuild(self) -> None:
        """The training thread's state again from the spans of its window (a new thread or loop)."""
        self._reset_thread()
        stacks = self.stacks
        self._segments([(span, stacks[id(span.stack)]) for span in self._thread_spans()])
        self._expire(self.start_ns)
        self.dominant = dominant_place(self.stacks)
        self._rebuild_visits()
        self._reoutside()

    # --- intervals ---------------------------------------------------------------------------

    def _uses_counter(self) -> bool:
        """The agent reads the main thread's CPU counters: they count for the main thread only."""
        info = self.names.get(self.tid) if self.tid is not None else None
        return bool(self.counters.rows) and info is not None and info.os_tid == os_pid(self.pid)

    def _close(self, start: int, end: int, spans: list[tuple[Span, StackInfo]]) -> None:
        """An interval between two wraps, measured as ``timeline._intervals`` does."""
        phases = _NO_PHASES.copy()
        aside = 0
        counter = self._uses_counter()
        sync = []
        long_spans = []
        long_ns = self.long_ns
        dominant = self.dominant
        away = 0
        for span, info in spans:
            ts, dur = span.ts_ns, span.dur_ns
            lo = ts if ts > start else start
            hi = ts + dur if ts + dur < end else end
            if dur >= long_ns:
                long_spans.append((id(span.stack), dur, ts))
            if hi > lo:
                phases[info.phase] += hi - lo
                if not inside(info.place, dominant):
                    away += hi - lo
                if info.phase == "wait" and info.label in ASIDE_LABELS:
                    aside += hi - lo
                if counter and (info.phase, info.label) in SYNC_PHASES:
                    sync.append((lo, hi, info.phase))
        pending = counter and self.counters.waits(end, self.end_ns)
        blocked = self.counters.blocked(sync) if counter and not pending else None
        work = self.counters.on(start, end) if counter and not pending and not aside else None
        record = self.window.add(start, end, phases, blocked, long_spans, sync, pending, aside, away,
                                 None if work is None else int(work), self.stalled(start, end))
        if pending:
            self.counters.pending.append(record)

    def swallowing(self, long_spans: Sequence[tuple[int, int, int]]) -> tuple[bool, bool]:
        """(swallowing, held) as ``Step`` has them: a span far longer than its stack's usual span
        (its median on the thread), in which the thread did a step's work, and the sampler waited
        for a core (or its counters are unknown) or not, as in ``timeline._intervals``; the medians
        are kept until ``forget_usual``."""
        counter = self._uses_counter()
        sampler = self.sampler if self.sampler.rows else None
        held = False
        for key, ns, ts in long_spans:
            usual = self.usual.get(key)
            if usual is None:
                durs = [span.dur_ns for span in self._thread_spans() if id(span.stack) == key]
                usual = self.usual[key] = statistics.median(durs) if durs else float(ns)
            if ns >= SWALLOW_RATIO * usual and not (
                    counter and blocked_through(self.counters.on(ts, ts + ns), self._step_work())):
                if sampler_dropped(sampler.queued(ts, ts + ns) if sampler else None, ns - usual):
                    return True, False
                held = True
        return False, held

    def stalled(self, start_ns: int, end_ns: int) -> bool:
        """``Step.stalled`` as ``timeline._intervals`` has it."""
        return bool(self.sampler.rows) and stalled(self.sampler.queued(start_ns, end_ns), self.rate_hz)

    def _step_work(self) -> float | None:
        """``CpuCounter.step_work`` over the window's intervals, kept while they stay the same."""
        records = self.window.records
        key = (self.window.rid, len(records))
        if self._work is None or self._work[0] != key:
            work = [w for w in (self.counters.on(r.step.start_ns, r.step.end_ns) for r in records) if w is not None]
            self._work = (key, statistics.median(work) if work else None)
        return self._work[1]

    def forget_usual(self) -> None:
        self.usual = {}

    # --- the chance that a boundary goes unseen ------------------------------------------------

    def _rebuild_visits(self) -> None:
        if self.loop is None:
            self.visits, self.visit_ns, self.in_visit = deque(), 0, False
        else:
            self.visits, self.visit_ns, self.in_visit = visits_of(self._thread_spans(), self.stacks, self.dominant)

    def _reoutside(self) -> None:
        """Each interval's time outside the dominant place again, from the window's spans, where
        the dominant place changed since it closed (as the batch measures it: ``clock.Step``)."""
        records = self.window.records
        spans = self._thread_spans()
        stacks, dominant = self.stacks, self.dominant
        i, n = 0, len(spans)
        for record in list(records):
            start, end = record.step.start_ns, record.step.end_ns
            while i < n and spans[i].end_ns <= start:
                i += 1
            away, j = 0, i
            while j < n and spans[j].ts_ns < end:
                span = spans[j]
                if not inside(stacks[id(span.stack)].place, dominant):
                    away += min(span.end_ns, end) - max(span.ts_ns, start)
                j += 1
            if away != record.step.outside_ns:
                self.window.restep(record, replace(record.step, outside_ns=away))

    def _measure_unseen(self) -> float | None:
        """e^-λ, as ``timeline._unseen``, from the running visits outside the dominant place
        (the window asks when it looks at its clock)."""
        dominant = dominant_place(self.stacks)
        if dominant != self.dominant:
            self.dominant = dominant
            self._rebuild_visits()
            self._reoutside()
        if self.loop is None or len(self.visits) < 2:
            return None
        mean_samples = self.visit_ns / len(self.visits) * self.rate_hz / 1e9
        return math.exp(-visit_samples(mean_samples))

    # --- the window, as the batch gives it ----------------------------------------------------

    def _outputs(self) -> tuple:
        """This tick's clipped edges, per-stack times, verdicts and wait labels (once a tick)."""
        key = (self.start_ns, self.end_ns, self.seg_count, self.epoch)
        if not self._out or self._out[0] != key:
            self._out = (key, *window_outputs(self.stacks, self._thread_spans(), self.start_ns, self.end_ns))
        return self._out

    def timeline(self, clock: StepClock | None = None) -> Timeline:
        """The window's Timeline: on the rank's own clock, or on ``clock`` (a shared one)."""
        _, head_cut, tail_cut, _, labels, verdicts, frameworks, traits, stack_labels = self._outputs()
        spans = self._thread_spans().view()
        first = last = coverage = stuck = None
        if spans:
            first, last = spans[0].ts_ns + head_cut, spans[-1].end_ns - tail_cut
            coverage = min(1.0, (self.seg_ns - head_cut - tail_cut) / max(last - first, 1))
            stuck = max(self.stuck_since or first, first)
        if clock is None:
            clock = self.own_clock(first, last)
        loop = self.loop
        if loop is not None and loop.wraps != len(self.bounds):
            loop = self.loop = replace(loop, wraps=len(self.bounds))
        tid = self.tid
        segments = SegmentView(spans, verdicts, self.start_ns, self.end_ns, stack_labels)
        return Timeline(self.pid, tid, thread_label(self.names.get(tid) if tid is not None else None, self.pid),
                        loop, segments, self.window.steps(), clock,
                        dict(labels), self.bounds.view(), stuck, last, coverage, self.window.intervals.view(),
                        self.rate_hz, first, framework_of(loop, frameworks), traits=traits,
                        guessed=self.window.guesses())

    def own_clock(self, first: int | None, last: int | None) -> StepClock:
        clock = self.window.clock
        if not clock.known or clock.period_ns is None:
            return clock
        typical = typical_step(clock, self.window.median_step)   # as build_timeline takes it
        edges = edge_steps(self.bounds, first, last, clock.period_ns, self.rate_hz, clock.unseen, clock.shift_ns)
        if clock.typical_ns != typical or clock.edge_steps != edges:
            clock = self.window.clock = replace(clock, typical_ns=typical, edge_steps=edges)
        return clock

    def joint_clock(self, reference: StepClock) -> StepClock:
        """This rank's clock on a synchronized job's shared one (as ``sync.share_period``)."""
        assert reference.period_ns is not None
        _, head_cut, tail_cut, *_ = self._outputs()
        spans = self._thread_spans()
        first = spans[0].ts_ns + head_cut if spans else None
        last = spans[-1].end_ns - tail_cut if spans else None
        key = (reference, self.window.visible, self.window.clock.unseen,
               edge_steps(self.bounds, first, last, reference.period_ns, self.rate_hz, self.window.clock.unseen))
        if self._joint is None or self._joint[0] != key:
            self._joint = (key, reference.shared(key[1], key[2], key[3]))
        return self._joint[1]

    def totals(self, step_ms: float | None) -> StepTotals:
        return self.window.totals(step_ms)

    def hot(self, top: int = 5) -> dict[str, list[HotFrame]]:
        """``hot_frames`` of the window, from the per-stack times; worked out again every HOT_S
        (staggered over the ranks) or when the thread or loop changed."""
        if self._hot is None or self.end_ns >= self._hot_due or self._hot_epoch != self.epoch:
            self._hot = hot_frames_of(self._outputs()[3], top)
            self._hot_epoch = self.epoch
            first = self._hot_due == 0
            self._hot_due = self.end_ns + int(HOT_S * NS * (self.stagger if first else 1.0))
        return self._hot

    # --- what the analyzer asks -----------------------------------------------------------------

    @property
    def clock(self) -> StepClock:
        return self.window.clock

    @property
    def intervals(self) -> int:
        return len(self.window)

    @property
    def quality(self) -> tuple[float, float, float]:
        return self.window.quality

    def counted_at(self, period: float
                   ) -> tuple[int, float | None, int, Callable[[bool], tuple[bool, bool, int, bool]]]:
        """``sync.slow_not_unseen``'s view of this rank's intervals at ``period`` (``sync._counted``
        for a batch timeline): the steps they count as now (on the shared clock) for the screen;
        the rest worked out only when asked, and kept while the intervals, their e^-λ, the visits
        and the period stay the same."""
        records, unseen = self.window.records, self.clock.unseen

        def exact(lengths: bool) -> tuple[bool, bool, int, bool]:
            key = (period, unseen, self.rate_hz, len(records), records[0].rid if records else None,
                   records[-1].rid if records else None, len(self.visits), self.visit_ns, lengths)
            if self._counted is None or self._counted[0] != key:
                vary = visits_vary([ns for _, ns in self.visits], self.rate_hz)
                durations = [float(r.dur) for r in records]
                if len(records) >= MIN_INTERVALS and unseen is not None:
                    unsure, steps, counts = counted_at(durations, period, unseen, self.rate_hz)
                    short = lengths and lengths_say_slow([r.step for r in records], durations, counts)
                else:
                    unsure, steps, short = False, len(records), False
                self._counted = key, (vary, unsure, steps, short)
            return self._counted[1]

        return len(records), unseen, self.window.n_total, exact

    def count_own(self) -> None:
        self.window.count_own()

    def count_ones(self) -> None:
        self.window.count_ones()

    def count_joint(self, period: float) -> None:
        self.window.count_joint(period)

    @property
    def fit_now(self) -> bool:
        """The clock was never fitted for this thread and loop: fit it whatever it costs."""
        return not self.window.fitted

    @property
    def cold_due(self) -> bool:
        return self.window.cold_due

    @property
    def cold_cost(self) -> int:
        return self.window.cold_cost

    @property
    def last_cold_ns(self) -> int | None:
        return self.window.last_cold_ns

    def cold(self, now_ns: int) -> None:
        self.window.cold(now_ns, self._measure_unseen())
