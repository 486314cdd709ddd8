"""From one process's sampled spans to classified steps: a pure function of a window.

1. The training thread is the one that spends the most time in training phases;
   pin-memory, loader and other background threads never count as loop time.
2. The loop frame is the user-code frame on that thread's dominant call path whose
   line keeps wrapping backwards (``for`` back to its header): the outermost one when
   nested frames wrap about as often (a ``train_step`` inside ``train``).
3. A step begins where the loop frame's line wraps; its phase times are the summed
   durations of the classified spans between two wraps.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agent.source import is_library
from traceml_attach.classify import PHASES, Rule, classifier
from traceml_attach.model import CodeFrame, Span, Stack, ThreadInfo

# Functions that mark a thread as background (pin memory, queue feeders), never the loop.
BACKGROUND_FUNCS = {"_pin_memory_loop", "_feed", "_handle_results", "_handle_workers",
                     "_handle_tasks", "_worker_loop"}
_LOOP_PHASES = {"input", "h2d", "forward", "backward", "optimizer"}
MIN_PATH_SHARE = 0.5        # a loop-frame candidate is on the path for ≥ this share of time
OUTER_TIE = 0.8             # an outer candidate wins with ≥ this fraction of the most wraps
MIN_SAMPLES_PER_STEP = 5.0  # below this, steps cannot be separated reliably
TARGET_SAMPLES_PER_STEP = 10.0
MAX_SPAN_GAP_INTERVALS = 5  # a hole in sampling longer than this invalidates its step


@dataclass(frozen=True)
class LoopFrame:
    depth: int
    name: str
    file: str
    wraps: int


@dataclass(frozen=True)
class Segment:
    ts_ns: int
    dur_ns: int
    phase: str
    label: str | None
    span: Span
    decider: int | None  # index of the deciding frame in span.stack


@dataclass(frozen=True)
class Step:
    start_ns: int
    end_ns: int
    phases_ns: dict[str, int]
    # Time the thread was blocked (not on a CPU or waiting for one) inside synchronizing
    # phases (backward, collectives), by phase; None without CPU counters for the step.
    blocked_sync_ns: dict[str, int] | None = None

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class TooShort:
    samples_per_step: float
    apparent_step_ms: float
    suggested_rate_hz: int


@dataclass(frozen=True)
class Timeline:
    pid: int
    tid: int | None
    thread_name: str | None
    loop: LoopFrame | None
    segments: tuple[Segment, ...]
    steps: tuple[Step, ...]
    too_short: TooShort | None
    wait_labels_ns: dict[str, int]
    bounds: tuple[int, ...] = ()
    stuck_since_ns: int | None = None   # start of the final run of one unchanging call path
    end_ns: int | None = None           # end of the sampled window for this thread
    coverage: float | None = None       # share of [start, end) with a stack seen on this thread


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


def user_frame(stack: Stack) -> CodeFrame | None:
    """The innermost frame of the user's own code (not the standard library or a package)."""
    for frame in reversed(stack):
        if not is_library(frame.file):
            return frame
    return None


def is_background(func_names: Iterable[str], thread_name: str | None) -> bool:
    """A DataLoader helper thread (pin-memory, queue feeder...), never the training loop."""
    if thread_name and "pin_memory" in thread_name:
        return True
    return any(name in BACKGROUND_FUNCS for name in func_names)


def pick_thread(spans: Sequence[Span], threads: dict[int, ThreadInfo], rules: list[Rule]) -> int | None:
    """The thread running the training loop."""
    score: Counter[int] = Counter()
    presence: Counter[int] = Counter()
    verdict = classifier(rules, None)
    for span in spans:
        name = threads[span.tid].name if span.tid in threads else None
        if is_background((f.name for f in span.stack), name):
            continue
        presence[span.tid] += span.dur_ns
        if verdict(span.stack).phase in _LOOP_PHASES:
            score[span.tid] += span.dur_ns
    if score:
        return score.most_common(1)[0][0]
    mains = [tid for tid, t in threads.items() if t.name == "MainThread" and tid in presence]
    if mains:
        return mains[0]
    return presence.most_common(1)[0][0] if presence else None


def _wraps(spans: Sequence[Span], depth: int, ident: tuple[str, str]) -> int:
    count, prev = 0, None
    for span in spans:
        if len(span.stack) > depth and (span.stack[depth].name, span.stack[depth].file) == ident:
            line = span.stack[depth].line
            if prev is not None and line < prev:
                count += 1
            prev = line
    return count


def find_loop(spans: Sequence[Span]) -> LoopFrame | None:
    """The training loop's frame on the thread's dominant call path (see module doc)."""
    total = sum(s.dur_ns for s in spans)
    if total == 0:
        return None
    path = list(spans)
    candidates: list[LoopFrame] = []
    for depth in range(128):
        weights: Counter[tuple[str, str]] = Counter()
        for s in path:
            if len(s.stack) > depth:
                weights[(s.stack[depth].name, s.stack[depth].file)] += s.dur_ns
        if not weights:
            break
        ident, weight = weights.most_common(1)[0]
        if weight < MIN_PATH_SHARE * total or is_library(ident[1]):
            break
        path = [s for s in path if len(s.stack) > depth
                and (s.stack[depth].name, s.stack[depth].file) == ident]
        wraps = _wraps(path, depth, ident)
        if wraps:
            candidates.append(LoopFrame(depth, ident[0], ident[1], wraps))
    if not candidates:
        return None
    most = max(c.wraps for c in candidates)
    return next(c for c in candidates if c.wraps >= OUTER_TIE * most)


def _boundaries(spans: Sequence[Span], loop: LoopFrame) -> list[int]:
    out, prev = [], None
    for span in spans:
        st = span.stack
        if len(st) > loop.depth and (st[loop.depth].name, st[loop.depth].file) == (loop.name, loop.file):
            line = st[loop.depth].line
            if prev is not None and line < prev:
                out.append(span.ts_ns)
            prev = line
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
    rules: list[Rule],
    rate_hz: int,
    start_ns: int,
    end_ns: int,
    cpu: Sequence[tuple[int, int, int]] = (),
) -> Timeline:
    """Classify and segment one process's spans inside [start_ns, end_ns)."""
    window = clip_spans(spans, start_ns, end_ns)
    tid = pick_thread(window, threads, rules)
    mine = sorted((s for s in window if s.tid == tid), key=lambda s: s.ts_ns)
    loop = find_loop(mine)
    depth = loop.depth if loop else None
    segments = []
    classify_span = classifier(rules, depth)
    for span in mine:
        verdict = classify_span(span.stack)
        segments.append(Segment(span.ts_ns, span.dur_ns, verdict.phase, verdict.label, span, verdict.depth))
    interval_ns = int(1e9 / max(rate_hz, 1))
    bounds = _boundaries(mine, loop) if loop else []
    info = threads.get(tid) if tid is not None else None
    # The agent reads the main thread's counters: use them only for the main thread.
    counter = CpuCounter(_around(cpu, start_ns, end_ns)) if cpu and info is not None and info.os_tid == pid else None
    steps = _steps(segments, bounds, _holes(mine, MAX_SPAN_GAP_INTERVALS * interval_ns), counter)
    labels: Counter[str] = Counter()
    for seg in segments:
        if seg.phase == "wait":
            labels[seg.label or "other"] += seg.dur_ns
    name = threads[tid].name if tid is not None and tid in threads else None
    return Timeline(pid, tid, name, loop, tuple(segments), tuple(steps),
                    _too_short(steps, rate_hz), dict(labels), tuple(bounds), _stuck_since(mine),
                    mine[-1].end_ns if mine else None, _coverage(mine))


def _steps(
    segments: Sequence[Segment],
    bounds: list[int],
    holes: list[tuple[int, int]],
    counter: CpuCounter | None,
) -> list[Step]:
    steps = []
    i = 0
    for start, end in itertools.pairwise(bounds):
        if any(h0 < end and h1 > start for h0, h1 in holes):
            continue
        phases = dict.fromkeys(PHASES, 0)
        blocked: dict[str, int] | None = {} if counter is not None else None
        while i < len(segments) and segments[i].ts_ns + segments[i].dur_ns <= start:
            i += 1
        j = i
        while j < len(segments) and segments[j].ts_ns < end:
            seg = segments[j]
            lo, hi = max(seg.ts_ns, start), min(seg.ts_ns + seg.dur_ns, end)
            if hi > lo:
                phases[seg.phase] += hi - lo
                if blocked is not None and counter is not None and (seg.phase, seg.label) in SYNC_PHASES:
                    b0, b1 = counter.at(lo), counter.at(hi)
                    if b0 is None or b1 is None:
                        blocked = None
                    else:
                        idle = (hi - lo) - min(max(b1 - b0, 0.0), hi - lo)
                        blocked[seg.phase] = blocked.get(seg.phase, 0) + int(idle)
            j += 1
        steps.append(Step(start, end, phases, blocked))
    return steps


def _too_short(steps: Sequence[Step], rate_hz: int) -> TooShort | None:
    if len(steps) < 3:
        return None
    median_ns = statistics.median(s.dur_ns for s in steps)
    per_step = median_ns * rate_hz / 1e9
    if per_step >= MIN_SAMPLES_PER_STEP:
        return None
    # Steps may be shorter than they appear when the sampler aliases them, so this
    # rate is a lower bound; rounded up to a multiple of 100 Hz.
    needed = TARGET_SAMPLES_PER_STEP * 1e9 / median_ns
    return TooShort(per_step, median_ns / 1e6, int(math.ceil(needed / 100.0) * 100))
