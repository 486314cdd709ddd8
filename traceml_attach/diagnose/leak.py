"""Where rising memory goes, for a rank whose memory rises step over step: evidence with its
reason, never certainty.

- The lines: the training loop's source (and the job's own functions it calls), read for tensors
  with their graph kept across steps (retention.py).
- The phase: the process's RSS, read every ~50 ms (``mem`` frames), set against the phases the
  training thread was in between two readings. Each change of RSS is the sum over the phases of
  (bytes a second while in that phase) x (time in it): a least-squares fit over the window's
  readings gives each phase's pace, and times its time a step, its net growth a step. Forward
  growing what backward never gives back is activations kept alive.
- The workers: which DataLoader worker's RSS rises (a Dataset that caches what it loads, or the
  copy-on-access of its Python objects).
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections.abc import Sequence

from traceml_agent.source import is_library
from traceml_attach.diagnose.finding import KeptLine, LeakEvidence, WorkerGrowth
from traceml_attach.diagnose.retention import KINDS, kept_across_steps
from traceml_attach.ingest.model import ProcSample
from traceml_attach.ingest.stream import Recording
from traceml_attach.policy import LEAK_MIN_PHASE_SHARE, LEAK_MIN_READINGS, LEAK_PHASE_HOLDS, LEAK_WORKER_GROWTH_BYTES
from traceml_attach.steps.batch_timeline import Timeline
from traceml_attach.steps.phases import PHASES

MAX_LINES = 5            # lines shown, in source order


def leak_evidence(rec: Recording, pid: int, tl: Timeline | None, lo: int, hi: int,
                  step_s: float | None) -> LeakEvidence:
    """What the window shows of where ``pid``'s rising memory goes (``step_s``: its step, where known)."""
    lines = _lines(rec, tl) if tl is not None else ()
    per_step = _phase_growth(rec.rss.get(pid, []), tl, lo, hi, step_s) if tl is not None and step_s else None
    phase = _growth_phase(per_step)
    procs = rec.procs_between(pid, lo, hi)
    main = _pace([(p.ts_ns, p.rss_bytes) for p in procs if p.rss_bytes is not None])
    workers_total = _pace([(p.ts_ns, p.workers_rss_bytes) for p in procs]) if any(p.children for p in procs) else None
    return LeakEvidence(lines, per_step, phase, main, workers_total, _workers(procs))


def _lines(rec: Recording, tl: Timeline) -> tuple[KeptLine, ...]:
    """The lines that keep a tensor across steps, in the loop function's file and in the files of
    the job's own functions sampled under it."""
    loop = tl.loop
    if loop is None:
        return ()
    loop_lines: dict[int, dict[str, int]] = {}
    called: dict[str, set[int]] = {}
    for seg in tl.segments:
        stack = seg.span.stack
        if len(stack) <= loop.depth or (stack[loop.depth].name, stack[loop.depth].file) != (loop.name, loop.file):
            continue
        at = loop_lines.setdefault(stack[loop.depth].line, {})
        at[seg.phase] = at.get(seg.phase, 0) + seg.dur_ns
        for frame in stack[loop.depth + 1:]:
            if not is_library(frame.file) and frame.file in rec.sources:
                called.setdefault(frame.file, set()).add(frame.line)
    found = []
    for file in sorted({loop.file, *called}):
        text = rec.sources.get(file)
        if text is None:
            continue
        found += kept_across_steps(text, file, loop_lines if file == loop.file else {}, sorted(called.get(file, ())))
    ranked = sorted(found, key=lambda r: (KINDS.index(r.kind), r.file != loop.file, r.file, r.line))
    return tuple(KeptLine(r.where, r.text, r.holder, r.tensor, r.how, r.why(), r.kind) for r in ranked[:MAX_LINES])


def _phase_growth(rss: Sequence[tuple[int, int]], tl: Timeline, lo: int, hi: int,
                  step_s: float) -> dict[str, float] | None:
    """Each phase's net change of RSS a step, from the readings in [lo, hi] (module doc)."""
    first = bisect.bisect_left(rss, lo, key=_ts)
    last = bisect.bisect_right(rss, hi, key=_ts)
    readings = rss[first:last]
    if len(readings) < LEAK_MIN_READINGS:
        return None
    rows, deltas = _compositions(readings, tl), [b - a for (_, a), (_, b) in itertools.pairwise(readings)]
    totals = [sum(r[i] for r in rows) for i in range(len(PHASES))]
    whole = sum(totals)
    used = [i for i, t in enumerate(totals) if whole and t >= LEAK_MIN_PHASE_SHARE * whole]
    if not used:
        return None
    pace = _least_squares([[r[i] for i in used] for r in rows], deltas)
    if pace is None:
        return None
    share = {PHASES[i]: totals[i] / whole for i in used}
    return {PHASES[i]: round(pace[j] * share[PHASES[i]] * step_s, 1) for j, i in enumerate(used)}


def _ts(reading: tuple[int, int]) -> int:
    return reading[0]


def _compositions(readings: Sequence[tuple[int, int]], tl: Timeline) -> list[list[float]]:
    """Seconds in each phase between consecutive readings (one sweep over the segments)."""
    index = {p: i for i, p in enumerate(PHASES)}
    segs = sorted(tl.segments, key=lambda s: s.ts_ns)
    rows = []
    j = 0
    for (a, _), (b, _) in itertools.pairwise(readings):
        row = [0.0] * len(PHASES)
        while j < len(segs) and segs[j].ts_ns + segs[j].dur_ns <= a:
            j += 1
        k = j
        while k < len(segs) and segs[k].ts_ns < b:
            s = segs[k]
            overlap = min(s.ts_ns + s.dur_ns, b) - max(s.ts_ns, a)
            if overlap > 0:
                row[index[s.phase]] += overlap / 1e9
            k += 1
        rows.append(row)
    return rows


def _least_squares(x: list[list[float]], y: list[int]) -> list[float] | None:
    """The least-squares solution of x·b = y (normal equations, Gaussian elimination with
    partial pivoting); None when they are singular."""
    n = len(x[0])
    a = [[sum(r[i] * r[j] for r in x) for j in range(n)] + [sum(r[i] * v for r, v in zip(x, y, strict=True))]
         for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-12:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [v - f * w for v, w in zip(a[r], a[col], strict=True)]
    return [a[i][n] / a[i][i] for i in range(n)]


def _growth_phase(per_step: dict[str, float] | None) -> str | None:
    """The phase that holds most of the net growth a step, where one does."""
    if not per_step:
        return None
    net = sum(per_step.values())
    phase, grows = max(per_step.items(), key=lambda kv: kv[1])
    return phase if net > 0 and grows >= LEAK_PHASE_HOLDS * sum(v for v in per_step.values() if v > 0) else None


def _pace(points: Sequence[tuple[int, int]]) -> float | None:
    """Bytes a second between the medians of the first and last thirds."""
    if len(points) < 6:
        return None
    third = len(points) // 3
    head, tail = points[:third], points[-third:]
    dt = (statistics.fmean(t for t, _ in tail) - statistics.fmean(t for t, _ in head)) / 1e9
    return (statistics.median(v for _, v in tail) - statistics.median(v for _, v in head)) / dt if dt > 0 else None


def _workers(procs: Sequence[ProcSample]) -> tuple[WorkerGrowth, ...]:
    series: dict[int, list[tuple[int, int]]] = {}
    for p in procs:
        for pid, _, rss in p.children:
            if rss is not None:
                series.setdefault(pid, []).append((p.ts_ns, rss))
    out = []
    for pid, points in series.items():
        pace = _pace(points)
        if pace is None:
            continue
        third = len(points) // 3
        growth = int(statistics.median(v for _, v in points[-third:]) - statistics.median(v for _, v in points[:third]))
        if growth >= LEAK_WORKER_GROWTH_BYTES:
            out.append(WorkerGrowth(pid, growth, round(pace, 1)))
    return tuple(sorted(out, key=lambda w: -w.growth_bytes))
