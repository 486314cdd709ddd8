"""The step-time, rank and sampling sections of the report, from the window's per-rank
statistics and the recording's metadata and error events."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import fields

from traceml_attach.diagnose.finding import Finding, SamplingEvidence
from traceml_attach.diagnose.hang import rank_state
from traceml_attach.diagnose.kinds import Kind
from traceml_attach.diagnose.ranks import pid_ranks, rank_of
from traceml_attach.diagnose.report import (
    Clock,
    Extended,
    NetReport,
    NodeRow,
    PhaseRow,
    Problem,
    RankRate,
    RankStatus,
    RankStepTime,
    SamplingReport,
    Stall,
    StepTimeReport,
    Target,
    Window,
)
from traceml_attach.diagnose.step import unknown_step_note
from traceml_attach.ingest.model import node_of, os_pid
from traceml_attach.ingest.stream import Recording
from traceml_attach.policy import BLUR_SAMPLES, StepTimePolicy
from traceml_attach.steps.batch_timeline import Timeline
from traceml_attach.steps.clock import StepClock
from traceml_attach.steps.phases import PHASES
from traceml_attach.steps.steptime import RankStepStats

MAX_PROBLEMS = 20        # error events listed in the sampling section (all are counted)
MAX_RANK_PROBLEMS = 3    # ...and the newest, on each rank's row


def _round(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _rounded(d: dict[str, float] | None, nd: int = 3) -> dict[str, float] | None:
    return None if d is None else {k: round(v, nd) for k, v in d.items()}


def problems(rec: Recording) -> list[Problem]:
    """The recording's error events, each with the rank of its process."""
    ranks = pid_ranks(rec)
    return [Problem(round(e.ts_ns / 1e9, 3), os_pid(e.pid) if e.pid is not None else None,
                    ranks.get(e.pid) if e.pid is not None else None, e.kind, e.message) for e in rec.errors]


def step_time_section(stats: list[RankStepStats], findings: list[Finding], seen: list[Problem],
                      stretches: dict[str, tuple[int | None, int]] | None = None,
                      faster_hz: dict[str, int] | None = None, max_rate_hz: int | None = None) -> StepTimeReport:
    """The step table: each rank's row (with the sampling problems of its processes in ``seen``,
    and where and at what rate its steps were found: ``stretches``, (start ns when later than the
    window's, rate) by rank), the median and worst rows, skew and WAIT share. ``faster_hz`` and
    ``max_rate_hz`` (None: a fixed rate) tell the note on an unknown step time what the sampler
    will do by itself (step.unknown_step_note)."""
    stretches = stretches or {}
    by_rank: dict[int, list[Problem]] = {}
    for p in seen:
        if p.rank is not None:
            by_rank.setdefault(p.rank, []).append(p)
    ranks = {}
    for r in stats:
        own = by_rank.get(int(r.rank), [])
        ranks[int(r.rank)] = RankStepTime(
            int(r.rank), os_pid(r.pid), r.steps, _round(r.step_ms), _rounded(r.phases_ms), _rounded(r.shares, 4),
            _rounded(r.wait_labels, 4) or {}, r.loop, r.thread, _round(r.coverage), _round(r.sync_wait_ms),
            _round(r.sync_wait_share, 4), _clock(r.clock), tuple(own[-MAX_RANK_PROBLEMS:]), len(own),
            r.framework, r.micro_batches, _round(r.step_sd_ms), *_stretch(stretches.get(r.rank)))
    note = _joined(unknown_step_note(stats, faster_hz, max_rate_hz), mean_note(stats))
    measured = [r for r in stats if r.step_ms is not None and r.phases_ms]
    known = bool(measured) and len(measured) == len([r for r in stats if r.shares])
    if not measured:
        return StepTimeReport(tuple(findings), ranks, known, note, None, None, None, None)
    med_step = statistics.median(r.step_ms or 0.0 for r in measured)
    med_phases = {p: round(statistics.median((r.phases_ms or {})[p] for r in measured), 3) for p in PHASES}
    # the worst row is the rank a finding blames (a straggler waits less than the others: its
    # step is no longer than theirs), else the slowest
    blamed = {int(r.rank): r for r in measured}.get(next((f.worst_rank for f in findings
                                                         if isinstance(f.worst_rank, int)), -1))
    worst = blamed or max(measured, key=lambda r: r.step_ms or 0.0)
    return StepTimeReport(
        tuple(findings), ranks, known, note,
        PhaseRow(round(med_step, 3), med_phases),
        PhaseRow(_round(worst.step_ms), _rounded(worst.phases_ms) or {}, int(worst.rank)),
        round(100 * ((worst.step_ms or 0.0) - med_step) / med_step, 2) if med_step else None,
        round(statistics.median((r.shares or {})["wait"] for r in measured), 4), step_spread(measured))


def mean_note(stats: Sequence[RankStepStats]) -> str | None:
    """Which ranks' step time is the steps' mean (steps/mean.py), and why; None where none is."""
    meant = [(r.rank, r.clock) for r in stats if r.clock is not None and r.clock.mean]
    blurred = [rank for rank, clock in meant if clock.blurred and clock.shift_ns is None]
    varied = [(rank, clock.method == "wraps") for rank, clock in meant if not clock.blurred and clock.shift_ns is None]
    changed = [(rank, shift) for rank, clock in meant if (shift := clock.shift_ns) is not None]
    notes = []
    if blurred:
        notes.append(f"step ms on {_which(blurred)} is the mean step: the steps are under {BLUR_SAMPLES:.0f} samples "
                     "long, and the samples' lag at each end of a step can move their median (where steps come in "
                     "two lengths or more) but not their mean")
    for whole in (True, False):   # every boundary seen ("wraps"), or counted on a comb (the optimizer's visits)
        ranks = [rank for rank, seen in varied if seen == whole]
        if ranks:
            how = "every boundary (of a step, or of a micro-batch) was seen, and " if whole else ""
            notes.append(f"step ms on {_which(ranks)} is the mean step: {how}the steps vary too much for a typical "
                         "one (steps of two lengths or more, as input delivered in bursts makes, or steps slowed at "
                         "random by other work on the cores)")
    if changed:
        shift = changed[0][1]
        notes.append(f"step ms on {_which([rank for rank, _ in changed])} is the mean step: the steps changed length "
                     f"within the window (about {shift[0] / 1e6:.1f} ms, then {shift[1] / 1e6:.1f} ms), each side "
                     "counted on its own period; no typical step holds over both")
    return "; ".join(notes) or None


def _which(ranks: Sequence[str]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(ranks)}"


def _joined(*notes: str | None) -> str | None:
    return "; ".join(n for n in notes if n) or None


def _stretch(where: tuple[int | None, int] | None) -> tuple[int | None, float | None]:
    """A step row's rate and, when later than the window's start, where its steps begin (s)."""
    if where is None:
        return None, None
    since, rate = where
    return rate, None if since is None else round(since / 1e9, 3)


SPREAD = (("min", 0.0), ("p50", 0.5), ("p90", 0.9), ("max", 1.0))   # the distribution's rows


def step_spread(measured: Sequence[RankStepStats | RankStepTime]) -> dict[str, PhaseRow]:
    """The step and each phase across ranks with a known step (nearest-rank quantiles, each column
    on its own)."""
    steps = sorted(r.step_ms or 0.0 for r in measured)
    columns = {p: sorted((r.phases_ms or {}).get(p, 0.0) for r in measured) for p in PHASES}
    return {label: PhaseRow(round(_quantile(steps, q), 3), {p: round(_quantile(v, q), 3) for p, v in columns.items()})
            for label, q in SPREAD}


def _quantile(ordered: list[float], q: float) -> float:
    """The nearest-rank quantile of an ascending list (q=0: its minimum, 1: its maximum)."""
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


def _clock(c: StepClock | None) -> Clock | None:
    if c is None:
        return None
    return Clock(c.method, _round(c.visible), _round(c.concentration), c.reason, c.suggested_rate_hz,
                 _round(None if c.step_upper_ns is None else c.step_upper_ns / 1e6, 1), c.mean,
                 None if c.shift_ns is None else (round(c.shift_ns[0] / 1e6, 3), round(c.shift_ns[1] / 1e6, 3)))


def rank_status(rec: Recording, timelines: dict[str, Timeline], pids: dict[str, int],
                policy: StepTimePolicy) -> dict[int, RankStatus]:
    """alive / exited (with its status when it could be read) / restarted, per rank, and where
    each sampled rank stands at the window's end."""
    processes: dict[int, list[int]] = {}
    for index, pid in enumerate(rec.targets):
        processes.setdefault(int(rank_of(rec, pid, index)), []).append(pid)
    for label, pid in pids.items():   # sampled, but no target frame names it
        processes.setdefault(int(label), [pid])
    restarts = Counter(rank for _, rank, _, _ in rec.restarts)
    out = {}
    for rank in sorted(processes):
        pid = processes[rank][-1]
        ex = rec.exits.get(pid)
        status = "exited" if ex else ("restarted" if restarts[rank] else "alive")
        node = rec.nodes.get(node_of(pid))
        if not ex and node is not None and node.state == "lost":
            status = "agent lost"   # its node's agent went silent: the rank's own fate is unknown
        tl = timelines.get(str(rank))
        state = rank_state(str(rank), tl) if tl is not None else None
        stall = None if state is None else Stall(state.stalled(policy), round(state.idle_s, 1), state.what, state.where)
        meta = rec.targets.get(pid)
        out[rank] = RankStatus(rank, os_pid(pid), tuple(os_pid(p) for p in processes[rank]), status,
                               ex.status if ex else None, restarts[rank], stall, node_of(pid),
                               meta.local_rank if meta is not None else None)
    return out


def targets(rec: Recording) -> tuple[Target, ...]:
    return tuple(Target(os_pid(t.pid), t.rank, t.cmd, rec.exits[t.pid].status if t.pid in rec.exits else None,
                        t.pid in rec.exits, t.node, t.local_rank) for t in rec.targets.values())


def node_rows(rec: Recording) -> tuple[NodeRow, ...]:
    """A multi-node session's nodes, in the order they joined."""
    return tuple(NodeRow(n.node, n.name, n.host, n.state, n.ranks,
                         None if n.offset_ns is None else round(n.offset_ns / 1e6, 3), n.reason)
                 for _, n in sorted(rec.nodes.items()))


def net_report(rec: Recording) -> NetReport | None:
    if not rec.net:
        return None
    return NetReport(**{f.name: rec.net.get(f.name, 0) for f in fields(NetReport)})


def sampling_section(rec: Recording, start_ns: int | None, end_ns: int | None, seen: list[Problem],
                     recent: list[Problem], steps: StepTimeReport) -> SamplingReport:
    """``seen``: the recording's error events; ``recent``: those of the window analysed."""
    windows = [w for ws in rec.windows.values() for w in ws]
    counted = bool(windows) and any(w.samples is not None for w in windows)
    erred = bool(windows) and any(w.errors is not None for w in windows)
    total = rec.totals.get("error_events", len(seen))
    return SamplingReport(
        _sampling_finding(seen, recent, total, steps),
        rec.hello.get("backend", "py-spy"), rec.hello.get("backend_version"), rec.rate_hz,
        # whole-session totals (Recording.trim keeps them), as long as a window said how many
        rec.totals["samples"] if counted else None, rec.totals["errors"] if erred else None,
        rec.totals["windows"],
        Window(_seconds(start_ns), _seconds(end_ns)),
        tuple(seen[:MAX_PROBLEMS]), total, rec.bad_frames, rec.max_rate_hz, rank_rates(rec),
        None if rec.extended is None else Extended(rec.extended.from_s, rec.extended.to_s, rec.extended.why))


def rank_rates(rec: Recording) -> dict[int, RankRate]:
    """The ranks whose newest process's rate the sampler changed: the rate in use and why."""
    out: dict[int, RankRate] = {}
    for pid, rank in pid_ranks(rec).items():   # in the order sampled: a rank's newest process last
        changes = rec.rates.get(pid)
        if not changes:
            out.pop(rank, None)
            continue
        last = changes[-1]
        out[rank] = RankRate(last.rate_hz, round(last.ts_ns / 1e9, 3), last.why,
                             rec.rate_changes.get(pid, len(changes)))
    return out


def _seconds(ns: int | None) -> float | None:
    return None if ns is None else round(ns / 1e9, 3)


def _sampling_finding(seen: list[Problem], recent: list[Problem], total: int, steps: StepTimeReport) -> Finding:
    """SAMPLING FAILED when a thread of ours failed (critical when it failed in the window: its
    numbers may be stale), SAMPLING PROBLEMS when errors cost coverage (a warning when in the window)."""
    if not seen:
        return Finding(Kind.NORMAL, "info", "every sampler ran without an error", "", "")
    concerned = recent or seen
    ranks = tuple(sorted({p.rank for p in concerned if p.rank is not None}))
    coverage = [c for r in ranks if r in steps.ranks and (c := steps.ranks[r].coverage) is not None]
    failed = [p for p in seen if p.failed]
    evidence = SamplingEvidence(total, len(failed), dict(Counter(p.kind for p in seen)), ranks,
                                min(coverage) if coverage else None)
    named = ranks[0] if len(ranks) == 1 else None
    if failed:
        last = failed[-1]
        now = last in recent
        who = "the analysis thread" if last.kind == "analysis_failed" else (
            f"the sampler of rank {last.rank}" if last.rank is not None else "a sampler")
        times = f" ({len(failed)} times)" if len(failed) > 1 else ""
        when = "" if now else " before this window"
        return Finding(Kind.SAMPLING_FAILED, "critical" if now else "warning", f"{who} failed{times}{when}",
                       f"the last {last.kind}: {last.message}",
                       ("the numbers here may be stale or incomplete; " if now else "it ran again afterwards; ")
                       + "this is a bug in traceml-attach: report it with this summary", last.rank, evidence)
    plural = "s" if total != 1 else ""
    lost = next((p for p in reversed(seen) if p.kind == "recording_failed"), None)
    if lost is not None:   # the run folder's fault, not a rank's: the numbers here are whole
        return Finding(Kind.SAMPLING_PROBLEMS, "warning", "the recording on disk stopped: the run folder could not be "
                       "written", lost.message, "free space or make the logs folder writable (or give --logs-dir) "
                       "for the next attach; this summary is built from memory and misses nothing", None, evidence)
    if not recent:
        return Finding(Kind.SAMPLING_PROBLEMS, "info",
                       f"{total} sampling problem{plural} before this window, none in it",
                       f"the last: {seen[-1].line()}", "nothing in this window's numbers is missing", named, evidence)
    where = f" on rank {', '.join(map(str, ranks))}" if ranks else ""
    low = evidence.lowest_coverage
    lowest = f"; lowest coverage {100 * low:.1f}%" if low is not None else ""
    return Finding(Kind.SAMPLING_PROBLEMS, "warning",
                   f"{len(recent)} sampling problem{'s' if len(recent) != 1 else ''} "
                   f"in this window{where}{lowest}", f"the last: {recent[-1].line()}",
                   "the step numbers of those ranks cover less of the window: see each rank's note in the step table",
                   named, evidence)
