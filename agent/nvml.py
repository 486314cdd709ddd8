"""The one wrapper around NVML (the nvidia-ml-py binding, imported as pynvml).

Lazy initialisation; API-version fallbacks; None for anything the driver cannot give;
"no GPU" (not an error) without a driver or device. Tests pass a scripted fake binding
with the same functions.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

_PROCESS_FNS = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                "nvmlDeviceGetComputeRunningProcesses")


class Nvml:
    def __init__(self, lib: Any | None = None) -> None:
        self._lib = lib
        self._handles: list[Any] | None = None
        self.unavailable: str | None = None   # why there is no GPU data, once known
        self._last_seen: dict[int, int] = {}  # per device: newest process-utilization timestamp (µs)

    def _init(self) -> bool:
        if self._handles is not None:
            return True
        if self.unavailable is not None:
            return False
        try:
            if self._lib is None:
                import pynvml  # the official binding (nvidia-ml-py)

                self._lib = pynvml
            self._lib.nvmlInit()
            count = self._lib.nvmlDeviceGetCount()
            self._handles = [self._lib.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except ImportError:
            self.unavailable = "nvidia-ml-py is not installed"
            return False
        except (self._error(), OSError) as exc:  # no driver, no library, no device
            self.unavailable = f"no NVIDIA driver or GPU ({type(exc).__name__}: {exc})"
            return False
        if not self._handles:
            self.unavailable = "no NVIDIA GPU"
            return False
        return True

    def _error(self) -> type[Exception]:
        error = getattr(self._lib, "NVMLError", None)
        return error if isinstance(error, type) and issubclass(error, Exception) else RuntimeError

    def _get(self, name: str, *args: Any) -> Any:
        """Call an NVML function; None when it is missing or the device cannot say."""
        fn = getattr(self._lib, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self._error():  # NotSupported, NoPermission, ...: the driver cannot say
            return None

    def poll(self) -> dict[str, Any] | None:
        """One ``gpu`` frame: devices and their compute processes; None when there is no GPU."""
        if not self._init():
            return None
        assert self._handles is not None
        lib = self._lib
        devices, procs = [], []
        for index, h in enumerate(self._handles):
            util = self._get("nvmlDeviceGetUtilizationRates", h)
            mem = self._get("nvmlDeviceGetMemoryInfo", h)
            power = self._get("nvmlDeviceGetPowerUsage", h)
            limit = self._get("nvmlDeviceGetEnforcedPowerLimit", h)
            mig = self._get("nvmlDeviceGetMigMode", h)
            temp = self._get("nvmlDeviceGetTemperature", h, getattr(lib, "NVML_TEMPERATURE_GPU", 0))
            mig_on = bool(mig and mig[0])
            devices.append([index, getattr(util, "gpu", None), getattr(mem, "used", None),
                            getattr(mem, "total", None), temp, None if power is None else power / 1000,
                            None if limit is None else limit / 1000, mig_on])
            sm = {} if mig_on else self._process_utilization(index, h)
            for p in self._processes(h):
                used = getattr(p, "usedGpuMemory", None)
                procs.append([index, int(p.pid), used, sm.get(int(p.pid))])
        return {"k": "gpu", "t": time.time_ns(), "devices": devices, "procs": procs}

    def _processes(self, h: Any) -> list[Any]:
        for name in _PROCESS_FNS:   # newest API first; older drivers lack the newer calls (_get: None)
            result = self._get(name, h)
            if result is not None:
                return list(result)
        return []

    def _process_utilization(self, index: int, h: Any) -> dict[int, int]:
        """SM utilization % per PID since the last read (NVML keeps a timestamped buffer)."""
        samples = self._get("nvmlDeviceGetProcessUtilization", h, self._last_seen.get(index, 0))
        out: dict[int, int] = {}
        for s in samples or ():
            out[int(s.pid)] = max(out.get(int(s.pid), 0), int(s.smUtil))
            self._last_seen[index] = max(self._last_seen.get(index, 0), int(s.timeStamp))
        return out

    def close(self) -> None:
        if self._handles is not None and self._lib is not None:
            with contextlib.suppress(self._error()):
                self._lib.nvmlShutdown()
            self._handles = None
