"""The compact live text view (used with --no-tui or without a terminal)."""

from __future__ import annotations

import sys
import time

from traceml_attach.diagnose.analysis import Analysis
from traceml_attach.diagnose.report import Report
from traceml_attach.ingest.stream import Recording
from traceml_attach.output.live import first_look
from traceml_attach.output.words import listed_ranks, node_states, node_tag
from traceml_attach.steps.phases import REGISTRY

_SHORT = {p.name: p.tiny for p in REGISTRY}
LIVE_RANKS = 8      # ranks given one by one in a live line; past it, the spread and the slowest
LIVE_SLOWEST = 3


def live_line(rec: Recording, an: Analysis, elapsed_s: float) -> str:
    f = an.findings[0]
    rep = an.report
    look = " (first look)" if first_look(rec) else ""
    parts = [time.strftime("%H:%M:%S"), f"{elapsed_s:5.0f}s", f"[{f.status}]{look} {f.summary}"]
    if rep.nodes:
        parts.append(node_states(rep.nodes))
    if len(an.ranks) > LIVE_RANKS:
        parts.append(_many(rep))
        return " | ".join(parts)
    for r in an.ranks:
        label = f"r{r.rank}" + (node_tag(rep, int(r.rank)) if r.rank.isdigit() else "")
        if r.shares:
            shares = " ".join(f"{_SHORT[p]} {100 * v:.0f}%" for p, v in r.shares.items())
            step = f"{r.step_ms:.1f} ms/step" if r.step_ms is not None else "step time unknown"
            parts.append(f"{label}: {r.steps}{'' if r.step_ms is not None else '+'} steps, {step}, {shares}")
        else:
            parts.append(f"{label}: {r.steps} steps")
    return " | ".join(parts)


def _many(rep: Report) -> str:
    """Many ranks in one part: the step's spread across them and the slowest few."""
    st = rep.step_time
    dist = st.spread
    if not dist:
        return f"{len(st.ranks)} ranks, step time unknown"
    known = [rank for rank in listed_ranks(st, LIVE_SLOWEST) if st.ranks[rank].step_ms is not None]
    slow = ", ".join(f"r{rank}{node_tag(rep, rank)} {st.ranks[rank].step_ms:.1f}" for rank in known[:LIVE_SLOWEST])
    return (f"{len(st.ranks)} ranks: step p50 {dist['p50'].step_ms:.1f} / p90 {dist['p90'].step_ms:.1f} / "
            f"max {dist['max'].step_ms:.1f} ms; slowest {slow}")


def print_live(rec: Recording, an: Analysis, elapsed_s: float) -> None:
    print(live_line(rec, an, elapsed_s), flush=True)


def print_progress(total_s: float) -> object:
    def tick(rec: Recording, an: Analysis, elapsed_s: float) -> None:
        steps = max((r.steps for r in an.ranks), default=0)
        total = rec.extended.to_s if rec.extended is not None else total_s   # (sampling on: diagnose/window.py)
        print(f"traceml: sampling {elapsed_s:.0f}/{total:.0f} s, {steps} steps seen",
              file=sys.stderr, flush=True)
    return tick
