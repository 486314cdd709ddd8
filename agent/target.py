"""What we may learn about a target process before sampling it."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass

import psutil

# The only variables ever read from a process's environment: it holds secrets.
RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK")
_FREE_THREADED = re.compile(r"python3\.\d+t$")


class TargetError(Exception):
    """The target cannot be attached to; ``kind`` names why."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class TargetInfo:
    pid: int
    exe: str | None
    cmd: tuple[str, ...]
    rank_env: dict[str, int]
    nspid: tuple[int, ...]   # its PID in each PID namespace, ours first (ns_pids)
    started_ns: int | None = None        # when the process started (wall clock): the job's age
    memory_limit: int | None = None      # its cgroup's memory limit in bytes (None: none set)


def ns_pids(pid: int) -> tuple[int, ...]:
    """The PIDs a process has in each PID namespace it belongs to (NSpid), ours first.

    NVML reports PIDs of the host namespace; when the attacher sees the host's /proc they
    appear here next to the container-local PID.
    """
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("NSpid:"):
                    return tuple(int(x) for x in line.split()[1:])
    except OSError:
        pass
    return (pid,)


def rank_env(pid: int) -> dict[str, int]:
    """RANK, LOCAL_RANK, WORLD_SIZE and GROUP_RANK from /proc/<pid>/environ, nothing else."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return {}
    found: dict[str, int] = {}
    wanted = {name.encode() + b"=": name for name in RANK_VARS}
    for entry in raw.split(b"\0"):
        for prefix, name in wanted.items():
            if entry.startswith(prefix):
                value = entry[len(prefix):].decode("ascii", "replace")
                if value.lstrip("-").isdigit():
                    found[name] = int(value)
    return found


def python_children(pid: int) -> list[int]:
    """PIDs of Python processes below ``pid``, never this one or its own: a hint when ``pid`` is a shell
    or launcher (the one traceml was started from, too)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    ours = {os.getpid()}   # traceml itself, run from that shell, and what it started (py-spy)
    with contextlib.suppress(psutil.Error):
        ours.update(p.pid for p in psutil.Process().children(recursive=True))
    found = []
    for child in children:
        if child.pid in ours:
            continue
        try:
            if os.path.basename(child.exe()).startswith("python"):
                found.append(child.pid)
        except psutil.Error:
            continue
    return found


def inspect_target(pid: int) -> TargetInfo:
    """Check that ``pid`` exists and is plausibly a CPython we can read."""
    if pid <= 0 or not psutil.pid_exists(pid):
        raise TargetError("no_such_process", f"no process with PID {pid} is running")
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            raise TargetError("no_such_process", f"process {pid} has already exited")
        cmd = tuple(proc.cmdline())
    except psutil.NoSuchProcess as exc:
        raise TargetError("no_such_process", f"no process with PID {pid} is running") from exc
    except psutil.AccessDenied:
        cmd = ()
    try:
        exe: str | None = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = None
    if exe and _FREE_THREADED.search(os.path.basename(exe)):
        raise TargetError(
            "unsupported_python",
            f"process {pid} runs a free-threaded CPython ({os.path.basename(exe)}), "
            "which py-spy cannot read: attach to a standard build",
        )
    return TargetInfo(pid=pid, exe=exe, cmd=cmd[:8], rank_env=rank_env(pid), nspid=ns_pids(pid),
                      started_ns=started_ns(pid), memory_limit=memory_limit(pid))


def started_ns(pid: int) -> int | None:
    """When the process started, in wall-clock ns (psutil's create_time: boot time plus the
    start tick in /proc/<pid>/stat, to 10 ms); None when it cannot be read."""
    try:
        return int(psutil.Process(pid).create_time() * 1e9)
    except psutil.Error:
        return None


# cgroup v1 reports "no limit" as the largest page-aligned value; anything at or above this is none
NO_LIMIT = 1 << 62


def memory_limit(pid: int, root: str = "/") -> int | None:
    """The memory limit of the cgroup ``pid`` runs in, in bytes: the smallest ``memory.max`` (v2)
    or ``memory.limit_in_bytes`` (v1) on its path up to the root (a parent's limit binds its
    children); None where none is set or nothing can be read. ``root``: where / is (tests)."""
    try:
        with open(os.path.join(root, f"proc/{pid}/cgroup"), encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    found: list[int] = []
    for line in lines:
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if controllers == "" and path:
            found += _limits(os.path.join(root, "sys/fs/cgroup"), path, "memory.max")
            found += _limits(os.path.join(root, "sys/fs/cgroup/unified"), path, "memory.max")
        elif "memory" in controllers.split(","):
            found += _limits(os.path.join(root, "sys/fs/cgroup/memory"), path, "memory.limit_in_bytes")
    return min(found) if found else None


def _limits(mount: str, path: str, name: str) -> list[int]:
    """The limits set in ``name`` along ``path`` below ``mount``, the cgroup first."""
    out = []
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts), -1, -1):
        try:
            with open(os.path.join(mount, *parts[:depth], name), encoding="ascii") as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < NO_LIMIT:
            out.append(int(text))
    return out
