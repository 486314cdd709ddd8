"""The mean step, where every boundary was seen and the steps vary too much for a median.

A rank that saw every boundary of its steps (``clock_of``'s first branch: e^-λ at most MAX_UNSEEN)
has its intervals for its steps. Where those vary too much for their median to hold within
MAX_STEP_ERROR (``steady_median``: steps of two lengths by turns, as a DataLoader whose workers
deliver in bursts makes; steps slowed at random by other work on the cores), or where the samples' lag
at each end moves it (``batch_timeline.judged_blurred``: one slow step in three), no typical step can be
given: a few steps more or fewer move the median from one length to the other. Their mean can: the
intervals' time over their number, which a boundary more or less moves by one step in all of them.
That is the job's throughput, and it is given as the mean, said so (``StepClock.mean``), never as a
typical step.

A missed boundary moves a median little and a mean by a whole step in all of them, so the mean is
given only where that is unlikely to matter: the chance that sampling hid enough boundaries to move
it beyond MAX_STEP_ERROR, at e^-λ a boundary, is under MEAN_RISK (``clock.mean_at_risk``); it holds even
if every interval as long as two median ones or more hid the boundaries it could, but those its
thread's CPU time says are one slow step (``clock.could_hide_worked``), or the ranks it steps with
(``PeerBounds.one_step``: none of them saw a boundary inside it). Of ranks that step together, those
that saw every boundary (the others' boundaries count as their peers', their own intervals as
nothing); each one's intervals are split at the boundaries its peers saw inside them
(``_filled``: a boundary one rank missed, another sees), unless its peers saw so many that it
missed (MISSED_AT_MOST) that those they all missed may be many too, which most ranks doing leaves no
mean at all; and their means, over the steps they all hold, agree within MEAN_AGREE (a rank whose
e^-λ is wrong counts fewer, longer steps than its peers; where most agree on the shortest, the
others are such ranks, and have no mean); those that agree are all given the mean of the one whose
intervals hold the most steps (``_one_mean``). Never where the intervals may be micro-batches: the
optimizer seen in some of them only, the long ones (``accumulation.stepping_some``), or its visits,
weighed on the mean as on any known step, counting micro-batches or unable to rule them out
(``_not_one_micro_batch``).
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

from traceml_attach.policy import (
    MAX_STEP_ERROR,
    MAX_UNSEEN,
    MEAN_AGREE,
    MIN_INTERVALS,
    MISSED_AT_MOST,
    PEERS_ASKED,
    UNSEEN_BY_ALL,
)
from traceml_attach.steps.accumulation import accumulated, plan_of, stepping_some
from traceml_attach.steps.batch_timeline import ASIDE_LABELS, Segment, Timeline
from traceml_attach.steps.clock import (
    IRREGULAR,
    Step,
    StepClock,
    could_hide_worked,
    edge_steps,
    mean_refused,
    median_offset,
)


def with_mean(timelines: dict[str, Timeline], synchronized: bool) -> dict[str, Timeline]:
    """``timelines`` with the mean step (``mean_clock``) given to the ranks that saw every boundary
    of steps too uneven for a median (where the ranks step together, its intervals split at the
    boundaries its peers saw: ``_filled``); the rest as they were, or with why their mean is not
    given either."""
    varied = {rank: tl for rank, tl in timelines.items() if _varied_whole(tl)}
    if not varied:
        return timelines
    if not synchronized:   # each rank's steps its own
        out = dict(timelines)
        for rank, tl in varied.items():
            out.update(_with_means({rank: tl}, {rank: tl}, {}))
        return out
    peers = {rank: peer_bounds(tl, peers_of(list(timelines), rank, timelines)) for rank, tl in varied.items()}
    filled: dict[str, Timeline] = {}
    refuted: dict[str, str] = {}
    for rank, tl in varied.items():
        rank_filled = _filled(tl, peers[rank])
        if isinstance(rank_filled, str):
            refuted[rank] = rank_filled
        else:
            filled[rank] = rank_filled
    if 2 * len(refuted) >= len(varied):   # most ranks' e^-λ wrong: the rest's may be too, no mean stands
        rank, why = next(iter(refuted.items()))
        return {r: _told(t, f"nor their mean: on rank {rank}, {why}") if r in varied else t
                for r, t in timelines.items()}
    out = _with_means(timelines, filled, {rank: peers[rank].one_step for rank in filled})
    # a rank whose e^-λ is wrong has no mean of its own, where most ranks' stand (as ``_with_means``'s strays)
    return {r: _told(t, f"nor its mean: {refuted[r]}") if r in refuted else t for r, t in out.items()}


def _told(tl: Timeline, why: str) -> Timeline:
    """``tl`` with ``why`` after its clock's reason, where it has one (its step unknown)."""
    return replace(tl, clock=replace(tl.clock, reason=f"{tl.clock.reason}; {why}")) if tl.clock.reason else tl


def _with_means(timelines: dict[str, Timeline], varied: dict[str, Timeline],
                one_step: dict[str, Callable[[Step], bool]]) -> dict[str, Timeline]:
    """``with_mean`` of the ``varied`` ranks of ``timelines``: each given its mean, or none (why).
    ``one_step``: what the ranks each steps with say of its long intervals (``PeerBounds.one_step``);
    empty where the ranks step apart."""
    synchronized = bool(one_step)
    means = {rank: mean_clock(tl, one_step.get(rank)) for rank, tl in varied.items()}
    given = {rank: clock for rank, clock in means.items() if isinstance(clock, StepClock)}
    why = next((f"nor their mean: {clock}" for clock in means.values() if isinstance(clock, str)), None)
    strays: dict[str, str] = {}
    edges = {rank: edge for rank, clock in given.items() if (edge := _edge_moves(varied[rank], clock)) is not None}
    if why is None and edges and (not synchronized or len(edges) == len(given)):
        why = f"nor their mean: {next(iter(edges.values()))}"
    if why is None and synchronized:
        common = _common_means({rank: varied[rank] for rank in given})
        short, long = min(common, key=common.__getitem__), max(common, key=common.__getitem__)
        lo, hi = common[short], common[long]
        agree = [rank for rank, mean in common.items() if mean <= (1 + MEAN_AGREE) * lo]
        if hi > (1 + MEAN_AGREE) * lo and 2 * len(agree) <= len(common):
            why = (f"nor their mean: the ranks step together, yet their means disagree ({lo / 1e6:.1f} ms on rank "
                   f"{short}, {hi / 1e6:.1f} on rank {long}), so a rank left some boundaries unseen")
        # a boundary unseen only lengthens a mean: where most ranks agree on the shortest, the
        # others left boundaries unseen, and no mean of theirs is given (8 ranks slowed at random
        # by a loader in Python, 144 steps: six within 1% of 68.8 ms, two at 69.8 and 70.3)
        strays = {rank: (f"nor its mean: {common[rank] / 1e6:.1f} ms, longer than the {lo / 1e6:.1f} ms that "
                         f"{len(agree)} of the {len(common)} ranks agree on, so this rank left some boundaries unseen")
                  for rank in common if rank not in agree}
        # a rank whose edge may hide a step its peers saw: theirs stand, its own does not
        strays.update({rank: f"nor its mean: {edge}" for rank, edge in edges.items() if rank not in strays})
    if why is not None:
        return {rank: _told(tl, why) if rank in varied else tl for rank, tl in timelines.items()}
    if synchronized:
        given = {**given, **_one_mean(varied, {rank: clock for rank, clock in given.items() if rank not in strays})}
    out = dict(timelines)
    for rank in given:
        if rank in strays:
            tl = timelines[rank]
            reason = "; ".join(filter(None, (tl.clock.reason, strays[rank])))
            out[rank] = replace(tl, clock=replace(tl.clock, reason=reason))
        else:
            out[rank] = replace(varied[rank], clock=given[rank], step_floor=None, micro_batches=1)
    micro, weighed = _not_one_micro_batch(out, [r for r in given if r not in strays], synchronized)
    if micro is None:
        return out
    refused = {rank: _told(tl, f"nor their mean: {micro}") if rank in given else tl for rank, tl in timelines.items()}
    # a rank whose intervals the optimizer's visits counted as micro-batches, its optimizer steps
    # unknown, says so in its counts: micro-batches per step, and the optimizer steps seen (its
    # intervals, counted as steps, said "1 micro-batch a step" beside a reason that said otherwise)
    for rank in given:
        counted = weighed[rank]
        if counted.micro_batches != 1 and not counted.clock.known:
            refused[rank] = replace(counted, clock=replace(
                counted.clock, reason=refused[rank].clock.reason or counted.clock.reason))
    return refused


def _not_one_micro_batch(timelines: dict[str, Timeline], given: Iterable[str], synchronized: bool
                         ) -> tuple[str | None, dict[str, Timeline]]:
    """Why the steps given a mean are not each one optimizer step (None: they are), and the
    timelines as the optimizer's visits weighed them: the visits, weighed on the mean as on any
    known step (``accumulation.plan_of``, ``accumulated``), must leave each rank of ``given``
    known, of one micro-batch a step."""
    plans = {rank: plan_of(tl) for rank, tl in timelines.items()}
    out = accumulated(timelines, plans, synchronized)
    for rank in given:
        tl = out[rank]
        if not tl.clock.known:
            return tl.clock.reason or "weighed with the optimizer's visits, it is no optimizer step's", out
        if tl.micro_batches != 1:
            k = f"{tl.micro_batches} " if tl.micro_batches else ""
            return f"the optimizer's visits make the steps seen {k}micro-batches of an optimizer step", out
    return None, out


def _one_mean(timelines: dict[str, Timeline], given: dict[str, StepClock]) -> dict[str, StepClock]:
    """Ranks that step together, given their means: each given that of the rank whose intervals
    hold the most steps (the fewest missing at the window's edges). Over their own spans they hold a
    few different steps at either end, and steps that vary enough for a mean vary enough for those
    few to move it: 2 ranks of an input straggler slowed by a loaded machine (steps of 380 to 900
    ms), 15 steps in the live window, were given 630 and 580 ms, the window's mean 579 (CI, stop 62)."""
    if len(given) < 2:
        return given
    ref = max(sorted(given), key=lambda rank: sum(1 for iv in timelines[rank].intervals if not iv.swallowing))
    mean = given[ref].typical_ns
    return {rank: replace(clock, period_ns=mean, typical_ns=mean) for rank, clock in given.items()}


def _common_means(timelines: dict[str, Timeline]) -> dict[str, float]:
    """Each rank's mean over its intervals (those seen whole) whose middles lie in the span every
    rank's intervals cover (half a step from either end, so the blur of a boundary there does not
    move one in or out): ranks that step together then measure the same steps. Over their own spans
    they measure a few different ones at either end, which moves a mean by a share of the spread
    of the steps: 4 ranks whose 6 workers deliver in bursts (steps of 15 ms to 1.2 s), two of them
    without a 1.2-s step at an edge, 38 steps of 248.2 ms beside 39 of 252.3, and 248.2-248.6 over
    the span they share. Where the span holds none of a rank's, its mean over its own."""
    lo = max(tl.intervals[0].start_ns for tl in timelines.values())
    hi = min(tl.intervals[-1].end_ns for tl in timelines.values())
    out = {}
    for rank, tl in timelines.items():
        whole = [iv for iv in tl.intervals if not iv.swallowing]
        inside = [iv.dur_ns for iv in whole if lo <= (iv.start_ns + iv.end_ns) // 2 <= hi]
        out[rank] = statistics.fmean(inside or [iv.dur_ns for iv in whole])
    return out


def _varied_whole(tl: Timeline) -> bool:
    """Whether ``tl``'s clock is unknown only because its steps, every boundary seen, vary too
    much for a median (``clock_of``, ``sync.varied_clock``), and nothing says its intervals are
    micro-batches (a rank whose irregular returns another rank of its job shows as micro-batches
    says its micro-batches unknown, ``accumulation._short_returns``: its mean is weighed with its
    optimizer's visits, ``_not_one_micro_batch``, as any)."""
    clock = tl.clock
    if clock.known or clock.cause not in (None, IRREGULAR):
        return False
    if tl.micro_batches != 1 and not (tl.micro_batches is None and clock.cause == IRREGULAR):
        return False
    if clock.unseen is None or clock.unseen > MAX_UNSEEN or len(tl.intervals) < MIN_INTERVALS:
        return False
    return not stepping_some(tl)


def mean_clock(tl: Timeline, one_step: Callable[[Step], bool] | None = None) -> StepClock | str:
    """The mean of ``tl``'s intervals, each one step (every boundary seen; those that swallowed a
    sampler drop-out left out: their steps are not known), where it holds; else why it does not.
    ``one_step``: what the ranks it steps with say of its long intervals (``_peers_say_one``)."""
    whole = [iv for iv in tl.intervals if not iv.swallowing]
    n = len(whole)
    why = mean_refused(n, could_hide_worked(whole, one_step) if n >= MIN_INTERVALS else 0, tl.clock.unseen or 0.0)
    if why is not None:
        return why
    mean = sum(s.dur_ns for s in whole) / n
    edges = edge_steps(tl.bounds, tl.start_seen_ns, tl.end_ns, mean, tl.rate_hz, tl.clock.unseen)
    return StepClock("wraps", mean, 1.0, None, unseen=tl.clock.unseen, typical_ns=mean, edge_steps=edges, mean=True)


def peers_of(order: list[str], rank: str, timelines: dict[str, Timeline]) -> list[Timeline]:
    """The PEERS_ASKED ranks with boundaries after ``rank`` in ``order`` (round the end), whose
    boundaries fill its intervals (``_filled``) and are asked about its long ones (``PeerBounds``)."""
    i = order.index(rank)
    after = [r for r in order[i + 1:] + order[:i] if timelines[r].bounds]
    return [timelines[r] for r in after[:PEERS_ASKED]]


@dataclass(frozen=True, slots=True)
class PeerBounds:
    """A rank's peers' boundaries (``peers_of``), each peer's with its median offset from the rank's
    own (its boundary ``b`` is at ``b - shift`` in the rank's time; a query moves into the peer's
    time instead, so a live tick shifts no list of them), and how far from one of the rank's a
    boundary of theirs is the same (``margin``: half the rank's short steps, their 10th percentile;
    the ranks' boundaries of one step lie a few ms apart beyond their median offset, 4 ms either
    way at 400 Hz, a missed one a step away)."""
    margin: float
    bounds: tuple[Sequence[float], ...]   # each peer's, in its own time, in order
    shifts: tuple[float, ...] = ()        # each peer's median offset, as ``bounds``
    unseen: tuple[float | None, ...] = ()   # each peer's e^-λ, as ``bounds``

    def inside(self, start_ns: float, end_ns: float, ends: bool = True) -> list[float]:
        """The boundaries a peer saw in (start_ns, end_ns), more than ``margin`` from either end,
        where it saw both ends too (each within ``margin``): one it saw late or early is the same
        step's boundary as this rank's at that end, not a step this rank missed (4 ranks of a bursty
        loader at 400 Hz, every boundary seen: this rank saw one 10 ms after its peers, who saw it
        15-23 ms into a 33-ms interval). One for each step: a boundary two peers saw, within
        ``margin`` of each other, is one. ``ends`` False: any peer's, whatever it saw at the ends
        (``peersplit``: inside a step as long as two or more, a boundary seen late is no risk)."""
        m = self.margin
        seen: list[float] = []
        for bounds, shift in zip(self.bounds, self.shifts, strict=True):
            near = [b - shift for b in bounds[bisect.bisect_left(bounds, start_ns - m + shift):
                                              bisect.bisect_right(bounds, end_ns + m + shift)]]
            if not ends:
                seen.extend(b for b in near if start_ns + m < b < end_ns - m)
            elif len(near) > 2 and near[0] <= start_ns + m and near[-1] >= end_ns - m:
                seen.extend(b for b in near[1:-1] if start_ns + m < b < end_ns - m)
        out: list[float] = []
        for b in sorted(seen):
            if not out or b - out[-1] > m:
                out.append(b)
        return out

    def silent(self, iv: Step) -> float | None:
        """Where the peers that saw boundaries on both sides of ``iv`` (beyond ``margin`` inside it)
        saw none inside it, the chance that they all missed one there: the product of their e^-λ (1
        for a peer whose e^-λ is unknown); None where one saw a boundary inside, or none covers it."""
        chance, covering = 1.0, False
        for bounds, shift, unseen in zip(self.bounds, self.shifts, self.unseen, strict=True):
            lo, hi = iv.start_ns + self.margin + shift, iv.end_ns - self.margin + shift
            if bounds and bounds[0] <= lo and bounds[-1] >= hi:
                if bisect.bisect_right(bounds, lo) != bisect.bisect_left(bounds, hi):
                    return None
                covering = True
                chance *= 1.0 if unseen is None else unseen
        return chance if covering else None

    def one_step(self, iv: Step) -> bool:
        """Whether an interval is one slow step by the ranks that step with it: at least one of them
        covers it, and none saw a boundary inside it. A slow step holds every rank; a boundary this
        rank missed, its peers mostly see (not independently: ranks that step together miss the same
        boundaries more often than the product of their e^-λ says, docs/steps.md, stop 64). Bursty
        loaders on 4 ranks (steps of 30 ms and more, every boundary seen) were refused a mean because
        their long intervals "could hide" steps that no rank saw."""
        return self.silent(iv) is not None


def peer_bounds(tl: Timeline, peers: list[Timeline]) -> PeerBounds:
    """``tl``'s ``peers``' boundaries in its time (``PeerBounds``)."""
    whole = sorted(iv.dur_ns for iv in tl.intervals if not iv.swallowing)
    own = list(tl.bounds)   # (in time order, as the samples; a list: bisected in C, not through a live view)
    if not whole or not own:
        return PeerBounds(0.0, ())
    bounds = tuple(list(peer.bounds) for peer in peers)   # (in order, as the samples)
    # (their offset is steady: 64 of them tell its median)
    shifts = tuple(median_offset(b[::max(1, len(b) // 64)], own) for b in bounds)
    return PeerBounds(whole[len(whole) // 10] / 2, bounds, shifts, tuple(peer.clock.unseen for peer in peers))


def _filled(tl: Timeline, peers: PeerBounds) -> Timeline | str:
    """``tl`` with each of its intervals in which its ``peers`` saw boundaries that it did not
    split at them (``PeerBounds.inside``), into pieces at least 1.5 margins long (a boundary seen late
    leaves a short piece); or why its steps are not its intervals. A rank that saw every boundary by
    its e^-λ still misses one now and then where that e^-λ is wrong (a boundary's visit shorter in
    some steps than on average), and the ranks that step with it see it: 8 ranks slowed at random by
    a loader in Python (144 steps at 300 Hz), two of which missed 2 and 3 boundaries and ran 1.5% and
    2.2% long; counted on the boundaries any of them saw, every rank's mean is within 0.06% of the
    job's. A piece holds the phases of the rank's own samples in it (``piece``).

    A few missed boundaries are mended, not a sampling that misses many: where its peers saw more
    than MISSED_AT_MOST of its steps' boundaries that it did not, those that all of them missed may
    be many too (8 ranks of bursty 50-ms steps at 100 Hz each missed 4-24% of their 53 boundaries;
    filled from 3 peers each, their means agreed on 203 ms for the job's 184), and this says so,
    unless how many of them saw each boundary says those all of them missed are few: at most
    UNSEEN_BY_ALL of its steps (``unseen_by_all``)."""
    if not peers.bounds:
        return tl
    filled = filled_in(tl, peers)
    if filled is tl:
        return tl
    why = missed_too_often(tl, peers, len(filled.intervals) - len(tl.intervals))
    return filled if why is None else why


def filled_in(tl: Timeline, peers: PeerBounds, ends: bool = True) -> Timeline:
    """``tl`` with its intervals split at the boundaries its ``peers`` saw inside them (``_filled``,
    which says where that is not enough; ``ends`` as ``PeerBounds.inside`` has it); ``tl`` itself
    where none is."""
    pieces: list[Step] = []
    split = False
    for iv, edges in _edges_inside(tl, peers, ends):
        if len(edges) == 2:
            pieces.append(iv)
            continue
        split = True
        pieces.extend(piece(tl.segments, iv, a, b) for a, b in itertools.pairwise(edges))
    if not split:
        return tl
    return replace(tl, intervals=tuple(pieces), steps=tuple(pieces),
                   bounds=tuple(sorted({*tl.bounds, *(p.start_ns for p in pieces)})))


def missed_too_often(tl: Timeline, peers: PeerBounds, added: int) -> str | None:
    """Why ``tl``'s intervals, in which its ``peers`` saw ``added`` boundaries it did not, are
    not its steps even so filled: more than MISSED_AT_MOST of its steps' boundaries so, and more than
    UNSEEN_BY_ALL of them that all of them may have missed (``unseen_by_all``); None where not."""
    steps = sum(1 for iv in tl.intervals if not iv.swallowing)
    if added <= MISSED_AT_MOST * steps or unseen_by_all(tl, peers) <= UNSEEN_BY_ALL * steps:
        return None
    return (f"the ranks it steps with saw {added} {'boundary' if added == 1 else 'boundaries'} inside its {steps} "
            f"intervals, where its e^-λ ({tl.clock.unseen or 0.0:.2g}) expects "
            f"{steps * (tl.clock.unseen or 0.0):.2g}: sampling misses boundaries here too often for those they "
            "all missed to be few")


def seen_inside(tl: Timeline, peers: PeerBounds) -> int:
    """How many boundaries ``tl``'s ``peers`` saw inside its intervals that ``filled_in`` would
    split them at, counted without making the pieces."""
    return sum(len(edges) - 2 for _, edges in _edges_inside(tl, peers))


def _edges_inside(tl: Timeline, peers: PeerBounds, ends: bool = True) -> Iterator[tuple[Step, list[int]]]:
    """Each of ``tl``'s intervals with the edges of the pieces ``_filled`` splits it into: its own
    ends, and between them the boundaries its ``peers`` saw inside it (``PeerBounds.inside``, with
    ``ends``) that leave pieces at least 1.5 margins long (a boundary seen late leaves a short piece)."""
    shortest = 3 * peers.margin   # (two pieces of 1.5 margins: below)
    for iv in tl.intervals:
        cuts = peers.inside(iv.start_ns, iv.end_ns, ends) if iv.dur_ns >= shortest and not iv.swallowing else []
        edges = [iv.start_ns]
        for cut in cuts:   # pieces as long as a short step, at most its lag shorter
            if cut - edges[-1] >= 1.5 * peers.margin and iv.end_ns - cut >= 1.5 * peers.margin:
                edges.append(int(cut))
        edges.append(iv.end_ns)
        yield iv, edges


def unseen_by_all(tl: Timeline, peers: PeerBounds) -> float:
    """How many boundaries neither ``tl``'s rank nor any of its ``peers`` saw, over the stretch
    they all sampled, estimated from how many of them saw each one that some saw: Chao's estimate
    for captures whose chance varies from one boundary to the next (a ready batch's boundary is
    hard for every rank to see), f1^2 / 2 f2 with f1 and f2 the boundaries seen by exactly one of
    them and by exactly two; a lower bound, as any such estimate is where some boundaries no one
    can see. Ranks one of which saw a boundary within ``margin`` of another's saw the same one."""
    m = peers.margin
    own: list[float] = list(tl.bounds)
    if not own:
        return float("inf")
    lists = [own, *([b - shift for b in bounds] for bounds, shift in zip(peers.bounds, peers.shifts, strict=True))]
    lo = max(b[0] for b in lists if b) + m
    hi = min(b[-1] for b in lists if b) - m
    events = sorted((t, i) for i, b in enumerate(lists) for t in b if lo <= t <= hi)
    if not events:   # (no stretch that all of them sampled)
        return float("inf")
    counts: Counter[int] = Counter()
    start: float | None = None
    seen: set[int] = set()
    for t, i in events:
        if start is None or t - start > m:
            if seen:
                counts[len(seen)] += 1
            start, seen = t, set()
        seen.add(i)
    if seen:
        counts[len(seen)] += 1
    f1, f2 = counts[1], counts[2]
    return f1 * f1 / (2 * f2) if f2 else f1 * (f1 - 1) / 2


def piece(segments: Sequence[Segment], iv: Step, start_ns: int, end_ns: int) -> Step:
    """The part of interval ``iv`` from ``start_ns`` to ``end_ns``, as one step: each phase's time in
    it from the thread's ``segments`` (in order of their starts); its thread's time on a CPU and its
    time blocked unknown."""
    phases = dict.fromkeys(iv.phases_ns, 0)
    aside = 0
    lo_i = max(bisect.bisect_right(segments, start_ns, key=_seg_start) - 1, 0)
    for i in range(lo_i, bisect.bisect_left(segments, end_ns, key=_seg_start)):
        seg = segments[i]
        lo, hi = max(seg.ts_ns, start_ns), min(seg.ts_ns + seg.dur_ns, end_ns)
        if hi > lo:
            phases[seg.phase] = phases.get(seg.phase, 0) + hi - lo
            if seg.phase == "wait" and seg.label in ASIDE_LABELS:
                aside += hi - lo
    return Step(start_ns, end_ns, phases, None, covered=iv.covered, held=iv.held, aside_ns=aside)


def _seg_start(seg: Segment) -> int:
    return seg.ts_ns


def _edge_moves(tl: Timeline, clock: StepClock) -> str | None:
    """Why the window's edges leave ``clock``'s mean unknown (None: they do not). Before the
    first boundary seen and after the last, the window may hold a whole step whose other boundary
    no sample showed (the window began at it); where one as long as that edge would move the mean
    beyond MAX_STEP_ERROR, the mean is not known to within it. 2 ranks whose 8 workers deliver in
    bursts (steps of 80 ms, two in eight of 1.05 s): one rank's first sample came after the window's
    first boundary, 1.08 s before its first return, and its mean over 30 steps was 273 ms where the
    window's 31 made 298 (-8.2%); its peer saw that boundary and gave 298 (it stands: ``_with_means``)."""
    mean = clock.typical_ns
    if not mean or not tl.intervals or tl.start_seen_ns is None or tl.end_ns is None:
        return None
    n = sum(1 for iv in tl.intervals if not iv.swallowing)   # mean_clock's steps
    for edge, where in ((tl.intervals[0].start_ns - tl.start_seen_ns, "before its first boundary seen"),
                        (tl.end_ns - tl.intervals[-1].end_ns, "after its last")):
        moved = (edge - mean) / (n + 1) / mean
        if moved > MAX_STEP_ERROR:
            return (f"the {edge / 1e6:.0f} ms {where} may hold a whole step, which would move the mean of "
                    f"{n} steps by {100 * moved:.0f}%")
    return None
