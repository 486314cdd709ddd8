"""Which code inside each phase costs the time: self time of the innermost frames, per function in
a library (torch, numpy, a framework: its lines are not the user's to change), per source line
elsewhere: the user's own code (a loop function's lines are the model call, the update, the
logging) and code generated at run time (torch.compile's kernels, call by call)."""

from __future__ import annotations

import functools
import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from operator import itemgetter

from traceml_agent.source import is_library
from traceml_attach.ingest.model import CodeFrame, Stack
from traceml_attach.steps.batch_timeline import Timeline
from traceml_attach.steps.loopframe import user_frame


@dataclass(frozen=True)
class HotFrame:
    frame: str          # "decode_sample (examples/input_bound.py:31)"
    via: str | None     # the innermost user-code frame above it (the caller to look at)
    share: float        # fraction of the phase's time in the window
    ms: float           # total milliseconds in the window


def hot_frames(tl: Timeline, top: int = 5) -> dict[str, list[HotFrame]]:
    """Per phase, the innermost functions with the most time, best first."""
    by_stack: dict[int, list] = {}   # id(stack) -> [stack, phase, ns]: a window repeats a few stacks
    for seg in tl.segments:
        entry = by_stack.get(id(seg.span.stack))
        if entry is None:
            by_stack[id(seg.span.stack)] = [seg.span.stack, seg.phase, seg.dur_ns]
        else:
            entry[2] += seg.dur_ns
    return hot_frames_of([(stack[-1], via(stack), phase, ns) for stack, phase, ns in by_stack.values()], top)


def via(stack: Stack) -> str | None:
    """The innermost user-code frame above the leaf: the caller to look at."""
    caller = user_frame(stack[:-1])
    return caller.where if caller else None


def hot_frames_of(weighted: Iterable[tuple[CodeFrame, str | None, str, int]], top: int = 5
                  ) -> dict[str, list[HotFrame]]:
    """``hot_frames`` from each distinct stack's leaf, ``via``, phase and time (in order of
    first appearance)."""
    per_phase: dict[str, dict[tuple[str, str, int | None], int]] = {}
    lines: dict[tuple[str, str, str, int | None], dict[tuple[int, str | None], int]] = {}
    totals: dict[str, int] = {}
    for leaf, caller, phase, ns in weighted:
        key = (leaf.name, leaf.file, None if _in_library(leaf.file) else leaf.line)
        functions = per_phase.get(phase)
        if functions is None:
            functions = per_phase[phase] = {}
        functions[key] = functions.get(key, 0) + ns
        at = lines.get((phase, *key))
        if at is None:
            at = lines[(phase, *key)] = {}
        where = (leaf.line, caller)
        at[where] = at.get(where, 0) + ns
        totals[phase] = totals.get(phase, 0) + ns
    out: dict[str, list[HotFrame]] = {}
    for phase, functions in per_phase.items():
        rows = []
        # Counter.most_common: the largest first, equal ones in order of first appearance
        for (name, path, own_line), ns in heapq.nlargest(top, functions.items(), key=itemgetter(1)):
            at = lines[(phase, name, path, own_line)]
            line, caller = max(at, key=at.__getitem__)
            rows.append(HotFrame(_where(name, path, line), caller, ns / totals[phase], ns / 1e6))
        out[phase] = rows
    return out


@functools.lru_cache(maxsize=4096)
def _where(name: str, path: str, line: int) -> str:
    return CodeFrame(name, path, line, None, None).where


@functools.lru_cache(maxsize=4096)
def _in_library(path: str) -> bool:
    return is_library(path)
