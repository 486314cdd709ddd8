"""A scripted stand-in for the pynvml module (this machine has no GPU): same function names,
values from a scenario, NVMLError for what a driver would refuse."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

GIB = 1024**3
NVML_TEMPERATURE_GPU = 0


class NVMLError(Exception):
    pass


@dataclass
class Proc:
    pid: int
    used: Callable[[int], int]   # bytes at tick t
    sm: int | None = 50


@dataclass
class Device:
    total: int = 80 * GIB
    util: int = 90
    temp: int = 60
    power_w: float = 300.0
    limit_w: float = 700.0
    mig: bool = False
    procs: list[Proc] = field(default_factory=list)


class FakeNvml:
    def __init__(self, devices: list[Device], missing: tuple[str, ...] = (), no_driver: bool = False) -> None:
        self.devices = devices
        self.tick = 0
        self.no_driver = no_driver
        self.NVMLError = NVMLError
        self.NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
        for name in missing:
            setattr(self, name, None)

    def nvmlInit(self) -> None:
        if self.no_driver:
            raise NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Device:
        return self.devices[i]

    def nvmlDeviceGetUtilizationRates(self, d: Device) -> Any:
        return SimpleNamespace(gpu=d.util, memory=0)

    def nvmlDeviceGetMemoryInfo(self, d: Device) -> Any:
        return SimpleNamespace(used=sum(p.used(self.tick) for p in d.procs), total=d.total)

    def nvmlDeviceGetTemperature(self, d: Device, sensor: int) -> int:
        return d.temp

    def nvmlDeviceGetPowerUsage(self, d: Device) -> int:
        return int(d.power_w * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, d: Device) -> int:
        return int(d.limit_w * 1000)

    def nvmlDeviceGetMigMode(self, d: Device) -> tuple[int, int]:
        return (1, 1) if d.mig else (0, 0)

    def nvmlDeviceGetComputeRunningProcesses_v3(self, d: Device) -> list[Any]:
        return [SimpleNamespace(pid=p.pid, usedGpuMemory=p.used(self.tick)) for p in d.procs]

    nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses_v3
    nvmlDeviceGetComputeRunningProcesses = nvmlDeviceGetComputeRunningProcesses_v3

    def nvmlDeviceGetProcessUtilization(self, d: Device, last_seen: int) -> list[Any]:
        if d.mig:
            raise NVMLError("Not Supported")
        return [SimpleNamespace(pid=p.pid, smUtil=p.sm, memUtil=0, timeStamp=1_000 * (self.tick + 1))
                for p in d.procs if p.sm is not None]
