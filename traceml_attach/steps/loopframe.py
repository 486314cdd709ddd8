"""Which thread runs the training loop, and which frame of it is the loop: the first two stages of
the step engine (batch_timeline.py's module doc), shared by its batch and live forms.

1. The training thread is the one that spends the most time in training phases;
   pin-memory, loader and other background threads never count as loop time (``pick_thread``).
2. The loop frame is the user-code frame on that thread's dominant call path whose
   line keeps wrapping backwards (``for`` back to its header): the outermost one when
   nested frames wrap about as often (a ``train_step`` inside ``train``). A framework's
   loop lives in a package: a ``[[loop]]`` rule names it (``loop_candidates``).

Also what a stack shows of the job's own choices (``stack_traits``: autocast, loader workers,
torch.compile), which advice must never suggest.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from traceml_agent.source import is_library
from traceml_attach.ingest.model import CodeFrame, Span, Stack, ThreadInfo, os_pid
from traceml_attach.policy import MIN_PATH_SHARE, OUTER_TIE
from traceml_attach.steps.classify import LoopRule, Rules, classifier
from traceml_attach.steps.phases import WORK_PHASES

# Functions that mark a thread as background (pin memory, queue feeders), never the loop.
BACKGROUND_FUNCS = {"_pin_memory_loop", "_feed", "_handle_results", "_handle_workers",
                     "_handle_tasks", "_worker_loop"}


@dataclass(frozen=True)
class LoopFrame:
    depth: int
    name: str
    file: str
    wraps: int
    framework: str | None = None   # the loop rule that named it (a framework's loop)


@functools.lru_cache(maxsize=4096)
def _library(path: str) -> bool:
    """``is_library``, once per file (a live tick asks it of every rank's stack)."""
    return is_library(path)


def user_frame(stack: Stack) -> CodeFrame | None:
    """The innermost frame of the user's own code (not the standard library or a package)."""
    for frame in reversed(stack):
        if not _library(frame.file):
            return frame
    return None


def thread_label(info: ThreadInfo | None, pid: int) -> str | None:
    """The thread's Python name (the agent names the main thread "MainThread" where the target
    never imported `threading`, see agent.pyspy.ThreadNames); for a main thread (OS thread id =
    PID) still unnamed, "main thread", which is a fact; else None."""
    if info is None:
        return None
    if info.name:
        return info.name
    return "main thread" if info.os_tid == os_pid(pid) else None


def is_background(func_names: Iterable[str], thread_name: str | None) -> bool:
    """A DataLoader helper thread (pin-memory, queue feeder...), never the training loop."""
    if thread_name and "pin_memory" in thread_name:
        return True
    return any(name in BACKGROUND_FUNCS for name in func_names)


def pick_thread(spans: Sequence[Span], threads: dict[int, ThreadInfo], rules: Rules) -> int | None:
    """The thread running the training loop."""
    score: Counter[int] = Counter()
    presence: Counter[int] = Counter()
    verdict = classifier(rules, None)
    for span in spans:
        name = threads[span.tid].name if span.tid in threads else None
        if is_background((f.name for f in span.stack), name):
            continue
        presence[span.tid] += span.dur_ns
        if verdict(span.stack).phase in WORK_PHASES:
            score[span.tid] += span.dur_ns
    if score:
        return score.most_common(1)[0][0]
    mains = [tid for tid, t in threads.items() if t.name == "MainThread" and tid in presence]
    if mains:
        return mains[0]
    return presence.most_common(1)[0][0] if presence else None


def find_loop(spans: Sequence[Span], loops: Sequence[LoopRule] = ()) -> LoopFrame | None:
    """The training loop's frame on the thread's dominant call path (see module doc)."""
    candidates = loop_candidates(spans, _weighted(spans), loops)
    if not candidates:
        return None
    most = max(c.wraps for c in candidates)
    return next(c for c in candidates if c.wraps >= OUTER_TIE * most)


def _weighted(spans: Iterable[Span]) -> list[tuple[Stack, int]]:
    """Each distinct stack of ``spans`` with its time among them, in order of first appearance."""
    by_stack: dict[int, list] = {}   # id(stack) -> [stack, ns]
    for s in spans:
        entry = by_stack.get(id(s.stack))
        if entry is None:
            by_stack[id(s.stack)] = [s.stack, s.dur_ns]
        else:
            entry[1] += s.dur_ns
    return [(stack, ns) for stack, ns in by_stack.values()]


def loop_hint(spans: Sequence[Span]) -> str | None:
    """With no loop found: the library frame on the dominant call path that ``find_loop`` would
    choose were library frames candidates, the loop a ``[[loop]]`` rule could name; None when no
    library frame wraps."""
    wrapping = [c for c in loop_candidates(spans, _weighted(spans), anywhere=True) if _library(c.file)]
    if not wrapping:
        return None
    most = max(c.wraps for c in wrapping)
    best = next(c for c in wrapping if c.wraps >= OUTER_TIE * most)   # as find_loop chooses
    return f"{best.name} ({best.file})"


def _autocast(ctx: str | None) -> bool:
    """A ``with torch.autocast(...)`` that is on: ``enabled=`` absent or literally True (a variable
    there, as in ``enabled=args.amp``, may be False: not a fact)."""
    if not ctx or "autocast" not in ctx:
        return False
    return "enabled=" not in ctx.replace(" ", "") or "enabled=True" in ctx.replace(" ", "")


# What a stack shows the job already does, so that advice never suggests it (diagnose/dialect.py).
_TRAITS = (
    ("autocast", lambda f: _autocast(f.ctx) or f.name.startswith("MixedPrecision.")),
    ("loader_workers", lambda f: "_MultiProcessingDataLoaderIter" in f.name),
    # a compiled callable runs through a dynamo context's wrapper (torch.compile's own wrapper of
    # zero_grad and other internals is a DisableContext: not the job's choice)
    ("compiled", lambda f: "torch/_dynamo/eval_frame" in f.file and not f.name.startswith("DisableContext")),
)


def stack_traits(stack: Stack) -> frozenset[str]:
    return frozenset(name for name, test in _TRAITS if any(test(frame) for frame in stack))


def loop_candidates(spans: Iterable[Span], weighted: Sequence[tuple[Stack, int]],
                    loops: Sequence[LoopRule] = (), anywhere: bool = False) -> list[LoopFrame]:
    """The frames on the dominant call path of ``spans`` (one thread's, in time order) that
    wrap, outermost first, given each distinct stack's time among them (in order of first
    appearance): the path is walked on the stacks, and the wraps of every candidate on it are
    counted in one pass over the spans.

    The candidates are the frames of the first run of the user's own code on the path (below a
    launcher's library frames: Ray, multiprocessing) and the frames that a loop rule names (a
    framework's loop: HF Trainer, Lightning). The user's code below a library frame is not: a
    loop in a Dataset's ``__getitem__`` under the DataLoader wraps far more often than the steps.
    """
    total = sum(ns for _, ns in weighted)
    if total == 0:
        return []
    path = list(weighted)
    walk: list[tuple[int, tuple[str, str], str | None]] = []   # (depth, frame, framework)
    reach: dict[int, int] = {}   # id(stack) -> how many candidates of the walk it follows
    user_run = 0                 # 0: before the user's code, 1: in its first run, 2: past it
    for depth in range(128):
        weights: Counter[tuple[str, str]] = Counter()
        for stack, ns in path:
            if len(stack) > depth:
                weights[(stack[depth].name, stack[depth].file)] += ns
        if not weights:
            break
        ident, weight = weights.most_common(1)[0]
        if weight < MIN_PATH_SHARE * total:
            break
        path = [(st, ns) for st, ns in path if len(st) > depth and (st[depth].name, st[depth].file) == ident]
        library = _library(ident[1])
        if user_run == 0 and not library:
            user_run = 1
        elif user_run == 1 and library:
            user_run = 2
        rule = next((r for r in loops if r.matches(*ident)), None)
        if rule is None and user_run != 1 and not anywhere:
            continue
        walk.append((depth, ident, rule.framework if rule else None))
        for stack, _ in path:
            reach[id(stack)] = len(walk)
    wraps = [0] * len(walk)
    prev: list[int | None] = [None] * len(walk)
    for span in spans:
        for k in range(reach.get(id(span.stack), 0)):
            line = span.stack[walk[k][0]].line
            last = prev[k]
            if last is not None and line < last:
                wraps[k] += 1
            prev[k] = line
    return [LoopFrame(depth, ident[0], ident[1], w, framework)
            for (depth, ident, framework), w in zip(walk, wraps, strict=True) if w]
