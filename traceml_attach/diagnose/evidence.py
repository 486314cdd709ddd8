"""The typed evidence of findings: one frozen dataclass per kind of evidence, so that the summary,
the text and the TUI read the numbers a rule judged by name, never by string key.

Shares are fractions of a step (0..1); times are in the unit their name says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class StepEvidence:
    """What a step-time finding (INPUT-BOUND, WAIT-HEAVY, COMPUTE-BOUND, BALANCED) judged: the
    median rank's component shares of the typical step."""

    TYPE: ClassVar[str] = "step"
    steps: int                          # complete steps of the rank with the fewest
    step_ms: float | None               # the median rank's typical step; None unless every rank's is known
    input_share: float                  # input (DataLoader fetch + h2d)
    wait_share: float
    compute_share: float                # forward + backward + optimizer
    score: float | None = None          # the share that crossed its threshold
    wait_labels: dict[str, float] | None = None   # WAIT-HEAVY: the worst rank's wait, share by label
    gpu_sm_util: float | None = None    # median per-process SM %, when the GPU refined the finding
    device_sync_share: float | None = None   # ...and the median rank's share of wait in device sync


@dataclass(frozen=True)
class RankBurden:
    """One rank's work as the straggler rule compared it, in shares of the step."""

    input_share: float
    compute_share: float
    sync_wait_share: float | None   # blocked in the synchronizing phase (CPU counters); None without


@dataclass(frozen=True)
class StragglerEvidence:
    """One rank slows the others (INPUT / COMPUTE STRAGGLER, STRAGGLER)."""

    TYPE: ClassVar[str] = "straggler"
    score: float                    # excess share: what the others wait for it (or its extra work) per step
    synchronized: bool              # compared on blocked time (True) or on work per step (False)
    input_excess_share: float
    compute_excess_share: float
    excess_ms: float | None         # the same in ms per step; None when the step time is unknown
    input_excess_ms: float | None
    compute_excess_ms: float | None
    ranks: dict[int, RankBurden]    # what was compared, per rank


@dataclass(frozen=True)
class RankStack:
    """Where one rank stands in a hang."""

    phase: str                  # "backward", "wait/collective"
    where: str | None           # innermost user-code frame, "fn (file:line)"
    src: str | None             # its source line
    stack: tuple[str, ...]      # outermost first


@dataclass(frozen=True)
class HangEvidence:
    TYPE: ClassVar[str] = "hang"
    idle_s: float                       # since the last step boundary, on the rank idle the shortest
    ranks: dict[int, RankStack]
    odd_ranks: tuple[int, ...]          # the ranks not where the others are (empty: all in one place)
    common_stack: tuple[str, ...] | None   # where the others are, when there are odd ones


@dataclass(frozen=True)
class MemoryEvidence:
    """What the step-memory finding judged: the series of ``source`` over the window."""

    TYPE: ClassVar[str] = "memory"
    source: str                         # "gpu" (NVML) or "host" (RSS with DataLoader workers)
    worst_rank: int | None              # the rank with the highest peak
    worst_peak_bytes: int | None
    median_peak_bytes: float | None
    capacity_bytes: int | None          # the worst rank's device, or its cgroup's memory limit
    head_mid_tail_bytes: tuple[int, int, int] | None   # the named rank's medians of each third
    growth_bytes: int | None = None     # rising / creep: the median rank's rise past the warm-up
    bytes_per_s: float | None = None    # ...its pace
    judged_s: float | None = None       # seconds judged after the warm-up
    noise_bytes: float | None = None    # the uncertainty of the window's rise (95%): steady means within it
    headroom_bytes: int | None = None   # rising: what can still be taken before the limit
    seconds_left: float | None = None   # ...at this pace
    bytes_per_step: float | None = None   # rising: the pace per step, where the step time is known
    jump_at_ns: int | None = None       # a one-off rise: when
    jump_bytes: int | None = None       # ...and how large
    detectable_bytes_per_s: float | None = None   # steady: the slowest rise the window would have told
    leak: LeakEvidence | None = None    # rising: where to look (lines, phase, workers)


@dataclass(frozen=True)
class KeptLine:
    """A line of the job's own code that keeps a graph-carrying tensor across steps."""

    where: str          # "train.py:42"
    text: str           # the source line
    holder: str         # what outlives the step
    tensor: str         # the tensor it keeps
    how: str            # "+=", "append", "item assignment"
    why: str            # the reason, in one sentence
    kind: str = "graph"   # graph (a tensor with its autograd graph) | tensor | value (Python values)


@dataclass(frozen=True)
class WorkerGrowth:
    pid: int
    growth_bytes: int   # its last third's median RSS minus its first third's
    bytes_per_s: float


@dataclass(frozen=True)
class LeakEvidence:
    """Where the memory that rises goes: evidence with its reason, never certainty."""

    lines: tuple[KeptLine, ...]                    # in the training loop's source (and what it calls)
    phase_bytes_per_step: dict[str, float] | None  # the main process's net RSS change a step, by phase
    growth_phase: str | None                       # the phase that holds most of the net growth
    main_bytes_per_s: float | None                 # the rank's own process...
    workers_bytes_per_s: float | None              # ...and its DataLoader workers together
    workers: tuple[WorkerGrowth, ...] = ()         # the workers that grew, most first


@dataclass(frozen=True)
class GpuStats:
    """One device over the window (NVML)."""

    util_percent_median: float | None
    mem_used_peak: float | None         # share of the device's memory
    temp_c_peak: float | None
    power_share_median: float | None    # of the power limit


@dataclass(frozen=True)
class SystemEvidence:
    """The host and devices over the window, as the system rules judged them."""

    TYPE: ClassVar[str] = "system"
    host_cpu_percent_median: float | None
    host_mem_peak: float | None         # share of host RAM
    gpus: dict[int, GpuStats]


@dataclass(frozen=True)
class ProcessRank:
    """One rank's process over the window (a row of the process table)."""

    rank: int
    pid: int
    cpu_percent_median: float | None    # the main process (100 = one core)
    rss_peak_bytes: int | None          # with its DataLoader workers
    threads: int | None
    workers: int | None                 # child processes (DataLoader workers)
    workers_cpu_percent: float | None
    workers_rss_bytes: int | None
    gpu_mem_peak_bytes: int | None
    gpu_capacity_bytes: int | None
    gpu_sm_util_median: float | None


@dataclass(frozen=True)
class ProcessEvidence(ProcessRank):
    """A process finding's evidence: the row of the rank it names."""

    TYPE: ClassVar[str] = "process"


@dataclass(frozen=True)
class SamplingEvidence:
    TYPE: ClassVar[str] = "sampling"
    problems: int                       # error events recorded in the session
    failures: int                       # ...of them, a sampler or analysis thread that failed
    kinds: dict[str, int]               # count by kind
    ranks: tuple[int, ...]              # the ranks they concern
    lowest_coverage: float | None       # the lowest coverage among those ranks


Evidence = (StepEvidence | StragglerEvidence | HangEvidence | MemoryEvidence | SystemEvidence | ProcessEvidence
            | SamplingEvidence)
EVIDENCE_TYPES: tuple[type, ...] = (StepEvidence, StragglerEvidence, HangEvidence, MemoryEvidence, SystemEvidence,
                                    ProcessEvidence, SamplingEvidence)
