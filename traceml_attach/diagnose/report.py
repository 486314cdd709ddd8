"""The typed report ``analyze`` returns: every diagnosis of one window with its evidence.

The summary JSON is its serialization (output/summary.py, field names as here), and the text,
the live document and the TUI read it; none of them re-derive a number. Ranks are ints; a
``dict[int, ...]`` is keyed by rank. Shares are fractions (0..1), percentages say ``percent``
or ``pct``, and every other unit is in the name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from traceml_attach.diagnose.finding import Finding, HangEvidence, ProcessRank, StragglerEvidence, SystemEvidence
from traceml_attach.steps.hotframes import HotFrame

# Error kinds that mean a thread of ours stopped working (its traceback in the message): the
# summary and the TUI show them as a failed state. Every other error kind is a sampling problem
# that costs coverage (a py-spy window that failed, a rank refused at attach).
FAILED_KINDS = frozenset({"sampler_failed", "analysis_failed"})


@dataclass(frozen=True)
class Problem:
    """One error event of the recording."""

    _json_derived: ClassVar[tuple[str, ...]] = ("failed",)
    ts: float                 # seconds since the epoch
    pid: int | None
    rank: int | None          # the rank of ``pid``; None for an error of no rank (the analysis thread)
    kind: str                 # "pyspy_failed", "permission", "sampler_failed", "analysis_failed", ...
    message: str

    @property
    def failed(self) -> bool:
        return self.kind in FAILED_KINDS

    def line(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass(frozen=True)
class Clock:
    """How a rank's steps were counted (steps/batch_timeline.py StepClock)."""

    method: str                       # "comb", "wraps", ...
    visible: float | None             # chance that a step boundary shows as a wrap
    concentration: float | None
    reason: str | None                # why the step time is unknown
    suggested_rate_hz: int | None     # a --rate that would tell it
    step_upper_ms: float | None       # what the step is known to be shorter than
    mean: bool = False                # the step time is the steps' mean, not their median (steps/mean.py)
    # the steps changed length within the window: each side's period (ms), each side counted on its own
    shift_ms: tuple[float, float] | None = None


@dataclass(frozen=True)
class RankStepTime:
    rank: int
    pid: int
    steps: int                              # counted (a lower bound when step_ms is None)
    step_ms: float | None                   # the typical step; None when it cannot be known
    phases_ms: dict[str, float] | None      # per typical step, by phase
    shares: dict[str, float] | None         # share of the step, by phase
    wait_labels: dict[str, float]           # share of the wait phase, by label
    loop: str | None
    thread: str | None
    coverage: float | None                  # share of the window in which the training thread was seen
    sync_wait_ms: float | None              # per step, blocked in synchronizing phases
    sync_wait_share: float | None
    clock: Clock | None
    problems: tuple[Problem, ...] = ()      # the rank's newest sampling problems (by its pid)
    problem_count: int = 0                  # all of them in the recording
    framework: str | None = None            # whose loop or code it runs: "HF Trainer (transformers 5.x)"
    micro_batches: int | None = 1           # per step: with gradient accumulation a step is an optimizer step
    #                                         (None: optimizer steps whose micro-batches were not counted)
    step_ms_sd: float | None = None         # the typical steps' spread (IQR / 1.349): what `compare` judges noise by
    rate_hz: int | None = None              # the sampling rate its steps were found at
    since: float | None = None              # its steps were found from this time on (s since the epoch), when
    #                                         later than the window's start: its rate changed (SamplingReport.rates)


@dataclass(frozen=True)
class PhaseRow:
    """The median or the worst rank's row of the step table."""

    step_ms: float | None
    phases_ms: dict[str, float]
    rank: int | None = None                 # the worst row's rank


@dataclass(frozen=True)
class Projection:
    """What one fix is worth (diagnose/whatif.py): the job's mean step were it applied."""

    finding: str                  # the finding kind it belongs to; "RANKS" for the rank-level bound
    fix: str                      # what changes: "input fully overlapped with compute", "without the logging"
    base_ms: float                # the job's mean step now (the median rank's)
    step_ms: float                # ...projected
    gain_ms: float
    gain_pct: float
    low_ms: float | None          # the projection less and plus the per-step spread, scaled to it
    high_ms: float | None         # (None where the spread is unknown: live views)
    assumption: str               # what the projection rests on, in one line
    checked: bool                 # the window could check that assumption
    workers: int | None = None    # INPUT-BOUND: the DataLoader num_workers it stands for
    ranks: tuple[int, ...] = ()   # STRAGGLER: the ranks brought to the median


@dataclass(frozen=True)
class Arrival:
    """Which rank arrived last at the collective, step by step (diagnose/arrival.py): the rank the
    others were blocked for."""

    steps: int                    # steps judged: every rank's step matched, its blocked time measured
    last: dict[int, int]          # steps each rank was last in (a step too close to tell counts for none)
    rank: int | None              # the rank last most often
    share: float | None           # ...its share of the judged steps
    persistent: bool              # one rank is the slow one (policy.persistent_share)


@dataclass(frozen=True)
class Change:
    """A lasting shift found in the session's rollups (diagnose/changes.py)."""

    series: str                   # "step", a phase ("input"), or memory ("rss", "gpu_mem")
    at: float                     # seconds since the epoch: the rollup boundary it happened at
    before: float                 # the mean of the rollups before it (ms per step, or bytes)
    after: float                  # ...and after it
    unit: str                     # "ms" or "bytes"
    change_pct: float | None      # after over before, in percent
    phases: dict[str, float] = field(default_factory=dict)   # a step change: each phase's change, ms per step
    memory_bytes: dict[str, int] = field(default_factory=dict)   # ...memory that rose at the same time, by series


@dataclass(frozen=True)
class StepTimeReport:
    _json_derived: ClassVar[tuple[str, ...]] = ("diagnosis",)
    findings: tuple[Finding, ...]           # most severe first; never empty
    ranks: dict[int, RankStepTime]
    step_time_known: bool
    step_time_note: str | None              # why the step time is unknown, and what would tell it
    median: PhaseRow | None
    worst: PhaseRow | None
    skew_pct: float | None                  # worst rank's step over the median's, in percent
    wait_share: float | None                # median rank's wait share
    # the distribution across the ranks with a known step: "min", "p50", "p90", "max" rows; each
    # column ranked on its own, so a row's phases need not add up to its step
    spread: dict[str, PhaseRow] = field(default_factory=dict)
    whatif: tuple[Projection, ...] = ()     # what each finding's fix is worth (diagnose/whatif.py)
    arrival: Arrival | None = None          # which rank the collective waited for, step by step

    @property
    def diagnosis(self) -> Finding:
        return self.findings[0]

    @property
    def hang(self) -> Finding | None:
        return next((f for f in self.findings if isinstance(f.evidence, HangEvidence)), None)

    @property
    def stragglers(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if isinstance(f.evidence, StragglerEvidence))


@dataclass(frozen=True)
class RankMemoryTrend:
    rank: int
    samples: int
    peak_bytes: int
    head_mid_tail_bytes: tuple[int, int, int] | None   # medians of each third of the samples
    delta_bytes: int | None                           # tail minus head
    capacity_bytes: int | None
    growth_bytes: int | None = None    # past the warm-up: tail minus head of its time thirds
    bytes_per_s: float | None = None   # ...the pace of that rise (memory.py Trend)
    judged_s: float | None = None      # ...over this many seconds
    noise_bytes: float | None = None   # ...the uncertainty of the rise (95%)
    state: str | None = None           # warmup | short | rising | creep | flat | jump | falling | unsettled


@dataclass(frozen=True)
class MemorySource:
    """One memory source's per-rank trends."""

    source: str                          # "gpu" or "host"
    ranks: dict[int, RankMemoryTrend]
    median_peak_bytes: float | None
    worst_peak_bytes: int | None
    worst_rank: int | None
    skew_pct: float | None


@dataclass(frozen=True)
class StepMemoryReport:
    diagnosis: Finding
    source: str                          # the series trends are shown for: "gpu" with GPU readings, else "host"
    host: MemorySource
    gpu: MemorySource | None
    notes: tuple[str, ...]               # how NVML's readings were matched to ranks

    @property
    def shown(self) -> MemorySource:
        return self.gpu if self.source == "gpu" and self.gpu is not None else self.host


@dataclass(frozen=True)
class HostTotals:
    """The host over the whole recording held."""

    cpu_percent_median: float | None
    mem_used_peak_bytes: int | None
    mem_total_bytes: int | None


@dataclass(frozen=True)
class SystemReport:
    diagnosis: Finding                   # evidence: the window's SystemEvidence, always
    findings: tuple[str, ...]            # the kind of every system finding
    host: HostTotals

    @property
    def window(self) -> SystemEvidence:
        ev = self.diagnosis.evidence
        return ev if isinstance(ev, SystemEvidence) else SystemEvidence(None, None, {})


@dataclass(frozen=True)
class ProcessReport:
    diagnosis: Finding                   # evidence: the named rank's row
    findings: tuple[str, ...]
    ranks: dict[int, ProcessRank]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Window:
    start: float | None                  # seconds since the epoch
    end: float | None


@dataclass(frozen=True)
class RankRate:
    """A rank whose sampler changed its rate in the session (``rate`` frames)."""

    rate_hz: int                         # in use now
    since: float                         # since when, seconds since the epoch
    why: str | None                      # the analysis's advice it followed, in words
    changes: int                         # rate changes of its process in the session


@dataclass(frozen=True)
class Extended:
    """A snapshot that sampled on past its default length, as the analysis advised (diagnose/window.py)."""

    from_s: float   # the length it would have had
    to_s: float     # the length it sampled on to
    why: str


@dataclass(frozen=True)
class SamplingReport:
    diagnosis: Finding                   # SAMPLING FAILED, SAMPLING PROBLEMS or NORMAL
    backend: str
    version: str | None
    rate_hz: int
    samples: int | None                  # stack samples py-spy took (all windows of the session)
    errors: int | None                   # samples py-spy could not take
    windows: int                         # py-spy recording windows
    window: Window                       # the window analysed
    problems: tuple[Problem, ...]        # the first of the session's error events
    problem_count: int                   # all of them
    bad_frames: int                      # recorded frames that could not be decoded
    max_rate_hz: int | None = None       # the most a rank's rate may be raised to (rate_hz: fixed; None: not said)
    rates: dict[int, RankRate] = field(default_factory=dict)   # ranks whose rate changed, by rank
    extended: Extended | None = None     # a snapshot that sampled on past its default length; None: it did not

    @property
    def adaptive(self) -> bool:
        """The sampler may change a rank's rate by itself (--max-rate above --rate)."""
        return self.max_rate_hz is not None and self.max_rate_hz > self.rate_hz

    @property
    def failures(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.failed)


@dataclass(frozen=True)
class Stall:
    """A rank's last step boundary and call path, from the window's end."""

    stalled: bool                        # no step for the hang time and an unchanging stack
    idle_s: float                        # since the last step boundary
    what: str                            # phase ("wait/collective")
    where: str | None                    # innermost user-code frame


@dataclass(frozen=True)
class RankStatus:
    rank: int
    pid: int                             # its newest process
    pids: tuple[int, ...]                # every process it had (elastic restarts)
    status: str                          # alive | exited | restarted | agent lost
    exit_status: int | None
    restarts: int
    stall: Stall | None = None
    node: int = 0                        # its node (0: the collector's own machine)
    local_rank: int | None = None        # LOCAL_RANK: its place on the node


@dataclass(frozen=True)
class Target:
    pid: int
    rank: int | None                     # RANK from the environment; None for a lone process
    cmd: tuple[str, ...]
    exit_status: int | None
    exited: bool
    node: int = 0
    local_rank: int | None = None


@dataclass(frozen=True)
class NodeRow:
    """One node of a multi-node session (``traceml agent`` streams; node 0 is the collector's own)."""

    node: int
    name: str
    host: str | None
    state: str                           # joined | back | lost | ended (its job ended)
    ranks: tuple[int, ...]
    clock_offset_ms: float | None        # the collector's clock minus the node's, at most off by the network's delay
    reason: str | None                   # why it is lost or ended


@dataclass(frozen=True)
class NetReport:
    """What the collector's socket saw in a multi-node session."""

    messages: int
    bytes: int
    frames: int
    duplicates: int                      # resent by an agent and dropped (delivery is exactly once)
    bad_messages: int                    # not ours (undecodable, wrong version): dropped
    bad_frames: int                      # frames inside a message that could not be merged: dropped
    refused_peers: int                   # handshakes refused: a wrong key, not CURVE at all, or none in 5 s
    agent_dropped: int                   # messages the agents' full buffers dropped
    disconnects: int = 0                 # connections ended after their handshake (an agent gone, an oversized message)


@dataclass(frozen=True)
class Headline:
    """The primary diagnosis in four fields (the step-time diagnosis)."""

    kind: str
    status: str
    severity: str
    summary: str


@dataclass(frozen=True)
class RankSession:
    """One rank over the whole session, from the rollup history."""

    rank: int
    steps: int                              # steps counted over the session
    step_ms_mean: float | None              # mean step; None unless every step counted had a known time
    shares: dict[str, float] | None         # phase totals over step totals, by phase
    rss_peak_bytes: int | None              # host RSS with the DataLoader workers
    rss_last_bytes: int | None
    gpu_mem_peak_bytes: int | None
    cpu_percent_median: float | None        # median of the rollups' medians


@dataclass(frozen=True)
class SessionReport:
    """The whole session, kept as rollups (diagnose/history.py) however long it ran: the other
    sections detail the newest LIVE_WINDOW_S only."""

    start: float | None                     # seconds since the epoch: the first span seen
    duration_s: float                       # data folded into rollups so far
    rollup_s: float                         # the newest rollup's length (rollups merge in pairs as they age)
    rollups: int                            # per rank, at most diagnose.history.MAX_BUCKETS
    ranks: dict[int, RankSession]
    host_cpu_percent_median: float | None
    host_mem_peak_bytes: int | None
    arrival: Arrival | None = None          # which rank the collective waited for, over the session
    changes: tuple[Change, ...] = ()        # lasting shifts in the step time, oldest first


@dataclass(frozen=True)
class Report:
    _json_derived: ClassVar[tuple[str, ...]] = ("primary_diagnosis",)
    targets: tuple[Target, ...]
    end_reason: str | None               # stopped | duration | target_exited | sampling_failed; None while running
    ranks: dict[int, RankStatus]
    step_time: StepTimeReport
    step_memory: StepMemoryReport
    system: SystemReport
    process: ProcessReport
    hot_frames: dict[int, dict[str, tuple[HotFrame, ...]]]   # rank -> phase -> best first
    sampling: SamplingReport
    session: SessionReport | None = None  # the whole session (None for an analysis without a history)
    nodes: tuple[NodeRow, ...] = ()       # a multi-node session's nodes; () for one machine
    net: NetReport | None = None          # a collector's counters; None without --listen

    @property
    def primary_diagnosis(self) -> Headline:
        d = self.step_time.diagnosis
        return Headline(d.kind, d.status, d.severity, d.summary)

    def rank_ids(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.step_time.ranks) | set(self.ranks) | set(self.process.ranks)))
