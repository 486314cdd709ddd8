"""Per-rank step-time statistics from a Timeline."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from traceml_attach.policy import TYPICAL_MAX
from traceml_attach.steps.batch_timeline import Timeline, labelled
from traceml_attach.steps.clock import UNDECIDED, Step, StepClock
from traceml_attach.steps.doubts import too_rarely_seen
from traceml_attach.steps.loopframe import loop_hint
from traceml_attach.steps.phases import COMPONENTS, PHASES


@dataclass(frozen=True)
class RankStepStats:
    rank: str
    pid: int
    steps: int                            # counted (observed boundaries when the step time is unknown)
    step_ms: float | None                 # the typical step; None when it cannot be known
    phases_ms: dict[str, float] | None    # shares × step_ms: sums to step_ms
    shares: dict[str, float] | None       # total phase time / total step time: sums to 1
    component_median_shares: dict[str, float] | None  # each component's share of the typical step
    wait_labels: dict[str, float]         # share of the wait phase by sub-label
    clock: StepClock | None               # how the steps were counted; says why step_ms is unknown
    loop: str | None                      # "train (train.py:42)" style description
    thread: str | None
    # Per step, the time blocked inside synchronizing phases (backward's all-reduce,
    # collectives): what a fast rank spends waiting for a slow one. None without CPU counters.
    sync_wait_ms: float | None = None
    coverage: float | None = None   # share of the window in which the training thread's stack was seen
    # The blocked time as a share of the step, and each phase's share less it (the work each
    # phase really did on this rank): known even when the step time is not.
    sync_wait_share: float | None = None
    active_shares: dict[str, float] | None = None
    framework: str | None = None          # "HF Trainer (transformers 5.x)", "Lightning"... (Timeline.framework)
    micro_batches: int | None = 1         # per step: a step is an optimizer step (None: not counted)
    traits: frozenset[str] = frozenset()  # what the stacks show the job already does (Timeline.traits)
    # with no loop found: the training thread's time by phase (a loop the rules do not know)
    unlooped_shares: dict[str, float] | None = None
    loop_hint: str | None = None          # ...and a library frame on its path that wraps, to name in a rule
    # the typical steps' spread: their interquartile range / 1.349 (a standard deviation that an
    # occasional long step does not move); the batch analysis only (a live tick keeps sums)
    step_sd_ms: float | None = None
    # the loop's complete cycles whose time is attributed (covered steps or, where the count is
    # unsure, the intervals between returns, each a step or a micro-batch): what the shares rest on
    cycles: int = 0


@dataclass(frozen=True)
class StepTotals:
    """The sums over a timeline's steps that its statistics are ratios of (times in ns). The
    batch analysis adds them up once per window; the live tracker keeps them as running sums."""

    steps: int                     # every step, covered or not
    steps_ns: int
    covered: int                   # steps whose time is attributed to phases
    covered_ns: int
    phases_ns: dict[str, int]      # over the covered steps
    typical_ns: int                # the covered steps up to TYPICAL_MAX typical steps (all if none is)
    typical_phases_ns: dict[str, int]
    measured: int                  # covered steps with CPU counters
    measured_ns: int
    blocked_ns: dict[str, int]     # time blocked in synchronizing phases, over the measured steps


IQR_PER_SD = 1.349   # a normal distribution's interquartile range, in standard deviations


def typical_limit_ns(step_ms: float | None) -> float | None:
    """A covered step longer than this is not typical (an eval, a checkpoint)."""
    return None if step_ms is None else TYPICAL_MAX * step_ms * 1e6


def step_totals(steps: Sequence[Step], step_ms: float | None) -> StepTotals:
    covered = [s for s in steps if s.covered]
    limit = typical_limit_ns(step_ms)
    typical = [s for s in covered if limit is None or s.dur_ns <= limit] or covered
    measured = [s for s in covered if s.blocked_sync_ns is not None]
    return StepTotals(
        len(steps), sum(s.dur_ns for s in steps), len(covered), sum(s.dur_ns for s in covered),
        {p: sum(s.phases_ns[p] for s in covered) for p in PHASES},
        sum(s.dur_ns for s in typical), {p: sum(s.phases_ns[p] for s in typical) for p in PHASES},
        len(measured), sum(s.dur_ns for s in measured),
        {p: sum((s.blocked_sync_ns or {}).get(p, 0) for s in measured) for p in PHASES},
    )


def rank_stats(rank: str, tl: Timeline) -> RankStepStats:
    step_ms = tl.clock.typical_ns / 1e6 if tl.clock.typical_ns is not None else None
    stats = stats_of(rank, tl, step_totals(tl.steps, step_ms))
    if step_ms is None:
        return stats
    return replace(stats, step_sd_ms=step_spread_ms(tl.steps, step_ms))


def step_spread_ms(steps: Sequence[Step], step_ms: float) -> float | None:
    """The typical covered steps' interquartile range / 1.349, in ms (None under 4 steps)."""
    limit = typical_limit_ns(step_ms)
    durations = [s.dur_ns for s in steps if s.covered and (limit is None or s.dur_ns <= limit)]
    if len(durations) < 4:
        return None
    q1, _, q3 = statistics.quantiles(durations, n=4)
    return (q3 - q1) / IQR_PER_SD / 1e6


def stats_of(rank: str, tl: Timeline, totals: StepTotals) -> RankStepStats:
    """A rank's statistics from its timeline and the sums over its steps."""
    loop = f"{tl.loop.name} ({tl.loop.file})" if tl.loop else None
    wait_total = sum(tl.wait_labels_ns.values())
    ranked = sorted(tl.wait_labels_ns.items(), key=lambda kv: -kv[1])
    labels = {k: v / wait_total for k, v in ranked} if wait_total else {}
    # steps inside a sampler drop-out count, but their time is no phase's
    coverage = tl.coverage
    if totals.steps and coverage is not None:
        coverage *= totals.covered_ns / totals.steps_ns
    if not totals.covered:
        unlooped, hint = (None, None) if tl.loop is not None else _unlooped(tl)
        return RankStepStats(rank, tl.pid, 0, None, None, None, None, labels, tl.clock, loop,
                             tl.thread_name, coverage=coverage, framework=tl.framework, traits=tl.traits,
                             unlooped_shares=unlooped, loop_hint=hint)
    total = totals.covered_ns
    shares = {p: totals.phases_ns[p] / total for p in PHASES}
    norm = sum(shares.values()) or 1.0
    shares = {p: v / norm for p, v in shares.items()}
    step_ms = tl.clock.typical_ns / 1e6 if tl.clock.typical_ns is not None else None
    # The typical step's composition: total phase time over total step time, leaving out
    # steps longer than TYPICAL_MAX typical steps (an occasional eval or checkpoint). Per-step
    # shares are quantized by sampling (a 4 ms phase is absent from most 10 ms-sampled
    # steps), so their median is biased towards 0 for short phases; this ratio is not.
    component = {
        name: sum(totals.typical_phases_ns[p] for p in phases) / totals.typical_ns
        for name, phases in COMPONENTS.items()
    }
    phases_ms = {p: shares[p] * step_ms for p in PHASES} if step_ms is not None else None
    sync_share, active_shares = _sync(totals, shares)
    return RankStepStats(
        rank, tl.pid, tl.step_count, step_ms, phases_ms, shares, component, labels, tl.clock, loop,
        tl.thread_name,
        None if sync_share is None or step_ms is None else sync_share * step_ms,
        coverage, sync_share, active_shares, tl.framework, micro_batches_said(tl), tl.traits, cycles=totals.covered,
    )


def micro_batches_said(tl: Timeline) -> int | None:
    """The micro-batches a step is said to hold: the timeline's, but not 1 where its step time is
    unknown and what was seen says its intervals may be micro-batches: accumulation undecided
    (UNDECIDED), or the optimizer seen in far fewer of them than if each held an optimizer step
    (``doubts.too_rarely_seen``); how many a step holds is then not known (None). A loaded 10-s
    snapshot of examples/grad_accum.py (4 micro-batches, its step unknown) said 1, a number
    nothing measured."""
    if tl.clock.known or tl.micro_batches != 1:
        return tl.micro_batches
    return None if tl.clock.cause == UNDECIDED or too_rarely_seen(tl) else 1


def _unlooped(tl: Timeline) -> tuple[dict[str, float] | None, str | None]:
    """Without a loop frame: the training thread's time by phase, and a library frame on its
    path that wraps (the loop a rules file could name)."""
    by_phase = dict.fromkeys(PHASES, 0)
    spans = []
    for seg in tl.segments:
        by_phase[seg.phase] += seg.dur_ns
        spans.append(seg.span)
    total = sum(by_phase.values())
    if not total:
        return None, None
    return {p: ns / total for p, ns in by_phase.items()}, loop_hint(spans)


def _sync(totals: StepTotals, shares: dict[str, float]) -> tuple[float | None, dict[str, float] | None]:
    """The share of the step blocked in synchronizing phases, and each phase's share less it:
    totals over the window, so a step that was counted wrong does not move them."""
    if totals.measured < max(2, totals.covered // 2):
        return None, None
    total = totals.measured_ns
    active = dict(shares)
    blocked_all = 0
    for phase in PHASES:
        blocked = totals.blocked_ns[phase]
        blocked_all += blocked
        active[phase] = max(0.0, shares[phase] - blocked / total)
    return blocked_all / total, active


# What a "device sync" is on a rank with no device: formatting or printing a tensor is logging,
# the rest (.item(), .cpu(), .tolist() on CPU tensors) is other work of the step
FORMATTING = ("Tensor.__format__", "Tensor.__repr__", "Tensor.__str__", "_tensor_str")


def _formatting_split(tl: Timeline, labels: Iterable[str]) -> dict[str, dict[str, int]]:
    """The time of each of ``labels``' segments, split by whether the stack formats a tensor
    ("logging") or not ("other"); each stack is looked at once."""
    split: dict[str, dict[str, int]] = {label: {"logging": 0, "other": 0} for label in labels}
    formats: dict[int, str] = {}
    for label, stack, dur_ns in labelled(tl.segments, split):
        to = formats.get(id(stack))
        if to is None:
            to = formats[id(stack)] = "logging" if any(f.name.startswith(FORMATTING) for f in stack) else "other"
        split[str(label)][to] += dur_ns
    return split


def without_device(stats: RankStepStats, tl: Timeline) -> RankStepStats:
    """``stats`` of a rank that holds no GPU: no wait is a device sync (there is no device to wait
    for); the rules' ``device_sync`` and ``other`` time is logging where a tensor is formatted
    (torch's tensor printing), and the rest of ``device_sync`` is other. (On a GPU, formatting a
    tensor waits for the device first: that stays the device sync the rules say.)"""
    moved = {label: stats.wait_labels.get(label) for label in ("device_sync", "other")}
    if not any(moved.values()):
        return stats
    split = _formatting_split(tl, moved)
    labels = {k: v for k, v in stats.wait_labels.items() if k not in moved}
    for label, share in moved.items():
        if not share:
            continue
        total = sum(split[label].values())
        for to, ns in (split[label].items() if total else (("other", 1),)):
            if ns:
                labels[to] = labels.get(to, 0.0) + share * ns / (total or 1)
    return replace(stats, wait_labels=dict(sorted(labels.items(), key=lambda kv: -kv[1])))
