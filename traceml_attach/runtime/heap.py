"""Give freed memory back to the system.

Each py-spy window is read as one JSON document of a few MB on a sampler thread, and glibc's
malloc may keep what such threads freed in their arenas; ``malloc_trim(0)`` returns it.
(The RSS growth once seen over long attaches turned out to be ``linecache`` in agent/source.py;
this trim's own effect was not measured apart.) Elsewhere (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
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
