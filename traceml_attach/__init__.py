"""traceml-attach: collect the agent's frames, diagnose, and present them.

This package never imports torch: it may run beside a job in another environment,
and importing torch could create a CUDA context on the user's GPU.
"""

from __future__ import annotations

__version__ = "0.1.0"
