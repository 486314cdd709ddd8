"""Frames in, a bounded recording and the session's history out: the same for a live session
and for a replay, so that a summary replays exactly.

Every TRACK_S of data (data time: the newest span's end, never the wall clock; longer for
more than TRACK_RANKS ranks) the ranks' trackers (diagnose/incremental.py) advance over the
newest LIVE_WINDOW_S. That ``Tracked`` is what a live view concludes and shows
(``live_analysis``): classification and step-finding run once per TRACK_S of data, however
often the view ticks and however many views there are.
Every ROLLUP_S of data, once the data is CLOSE_LAG_S past a bucket's end (py-spy windows
arrive a few seconds late), what fell inside the bucket is folded into the History from the
newest Tracked, and the raw data older than the live window is dropped (``Recording.trim``).
Where those points fall depends only on the order of the frames, which the recording keeps:
a replay tracks and folds at the same points as the live session did.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traceml_attach.diagnose.analysis import Analysis, analyze
from traceml_attach.diagnose.arrival import last_arrivals
from traceml_attach.diagnose.gpu import rank_gpu
from traceml_attach.diagnose.history import ROLLUP_S, Bucket, History, Span3
from traceml_attach.diagnose.incremental import IncrementalAnalyzer, Tracked
from traceml_attach.ingest.segments import read_segments
from traceml_attach.ingest.stream import Recording, RecordingError
from traceml_attach.policy import LIVE_WINDOW_S
from traceml_attach.steps.batch_timeline import Timeline
from traceml_attach.steps.classify import Rules
from traceml_attach.steps.clock import Step
from traceml_attach.steps.phases import PHASES

CLOSE_LAG_S = 5.0
# Data time between two advances of the trackers (the live view's freshness): TRACK_S for
# each TRACK_RANKS ranks begun. Part of a tracker's work is per advance (its clock, the
# shared clock of synchronized ranks, its timeline), so a job of 1,024 ranks is tracked every
# 2 s of data, which py-spy's windows (about that long) bring in anyway.
TRACK_S = 1.0
TRACK_RANKS = 512
# Raw data kept behind the newest: the live window, and the bucket still open before it.
RETAIN_S = LIVE_WINDOW_S + ROLLUP_S
PROGRESS_S = 5.0   # how often a long replay says how far it got (replay_file's progress)
_NS = 1_000_000_000


class Pipeline:
    """Feeds frames into a Recording, folds closed buckets into a History and trims."""

    def __init__(self, rules: Rules, retain_s: float = RETAIN_S, rollup_s: float = ROLLUP_S) -> None:
        self.rules = rules
        self.rec = Recording()
        self.history = History(rollup_s)
        # advanced where the frames' order alone says (every TRACK_S of data): deterministic
        self._analyzer = IncrementalAnalyzer(rules)
        self.tracked: Tracked | None = None
        self._next_track_ns: int | None = None
        self._track_every_ns = int(TRACK_S * _NS)
        self._clock_ns = 0   # the newest frame time seen, of any kind of frame
        self._view: tuple[Tracked, int, Analysis] | None = None   # the last live_analysis, and when
        self.retain_ns = int(retain_s * _NS)

    def add(self, frame: Any) -> None:
        self.rec.add(frame)
        if not isinstance(frame, dict):
            return
        t = frame.get("t")
        if isinstance(t, int) and t > self._clock_ns:
            self._clock_ns = t
        if frame.get("k") == "spans":
            span_range = self.rec.time_range()
            if span_range is not None and (self._next_track_ns is None or span_range[1] >= self._next_track_ns):
                self._track(span_range[1])
            self._roll(int(CLOSE_LAG_S * _NS))

    def live_analysis(self) -> Analysis:
        """The newest Tracked concluded, with the session's history: what a live view shows. It
        is at most one tracking interval of data behind the newest span and costs no
        step-finding; it is concluded again when the trackers advanced, or when the other frames
        (exits, nodes, telemetry) moved the data clock on by two intervals without spans."""
        if self.tracked is None:
            return analyze(self.rec, self.rules, history=self.history)
        view = self._view
        if view is None or view[0] is not self.tracked or self._clock_ns >= view[1] + 2 * self._track_every_ns:
            view = self._view = (self.tracked, self._clock_ns,
                                 self._analyzer.analysis(self.rec, self.tracked, self.history))
        return view[2]

    def _track(self, newest: int) -> Tracked | None:
        if self.tracked is None or self.tracked.end_ns != newest:
            self.tracked = self._analyzer.track(self.rec, newest)
            ranks = len(self.tracked.pids) if self.tracked is not None else 0
            self._track_every_ns = int(TRACK_S * max(1, -(-ranks // TRACK_RANKS)) * _NS)
            self._next_track_ns = newest + self._track_every_ns
        return self.tracked

    def window_analysis(self) -> Analysis:
        """The analysis of the newest LIVE_WINDOW_S of data: what a live view shows and what the
        final summary details (the history holds the rest of the session)."""
        span_range = self.rec.time_range()
        if span_range is None:
            return analyze(self.rec, self.rules, history=self.history)
        # never before sampling began (a short session's window is the session, not 30 s)
        began = min([t.ts_ns for t in self.rec.targets.values() if t.ts_ns] + [span_range[0]])
        start = max(began, span_range[1] - int(LIVE_WINDOW_S * _NS))
        return analyze(self.rec, self.rules, start_ns=start, history=self.history)

    def finish(self) -> None:
        """Fold everything still open (the last, partial bucket included): the session ended."""
        span_range = self.rec.time_range()
        if span_range is None:
            return
        self._roll(0)
        closed = self.history.closed_ns
        if closed is None or span_range[1] > closed:
            self._fold(closed if closed is not None else span_range[0], span_range[1],
                       self.window_analysis(), self.tracked.replaced if self.tracked is not None else {})

    def _roll(self, lag_ns: int) -> None:
        span_range = self.rec.time_range()
        if span_range is None:
            return
        if self.history.origin_ns is None:
            self.history.origin_ns = span_range[0]
        newest = span_range[1]
        folded = False
        while (end := self.history.next_end()) is not None and newest >= end + lag_ns:
            tracked = self._track(newest)
            assert tracked is not None
            self._fold(end - int(self.history.rollup_s * _NS), end, tracked)
            folded = True
        if folded and self.history.closed_ns is not None:
            self.rec.trim(min(newest - self.retain_ns, self.history.closed_ns))

    def _fold(self, start: int, end: int, an: Analysis | Tracked,
              replaced: dict[str, tuple[int, Timeline]] | None = None) -> None:
        """Fold [start, end) of ``an`` into the history; a rank whose steps are found from a rate
        change on has those before the change from the timeline it had then (Tracked.replaced)."""
        rows: dict[str, Bucket] = {}
        gpu = rank_gpu(self.rec, an.pids, start, end - 1)
        if replaced is None:
            replaced = an.replaced if isinstance(an, Tracked) else {}
        judged, last = last_arrivals({r: tl.steps for r, tl in an.timelines.items()}, start, end)
        for rank, pid in an.pids.items():
            cut, before = replaced.get(rank, (start, None))
            steps, timed = _bucket_steps(an.timelines.get(rank), max(start, cut), end)
            if cut > start:
                old_steps, old_timed = _bucket_steps(before, start, min(cut, end))
                steps, timed = old_steps + steps, old_timed + timed
            covered = [s for s in steps if s.covered]
            procs = [p for p in self.rec.procs.get(pid, ()) if start <= p.ts_ns < end]
            cpu = [p.cpu_percent for p in procs if p.cpu_percent is not None]
            sm = gpu.sm_util.get(rank, [])
            rows[rank] = Bucket(
                start, end, len(steps), len(timed), sum(s.dur_ns for s in timed),
                tuple(sum(s.phases_ns[p] for s in covered) for p in PHASES), sum(s.dur_ns for s in covered),
                Span3.of([p.rss_bytes + p.workers_rss_bytes for p in procs if p.rss_bytes is not None]),
                Span3.of([v for _, v in gpu.memory.get(rank, [])]),
                statistics.median(cpu) if cpu else None, statistics.median(sm) if sm else None,
                judged, last.get(rank, 0),
            )
        hosts = [h for h in self.rec.hosts if start <= h.ts_ns < end]
        cpus = [h.cpu_percent for h in hosts if h.cpu_percent is not None]
        used = [h.mem_used_bytes for h in hosts if h.mem_used_bytes is not None]
        self.history.fold(end, rows, statistics.median(cpus) if cpus else None, max(used) if used else None)


def _bucket_steps(tl: Timeline | None, start: int, end: int) -> tuple[list[Step], list[Step]]:
    """A timeline's steps that end in [start, end), and those of them that are timed (its step
    time is known)."""
    steps = [s for s in tl.steps if start <= s.end_ns < end] if tl is not None else []
    return steps, steps if tl is not None and tl.clock.known else []


def replay_file(path: str | Path, rules: Rules, rollup_s: float = ROLLUP_S,
                progress: Callable[[float], None] | None = None) -> tuple[Pipeline, str | None]:
    """A recorded session (a frames file and the segments rotation left beside it) through a
    Pipeline, finished: what the live session held when it ended (with rollups of ``rollup_s``).
    Also returns what is wrong with the file, if it is damaged (every frame before the damage is
    kept). ``progress`` hears the seconds of data replayed so far, every PROGRESS_S of wall time."""
    pipeline = Pipeline(rules, rollup_s=rollup_s)
    add = pipeline.add
    if progress is not None:
        frames, next_report = 0, time.monotonic() + PROGRESS_S

        def add(frame: Any) -> None:
            nonlocal frames, next_report
            pipeline.add(frame)
            frames += 1
            if frames % 1000 == 0 and time.monotonic() >= next_report:
                next_report += PROGRESS_S
                span_range, origin = pipeline.rec.time_range(), pipeline.history.origin_ns
                if span_range is not None and origin is not None:
                    progress((span_range[1] - origin) / _NS)
    try:
        pipeline.rec.dropped, problem = read_segments(Path(path), add)
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from exc
    pipeline.finish()
    return pipeline, problem
