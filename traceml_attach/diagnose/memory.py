"""Step-memory diagnosis: pressure, imbalance and creep, from per-rank memory series.

The same rules run on two sources: each rank's GPU memory from NVML (which counts the
caching allocator's reserved memory plus the CUDA context, not only live tensors) and each
rank's host RSS including its DataLoader workers. Pure functions of the series.
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
class RankMemory:
    rank: str
    samples: int
    peak_bytes: int
    bands_bytes: tuple[int, int, int] | None   # medians of the head, middle and tail thirds
    capacity_bytes: int | None
    separated: bool = False   # every tail sample at or above every head sample (a sawtooth is not)

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


def rank_memory(rank: str, series: Series, capacity: int | None, policy: MemoryPolicy) -> RankMemory:
    values = [v for _, v in series]
    if len(values) < policy.min_samples:
        return RankMemory(rank, len(values), max(values) if values else 0, None, capacity)
    third = len(values) // 3
    separated = min(values[-third:]) >= max(values[:third])
    return RankMemory(rank, len(values), max(values), _bands(values), capacity, separated)


def _rising(r: RankMemory, policy: MemoryPolicy) -> bool:
    if r.bands_bytes is None:
        return False
    head, mid, tail = r.bands_bytes
    return (r.separated and mid - head >= policy.creep_band_rise_bytes
            and tail - mid >= policy.creep_band_rise_bytes)


def _mib(x: float) -> str:
    return f"{x / MIB:.0f} MiB"


def diagnose_memory(source: str, series: Mapping[str, Series], capacity: Mapping[str, int | None],
                    policy: MemoryPolicy = DEFAULT_MEMORY_POLICY) -> MemoryReport:
    """One source's memory finding for a window (``source`` is "gpu" or "host")."""
    ranks = [rank_memory(rank, s, capacity.get(rank), policy) for rank, s in series.items() if s]
    what = "GPU memory" if source == "gpu" else "host RSS (with DataLoader workers)"
    note = f"; {NVML_NOTE}" if source == "gpu" else ""
    if not ranks or all(r.bands_bytes is None for r in ranks):
        return MemoryReport(source, Finding("NO_DATA", "info", f"not enough {what} samples yet",
                                            f"a trend needs {policy.min_samples} samples per rank", "keep sampling"),
                            ranks)
    judged = [r for r in ranks if r.bands_bytes is not None]
    worst = max(judged, key=lambda r: r.peak_bytes)
    by_delta = sorted(judged, key=lambda r: r.delta_bytes or 0)
    median_rank = by_delta[len(by_delta) // 2]
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

    worst_rising, median_rising = _rising(worst, policy), _rising(median_rank, policy)
    growth = min(worst.delta_bytes or 0, median_rank.delta_bytes or 0)
    if worst_rising and median_rising and growth >= policy.creep_early_bytes:
        confirmed = policy.creep_confirmed_gpu_bytes if source == "gpu" else policy.creep_confirmed_host_bytes
        kind, sev = ("MEMORY_CREEP", "critical") if growth >= confirmed else ("MEMORY_CREEP_EARLY", "warning")
        h, m, t = worst.bands_bytes or (0, 0, 0)
        return MemoryReport(source, Finding(
            kind, sev, f"{what} keeps rising: +{_mib(growth)} across the window on the worst and median rank",
            f"rank {worst.rank}: head {_mib(h)} → middle {_mib(m)} → tail {_mib(t)}; rising on rank "
            f"{median_rank.rank} too (confirmed creep from +{_mib(confirmed)}){note}",
            "look for tensors kept across steps: losses or outputs stored without .item()/.detach(), "
            "growing caches or lists", worst.rank, {**evidence, "growth_bytes": growth}), ranks)

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
        f"{_mib(worst.delta_bytes or 0)}{note}", "nothing to do", worst.rank, evidence), ranks)


def combine(gpu: MemoryReport | None, host: MemoryReport) -> Finding:
    """The step-memory diagnosis: the more severe of the GPU and host findings; NO GPU when the
    job has no GPU and its host memory is fine."""
    if gpu is None:
        if host.finding.severity != "info":
            return host.finding
        return Finding("NO_GPU", "info", "no GPU in use; host memory: " + host.finding.summary,
                       host.finding.why, host.finding.action, host.finding.worst_rank, host.finding.evidence)
    return max((gpu.finding, host.finding), key=lambda f: (SEVERITY_ORDER[f.severity], f is gpu.finding))
