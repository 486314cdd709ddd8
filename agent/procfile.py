"""A /proc file read again and again: the agent reads a few of them every 20 ms per rank."""

from __future__ import annotations

import contextlib
import os


class Reread:
    """A /proc file kept open and read again from its start: 1 µs a read here, where opening it
    each time took 12 (read 50 times a second per rank, and per recorder thread)."""

    def __init__(self, path: str, size: int = 256) -> None:
        self.path = path
        self.size = size   # the most bytes read: the whole file
        self._fd: int | None = None

    def read(self) -> str | None:
        """Its text now; None where it cannot be read (the thread or process is gone)."""
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            return os.pread(self._fd, self.size, 0).decode("ascii", "replace")
        except OSError:
            self.close()
            return None

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def descendants(pid: int) -> list[int] | None:
    """The PIDs below ``pid`` (children before grandchildren), from the kernel's per-thread lists
    of the children each thread started (``/proc/PID/task/TID/children``): a read per thread of
    the processes below, where psutil's ``children()`` reads the stat file of every process on the
    machine (1.3 ms here with 120 processes; a training node runs thousands, and the agent asks
    once a second per rank). None where the kernel keeps no such lists (built without
    CONFIG_PROC_CHILDREN) or ``pid`` is gone: ask psutil then. A child started or reaped while
    the lists are read may be missed until the next read, as with a scan of every process."""
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        return None
    found: list[int] = []
    seen = {pid}
    parents = [pid]
    while parents:
        below: list[int] = []
        for parent in parents:
            try:
                tids = os.listdir(f"/proc/{parent}/task")
            except OSError:
                continue   # it ended since it was listed
            for tid in tids:
                try:
                    with open(f"/proc/{parent}/task/{tid}/children", "rb") as fh:
                        text = fh.read()
                except OSError:
                    continue
                for word in text.split():
                    child = int(word)
                    if child not in seen:
                        seen.add(child)
                        below.append(child)
        found.extend(below)
        parents = below
    return found
