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
