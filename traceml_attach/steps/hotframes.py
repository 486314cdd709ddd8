"""Which code inside each phase costs the time: self time of the innermost frames."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from traceml_attach.ingest.model import CodeFrame
from traceml_attach.steps.timeline import Timeline, user_frame


@dataclass(frozen=True)
class HotFrame:
    frame: str          # "decode_sample (examples/input_bound.py:31)"
    via: str | None     # the innermost user-code frame above it (the caller to look at)
    share: float        # fraction of the phase's time in the window
    ms: float           # total milliseconds in the window


def hot_frames(tl: Timeline, top: int = 5) -> dict[str, list[HotFrame]]:
    """Per phase, the innermost functions with the most time, best first."""
    per_phase: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
    lines: dict[tuple[str, str, str], Counter[tuple[int, str | None]]] = defaultdict(Counter)
    totals: Counter[str] = Counter()
    vias: dict[int, str | None] = {}   # by id() of a stack the segments hold: a window repeats few
    for seg in tl.segments:
        stack = seg.span.stack
        if id(stack) not in vias:
            caller = user_frame(stack[:-1])
            vias[id(stack)] = caller.where if caller else None
        leaf = stack[-1]
        key = (leaf.name, leaf.file)
        per_phase[seg.phase][key] += seg.dur_ns
        lines[(seg.phase, *key)][(leaf.line, vias[id(stack)])] += seg.dur_ns
        totals[seg.phase] += seg.dur_ns
    out: dict[str, list[HotFrame]] = {}
    for phase, counter in per_phase.items():
        rows = []
        for (name, path), ns in counter.most_common(top):
            (line, via), _ = lines[(phase, name, path)].most_common(1)[0]
            where = CodeFrame(name, path, line, None, None).where
            rows.append(HotFrame(where, via, ns / totals[phase], ns / 1e6))
        out[phase] = rows
    return out
