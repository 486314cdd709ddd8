"""The whole-session section of the report, and the memory series that reach back before the
live window: both from the rollup history (diagnose/history.py), which is all that is left of
the session's older data."""

from __future__ import annotations

import statistics

from traceml_attach.diagnose.arrival import arrival
from traceml_attach.diagnose.changes import changes
from traceml_attach.diagnose.history import History
from traceml_attach.diagnose.report import Arrival, RankSession, SessionReport

MemorySeries = dict[str, list[tuple[int, int]]]   # rank -> (ts_ns, bytes)


def session_section(history: History) -> SessionReport | None:
    if history.origin_ns is None or not history.ranks:
        return None
    ranks = {}
    for rank, h in history.ranks.items():
        if not rank.isdigit():
            continue
        cpus = [b.cpu_percent for b in h.buckets if b.cpu_percent is not None]
        shares = h.shares()
        step_ms = h.step_ms()
        rss = h.series("rss")
        ranks[int(rank)] = RankSession(
            int(rank), h.steps, None if step_ms is None else round(step_ms, 3),
            {p: round(v, 4) for p, v in shares.items()} if shares else None,
            h.peak("rss"), rss[-1][1] if rss else None, h.peak("gpu_mem"),
            round(statistics.median(cpus), 1) if cpus else None)
    newest = max((h.buckets[-1] for h in history.ranks.values() if h.buckets), key=lambda b: b.end_ns, default=None)
    return SessionReport(
        round(history.origin_ns / 1e9, 3), round(history.duration_ns / 1e9, 1),
        round((newest.end_ns - newest.start_ns) / 1e9, 1) if newest else 0.0,
        max((len(h.buckets) for h in history.ranks.values()), default=0), dict(sorted(ranks.items())),
        round(statistics.median(history.host_cpu), 1) if history.host_cpu else None, history.host_mem_peak,
        _arrival(history), changes(history))


def _arrival(history: History) -> Arrival | None:
    """Which rank the collective waited for, over the session's rollups."""
    ranks = {rank: h for rank, h in history.ranks.items() if rank.isdigit()}
    judged = max((sum(b.judged_steps for b in h.buckets) for h in ranks.values()), default=0)
    return arrival(judged, {rank: sum(b.last_steps for b in h.buckets) for rank, h in ranks.items()})


def with_history(raw: MemorySeries, history: History, which: str) -> MemorySeries:
    """Each rank's rollup points from before its raw samples (the tail of every rollup;
    ``which`` is "rss" or "gpu_mem"), then the raw samples: the memory trend of the session,
    exact over the window and one point per rollup before it."""
    out: MemorySeries = {}
    for rank in {*raw, *history.ranks}:
        after = list(raw.get(rank, ()))
        before = history.ranks[rank].series(which) if rank in history.ranks else []
        if after:
            before = [(t, v) for t, v in before if t < after[0][0]]
        if before or after:
            out[rank] = before + after
    return out
