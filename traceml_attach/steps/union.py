"""The steps of synchronized ranks timed on the boundaries any of them saw (``by_union``).

A rank whose own returns fit no step period sees too few of its boundaries for its intervals to be
counted: a rank that waits in the all-reduce through 99% of its 500-ms steps shows its loop in a
5-ms visit, one step's boundary in four goes unseen, and with the steps' 20% jitter no comb holds
(``period.fit_period``: "fit no regular step period"). The ranks it steps with see the same steps'
boundaries, each at its own chance, so a boundary one rank missed its peers mostly saw. Where no
rank's own clock is known (``sync.share_period`` then has none to share), each rank's intervals are
split at the boundaries its peers saw inside them (``_pieces``: any peer's, beyond a margin from its
ends, one for each step), and how many boundaries all of them missed is estimated from how many of
them saw each one that some saw (Chao's estimate, ``mean.unseen_by_all``). Where that is at most
MAX_UNSEEN of the pieces, the pieces are the rank's steps with every boundary seen, and their clock
is any such clock (``clock.clock_of``: "wraps", where the median holds); the ranks' clocks are then
shared as any (``sync.share_period``), and accumulation, slow steps and the mean weigh them as they
weigh a rank's own. Not where a rank's clock is unknown for a cause the code acts on (steps too short
to tell apart, irregular, uneven, accumulation undecided): those say what the boundaries cannot fix.

Quick grid (docs/steps.md, stop 70): 24 rank-windows known, all within 1.1% (4 points of classic
200-500-ms steps waiting 95-99% of them, on 4 and 8 ranks at 50-200 Hz). Prototyped at the end of
the pipeline, the ranks unknown for uneven or irregular steps came out 4 and 1 beyond 5% (the lag on
skewed steps; boundaries every rank missed that Chao's estimate did not see): they are not asked.

Where more than MAX_UNSEEN of the boundaries went unseen by all of them, the pieces are still far
denser than any one rank's intervals, and the comb fit that refused a rank's own intervals may hold
on them (``comb``, stop 74): 8 ranks waiting 99% of 80-ms steps at 500 Hz each saw a third of their
boundaries, their union seven in ten, and the comb on the union counted 122-128 of 126 steps, the
step +0.4%. It is the last rule tried (``diagnose.analysis._counted``: only where every other left
every rank unknown), as the least sure of them; and a faster rate is still advised for the
boundaries the rank's own returns leave unseen (``StepClock.own_unseen``, ``diagnose.rate.faster``):
8 ranks of ~500-ms steps known on it at 200 Hz counted up to 6.8% off, at 400 Hz every step. A comb
that counts far more steps hidden in the pieces than Chao's estimate of the boundaries all of them
missed (``sync.beyond_chance``) takes slow steps for several, and is not taken: 8 ranks of ~20-ms
steps, 40% of them slowed, at 300 Hz. A rank whose steps on that comb show a sign that its returns
are not one a step (``accumulation.plan_of``: micro-batches, a doubt that a step is one, such as
"the long intervals ... are slow steps", or the optimizer's visits marking the steps) keeps its own
intervals, counted on its peers' clock: 2 of the 8 ranks of ~500-ms steps read "slow steps" on their
own pieces, and without this were unknown. (Taken first in the pipeline, before accumulation, the
union's comb cost 8 ranks accumulating 2 micro-batches of ~320-ms steps, delivered in bursts, their
step time to the same rule.)

Ranks each left unknown for slow or irregular steps (``uneven``: cause UNEVEN or IRREGULAR) are
counted on the union too, known or not by their own returns (``own``, stop 75): 8 ranks of bursty
~20-ms steps at 400 Hz each saw 85-91% of their boundaries though e^-λ said all but 0.5%, too many
intervals of two for chance, so which of them hid a boundary could move the median beyond 5% ("slow
steps"); split at their union, 494-501 pieces for the job's 499, every rank -1.1%. A rank counted so
must see nearly every boundary there: Chao's estimate of those all of them missed at most
CHANCE_UNSEEN of the pieces (it errs high on steps of uneven length: 2-4% on those 8 ranks, whose
pieces were every step), the pieces counted at MAX_UNSEEN as every boundary seen, no more steps
hidden in them than that estimate allows (``sync.beyond_chance``, as for the comb), and their median
one the blur of their ends does not move (``_blurred``: 8 ranks of ~130-ms steps, 40% of them
slowed, at 100 Hz over 30 s were +6.9% on the union, one +21%). Not where a rank's own clock is
unknown for a cause its peers' boundaries do not mend (steps too short to tell apart, accumulation
undecided). Quick grid: 24 rank-windows known (95.3%), every one within 1.1%.

Where every rule left every synchronized rank unknown, the optimizer's visits are taken the same
way (``by_visits``, stop 83): the ranks step their optimizers together, so each rank's runs between
its own visits are split at the visits its peers saw, and counted on them where those all of them
missed are few."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

from traceml_attach.policy import (
    BLUR_SAMPLES,
    BLUR_SKEW,
    CHANCE_UNSEEN,
    DEFAULT_RATE_POLICY,
    MAX_UNSEEN,
    MIN_INTERVALS,
    PEER_COUNT,
)
from traceml_attach.steps.accumulation import plan_of, visit_groups
from traceml_attach.steps.batch_timeline import Timeline, judged_uneven
from traceml_attach.steps.clock import (
    IRREGULAR,
    UNEVEN,
    Step,
    StepClock,
    clock_of,
    edge_steps,
    expand_counted,
    typical_step,
)
from traceml_attach.steps.mean import PeerBounds, filled_in, peer_bounds, peers_of, piece, unseen_by_all
from traceml_attach.steps.sync import beyond_chance

# a stretch before a rank's first boundary or after its last is a step of its own between its peers'
# boundaries only where its samples cover at least this much of it (a hole is no step of its)
SAMPLED = 0.9


def by_union(timelines: dict[str, Timeline], synchronized: bool, comb: bool = False,
             own: Mapping[str, StepClock] | None = None) -> dict[str, Timeline]:
    """``timelines`` with each rank whose own returns fit no period (``_asks``) counted on the
    boundaries it and its peers saw, where those all of them missed are few, or (``comb``) on the
    comb fitted to them (see the module's doc); the rest as they were (``timelines`` itself where
    none is). Only where the ranks step together and none of their clocks is known. With ``own``
    (each rank's own clock, where every rank was left unknown for slow or irregular steps: see the
    module's doc), every rank is asked, known or not, where each own clock allows it (``_uneven_asks``)."""
    if not synchronized or len(timelines) < 2:
        return timelines
    if own is None and any(tl.clock.known for tl in timelines.values()):
        return timelines
    if own is not None and not all(_uneven_asks(tl, own[rank]) for rank, tl in timelines.items()):
        return timelines
    order = list(timelines)
    out = dict(timelines)
    for rank, tl in timelines.items():
        if own is None and not _asks(tl):
            continue
        peers = peer_bounds(tl, peers_of(order, rank, timelines))
        if peers.bounds:
            counted = _counted(tl, peers, comb, uneven=own is not None)
            if counted is not None and (counted.clock.method == "wraps" or _one_step_a_return(counted)):
                out[rank] = counted
    return out if any(out[rank] is not tl for rank, tl in timelines.items()) else timelines


def uneven(timelines: dict[str, Timeline]) -> bool:
    """Whether every rank's step time is unknown for slow or irregular steps (``StepClock.cause``
    UNEVEN or IRREGULAR), as the ranks' own boundaries counted them: ``by_union``'s ``own``."""
    return all(tl.clock.cause in (UNEVEN, IRREGULAR) for tl in timelines.values())


def _uneven_asks(tl: Timeline, own: StepClock) -> bool:
    """Whether a rank left unknown for slow or irregular steps is counted on its peers' boundaries:
    one micro-batch a step as far as it knows, intervals to split, and its own clock known, or
    unknown for no cause or for those; not for steps too short to tell apart, nor accumulation
    undecided, which its peers' boundaries do not mend (as ``_asks``). (Before the other guards, 2
    ranks of bursty ~2-ms steps at 400 Hz, one of them too short to tell apart, were given 14.8 ms on
    the union's comb.)"""
    return (tl.loop is not None and tl.micro_batches == 1 and len(tl.intervals) >= 2
            and own.cause in (None, UNEVEN, IRREGULAR))


def _asks(tl: Timeline) -> bool:
    """Whether ``tl``'s clock is unknown only because its returns fit no period: no cause the code
    acts on (``StepClock.cause``), one micro-batch a step as far as it knows, and intervals to split."""
    clock = tl.clock
    return (not clock.known and clock.cause is None and tl.loop is not None and tl.micro_batches == 1
            and len(tl.intervals) >= 2)


def _counted(tl: Timeline, peers: PeerBounds, comb: bool, uneven: bool = False) -> Timeline | None:
    """``tl`` with its intervals split at its ``peers``' boundaries and counted on them: on a clock
    that sees every boundary where those none of them saw are at most MAX_UNSEEN of the pieces
    (``clock_of``'s first branch), else, where ``comb`` allows it, on the comb fitted to the pieces
    (its last); None where neither holds. ``uneven`` (ranks left unknown for slow or irregular
    steps): on a clock that sees every boundary where those none of them saw are at most
    CHANCE_UNSEEN of the pieces, taken at MAX_UNSEEN (Chao's estimate errs high on steps of uneven
    length; see the module's doc)."""
    unseen = unseen_by_all(tl, peers)
    if not math.isfinite(unseen):
        return None
    pieces = _pieces(tl, peers)
    share = unseen / (len(pieces) + unseen)
    most = CHANCE_UNSEEN if uneven else None if comb else MAX_UNSEEN
    if (most is not None and share > most) or len(pieces) == len(tl.intervals):
        return None
    if uneven and _blurred(pieces, tl.rate_hz):   # (read on the pieces themselves: before they are counted)
        return None
    # (not on a local step: the pieces' e^-λ is Chao's estimate, and pieces split at every boundary
    # any peer saw drift with whatever returns those were: 2 ranks of 2 micro-batches, 2.5 times
    # slower at the start, their pieces counted as steps on the local step: -53%, 120 steps for 55)
    clock, counts = clock_of([p.counted_ns for p in pieces], min(share, MAX_UNSEEN) if uneven else share, tl.rate_hz,
                             drift=False)
    if not (clock.method == "wraps" or (comb and clock.method == "comb")):
        return None
    # a comb that counts far more steps hidden in the pieces than boundaries all of them missed is
    # one of slow steps taken for several (``sync.slow_not_unseen``'s test): 8 ranks of ~20-ms
    # steps, 40% of them fetching their batch 1.3-2.2 times as long, at 300 Hz, each counted 65-85
    # hidden where Chao's estimate was 12-27, and gave the fast steps' length (-8.9%)
    if (clock.method == "comb" or uneven) and beyond_chance(sum(counts) - len(pieces), unseen):
        return None
    steps, guessed = expand_counted(pieces, counts, clock.unseen, tl.rate_hz)
    # the last piece's end too: where it is a peer's boundary after the rank's last (``_beyond``),
    # the edge after it starts there, not at its start (a rank whose last 3 s held no boundary of its
    # own counted its last piece again in the edge: 53 steps of 48)
    bounds = sorted({*tl.bounds, *(p.start_ns for p in pieces), pieces[-1].end_ns})
    # the median step (where the steps changed length, their mean), as ``build_timeline`` takes it
    typical = typical_step(clock, lambda: statistics.median(s.dur_ns for s in steps))
    edges = edge_steps(bounds, tl.start_seen_ns, tl.end_ns, clock.period_ns, tl.rate_hz, clock.unseen, clock.shift_ns)
    own = tl.clock.unseen if clock.method == "comb" else None
    return replace(tl, intervals=tuple(pieces), steps=steps, bounds=tuple(bounds), guessed=guessed,
                   clock=replace(clock, typical_ns=typical, edge_steps=edges, own_unseen=own), step_floor=None)


def _blurred(pieces: Sequence[Step], rate_hz: int) -> bool:
    """Whether the median of the steps counted on the union's ``pieces`` (ranks left unknown for
    uneven steps) is one the blur of their ends moves: the pieces, each taken as one step, skewed by
    slow ones (their mean over their median by more than BLUR_SKEW) and under ``hidden_to_samples``
    samples (``diagnose.rate._hidden_faster``'s sharpness for slow steps). 8 ranks of ~130-ms steps,
    40% of them slowed, over 30 s at 100 Hz: +6.9% on 7 ranks, +21% on the eighth; at 200 Hz +5.4%,
    at 400 +1.9%. The pieces, not the steps counted: counted at 1%, 10-22 slow pieces of 4 ranks of
    ~170-ms steps (a quarter slowed) at 50 Hz were taken for two, which narrowed the skew the test
    reads, and counted 3.8-5.1% too many."""
    durations = [p.counted_ns for p in pieces]
    median = statistics.median(durations) if durations else 0.0
    if median <= 0:
        return True
    skew = sum(durations) / len(durations) / median - 1
    return skew > BLUR_SKEW and median * rate_hz / 1e9 < DEFAULT_RATE_POLICY.hidden_to_samples


def _one_step_a_return(tl: Timeline) -> bool:
    """Whether ``tl``'s steps on the union's comb show no sign that its returns are other than one
    a step (``plan_of``: one micro-batch a step, no doubt that a step is one, no optimizer's visits
    marking the steps); where they do, the rank is left to its peers' clock (see the module's doc)."""
    plan = plan_of(tl)
    return plan.k == 1 and plan.doubt is None and plan.marks is None


def _pieces(tl: Timeline, peers: PeerBounds) -> list[Step]:
    """``tl``'s intervals, each split at the boundaries its peers saw inside it (``mean.filled_in``
    with any peer's, more than a margin from either end: near an end, it is the boundary this rank
    saw there, seen earlier or later), and before its first boundary and after its last the steps
    between its peers' there (``_beyond``): a rank that missed the first two and last three of 18
    boundaries its peers saw counted 13 steps."""
    out = list(filled_in(tl, peers, ends=False).intervals)
    if not out or tl.start_seen_ns is None or tl.end_ns is None:
        return out
    return [*_beyond(tl, peers, tl.start_seen_ns, out[0].start_ns, out[0], True), *out,
            *_beyond(tl, peers, out[-1].end_ns, tl.end_ns, out[-1], False)]


def _beyond(tl: Timeline, peers: PeerBounds, lo: int, hi: int, nearest: Step, leading: bool) -> list[Step]:
    """The steps between the boundaries ``tl``'s peers saw in (lo, hi): before its first piece
    (``leading``: ``hi`` is that piece's start, ``nearest`` the piece) or after its last (``lo`` its
    end), from that boundary outwards while its samples cover at least SAMPLED of each (a hole is no
    step of its); the part beyond the last of them is the window's edge. Each holds the phases of the
    rank's own samples in it (``mean.piece``)."""
    template = replace(nearest, covered=True, held=False)
    cuts = [int(c) for c in peers.inside(lo, hi, ends=False)]
    edges = [*cuts, hi] if leading else [lo, *cuts]
    pairs = list(itertools.pairwise(edges))
    out: list[Step] = []
    for a, b in reversed(pairs) if leading else pairs:
        step = piece(tl.segments, template, a, b)
        if b - a < 1.5 * peers.margin or sum(step.phases_ns.values()) < SAMPLED * (b - a):
            break
        out.append(step)
    return out[::-1] if leading else out


def by_visits(counted: dict[str, Timeline], raw: dict[str, Timeline], synchronized: bool) -> dict[str, Timeline]:
    """``counted`` (the ranks' timelines, every rule applied) with each synchronized rank that all of
    them left unknown timed on the optimizer's visits any of them saw; ``counted`` itself where none
    is, or where any rank's step is known (its peers then have it: ``accumulation._visits_on_peers``).

    Ranks that step together step their optimizers together, right after the all-reduce of the step's
    last micro-batch, so each rank's visits (``accumulation.visit_groups``, from its ``raw`` timeline)
    mark the same optimizer steps; and a short optimizer that one rank sees in two steps of three,
    four ranks see in practically every one. Each rank's runs between its own visits are split at
    the visits its peers saw, one step's margin apart (half the tenth percentile of every rank's
    runs: a rank that sees the optimizer seldom has no run of one step of its own), at least
    MIN_INTERVALS of them (``_counted``, as for ranks left unknown for uneven steps: Chao's
    estimate of the visits all of them missed at most CHANCE_UNSEEN of the pieces, taken as every
    one seen, no more steps hidden in them than it allows, their median one the blur of their ends
    does not move), and where those pieces are the steps (``clock_of``: "wraps") and their median
    holds (``judged_uneven``), they are its optimizer steps, their mean under 30 samples a step
    (``_mean_where_blurred``); the steps before its first piece and after its last are its peers'
    there (``_visit_edges``). The ranks take the same steps: one whose count is more than a step
    (and PEER_COUNT) from the median of those so timed kept a peer's visit uncut, and is not timed
    so. How many micro-batches a step holds is not counted so (None, which also keeps
    ``diagnose.rate.slower`` from lowering the rate that shows the visits).

    4 ranks accumulating 3 micro-batches of ~230-ms optimizer steps whose input 4 workers deliver in
    bursts, behind a 30% straggler (``accum_bursty:200:3/4:50:4:1542000``), at 400 Hz: micro-batches
    of 5 ms among ones of 150 and more, too short to tell apart, and a 2.3-ms optimizer each rank saw
    in 15-30 of 44 steps, its own visits fitting no period (gaps of 168-282 ms for one step); every rank
    was unknown, at 50 Hz and at 400. Their visits together: 40 pieces, Chao's estimate 1.3 missed by
    all; every rank 44 steps of the job's 44, its step within 1.9%. Quick grid (stop 83): 28 more
    rank-windows known (4,257 -> 4,285 of 4,490, 95.4%), each within 2.9%, counts beyond 3% 97 -> 100."""
    if not synchronized or len(raw) < 2 or any(tl.clock.known for tl in counted.values()):
        return counted
    visits = {rank: v for rank, tl in raw.items() if (v := _visits_timeline(tl)) is not None}
    if len(visits) < 2:
        return counted
    order = list(visits)
    # one step's margin: a rank that sees the optimizer seldom has no run of one step of its own (its
    # own runs' tenth percentile, as for returns, was 1.7 s on 880-ms steps at 50 Hz: pieces of two
    # steps could not be cut, and a rank was given twice the job's step, +98%)
    runs = sorted(g.dur_ns for v in visits.values() for g in v.intervals)
    margin = runs[len(runs) // 10] / 2
    timed: dict[str, Timeline] = {}
    for rank, mine in visits.items():
        peers = replace(peer_bounds(mine, peers_of(order, rank, visits)), margin=margin)
        if not peers.bounds:
            continue
        on = _counted(mine, peers, comb=False, uneven=True)
        if on is None or len(on.steps) < MIN_INTERVALS:   # (not ``comb``: "wraps" or None)
            continue
        on = judged_uneven(on)
        if on.clock.known:
            timed[rank] = replace(on, micro_batches=None, clock=replace(_mean_where_blurred(on).clock,
                                                                        edge_steps=_visit_edges(on, peers)))
    if not timed:
        return counted
    # the ranks take the same steps: one that counts other than the rest left some of its peers'
    # visits uncut (a piece of two steps, a peer's visit too near one end of it for
    # ``mean._edges_inside``): 8 ranks of bursty ~64-ms steps at 300 Hz, two counted 149 and 150 where
    # three counted the job's 155, their step +3.6% and +4.2%
    count = statistics.median(tl.step_count for tl in timed.values())
    return {**counted, **{rank: tl for rank, tl in timed.items()
                          if abs(tl.step_count - count) <= max(1.0, PEER_COUNT * count)}}


def _mean_where_blurred(tl: Timeline) -> Timeline:
    """``tl`` (timed on the visits any rank saw, every step counted) with its steps' mean as its
    typical step where a step is under BLUR_SAMPLES samples long: each piece's ends were seen by
    one rank or another, each at its own lag, and that blur moves their median, not their mean,
    whose ends are the window's. 8 ranks accumulating 2 micro-batches of bursty ~23-ms optimizer
    steps at 400 Hz (9.3 samples a step) counted 446-456 of the job's 455, their medians 1.9-5.3%
    under the job's (its mean 5.8% under its median, theirs 0.5-2.0% under theirs); their means are
    within 2.1% of the job's (seven of the eight within 0.9%)."""
    typical = tl.clock.typical_ns
    if not typical or not tl.steps or typical * tl.rate_hz / 1e9 >= BLUR_SAMPLES:
        return tl
    return replace(tl, clock=replace(tl.clock, typical_ns=sum(s.dur_ns for s in tl.steps) / len(tl.steps), mean=True,
                                     blurred=True))


def _visits_timeline(tl: Timeline) -> Timeline | None:
    """``tl`` with the runs between its optimizer's visits (``accumulation.visit_groups``) as its
    intervals and their ends as its boundaries, its clock unknown; None where it holds fewer than
    two such runs."""
    groups, _ = visit_groups(tl)
    if tl.loop is None or len(groups) < 2:
        return None
    bounds = sorted({*(g.start_ns for g in groups), *(g.end_ns for g in groups)})
    return replace(tl, bounds=tuple(bounds), intervals=tuple(groups), steps=tuple(groups),
                   clock=StepClock("unknown", None), micro_batches=1, step_floor=None)


def _visit_edges(tl: Timeline, peers: PeerBounds) -> int:
    """The whole optimizer steps before ``tl``'s first step and after its last (``by_visits``): one
    for each visit its ``peers`` saw there (``PeerBounds.inside``, a margin from the step and a
    sample from the window's edge), and whole periods between the window's edges and the first and
    last of those (``edge_steps``, any number: the visit that began a window's first step falls
    before the first return, in no interval of any rank). The pieces' own edges left out the
    peers' visits within a margin of the window's start: 2 of the 4 ranks of ``by_visits``' case
    counted 43 of the window's 44."""
    if not tl.steps or tl.start_seen_ns is None or tl.end_ns is None:
        return tl.clock.edge_steps
    m, lag = peers.margin, 1e9 / max(tl.rate_hz, 1)
    first, last = tl.steps[0].start_ns, tl.steps[-1].end_ns
    lead = peers.inside(tl.start_seen_ns + lag - m, first, ends=False)
    trail = peers.inside(last, tl.end_ns - lag + m, ends=False)
    bounds = [int(lead[0]) if lead else first, int(trail[-1]) if trail else last]
    return len(lead) + len(trail) + edge_steps(bounds, tl.start_seen_ns, tl.end_ns, tl.clock.period_ns, tl.rate_hz)
