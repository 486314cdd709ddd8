"""What each panel draws: plain, immutable, already formatted. Widgets see nothing else."""

from __future__ import annotations

from dataclasses import dataclass

from traceml_attach.steps.phases import REGISTRY

PHASE_HEADS = tuple(p.short for p in REGISTRY)   # column heads, in PHASES order


@dataclass(frozen=True)
class Selection:
    rank: int | None = None   # None: the worst rank (or the first) when the data arrives
    phase: str = "input"


@dataclass(frozen=True)
class HeaderVM:
    title: str          # "traceml attach · train-1234"
    target: str         # "input_bound.py · pid 1234 · 1 rank"
    clock: str          # "14:03:21 · 1m 05s"
    mode: str           # LIVE | PAUSED | REPLAY | WARMING UP (3 steps seen)
    sampling: str       # "py-spy 0.4.3 · 100 Hz · last 30 s"


@dataclass(frozen=True)
class DiagnosisVM:
    title: str          # "Step time", "Memory", "System", "Process", "also"
    status: str         # "INPUT-BOUND"
    severity: str       # info | warning | critical | pending
    summary: str
    why: str
    action: str


@dataclass(frozen=True)
class RailVM:
    items: tuple[DiagnosisVM, ...]


@dataclass(frozen=True)
class StepRow:
    label: str                              # "r0", "median", "worst r1"
    kind: str                               # rank | median | worst
    steps: str
    step_ms: str
    phases_ms: tuple[str, ...]              # in PHASES order
    shares: tuple[float, ...] | None        # phase shares of the step, for the bar
    selected: bool = False
    flagged: bool = False                   # the worst rank, or one a finding names
    alert: bool = False                     # sampling problems cost this rank coverage (see the alerts)


@dataclass(frozen=True)
class StepTableVM:
    rows: tuple[StepRow, ...]               # ranks first, then median and worst
    phase: str                              # the selected phase (a highlighted column)
    skew: str                               # "+12.3%" or "-"
    wait_share: str                         # "8.0%" or "-"
    worst_rank: str | None
    note: str                               # what there is instead of rows, or what is unknown about them
    alerts: tuple[str, ...] = ()            # per rank: its sampling problems and coverage, selected first


@dataclass(frozen=True)
class MemoryRow:
    rank: str
    spark: str          # block characters, oldest first
    peak: str           # "1.2 GiB"
    change: str         # "+120 MiB" (tail third minus head third) or "-"
    selected: bool = False
    flagged: bool = False


@dataclass(frozen=True)
class MemoryVM:
    source: str         # "GPU memory (NVML)" or "host RSS + workers"
    rows: tuple[MemoryRow, ...]
    median_peak: str
    worst_peak: str
    worst_rank: str | None
    skew: str


@dataclass(frozen=True)
class GpuRow:
    index: str
    util: str
    mem: str
    temp: str
    power: str


@dataclass(frozen=True)
class SystemVM:
    cpu: str            # host CPU, median of the window
    ram: str            # "12.1 / 31.3 GiB"
    ram_share: float | None
    gpus: tuple[GpuRow, ...]
    status: str
    severity: str
    summary: str


@dataclass(frozen=True)
class ProcessRow:
    rank: str
    pid: str
    cpu: str
    rss: str
    gpu_mem: str
    workers: str
    threads: str
    selected: bool = False


@dataclass(frozen=True)
class ProcessVM:
    rows: tuple[ProcessRow, ...]
    notes: tuple[str, ...]
    status: str
    severity: str
    summary: str


@dataclass(frozen=True)
class HotRow:
    share: str          # "42%"
    ms: str             # total in the window
    frame: str
    via: str | None


@dataclass(frozen=True)
class HotFramesVM:
    rank: str | None
    phase: str
    phase_ms: str       # the phase's time per typical step on that rank
    rows: tuple[HotRow, ...]
    note: str           # why there are no rows


@dataclass(frozen=True)
class RankRow:
    rank: str
    pid: str
    status: str         # alive | exited | restarted | stalled
    detail: str
    selected: bool = False


@dataclass(frozen=True)
class RanksVM:
    rows: tuple[RankRow, ...]


@dataclass(frozen=True)
class ViewModel:
    header: HeaderVM
    rail: RailVM
    steps: StepTableVM
    memory: MemoryVM
    system: SystemVM
    process: ProcessVM
    hot: HotFramesVM
    ranks: RanksVM
    rank_ids: tuple[int, ...]
    selection: Selection        # the selection as applied (rank filled in)
