"""What each panel draws: plain, immutable, already formatted. Widgets see nothing else."""

from __future__ import annotations

from dataclasses import dataclass

from traceml_attach.steps.phases import REGISTRY

PHASE_HEADS = tuple(p.short for p in REGISTRY)   # column heads, in PHASES order
SPARK = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class Selection:
    rank: int | None = None   # None: the worst rank (or the first) when the data arrives
    phase: str = "input"


@dataclass(frozen=True)
class HeaderVM:
    title: str          # "traceml attach · train-1234"
    target: str         # "input_bound.py · pid 1234 · 1 rank"
    clock: str          # "14:03:21 · 1m 05s"
    mode: str           # LIVE | PAUSED | REPLAY | WARMING UP (3 steps seen) | FIRST LOOK (1.2 s sampled)
    sampling: str       # "py-spy 0.4.3 · 100 Hz · last 30 s"
    nodes: str = ""     # "16 nodes (15 joined, 1 lost) · clock -2.1 ms (n7)" (the furthest offset); "" on one machine
    nodes_lost: bool = False   # a node's agent went silent: the nodes show in red
    change: str = ""    # the session's newest step-time change: "step 120→180 ms at 14:03:10 (+50%)"; "" without one


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
    label: str                              # "r0", "r65 (n1/l1)", "median", "worst r1", "p90"
    kind: str                               # rank | median | worst | spread (a distribution row: min, p50...)
    steps: str
    step_ms: str
    phases_ms: tuple[str, ...]              # in PHASES order
    shares: tuple[float, ...] | None        # phase shares of the step, for the bar
    selected: bool = False
    flagged: bool = False                   # the worst rank, or one a finding names
    alert: bool = False                     # sampling problems cost this rank coverage (see the alerts)
    blocked_ms: str | None = None           # of the phases' time, blocked in the collective (synchronized ranks)


@dataclass(frozen=True)
class StepTableVM:
    rows: tuple[StepRow, ...]               # ranks first, then median and worst (or, summarised, the spread)
    phase: str                              # the selected phase (a highlighted column)
    skew: str                               # "+12.3%" or "-"
    wait_share: str                         # "8.0%" or "-"
    worst_rank: str | None
    note: str                               # what there is instead of rows, or what is unknown about them
    alerts: tuple[str, ...] = ()            # per rank: its sampling problems and coverage, selected first
    hidden: int = 0                         # ranks not listed: the table summarises (slowest, selected, spread)


def sparkline(values: tuple[int, ...] | list[int] | list[float]) -> str:
    """Block characters, oldest first (live.SPARK_POINTS of them at most; the panel keeps what
    fits). The scale starts at the series' minimum and spans at least 2% of its peak, so
    sampling noise on a flat series stays flat."""
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = max(hi - lo, 0.02 * abs(hi), 1.0)
    return "".join(SPARK[min(int((v - lo) / span * len(SPARK)), len(SPARK) - 1)] for v in values)


@dataclass(frozen=True)
class MemoryRow:
    rank: str
    trend: tuple[int, ...]   # bytes, oldest first (LiveState.memory_series)
    peak: str           # "1.2 GiB"
    change: str         # "+120 MiB" (tail third minus head third) or "-"
    selected: bool = False
    flagged: bool = False

    @property
    def spark(self) -> str:
        """The trend in block characters, drawn only for the rows on screen (1,024 ranks' of 60
        points would cost the refresh some 20 ms)."""
        return sparkline(self.trend)


@dataclass(frozen=True)
class MemoryVM:
    source: str         # "GPU memory (NVML)" or "host RSS + workers"
    rows: tuple[MemoryRow, ...]
    median_peak: str
    worst_peak: str
    worst_rank: str | None
    skew: str
    hidden: int = 0     # ranks not in rows (present.around): the panel counts them as more
    leads: tuple[str, ...] = ()   # where rising memory goes (render.memory_leads)


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
    hidden: int = 0     # ranks not in rows (present.around)


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
    status: str         # alive | exited | restarted | stalled | agent lost
    detail: str
    selected: bool = False
    node: str = ""      # "n1/l1": its node and local rank; "" on one machine


@dataclass(frozen=True)
class RanksVM:
    rows: tuple[RankRow, ...]
    hidden: int = 0     # ranks not in rows (present.around)


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
