"""The memory, system and process sections of the report, from the psutil and NVML samples.

The rules live in memory.py and system.py; here their results become typed sections, and
their dict evidence typed evidence. The samples are read only through host_memory_series,
rank_gpu, diagnose_system and diagnose_process, so their source (raw window or rollups) can change.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any

from traceml_attach.diagnose.finding import (
    Finding,
    GpuStats,
    MemoryEvidence,
    ProcessEvidence,
    ProcessRank,
    SystemEvidence,
)
from traceml_attach.diagnose.gpu import RankGpu
from traceml_attach.diagnose.history import History
from traceml_attach.diagnose.kinds import Kind
from traceml_attach.diagnose.leak import leak_evidence
from traceml_attach.diagnose.memory import Limits, MemoryReport, combine, diagnose_memory
from traceml_attach.diagnose.ranks import rank_pids
from traceml_attach.diagnose.report import (
    HostTotals,
    MemorySource,
    ProcessReport,
    RankMemoryTrend,
    StepMemoryReport,
    SystemReport,
)
from traceml_attach.diagnose.session import with_history
from traceml_attach.diagnose.system import diagnose_process, diagnose_system
from traceml_attach.ingest.stream import Recording
from traceml_attach.steps.batch_timeline import Timeline

MemorySeries = dict[str, list[tuple[int, int]]]   # rank -> (ts_ns, bytes)


def host_memory_series(rec: Recording, lo: int, hi: int) -> MemorySeries:
    """Each rank's RSS plus its DataLoader workers', inside [lo, hi] (ns)."""
    out = {}
    for rank, pid in rank_pids(rec, lo, hi).items():
        out[rank] = [(p.ts_ns, p.rss_bytes + p.workers_rss_bytes)
                     for p in rec.procs_between(pid, lo, hi) if p.rss_bytes is not None]
    return out


def memory_section(rec: Recording, lo: int, hi: int, gpu: RankGpu, history: History | None = None,
                   timelines: Mapping[str, Timeline] | None = None, step_s: Mapping[str, float | None] | None = None,
                   ) -> tuple[StepMemoryReport, MemorySeries]:
    """The step-memory section over [lo, hi], and the series its trends are shown for (GPU
    memory when there are GPU readings, else host RSS). With the session's ``history``, the
    series start with its rollups. A job's warm-up is counted from its process's start (from the
    session's start where a recording does not say). ``timelines`` and ``step_s`` (each rank's
    step, where known) tell where rising memory goes (leak.py)."""
    host_series = host_memory_series(rec, lo, hi)
    gpu_series = gpu.memory
    started = None
    if history is not None and history.origin_ns is not None:
        host_series = with_history(host_series, history, "rss")
        gpu_series = with_history(gpu_series, history, "gpu_mem") if gpu_series else gpu_series
        started = history.origin_ns
    pids = rank_pids(rec, lo, hi)
    host = diagnose_memory("host", host_series, _host_limits(rec, pids), sampling_started_ns=started)
    gpu_report = (diagnose_memory("gpu", gpu_series, _gpu_limits(rec, pids, gpu), sampling_started_ns=started)
                  if gpu_series else None)
    finding = combine(gpu_report, host)
    judged = gpu_report if gpu_report is not None and finding is gpu_report.finding else host
    evidence = _memory_evidence(finding, judged)
    if evidence is not None and finding.kind in RISING_KINDS and finding.worst_rank is not None:
        evidence = _with_leak(evidence, rec, pids, str(finding.worst_rank), lo, hi, timelines or {}, step_s or {})
    section = StepMemoryReport(
        replace(finding, evidence=evidence),
        "gpu" if gpu.memory else "host",
        _source(host), _source(gpu_report) if gpu_report else None, tuple(gpu.notes))
    return section, (gpu_series if gpu_series else host_series)


RISING_KINDS = (Kind.MEMORY_RISING, Kind.MEMORY_CREEP_EARLY, Kind.MEMORY_CREEP)


def _host_limits(rec: Recording, pids: Mapping[str, int]) -> dict[str, Limits]:
    """Each rank's host memory bounds: its cgroup's limit (the capacity), else what its host
    has available now; and its process's start time."""
    out = {}
    for rank, pid in pids.items():
        meta = rec.targets.get(pid)
        node = meta.node if meta is not None else 0
        newest = next((h for h in reversed(rec.hosts) if h.node == node), None)
        available = (newest.mem_total_bytes - newest.mem_used_bytes
                     if newest is not None and newest.mem_total_bytes and newest.mem_used_bytes is not None else None)
        out[rank] = Limits(meta.memory_limit if meta else None, available, meta.started_ns if meta else None)
    return out


def _gpu_limits(rec: Recording, pids: Mapping[str, int], gpu: RankGpu) -> dict[str, Limits]:
    out = {}
    for rank, pid in pids.items():
        meta = rec.targets.get(pid)
        out[rank] = Limits(gpu.capacity.get(rank), None, meta.started_ns if meta else None)
    return out


def _with_leak(ev: MemoryEvidence, rec: Recording, pids: Mapping[str, int], rank: str, lo: int, hi: int,
               timelines: Mapping[str, Timeline], step_s: Mapping[str, float | None]) -> MemoryEvidence:
    pid = pids.get(rank)
    if pid is None:
        return ev
    step = step_s.get(rank)
    per_step = ev.bytes_per_s * step if ev.bytes_per_s is not None and step else None
    leak = leak_evidence(rec, pid, timelines.get(rank), lo, hi, step)
    return replace(ev, bytes_per_step=None if per_step is None else round(per_step), leak=leak)


def _source(report: MemoryReport) -> MemorySource:
    ranks = {int(r.rank): RankMemoryTrend(
        int(r.rank), r.samples, r.peak_bytes, r.bands_bytes, r.delta_bytes, r.capacity_bytes,
        r.trend.growth_bytes if r.trend else None,
        round(r.trend.bytes_per_s, 1) if r.trend else None,
        round(r.trend.span_s, 1) if r.trend else None,
        round(r.trend.noise_bytes) if r.trend else None, r.state) for r in report.ranks}
    worst = max(report.ranks, key=lambda r: r.peak_bytes) if report.ranks else None
    median = statistics.median(r.peak_bytes for r in report.ranks) if report.ranks else None
    return MemorySource(
        report.source, ranks, median, worst.peak_bytes if worst else None, int(worst.rank) if worst else None,
        round(100 * (worst.peak_bytes - median) / median, 2) if worst and median else None)


def _memory_evidence(finding: Finding, judged: MemoryReport) -> MemoryEvidence | None:
    """The memory finding's dict evidence, typed, with the named rank's bands."""
    ev: dict[str, Any] = finding.evidence if isinstance(finding.evidence, dict) else {}
    if not ev:
        return None
    by_rank = {int(r.rank): r for r in judged.ranks}
    worst = by_rank.get(int(ev["worst_rank"])) if ev.get("worst_rank") is not None else None
    named = by_rank.get(finding.worst_rank) if isinstance(finding.worst_rank, int) else None
    return MemoryEvidence(
        judged.source, int(worst.rank) if worst else None, ev.get("worst_peak_bytes"), ev.get("median_peak_bytes"),
        worst.capacity_bytes if worst else None, named.bands_bytes if named else None,
        ev.get("growth_bytes"), ev.get("bytes_per_s"), ev.get("judged_s"), ev.get("noise_bytes"),
        ev.get("headroom_bytes"), ev.get("seconds_left"), None, ev.get("jump_at_ns"), ev.get("jump_bytes"),
        ev.get("detectable_bytes_per_s"))


def system_section(rec: Recording, lo: int, hi: int, step_kind: str, pids: dict[str, int] | None = None
                   ) -> SystemReport:
    finding, ev = diagnose_system(rec, lo, hi, step_kind, ranks=pids)
    window = SystemEvidence(ev.get("host_cpu_percent_median"), ev.get("host_mem_peak"), {
        int(i): GpuStats(g["util_percent_median"], g["mem_used_peak"], g["temp_c_peak"], g["power_share_median"])
        for i, g in (ev.get("gpus") or {}).items()})
    return SystemReport(replace(finding, evidence=window), tuple(ev.get("findings") or ()), _host(rec))


def _host(rec: Recording) -> HostTotals:
    cpus = [h.cpu_percent for h in rec.hosts if h.cpu_percent is not None]
    used = [h.mem_used_bytes for h in rec.hosts if h.mem_used_bytes is not None]
    return HostTotals(round(statistics.median(cpus), 1) if cpus else None, max(used) if used else None,
                      rec.hosts[-1].mem_total_bytes if rec.hosts else None)


def process_section(rec: Recording, pids: dict[str, int], gpu: RankGpu, lo: int, hi: int) -> ProcessReport:
    finding, ev = diagnose_process(rec, pids, gpu, lo, hi)
    rows = {int(rank): ProcessRank(
        int(rank), r["pid"], r["cpu_percent_median"], r["rss_peak_bytes"], r["threads"], r["workers"],
        r["workers_cpu_percent"], r["workers_rss_bytes"], r["gpu_mem_peak_bytes"], r["gpu_capacity_bytes"],
        r["gpu_sm_util_median"]) for rank, r in (ev.get("ranks") or {}).items()}
    named = rows.get(finding.worst_rank) if isinstance(finding.worst_rank, int) else None
    evidence = ProcessEvidence(**asdict(named)) if named is not None else None
    return ProcessReport(replace(finding, evidence=evidence), tuple(ev.get("findings") or ()), rows,
                         tuple(ev.get("notes") or ()))
