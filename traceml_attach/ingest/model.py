"""Decoded, immutable records of the frame stream. Units are in the names."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CodeFrame:
    name: str
    file: str
    line: int
    src: str | None   # the source line, when the agent could read it
    ctx: str | None   # enclosing `with` items of that line in user code

    @property
    def where(self) -> str:
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

    @property
    def workers_rss_bytes(self) -> int:
        """The DataLoader workers' (children's) RSS; a worker that could not be read counts 0."""
        return sum(c[2] or 0 for c in self.children)


@dataclass(frozen=True)
class HostSample:
    ts_ns: int
    cpu_percent: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None


@dataclass(frozen=True)
class WindowInfo:
    pid: int
    index: int
    start_ns: int | None
    end_ns: int | None
    samples: int | None
    errors: int | None


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
