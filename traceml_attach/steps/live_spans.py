"""One process's sampled spans in a moving window, per thread, and the thread that runs the
training loop among them: the reading half of the live step engine (live_tracker.py, whose
RankTracker carries the loop, the boundaries and the clock on top of it).

Spans are read once, from the Recording's absolute index (``trimmed`` + position: the Recording
may drop old spans from the front), and kept per thread in time order; those that ended before
the window leave from the front. Each distinct stack (the Recording interns them) is looked at
once while it is in the window (``StackInfo``). The training thread is chosen from running
per-thread sums, like ``pick_thread``; the current one stays unless a rival has THREAD_KEEP
times its time.
"""

from __future__ import annotations

import bisect

from traceml_attach.ingest.model import Span, ThreadInfo
from traceml_attach.ingest.stream import Recording
from traceml_attach.policy import THREAD_KEEP
from traceml_attach.steps.batch_timeline import MAX_SPAN_NS
from traceml_attach.steps.classify import Rules
from traceml_attach.steps.live_stacks import StackInfo
from traceml_attach.steps.movinglog import Log

_NONE: Log[Span] = Log()   # no thread's spans


class SpanWindow:
    """One process's spans in the window, per thread, and its training thread."""

    def __init__(self, pid: int, rules: Rules) -> None:
        self.pid = pid
        self.rules = rules
        self.next_index: int | None = None   # absolute index of the next span to read
        self.spans_read = 0                  # how many spans were read, in all
        self.start_ns = self.end_ns = 0
        self.first_ns: int | None = None     # the first tick with data
        self.stacks: dict[int, StackInfo] = {}
        self.by_tid: dict[int, Log[Span]] = {}   # each thread's spans in the window
        self.presence: dict[int, int] = {}   # per thread: time outside background code
        self.score: dict[int, int] = {}      # per thread: time in training phases
        self.tid: int | None = None
        self.names: dict[int, ThreadInfo] = {}

    def read_new(self, rec: Recording, start_ns: int, end_ns: int) -> list[tuple[Span, StackInfo]]:
        """Read the new spans that start before end_ns into their threads' windows; returns the
        training thread's (its segments), with their stacks' infos."""
        spans = rec.spans.get(self.pid, [])
        base = rec.trimmed.get(self.pid, 0)
        if self.next_index is None:
            i = bisect.bisect_left(spans, start_ns - MAX_SPAN_NS, key=lambda s: s.ts_ns)
        else:
            i = max(self.next_index - base, 0)
        self.names = rec.threads.get(self.pid, {})
        self.start_ns, self.end_ns = start_ns, end_ns
        n, begin = len(spans), i
        while i < n and spans[i].ts_ns < end_ns:
            i += 1
        self.next_index = base + i
        self.spans_read += i - begin
        if self.first_ns is None and n:
            self.first_ns = end_ns
        return self._read(spans[begin:i])

    def _read(self, new: list[Span]) -> list[tuple[Span, StackInfo]]:
        """The new spans into their threads' windows; returns the training thread's, with their
        stacks' infos (its segments)."""
        stacks, by_tid, presence, score, rules, chosen = (self.stacks, self.by_tid, self.presence, self.score,
                                                          self.rules, self.tid)
        mine = []
        for span in new:
            stack = span.stack
            info = stacks.get(id(stack))
            if info is None:
                info = stacks[id(stack)] = StackInfo(stack, rules)
            info.refs += 1
            tid = span.tid
            queue = by_tid.get(tid)
            if queue is None:
                queue = by_tid[tid] = Log()
            queue.append(span)
            if not info.background:
                presence[tid] = presence.get(tid, 0) + span.dur_ns
                if info.work:
                    score[tid] = score.get(tid, 0) + span.dur_ns
            if tid == chosen:
                mine.append((span, info))
        return mine

    def _thread_spans(self) -> Log[Span]:
        """The training thread's spans in the window: its segments."""
        return self.by_tid.get(self.tid, _NONE) if self.tid is not None else _NONE

    def _expire_spans(self, start_ns: int) -> int:
        """Forget the spans that ended by ``start_ns``; returns the training thread's time among them."""
        chosen_gone = 0
        stacks = self.stacks
        for tid in list(self.by_tid):
            queue = self.by_tid[tid]
            chosen = tid == self.tid
            gone_ns = gone_presence = gone_score = 0
            while (span := queue.first()) is not None and span.ts_ns + span.dur_ns <= start_ns:
                queue.popleft()
                dur = span.dur_ns
                info = stacks[id(span.stack)]
                if not info.background:
                    gone_presence += dur
                    if info.work:
                        gone_score += dur
                if chosen:
                    gone_ns += dur
                    info.ns -= dur
                    info.segs -= 1
                info.refs -= 1
                if not info.refs:
                    del stacks[id(span.stack)]
            if gone_presence:
                self.presence[tid] -= gone_presence
            if gone_score:
                self.score[tid] -= gone_score
            chosen_gone += gone_ns
            if not queue:
                del self.by_tid[tid]
                self.presence.pop(tid, None)
                self.score.pop(tid, None)
        return chosen_gone

    def _background_thread(self, tid: int) -> bool:
        info = self.names.get(tid)
        return bool(info is not None and info.name and "pin_memory" in info.name)

    def _training_thread(self) -> int | None:
        """The thread with the most training time (``pick_thread``'s choice), the current one kept
        unless a rival has THREAD_KEEP times its time."""
        best = None
        for tid, ns in self.score.items():
            if ns > 0 and not self._background_thread(tid) and (best is None or ns > self.score[best]):
                best = tid
        if best is None:
            present = {tid: ns for tid, ns in self.presence.items() if not self._background_thread(tid)}
            mains = [tid for tid, t in self.names.items() if t.name == "MainThread" and tid in present]
            best = mains[0] if mains else (max(present, key=lambda t: present[t]) if present else None)
        elif (self.tid is not None and best != self.tid and not self._background_thread(self.tid)
              and THREAD_KEEP * self.score.get(self.tid, 0) >= self.score[best]):
            best = self.tid
        return best
