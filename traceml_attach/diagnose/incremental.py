"""The live view's analysis, carried from tick to tick.

``IncrementalAnalyzer.tick(rec)`` gives the Analysis that ``analyze(rec, rules,
start_ns=end - LIVE_WINDOW_S)`` gives, at a cost that does not grow with the session: each
rank's RankTracker (steps/live_tracker.py) reads only the spans that arrived since the last tick
and forgets those that left the window; synchronized ranks share one clock as in
``sync.share_period``; the statistics and hot frames come from running sums. What follows the
per-rank timelines (findings, GPU, hang, the report) is ``analysis.conclude``, as for the batch.

Full step-clock fits (~40 µs per interval) are rationed: a rank whose clock has never been
fitted for its thread and loop gets one at once; retries of an unknown clock and fits asked
for by a failed warm check share FIT_BUDGET intervals a tick (at least one fit runs), oldest
request first.

A tick is two halves. ``track`` advances the trackers (the cost that grows with the ranks and
the data) and keeps their timelines, statistics and hot frames as a ``Tracked``; ``analysis``
concludes a Tracked into an Analysis, and changes nothing, so a live view can conclude the
pipeline's newest Tracked as often as it likes without changing what the pipeline records
(runtime/pipeline.py tracks at points that the frames' order alone decides).

A rank whose sampling rate changed is tracked where one rate holds, as the batch reads it
(diagnose/rate.py ``stretch``): a new rate, or a stretch that starts at a settled raise, gets a
new tracker; the one it replaced is kept, no longer advanced, in ``Tracked.replaced`` while the
change is in the window, so that the history still folds what came before the change.

One analyzer follows one recording forward in data time; given an earlier end than the last
one (a recording read again), it starts over.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from traceml_attach.diagnose.analysis import Analysis, analyze, conclude
from traceml_attach.diagnose.history import History
from traceml_attach.diagnose.ranks import rank_pids, synchronized
from traceml_attach.diagnose.rate import stretch
from traceml_attach.ingest.stream import Recording
from traceml_attach.policy import DEFAULT_STEP_TIME_POLICY, LIVE_WINDOW_S, StepTimePolicy
from traceml_attach.steps.accumulation import Plan, accumulated, plan_of, visit_gaps, with_earlier
from traceml_attach.steps.batch_timeline import Timeline
from traceml_attach.steps.classify import Rules
from traceml_attach.steps.extra_returns import without_returns
from traceml_attach.steps.hotframes import HotFrame
from traceml_attach.steps.live_tracker import RankTracker
from traceml_attach.steps.mean import with_mean
from traceml_attach.steps.peersplit import split_by_peers
from traceml_attach.steps.steptime import RankStepStats, stats_of, step_totals
from traceml_attach.steps.sync import noted, share_period, share_tracked, slow_clock
from traceml_attach.steps.union import by_union, by_visits, uneven

FIT_BUDGET = 200       # intervals of full clock fits per tick (~8 ms), beyond the ones that cannot wait
GOLDEN = 0.6180339887  # spreads the ranks' warm checks evenly over REFIT_S
MICRO_RECHECK_S = 5.0  # gradient accumulation's micro-batches per step are looked for this often


def _visits(tl: Timeline) -> tuple[int, ...]:
    """Where the intervals that hold optimizer time begin: what ``plan_of``'s gaps are made of."""
    return tuple(iv.start_ns for iv in tl.intervals if iv.covered and iv.phases_ns.get("optimizer", 0) > 0)


@dataclass(frozen=True)
class Tracked:
    """The ranks' half of a tick over [start_ns, end_ns): what ``conclude`` turns into an Analysis.
    The timelines are views of the trackers' logs: valid until the next ``track``."""

    start_ns: int
    end_ns: int
    pids: dict[str, int]
    timelines: dict[str, Timeline]
    stats: list[RankStepStats]
    hot: dict[str, dict[str, list[HotFrame]]]
    # ranks whose steps are found from a rate change on (diagnose/rate.py): (that change, the
    # timeline their tracker had before it), for the history to fold what came before the change
    replaced: dict[str, tuple[int, Timeline]] = field(default_factory=dict)


class IncrementalAnalyzer:
    """Analyses the newest ``window_s`` of a growing recording, one tick at a time."""

    def __init__(self, rules: Rules, policy: StepTimePolicy = DEFAULT_STEP_TIME_POLICY,
                 window_s: float = LIVE_WINDOW_S) -> None:
        self.rules = rules
        self.policy = policy
        self.window_ns = int(window_s * 1e9)
        self.trackers: dict[int, RankTracker] = {}
        self.reference: str | None = None   # the rank that sets a synchronized job's clock
        self.last_end_ns: int | None = None
        self.created = 0
        # pid -> (how its returns become steps, next check, the visits a provisional plan was made on)
        self.micro: dict[int, tuple[Plan, int, tuple[int, ...] | None]] = {}
        self.since: dict[int, int] = {}   # pid -> where its tracker's stretch began (rate.stretch)
        self.replaced: dict[int, tuple[int, Timeline]] = {}   # pid -> Tracked.replaced's entry
        self._last: dict[int, Timeline] = {}   # pid -> its timeline at the last track
        self._raw: dict[int, Timeline] = {}    # pid -> the same before accumulation (its returns' own clock)
        # pid -> (its rate change, its old tracker's last timeline before accumulation): the
        # optimizer's visits before the change, which its plan weighs too (``with_earlier``)
        self.earlier: dict[int, tuple[int, Timeline]] = {}

    def tick(self, rec: Recording, end_ns: int | None = None, history: History | None = None) -> Analysis:
        """The Analysis of [end_ns - window, end_ns) (default: up to the newest span); with the
        session's rollup ``history``, the report has its whole-session section."""
        tracked = self.track(rec, end_ns)
        if tracked is None:
            return analyze(rec, self.rules, self.policy, history=history)
        return self.analysis(rec, tracked, history)

    def analysis(self, rec: Recording, tracked: Tracked, history: History | None = None) -> Analysis:
        """``tracked`` concluded: the findings and the report (the trackers are left as they are)."""
        return conclude(rec, self.policy, tracked.start_ns, tracked.end_ns, tracked.pids, tracked.timelines,
                        tracked.stats, tracked.hot, history=history)

    def track(self, rec: Recording, end_ns: int | None = None) -> Tracked | None:
        """The trackers advanced to ``end_ns`` (default: the newest span); None before any span."""
        span_range = rec.time_range()
        if span_range is None:
            return None
        end = span_range[1] if end_ns is None else end_ns
        start = end - self.window_ns
        if self.last_end_ns is not None and end < self.last_end_ns:
            self.trackers, self.reference, self.since, self.replaced, self._last = {}, None, {}, {}, {}
            self._raw, self.earlier = {}, {}
        self.last_end_ns = end
        pids = rank_pids(rec, start, end)
        trackers = {}
        for pid in pids.values():
            # as the batch: where the rank's rate changed, its steps are found where one rate holds
            # (diagnose/rate.py); a tracker is for one rate, so a new rate (or a stretch that
            # reaches back before its own) starts a new one
            since, rate = stretch(rec, pid, start, end)
            tracker = self.trackers.get(pid)
            if tracker is None or tracker.rate_hz != rate or since < self.since.get(pid, since):
                if tracker is not None and since > start and pid in self._last:
                    self.replaced[pid] = (since, self._last[pid])   # no longer advanced: its views hold
                    if pid in self._raw:
                        self.earlier[pid] = (since, self._raw[pid])
                else:
                    self.earlier.pop(pid, None)
                tracker = RankTracker(pid, self.rules, rate, stagger=self.created * GOLDEN)
                self.created += 1
            self.since[pid] = since
            tracker.advance(rec, since, end)
            trackers[pid] = tracker
        self.trackers = trackers   # a rank's old process (an elastic restart) is dropped
        self.since = {pid: v for pid, v in self.since.items() if pid in trackers}
        # a change older than the window: everything before it has been folded long since
        self.replaced = {pid: v for pid, v in self.replaced.items() if pid in trackers and v[0] >= start}
        self.earlier = {pid: v for pid, v in self.earlier.items() if pid in trackers and v[0] > start}
        self.micro = {pid: v for pid, v in self.micro.items() if pid in trackers}
        self._fit(end)
        by_rank = {rank: trackers[pid] for rank, pid in pids.items()}
        sync = synchronized(rec, pids)
        note = None
        if sync:
            shared, self.reference, note = share_tracked(by_rank, self.reference)
        else:
            for tracker in by_rank.values():
                tracker.count_own()
            shared = {rank: tracker.timeline() for rank, tracker in by_rank.items()}
        # as the batch (``analysis._counted``): the union's comb last, where all else left every
        # synchronized rank unknown (and no slow-steps clock recounted the trackers)
        union = by_union(shared, sync) if sync and self.reference is None else shared
        unioned, counted, timelines, slowed = self._counted(union, shared, note, by_rank, pids, start, end, sync)
        if sync and self.reference is None and not slowed and not any(tl.clock.known for tl in timelines.values()):
            union = by_union(shared, sync, comb=True)
            if union is not shared:   # (else the same count again)
                again = self._counted(union, shared, note, by_rank, pids, start, end, sync)
                if any(tl.clock.known for tl in again[2].values()):
                    unioned, counted, timelines, slowed = again
        # ...and every rank on the union, where slow or irregular steps left each unknown
        if sync and uneven(timelines):
            # (on each rank's own clock, as the batch: a rank that saw every boundary keeps its own)
            own = {rank: replace(tl, clock=by_rank[rank].own_clock(tl.start_seen_ns, tl.end_ns))
                   for rank, tl in shared.items()}
            union = by_union(own, sync, own={rank: tracker.clock for rank, tracker in by_rank.items()})
            if union is not own:
                again = self._counted(union, shared, note, by_rank, pids, start, end, sync)
                if any(tl.clock.known for tl in again[2].values()):
                    unioned, counted, timelines, slowed = again
        timelines = by_visits(timelines, shared, sync)
        stats = []
        for rank, tl in timelines.items():
            step_ms = tl.clock.typical_ns / 1e6 if tl.clock.typical_ns is not None else None
            # the tracker's running sums are over micro-batches; optimizer steps are summed afresh
            # (and where the steps were counted on the peers' boundaries, not on the tracker's own, or
            # some of its returns were no steps)
            totals = (by_rank[rank].totals(step_ms) if tl.micro_batches == 1 and not unioned and tl is counted[rank]
                      else step_totals(tl.steps, step_ms))
            stats.append(stats_of(rank, tl, totals))
        hot = {rank: tracker.hot() for rank, tracker in by_rank.items()}
        self._last = {pids[rank]: tl for rank, tl in timelines.items()}
        replaced = {rank: self.replaced[pid] for rank, pid in pids.items() if pid in self.replaced}
        return Tracked(start, end, pids, timelines, stats, hot, replaced)

    def _counted(self, union: dict[str, Timeline], timelines: dict[str, Timeline], note: str | None,
                 by_rank: dict[str, RankTracker], pids: dict[str, int], start: int, end: int, sync: bool
                 ) -> tuple[bool, dict[str, Timeline], dict[str, Timeline], bool]:
        """``analysis._counted_once`` on the trackers' ``timelines``, or on those ``union.by_union``
        counted on their peers' boundaries too (``union``, where it is not ``timelines``): (whether it
        is, the timelines before ``without_extra_returns``, after it, whether a slow-steps clock
        recounted the trackers)."""
        unioned = union is not timelines
        if unioned:   # no rank's own clock known: as the batch
            timelines, note = share_period(union)
        self._raw = {pids[rank]: tl for rank, tl in timelines.items()}
        plans = {rank: self._plan(by_rank[rank], tl, end) for rank, tl in timelines.items()}
        for rank, plan in plans.items():
            # as the batch: the visits before the rank's rate changed, inside the window
            change = self.earlier.get(pids[rank])
            if change is not None:
                plans[rank] = with_earlier(plan, *visit_gaps(change[1], start, change[0]))
        timelines = accumulated(timelines, plans, sync)
        slow = slow_clock(timelines, lambda rank, period: by_rank[rank].counted_at(period), sync)
        if slow is not None:
            for tracker in by_rank.values():
                tracker.count_ones()
            timelines = {rank: t.timeline(replace(slow, unseen=t.clock.unseen)) for rank, t in by_rank.items()}
        counted = split_by_peers(noted(with_mean(timelines, sync), note), sync)
        return unioned, counted, without_returns(counted, sync), slow is not None

    def _plan(self, tracker: RankTracker, tl: Timeline, now_ns: int) -> Plan:
        """``accumulation.plan_of``, made again every MICRO_RECHECK_S of data (staggered over the
        ranks) for a known clock: the micro-batches per step are a property of the job, and a walk
        over every interval of the window. A provisional plan (``Plan.provisional``: a few gaps
        between the optimizer's visits, which each new one may turn) is made again whenever the
        optimizer's visits in the window changed (``_visits``)."""
        if not tl.clock.known:
            return plan_of(tl)
        plan, due, visits = self.micro.get(tracker.pid, (Plan(), 0, None))
        if now_ns >= due or (plan.provisional and _visits(tl) != visits):
            plan = plan_of(tl)
            due = now_ns + int(MICRO_RECHECK_S * 1e9 * (0.75 + 0.5 * tracker.stagger))
            self.micro[tracker.pid] = (plan, due, _visits(tl) if plan.provisional else None)
        return plan

    def _fit(self, now_ns: int) -> None:
        """Full clock fits: the ones that cannot wait, then the rest within FIT_BUDGET."""
        spent = 0
        waiting = []
        for tracker in self.trackers.values():
            if tracker.fit_now:
                tracker.cold(now_ns)
            elif tracker.cold_due:
                waiting.append(tracker)
        waiting.sort(key=lambda t: t.last_cold_ns or 0)
        for tracker in waiting:
            if spent and spent + tracker.cold_cost > FIT_BUDGET:
                break
            tracker.cold(now_ns)
            spent += tracker.cold_cost
