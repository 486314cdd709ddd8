"""The step engine's batch form: from one process's sampled spans to classified steps, a pure
function of a window (its live form, carried from tick to tick: live_tracker.py and
live_intervals.py, which share this module's data types and rules).

1. The training thread, and
2. the loop frame on it, are found as loopframe.py says.
3. A return to the start of the step's cycle marks a step boundary: the loop frame's line
   going backwards (a wrap: ``for`` back to its header), or, on one line of it, the phases
   going backwards (backward, then forward again: a ``training_step(...)`` line that holds
   nearly the whole step, a micro-batch loop inside a call). Sampling misses the returns of
   steps whose non-dominant part fell between two samples. The
   intervals between the wraps that were seen are counted in steps of the period fitted
   to them (``period.fit_period``); an interval of n steps gives n steps, each with 1/n of
   its phase times. When no period can be established the step time is unknown, and says
   why (``StepClock``).
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections import Counter
from collections.abc import Container, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import overload

from traceml_attach.ingest.model import Span, Stack, ThreadInfo, os_pid
from traceml_attach.policy import (
    BLUR_MOVES,
    BLUR_SAMPLES,
    BLUR_SKEW,
    BLUR_UNSEEN,
    DEFAULT_RATE_POLICY,
    DROPOUT_WAIT,
    MAX_SPAN_GAP_INTERVALS,
    MAX_STEP_ERROR,
    MAX_UNSEEN,
    SWALLOW_RATIO,
    SWALLOW_WORK,
)
from traceml_attach.steps.classify import Rules, classifier
from traceml_attach.steps.clock import (
    IRREGULAR,
    Step,
    StepClock,
    clock_of,
    edge_steps,
    expand,
    expand_counted,
    median_holds,
    optimizer_marked,
    typical_step,
    uneven_clock,
)
from traceml_attach.steps.dataflow import feeding_lines
from traceml_attach.steps.loopframe import LoopFrame, find_loop, pick_thread, stack_traits, thread_label
from traceml_attach.steps.period import blur_moves, deblurred_moves, visit_samples, visits_vary
from traceml_attach.steps.phases import PHASES

# Wait set aside from training: an iteration that evaluates or checkpoints is one (long) step, and
# its evaluation is no training steps' time
ASIDE_LABELS = frozenset({"eval", "checkpoint"})


@dataclass(frozen=True, slots=True)   # a live window holds thousands
class Segment:
    ts_ns: int
    dur_ns: int
    phase: str
    label: str | None
    span: Span
    decider: int | None  # index of the deciding frame in span.stack


class SegmentView(Sequence[Segment]):
    """A live window's segments, made on demand from its spans (a live tick reads two of them):
    each span with its stack's verdict, the first and last clipped to [start_ns, end_ns)."""

    __slots__ = ("end_ns", "spans", "stack_labels", "start_ns", "verdicts")

    def __init__(self, spans: Sequence[Span], verdicts: dict[int, tuple[str, str | None, int | None]],
                 start_ns: int, end_ns: int, stack_labels: Sequence[tuple[str, Stack, int]]) -> None:
        self.spans = spans
        self.verdicts = verdicts   # id(stack) -> (phase, label, deciding frame)
        self.start_ns, self.end_ns = start_ns, end_ns
        # each labelled stack's (label, stack, its time in the window): the tracker keeps them
        self.stack_labels = stack_labels

    def __len__(self) -> int:
        return len(self.spans)

    def _segment(self, span: Span) -> Segment:
        phase, label, decider = self.verdicts[id(span.stack)]
        lo, hi = max(span.ts_ns, self.start_ns), min(span.end_ns, self.end_ns)
        if (lo, hi) != (span.ts_ns, span.end_ns):
            span = Span(span.pid, span.tid, lo, hi - lo, span.stack)
        return Segment(span.ts_ns, span.dur_ns, phase, label, span, decider)

    @overload
    def __getitem__(self, index: int) -> Segment: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Segment, ...]: ...

    def __getitem__(self, index: int | slice) -> Segment | tuple[Segment, ...]:
        if isinstance(index, slice):
            return tuple(self._segment(span) for span in self.spans[index])
        return self._segment(self.spans[index])


def labelled(segments: Sequence[Segment], labels: Container[str | None]) -> Iterator[tuple[str | None, Stack, int]]:
    """The label, stack and time in the window of each segment whose label is one of ``labels``; a
    SegmentView's per stack, from the times its tracker keeps (a live window at 64 ranks holds
    17,000 spans a rank), which sum as its segments do."""
    if isinstance(segments, SegmentView):
        yield from (row for row in segments.stack_labels if row[0] in labels)
    else:
        yield from ((seg.label, seg.span.stack, seg.dur_ns) for seg in segments if seg.label in labels)


@dataclass(frozen=True)
class Timeline:
    pid: int
    tid: int | None
    thread_name: str | None
    loop: LoopFrame | None
    # tuples from build_timeline; views of a live tracker's logs (steps/movinglog.py) from it
    segments: Sequence[Segment]
    steps: Sequence[Step]               # intervals expanded by their step counts
    clock: StepClock
    wait_labels_ns: dict[str, int]
    bounds: Sequence[int] = ()
    stuck_since_ns: int | None = None   # start of the final run of one unchanging call path
    end_ns: int | None = None           # end of the sampled window for this thread
    coverage: float | None = None       # share of [start, end) with a stack seen on this thread
    intervals: Sequence[Step] = ()      # between consecutive observed wraps (none across a hole)
    rate_hz: int = 100
    start_seen_ns: int | None = None    # start of the sampled window for this thread
    framework: str | None = None        # the framework whose loop or code the thread runs (framework_of)
    micro_batches: int | None = 1       # per step (gradient accumulation: steps/accumulation.py); None: unknown
    traits: frozenset[str] = frozenset()   # what the thread's stacks show the job does (stack_traits)
    # with the clock unknown: the steps surely seen where the returns may be micro-batches (the
    # optimizer's visits, one per optimizer step: steps/accumulation.py), or where slow steps left
    # the median unknown (``judged_uneven``)
    step_floor: int | None = None
    # of its intervals, how many a draw decided the steps of, and the steps it added (clock.guesses)
    guessed: tuple[int, int] = (0, 0)
    # its visits outside the dominant place vary beyond sampling's spread (period.visits_vary)
    visits_vary: bool = False

    @property
    def step_count(self) -> int:
        if self.step_floor is not None:
            return self.step_floor
        return len(self.steps) + self.clock.edge_steps


# A span never outlasts the py-spy window that saw it (a few seconds); this bounds how far
# before a window's start a span that overlaps it can begin.
MAX_SPAN_NS = 30_000_000_000


def clip_spans(spans: Sequence[Span], start_ns: int, end_ns: int) -> list[Span]:
    """The parts of ``spans`` (in recording order: sorted by start) inside [start_ns, end_ns)."""
    first = bisect.bisect_left(spans, start_ns - MAX_SPAN_NS, key=lambda s: s.ts_ns)
    last = bisect.bisect_left(spans, end_ns, key=lambda s: s.ts_ns)
    out = []
    for s in spans[first:last]:
        lo, hi = max(s.ts_ns, start_ns), min(s.end_ns, end_ns)
        if hi > lo:
            out.append(s if (lo, hi) == (s.ts_ns, s.end_ns) else Span(s.pid, s.tid, lo, hi - lo, s.stack))
    return out


# Where each work phase falls in a step, for the returns that one line of the loop frame holds:
# backward, then input, h2d or forward again. Those three share a place: their order inside a step
# varies (``model.train()``, a Module method, runs before HF's ``_prepare_inputs``; nanoGPT fetches
# the next batch between forward and backward). The optimizer has none: ``zero_grad`` runs at either
# end of a step, or between forward and backward (Lightning's closure); nor have the waits.
CYCLE_RANK = {"input": 0, "h2d": 0, "forward": 0, "backward": 1}


def returns(line: int, rank: int | None, prev_line: int | None, prev_rank: int | None) -> tuple[bool, int | None]:
    """Whether a sample at ``line`` of the loop frame in phase ``rank`` (CYCLE_RANK) returns to
    the start of the step's cycle after one at ``prev_line``, ``prev_rank`` (the last work phase
    seen on that line): the line went backwards (a wrap), or on the same line the phases did; and
    the last work phase seen on ``line`` once this sample is counted (what ``prev_rank`` becomes)."""
    back = prev_line is not None and (line < prev_line or (
        line == prev_line and rank is not None and prev_rank is not None and rank < prev_rank))
    return back, rank if rank is not None else (prev_rank if line == prev_line else None)


def outer_back(stack: Stack, depth: int, above: Stack) -> bool:
    """Whether ``stack``, seen after ``above`` (the frames above the loop frame at its last visit),
    shows one of those frames gone back to an earlier line: the loop frame's call ended and an
    outer loop went round (a ``train_step(...)`` returned and its caller's ``for`` fetches the
    next batch). Compared from the outermost frame down, as far as the frames are the same."""
    for d in range(min(len(stack), depth)):
        frame, then = stack[d], above[d]
        if frame.name != then.name or frame.file != then.file or frame.line > then.line:
            return False
        if frame.line < then.line:
            return True
    return False


def _boundaries(segments: Sequence[Segment], loop: LoopFrame) -> list[int]:
    """Each return to the start of the step's cycle in the loop frame (``returns``), at the first
    sample of it: where the loop frame's call ended and an outer loop went round first, at that
    (``outer_back``: the batch fetched by the caller between two calls starts the step)."""
    out: list[int] = []
    prev_line: int | None = None
    prev_rank: int | None = None
    above: Stack | None = None   # the frames above the loop frame at its last visit
    back_at: int | None = None   # the first sample since then where one of them went back
    for seg in segments:
        st = seg.span.stack
        if len(st) > loop.depth and (st[loop.depth].name, st[loop.depth].file) == (loop.name, loop.file):
            line = st[loop.depth].line
            back, prev_rank = returns(line, CYCLE_RANK.get(seg.phase), prev_line, prev_rank)
            if back_at is not None:
                out.append(back_at)
            elif back:
                out.append(seg.ts_ns)
            prev_line, above, back_at = line, st, None
        elif above is not None and back_at is None and outer_back(st, loop.depth, above):
            back_at = seg.ts_ns
    return out


def _holes(spans: Sequence[Span], max_gap_ns: int) -> list[tuple[int, int]]:
    holes = []
    for a, b in itertools.pairwise(spans):
        if b.ts_ns - a.end_ns > max_gap_ns:
            holes.append((a.end_ns, b.ts_ns))
    return holes


SYNC_PHASES = {("backward", None), ("wait", "collective")}


class CpuCounter:
    """Interpolates a thread's cumulative busy time (on a CPU or waiting for one), and its time on
    a CPU alone."""

    def __init__(self, rows: Sequence[tuple[int, int, int]]) -> None:
        self.ts = [r[0] for r in rows]
        self.busy = [r[1] + r[2] for r in rows]
        self.on = [r[1] for r in rows]
        self.queued = [r[2] for r in rows]

    def at(self, ts_ns: int, series: Sequence[int] | None = None) -> float | None:
        values = self.busy if series is None else series
        if not self.ts or ts_ns < self.ts[0] or ts_ns > self.ts[-1]:
            return None
        i = bisect.bisect_left(self.ts, ts_ns)
        if self.ts[i] == ts_ns:
            return values[i]
        t0, t1, b0, b1 = self.ts[i - 1], self.ts[i], values[i - 1], values[i]
        return b0 + (b1 - b0) * (ts_ns - t0) / (t1 - t0)

    def step_work(self, bounds: Sequence[int]) -> float | None:
        """The thread's typical time on a CPU between consecutive ``bounds`` (the median)."""
        ons = [self.at(b, self.on) for b in bounds]
        work = [b - a for a, b in itertools.pairwise(ons) if a is not None and b is not None]
        return statistics.median(work) if work else None


def blocked_through(on_ns: float | None, step_on_ns: float | None) -> bool:
    """Whether a long span, through which the thread was on a CPU for ``on_ns``, did too little
    work to have hidden a step: less than the typical interval's (``step_on_ns``) times
    SWALLOW_WORK. It is then a real wait (blocked, or runnable behind other processes), not a
    sampler drop-out over steps. Without counters, it may be either."""
    return on_ns is not None and step_on_ns is not None and on_ns < SWALLOW_WORK * step_on_ns


def stalled(queued_ns: float | None, rate_hz: float) -> bool:
    """Whether the sampler waited for a core (``queued_ns``, from its counters) for a sample's
    interval or more: ``Step.stalled``."""
    return queued_ns is not None and queued_ns >= 1e9 / max(rate_hz, 1)


def sampler_dropped(queued_ns: float | None, excess_ns: float) -> bool:
    """Whether the sampler can have dropped out through a long span: it waited for a core for at
    least DROPOUT_WAIT of the span's time beyond its stack's usual span (``queued_ns``, from its
    own counters). py-spy runs ahead of the job; one that got a core sampled on, and the long span
    was the job's. Without its counters (streams recorded before them), it may have."""
    return queued_ns is None or queued_ns >= DROPOUT_WAIT * excess_ns


def _on(counter: CpuCounter | None, start_ns: int, end_ns: int) -> float | None:
    """The thread's time on a CPU through [start_ns, end_ns), where its counters cover it."""
    return _gain(counter, counter.on, start_ns, end_ns) if counter is not None else None


def _queued(counter: CpuCounter | None, start_ns: int, end_ns: int) -> float | None:
    """The time waiting for a CPU through [start_ns, end_ns), where the counters cover it."""
    return _gain(counter, counter.queued, start_ns, end_ns) if counter is not None else None


def _gain(counter: CpuCounter, series: Sequence[int], start_ns: int, end_ns: int) -> float | None:
    v0, v1 = counter.at(start_ns, series), counter.at(end_ns, series)
    return None if v0 is None or v1 is None else v1 - v0


def _around(rows: Sequence[tuple[int, int, int]], start_ns: int, end_ns: int) -> Sequence[tuple[int, int, int]]:
    """The counter rows (in time order) inside [start_ns, end_ns] and one on each side, to
    interpolate at the edges: a live tick reads 30 s of a session's 50 rows a second."""
    lo = max(bisect.bisect_left(rows, start_ns, key=lambda r: r[0]) - 1, 0)
    hi = bisect.bisect_right(rows, end_ns, key=lambda r: r[0]) + 1
    return rows[lo:hi]


def _coverage(mine: Sequence[Span]) -> float | None:
    if not mine:
        return None
    covered = sum(s.dur_ns for s in mine)
    return min(1.0, covered / max(mine[-1].end_ns - mine[0].ts_ns, 1))


def _stuck_since(mine: Sequence[Span]) -> int | None:
    if not mine:
        return None
    def path(span: Span) -> tuple[tuple[str, str], ...]:
        return tuple((f.name, f.file) for f in span.stack)
    last = path(mine[-1])
    since = mine[-1].ts_ns
    for span in reversed(mine):
        if path(span) != last:
            break
        since = span.ts_ns
    return since


def build_timeline(
    pid: int,
    spans: Sequence[Span],
    threads: dict[int, ThreadInfo],
    rules: Rules,
    rate_hz: int,
    start_ns: int,
    end_ns: int,
    cpu: Sequence[tuple[int, int, int]] = (),
    sources: Mapping[str, str] | None = None,
    sampler_cpu: Sequence[tuple[int, int, int]] = (),
) -> Timeline:
    """Classify and segment one process's spans inside [start_ns, end_ns) (``sources``: the job's
    own files, for what its training loop computes the loss from: steps/dataflow.py; ``cpu``: its
    main thread's counters; ``sampler_cpu``: its py-spy recorders')."""
    window = clip_spans(spans, start_ns, end_ns)
    tid = pick_thread(window, threads, rules)
    mine = sorted((s for s in window if s.tid == tid), key=lambda s: s.ts_ns)
    loop = find_loop(mine, rules.loops)
    depth = loop.depth if loop else None
    segments = []
    classify_span = classifier(rules, depth, loop_feeding(loop, sources))
    frameworks: Counter[str] = Counter()
    traits: dict[int, frozenset[str]] = {}
    for span in mine:
        verdict = classify_span(span.stack)
        segments.append(Segment(span.ts_ns, span.dur_ns, verdict.phase, verdict.label, span, verdict.depth))
        if verdict.framework:
            frameworks[verdict.framework] += span.dur_ns
        if id(span.stack) not in traits:
            traits[id(span.stack)] = stack_traits(span.stack)
    interval_ns = int(1e9 / max(rate_hz, 1))
    bounds = _boundaries(segments, loop) if loop else []
    info = threads.get(tid) if tid is not None else None
    # The agent reads the main thread's counters: use them only for the main thread.
    main = info is not None and info.os_tid == os_pid(pid)
    counter = CpuCounter(_around(cpu, start_ns, end_ns)) if cpu and main else None
    sampler = CpuCounter(_around(sampler_cpu, start_ns, end_ns)) if sampler_cpu else None
    outside = _outside(segments, loop)
    intervals = _intervals(segments, bounds, _holes(mine, MAX_SPAN_GAP_INTERVALS * interval_ns), counter, rate_hz,
                           sampler, outside)
    visits = _visits(segments, outside) if outside is not None else None
    clock, counts = clock_of([s.counted_ns for s in intervals], _unseen(visits, rate_hz), rate_hz,
                             optimizer_marked(intervals))
    labels: Counter[str] = Counter()
    for seg in segments:
        if seg.phase == "wait":
            labels[seg.label or "other"] += seg.dur_ns
    name = thread_label(info, pid)
    steps, guessed = expand_counted(intervals, counts, clock.unseen, rate_hz)
    first, last = (mine[0].ts_ns, mine[-1].end_ns) if mine else (None, None)
    if clock.known:
        # the typical step: the median of the steps counted, each interval of n steps n steps of
        # its average. Not the comb's period: that is a ratio over the intervals on it, the mean
        # step, which steps slowed now and then (other work on the cores, a third of 200-ms steps
        # up to twice as long) put 6.8% beyond the median; nor where slow steps beyond chance were
        # counted as several short ones (a loader's garbage collections of 2.7 steps every few
        # steps made the period 2-4% short of the job's median step)
        # (a clock whose steps changed length gives their mean: ``clock.by_regimes``)
        typical = typical_step(clock, lambda: statistics.median(s.dur_ns for s in steps))
        clock = replace(clock, typical_ns=typical,
                        edge_steps=edge_steps(bounds, first, last, clock.period_ns, rate_hz, clock.unseen,
                                              clock.shift_ns))
    return Timeline(pid, tid, name, loop, tuple(segments), steps, clock,
                    dict(labels), tuple(bounds), _stuck_since(mine), last,
                    _coverage(mine), tuple(intervals), rate_hz, first, framework_of(loop, frameworks),
                    traits=frozenset().union(*traits.values()), guessed=guessed,
                    visits_vary=visits is not None and visits_vary(visits, rate_hz))


def judged_uneven(tl: Timeline) -> Timeline:
    """``tl`` with its step time unknown where the intervals a draw counted (``Timeline.guessed``)
    can move its median beyond MAX_STEP_ERROR (``clock.median_holds``); its steps then those surely
    seen, each one the draw took for several one. Judged on the steps as they stand once a step is
    known to be one micro-batch (``accumulation.with_accumulation``), as the batch and a live
    window both give them."""
    moved, added = tl.guessed
    if not moved or not tl.clock.known or median_holds(sorted(s.dur_ns for s in tl.steps), moved):
        return judged_blurred(tl)
    return replace(tl, clock=uneven_clock(tl.clock), step_floor=len(tl.steps) - added)


def step_skew(tl: Timeline, typical_ns: float) -> float:
    """How far the mean of ``tl``'s steps is over its typical step (``typical_ns``, their median),
    relative: slow steps now and then put it over; steps that jitter around one length do not."""
    return sum(s.dur_ns for s in tl.steps) / len(tl.steps) / typical_ns - 1 if tl.steps and typical_ns else 0.0


def judged_blurred(tl: Timeline) -> Timeline:
    """``tl`` with its median step unknown where every boundary was seen (by this rank: e^-λ at most
    MAX_UNSEEN; on a comb, or on the boundaries its peers saw too, at most BLUR_UNSEEN), the steps
    are skewed by slow ones (their mean over their median by more than
    BLUR_SKEW) and few samples long (under BLUR_SAMPLES), and the sampling's blur moved their median
    by more than BLUR_MOVES by either of two measures: blurred once more (``period.blur_moves``), or
    the steps as the job ran them recovered from those seen (``period.deblurred_moves``). The median
    of the short steps' widened cluster is then no step's; their mean is given where it holds
    (steps/mean.py). 6 workers delivering in bursts, one slow step in three among 25-ms ones, at 400
    Hz (``--max-rate``): the median was 26.3 ms for the job's 25.0 (+5.4%), blurred once more it
    moved +5.8%; the mean, 35.8 and 36.0 for the job's 35.9. 40% of 30-ms steps slowed 1.3-2.2x, at
    400 Hz: the median 32.6 ms for the job's 30.4 (+7.4%), which more blur moved 2% and the steps
    recovered put at +6.4%. Each misses some the other finds (stop 86: docs/steps.md)."""
    clock = tl.clock
    typical = clock.typical_ns
    if (not clock.known or clock.mean or typical is None or clock.unseen is None
            or clock.unseen > (MAX_UNSEEN if clock.method == "wraps" else BLUR_UNSEEN)
            or clock.method not in ("wraps", "joint", "comb") or typical * tl.rate_hz / 1e9 >= BLUR_SAMPLES
            or not tl.steps):
        return tl
    if step_skew(tl, typical) <= BLUR_SKEW:
        return tl
    steps = sorted(float(s.dur_ns) for s in tl.steps)
    moved = max(blur_moves(steps, tl.rate_hz), deblurred_moves(steps, tl.rate_hz), key=abs)
    if abs(moved) <= BLUR_MOVES:
        return tl
    seen = "every boundary seen" if clock.unseen <= MAX_UNSEEN else f"all but {clock.unseen:.0%} of the boundaries seen"
    reason = (f"the steps, {seen}, are skewed by slow ones, and the samples' lag at each end moves "
              f"their median by about {moved:+.0%}: too uneven for a median "
              f"within {100 * MAX_STEP_ERROR:.0f}% at {tl.rate_hz} Hz (irregular steps)")
    # a faster rate shrinks the lag: the one that gives the median BLUR_SAMPLES (diagnose/rate.faster)
    step_hz = DEFAULT_RATE_POLICY.step_hz
    faster = math.ceil(BLUR_SAMPLES * 1e9 / typical / step_hz) * step_hz
    return replace(tl, clock=StepClock("unknown", None, None, clock.concentration, reason, faster, unseen=clock.unseen,
                                       cause=IRREGULAR))


def loop_feeding(loop: LoopFrame | None, sources: Mapping[str, str] | None) -> frozenset[int]:
    """The loop frame's lines that make what its loss is computed from, where its source was sent."""
    text = sources.get(loop.file) if loop is not None and sources else None
    return feeding_lines(text, loop.name) if loop is not None and text is not None else frozenset()


def framework_of(loop: LoopFrame | None, frameworks_ns: dict[str, int]) -> str | None:
    """The framework the training thread runs: the one whose loop rule named the loop, else the
    one whose rules decided the most of the thread's time (Accelerate's backward in a user loop)."""
    if loop is not None and loop.framework:
        return loop.framework
    return max(frameworks_ns, key=lambda name: (frameworks_ns[name], name)) if frameworks_ns else None


def _intervals(
    segments: Sequence[Segment],
    bounds: list[int],
    holes: list[tuple[int, int]],
    counter: CpuCounter | None,
    rate_hz: int,
    sampler: CpuCounter | None = None,
    outside: Sequence[bool] | None = None,
) -> list[Step]:
    """The intervals between consecutive ``bounds`` that cross no hole, measured: each phase's time,
    the time blocked in synchronizing phases (``counter``), whether a long span in it was a sampler
    drop-out or held by the thread (``sampler``), and the time in the segments ``outside`` flags
    (outside the loop's dominant place)."""
    steps = []
    i = 0
    by_stack: dict[int, list[int]] = {}
    for seg in segments:
        by_stack.setdefault(id(seg.span.stack), []).append(seg.dur_ns)
    usual = {k: statistics.median(v) for k, v in by_stack.items()}
    step_on = counter.step_work(bounds) if counter is not None else None
    gap_ns = 8 * 1e9 / max(rate_hz, 1)
    for start, end in itertools.pairwise(bounds):
        if any(h0 < end and h1 > start for h0, h1 in holes):
            continue
        phases = dict.fromkeys(PHASES, 0)
        aside = away = 0
        blocked: dict[str, int] | None = {} if counter is not None else None
        while i < len(segments) and segments[i].ts_ns + segments[i].dur_ns <= start:
            i += 1
        j = i
        swallowing = held = False
        while j < len(segments) and segments[j].ts_ns < end:
            seg = segments[j]
            lo, hi = max(seg.ts_ns, start), min(seg.ts_ns + seg.dur_ns, end)
            typical = usual[id(seg.span.stack)]
            if (seg.dur_ns >= gap_ns and seg.dur_ns >= SWALLOW_RATIO * typical
                    and not blocked_through(_on(counter, seg.ts_ns, seg.ts_ns + seg.dur_ns), step_on)):
                if sampler_dropped(_queued(sampler, seg.ts_ns, seg.ts_ns + seg.dur_ns), seg.dur_ns - typical):
                    swallowing = True
                else:
                    held = True
            if hi > lo:
                phases[seg.phase] += hi - lo
                if seg.phase == "wait" and seg.label in ASIDE_LABELS:
                    aside += hi - lo
                if outside is not None and outside[j]:
                    away += hi - lo
                if blocked is not None and counter is not None and (seg.phase, seg.label) in SYNC_PHASES:
                    b0, b1 = counter.at(lo), counter.at(hi)
                    if b0 is None or b1 is None:
                        blocked = None
                    else:
                        idle = (hi - lo) - min(max(b1 - b0, 0.0), hi - lo)
                        blocked[seg.phase] = blocked.get(seg.phase, 0) + int(idle)
            j += 1
        work = _on(counter, start, end) if not aside else None   # (an eval's work is no step's)
        steps.append(Step(start, end, phases, blocked, swallowing=swallowing, held=held and not swallowing,
                          aside_ns=aside, outside_ns=away, work_ns=None if work is None else int(work),
                          stalled=stalled(_queued(sampler, start, end), rate_hz)))
    return steps


Place = tuple[int | None, int | None]   # (line at the loop's depth, CYCLE_RANK of the phase)


def inside(place: Place, dominant: Place | None) -> bool:
    """Whether a sample at ``place`` is in the dominant place: its line, and its phase where
    both have one (a wait on the dominant line is no visit away from it)."""
    if dominant is None:
        return place[0] is None
    return place[0] == dominant[0] and (place[1] is None or dominant[1] is None or place[1] == dominant[1])


def _outside(segments: Sequence[Segment], loop: LoopFrame | None) -> list[bool] | None:
    """Whether each segment lies outside the loop's dominant place: where the thread spent the most
    time (its line at the loop's depth, and its phase there). None without a loop."""
    if loop is None:
        return None
    places = [(seg.span.stack[loop.depth].line if len(seg.span.stack) > loop.depth else None,
               CYCLE_RANK.get(seg.phase)) for seg in segments]
    per_place: Counter[Place] = Counter()
    for seg, place in zip(segments, places, strict=True):
        per_place[place] += seg.dur_ns
    dominant = per_place.most_common(1)[0][0] if per_place else None
    return [not inside(place, dominant) for place in places]


def _unseen(visits: Sequence[int] | None, rate_hz: int) -> float | None:
    """Probability that a step's boundary goes unseen: e^-λ, with λ the samples per step
    outside the loop's dominant place (``_outside``), from the visits outside it that were seen
    (``_visits``; None: no dominant place)."""
    if visits is None or len(visits) < 2:
        return None
    mean_samples = statistics.fmean(visits) * rate_hz / 1e9
    return math.exp(-visit_samples(mean_samples))


def _visits(segments: Sequence[Segment], outside: Sequence[bool]) -> list[int]:
    """The length (ns) of each visit outside the loop's dominant place that was seen."""
    visits: list[int] = []
    in_visit = False
    for seg, away in zip(segments, outside, strict=True):
        if not away:
            in_visit = False
        elif in_visit:
            visits[-1] += seg.dur_ns
        else:
            visits.append(seg.dur_ns)
            in_visit = True
    return visits


def without_period(tl: Timeline, clock: StepClock) -> Timeline:
    return replace(tl, steps=expand(tl.intervals, [1] * len(tl.intervals)), clock=clock)
