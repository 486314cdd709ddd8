"""The session's history as per-interval rollups, in bounded memory.

The raw data (spans, counters, psutil and NVML samples) is kept only for the live window
(``Recording.trim``). What a whole-session number needs is folded, every ``ROLLUP_S`` seconds
of data, into one ``Bucket`` per rank: steps and their time, phase totals, memory head, tail
and peak, CPU and SM utilization. Sums stay exact however long the session; the trend keeps
at most ``MAX_BUCKETS`` points per rank: past that, neighbouring buckets merge in pairs and the
interval doubles (10 s, 20 s, 40 s, …), so a day's session is held in 360 buckets of 4 min.

Everything here is plain data built from an Analysis and a Recording by the pipeline
(runtime/pipeline.py), in data time, so a replayed recording gives the same history.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from traceml_attach.steps.phases import PHASES

ROLLUP_S = 10.0
MAX_BUCKETS = 360


@dataclass(frozen=True, slots=True)
class Span3:
    """First, last and largest value of a series inside a bucket."""

    head: int
    tail: int
    peak: int

    @staticmethod
    def of(values: list[int]) -> Span3 | None:
        return Span3(values[0], values[-1], max(values)) if values else None

    def then(self, later: Span3 | None) -> Span3:
        return self if later is None else Span3(self.head, later.tail, max(self.peak, later.peak))


def _then(a: Span3 | None, b: Span3 | None) -> Span3 | None:
    return b if a is None else a.then(b)


def _mean(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return a if b is None else b
    return (a + b) / 2


@dataclass(frozen=True, slots=True)
class Bucket:
    """One rank over [start_ns, end_ns)."""

    start_ns: int
    end_ns: int
    steps: int                      # steps that ended inside the bucket
    timed_steps: int                # ...of them, those of a window whose step time was known
    timed_ns: int                   # their total duration
    phases_ns: tuple[int, ...]      # covered steps' time in each phase, in PHASES order
    covered_ns: int                 # covered steps' total duration (the phases' denominator)
    rss: Span3 | None = None        # host RSS with the DataLoader workers, bytes
    gpu_mem: Span3 | None = None    # device memory of the rank's processes, bytes
    cpu_percent: float | None = None   # the rank's main process, median
    sm_percent: float | None = None    # per-process SM utilization, median
    judged_steps: int = 0           # the job's steps whose last rank at the collective was judged (diagnose/arrival.py)
    last_steps: int = 0             # ...of them, those this rank arrived last in

    def merged(self, later: Bucket) -> Bucket:
        """This bucket and the next as one (medians become the mean of the two)."""
        return Bucket(
            self.start_ns, later.end_ns, self.steps + later.steps, self.timed_steps + later.timed_steps,
            self.timed_ns + later.timed_ns,
            tuple(a + b for a, b in zip(self.phases_ns, later.phases_ns, strict=True)),
            self.covered_ns + later.covered_ns, _then(self.rss, later.rss), _then(self.gpu_mem, later.gpu_mem),
            _mean(self.cpu_percent, later.cpu_percent), _mean(self.sm_percent, later.sm_percent),
            self.judged_steps + later.judged_steps, self.last_steps + later.last_steps,
        )


@dataclass
class RankHistory:
    buckets: list[Bucket] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return sum(b.steps for b in self.buckets)

    def step_ms(self) -> float | None:
        """Mean step over the session: None unless every step counted had a known time."""
        steps, timed = self.steps, sum(b.timed_steps for b in self.buckets)
        if not steps or timed != steps:
            return None
        return sum(b.timed_ns for b in self.buckets) / timed / 1e6

    def shares(self) -> dict[str, float] | None:
        covered = sum(b.covered_ns for b in self.buckets)
        if not covered:
            return None
        return {p: sum(b.phases_ns[i] for b in self.buckets) / covered for i, p in enumerate(PHASES)}

    def series(self, which: str) -> list[tuple[int, int]]:
        """(end_ns, tail value) per bucket, of ``rss`` or ``gpu_mem``: the memory trend."""
        out = []
        for b in self.buckets:
            value: Span3 | None = getattr(b, which)
            if value is not None:
                out.append((b.end_ns, value.tail))
        return out

    def peak(self, which: str) -> int | None:
        peaks = [v.peak for b in self.buckets if (v := getattr(b, which)) is not None]
        return max(peaks) if peaks else None


@dataclass
class History:
    """Every rank's buckets, closed every ``rollup_s`` seconds of data from ``origin_ns`` on."""

    rollup_s: float = ROLLUP_S          # the first buckets' length (the HTML report replays with shorter ones)
    origin_ns: int | None = None
    closed_ns: int | None = None        # end of the newest bucket folded in
    ranks: dict[str, RankHistory] = field(default_factory=dict)
    host_cpu: list[float] = field(default_factory=list)   # per bucket, median (merged in pairs too)
    host_mem_peak: int | None = None
    # what is derived from the buckets as they stand (diagnose/changes.py), by what and the newest
    # bucket's end: recomputed once a rollup, not on every tick that reads the session
    derived: dict[str, tuple[int | None, object]] = field(default_factory=dict, repr=False, compare=False)

    def next_end(self) -> int | None:
        if self.origin_ns is None:
            return None
        return (self.closed_ns if self.closed_ns is not None else self.origin_ns) + int(self.rollup_s * 1e9)

    def fold(self, end_ns: int, rows: dict[str, Bucket], host_cpu: float | None, host_mem: int | None) -> None:
        """Add the buckets that end at ``end_ns`` (one per rank that was seen)."""
        self.closed_ns = end_ns
        for rank, bucket in rows.items():
            history = self.ranks.setdefault(rank, RankHistory())
            history.buckets.append(bucket)
            if len(history.buckets) > MAX_BUCKETS:
                history.buckets = _pairs(history.buckets)
        if host_cpu is not None:
            self.host_cpu.append(host_cpu)
            if len(self.host_cpu) > MAX_BUCKETS:
                self.host_cpu = [statistics.fmean(self.host_cpu[i:i + 2]) for i in range(0, len(self.host_cpu), 2)]
        if host_mem is not None:
            self.host_mem_peak = max(self.host_mem_peak or 0, host_mem)

    @property
    def duration_ns(self) -> int:
        return 0 if self.origin_ns is None or self.closed_ns is None else self.closed_ns - self.origin_ns


def _pairs(buckets: list[Bucket]) -> list[Bucket]:
    out = [a.merged(b) for a, b in zip(buckets[::2], buckets[1::2], strict=False)]
    if len(buckets) % 2:
        out.append(buckets[-1])
    return out
