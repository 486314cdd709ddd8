"""Step-memory diagnosis: pressure, imbalance and creep, from per-rank memory series.

The same rules run on two sources: each rank's GPU memory from NVML (which counts the
caching allocator's reserved memory plus the CUDA context, not only live tensors) and each
rank's host RSS including its DataLoader workers. Pure functions of the series.

A series is any list of (ts_ns, bytes) in time order: raw one-second samples, per-interval
rollups, or rollups followed by the raw newest seconds. Creep is judged by time, not by sample
count, so unevenly spaced points weigh as the time they cover. The first ``creep_warmup_s``
seconds of sampling are warm-up and are never judged (see ``trend``): the caller says when
sampling began (``sampling_started_ns``); without it, each series' first sample is taken for it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from traceml_attach.diagnose.step import SEVERITY_ORDER, Finding
from traceml_attach.policy import DEFAULT_MEMORY_POLICY, MIB, MemoryPolicy

Series = Sequence[tuple[int, int]]  # (ts_ns, bytes), in time order

NVML_NOTE = "NVML counts the caching allocator's reserved memory plus the CUDA context, not only live tensors"


@dataclass(frozen=True)
class Trend:
    """How a series moved after its warm-up: three equal spans of time, head, middle and tail."""

    from_ns: int                        # the first sample judged (the warm-up ends before it)
    span_s: float                       # seconds from the first to the last sample judged
    bands_bytes: tuple[int, int, int]   # median of each third
    separated: bool                     # every tail sample at or above every head sample

    @property
    def growth_bytes(self) -> int:
        return self.bands_bytes[2] - self.bands_bytes[0]

    @property
    def bytes_per_s(self) -> float:
        """The pace of the rise: the head's and tail's middles are two thirds of the span apart."""
        return self.growth_bytes / (self.span_s * 2 / 3)


def trend(series: Series, policy: MemoryPolicy, sampling_started_ns: int | None = None) -> Trend | None:
    """The series past the warm-up (the first ``creep_warmup_s`` seconds from
    ``sampling_started_ns``, else from the series' first sample), in time thirds; None until it
    covers ``creep_min_span_s`` seconds and ``min_samples`` samples past the warm-up, or when
    a third holds no sample."""
    if not series:
        return None
    started = series[0][0] if sampling_started_ns is None else sampling_started_ns
    judged = [(t, v) for t, v in series if t >= started + int(policy.creep_warmup_s * 1e9)]
    if len(judged) < policy.min_samples:
        return None
    first, last = judged[0][0], judged[-1][0]
    if last - first < policy.creep_min_span_s * 1e9:
        return None
    third = (last - first) / 3
    bands: list[list[int]] = [[], [], []]
    for t, v in judged:
        bands[min(int((t - first) / third), 2)].append(v)
    if not all(bands):
        return None
    head, mid, tail = (int(statistics.median(b)) for b in bands)
    return Trend(first, (last - first) / 1e9, (head, mid, tail), min(bands[2]) >= max(bands[0]))


@dataclass(frozen=True)
class RankMemory:
    rank: str
    samples: int
    peak_bytes: int
    bands_bytes: tuple[int, int, int] | None   # medians of the head, middle and tail thirds
    capacity_bytes: int | None
    trend: Trend | None = None   # past the warm-up: what creep is judged on

    @property
    def delta_bytes(self) -> int | None:
        return None if self.bands_bytes is None else self.bands_bytes[2] - self.bands_bytes[0]


@dataclass(frozen=True)
class MemoryReport:
    source: str                           # "gpu" or "host"
    finding: Finding
    ranks: list[RankMemory] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        peaks = [r.peak_bytes for r in self.ranks]
        worst = max(self.ranks, key=lambda r: r.peak_bytes) if self.ranks else None
        median = statistics.median(peaks) if peaks else None
        return {
            "source": self.source,
            "ranks": {r.rank: {"samples": r.samples, "peak_bytes": r.peak_bytes,
                               "head_mid_tail_bytes": list(r.bands_bytes) if r.bands_bytes else None,
                               "delta_bytes": r.delta_bytes, "capacity_bytes": r.capacity_bytes}
                      for r in self.ranks},
            "median_peak_bytes": median,
            "worst_peak_bytes": worst.peak_bytes if worst else None,
            "worst_rank": worst.rank if worst else None,
            "skew_pct": round(100 * (worst.peak_bytes - median) / median, 2) if worst and median else None,
        }


def _bands(values: list[int]) -> tuple[int, int, int]:
    n = len(values)
    third = max(n // 3, 1)
    return (int(statistics.median(values[:third])), int(statistics.median(values[third:n - third] or values)),
            int(statistics.median(values[n - third:])))


def rank_memory(rank: str, series: Series, capacity: int | None, policy: MemoryPolicy,
                sampling_started_ns: int | None = None) -> RankMemory:
    values = [v for _, v in series]
    if len(values) < policy.min_samples:
        return RankMemory(rank, len(values), max(values) if values else 0, None, capacity)
    return RankMemory(rank, len(values), max(values), _bands(values), capacity,
                      trend(series, policy, sampling_started_ns))


def _rising(tr: Trend, policy: MemoryPolicy) -> bool:
    """A rise that goes on: in both steps, by the same pace or near it, and not a sawtooth."""
    head, mid, tail = tr.bands_bytes
    return (tr.separated and mid - head >= policy.creep_band_rise_bytes
            and tail - mid >= max(policy.creep_band_rise_bytes, policy.creep_keeps_pace * (mid - head)))


def _mib(x: float) -> str:
    return f"{x / MIB:.0f} MiB"


def diagnose_memory(source: str, series: Mapping[str, Series], capacity: Mapping[str, int | None],
                    policy: MemoryPolicy = DEFAULT_MEMORY_POLICY,
                    sampling_started_ns: int | None = None) -> MemoryReport:
    """One source's memory finding for a window (``source`` is "gpu" or "host").

    ``sampling_started_ns``: when the session began sampling, so that a series that starts later
    (the newest seconds of a long session) is not taken for a warm-up; None: each series' first
    sample (right for a series that covers the whole session)."""
    ranks = [rank_memory(rank, s, capacity.get(rank), policy, sampling_started_ns)
             for rank, s in series.items() if s]
    what = "GPU memory" if source == "gpu" else "host RSS (with DataLoader workers)"
    note = f"; {NVML_NOTE}" if source == "gpu" else ""
    if not ranks or all(r.bands_bytes is None for r in ranks):
        return MemoryReport(source, Finding("NO_DATA", "info", f"not enough {what} samples yet",
                                            f"a trend needs {policy.min_samples} samples per rank", "keep sampling"),
                            ranks)
    judged = [r for r in ranks if r.bands_bytes is not None]
    worst = max(judged, key=lambda r: r.peak_bytes)
    median_peak = statistics.median(r.peak_bytes for r in judged)
    evidence = {"worst_rank": worst.rank, "worst_peak_bytes": worst.peak_bytes, "median_peak_bytes": median_peak}

    if worst.capacity_bytes:
        pressure = worst.peak_bytes / worst.capacity_bytes
        if pressure >= policy.pressure_warn:
            sev = "critical" if pressure >= policy.pressure_crit else "warning"
            return MemoryReport(source, Finding(
                "HIGH_PRESSURE", sev, f"rank {worst.rank}'s {what} is at {100 * pressure:.0f}% of capacity",
                f"peak {_mib(worst.peak_bytes)} of {_mib(worst.capacity_bytes)} (threshold "
                f"{100 * policy.pressure_warn:.0f}%){note}",
                "reduce memory load: smaller batch, activation checkpointing, lower precision",
                worst.rank, evidence), ranks)

    creep = _creep(source, what, judged, policy, evidence)
    if creep is not None:
        return MemoryReport(source, creep, ranks)

    if worst.capacity_bytes and len(judged) > 1 and median_peak:
        skew = (worst.peak_bytes - median_peak) / median_peak
        if skew >= policy.imbalance_skew and worst.peak_bytes / worst.capacity_bytes >= policy.imbalance_min_pressure:
            return MemoryReport(source, Finding(
                "IMBALANCE", "warning", f"rank {worst.rank} uses {100 * skew:.0f}% more {what} than the median rank",
                f"worst peak {_mib(worst.peak_bytes)} vs median {_mib(median_peak)}{note}",
                "inspect per-rank workload: uneven shapes, rank-local state", worst.rank, evidence), ranks)

    return MemoryReport(source, Finding(
        "BALANCED", "info", f"{what} is steady",
        f"peak {_mib(worst.peak_bytes)} on rank {worst.rank}; change across the window "
        f"{_mib(worst.delta_bytes or 0)}; {_past_warmup(worst, policy)}{note}", "nothing to do", worst.rank,
        evidence), ranks)


def _creep(source: str, what: str, judged: list[RankMemory], policy: MemoryPolicy,
           evidence: dict[str, Any]) -> Finding | None:
    """MEMORY CREEP (EARLY) when the rank that grew most and the median rank both keep rising
    past the warm-up; None otherwise."""
    trended = sorted(((r, r.trend) for r in judged if r.trend is not None), key=lambda rt: rt[1].growth_bytes)
    if not trended:
        return None
    (top, tr), (median, median_tr) = trended[-1], trended[len(trended) // 2]
    growth = median_tr.growth_bytes
    if not (_rising(tr, policy) and _rising(median_tr, policy) and growth >= policy.creep_early_bytes):
        return None
    confirmed = policy.creep_confirmed_gpu_bytes if source == "gpu" else policy.creep_confirmed_host_bytes
    h, m, t = tr.bands_bytes
    also = f"; rising on rank {median.rank} too" if median is not top else ""
    seen = (f"rank {top.rank}: head {_mib(h)} → middle {_mib(m)} → tail {_mib(t)} over the {tr.span_s:.0f} s "
            f"after a {policy.creep_warmup_s:.0f} s warm-up (not judged), about {_pace(tr.bytes_per_s)}{also}")
    if growth >= confirmed:
        kind, sev = "MEMORY_CREEP", "critical"
        why = f"{seen}; +{_mib(growth)} is past the +{_mib(confirmed)} that marks a leak rather than a cache"
    else:
        kind, sev = "MEMORY_CREEP_EARLY", "warning"
        eta_s = (confirmed - growth) / median_tr.bytes_per_s
        why = (f"{seen}; it becomes MEMORY CREEP if the rise goes on to +{_mib(confirmed)} "
               f"({_within(eta_s)} at this pace)")
    where = " on the rank that grew most and the median rank" if median is not top else ""
    note = f"; {NVML_NOTE}" if source == "gpu" else ""
    return Finding(
        kind, sev, f"{what} keeps rising past warm-up: +{_mib(growth)}{where}",
        why + note,
        "look for tensors kept across steps: losses or outputs stored without .item()/.detach(), "
        "growing caches or lists", top.rank,
        {**evidence, "growth_bytes": growth, "bytes_per_s": round(median_tr.bytes_per_s, 1),
         "judged_from_ns": tr.from_ns, "judged_s": round(tr.span_s, 1)})


def _pace(bytes_per_s: float) -> str:
    return f"{bytes_per_s / MIB:.0f} MiB/s" if bytes_per_s >= MIB else f"{bytes_per_s * 60 / MIB:.0f} MiB/min"


def _within(seconds: float) -> str:
    if seconds < 60:
        return "within a minute"
    return f"in about {seconds / 60:.0f} min" if seconds < 5400 else f"in about {seconds / 3600:.0f} h"


def _past_warmup(r: RankMemory, policy: MemoryPolicy) -> str:
    """What the creep rule saw on ``r``: its change past the warm-up, or why it has not judged yet."""
    if r.trend is None:
        return (f"creep is judged once {policy.creep_warmup_s + policy.creep_min_span_s:.0f} s are sampled "
                f"(the first {policy.creep_warmup_s:.0f} s are warm-up)")
    return (f"past the {policy.creep_warmup_s:.0f} s warm-up: {r.trend.growth_bytes / MIB:+.0f} MiB "
            f"over {r.trend.span_s:.0f} s")


def combine(gpu: MemoryReport | None, host: MemoryReport) -> Finding:
    """The step-memory diagnosis: the more severe of the GPU and host findings; NO GPU when the
    job has no GPU and its host memory is fine."""
    if gpu is None:
        if host.finding.severity != "info":
            return host.finding
        return Finding("NO_GPU", "info", "no GPU in use; host memory: " + host.finding.summary,
                       host.finding.why, host.finding.action, host.finding.worst_rank, host.finding.evidence)
    return max((gpu.finding, host.finding), key=lambda f: (SEVERITY_ORDER[f.severity], f is gpu.finding))
