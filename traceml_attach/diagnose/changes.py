"""The moment it changed: lasting shifts in the step time, found in the session's rollups.

Each rollup (diagnose/history.py, 10 s and longer) gives one point per series: the job's mean step
(the median rank's), each phase's ms per step, and memory. A change point splits a series where
the two sides' means differ the most in standard errors (binary segmentation; the noise is the
median of neighbouring rollups' differences, which a single shift or odd rollup barely moves). A split
counts when it is policy.change_t standard errors and policy.change_min_share of the earlier level
apart, with policy.change_min_rollups rollups on each side. Everything comes from the history, so
a replay of the recording finds the same.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

from traceml_attach.diagnose.history import History
from traceml_attach.diagnose.report import Change
from traceml_attach.policy import DEFAULT_WHATIF_POLICY, WhatIfPolicy
from traceml_attach.steps.phases import PHASES

MAD_PER_SD = 0.6745   # a normal distribution's median absolute deviation, in standard deviations


def series(history: History) -> tuple[list[int], dict[str, list[float | None]]]:
    """The rollups' end times and, per series, one value each (None where not known): "step" and
    each phase in ms per step, "rss" and "gpu_mem" in bytes (each the median over the ranks)."""
    rows: dict[int, dict[str, list[float]]] = {}
    ranks = sorted((r for r in history.ranks if r.isdigit()), key=int)
    # the job's median from an even sample of its ranks: a 1,024-rank session costs as 64 do
    every = max(1, -(-len(ranks) // DEFAULT_WHATIF_POLICY.change_max_ranks))
    for rank in ranks[::every]:
        for b in history.ranks[rank].buckets:
            row = rows.setdefault(b.end_ns, {})
            if b.timed_steps:
                step = b.timed_ns / b.timed_steps / 1e6
                row.setdefault("step", []).append(step)
                if b.covered_ns:
                    for i, p in enumerate(PHASES):
                        row.setdefault(p, []).append(step * b.phases_ns[i] / b.covered_ns)
            for which in ("rss", "gpu_mem"):
                value = getattr(b, which)
                if value is not None:
                    row.setdefault(which, []).append(value.tail)
    ends = sorted(rows)
    names = ("step", *PHASES, "rss", "gpu_mem")
    return ends, {n: [statistics.median(rows[e][n]) if rows[e].get(n) else None for e in ends] for n in names}


def splits(values: Sequence[float], policy: WhatIfPolicy = DEFAULT_WHATIF_POLICY) -> list[int]:
    """The indices where a lasting shift begins (sorted), by binary segmentation."""
    found: list[int] = []
    todo = [(0, len(values))]
    while todo and len(found) < policy.max_changes:
        lo, hi = todo.pop()
        at = _best(values[lo:hi], policy)
        if at is None:
            continue
        found.append(lo + at)
        todo += [(lo, lo + at), (lo + at, hi)]
    return sorted(found)


def _best(x: Sequence[float], policy: WhatIfPolicy) -> int | None:
    n, m = len(x), policy.change_min_rollups
    if n < 2 * m:
        return None
    # the noise from neighbouring rollups' differences: one shift moves a single difference only
    diffs = [abs(b - a) for a, b in itertools.pairwise(x)]
    level = abs(statistics.fmean(x))
    # a floor: a series flat to the rollups' rounding would make any shift significant
    sd = max(statistics.median(diffs) / (MAD_PER_SD * 2 ** 0.5), 0.01 * level, 1e-9)
    total, best, best_t, head = sum(x), None, 0.0, sum(x[:m - 1])
    for k in range(m, n - m + 1):
        head += x[k - 1]
        mean_a, mean_b = head / k, (total - head) / (n - k)
        t = abs(mean_b - mean_a) / (sd * (1 / k + 1 / (n - k)) ** 0.5)
        if t >= policy.change_t and abs(mean_b - mean_a) >= policy.change_min_share * abs(mean_a) and t > best_t:
            best, best_t = k, t
    return best


def changes(history: History, policy: WhatIfPolicy = DEFAULT_WHATIF_POLICY) -> tuple[Change, ...]:
    """The step time's change points, each with what its phases and memory did at the same time
    (kept on the history until its next rollup)."""
    key = f"changes {policy!r}"
    held = history.derived.get(key)
    if held is not None and held[0] == history.closed_ns:
        return held[1]   # type: ignore[return-value]
    out = _changes(history, policy)
    history.derived[key] = (history.closed_ns, out)
    return out


def _changes(history: History, policy: WhatIfPolicy) -> tuple[Change, ...]:
    ends, cols = series(history)
    step = cols["step"]
    idx = [i for i, v in enumerate(step) if v is not None]
    values = [v for v in step if v is not None]
    found = []
    cuts = splits(values, policy)
    for j, cut in enumerate(cuts):
        lo = cuts[j - 1] if j else 0
        hi = cuts[j + 1] if j + 1 < len(cuts) else len(values)
        before, after = idx[lo:cut], idx[cut:hi]
        b, a = _mean(step, before), _mean(step, after)
        if a is None or b is None:
            continue
        phases = {}
        for p in PHASES:
            pb, pa = _mean(cols[p], before), _mean(cols[p], after)
            if pb is not None and pa is not None and abs(pa - pb) >= policy.change_phase_share * abs(a - b):
                phases[p] = round(pa - pb, 3)
        memory = {}
        for which in ("rss", "gpu_mem"):
            near_b, near_a = before[-policy.change_min_rollups:], after[:policy.change_min_rollups]
            mb, ma = _mean(cols[which], near_b), _mean(cols[which], near_a)
            if mb is not None and ma is not None and ma - mb >= policy.change_memory_bytes:
                memory[which] = int(ma - mb)
        # the shift happened inside the rollup before the first one after it: its start
        at_ns = ends[before[-1]]
        found.append(Change("step", round(at_ns / 1e9, 3), round(b, 3), round(a, 3), "ms",
                          round(100 * (a - b) / b, 1) if b else None, phases, memory))
    return tuple(found)


def _mean(col: Sequence[float | None], at: Sequence[int]) -> float | None:
    vals = [v for i in at if (v := col[i]) is not None]
    return statistics.fmean(vals) if vals else None
