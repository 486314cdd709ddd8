"""Node-side sampler: find the target, drive py-spy, poll psutil, emit msgpack frames.

Nothing here imports torch or anything from ``traceml_attach``: data flows one way,
from this package to the collector.
"""

from __future__ import annotations

__version__ = "0.1.0"
