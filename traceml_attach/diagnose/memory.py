"""Step-memory diagnosis: pressure, imbalance and trends, from per-rank memory series.

The same rules run on two sources: each rank's GPU memory from NVML (which counts the
caching allocator's reserved memory plus the CUDA context, not only live tensors) and each
rank's host RSS including its DataLoader workers. A CPU job's verdict is on its RSS, in the
same words as a GPU job's. Pure functions of the series.

A series is any list of (ts_ns, bytes) in time order: raw one-second samples, per-interval
rollups, or rollups followed by the raw newest seconds. Trends are judged by time, not by
sample count. Warm-up belongs to the job: the first ``creep_warmup_s`` of its process's life
are never judged, and a job that has run longer is judged from the first sample.

Every verdict is a measurement with its uncertainty (``Trend``), never a default:

- MEMORY RISING: a window too short to judge a trend (under ``creep_min_span_s``) with a rise
  that no allocator swing makes (``rising_min_bytes``; on a GPU, a share of the level too),
  under way across the whole window; with its pace and, where memory has a limit, the time left.
- MEMORY CREEP (EARLY) / MEMORY CREEP: a longer window whose block medians rise one after the
  other, far beyond their fit's standard error, keeping pace; CREEP once the rise is large or
  has gone on for ``creep_confirm_s``.
- steady (BALANCED): the rise is within its uncertainty, which is said, with the slowest leak
  that the window could not have told from it.
- a one-off rise (an eval, a checkpoint), a fall, or, over a long window, movement that is
  neither (an allocator's heap growing and trimming): said as such, never as steady; too little
  data, a short window's movement that is no verdict yet, or a job still warming up: NO DATA /
  WARMUP, with when a verdict will come.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from traceml_attach.diagnose.kinds import Kind
from traceml_attach.diagnose.memtrend import (
    RISING_STATES,
    Series,
    Trend,
    detectable_per_s,
    judged,
    series_state,
    short_floor,
    trend,
)
from traceml_attach.diagnose.ranks import rank_key
from traceml_attach.diagnose.step import SEVERITY_ORDER, Finding
from traceml_attach.policy import DEFAULT_MEMORY_POLICY, MIB, MemoryPolicy

NVML_NOTE = "NVML counts the caching allocator's reserved memory plus the CUDA context, not only live tensors"
@dataclass(frozen=True)
class RankMemory:
    rank: str
    samples: int
    peak_bytes: int
    bands_bytes: tuple[int, int, int] | None   # medians of the window's head, middle and tail thirds
    capacity_bytes: int | None
    trend: Trend | None = None   # past the warm-up
    # warmup | short | rising | creep | slight | flat | jump | falling | wandering | unsettled
    state: str = "short"
    wait_s: float | None = None  # warm-up left, or more time a verdict needs
    headroom_bytes: int | None = None   # what may still be taken before the limit (capacity, cgroup or host RAM)
    low_bytes: int | None = None        # the lowest and highest readings judged
    high_bytes: int | None = None
    age_known: bool = True              # the job's start time is known (else the session's start is its clock)

    @property
    def delta_bytes(self) -> int | None:
        return None if self.bands_bytes is None else self.bands_bytes[2] - self.bands_bytes[0]


@dataclass(frozen=True)
class MemoryReport:
    source: str                           # "gpu" or "host"
    finding: Finding
    ranks: list[RankMemory] = field(default_factory=list)


def _bands(values: list[int]) -> tuple[int, int, int]:
    n = len(values)
    third = max(n // 3, 1)
    return (int(statistics.median(values[:third])), int(statistics.median(values[third:n - third] or values)),
            int(statistics.median(values[n - third:])))


@dataclass(frozen=True)
class Limits:
    """What bounds a rank's memory: ``capacity`` (a GPU's memory, a cgroup's limit), and how much
    can still be taken (``headroom``: the host's available RAM for a job without a cgroup limit);
    and the job's process start time (its warm-up's clock)."""

    capacity: int | None = None
    headroom: int | None = None
    started_ns: int | None = None


def rank_memory(rank: str, series: Series, limits: Limits, policy: MemoryPolicy,
                sampling_started_ns: int | None = None, gpu: bool = False) -> RankMemory:
    values = [v for _, v in series]
    if len(values) < policy.min_samples:
        return RankMemory(rank, len(values), max(values) if values else 0, None, limits.capacity,
                          wait_s=_more(series, policy))
    last = series[-1][0]
    warmup_ns = int(policy.creep_warmup_s * 1e9)
    clock = limits.started_ns if limits.started_ns is not None else (sampling_started_ns or series[0][0])
    from_ns = clock + warmup_ns
    headroom = limits.headroom
    if limits.capacity is not None:
        room = max(limits.capacity - values[-1], 0)
        headroom = room if headroom is None else min(headroom, room)
    if last < from_ns:
        return RankMemory(rank, len(values), max(values), _bands(values), limits.capacity, None, "warmup",
                          (from_ns - last) / 1e9 + policy.min_judged_s, headroom,
                          age_known=limits.started_ns is not None)
    tr = trend(series, policy, from_ns, gpu)
    if tr is None:
        return RankMemory(rank, len(values), max(values), _bands(values), limits.capacity, None, "short",
                          _more(judged(series, from_ns), policy), headroom)
    state = series_state(tr, policy)
    wait = max(policy.creep_min_span_s - tr.span_s, 0.0) if state == "unsettled" else None
    seen = [v for _, v in judged(series, from_ns)]
    return RankMemory(rank, len(values), max(values), _bands(values), limits.capacity, tr, state, wait, headroom,
                      min(seen), max(seen))


def _more(series: Series, policy: MemoryPolicy) -> float:
    """Seconds of sampling a series still needs before anything is judged."""
    have = (series[-1][0] - series[0][0]) / 1e9 if len(series) > 1 else 0.0
    return max(policy.min_judged_s - have, 1.0)


# -- the finding ---------------------------------------------------------------------------

def diagnose_memory(source: str, series: Mapping[str, Series], limits: Mapping[str, Limits],
                    policy: MemoryPolicy = DEFAULT_MEMORY_POLICY,
                    sampling_started_ns: int | None = None) -> MemoryReport:
    """One source's memory finding for a window (``source`` is "gpu" or "host").

    ``limits``: each rank's capacity, headroom and process start time (``Limits``).
    ``sampling_started_ns``: when the session began sampling, the warm-up's clock where a job's
    start time is unknown (older recordings); None: each series' first sample."""
    # in rank order, whatever order they came in (a live collector's by arrival, a replay's by
    # rank): ties go to the lowest rank, and a live summary and its replay name the same one
    ranks = sorted((rank_memory(rank, s, limits.get(rank) or Limits(), policy, sampling_started_ns, source == "gpu")
                    for rank, s in series.items() if s), key=lambda r: rank_key(r.rank))
    what = "GPU memory" if source == "gpu" else "host RSS (with DataLoader workers)"
    if not ranks or all(r.bands_bytes is None for r in ranks):
        wait = max((r.wait_s or 0.0 for r in ranks), default=policy.min_judged_s)
        return MemoryReport(source, Finding(
            Kind.NO_DATA, "info", f"not enough {what} readings yet: a verdict in about {wait:.0f} s",
            f"a verdict needs {policy.min_samples} readings over {policy.min_judged_s:.0f} s per rank",
            f"keep sampling: a verdict in about {wait:.0f} s"), ranks)
    present = [r for r in ranks if r.bands_bytes is not None]
    worst = max(present, key=lambda r: r.peak_bytes)
    median_peak = statistics.median(r.peak_bytes for r in present)
    evidence: dict[str, Any] = {"worst_rank": worst.rank, "worst_peak_bytes": worst.peak_bytes,
                                "median_peak_bytes": median_peak}
    note = f"; {NVML_NOTE}" if source == "gpu" else ""
    finding = (_pressure(what, worst, policy, evidence, note) or _trend_finding(source, what, present, policy, evidence)
               or _imbalance(what, present, worst, median_peak, policy, evidence, note)
               or _calm(what, present, policy, evidence, note))
    return MemoryReport(source, finding, ranks)


def _pressure(what: str, worst: RankMemory, policy: MemoryPolicy, evidence: dict[str, Any],
              note: str) -> Finding | None:
    if not worst.capacity_bytes:
        return None
    pressure = worst.peak_bytes / worst.capacity_bytes
    if pressure < policy.pressure_warn:
        return None
    sev = "critical" if pressure >= policy.pressure_crit else "warning"
    return Finding(
        Kind.HIGH_PRESSURE, sev, f"rank {worst.rank}'s {what} is at {100 * pressure:.0f}% of capacity",
        f"peak {_mib(worst.peak_bytes)} of {_mib(worst.capacity_bytes)} (threshold "
        f"{100 * policy.pressure_warn:.0f}%){note}",
        "reduce memory load: smaller batch, activation checkpointing, lower precision",
        worst.rank, {**evidence, "capacity_bytes": worst.capacity_bytes})


def _trend_finding(source: str, what: str, ranks: list[RankMemory], policy: MemoryPolicy,
                   evidence: dict[str, Any]) -> Finding | None:
    """MEMORY RISING / MEMORY CREEP (EARLY) / MEMORY CREEP when the rank that rose most and the
    median rank both rise; None otherwise."""
    trended = sorted((r for r in ranks if r.trend is not None), key=lambda r: r.trend.rise_bytes if r.trend else 0.0)
    if not trended:
        return None
    top, median = trended[-1], trended[len(trended) // 2]
    if top.state not in RISING_STATES or median.state not in RISING_STATES:
        return None
    tr, median_tr = top.trend, median.trend
    assert tr is not None and median_tr is not None
    rate = median_tr.bytes_per_s
    confirmed = policy.creep_confirmed_gpu_bytes if source == "gpu" else policy.creep_confirmed_host_bytes
    if tr.short:
        kind, sev = Kind.MEMORY_RISING, "warning"
    elif median_tr.growth_bytes >= confirmed or median_tr.span_s >= policy.creep_confirm_s:
        kind, sev = Kind.MEMORY_CREEP, "critical"
    else:
        kind, sev = Kind.MEMORY_CREEP_EARLY, "warning"
    left = top.headroom_bytes / rate if top.headroom_bytes is not None and rate > 0 else None
    if left is not None and left < policy.critical_left_s:
        sev = "critical"
    h, m, t = tr.bands_bytes
    also = f"; rising on rank {median.rank} too" if median is not top else ""
    seen = (f"rank {top.rank}: {_mib(h)} → {_mib(m)} → {_mib(t)} (thirds of {tr.span_s:.0f} s), "
            f"{_pace(tr.bytes_per_s, tr.noise_bytes / tr.span_s)}{also}")
    why = seen + (f"; {_limit_text(top, left)}" if left is not None else "")
    if kind == Kind.MEMORY_CREEP_EARLY:
        why += (f"; MEMORY CREEP once the rise reaches +{_mib(confirmed)} or goes on for "
                f"{policy.creep_confirm_s:.0f} s")
    where = " on the rank that rose most and the median rank" if median is not top else ""
    return Finding(
        kind, sev, f"{what} rising {_pace(rate)}{where}: +{_mib(median_tr.rise_bytes)} in {median_tr.span_s:.0f} s"
        + (f", {_duration(left)} until its limit" if left is not None else ""),
        why + (f"; {NVML_NOTE}" if source == "gpu" else ""),
        "look for tensors kept across steps: losses or outputs stored without .item()/.detach(), "
        "growing caches or lists", top.rank,
        {**evidence, "growth_bytes": median_tr.growth_bytes, "bytes_per_s": round(rate, 1),
         "judged_from_ns": tr.from_ns, "judged_s": round(tr.span_s, 1), "noise_bytes": round(tr.noise_bytes),
         "headroom_bytes": top.headroom_bytes, "seconds_left": None if left is None else round(left, 1)})


def _imbalance(what: str, ranks: list[RankMemory], worst: RankMemory, median_peak: float, policy: MemoryPolicy,
               evidence: dict[str, Any], note: str) -> Finding | None:
    if not (worst.capacity_bytes and len(ranks) > 1 and median_peak):
        return None
    skew = (worst.peak_bytes - median_peak) / median_peak
    if skew < policy.imbalance_skew or worst.peak_bytes / worst.capacity_bytes < policy.imbalance_min_pressure:
        return None
    return Finding(
        Kind.IMBALANCE, "warning", f"rank {worst.rank} uses {100 * skew:.0f}% more {what} than the median rank",
        f"worst peak {_mib(worst.peak_bytes)} vs median {_mib(median_peak)}{note}",
        "inspect per-rank workload: uneven shapes, rank-local state", worst.rank, evidence)


def _calm(what: str, ranks: list[RankMemory], policy: MemoryPolicy, evidence: dict[str, Any],
          note: str) -> Finding:
    """No pressure, no trend on the median rank, no imbalance: what was measured instead, in its
    own words. Only ranks that were all flat within their noise make "steady"."""
    warming = [r for r in ranks if r.state == "warmup"]
    if warming:
        r = max(warming, key=lambda r: r.wait_s or 0.0)
        clock = ("" if r.age_known else "; this recording does not say when the job started, so the first "
                 f"{policy.creep_warmup_s:.0f} s of sampling are taken for it")
        return Finding(Kind.WARMUP, "info", f"{what} not judged yet: the job is warming up, a verdict in about "
                       f"{r.wait_s or 0:.0f} s",
                       f"the first {policy.creep_warmup_s:.0f} s of a job's life are warm-up (workers forking, "
                       f"caches filling); rank {r.rank} is judged from then on{clock}{note}",
                       f"keep sampling: a memory verdict in about {r.wait_s or 0:.0f} s", r.rank, evidence)
    waiting = [r for r in ranks if r.state in ("short", "unsettled")]
    if waiting:
        r = max(waiting, key=lambda r: abs(r.trend.rise_bytes) if r.trend else 0.0)
        wait = max(r.wait_s or 0.0, 1.0)
        return Finding(Kind.NO_DATA, "info", f"{what} not judged yet: a verdict in about {wait:.0f} s",
                       _unsettled(r, policy) + note, f"keep sampling: a memory verdict in about {wait:.0f} s",
                       r.rank, evidence)
    judged = [r for r in ranks if r.trend is not None]
    span = min(r.trend.span_s for r in judged if r.trend is not None)
    slowest = max(detectable_per_s(r.trend, policy) for r in judged if r.trend is not None)
    ev = {**evidence, "judged_s": round(span, 1)}
    for state in ("rising", "creep", "slight", "jump", "falling", "wandering"):
        found = [r for r in judged if r.state == state]
        if found:
            top = max(found, key=lambda r: abs(r.trend.rise_bytes) if r.trend else 0.0)
            return _moved(what, top, len(judged), policy, ev, note)
    top = max(judged, key=lambda r: r.trend.noise_bytes if r.trend else 0.0)
    tr = top.trend
    assert tr is not None
    return Finding(Kind.BALANCED, "info", f"{what} is steady: no rise beyond ±{_mib(tr.noise_bytes)} over {span:.0f} s",
                   f"rank {top.rank}: {_bands_text(top)}; a rise slower than {_pace(slowest)} would not show in "
                   f"{span:.0f} s{note}", "none for memory: it held level over the window", top.rank,
                   {**ev, "noise_bytes": round(tr.noise_bytes), "detectable_bytes_per_s": round(slowest, 1)})


def _moved(what: str, r: RankMemory, n: int, policy: MemoryPolicy, ev: dict[str, Any], note: str) -> Finding:
    """BALANCED for a rank whose memory moved, said as it moved: a rise on it alone, a slight
    rise, a one-off step, a fall, or ups and downs."""
    tr = r.trend
    assert tr is not None
    seen = f"rank {r.rank}: {_bands_text(r)}"
    ev = {**ev, "noise_bytes": round(tr.noise_bytes)}
    if r.state in ("rising", "creep"):
        return Finding(Kind.BALANCED, "info", f"{what} rising on rank {r.rank} only: +{_mib(tr.growth_bytes)} in "
                       f"{tr.span_s:.0f} s, {_pace(tr.bytes_per_s)}",
                       f"{seen}; the median of the {n} ranks does not rise, so this is no creep of the job{note}",
                       f"look at what rank {r.rank} keeps that the others do not: tensors, logs, caches",
                       r.rank, {**ev, "growth_bytes": tr.growth_bytes, "bytes_per_s": round(tr.bytes_per_s, 1)})
    if r.state == "slight":
        share = tr.rise_bytes / max(tr.bands_bytes[0], 1)
        share_floor = policy.creep_early_share_gpu if tr.gpu else policy.creep_early_share
        return Finding(Kind.BALANCED, "info", f"{what} rose slightly: +{_mib(tr.rise_bytes)} ({100 * share:.0f}%) "
                       f"over {tr.span_s:.0f} s", f"{seen}, a steady rise under the {100 * share_floor:.0f}% of its "
                       "level that is read as creep in one window (an allocator grows its heap for a minute or two "
                       f"after start-up); if it goes on, MEMORY CREEP (EARLY) follows{note}",
                       "watch the next windows", r.rank, ev)
    if r.state == "jump" and tr.jump is not None:
        at = time.strftime("%H:%M:%S", time.localtime(tr.jump.at_ns / 1e9))
        return Finding(Kind.BALANCED, "info", f"{what}: one rise of +{_mib(tr.jump.bytes)} at {at}, flat before and "
                       "after it",
                       f"{seen}: a one-off step (an eval, a checkpoint, a cache filled once), not a trend, over "
                       f"{tr.span_s:.0f} s{note}", "nothing points to a leak: watch for another step", r.rank,
                       {**ev, "jump_at_ns": tr.jump.at_ns, "jump_bytes": tr.jump.bytes})
    if r.state == "falling":
        return Finding(Kind.BALANCED, "info", f"{what} fell by {_mib(-tr.rise_bytes)} over {tr.span_s:.0f} s",
                       seen + note, "nothing points to a leak", r.rank, ev)
    return Finding(Kind.BALANCED, "info", f"{what}: no trend over {tr.span_s:.0f} s, it moves up and down",
                   f"{seen}: beyond ±{_mib(tr.noise_bytes)} but not a rise that keeps on (an allocator growing and "
                   f"trimming its heap); a rise slower than {_pace(detectable_per_s(tr, policy))} would not show in "
                   f"{tr.span_s:.0f} s{note}", "nothing points to a leak: the verdict is renewed as sampling goes on",
                   r.rank, ev)


def _bands_text(r: RankMemory) -> str:
    tr = r.trend
    bands = " → ".join(_mib(b) for b in tr.bands_bytes) if tr else "?"
    return f"{bands} (thirds; readings {_mib(r.low_bytes or 0)}–{_mib(r.high_bytes or 0)})"


def _unsettled(r: RankMemory, policy: MemoryPolicy) -> str:
    tr = r.trend
    if tr is None:
        return f"rank {r.rank}: {policy.min_judged_s:.0f} s past its warm-up are needed before anything is judged"
    h, m, t = tr.bands_bytes
    floor = short_floor(tr, policy)
    if abs(t - h) < floor:
        need = (f"less than the {_mib(floor)} a {tr.span_s:.0f}-s window needs to call a rise or a fall "
                "(allocators swing that much on a flat job)")
    else:
        need = "not a rise under way across the whole window, nor one step"
    return (f"rank {r.rank}: {_mib(h)} → {_mib(m)} → {_mib(t)} over {tr.span_s:.0f} s (thirds), beyond its noise "
            f"(±{_mib(tr.noise_bytes)}) but {need}; a trend is judged over {policy.creep_min_span_s:.0f} s")


def _limit_text(r: RankMemory, left: float | None) -> str:
    what = "its capacity" if r.capacity_bytes else "the host's available RAM"
    return f"{_mib(r.headroom_bytes or 0)} left before {what}: {_duration(left)} at this pace"


def _mib(x: float) -> str:
    return f"{x / MIB:.0f} MiB" if abs(x) < 10 * 1024 * MIB else f"{x / (1024 * MIB):.1f} GiB"


def _pace(bytes_per_s: float, give_or_take: float | None = None) -> str:
    """A pace in MiB/s, or MiB/min when slower than one MiB a second (``give_or_take`` in the same unit)."""
    scale, unit = (MIB, "MiB/s") if abs(bytes_per_s) >= MIB else (MIB / 60, "MiB/min")
    digits = 0 if unit == "MiB/s" else 1
    more = f" ±{give_or_take / scale:.{digits}f}" if give_or_take is not None else ""
    return f"{bytes_per_s / scale:.{digits}f}{more} {unit}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 90:
        return f"about {seconds:.0f} s"
    return f"about {seconds / 60:.0f} min" if seconds < 5400 else f"about {seconds / 3600:.0f} h"


def combine(gpu: MemoryReport | None, host: MemoryReport) -> Finding:
    """The step-memory diagnosis: the more severe of the GPU and host findings (the GPU's on a tie);
    a job without a GPU is judged on its host memory, and says so."""
    if gpu is None:
        f = host.finding
        return Finding(f.kind, f.severity, f.summary, f"no GPU in use: host memory judged; {f.why}", f.action,
                       f.worst_rank, f.evidence)
    return max((gpu.finding, host.finding), key=lambda f: (SEVERITY_ORDER[f.severity], f is gpu.finding))
