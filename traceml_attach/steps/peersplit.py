"""Long steps that the ranks stepping with one saw boundaries inside: counted as the steps they hold
(``split_by_peers``).

Where a rank's e^-λ says a boundary cannot go unseen, an interval as long as two steps or more is
one slow step (``clock.expand``). But e^-λ is a mean: where some steps' visits outside the dominant
place are far shorter than the mean visit (a DataLoader's ready batches, under a sample outside
backward), their boundaries go unseen far more often than it says, and the steps that hide them
are taken for slow ones: 4 ranks of bursty 33-ms steps at 500 Hz (e^-λ 7e-5) counted 223-227 of
the job's 299. Ranks that step together see each step's boundaries, each at its own chance, so a
boundary one rank missed its peers mostly saw; a slow step holds every rank, and none of them sees
a boundary inside it. A rank's long step in which its peers saw boundaries (``PeerBounds.inside``:
peers that saw both its ends, pieces at least 1.5 margins long) is split at them, each piece
holding the phases of the rank's own samples in it: at most as many pieces as the step holds typical
steps, each cut the peers' boundary nearest where one of its equal parts ends (``_nearest``), so a
peer's micro-batch return taken for a boundary (a job that accumulates, said to take 1) cuts
nothing more. The typical step stays as the clock gave it: this counts the steps, and gives the
pieces' phases their own time. Quick grid: counts beyond 3% 174 -> 159, every step time as before
(docs/steps.md, stop 67).

The converse first (``_merged``): an interval that the rank's clock counted as several steps,
because its e^-λ says a boundary may go unseen, is one slow step again where the peers that cover
it saw no boundary inside it and would all have missed one with chance ALL_MISSED at most (the
product of their e^-λ, ``PeerBounds.silent``). Ranks that step together miss the same boundaries
more often than that product says (docs/steps.md, stop 64), so the bar is low: 8 ranks whose input
ran 1.3-2.2x as long in 4 steps of 10, at 400 Hz (e^-λ 8% each), counted +11..+15% and now
+1.6..+4.3%; quick grid counts beyond 3% 157 -> 140, none broken (stop 68)."""

from __future__ import annotations

import bisect
import itertools
import math
import operator
import statistics
from collections.abc import Sequence
from dataclasses import replace

from traceml_attach.policy import DEFAULT_RATE_POLICY, HIDDEN_TARGET, MAX_STEP_ERROR, MAX_UNSEEN
from traceml_attach.steps.batch_timeline import Timeline
from traceml_attach.steps.clock import MISSED, UNEVEN, Step, StepClock
from traceml_attach.steps.mean import (
    PeerBounds,
    filled_in,
    missed_too_often,
    peer_bounds,
    peers_of,
    piece,
    seen_inside,
    unseen_by_all,
)

# a step at least this many typical steps long is asked about: shorter ones are one step's jitter, or
# a slow step whose peers' micro-batch returns (a job that accumulates, said to take 1) lie near its middle
LONG_STEP = 1.75
# a peer's boundary this near (in typical steps) where one of a long step's equal parts ends is a cut
NEAR = 0.2
START = operator.attrgetter("start_ns")
# an interval counted as several steps is one slow step where the peers that cover it saw no boundary in it,
# and would all have missed one with at most this chance (the product of their e^-λ)
ALL_MISSED = 0.01


def split_by_peers(timelines: dict[str, Timeline], synchronized: bool) -> dict[str, Timeline]:
    """``timelines`` with each rank's intervals counted as several steps in which its peers saw no
    boundary one slow step again, and its long steps split at the boundaries its peers saw inside
    them, where the ranks step together, one micro-batch a step (see the module's doc)."""
    if not synchronized or len(timelines) < 2 or any(tl.micro_batches != 1 for tl in timelines.values()):
        return timelines
    order = list(timelines)
    out = dict(timelines)
    for rank, tl in timelines.items():
        typical = tl.clock.typical_ns
        if typical is None or tl.clock.mean or tl.step_floor is not None:
            continue
        expanded = len(tl.steps) > len(tl.intervals)   # (some interval counted as several steps)
        # (a bound read first: the steps' own lengths, no longer than what they count; a live tick
        # asks this of every rank, 64 ranks' 300 steps in 1 ms where ``_long`` took 4-6)
        long = max((s.end_ns - s.start_ns for s in tl.steps), default=0) >= LONG_STEP * typical
        if not expanded and not long:
            continue
        peers = peer_bounds(tl, peers_of(order, rank, timelines))
        if not peers.bounds:
            continue
        merged = _merged(tl, peers) if expanded else None
        counted = tl if merged is None else replace(tl, steps=tuple(merged))
        if long:
            split = _split(counted, typical, peers)
            if len(split) != len(counted.steps):
                counted = replace(counted, steps=tuple(split))
        if counted is not tl:
            out[rank] = counted
    return _vouched(out, order)


def _vouched(timelines: dict[str, Timeline], order: list[str]) -> dict[str, Timeline]:
    """``timelines`` where the step they share is the median of a rank's intervals that its e^-λ says hold
    every boundary (a "wraps" clock, the ranks stepping with it "joint"), and its peers saw so many
    boundaries inside them that those all of them missed may be many too (``mean.missed_too_often``,
    as for a mean): that rank's intervals split at its peers' boundaries (``mean.filled_in``) and
    the median of those the step, where the boundaries all of them missed could move it by at most
    MAX_STEP_ERROR / 2 more (``_moved_beyond``); no step time otherwise. e^-λ is a mean: where some
    steps' visits outside the dominant place are far shorter than the mean visit (a DataLoader's
    ready batches), their boundaries go unseen far more often than it says, and the steps missed are
    those short ones, which moves the median: 8 ranks of bursty 50-ms steps at 100 Hz over 30 s, the
    reference counting 137 of the job's 163 (its peers saw 36 boundaries inside its 117 intervals,
    e^-λ 5e-4), gave 218 ms on every rank for a median of 206 (+6.1%); filled, 208 ms, but the 36
    moved the median 8% and the 17.5 no rank saw (Chao) could move it 3.9% more: unknown, and the
    attacher is advised the rate at which its misses would be few (``_missed_faster``: 400 Hz, where
    it is +0.4%). 4 ranks of bursty 80-ms steps at 300 Hz (10 of 59): 210.2 ms unfilled, 205.0
    filled for the job's 204.9."""
    out = dict(timelines)
    for rank, tl in timelines.items():
        clock = tl.clock
        if not clock.known or clock.mean or clock.unseen is None or tl.step_floor is not None:
            continue
        if clock.method == "comb":
            why = _comb_refuted(rank, tl, order, timelines)
            if why is not None:
                # a faster rate narrows the lag where the steps get few samples (as for a known step:
                # diagnose/rate.py), from the comb's step, the shorter of the two
                comb = clock.typical_ns or 0.0
                faster = (DEFAULT_RATE_POLICY.raised(comb, tl.rate_hz)
                          if comb * tl.rate_hz / 1e9 < DEFAULT_RATE_POLICY.raise_below_samples else None)
                for other, otl in _stepping_with(rank, tl, timelines):
                    # (each interval holds a step at least, as for other uneven steps)
                    out[other] = replace(otl, clock=StepClock("unknown", None, None, otl.clock.concentration, why,
                                                              faster, unseen=otl.clock.unseen, cause=UNEVEN),
                                         step_floor=len(otl.intervals))
            continue
        if clock.method != "wraps" or clock.unseen > MAX_UNSEEN:
            continue
        peers = peer_bounds(tl, peers_of(order, rank, timelines))
        if not peers.bounds:
            continue
        # (counted first: a live tick asks this of every such rank, and the pieces are made only
        # where they are asked for)
        added = seen_inside(tl, peers)
        why = missed_too_often(tl, peers, added) if added else None
        if why is None:
            continue
        filled = filled_in(tl, peers)
        before, typical = _median(tl.intervals), _median(filled.intervals)
        moved = before is None or typical is None or _moved_beyond(before, typical, unseen_by_all(tl, peers), added)
        faster = _missed_faster(tl, added) if moved else None
        for other, otl in _stepping_with(rank, tl, timelines):
            if moved:
                reason = f"rank {rank} saw every return of its loop by its e^-λ, and the ranks step together, but {why}"
                out[other] = replace(otl, clock=StepClock("unknown", None, None, otl.clock.concentration, reason,
                                                          faster, unseen=otl.clock.unseen, cause=MISSED))
            else:
                out[other] = replace(filled if other == rank else otl, clock=replace(otl.clock, typical_ns=typical))
    return out


def _stepping_with(rank: str, tl: Timeline, timelines: dict[str, Timeline]) -> list[tuple[str, Timeline]]:
    """``rank`` and the ranks whose clock is its own, shared ("joint", the same typical step)."""
    typical = tl.clock.typical_ns
    return [(other, otl) for other, otl in timelines.items()
            if other == rank or (otl.clock.method == "joint" and otl.clock.typical_ns == typical)]


def _missed_faster(tl: Timeline, added: int) -> int | None:
    """The rate at which ``tl``'s boundaries would go unseen at most HIDDEN_TARGET of the time, judged
    on the share its peers saw that it missed (``added`` of its intervals' boundaries), not its
    e^-λ, which said it missed none: λ grows with the rate, as for slow steps that hide boundaries
    (diagnose/rate.py). 8 ranks of bursty ~200-ms steps at 100 Hz over 30 s, the reference missing 36
    of 153: unknown at 100 and 200 Hz, +0.4% at 400, 162-163 of 163 steps. None where the policy's
    highest rate is no faster."""
    steps = sum(1 for iv in tl.intervals if not iv.swallowing)
    missed = added / (steps + added) if steps + added else 0.0
    if not 0.0 < missed < 1.0:
        return None
    rate = DEFAULT_RATE_POLICY.seeing(missed, tl.rate_hz, HIDDEN_TARGET)
    return rate if rate > tl.rate_hz else None


def _comb_refuted(rank: str, tl: Timeline, order: list[str], timelines: dict[str, Timeline]) -> str | None:
    """Why the step that ``tl``'s comb gives (its intervals counted on a fitted period) is no step,
    or None where nothing says so: its intervals split at the boundaries its peers saw inside them
    (``mean.filled_in``) have a median more than MAX_STEP_ERROR from it, where the boundaries no rank
    saw cannot move that median by MAX_STEP_ERROR / 2 more (``_moved_beyond``). A comb counts each
    interval as a whole number of periods, which holds for steps about as long as each other; where
    some are slowed 1.3-2x, those counted as two are slow steps as often as missed boundaries, and
    the period is the median of the fast ones: 8 ranks whose input ran 1.3-2.2x as long in 4 steps of
    10, at 400 Hz over 30 s (e^-λ 6% each, boundaries truly missed 15%: a rank whose input is the
    slowest of a step hardly waits, and its boundary goes unseen), gave 23.5 ms on every rank for the
    job's 25.7 (-8.8%); the boundaries the 8 saw together, 27.2 ms (+5.5%: the samples' lag at each
    end of skewed steps moves their median towards their mean). Neither is the step: unknown."""
    peers = peer_bounds(tl, peers_of(order, rank, timelines))
    typical = tl.clock.typical_ns
    if not peers.bounds or typical is None:
        return None
    added = seen_inside(tl, peers)
    if not added:
        return None
    before, after = _median(tl.intervals), _median(filled_in(tl, peers).intervals)
    if before is None or after is None or abs(after / typical - 1) <= MAX_STEP_ERROR:
        return None
    if _moved_beyond(before, after, unseen_by_all(tl, peers), added):
        return None   # (the ranks together missed too many boundaries for theirs to say anything)
    return (f"its intervals counted on a period give a step of {typical / 1e6:.1f} ms, but split at the "
            f"{added} {'boundary' if added == 1 else 'boundaries'} the ranks it steps with saw inside them, their "
            f"median is {after / 1e6:.1f} ms: the steps are too uneven for a period to count them (slow steps "
            "taken for several), and the samples' lag at each end blurs their median")


def _median(intervals: Sequence[Step]) -> float | None:
    whole = [iv.dur_ns for iv in intervals if iv.covered and not iv.swallowing]
    return float(statistics.median(whole)) if whole else None


def _moved_beyond(before: float, after: float, unseen: float, added: int) -> bool:
    """Whether the boundaries no rank saw (``unseen``, Chao's estimate) could move the median
    beyond MAX_STEP_ERROR / 2 more, moving it as the ``added`` that the peers saw moved it from
    ``before`` to ``after``, each as much; so where no stretch that all of them sampled tells how
    many (``unseen`` infinite)."""
    return not math.isfinite(unseen) or abs(after / before - 1) * unseen / added > MAX_STEP_ERROR / 2


def _merged(tl: Timeline, peers: PeerBounds) -> list[Step] | None:
    """``tl``'s steps with each interval that its clock counted as several (equal parts of it, each
    covered) one slow step again where the peers that cover it saw no boundary inside it
    and would all have missed one with chance ALL_MISSED at most (``PeerBounds.silent``); None where
    none is."""
    steps = list(tl.steps)
    kept = set(map(id, steps))   # an interval counted as one step is that step (``clock.expand``)
    spans: list[tuple[int, int, Step]] = []
    for iv in tl.intervals:
        if id(iv) in kept or iv.swallowing:
            continue
        chance = peers.silent(iv)
        if chance is None or chance > ALL_MISSED:
            continue
        lo = bisect.bisect_left(steps, iv.start_ns, key=START)
        hi = bisect.bisect_left(steps, iv.end_ns, lo, key=START)
        if hi - lo > 1 and all(s.covered for s in steps[lo:hi]):
            spans.append((lo, hi, iv))
    if not spans:
        return None
    out: list[Step] = []
    at = 0
    for lo, hi, iv in spans:
        out.extend(steps[at:lo])
        out.append(iv)
        at = hi
    out.extend(steps[at:])
    return out


def _long(step: Step, typical: float) -> bool:
    return step.covered and not step.swallowing and step.counted_ns >= LONG_STEP * typical


def _split(tl: Timeline, typical: float, peers: PeerBounds) -> list[Step]:
    out: list[Step] = []
    least = 1.5 * peers.margin   # a piece as long as a short step, at most its lag shorter
    for step in tl.steps:
        cuts = peers.inside(step.start_ns, step.end_ns, ends=False) if _long(step, typical) else []
        inner = _nearest([c for c in cuts if c - step.start_ns >= least and step.end_ns - c >= least], step, typical)
        if not inner:
            out.append(step)
            continue
        edges = [step.start_ns, *inner, step.end_ns]
        out.extend(piece(tl.segments, step, a, b) for a, b in itertools.pairwise(edges))
    return out


def _nearest(cuts: list[float], step: Step, typical: float) -> list[int]:
    """Of the peers' boundaries inside ``step``, the one nearest each place where a step of as many
    equal steps as it holds typical ones ends (``NEAR`` of a typical step at most): at most that
    many pieces, whatever else the peers saw there (micro-batch returns taken for steps)."""
    if not cuts:
        return []
    n = round(step.counted_ns / typical)
    span = step.end_ns - step.start_ns
    chosen: list[int] = []
    for j in range(1, n):
        at = step.start_ns + j * span / n
        best = min(cuts, key=lambda c: abs(c - at))
        if abs(best - at) <= NEAR * typical and (not chosen or best > chosen[-1]):
            chosen.append(int(best))
    return chosen
