"""Decoded, immutable records of the frame stream. Units are in the names."""

from __future__ import annotations

import functools
from dataclasses import dataclass

# A multi-node recording keys node n's process p as ``n << PID_BITS | p`` (collect/merge.py):
# Linux PIDs stay below 2**22, so the key says both, and node 0's keys are its PIDs.
PID_BITS = 22
PID_MASK = (1 << PID_BITS) - 1


def os_pid(key: int) -> int:
    """The process's PID on its own node."""
    return key & PID_MASK


def node_of(key: int) -> int:
    return key >> PID_BITS


@dataclass(frozen=True)
class CodeFrame:
    name: str
    file: str
    line: int
    src: str | None   # the source line, when the agent could read it
    ctx: str | None   # enclosing `with` items of that line in user code

    @functools.cached_property
    def where(self) -> str:   # asked of the same interned frames every tick (hangs, hot frames)
        return f"{self.name} ({_short(self.file)}:{self.line})"


Stack = tuple[CodeFrame, ...]  # outermost first


@dataclass(frozen=True)
class Span:
    """A stack observed continuously on one thread from ts_ns for dur_ns."""

    pid: int
    tid: int
    ts_ns: int
    dur_ns: int
    stack: Stack

    @property
    def end_ns(self) -> int:
        return self.ts_ns + self.dur_ns


@dataclass(frozen=True)
class ThreadInfo:
    tid: int
    os_tid: int | None
    name: str | None
    active: bool | None


@dataclass(frozen=True)
class ProcSample:
    pid: int
    ts_ns: int
    cpu_percent: float | None
    rss_bytes: int | None
    num_threads: int | None
    children: tuple[tuple[int, float | None, int | None], ...]  # (pid, cpu %, rss bytes)

    @functools.cached_property
    def workers_rss_bytes(self) -> int:   # read every tick while the sample is in the window
        """The DataLoader workers' (children's) RSS; a worker that could not be read counts 0."""
        return sum(c[2] or 0 for c in self.children)


@dataclass(frozen=True)
class HostSample:
    ts_ns: int
    cpu_percent: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    node: int = 0
    cpus: int | None = None    # the host's logical CPUs (None in streams recorded before they were sent)


@dataclass(frozen=True)
class NodeInfo:
    """A node of a multi-node session, as its newest ``node`` frame describes it."""

    node: int
    name: str
    agent: str | None
    state: str                 # joined | back | lost | ended
    since_ns: int              # when it entered that state (the collector's clock)
    host: str | None
    rate_hz: int | None
    offset_ns: int | None      # the collector's clock minus the node's (plus the network's least delay)
    ranks: tuple[int, ...]
    reason: str | None = None


@dataclass(frozen=True)
class WindowInfo:
    pid: int
    index: int
    start_ns: int | None
    end_ns: int | None
    samples: int | None       # py-spy's count: one a thread read at each sample
    errors: int | None
    threads: int | None = None   # the threads its trace holds (recordings before it: None)
    thread_ns: int | None = None   # the time each of them was seen, summed


@dataclass(frozen=True)
class TargetMeta:
    pid: int
    exe: str | None
    cmd: tuple[str, ...]
    rank: int | None
    local_rank: int | None
    world_size: int | None
    ts_ns: int = 0   # when sampling of it began
    nspid: tuple[int, ...] = ()   # its PID in each PID namespace (NVML reports the host's)
    node: int = 0    # the node it runs on (0: the collector's own; collect/merge.py)
    started_ns: int | None = None     # when the process started (None: unknown, older recordings)
    memory_limit: int | None = None   # its cgroup's memory limit, bytes (None: none, or unknown)


@dataclass(frozen=True)
class Extension:
    """A snapshot of the default length sampled on (``extend`` frame): from ``from_s`` to ``to_s``
    seconds in all, from ts_ns, for ``why`` (diagnose/window.py)."""

    ts_ns: int
    from_s: float
    to_s: float
    why: str


@dataclass(frozen=True)
class RateChange:
    """The sampler changed a process's rate: its spans from ts_ns on were sampled at rate_hz."""

    ts_ns: int
    pid: int
    rate_hz: int
    why: str | None
    # a raise advised for a step time already known at the old rate (to time it more finely): the
    # old rate's reading stands until the new rate's holds half the window (diagnose/rate.py)
    refines: bool = False


@dataclass(frozen=True)
class ErrorEvent:
    ts_ns: int
    pid: int | None
    kind: str
    message: str


@dataclass(frozen=True)
class ExitEvent:
    ts_ns: int
    pid: int
    status: int | None


def _short(path: str) -> str:
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    parts = path.rsplit("/", 2)
    return "/".join(parts[-2:]) if len(parts) > 2 else path


@dataclass(frozen=True)
class DeviceReading:
    index: int
    util_percent: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    temp_c: float | None
    power_w: float | None
    power_limit_w: float | None
    mig: bool


@dataclass(frozen=True)
class GpuSample:
    ts_ns: int
    devices: tuple[DeviceReading, ...]
    procs: tuple[tuple[int, int, int | None, int | None], ...]  # (device, host pid, used bytes, SM %)
