"""The step engine's batch form: from one process's sampled spans to classified steps, a pure
function of a window (its live form, carried from tick to tick: live_tracker.py and
live_intervals.py, which share this module's data types and rules).

1. The training thread is the one that spends the most time in training phases;
   pin-memory, loader and other background threads never count as loop time.
2. The loop frame is the user-code frame on that thread's dominant call path whose
   line keeps wrapping backwards (``for`` back to its header): the outermost one when
   nested frames wrap about as often (a ``train_step`` inside ``train``). A framework's
   loop lives in a package: a ``[[loop]]`` rule names it (``loop_candidates``).
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
import functools
import itertools
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import overload

from agent.source import is_library
from traceml_attach.ingest.model import CodeFrame, Span, Stack, ThreadInfo, os_pid
from traceml_attach.steps.classify import LoopRule, Rules, classifier
from traceml_attach.steps.dataflow import feeding_lines
from traceml_attach.steps.period import (
    MAX_STEP_ERROR,
    MIN_INTERVALS,
    MIN_SAMPLES_PER_STEP,
    TARGET_SAMPLES_PER_STEP,
    PeriodFit,
    fit_period,
    pinned,
    refine_map,
    steady_median,
    suggested_rate_hz,
    visit_samples,
)
from traceml_attach.steps.phases import PHASES, WORK_PHASES

# Functions that mark a thread as background (pin memory, queue feeders), never the loop.
BACKGROUND_FUNCS = {"_pin_memory_loop", "_feed", "_handle_results", "_handle_workers",
                     "_handle_tasks", "_worker_loop"}
MIN_PATH_SHARE = 0.5        # a loop-frame candidate is on the path for ≥ this share of time
OUTER_TIE = 0.8             # an outer candidate wins with ≥ this fraction of the most wraps
MAX_SPAN_GAP_INTERVALS = 5  # a hole in sampling longer than this invalidates its step
# Wait set aside from training: an iteration that evaluates or checkpoints is one (long) step, and
# its evaluation is no training steps' time
ASIDE_LABELS = frozenset({"eval", "checkpoint"})
# A higher rate is suggested for long steps only where their boundaries go unseen at least this often
MOSTLY_UNSEEN = 0.3
# Observed wraps are trusted as every boundary, without a period, when a step's boundary goes
# unseen with at most this probability (e^-λ, λ the samples outside the dominant line per step).
MAX_UNSEEN = 0.01
# A boundary that Poisson sampling hides with less than this probability (e^-8: eight sampling
# intervals outside the dominant line went unsampled) was hidden by a drop-out of the sampler...
DROPOUT_UNSEEN = math.exp(-8.0)
# ...which shows as a span this many times its stack's median span, and at least 8 intervals long.
SWALLOW_RATIO = 2.0


@dataclass(frozen=True)
class LoopFrame:
    depth: int
    name: str
    file: str
    wraps: int
    framework: str | None = None   # the loop rule that named it (a framework's loop)


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

    __slots__ = ("end_ns", "spans", "start_ns", "verdicts")

    def __init__(self, spans: Sequence[Span], verdicts: dict[int, tuple[str, str | None, int | None]],
                 start_ns: int, end_ns: int) -> None:
        self.spans = spans
        self.verdicts = verdicts   # id(stack) -> (phase, label, deciding frame)
        self.start_ns, self.end_ns = start_ns, end_ns

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
    # (observed intervals) it holds a span far longer than its stack's usual span: the sampler
    # saw nothing change for that long where the thread usually moves on (see ``expand``)
    swallowing: bool = False
    # (observed intervals) its time in an evaluation or a checkpoint (ASIDE_LABELS): an iteration
    # that evaluates is one step, counted on the time it spent training (``counted_ns``)
    aside_ns: int = 0

    @property
    def counted_ns(self) -> int:
        """The length its step count is judged on: the interval less its eval and checkpoints."""
        return self.dur_ns - self.aside_ns

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


# the words of the reason that synchronized ranks' steps vary too much for a typical one, where a
# rank saw every boundary (steps/sync.py; StepClock.irregular)
IRREGULAR = "irregular steps"


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

    @property
    def known(self) -> bool:
        return self.period_ns is not None

    @property
    def irregular(self) -> bool:
        """Unknown because a synchronized rank saw every boundary and its steps vary too much for a
        typical one (IRREGULAR in the reason: ``sync.share_period``)."""
        return self.period_ns is None and self.reason is not None and IRREGULAR in self.reason

    def shared(self, visible: float | None, unseen: float | None, edge_steps: int) -> StepClock:
        """This clock as another synchronized rank's ("joint"): its own visibility, chance of an
        unseen boundary and edge steps (``dataclasses.replace``, without its cost per rank and tick)."""
        return StepClock("joint", self.period_ns, visible, None, self.reason, self.suggested_rate_hz,
                         self.step_upper_ns, self.typical_ns, unseen, edge_steps)


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
    # optimizer's visits, one per optimizer step: steps/accumulation.py)
    step_floor: int | None = None

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


@functools.lru_cache(maxsize=4096)
def _library(path: str) -> bool:
    """``is_library``, once per file (a live tick asks it of every rank's stack)."""
    return is_library(path)


def user_frame(stack: Stack) -> CodeFrame | None:
    """The innermost frame of the user's own code (not the standard library or a package)."""
    for frame in reversed(stack):
        if not _library(frame.file):
            return frame
    return None


def thread_label(info: ThreadInfo | None, pid: int) -> str | None:
    """The thread's Python name (the agent names the main thread "MainThread" where the target
    never imported `threading`, see agent.pyspy.ThreadNames); for a main thread (OS thread id =
    PID) still unnamed, "main thread", which is a fact; else None."""
    if info is None:
        return None
    if info.name:
        return info.name
    return "main thread" if info.os_tid == os_pid(pid) else None


def is_background(func_names: Iterable[str], thread_name: str | None) -> bool:
    """A DataLoader helper thread (pin-memory, queue feeder...), never the training loop."""
    if thread_name and "pin_memory" in thread_name:
        return True
    return any(name in BACKGROUND_FUNCS for name in func_names)


def pick_thread(spans: Sequence[Span], threads: dict[int, ThreadInfo], rules: Rules) -> int | None:
    """The thread running the training loop."""
    score: Counter[int] = Counter()
    presence: Counter[int] = Counter()
    verdict = classifier(rules, None)
    for span in spans:
        name = threads[span.tid].name if span.tid in threads else None
        if is_background((f.name for f in span.stack), name):
            continue
        presence[span.tid] += span.dur_ns
        if verdict(span.stack).phase in WORK_PHASES:
            score[span.tid] += span.dur_ns
    if score:
        return score.most_common(1)[0][0]
    mains = [tid for tid, t in threads.items() if t.name == "MainThread" and tid in presence]
    if mains:
        return mains[0]
    return presence.most_common(1)[0][0] if presence else None


def find_loop(spans: Sequence[Span], loops: Sequence[LoopRule] = ()) -> LoopFrame | None:
    """The training loop's frame on the thread's dominant call path (see module doc)."""
    candidates = loop_candidates(spans, _weighted(spans), loops)
    if not candidates:
        return None
    most = max(c.wraps for c in candidates)
    return next(c for c in candidates if c.wraps >= OUTER_TIE * most)


def _weighted(spans: Iterable[Span]) -> list[tuple[Stack, int]]:
    """Each distinct stack of ``spans`` with its time among them, in order of first appearance."""
    by_stack: dict[int, list] = {}   # id(stack) -> [stack, ns]
    for s in spans:
        entry = by_stack.get(id(s.stack))
        if entry is None:
            by_stack[id(s.stack)] = [s.stack, s.dur_ns]
        else:
            entry[1] += s.dur_ns
    return [(stack, ns) for stack, ns in by_stack.values()]


def loop_hint(spans: Sequence[Span]) -> str | None:
    """With no loop found: the library frame on the dominant call path that ``find_loop`` would
    choose were library frames candidates, the loop a ``[[loop]]`` rule could name; None when no
    library frame wraps."""
    wrapping = [c for c in loop_candidates(spans, _weighted(spans), anywhere=True) if _library(c.file)]
    if not wrapping:
        return None
    most = max(c.wraps for c in wrapping)
    best = next(c for c in wrapping if c.wraps >= OUTER_TIE * most)   # as find_loop chooses
    return f"{best.name} ({best.file})"


def _autocast(ctx: str | None) -> bool:
    """A ``with torch.autocast(...)`` that is on: ``enabled=`` absent or literally True (a variable
    there, as in ``enabled=args.amp``, may be False: not a fact)."""
    if not ctx or "autocast" not in ctx:
        return False
    return "enabled=" not in ctx.replace(" ", "") or "enabled=True" in ctx.replace(" ", "")


# What a stack shows the job already does, so that advice never suggests it (diagnose/dialect.py).
_TRAITS = (
    ("autocast", lambda f: _autocast(f.ctx) or f.name.startswith("MixedPrecision.")),
    ("loader_workers", lambda f: "_MultiProcessingDataLoaderIter" in f.name),
    # a compiled callable runs through a dynamo context's wrapper (torch.compile's own wrapper of
    # zero_grad and other internals is a DisableContext: not the job's choice)
    ("compiled", lambda f: "torch/_dynamo/eval_frame" in f.file and not f.name.startswith("DisableContext")),
)


def stack_traits(stack: Stack) -> frozenset[str]:
    return frozenset(name for name, test in _TRAITS if any(test(frame) for frame in stack))


def loop_candidates(spans: Iterable[Span], weighted: Sequence[tuple[Stack, int]],
                    loops: Sequence[LoopRule] = (), anywhere: bool = False) -> list[LoopFrame]:
    """The frames on the dominant call path of ``spans`` (one thread's, in time order) that
    wrap, outermost first, given each distinct stack's time among them (in order of first
    appearance): the path is walked on the stacks, and the wraps of every candidate on it are
    counted in one pass over the spans.

    The candidates are the frames of the first run of the user's own code on the path (below a
    launcher's library frames: Ray, multiprocessing) and the frames that a loop rule names (a
    framework's loop: HF Trainer, Lightning). The user's code below a library frame is not: a
    loop in a Dataset's ``__getitem__`` under the DataLoader wraps far more often than the steps.
    """
    total = sum(ns for _, ns in weighted)
    if total == 0:
        return []
    path = list(weighted)
    walk: list[tuple[int, tuple[str, str], str | None]] = []   # (depth, frame, framework)
    reach: dict[int, int] = {}   # id(stack) -> how many candidates of the walk it follows
    user_run = 0                 # 0: before the user's code, 1: in its first run, 2: past it
    for depth in range(128):
        weights: Counter[tuple[str, str]] = Counter()
        for stack, ns in path:
            if len(stack) > depth:
                weights[(stack[depth].name, stack[depth].file)] += ns
        if not weights:
            break
        ident, weight = weights.most_common(1)[0]
        if weight < MIN_PATH_SHARE * total:
            break
        path = [(st, ns) for st, ns in path if len(st) > depth and (st[depth].name, st[depth].file) == ident]
        library = _library(ident[1])
        if user_run == 0 and not library:
            user_run = 1
        elif user_run == 1 and library:
            user_run = 2
        rule = next((r for r in loops if r.matches(*ident)), None)
        if rule is None and user_run != 1 and not anywhere:
            continue
        walk.append((depth, ident, rule.framework if rule else None))
        for stack, _ in path:
            reach[id(stack)] = len(walk)
    wraps = [0] * len(walk)
    prev: list[int | None] = [None] * len(walk)
    for span in spans:
        for k in range(reach.get(id(span.stack), 0)):
            line = span.stack[walk[k][0]].line
            last = prev[k]
            if last is not None and line < last:
                wraps[k] += 1
            prev[k] = line
    return [LoopFrame(depth, ident[0], ident[1], w, framework)
            for (depth, ident, framework), w in zip(walk, wraps, strict=True) if w]


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


def _boundaries(segments: Sequence[Segment], loop: LoopFrame) -> list[int]:
    out: list[int] = []
    prev_line: int | None = None
    prev_rank: int | None = None
    for seg in segments:
        st = seg.span.stack
        if len(st) > loop.depth and (st[loop.depth].name, st[loop.depth].file) == (loop.name, loop.file):
            line = st[loop.depth].line
            back, prev_rank = returns(line, CYCLE_RANK.get(seg.phase), prev_line, prev_rank)
            if back:
                out.append(seg.ts_ns)
            prev_line = line
    return out


def _holes(spans: Sequence[Span], max_gap_ns: int) -> list[tuple[int, int]]:
    holes = []
    for a, b in itertools.pairwise(spans):
        if b.ts_ns - a.end_ns > max_gap_ns:
            holes.append((a.end_ns, b.ts_ns))
    return holes


SYNC_PHASES = {("backward", None), ("wait", "collective")}


class CpuCounter:
    """Interpolates a thread's cumulative busy time (on a CPU or waiting for one)."""

    def __init__(self, rows: Sequence[tuple[int, int, int]]) -> None:
        self.ts = [r[0] for r in rows]
        self.busy = [r[1] + r[2] for r in rows]

    def at(self, ts_ns: int) -> float | None:
        if not self.ts or ts_ns < self.ts[0] or ts_ns > self.ts[-1]:
            return None
        i = bisect.bisect_left(self.ts, ts_ns)
        if self.ts[i] == ts_ns:
            return self.busy[i]
        t0, t1, b0, b1 = self.ts[i - 1], self.ts[i], self.busy[i - 1], self.busy[i]
        return b0 + (b1 - b0) * (ts_ns - t0) / (t1 - t0)


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
) -> Timeline:
    """Classify and segment one process's spans inside [start_ns, end_ns) (``sources``: the job's
    own files, for what its training loop computes the loss from: steps/dataflow.py)."""
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
    intervals = _intervals(segments, bounds, _holes(mine, MAX_SPAN_GAP_INTERVALS * interval_ns), counter, rate_hz)
    clock, counts = _clock(intervals, segments, loop, rate_hz)
    labels: Counter[str] = Counter()
    for seg in segments:
        if seg.phase == "wait":
            labels[seg.label or "other"] += seg.dur_ns
    name = thread_label(info, pid)
    steps = expand(intervals, counts, clock.unseen)
    first, last = (mine[0].ts_ns, mine[-1].end_ns) if mine else (None, None)
    if clock.known:
        # the typical step: the fitted period (a ratio over the intervals on the comb), robust to a
        # real long step taken for two; with every boundary seen, the median step
        typical = clock.period_ns if clock.method == "comb" else statistics.median(s.dur_ns for s in steps)
        clock = replace(clock, typical_ns=typical,
                        edge_steps=edge_steps(bounds, first, last, clock.period_ns, rate_hz))
    return Timeline(pid, tid, name, loop, tuple(segments), steps, clock,
                    dict(labels), tuple(bounds), _stuck_since(mine), last,
                    _coverage(mine), tuple(intervals), rate_hz, first, framework_of(loop, frameworks),
                    traits=frozenset().union(*traits.values()))


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


def edge_steps(bounds: Sequence[int], first_ns: int | None, last_ns: int | None, period_ns: float | None,
                rate_hz: int) -> int:
    """Whole steps between the window's edges and the first and last wrap seen. Each edge ends
    or starts at a boundary, so it holds floor(length / period) of them; a wrap is seen on
    average one sampling interval after its boundary, which moves that boundary back."""
    if not bounds or first_ns is None or last_ns is None or not period_ns:
        return 0
    lag = 1e9 / max(rate_hz, 1)
    return (int(max(bounds[0] - lag - first_ns, 0) // period_ns)
            + int(max(last_ns - bounds[-1] + lag, 0) // period_ns))


def _intervals(
    segments: Sequence[Segment],
    bounds: list[int],
    holes: list[tuple[int, int]],
    counter: CpuCounter | None,
    rate_hz: int,
) -> list[Step]:
    steps = []
    i = 0
    by_stack: dict[int, list[int]] = {}
    for seg in segments:
        by_stack.setdefault(id(seg.span.stack), []).append(seg.dur_ns)
    usual = {k: statistics.median(v) for k, v in by_stack.items()}
    gap_ns = 8 * 1e9 / max(rate_hz, 1)
    for start, end in itertools.pairwise(bounds):
        if any(h0 < end and h1 > start for h0, h1 in holes):
            continue
        phases = dict.fromkeys(PHASES, 0)
        aside = 0
        blocked: dict[str, int] | None = {} if counter is not None else None
        while i < len(segments) and segments[i].ts_ns + segments[i].dur_ns <= start:
            i += 1
        j = i
        swallowing = False
        while j < len(segments) and segments[j].ts_ns < end:
            seg = segments[j]
            lo, hi = max(seg.ts_ns, start), min(seg.ts_ns + seg.dur_ns, end)
            if seg.dur_ns >= gap_ns and seg.dur_ns >= SWALLOW_RATIO * usual[id(seg.span.stack)]:
                swallowing = True
            if hi > lo:
                phases[seg.phase] += hi - lo
                if seg.phase == "wait" and seg.label in ASIDE_LABELS:
                    aside += hi - lo
                if blocked is not None and counter is not None and (seg.phase, seg.label) in SYNC_PHASES:
                    b0, b1 = counter.at(lo), counter.at(hi)
                    if b0 is None or b1 is None:
                        blocked = None
                    else:
                        idle = (hi - lo) - min(max(b1 - b0, 0.0), hi - lo)
                        blocked[seg.phase] = blocked.get(seg.phase, 0) + int(idle)
            j += 1
        steps.append(Step(start, end, phases, blocked, swallowing=swallowing, aside_ns=aside))
    return steps


def expand(intervals: Sequence[Step], counts: Sequence[int], unseen: float | None = None) -> tuple[Step, ...]:
    """Each interval as its ``count`` steps: equal parts of its time and of each phase.

    When sampling cannot have missed a boundary by chance (``unseen`` below DROPOUT_UNSEEN), an
    interval as long as several steps is either a sampler drop-out, which shows as a span that
    swallowed the stacks in between (its steps count, their time is not covered), or one slow
    step (a checkpoint, an eval): with every boundary visible, no boundary is invented in it."""
    certain = unseen is not None and unseen < DROPOUT_UNSEEN
    out: list[Step] = []
    for step, n in zip(intervals, counts, strict=True):
        if n == 1 or (certain and not step.swallowing):
            out.append(step)
            continue
        blocked = {k: v // n for k, v in step.blocked_sync_ns.items()} if step.blocked_sync_ns is not None else None
        phases = {k: v // n for k, v in step.phases_ns.items()}
        for k in range(n):
            out.append(Step(step.start_ns + step.dur_ns * k // n, step.start_ns + step.dur_ns * (k + 1) // n,
                            phases, blocked, covered=not certain))
    return tuple(out)


Place = tuple[int | None, int | None]   # (line at the loop's depth, CYCLE_RANK of the phase)


def inside(place: Place, dominant: Place | None) -> bool:
    """Whether a sample at ``place`` is in the dominant place: its line, and its phase where
    both have one (a wait on the dominant line is no visit away from it)."""
    if dominant is None:
        return place[0] is None
    return place[0] == dominant[0] and (place[1] is None or dominant[1] is None or place[1] == dominant[1])


def _unseen(segments: Sequence[Segment], loop: LoopFrame | None, rate_hz: int) -> float | None:
    """Probability that a step's boundary goes unseen: e^-λ, with λ the samples per step
    outside the loop's dominant place (its line, and its phase on that line), from the visits
    outside it that were seen."""
    if loop is None:
        return None
    def place(seg: Segment) -> Place:
        st = seg.span.stack
        return (st[loop.depth].line if len(st) > loop.depth else None, CYCLE_RANK.get(seg.phase))
    per_place: Counter[Place] = Counter()
    for seg in segments:
        per_place[place(seg)] += seg.dur_ns
    dominant = per_place.most_common(1)[0][0] if per_place else None
    visits: list[int] = []
    inside_now = False
    for seg in segments:
        if inside(place(seg), dominant):
            inside_now = False
        elif inside_now:
            visits[-1] += seg.dur_ns
        else:
            visits.append(seg.dur_ns)
            inside_now = True
    if len(visits) < 2:
        return None
    mean_samples = statistics.fmean(visits) * rate_hz / 1e9
    return math.exp(-visit_samples(mean_samples))


def _clock(intervals: Sequence[Step], segments: Sequence[Segment], loop: LoopFrame | None,
           rate_hz: int) -> tuple[StepClock, tuple[int, ...]]:
    return clock_of([s.counted_ns for s in intervals], _unseen(segments, loop, rate_hz), rate_hz)


def clock_of(durations: Sequence[int], unseen: float | None, rate_hz: int) -> tuple[StepClock, tuple[int, ...]]:
    """The step clock of the intervals between observed wraps, and each one's step count;
    ``unseen`` is the chance that sampling misses a boundary (``_unseen``)."""
    ones = tuple(1 for _ in durations)
    if len(durations) >= 2 and unseen is not None and unseen <= MAX_UNSEEN:
        # every boundary is visible: the intervals are the steps (but for clear multiples), and
        # they may drift (a job that slows down) without a fixed period to fit
        floats = [float(d) for d in durations]
        period, counts = refine_map(floats, statistics.median(durations), unseen, rate_hz)
        whole = sorted(d for d, n in zip(floats, counts, strict=True) if n == 1)
        if pinned(floats, counts, period, rate_hz) and steady_median(whole, sum(counts)):
            return StepClock("wraps", period, len(counts) / sum(counts), None, unseen=unseen), counts
        fit = PeriodFit(None, ones, None, min(floats), why="jittery")
        return replace(unknown_clock(fit, len(durations), rate_hz, unseen), unseen=unseen), ones
    fit = fit_period(durations, rate_hz, unseen)
    if fit.known:
        return StepClock("comb", fit.period_ns, fit.visible, fit.concentration, unseen=unseen), fit.counts
    return replace(unknown_clock(fit, len(durations), rate_hz, unseen), unseen=unseen), ones


def unknown_clock(fit: PeriodFit, observed: int, rate_hz: int, unseen: float | None = None) -> StepClock:
    """Why no step time can be given, and what would give one: a higher rate only where the
    steps may be too short for this one (the shortest intervals seen are under
    TARGET_SAMPLES_PER_STEP samples, or the fit says so) or their boundaries mostly go unseen
    (``unseen``, e^-λ), never for regular steps already long enough."""
    shortest_ms = MIN_SAMPLES_PER_STEP * 1e3 / rate_hz
    upper = fit.upper_bound_ns
    # a higher rate helps steps that may be short, and boundaries that mostly go unseen (a rate
    # that doubles the samples outside the dominant place doubles λ); not regular long steps
    short = (upper is None or upper * rate_hz / 1e9 < TARGET_SAMPLES_PER_STEP
             or unseen is None or unseen > MOSTLY_UNSEEN)
    if fit.why == "jittery":
        reason = (f"the steps vary too much for the {observed} boundaries seen to give the typical step "
                  f"within {100 * MAX_STEP_ERROR:.0f}%: sample longer")
    elif observed < MIN_INTERVALS:
        reason = (f"only {observed} step boundar{'y was' if observed == 1 else 'ies were'} seen "
                  f"(a period needs {MIN_INTERVALS}): sample longer")
    elif fit.why == "ambiguous":
        reason = (f"too many of the {observed} intervals between the boundaries seen could hold one step or "
                  f"two at {rate_hz} Hz")
        short = True   # the blur of where the samples fell: a higher rate narrows it
    elif fit.why == "short":
        reason = (f"steps shorter than {MIN_SAMPLES_PER_STEP:.0f} samples ({shortest_ms:.0f} ms at {rate_hz} Hz) "
                  "cannot be told apart, and the boundaries seen fit no longer period")
        short = True
    elif short:
        reason = (f"the {observed} boundaries seen fit no step period (steps may be shorter than "
                  f"{MIN_SAMPLES_PER_STEP:.0f} samples, {shortest_ms:.0f} ms at {rate_hz} Hz, or too irregular)")
    else:
        reason = (f"the {observed} boundaries seen fit no regular step period, though the steps are long enough "
                  f"for {rate_hz} Hz: the steps are irregular, or most of their boundaries go unseen; a longer "
                  "window, or a [[loop]] rule naming the step's own loop frame, would help")
    rate = suggested_rate_hz(upper, rate_hz) if short and fit.why != "jittery" else None
    return StepClock("unknown", None, None, fit.concentration, reason, rate, upper)


def without_period(tl: Timeline, clock: StepClock) -> Timeline:
    return replace(tl, steps=expand(tl.intervals, [1] * len(tl.intervals)), clock=clock)
