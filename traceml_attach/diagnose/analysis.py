"""One pure entry point from a Recording (and a time window) to everything we report."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from traceml_attach.diagnose.arrival import arrival, last_arrivals
from traceml_attach.diagnose.dialect import speak
from traceml_attach.diagnose.dispatch import cpu_dispatch
from traceml_attach.diagnose.finding import Finding
from traceml_attach.diagnose.gpu import RankGpu, rank_gpu
from traceml_attach.diagnose.hang import detect_hang, detect_stopped, waits_on_children
from traceml_attach.diagnose.history import History
from traceml_attach.diagnose.kinds import Kind
from traceml_attach.diagnose.ranks import rank_key, rank_of, rank_pids, synchronized
from traceml_attach.diagnose.rate import earlier_rate, faster, lag_of, stretch
from traceml_attach.diagnose.report import ProcessReport, Projection, Report
from traceml_attach.diagnose.sections import (
    net_report,
    node_rows,
    problems,
    rank_status,
    sampling_section,
    step_time_section,
    targets,
)
from traceml_attach.diagnose.session import session_section
from traceml_attach.diagnose.step import NO_STEP_YET, diagnose_step_time, refine_with_gpu
from traceml_attach.diagnose.telemetry import MemorySeries, memory_section, process_section, system_section
from traceml_attach.diagnose.whatif import Host, mean_steps_ms, project
from traceml_attach.ingest.stream import Recording
from traceml_attach.policy import DEFAULT_STEP_TIME_POLICY, LIVE_WINDOW_S, StepTimePolicy
from traceml_attach.steps.accumulation import accumulated, plan_of, visit_gaps, with_earlier
from traceml_attach.steps.batch_timeline import Timeline, build_timeline, without_period
from traceml_attach.steps.classify import Rules
from traceml_attach.steps.extra_returns import without_returns
from traceml_attach.steps.hotframes import HotFrame, hot_frames
from traceml_attach.steps.mean import with_mean
from traceml_attach.steps.peersplit import split_by_peers
from traceml_attach.steps.steptime import RankStepStats, rank_stats, step_spread_ms, without_device
from traceml_attach.steps.sync import counted_of, noted, share_period, slow_clock
from traceml_attach.steps.union import by_union, by_visits, uneven

__all__ = ["Analysis", "analyze", "rank_key", "rank_of", "rank_pids"]


@dataclass(frozen=True)
class Analysis:
    """What ``analyze`` returns: the typed report, and the working data behind it that live
    views and the session history read (timelines, each rank's process, GPU readings)."""

    report: Report
    start_ns: int | None
    end_ns: int | None
    timelines: dict[str, Timeline]
    ranks: list[RankStepStats]
    pids: dict[str, int]            # each rank's process in the window (rank_pids)
    gpu: RankGpu                    # the ranks' GPU readings in the window
    memory_series: MemorySeries     # the memory series the report's trends are shown for

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The step-time findings, most severe first."""
        return self.report.step_time.findings


def analyze(
    rec: Recording,
    rules: Rules,
    policy: StepTimePolicy = DEFAULT_STEP_TIME_POLICY,
    start_ns: int | None = None,
    end_ns: int | None = None,
    memory_from_ns: int | None = None,
    history: History | None = None,
) -> Analysis:
    """Diagnose the recording's spans inside [start_ns, end_ns) (default: all of it). Memory
    trends need a longer view than step times: ``memory_from_ns`` starts theirs earlier. With
    the session's rollup ``history``, the report has its whole-session section and the memory
    trends reach back to the session's start."""
    span_range = rec.time_range()
    if span_range is None:
        start, end = start_ns, end_ns
    else:
        start = span_range[0] if start_ns is None else start_ns
        end = span_range[1] if end_ns is None else end_ns
    lo, hi = start or 0, end or (1 << 62)
    pids = rank_pids(rec, lo, hi)
    timelines: dict[str, Timeline] = {}
    earlier: dict[str, tuple[list[int], float]] = {}
    if span_range is not None:
        for rank, pid in pids.items():
            # where the rank's rate changed in the window, its steps are found where one rate holds
            since, rate = stretch(rec, pid, lo, hi)
            timelines[rank] = _timeline(rec, rules, pid, rate, since, hi)
            if since > lo:   # ...and its optimizer's visits before that are weighed too (with_earlier)
                earlier[rank] = visit_gaps(_timeline(rec, rules, pid, earlier_rate(rec, pid, lo, since), lo, since))
        sync = synchronized(rec, pids)
        timelines = _counted(timelines, earlier, sync)
    stats = [rank_stats(rank, tl) for rank, tl in timelines.items()]
    hot = {rank: hot_frames(tl) for rank, tl in timelines.items()}
    return conclude(rec, policy, start, end, pids, timelines, stats, hot, memory_from_ns, history)


def _counted(timelines: dict[str, Timeline], earlier: dict[str, tuple[list[int], float]], sync: bool
             ) -> dict[str, Timeline]:
    """The ranks' ``timelines`` with their steps counted: on the clock they share where they step
    together (``sync``), as gradient accumulation and slow steps count them, on their mean or their
    peers' boundaries where no median holds. Where that leaves every synchronized rank unknown (no
    rank's own clock known, no slow-steps clock), counted again with each rank's intervals split at
    the boundaries its peers saw and a comb fitted to the pieces (``union.by_union``'s ``comb``):
    last, as the least sure of the rules (a comb over boundaries that several ranks missed), so that
    wherever another knows the step, that one stands."""
    out, slowed = _counted_once(timelines, earlier, sync, by_union(timelines, sync) if sync else timelines)
    if sync and not slowed and not any(tl.clock.known for tl in out.values()):
        unioned = by_union(timelines, sync, comb=True)
        if unioned is not timelines:   # (else the same count again; so where a rank's own clock is known)
            again, _ = _counted_once(timelines, earlier, sync, unioned)
            if any(tl.clock.known for tl in again.values()):
                return again
    if sync and uneven(out):
        unioned = by_union(timelines, sync, own={rank: tl.clock for rank, tl in timelines.items()})
        if unioned is not timelines:
            again, _ = _counted_once(timelines, earlier, sync, unioned)
            if any(tl.clock.known for tl in again.values()):
                return again
    return by_visits(out, timelines, sync)


def _counted_once(timelines: dict[str, Timeline], earlier: dict[str, tuple[list[int], float]], sync: bool,
                  unioned: dict[str, Timeline]) -> tuple[dict[str, Timeline], bool]:
    """``_counted``'s rules on the ranks' ``timelines``, those ``union.by_union`` counted on their
    peers' boundaries too (``unioned``); and whether a slow-steps clock counted the ranks
    (``sync.slow_clock``)."""
    note = None
    if sync:   # (where no rank's own clock is known, each counted on the boundaries its peers saw too)
        timelines, note = share_period(unioned)
    plans = {rank: with_earlier(plan_of(tl), *earlier.get(rank, ((), 0.0))) for rank, tl in timelines.items()}
    timelines = accumulated(timelines, plans, sync)
    slow = slow_clock(timelines, counted_of(timelines), sync)
    if slow is not None:
        timelines = {r: without_period(t, replace(slow, unseen=t.clock.unseen)) for r, t in timelines.items()}
    timelines = split_by_peers(noted(with_mean(timelines, sync), note), sync)
    return without_returns(timelines, sync), slow is not None


def _timeline(rec: Recording, rules: Rules, pid: int, rate_hz: int, start_ns: int, end_ns: int) -> Timeline:
    return build_timeline(pid, rec.spans.get(pid, []), rec.threads.get(pid, {}), rules, rate_hz, start_ns, end_ns,
                          rec.cpu.get(pid, ()), rec.sources, rec.sampler_cpu.get(pid, ()))


def live_window(rec: Recording) -> int | None:
    """Start of the window a live view looks at (the last LIVE_WINDOW_S seconds of data)."""
    end = rec.time_range()
    return None if end is None else end[1] - int(LIVE_WINDOW_S * 1e9)


def first_ns(rec: Recording) -> int | None:
    """The recording's first moment: its first target frame or span."""
    starts = [t.ts_ns for t in rec.targets.values() if t.ts_ns]
    span_range = rec.time_range()
    if span_range is not None:
        starts.append(span_range[0])
    return min(starts) if starts else None


def analyze_live(rec: Recording, rules: Rules, policy: StepTimePolicy = DEFAULT_STEP_TIME_POLICY) -> Analysis:
    """The analysis a live view shows: step times over the live window, memory trends over
    everything the recording holds."""
    return analyze(rec, rules, policy, start_ns=live_window(rec), memory_from_ns=first_ns(rec))


def analyze_chunks(rec: Recording, rules: Rules, start_ns: int, end_ns: int, chunk_s: float
                   ) -> Iterator[tuple[int, Analysis]]:
    """[start_ns, end_ns) analysed in chunks of ``chunk_s`` as a live view would have seen it:
    each chunk's end and its analysis."""
    chunk_ns = int(chunk_s * 1e9)
    lo = start_ns
    while lo < end_ns:
        hi = min(lo + chunk_ns, end_ns)
        yield hi, analyze(rec, rules, start_ns=lo, end_ns=hi)
        lo = hi


def conclude(rec: Recording, policy: StepTimePolicy, start: int | None, end: int | None, pids: dict[str, int],
             timelines: dict[str, Timeline], stats: list[RankStepStats], hot: dict[str, dict[str, list[HotFrame]]],
             memory_from_ns: int | None = None, history: History | None = None) -> Analysis:
    """The Analysis of the ranks' timelines, statistics and hot frames in [start, end): where
    ``analyze`` and the live ``IncrementalAnalyzer`` (diagnose/incremental.py) meet."""
    lo, hi = start or 0, end or (1 << 62)
    gpu = rank_gpu(rec, pids, lo, hi)
    # a rank that holds no GPU waits for no device: its .item() and printing are other work
    stats = [s if gpu.memory.get(s.rank) else without_device(s, timelines[s.rank]) for s in stats]
    resumed = {rank: rec.resumed[pid] for rank, pid in pids.items() if pid in rec.resumed}
    findings = _step_findings(stats, timelines, gpu, policy, resumed,
                              lambda: _busy_children(rec, pids, hi, policy))
    stopped = detect_stopped({rank: (pid, *rec.stopped[pid], _newest(rec, pid, rec.stopped[pid][0]))
                              for rank, pid in pids.items() if pid in rec.stopped}, timelines)
    if stopped is not None:   # what a stopped process's stacks look like (a hang, no data) is the stop
        findings = [stopped, *(f for f in findings if f.kind not in (Kind.NO_DATA, Kind.WARMUP, Kind.HANG))]
    step_s = {s.rank: s.step_ms / 1e3 if s.step_ms else None for s in stats}
    if history is not None:
        memory, series = memory_section(rec, lo, hi, gpu, history, timelines, step_s)
    elif memory_from_ns is None or memory_from_ns >= lo:
        memory, series = memory_section(rec, lo, hi, gpu, None, timelines, step_s)
    else:
        memory, series = memory_section(rec, memory_from_ns, hi, rank_gpu(rec, pids, memory_from_ns, hi), None,
                                        timelines, step_s)
    seen = problems(rec)
    recent = [p for p in seen if start is None or p.ts * 1e9 >= start]   # reported once the window began
    lags = {rank: lag for rank, pid in pids.items() if (lag := lag_of(rec, pid, lo, hi)) is not None}
    stats = [_lagging(s, lags[s.rank]) if s.rank in lags else s for s in stats]
    step_time = step_time_section(stats, findings, recent, _stretches(rec, pids, lo, hi),
                                  {rank: advice[0] for rank, tl in timelines.items()
                                   if rank not in lags and (advice := faster(tl))},
                                  rec.max_rate_hz if (rec.max_rate_hz or 0) > rec.rate_hz else None)
    system, process = system_section(rec, lo, hi, findings[0].kind, pids), process_section(rec, pids, gpu, lo, hi)
    step_time = replace(step_time, whatif=_whatif(rec, lo, hi, step_time.findings, stats, timelines, process),
                        arrival=arrival(*last_arrivals({r: tl.steps for r, tl in timelines.items()}, lo, hi)))
    report = Report(
        targets(rec), rec.end_reason, rank_status(rec, timelines, pids, policy), step_time, memory,
        system, process,
        {int(rank): {phase: tuple(rows) for phase, rows in hot[rank].items()} for rank in timelines},
        sampling_section(rec, start, end, seen, recent, step_time),
        session_section(history) if history is not None else None,
        node_rows(rec), net_report(rec),
    )
    return Analysis(report, start, end, timelines, stats, pids, gpu, series)


def _lagging(stats: RankStepStats, lag: tuple[int, int, int]) -> RankStepStats:
    """A rank py-spy reached less often than asked (rate.lag_of): where its step time is unknown,
    the reason says so, and that no faster rate would help."""
    clock = stats.clock
    if clock is None or clock.known:
        return stats
    reached, asked, threads = lag
    why = (f"{clock.reason}; py-spy reached this process about {reached} times a second of the {asked} asked "
           f"(it reads {threads} threads at each sample), so a faster rate cannot help")
    return replace(stats, clock=replace(clock, reason=why, suggested_rate_hz=None))


def _whatif(rec: Recording, lo: int, hi: int, findings: tuple[Finding, ...], stats: list[RankStepStats],
            timelines: dict[str, Timeline], process: ProcessReport) -> tuple[Projection, ...]:
    """What each step-time finding's fix is worth, from each rank's mean covered step in the window."""
    totals = {}
    for rank, tl in timelines.items():
        covered = [s.end_ns - s.start_ns for s in tl.steps if s.covered]
        totals[rank] = (len(covered), sum(covered))
    hosts = [h for h in rec.hosts if lo <= h.ts_ns < hi and h.node == 0]
    cpus = next((h.cpus for h in reversed(hosts) if h.cpus), None)
    busy = [h.cpu_percent for h in hosts if h.cpu_percent is not None]
    workers = {str(rank): row.workers for rank, row in process.ranks.items()}
    known = [s for s in stats if s.step_ms is not None]
    if len(known) != len([s for s in stats if s.shares is not None]):
        return ()   # no step time: no milliseconds to project
    if known and all(s.step_sd_ms is None for s in known):
        # a live view keeps sums, not the spread: the median rank's, from its steps in the window
        mid = sorted(known, key=lambda s: s.step_ms or 0.0)[(len(known) - 1) // 2]
        if mid.rank in timelines and mid.step_ms is not None:
            sd = step_spread_ms(timelines[mid.rank].steps, mid.step_ms)
            known = [replace(s, step_sd_ms=sd) if s is mid else s for s in known]
    return project(findings, known, mean_steps_ms(known, totals), workers,
                   Host(cpus, statistics.median(busy) if busy else None))


def _newest(rec: Recording, pid: int, since_ns: int) -> int:
    """The newest reading of ``pid`` (its psutil samples go on while it is stopped)."""
    procs = rec.procs.get(pid)
    return max(since_ns, procs[-1].ts_ns) if procs else since_ns


def _stretches(rec: Recording, pids: dict[str, int], lo: int, hi: int) -> dict[str, tuple[int | None, int]]:
    """Where each rank's steps were found (when later than ``lo``) and at what rate (rate.stretch)."""
    out: dict[str, tuple[int | None, int]] = {}
    for rank, pid in pids.items():
        since, rate = stretch(rec, pid, lo, hi)
        out[rank] = (since if since > lo else None, rate)
    return out


def _step_findings(stats: list[RankStepStats], timelines: dict[str, Timeline], gpu: RankGpu,
                   policy: StepTimePolicy, resumed: dict[str, int],
                   busy: Callable[[], dict[str, list[tuple[int, float]]]]) -> list[Finding]:
    """Step time, refined with the GPU's utilization; a hang first. Where no rank shows a loop and
    each one's process has a child at work (``busy``, asked only then), that, for a HANG or NO DATA
    (``hang.waits_on_children``)."""
    findings = diagnose_step_time(stats, policy)
    sm = {rank: statistics.median(v) for rank, v in gpu.sm_util.items() if v}
    findings = speak(cpu_dispatch(refine_with_gpu(findings, stats, sm, policy), stats, sm), stats)
    hang = detect_hang(timelines, policy, resumed)
    if hang is not None:
        hang = waits_on_children(hang, timelines, busy()) or hang
        findings = [hang, *(f for f in findings if f.kind not in (Kind.NO_DATA, Kind.WARMUP))]
    elif findings[0].summary == NO_STEP_YET and not any(tl.loop for tl in timelines.values()):
        findings = [waits_on_children(findings[0], timelines, busy()) or findings[0], *findings[1:]]
    return findings


def _busy_children(rec: Recording, pids: dict[str, int], hi: int, policy: StepTimePolicy
                   ) -> dict[str, list[tuple[int, float]]]:
    """Each rank's child processes that worked at least ``busy_child_pct`` of a core (the median of
    three polls or more, about one a second) over the last half of ``hang_s`` before ``hi``, the
    stretch through which a HANG's call paths stayed the same: (PID, median %), the busiest first."""
    since = hi - int(policy.hang_s / 2 * 1e9)
    out: dict[str, list[tuple[int, float]]] = {}
    for rank, pid in pids.items():
        polls: dict[int, list[float]] = {}
        for sample in rec.procs.get(pid, ()):
            if since <= sample.ts_ns <= hi:
                for child, pct, _ in sample.children:
                    if pct is not None:
                        polls.setdefault(child, []).append(pct)
        busy = [(child, statistics.median(v)) for child, v in polls.items() if len(v) >= 3]
        out[rank] = sorted(((c, p) for c, p in busy if p >= policy.busy_child_pct), key=lambda cp: -cp[1])
    return out
