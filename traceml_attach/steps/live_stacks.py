"""What the live step engine (live_tracker.py) keeps of each distinct stack while it is in the window,
and how it keeps to one loop frame between checks."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from traceml_attach.ingest.model import Span, Stack
from traceml_attach.policy import LOOP_TIE_MARGIN, OUTER_TIE
from traceml_attach.steps.batch_timeline import Place, inside
from traceml_attach.steps.classify import Rules, classify
from traceml_attach.steps.hotframes import via
from traceml_attach.steps.loopframe import BACKGROUND_FUNCS, LoopFrame, stack_traits
from traceml_attach.steps.movinglog import Log
from traceml_attach.steps.phases import WORK_PHASES


class StackInfo:
    """What the tracker knows of one distinct stack while it is in the window."""

    __slots__ = ("background", "decider", "depth_line", "epoch", "framework", "label", "leaf", "loop_line",
                 "ns", "path", "phase", "place", "rank", "refs", "segs", "stack", "traits", "via", "work")

    def __init__(self, stack: Stack, rules: Rules) -> None:
        self.stack = stack
        self.refs = 0            # spans of any thread in the window
        self.ns = 0              # time on the training thread in the window
        self.segs = 0            # segments on the training thread in the window
        self.background = any(f.name in BACKGROUND_FUNCS for f in stack)
        self.work = classify(stack, rules, None).phase in WORK_PHASES
        self.path = tuple((f.name, f.file) for f in stack)
        self.leaf = stack[-1]
        self.via = via(stack)
        self.traits = stack_traits(stack)
        self.epoch = -1          # the loop the fields below are for (RankTracker.epoch)
        self.phase = "wait"
        self.label: str | None = None
        self.decider: int | None = None
        self.framework: str | None = None
        self.depth_line: int | None = None   # its line at the loop's depth (any frame)
        self.loop_line: int | None = None    # its line in the loop frame, when the loop frame is there
        self.rank: int | None = None         # its phase's place in a step (timeline.CYCLE_RANK)
        self.place: Place = (None, None)     # (depth_line, rank): where it is in the step's cycle


def where(loop: LoopFrame | None) -> tuple[int, str, str] | None:
    return None if loop is None else (loop.depth, loop.name, loop.file)


def pick_loop(candidates: list[LoopFrame], current: LoopFrame | None) -> LoopFrame | None:
    """``find_loop``'s choice (the outermost frame with OUTER_TIE of the most wraps), but the
    current frame stays within LOOP_TIE_MARGIN of that tie: nested loops that wrap about as
    often would otherwise flip between checks, each flip a rebuild."""
    if not candidates:
        return None
    most = max(c.wraps for c in candidates)
    choice = next(c for c in candidates if c.wraps >= OUTER_TIE * most)
    mine = next((c for c in candidates if where(c) == where(current)), None)
    if mine is None or mine is choice:
        return choice
    if mine.depth < choice.depth:   # the current one is outer: it stays a little below the tie
        return mine if mine.wraps >= (OUTER_TIE - LOOP_TIE_MARGIN) * most else choice
    return mine if choice.wraps < (OUTER_TIE + LOOP_TIE_MARGIN) * most else choice


def window_outputs(stacks: dict[int, StackInfo], spans: Log[Span], start_ns: int, end_ns: int) -> tuple:
    """The training thread's window as the batch sees it, from the per-stack times: how much of
    its first and last span lies outside [start_ns, end_ns), each stack's (leaf, caller, phase,
    ns) for the hot frames, each stack's verdict, the wait labels' and the frameworks' times, the
    traits the stacks show, and each labelled stack's (label, stack, ns)."""
    head_cut = tail_cut = 0
    head = tail = None
    if spans:
        head, tail = spans[0], spans[-1]
        head_cut = max(start_ns - head.ts_ns, 0)
        tail_cut = max(tail.end_ns - end_ns, 0)
    weighted = []
    labels: dict[str, int] = {}
    frameworks: dict[str, int] = {}
    traits: set[str] = set()
    verdicts = {}
    labelled: list[tuple[str, Stack, int]] = []
    for stack_id, info in stacks.items():
        if not info.segs:
            continue
        ns = info.ns
        if head_cut and head is not None and id(head.stack) == stack_id:
            ns -= head_cut
        if tail_cut and tail is not None and id(tail.stack) == stack_id:
            ns -= tail_cut
        weighted.append((info.leaf, info.via, info.phase, ns))
        verdicts[stack_id] = (info.phase, info.label, info.decider)
        if info.label is not None:
            labelled.append((info.label, info.stack, ns))
        if info.phase == "wait":
            label = info.label or "other"
            labels[label] = labels.get(label, 0) + ns
        if info.framework:
            frameworks[info.framework] = frameworks.get(info.framework, 0) + ns
        traits |= info.traits
    return head_cut, tail_cut, weighted, labels, verdicts, frameworks, frozenset(traits), tuple(labelled)


def dominant_place(stacks: dict[int, StackInfo]) -> Place | None:
    """Where the training thread spends the most time in the window (``batch_timeline._unseen``)."""
    per_place: dict[Place, int] = {}
    for info in stacks.values():
        if info.segs:
            per_place[info.place] = per_place.get(info.place, 0) + info.ns
    return max(per_place, key=lambda k: per_place[k]) if per_place else None


def visits_of(spans: Iterable[Span], stacks: dict[int, StackInfo], dominant: Place | None
              ) -> tuple[deque[list[int]], int, bool]:
    """The visits outside the dominant place, as [end, ns] each, their time, and whether the last
    span is in one (the running state that RankTracker._segments carries)."""
    visits: deque[list[int]] = deque()
    total, in_visit = 0, False
    for span in spans:
        if inside(stacks[id(span.stack)].place, dominant):
            in_visit = False
        elif in_visit:
            visits[-1][0] = span.end_ns
            visits[-1][1] += span.dur_ns
            total += span.dur_ns
        else:
            visits.append([span.end_ns, span.dur_ns])
            total += span.dur_ns
            in_visit = True
    return visits, total, in_visit
