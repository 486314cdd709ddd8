"""psutil polling of the target process, its child processes and the host."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import psutil

from traceml_agent import procfile


class ProcPoller:
    """Reads CPU %, RSS and threads of one process and its children (DataLoader workers)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._proc = psutil.Process(pid)
        self._children: dict[int, psutil.Process] = {}
        self._proc.cpu_percent(None)  # prime: the first reading is always 0

    def poll(self) -> dict[str, Any] | None:
        """One ``proc`` frame, or None once the process is gone."""
        now = time.time_ns()
        try:
            with self._proc.oneshot():
                cpu = self._proc.cpu_percent(None)
                rss = self._proc.memory_info().rss
                nthreads = self._proc.num_threads()
            children = self._below()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return None
        except psutil.AccessDenied:
            return {"k": "proc", "pid": self.pid, "t": now, "cpu": None, "rss": None,
                    "nthreads": None, "children": []}
        rows = []
        seen = {}
        for child in children:
            known = self._children.get(child.pid, child)
            seen[child.pid] = known
            try:
                first = child.pid not in self._children
                child_cpu = known.cpu_percent(None)
                rows.append([child.pid, None if first else child_cpu, known.memory_info().rss])
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        self._children = seen
        return {"k": "proc", "pid": self.pid, "t": now, "cpu": cpu, "rss": rss,
                "nthreads": nthreads, "children": rows}

    def _below(self) -> list[psutil.Process]:
        """The process's descendants (its DataLoader workers and theirs), each the psutil handle
        kept from the last poll where it is the same process (its CPU % is measured since then)."""
        return descendant_processes(self._proc, self._children)


def descendant_processes(proc: psutil.Process, known: Mapping[int, psutil.Process] | None = None
                         ) -> list[psutil.Process]:
    """``proc``'s descendants, from the kernel's lists of children (``procfile.descendants``),
    else from psutil's scan of every process; a handle from ``known`` where it has one for the
    PID. Raises psutil's errors for ``proc`` itself, as ``children()`` does."""
    pids = procfile.descendants(proc.pid)
    if pids is None:
        return proc.children(recursive=True)
    below = []
    for pid in pids:
        handle = known.get(pid) if known else None
        if handle is None:
            try:
                handle = psutil.Process(pid)
            except psutil.Error:
                continue   # it ended since it was listed
        below.append(handle)
    return below


def host_frame() -> dict[str, Any]:
    vm = psutil.virtual_memory()
    return {"k": "host", "t": time.time_ns(), "cpu": psutil.cpu_percent(None),
            "mem_used": vm.total - vm.available, "mem_total": vm.total, "cpus": psutil.cpu_count()}
