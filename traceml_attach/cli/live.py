"""The compact live text view (used with --no-tui or without a terminal)."""

from __future__ import annotations

import sys
import time

from traceml_attach.diagnose.analysis import Analysis
from traceml_attach.ingest.stream import Recording
from traceml_attach.steps.phases import REGISTRY

_SHORT = {p.name: p.tiny for p in REGISTRY}


def live_line(rec: Recording, an: Analysis, elapsed_s: float) -> str:
    f = an.findings[0]
    parts = [time.strftime("%H:%M:%S"), f"{elapsed_s:5.0f}s", f"[{f.status}] {f.summary}"]
    for r in an.ranks:
        if r.shares:
            shares = " ".join(f"{_SHORT[p]} {100 * v:.0f}%" for p, v in r.shares.items())
            step = f"{r.step_ms:.1f} ms/step" if r.step_ms is not None else "step time unknown"
            parts.append(f"r{r.rank}: {r.steps}{'' if r.step_ms is not None else '+'} steps, {step}, {shares}")
        else:
            parts.append(f"r{r.rank}: {r.steps} steps")
    return " | ".join(parts)


def print_live(rec: Recording, an: Analysis, elapsed_s: float) -> None:
    print(live_line(rec, an, elapsed_s), flush=True)


def print_progress(total_s: float) -> object:
    def tick(rec: Recording, an: Analysis, elapsed_s: float) -> None:
        steps = max((r.steps for r in an.ranks), default=0)
        print(f"traceml: sampling {elapsed_s:.0f}/{total_s:.0f} s, {steps} steps seen",
              file=sys.stderr, flush=True)
    return tick
