"""Why the returns seen may not be optimizer steps, though no k could be counted: the evidence
accumulation.py weighs before it gives a step time. Each check is a chance under the hypothesis
that every step holds the optimizer's work (``doubt_of``: too few visits, visits kept apart,
``spaced``), or that the long intervals hold several steps' compute (``lumped``: a DataLoader
whose workers deliver in bursts makes slow steps, not several). A doubt makes the step time
unknown, with its words as the reason: a micro-batch taken for a step is the one wrong answer.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import math
import statistics
from collections.abc import Sequence

from traceml_attach.policy import (
    FEW_GAPS_ODDS,
    LUMPED_MIN_SAMPLES,
    MAX_CHANCE,
    MAX_MICRO_BATCHES,
    MAX_MISCOUNTED,
    MIN_GAPS,
    MISCOUNTED,
    PROVISIONAL_GAPS,
    SPACED_UNSEEN,
    SUGGESTED,
    UNDECIDED_ODDS,
)
from traceml_attach.steps.batch_timeline import Timeline
from traceml_attach.steps.clock import Step, hidden_by_chance
from traceml_attach.steps.period import visit_samples

# the phases whose samples ``_lumped`` counts as a step's compute
COMPUTE_PHASES = ("h2d", "forward", "backward", "optimizer")


def optimizer_unseen(intervals: Sequence[Step], rate_hz: int, *, trim: bool = False) -> float | None:
    """The chance that sampling misses an optimizer step's own work (e^-λ), from the optimizer
    time of the intervals that hold some (about one visit each); None with fewer than two.

    ``trim``: from the visits less the longest, and None with fewer than three: one visit through
    which the thread was off its core (a loaded machine) raises the mean of a few. DDP's rank 1 on a
    loaded machine, its 1.7-ms optimizer seen in 2 of 50 intervals at 100 Hz, one visit 74 ms long,
    was given e^-λ 1.5% untrimmed and its steps taken for micro-batches of unknown optimizer steps."""
    return phase_unseen(intervals, rate_hz, "optimizer", trim=trim)


def phase_unseen(intervals: Sequence[Step], rate_hz: int, phase: str, *, trim: bool = False) -> float | None:
    """``optimizer_unseen`` of another phase visited about once in the intervals that hold it."""
    seen = sorted(ns for iv in intervals if iv.covered and (ns := iv.phases_ns.get(phase, 0)) > 0)
    if len(seen) < (3 if trim else 2):
        return None
    return math.exp(-visit_samples(statistics.fmean(seen[:-1] if trim else seen) * rate_hz / 1e9))


def binom_tail(n: int, m: int, q: float) -> float:
    """P(at least m of n independent events of chance q)."""
    return 1.0 - binom_cdf(n, m - 1, q) if m > 0 else 1.0


def doubt_of(tl: Timeline, multiples: tuple[int, float, int]) -> str | None:
    """Why ``tl``'s steps may not be optimizer steps (None: they are). Without accumulation every
    step holds the optimizer's own work, d on average (its sampled time over the steps counted),
    seen with chance 1 - e^-(d·rate); an optimizer seen in far fewer intervals between returns than
    that (chance below MAX_CHANCE), or only in gaps of nearly always a multiple of one k, short of
    certain, points to gradient accumulation whose micro-batches could not be counted (too few
    optimizer steps in the window). The step time is then unknown: the micro-batch's is not it.
    (The visits' lengths tell nothing here: on a loaded machine a span also covers the sampler's
    own gaps.) ``multiples``: ``_multiples`` of its intervals, as ``plan_of`` found them."""
    k, chance, _ = multiples
    if chance <= SUGGESTED:
        return suggested_words(k)
    apart = spaced(tl)
    if apart is not None:
        return apart
    rare = _rarely_seen(tl, sum(1 for s in tl.steps if s.covered))
    if rare is None:
        return None
    seen, covered, d, q = rare
    return (f"the optimizer was seen in only {seen} of the {covered} intervals between the returns seen, "
            f"where each step's {d / 1e6:.1f} ms of it would show with chance {q:.0%}: gradient accumulation, "
            "whose micro-batches per optimizer step could not be counted; sample longer")


def too_rarely_seen(tl: Timeline) -> bool:
    """Whether the optimizer ran in far fewer of ``tl``'s intervals than if each were a step that
    held its work (``doubt_of``'s test, each interval a step): they may be micro-batches."""
    return _rarely_seen(tl, sum(1 for iv in tl.intervals if iv.covered), margin=1.0) is not None


def _rarely_seen(tl: Timeline, steps: int, margin: float = 2.0) -> tuple[int, int, float, float] | None:
    """(intervals with the optimizer, intervals covered, its time a step, the chance a step shows it)
    where the optimizer, its sampled time spread over ``steps``, was seen in fewer intervals than
    that chance gives, by ``margin`` times, and with a chance of at most MAX_CHANCE; None otherwise."""
    covered = [iv for iv in tl.intervals if iv.covered]
    seen = sum(1 for iv in covered if iv.phases_ns.get("optimizer", 0) > 0)
    if not steps or not seen:
        return None
    d = sum(iv.phases_ns.get("optimizer", 0) for iv in covered) / steps
    q = -math.expm1(-d * tl.rate_hz / 1e9)
    # (the sum only where it can matter)
    if seen < q * len(covered) / margin and binom_cdf(len(covered), seen, q) <= MAX_CHANCE:
        return seen, len(covered), d, q
    return None



def suggested_words(k: int) -> str:
    """Why the steps may be micro-batches where the gaps between the optimizer's visits are
    multiples of ``k`` with a chance of at most SUGGESTED without accumulation."""
    return (f"the optimizer was seen only every {k} or a multiple of {k} of the steps counted, which points to "
            f"gradient accumulation of {k} micro-batches, not yet certain in this window; sample longer")


def undecided_words(odds: tuple[int, float], visits: int, seen: float, gaps: Sequence[int], ranks: int = 1,
                    loose: bool = False) -> str:
    """Why the steps may be micro-batches where the optimizer was seen too rarely to count k or to
    rule it out: ``odds`` as ``undecided`` gives them, from ``visits`` in the share ``seen``, whose
    ``gaps`` are counted; where only the long gaps' miscounts allowed them (``loose``:
    ``Plan.loose``), the others' lengths are told."""
    k, ratio = odds
    where = "" if ranks == 1 else f" on the {ranks} synchronized ranks together"
    odds_words = f"{ratio:.0f} times" if ratio < 1000 else "over a thousand times"
    on = [g for g in gaps if g % k == 0]
    off = [g for g in gaps if g % k]
    share = f"every one of the {len(gaps)}" if not off else f"{len(on)} of the {len(gaps)}"
    apart = f"{share} gaps between them {k} or a multiple of {k} steps apart"
    if loose and on and off:
        apart += (f" (a median of {statistics.median(on):g}), the other {len(off)} a median of "
                  f"{statistics.median(off):g} steps long, where the intervals' unsure lengths may have put a "
                  "count a step off")
    return (f"the optimizer was seen in {seen:.0%} of the steps counted{where} ({visits} visits), {apart} "
            f"({odds_words} likelier with gradient accumulation of {k} "
            "micro-batches than without): too rarely to count the micro-batches or to rule them out, so a step "
            "may be a micro-batch")


_MAX_LOG_ODDS = 700.0


def undecided(gaps: Sequence[int], seen: float, miscount: float | Sequence[float] = 0.0) -> tuple[int, float] | None:
    """The k of gradient accumulation that the gaps (in steps counted) between the optimizer's
    visits make at least UNDECIDED_ODDS times likelier than none (on fewer than PROVISIONAL_GAPS
    gaps, FEW_GAPS_ODDS: as likely), and that likelihood ratio; None where no k does. An optimizer
    seen rarely (a short optimizer step, at a low rate) is too rare for ``_multiples_in`` to count
    k, and then its few gaps are all the evidence: without
    accumulation they are geometric with the share ``seen``, with k they are k times geometric
    with k times that share, but for a miscounted step now and then.

    A gap is miscounted with a chance of MISCOUNTED, or, where ``miscount`` gives the chance that
    one step of it is counted wrong (one for every gap, or each gap's own), that of any of its
    steps, where that is more (``gap_miscounted``): a gap of 61 micro-batches, timed over a period
    that the job's speed drifted from, is far likelier one off than a gap of 2. Those chances are
    weighed on PROVISIONAL_GAPS gaps or more only (None on fewer): there every gap may be the
    miscounted one (3 gaps of 5, 6 and 9 steps, on 8 ranks of one 320-ms step without
    accumulation, made k = 3 as likely as none)."""
    if not gaps or not 0.0 < seen < 1.0:
        return None
    per_gap = [miscount] * len(gaps) if isinstance(miscount, (int, float)) else miscount
    if len(gaps) < PROVISIONAL_GAPS and any(m > 0.0 for m in per_gap):
        return None
    # few gaps can hardly favour a k: there, one as likely as none leaves the step unknown
    least = UNDECIDED_ODDS if len(gaps) >= PROVISIONAL_GAPS else FEW_GAPS_ODDS
    best: tuple[int, float] | None = None   # k and its log odds
    # the same gap counts the same each time: each length (and chance) once, times how often it came
    lengths = collections.Counter(zip(gaps, (gap_miscounted(g, m) for g, m in zip(gaps, per_gap, strict=True)),
                                      strict=True))
    for k in range(2, min(max(gaps), MAX_MICRO_BATCHES) + 1):
        log_ratio = 0.0
        for (g, wrong), times in lengths.items():
            # a miscounted gap is as likely as without accumulation
            log_ratio += times * math.log(wrong if g % k else wrong + (1.0 - wrong) * _with_k(g, k, seen))
        if log_ratio >= math.log(least) and (best is None or log_ratio > best[1]):
            best = (k, log_ratio)
    # hundreds of gaps (synchronized ranks pooled) make odds beyond a float: held at about 1e304
    return (best[0], math.exp(min(best[1], _MAX_LOG_ODDS))) if best is not None else None


def may_be_undecided(gaps: Sequence[int], seen: float) -> bool:
    """Whether some chances of miscounting the gaps could make ``undecided`` find a k: each gap that
    is no multiple of k taken as miscounted at MAX_MISCOUNTED, each multiple at whichever chance
    favours k the more. False spares working the chances out (``accumulation.step_miscount``, a
    walk over every interval) for the gaps of a job without accumulation."""
    if len(gaps) < PROVISIONAL_GAPS or not 0.0 < seen < 1.0:
        return False
    least = math.log(UNDECIDED_ODDS)
    lengths = collections.Counter(gaps)
    for k in range(2, min(max(gaps), MAX_MICRO_BATCHES) + 1):
        bound = 0.0
        for g, times in lengths.items():
            if g % k:
                bound += times * math.log(MAX_MISCOUNTED)
                continue
            ratio = _with_k(g, k, seen)
            bound += times * max(math.log(wrong + (1.0 - wrong) * ratio) for wrong in (MISCOUNTED, MAX_MISCOUNTED))
        if bound >= least:
            return True
    return False


def _with_k(g: int, k: int, seen: float) -> float:
    """How much likelier a gap of ``g`` steps (a multiple of ``k``) between the optimizer's visits is
    with k micro-batches a step than without: geometric in optimizer steps with k times the share
    ``seen`` (the share seen is itself a count: over 1/k by a visit or two, an optimizer seen in every
    one of its steps, 4 visits in 14 micro-batches of 4, leaves k possible, at its most), against
    geometric in steps with the share ``seen``."""
    seen_k = min(seen * k, 1.0 - MISCOUNTED)
    return math.exp(math.log(seen_k) + (g // k - 1) * math.log1p(-seen_k)
                    - math.log(seen) - (g - 1) * math.log1p(-seen))


def gap_miscounted(g: int, per_step: float) -> float:
    """The chance that a gap of ``g`` steps is miscounted: MISCOUNTED, or that some one of its steps
    is where each is with the chance ``per_step``, at most MAX_MISCOUNTED (a gap as likely wrong as
    right says nothing either way)."""
    if per_step <= 0.0:
        return MISCOUNTED
    return min(max(MISCOUNTED, -math.expm1(g * math.log1p(-min(per_step, 0.999)))), MAX_MISCOUNTED)


def lumped(tl: Timeline) -> str | None:
    """Why a period fitted to the intervals' lengths miscounts them (None: it does not). The fit
    takes an interval k periods long for k steps whose boundaries went unseen; those k steps then
    hold k steps' compute. Where the long intervals hold far less (chance at most MAX_CHANCE), or
    about one step's each (that far likelier than k steps'), they are slow steps, not several: a
    DataLoader whose workers deliver in bursts (every w-th step waits for the next batch), a
    checkpoint, an eval; and the steps are not one length. Where every boundary is seen (method
    "wraps"), an interval counted as two steps because one boundary may go unseen by chance is
    tried the same way: a bursty rank's stall counted so on the grid made its steps 11% long."""
    clock = tl.clock
    if clock.method not in ("comb", "joint", "wraps") or not clock.period_ns:
        return None
    # where every boundary is seen, only the intervals counted as several steps by chance matter: a
    # longer one is one slow step or a drop-out already (``clock.expand``); on a peer's clock too,
    # by the rank's own e^-λ (8 ranks slowed at random, each rank's 262 intervals its steps: rounded
    # to the period, the slow ones were taken for two, and their compute, one step's, said the
    # steps were not of one length, so none was known)
    chance = clock.unseen if clock.method in ("wraps", "joint") else None
    return lumped_in(tl.intervals, clock.period_ns, tl.rate_hz, chance)


def lumped_in(intervals: Sequence[Step], period_ns: float, rate_hz: int, unseen: float | None = None) -> str | None:
    per_sample = 1e9 / rate_hz
    counted = []
    for iv in intervals:
        if not iv.covered:
            continue
        n = max(round(iv.counted_ns / period_ns), 1)
        if unseen is not None and n > 1 and not hidden_by_chance(n - 1, unseen):
            continue
        counted.append((iv, n))
    if all(n == 1 for _, n in counted):
        return None   # no long interval (a live tick asks every few seconds, of every rank)
    one: list[float] = []
    long_samples, long_steps, longs = 0.0, 0, 0
    for iv, n in counted:
        # the time blocked in the all-reduce (where CPU counters measured it) is no step's compute:
        # it is another rank's stall
        blocked = sum(iv.blocked_sync_ns.values()) if iv.blocked_sync_ns else 0
        phases = iv.phases_ns
        compute = max(sum([phases.get(p, 0) for p in COMPUTE_PHASES]) - blocked, 0) / per_sample
        if n == 1:
            one.append(compute)
        else:
            long_samples += compute
            long_steps += n
            longs += 1
    # a boundary is seen where the step's compute was sampled: with few samples of it per step,
    # the steps whose boundaries went unseen are those whose compute went unsampled
    if len(one) < MIN_GAPS or not long_steps or statistics.fmean(one) < LUMPED_MIN_SAMPLES:
        return None
    expected = statistics.fmean(one) * long_steps
    if expected <= 0:
        return None
    # far less than n steps' compute by chance; or, where each long interval holds about one step's
    # compute (a slow step whose stall is its input, every boundary seen), that is far likelier than
    # n steps' (the Poisson likelihood ratio beyond 1/MAX_CHANCE)
    single = statistics.fmean(one) * longs
    ratio = long_samples * math.log(single / expected) + expected - single
    if not ((long_samples < expected / 2 and poisson_cdf(long_samples, expected) <= MAX_CHANCE)
            or ratio >= -math.log(MAX_CHANCE)):
        return None
    return (f"the long intervals between the boundaries seen hold {long_samples / expected:.0%} of the compute that "
            f"{long_steps} steps of {period_ns / 1e6:.0f} ms would: they are slow steps (an input pipeline that "
            "delivers in bursts, a checkpoint, an eval), not several, and the steps are not of one length")


def poisson_cdf(x: float, mean: float) -> float:
    """P(Poisson(mean) <= x), in logs."""
    m = int(x)
    terms = [i * math.log(mean) - mean - math.lgamma(i + 1) for i in range(m + 1)]
    top = max(terms)
    return min(math.exp(top) * sum(math.exp(t - top) for t in terms), 1.0)


def spaced(tl: Timeline) -> str | None:
    """Why the optimizer's visits are too far apart for every step to hold one (None: they are
    not). In the clock's steps, not in the micro-batches ``_gaps`` counts: where those are too
    short to count, the steps between the optimizer's visits still show accumulation. Without it,
    each step holds the optimizer's work, seen with chance q (the share of the steps it was seen
    in), so the steps between two visits are geometric: fewer gaps under m steps than that (chance
    at most SUGGESTED, over every m tried) means the visits keep apart, k micro-batches or more."""
    period_ns = tl.clock.period_ns
    if not period_ns:
        return None
    # each visit at the return that ends its interval (the optimizer's work ends its step), and
    # the steps between two visits counted as the clock counted them (a slow step is one)
    ends = sorted(s.end_ns for s in tl.steps if s.covered)
    visits = [iv.end_ns for iv in tl.intervals if iv.covered and iv.phases_ns.get("optimizer", 0) > 0]
    if len(visits) <= MIN_GAPS or len(ends) <= len(visits):
        return None
    # an optimizer step shorter than the sampling interval is seen in few steps (py-spy's samples
    # come at exponential gaps), and a few visits keep apart by chance as often as not; only
    # visits sampled most times tell
    unseen = optimizer_unseen(tl.intervals, tl.rate_hz)
    if unseen is None or unseen > SPACED_UNSEEN:
        return None
    q = len(visits) / len(ends)
    gaps = [max(bisect.bisect_right(ends, b) - bisect.bisect_right(ends, a), 1) for a, b in itertools.pairwise(visits)]
    tried = range(2, min(max(gaps), MAX_MICRO_BATCHES) + 1)
    if not tried:
        return None
    best = (1.0, 0)
    for m in tried:
        short = sum(1 for g in gaps if g < m)
        chance = binom_cdf(len(gaps), short, -math.expm1((m - 1) * math.log1p(-q)))
        best = min(best, (chance, m))
    chance, m = best
    if chance * len(tried) > SUGGESTED:
        return None
    return (f"the optimizer's visits kept at least {m} steps apart far more often than chance allows if every step "
            f"of {period_ns / 1e6:.1f} ms held one: gradient accumulation, whose micro-batches per optimizer step "
            "could not be counted")


def binom_cdf(n: int, m: int, q: float) -> float:
    """P(at most m of n independent events of chance q), in logs (n may be thousands)."""
    if m >= n:
        return 1.0
    if q >= 1.0:
        return 0.0
    lq, lp = math.log(q) if q > 0 else -math.inf, math.log1p(-q)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lq + (n - i) * lp
             for i in range(m + 1)]
    top = max(terms)
    return math.exp(top) * sum(math.exp(t - top) for t in terms)
