"""Give freed memory back to the system, and keep a collector's cyclic GC off its recording.

Each py-spy window is read as one JSON document of a few MB on a sampler thread, and glibc's
malloc may keep what such threads freed in their arenas; ``malloc_trim(0)`` returns it.
(The RSS growth once seen over long attaches turned out to be ``linecache`` in agent/source.py;
this trim's own effect was not measured apart.) Elsewhere (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Callable


def _malloc_trim() -> Callable[[], None]:
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        trim = None
    if trim is None:
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0) and None


release_free_memory = _malloc_trim()


FREEZE_EVERY_S = 1.0  # how often a collector's analysis thread freezes the cyclic GC's generations
# Python's (700, 10, 10), with a full collection only after 1,000 of generation 1 (not 10): what
# survives a second is frozen anyway, and young cycles are still collected in generations 0 and 1
COLLECTOR_GC_THRESHOLDS = (700, 10, 1000)
THAW_EVERY_S = 600.0


class FrozenHeap:
    """A collector's GC policy. Many nodes' recording is millions of long-lived objects (20 MB a
    second at 1,024 ranks). Python collects fully each time the objects not yet collected grow by
    a quarter, and goes over all of them: frozen every 30 s, that was 42% of the collector's time
    (bench/multinode_load.py). So what is alive each second is frozen (the cyclic GC leaves it
    alone; reference counts free it as before), a full collection waits for COLLECTOR_GC_THRESHOLDS,
    and every THAW_EVERY_S everything is gone through once (~1 s at 1,024 ranks), since a cycle
    frozen while alive is never collected once garbage. ``restore`` puts the process's GC back."""

    def __init__(self, now: float) -> None:
        self.next_freeze = now + FREEZE_EVERY_S
        self.next_thaw = now + THAW_EVERY_S
        self.thresholds: tuple[int, int, int] | None = None   # the GC's, before ours

    def tick(self, now: float) -> None:
        if now < self.next_freeze:
            return
        self.next_freeze = now + FREEZE_EVERY_S
        if now >= self.next_thaw:
            self.next_thaw = now + THAW_EVERY_S
            gc.unfreeze()
            gc.collect()
        gc.freeze()
        if self.thresholds is None:
            self.thresholds = gc.get_threshold()
            gc.set_threshold(*COLLECTOR_GC_THRESHOLDS)

    def restore(self) -> None:
        if self.thresholds is not None:
            gc.unfreeze()
            gc.set_threshold(*self.thresholds)
            self.thresholds = None
