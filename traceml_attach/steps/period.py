"""The step period from the loop's observed wraps, robust to the wraps that sampling misses.

py-spy samples at exponentially distributed gaps (to avoid aliasing), and a step boundary is
seen only when a sample lands outside the loop's dominant line before the next step's
samples: when everything but the dominant phase is shorter than a sampling interval, most
boundaries go unseen. The intervals between the wraps that are seen are then near-integer
multiples n·T of the step period T, each blurred by about one sampling interval per end
(where the samples fell) and by the steps' own jitter.

The period is the longest one whose comb the intervals fit: their phases 2π·I/P concentrate
(the mean resultant length R̄ of the Rayleigh test; 1 is a perfect fit, about 1/√m is no
fit at all). A period's divisors (T/2, T/3...) fit too, but less tightly, and its multiples
do not fit the odd multiples of T; so the longest period that fits about as well as the
best is the fundamental. The period is reported only when the fit is significant, tight, and
long enough against the sampling interval to resolve one step from two; otherwise it is
unknown, and nothing is made up.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from traceml_attach.policy import (
    AGREE,
    BLUR_ITERATIONS,
    DEBLUR_BINS,
    DEBLUR_ITERATIONS,
    DEBLUR_MIN_STEPS,
    DEBLUR_SPAN,
    GIVEN_RAYLEIGH_Z,
    HARMONIC_KEEP,
    INLIER,
    MAX_AMBIGUOUS,
    MAX_CANDIDATES_PER_SEED,
    MAX_RATE_HZ,
    MAX_SCORED,
    MAX_STEP_ERROR,
    MAX_UNSURE_STEPS,
    MEDIAN_RANKS,
    MIN_CONCENTRATION,
    MIN_GIVEN_INTERVALS,
    MIN_INTERVALS,
    MIN_RAYLEIGH_Z,
    MIN_SAMPLES_PER_STEP,
    MIN_STEADY,
    NEAR_MEDIAN,
    NEAR_SHARE,
    OVERDISPERSED,
    SHIFT_APART,
    SHIFT_APART_WHOLE,
    SHIFT_CHANCE,
    SHIFT_CHANCE_LONG,
    SHIFT_FILLED,
    SHIFT_RATIO,
    SHIFT_SEVERAL,
    SHIFT_WHOLE,
    SPLIT_PART,
    SPLIT_SHARE,
    SPLIT_SLACK,
    SURE,
    TARGET_SAMPLES_PER_STEP,
    TWOS_SHORT_Z,
    VALLEY_LEAST,
    VALLEY_NEAR,
    VALLEY_SHARE,
)


@dataclass(frozen=True)
class PeriodFit:
    """A comb fit of the intervals between observed wraps (all times in ns)."""

    period_ns: float | None        # None: no period could be established
    counts: tuple[int, ...]        # steps in each interval (1 each when period_ns is None)
    concentration: float | None    # R̄ at the period
    # the shortest interval cluster: every step is at most about this long
    upper_bound_ns: float | None = None
    # why no period: "few", "short", "loose", "ambiguous", "jittery" (a period fits, but the
    # steps vary too much for the intervals seen to pin the typical one), or "drifted" (refined
    # beyond the shortest intervals)
    why: str | None = None
    # "drifted": the period the comb was refined to, beyond the shortest intervals: no step's, but
    # what the returns' spacing fits, for ``accumulation._whole_intervals`` to weigh visits against
    drifted_ns: float | None = None

    @property
    def known(self) -> bool:
        return self.period_ns is not None

    @property
    def visible(self) -> float | None:
        """Share of the step boundaries that were seen as wraps."""
        steps = sum(self.counts)
        return len(self.counts) / steps if self.known and steps else None


def concentration(intervals: Sequence[float], period: float) -> float:
    """Mean resultant length of the intervals' phases on a comb of ``period``."""
    if not intervals or period <= 0:
        return 0.0
    w = 2 * math.pi / period
    c = s = 0.0
    for i in intervals:
        c += math.cos(w * i)
        s += math.sin(w * i)
    return math.hypot(c, s) / len(intervals)


def step_counts(intervals: Sequence[float], period: float) -> tuple[int, ...]:
    """How many steps each interval holds at ``period``."""
    return tuple(max(1, round(i / period)) for i in intervals)


def refine(intervals: Sequence[float], period: float, rounds: int = 3) -> float:
    """Total time over total steps of the intervals that sit on the comb (a ratio estimator:
    a boundary's blur cancels between consecutive intervals)."""
    for _ in range(rounds):
        num = den = 0.0
        for i in intervals:
            n = max(1, round(i / period))
            if abs(i - n * period) <= INLIER * period:
                num += i
                den += n
        if not den:
            return period
        new = num / den
        if abs(new - period) <= 1e-4 * period:
            return new
        period = new
    return period


def _candidates(ordered: Sequence[float], lo: float, hi: float) -> list[float]:
    """Divisors of the shortest intervals' clusters that lie in [lo, hi]."""
    m = len(ordered)
    seeds = []
    for q in (0.0, 0.1, 0.25):
        head = ordered[int(q * m)]
        cluster = [i for i in ordered if head * 0.9 <= i <= head * 1.1] or [head]
        seeds.append(cluster[len(cluster) // 2])
    keys: dict[int, float] = {}
    for seed in seeds:
        for n in range(1, MAX_CANDIDATES_PER_SEED + 1):
            c = seed / n
            if c < lo:
                break
            if c <= hi:
                keys.setdefault(round(math.log(c) / math.log(1.02)), c)
    return list(keys.values())


def map_counts(intervals: Sequence[float], period: float, unseen: float | None, rate_hz: float) -> tuple[int, ...]:
    """Each interval's most probable step count (see ``count_posteriors``)."""
    return tuple(n for n, _ in count_posteriors(intervals, period, unseen, rate_hz))


def too_ambiguous(ambiguous: int, intervals: int, short_ambiguous: int, short: int, steps: int) -> bool:
    """Whether too many intervals' counts are unsure (less than SURE) for the period to stand:
    more than MAX_AMBIGUOUS of them, unless the unsure ones are long. That is, the intervals of one
    step or two (``short``) are sure and none ``strays`` (a 3-ms gap is "surely" one step of 16
    ms, but no step of it: a burst cycle's harmonic) but for MAX_AMBIGUOUS of them, so the period
    is no harmonic and the blur of where the samples fell tells their counts apart; and the unsure
    ones, each a step off at most, are at most MAX_UNSURE_STEPS of the steps counted. Long
    intervals grow unsure by their steps' jitter alone (n steps' adds up as √n), which no rate
    narrows: an optimizer seen in one step in nine, 4.4-ms micro-batches at 500 Hz, left a third of
    its visits' gaps unsure, every one of them 6 steps or more, about a period fitted within 0.2%."""
    if ambiguous <= MAX_AMBIGUOUS * intervals:
        return False
    return not short or short_ambiguous > MAX_AMBIGUOUS * short or ambiguous > MAX_UNSURE_STEPS * steps


def strays(interval: float, n: int, period: float, rate_hz: float) -> bool:
    """Whether an interval counted as ``n`` steps lies further from them than INLIER of their
    length and two samples' blur (where the samples fell, a Laplace of scale 1/rate at each end:
    at 6.5 samples a step, 14% of one-step intervals miss by INLIER alone)."""
    return abs(interval - n * period) > INLIER * n * period + 2e9 / max(rate_hz, 1.0)


def _too_ambiguous(intervals: Sequence[float], period: float, unseen: float | None, rate_hz: float) -> bool:
    return counted_at(intervals, period, unseen, rate_hz)[0]


def counted_at(intervals: Sequence[float], period: float, unseen: float | None, rate_hz: float
               ) -> tuple[bool, int, tuple[int, ...]]:
    """The intervals counted at ``period`` (``count_posteriors``): whether too many of the counts
    are unsure (``too_ambiguous``), the steps they count in all, and each one's count (``map_counts``)."""
    posts = count_posteriors(intervals, period, unseen, rate_hz)
    short = [p < SURE or strays(i, n, period, rate_hz) for i, (n, p) in zip(intervals, posts, strict=True) if n <= 2]
    counts = tuple(n for n, _ in posts)
    steps = sum(counts)
    return too_ambiguous(sum(1 for _, p in posts if p < SURE), len(posts), sum(short), len(short), steps), steps, counts


def twos_short(intervals: Sequence[float], counts: Sequence[int]) -> bool:
    """Whether the intervals counted as two steps (``counts``) are shorter than two of those
    counted as one, by more than TWOS_SHORT_Z standard errors of their ratio (MIN_STEADY of each or
    more). Two steps of an interval whose middle boundary went unseen are as long as any two; a
    slow step the comb took for two is not: 40% of 50-ms steps slowed 1.3-2.2x, every boundary but
    13% seen at 400 Hz, gave intervals of "two" steps 0.90 times two of one (z 7.8), and a comb of
    48.5 ms counted 602 steps for the job's 469 (-14%). Of 55 single ranks on a comb drawn from
    every family of the grid, the 43 counted within 3% gave 0.90-1.07 (z over 3 on one, with 12
    intervals of two); the recorded jobs' combs, 0.94-1.10 (stop 87)."""
    one = [i for i, n in zip(intervals, counts, strict=True) if n == 1]
    two = [i for i, n in zip(intervals, counts, strict=True) if n == 2]
    if min(len(one), len(two)) < MIN_STEADY:
        return False
    m1, m2 = statistics.fmean(one), statistics.fmean(two)
    ratio = m2 / (2 * m1)
    se = ratio * math.sqrt(statistics.variance(two) / len(two) / m2 ** 2
                           + statistics.variance(one) / len(one) / m1 ** 2)
    return 1 - ratio > TWOS_SHORT_Z * se


def jitter(intervals: Sequence[float], period: float, rate_hz: float) -> float:
    """The steps' own spread (ns, one standard deviation per step): the robust spread of every
    interval about its nearest multiple of ``period``, per √n (n steps' jitter adds up), less the
    blur of where the samples fell (a Laplace of scale 1/rate: variance 2/rate²)."""
    sqrt = math.sqrt
    residuals = []
    for i in intervals:
        n = max(1, round(i / period))   # step_counts
        residuals.append(abs(i - n * period) / sqrt(n))
    residuals.sort()
    if not residuals:
        return 0.01 * period
    total = 1.4826 * residuals[len(residuals) // 2]
    blur = 1e9 / max(rate_hz, 1.0)
    return max(math.sqrt(max(total * total - 2 * blur * blur, 0.0)), 0.01 * period)


def pinned(intervals: Sequence[float], counts: Sequence[int], period: float, rate_hz: float) -> bool:
    """Whether the intervals pin the window's median step down to within MAX_STEP_ERROR.

    The single-step intervals are the steps seen whole; the others stand for steps by their
    average. When m of the window's N steps were seen whole, their median misses the median of
    all N by a standard error of about 1.25 σ √(1/m - 1/N) (σ the steps' jitter): at most
    MAX_STEP_ERROR / 3 of the period (three standard errors). The blur of the intervals'
    ends is symmetric and shrinks in the intervals of several steps; it does not count here."""
    whole = sum(1 for n in counts if n == 1)
    return whole > 0 and pins_median(whole, sum(counts), jitter(intervals, period, rate_hz), period)




def steady_median(whole: Sequence[float], total: int) -> bool:
    """Whether the median of the steps seen whole (sorted) stays within MAX_STEP_ERROR of itself
    over the order statistics it could be (three standard errors in ranks, with the finite
    window's correction; at least MEDIAN_RANKS of the steps more or less, as a few steps too short
    to see would move it), with many steps near it. Steps that jitter around one length pass;
    steps of two lengths by turns (a DataLoader whose workers deliver in bursts) can put the
    median in or at the gap between them, where a few steps more or less move it across."""
    m = len(whole)
    if not m:
        return False
    half = max(1.0, MEDIAN_RANKS * m, 1.5 * math.sqrt(m * max(1 - m / total, 0.0)))
    median = statistics.median(whole)
    # and many steps near it: steps that jitter around one length, not the gap between two
    near = sum(1 for d in whole if abs(d - median) <= NEAR_MEDIAN * median)
    return holds_over(whole, half) and near >= NEAR_SHARE * m


def blur_moves(steps: Sequence[float], rate_hz: float) -> float:
    """How far the sampling's blur moves the median of ``steps`` (sorted, each between two boundaries
    seen), relative: blurred once more as the samples blurred them (each end seen at the first sample
    after it, an exponential lag of 1/rate; their difference a Laplace spread of that scale), their
    median moves about as far as the first blur moved it (simulation-extrapolation). Not so at the
    edge of a tight cluster of steps, which the first blur moved most (``deblurred_moves``)."""
    m = len(steps)
    median = statistics.median(steps) if m else 0.0
    if m < MIN_INTERVALS or rate_hz <= 0 or median <= 0:
        return 0.0
    b = 1e9 / rate_hz
    # the blurred steps' share under x is the mean of their Laplace CDFs: 1 - e^-(x-d)/b / 2 for a step
    # d at or under x, e^-(d-x)/b / 2 over it. Those within 40 b of the median are summed through
    # running sums of e^±(d-median)/b (a bisection of the share is then a few lookups); the rest, 0 or 1
    lo_i, hi_i = bisect.bisect_left(steps, median - 40 * b), bisect.bisect_right(steps, median + 40 * b)
    near = [(d - median) / b for d in steps[lo_i:hi_i]]
    up = list(itertools.accumulate((math.exp(u) for u in near), initial=0.0))          # sums of e^u, from the left
    down = list(itertools.accumulate((math.exp(-u) for u in reversed(near)), initial=0.0))   # of e^-u, from the right

    def below(x: float) -> float:   # x in units of b from the median, within 8 of it
        k = bisect.bisect_right(near, x)
        under = k - 0.5 * math.exp(-x) * up[k]           # steps at or under x, each 1 - e^-(x-u)/2
        over = 0.5 * math.exp(x) * down[len(near) - k]   # steps over x, each e^-(u-x)/2
        return (lo_i + under + over) / m

    lo, hi = -8.0, 8.0
    if below(lo) >= 0.5 or below(hi) < 0.5:   # moved 8 b or more: a tenth of a step or more here
        return (lo if below(lo) >= 0.5 else hi) * b / median
    for _ in range(BLUR_ITERATIONS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if below(mid) < 0.5 else (lo, mid)
    return (lo + hi) / 2 * b / median


def deblurred_moves(steps: Sequence[float], rate_hz: float) -> float:
    """How far the sampling's blur moved the median of ``steps`` (sorted, each between two boundaries
    seen), relative to it: the steps as the job ran them are recovered from those seen, whose ends
    were each seen at the first sample after them (an exponential lag of 1/rate; their difference a
    Laplace spread of that scale), by Richardson-Lucy deconvolution on a grid of DEBLUR_BINS bins a
    sampling interval, DEBLUR_SPAN intervals either side of the median (DEBLUR_ITERATIONS rounds;
    the steps beyond it are counted where they lie). The spread moves most the median of a tight
    cluster of steps with slow ones beside it, which sits at the cluster's edge: 60% of steps of
    30 ms among slower ones, at 400 Hz, were seen with a median of 32.6 ms; unblurred, 30.6 (the
    job's 30.4). Blurring the seen steps once more moved it only 2% (the spread of an already spread
    cluster moves its edge less), which let a median 7% off stand until stop 86. Nothing (0) under
    DEBLUR_MIN_STEPS steps, where the recovered steps' median strays as far as the bar."""
    m = len(steps)
    median = statistics.median(steps) if m else 0.0
    if m < DEBLUR_MIN_STEPS or rate_hz <= 0 or median <= 0:
        return 0.0
    w = 1e9 / rate_hz / DEBLUR_BINS
    n = 2 * DEBLUR_SPAN * DEBLUR_BINS + 1
    start = median - DEBLUR_SPAN * DEBLUR_BINS * w   # bin i holds the steps within w/2 of start + i·w
    below = bisect.bisect_left(steps, start - w / 2)
    seen = [0.0] * n
    for d in steps[below:bisect.bisect_left(steps, start + (n - 0.5) * w)]:
        seen[min(n - 1, round((d - start) / w))] += 1
    q = math.exp(-1 / DEBLUR_BINS)   # the Laplace spread from one bin to the next
    scale = (1 - q) / (1 + q)

    def spread(x: list[float]) -> list[float]:   # x spread by the Laplace: two exponential sweeps
        out, acc = [0.0] * n, 0.0
        for i in range(n):
            acc = x[i] + q * acc
            out[i] = acc
        acc = 0.0
        for i in range(n - 1, -1, -1):
            out[i] = (out[i] + q * acc) * scale
            acc = x[i] + q * acc
        return out

    kept = spread([1.0] * n)   # what each bin's steps leave on the grid
    ran = [sum(seen) / n] * n
    for _ in range(DEBLUR_ITERATIONS):
        ratio = [s / p if p > 0 else 0.0 for s, p in zip(seen, spread(ran), strict=True)]
        ran = [r * back / k for r, back, k in zip(ran, spread(ratio), kept, strict=True)]
    half, acc = m / 2 - below, 0.0
    for i, r in enumerate(ran):
        if acc + r >= half and r > 0:
            return median / (start + (i - 0.5 + (half - acc) / r) * w) - 1
        acc += r
    return median / (start + (n - 0.5) * w) - 1


def in_valley(whole: Sequence[float], median: float) -> bool:
    """Whether the median of ``whole`` (sorted) sits in a valley between two modes: fewer than
    VALLEY_SHARE as many steps within VALLEY_NEAR of it as within VALLEY_NEAR of the busier
    quartile, VALLEY_LEAST there or more. Steps of 187 and 213 ms by turns (2 workers delivering in
    bursts, 3 micro-batches a step), blurred by jitter and the samples' lag, filled the gap enough
    for NEAR_MEDIAN: the median of the 48 seen fell in it, 201 ms, where the job's own 49 steps put
    theirs at 190 (+5.4%)."""
    def near(x: float) -> int:   # within VALLEY_NEAR of x itself: a tight mode of short steps is no denser
        return bisect.bisect_right(whole, x * (1 + VALLEY_NEAR)) - bisect.bisect_left(whole, x * (1 - VALLEY_NEAR))

    m = len(whole)
    busiest = max(near(whole[m // 4]), near(whole[(3 * m) // 4]))
    return busiest >= VALLEY_LEAST and near(median) < VALLEY_SHARE * busiest


def by_turns(lengths: Sequence[float], counts: Sequence[int], median: float) -> bool:
    """Whether steps of two lengths come by turns, so that their median is no length of either: the
    intervals of one step (``counts`` 1; ``lengths`` in order), split by the parity of their step's
    place in the window, have medians more than 2 MAX_STEP_ERROR apart and ``median`` (theirs together)
    more than MAX_STEP_ERROR from each, MIN_STEADY of each or more. 2 ranks, 3 micro-batches a
    step, 2 DataLoader workers: steps of 26 and 34 ms by turns, every other one each; at 400 Hz the
    samples' lag filled the gap (``in_valley`` saw none) and the median of the visits' spacing was
    29.9 ms, where the job's own was 27.0 or 33.5 as one step more or less decided (+10.8%)."""
    parity: list[list[float]] = [[], []]
    at = 0
    for length, n in zip(lengths, counts, strict=True):
        if n == 1:
            parity[at % 2].append(length)
        at += n
    if min(len(parity[0]), len(parity[1])) < MIN_STEADY:
        return False
    a, b = statistics.median(parity[0]), statistics.median(parity[1])
    return abs(a / b - 1) > 2 * MAX_STEP_ERROR and min(abs(median / a - 1), abs(median / b - 1)) > MAX_STEP_ERROR


def split_pairs(intervals: Sequence[float], period: float) -> bool:
    """Whether more than SPLIT_SHARE of the ``intervals`` (in order) pair up, two in a row each under
    SPLIT_PART of ``period``, to add up to it within SPLIT_SLACK: then the wraps seen are not every
    boundary with ``period`` the step. Two ranks of 14-ms steps whose DataLoaders deliver in bursts
    of 2, by turns (one step 11 ms of input and 2 of backward, the next 1 of input and 12 of its
    wait), at 400 Hz: the 2-ms visits went unseen in pairs, the 11-ms ones never, so a boundary
    showed every other step, and e^-λ over the visits seen (merged across the unseen ones) said
    0.5%; a quarter of the 28-ms intervals came split in two, 9+19, 13+16, 14+15 ms. Taken as every
    boundary, 28 ms was given as the step (+93%)."""
    pairs, i, top, slack = 0, 0, SPLIT_PART * period, SPLIT_SLACK * period
    while i + 1 < len(intervals):
        a, b = intervals[i], intervals[i + 1]
        if a < top and b < top and abs(a + b - period) <= slack:
            pairs, i = pairs + 1, i + 2
        else:
            i += 1
    return pairs > SPLIT_SHARE * len(intervals)


def holds_over(whole: Sequence[float], half: float) -> bool:
    """Whether the median of ``whole`` (sorted, not empty) stays within MAX_STEP_ERROR of itself
    over the order statistics ``half`` ranks either side of it."""
    m = len(whole)
    mid = (m - 1) / 2
    lo, hi = whole[max(0, math.floor(mid - half))], whole[min(m - 1, math.ceil(mid + half))]
    return (hi - lo) / 2 <= MAX_STEP_ERROR * statistics.median(whole)


def pins_median(whole: int, total: int, jitter_ns: float, period: float) -> bool:
    """``pinned`` for ``whole`` steps seen whole of ``total``, steps jittering by ``jitter_ns``."""
    se = 1.2533 * jitter_ns * math.sqrt(max(1 / whole - 1 / total, 0.0))
    return se <= MAX_STEP_ERROR / 3 * period


def count_posteriors(intervals: Sequence[float], period: float, unseen: float | None, rate_hz: float
                     ) -> list[tuple[int, float]]:
    """Each interval's most probable step count and how sure it is. n steps mean n - 1
    boundaries went unseen, each with probability ``unseen`` (the thread's e^-λ; None: no
    prior), and an interval of n steps is blurred by the sampling (one interval at each end)
    and by n steps' jitter (measured on the intervals near one period)."""
    if not intervals:
        return []
    count = Posterior(period, count_spread(intervals, period, rate_hz), unseen, rate_hz)
    return [count(i) for i in intervals]


def count_spread(intervals: Sequence[float], period: float, rate_hz: float) -> float:
    """How far (ns, one standard deviation per step) an interval strays from its multiple of
    ``period``: the steps' jitter and the blur of where the samples fell."""
    return math.hypot(jitter(intervals, period, rate_hz), 1e9 / max(rate_hz, 1.0))


_LN8 = math.log(8.0)   # Posterior.sure: two counts this far below the best leave it above 0.8 >= SURE


class Posterior:
    """Intervals' most probable step counts and how sure each is (see ``count_posteriors``), at
    one period and spread (``count_spread`` of the intervals they belong to); the terms that
    depend on the count alone are worked out once."""

    def __init__(self, period: float, spread: float, unseen: float | None, rate_hz: float) -> None:
        self.period = period
        blur = 1e9 / max(rate_hz, 1.0)
        self.log_miss = 0.0 if unseen is None else math.log(min(max(unseen, 1e-12), 0.999))
        self.terms: dict[int, tuple[float, float]] = {}   # n -> (2·var, ½·log var)
        self.blur2, self.spread2 = blur * blur, spread * spread

    def _terms(self, n: int) -> tuple[float, float]:
        terms = self.terms.get(n)
        if terms is None:
            var = self.blur2 + n * self.spread2
            terms = self.terms[n] = (2 * var, 0.5 * math.log(var))
        return terms

    def _scores(self, interval: float) -> tuple[int, float, list[float]]:
        period = self.period
        guess = max(1, round(interval / period))
        scores = []
        best, top = 0, -math.inf
        for n in range(max(1, guess - 1), guess + 2):
            two_var, half_log = self._terms(n)
            score = (n - 1) * self.log_miss - (interval - n * period) ** 2 / two_var - half_log
            scores.append(score)
            if score > top:   # the first of equal scores, as max() over them in order
                best, top = n, score
        return best, top, scores

    def __call__(self, interval: float) -> tuple[int, float]:
        best, top, scores = self._scores(interval)
        return best, 1.0 / sum(math.exp(v - top) for v in scores)

    def sure(self, interval: float) -> tuple[int, bool]:
        """The count, and whether its posterior is at least SURE: certainly so, without the
        sum, when the next best count scores more than ln(8) below it (two counts that far
        below add at most 1/4 to the best's 1: a posterior above 0.8)."""
        period = self.period
        guess = max(1, round(interval / period))
        best, top, second = 0, -math.inf, -math.inf
        for n in range(max(1, guess - 1), guess + 2):
            two_var, half_log = self._terms(n)
            score = (n - 1) * self.log_miss - (interval - n * period) ** 2 / two_var - half_log
            if score > top:
                best, top, second = n, score, top
            elif score > second:
                second = score
        if top - second > _LN8:
            return best, True
        n, p = self(interval)
        return n, p >= SURE


def refine_map(intervals: Sequence[float], period: float, unseen: float | None, rate_hz: float,
               rounds: int = 4) -> tuple[float, tuple[int, ...]]:
    """The period as total time over total steps under ``map_counts``, to a fixed point."""
    counts = map_counts(intervals, period, unseen, rate_hz)
    for _ in range(rounds):
        inl = [(i, n) for i, n in zip(intervals, counts, strict=True) if abs(i - n * period) <= INLIER * n * period]
        if not inl:
            break
        new = sum(i for i, _ in inl) / sum(n for _, n in inl)
        new_counts = map_counts(intervals, new, unseen, rate_hz)
        if new_counts == counts and abs(new - period) <= 1e-4 * period:
            return new, counts
        period, counts = new, new_counts
    return period, counts


def fit_period(intervals_ns: Sequence[int], rate_hz: float, unseen: float | None = None) -> PeriodFit:
    """The step period behind the observed wrap intervals, or an honest None. ``unseen`` is the
    chance that sampling misses a boundary, when it could be measured (see ``map_counts``)."""
    m = len(intervals_ns)
    ones = tuple(1 for _ in intervals_ns)
    if m == 0 or min(intervals_ns) <= 0:
        return PeriodFit(None, ones, None)
    interval_ns = 1e9 / max(rate_hz, 1.0)
    ordered = sorted(float(i) for i in intervals_ns)
    # every step is at most about as long as the shortest intervals
    upper = ordered[m // 10]
    if m < MIN_INTERVALS:
        return PeriodFit(None, ones, None, upper, why="few")
    lo = interval_ns
    hi = ordered[m // 10] * 1.2 + 2 * interval_ns
    stride = max(1, m // MAX_SCORED)
    screen = [float(i) for i in intervals_ns[::stride]]
    scored = []
    for c in _candidates(ordered, lo, hi):
        p = refine(screen, c, rounds=1)
        scored.append((concentration(screen, p), p))
    if not scored:
        return PeriodFit(None, ones, None, upper, why="short")
    scored.sort(reverse=True)
    full = [float(i) for i in intervals_ns]
    finals = []
    for _, p in scored[:6]:
        p = refine(full, p)
        if lo <= p <= hi:
            finals.append((concentration(full, p), p))
    if not finals:
        return PeriodFit(None, ones, None, upper, why="loose")
    best = max(r for r, _ in finals)
    _, period = max(((r, p) for r, p in finals if r >= HARMONIC_KEEP * best), key=lambda rp: rp[1])
    period, counts = refine_map(full, period, unseen, rate_hz)
    r_bar = concentration(full, period)
    if period > hi:
        # refined away from the shortest intervals, which a step is no longer than: a period
        # fitted among micro-batches of 3 samples (4 a step, 2 workers delivering in bursts) at
        # 11 ms drifted to a pair of them, 13.8 ms, with a tenth of the intervals under 5.2 ms
        # (-54% of the optimizer step); 2 micro-batches a step on 4 ranks, 22.6 -> 28.8 ms (-10.5%)
        return PeriodFit(None, ones, r_bar, upper, why="drifted", drifted_ns=period)
    if period < MIN_SAMPLES_PER_STEP * interval_ns:
        # steps too short to tell apart, where that short period fits the intervals or the
        # shortest of them are short themselves; a short period that fits nothing among long
        # intervals is the blur of irregular steps (Lightning's 100-260 ms steps on two busy
        # cores fitted 0.02 at a period under 5 samples), and a faster rate would not help them
        fits = r_bar >= MIN_CONCENTRATION and m * r_bar * r_bar >= MIN_RAYLEIGH_Z
        if fits or upper < TARGET_SAMPLES_PER_STEP * interval_ns:
            return PeriodFit(None, ones, r_bar, upper, why="short")
        return PeriodFit(None, ones, r_bar, upper, why="loose")
    if r_bar < MIN_CONCENTRATION or m * r_bar * r_bar < MIN_RAYLEIGH_Z:
        return PeriodFit(None, ones, r_bar, upper, why="loose")
    if _too_ambiguous(full, period, unseen, rate_hz):
        return PeriodFit(None, ones, r_bar, upper, why="ambiguous")
    if not pinned(full, counts, period, rate_hz):
        return PeriodFit(None, ones, r_bar, upper, why="jittery")
    return PeriodFit(period, counts, r_bar, upper)


def shift_cut(intervals_ns: Sequence[float], counts: Sequence[int], period_ns: float) -> int | None:
    """Where the steps changed length within the window, which no one period (``period_ns``)
    counts: the index of a split of the intervals where those counted as several steps
    (``counts``), or as long as SHIFT_RATIO periods, crowd one side, whose steps are longer
    (``crowded``), or those of one step under
    ``period_ns`` / SHIFT_RATIO crowd one side, whose steps are shorter; of both, the split where
    the sides differ most; else None. A job slowed 2x mid-window (bench/sim_grid.py's drifting
    family): its 60-ms steps, every one seen, counted as two of 30 ms; one that sped up from 16-ms
    steps to 8 at 400 Hz: the 16-ms period took its last 2 s of intervals of 3-27 ms as one step each."""
    floats = list(intervals_ns)
    # (an interval SHIFT_RATIO periods long or more counted as one step is a slow step to the period,
    # and one of two lengths to the window: 4 micro-batches of ~85 ms, then of ~150 once another
    # process took half the job's core, every return seen, were a comb of 85 ms and slow steps)
    several = crowded(floats, [n > 1 or i >= SHIFT_RATIO * period_ns for i, n in zip(floats, counts, strict=True)],
                      longer=True)
    short = crowded(floats, [n == 1 and i < period_ns / SHIFT_RATIO for i, n in zip(floats, counts, strict=True)],
                    longer=False)
    # ...or, boundaries mostly unseen (intervals of many steps), one side's counts all whole multiples of
    # j, where the rest's are not: that side's steps are j periods long (4 ranks whose optimizer steps
    # went from 40 to 20 ms, an optimizer visit seen about one step in seven: 40-ms steps counted two each)
    whole = [crowded(floats, [n % j == 0 for n in counts], longer=None, fill=SHIFT_WHOLE) for j in (2, 3)]
    found = [c for c in (several, short, *whole) if c is not None]
    return max(found)[1] if found else None


def crowded(intervals_ns: Sequence[float], marked: Sequence[bool], longer: bool | None, fill: float = SHIFT_FILLED
            ) -> tuple[float, int] | None:
    """A split of the intervals (each side MIN_INTERVALS / 2 of them or more) where the ``marked``
    ones (MIN_INTERVALS / 2 or more in all) fill ``fill`` or more of one side and of either half
    of it, SHIFT_APART times the other side's share or SHIFT_SEVERAL of them all (where ``fill``
    is SHIFT_FILLED; beyond it, the other side's share SHIFT_APART_WHOLE below it), that many there
    at most SHIFT_CHANCE likely by chance, and that side's median interval is SHIFT_RATIO times the
    other's or more (``longer``) or less (None: either): (how far the sides' marked shares are apart, the
    index of the split) of the split where they are furthest apart (the medians are about as far
    apart at many splits), else None. Boundaries that went unseen, or slow steps here and there,
    leave as many intervals of several steps on either side; a stretch of slow steps that ended
    inside the window fills one half only (tests/fixtures/truth_hand_written_slowed: 20 of 22
    intervals for 2 s, then 8 of 22). The medians are taken only at the splits whose marks
    qualify (a live tick asks this of every rank's clock)."""
    m = len(intervals_ns)
    side = MIN_INTERVALS // 2
    marks = list(itertools.accumulate(marked, initial=0))
    total = marks[-1]
    if total < side or m < MIN_INTERVALS + side:
        return None
    best: tuple[float, int] | None = None
    for cut in range(side, m - side + 1, max(1, m // 40)):
        for late in (True, False):   # the marked after the cut, or before it
            inside, outside = (m - cut, cut) if late else (cut, m - cut)
            hits = total - marks[cut] if late else marks[cut]
            filled = hits / inside
            rest = (total - hits) / outside
            if filled < fill:
                continue
            if fill > SHIFT_FILLED and rest > fill - SHIFT_APART_WHOLE:
                continue
            if fill <= SHIFT_FILLED and filled < SHIFT_APART * rest and hits < SHIFT_SEVERAL * total:
                continue
            # ...and in either half of that side: a stretch of slow steps that ended (or began)
            # inside it is no change of length (a hand-written loader's steps slowed for 2 s of 10)
            lo, hi = (cut, m) if late else (0, cut)
            mid = (lo + hi) // 2
            if marks[mid] - marks[lo] < fill * (mid - lo) or marks[hi] - marks[mid] < fill * (hi - mid):
                continue
            apart = filled - rest
            if best is not None and apart <= best[0]:
                continue
            # that many on one side by chance, where boundaries go unseen anywhere; a side as long as a
            # period's fit needs, nearly all marked, whose median the other's is SHIFT_RATIO from (below),
            # may be ten times likelier (22 optimizer steps of a loaded job, 300 then 600 ms: the last 11
            # all counted as two, 2 of the first 11: 1.1e-4). Not for whole multiples alone: a bursty
            # job's first 14 visit gaps, all even multiples of its 107-ms comb, were so by chance (<1e-3)
            long_side = longer is not None and inside >= MIN_INTERVALS and filled >= SHIFT_WHOLE
            chance = SHIFT_CHANCE_LONG if long_side else SHIFT_CHANCE
            if drawn_by_chance(m, total, inside, hits) > chance:
                continue
            if longer is not None:
                before, after = statistics.median(intervals_ns[:cut]), statistics.median(intervals_ns[cut:])
                mine, others = (after, before) if late else (before, after)
                if (mine / max(others, 1.0) if longer else others / max(mine, 1.0)) < SHIFT_RATIO:
                    continue
            best = (apart, cut)
    return best


def drawn_by_chance(n: int, marked: int, drawn: int, hits: int) -> float:
    """The chance of ``hits`` or more marked among ``drawn`` of ``n`` items of which ``marked`` are
    (the hypergeometric upper tail, summed in logs: exact integers took 9 ms at 2,000 intervals)."""
    def log_comb(a: int, b: int) -> float:
        return math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(a - b + 1)

    whole = log_comb(n, drawn)
    return sum(math.exp(log_comb(marked, k) + log_comb(n - marked, drawn - k) - whole)
               for k in range(hits, min(marked, drawn) + 1) if drawn - k <= n - marked)


def fit_at(intervals_ns: Sequence[int], period: float, rate_hz: float) -> PeriodFit:
    """The intervals checked against one period given (a synchronized peer's), where
    ``fit_period`` searches for one: refined from it and within AGREE of it, concentrated on its
    comb (R̄ at least MIN_CONCENTRATION, m·R̄² at least GIVEN_RAYLEIGH_Z: one period tested, not
    a search over many), at most MAX_AMBIGUOUS of them astray (``strays``), and their unsure
    counts at most MAX_UNSURE_STEPS of the steps (a period given is no harmonic, so the short
    intervals' own blur need not rule it out, as ``too_ambiguous`` does)."""
    full = [float(i) for i in intervals_ns]
    ones = tuple(1 for _ in full)
    if len(full) < MIN_GIVEN_INTERVALS:
        return PeriodFit(None, ones, None, why="few")
    own, counts = refine_map(full, period, None, rate_hz)
    r_bar = concentration(full, own)
    unsure = sum(1 for _, p in count_posteriors(full, own, None, rate_hz) if p < SURE)
    astray = sum(1 for i, n in zip(full, counts, strict=True) if strays(i, n, own, rate_hz))
    if abs(own / period - 1) > AGREE or r_bar < MIN_CONCENTRATION or len(full) * r_bar * r_bar < GIVEN_RAYLEIGH_Z:
        return PeriodFit(None, ones, r_bar, why="loose")
    if unsure > MAX_UNSURE_STEPS * sum(counts) or astray > MAX_AMBIGUOUS * len(full):
        return PeriodFit(None, ones, r_bar, why="ambiguous")
    return PeriodFit(own, counts, r_bar)


def suggested_rate_hz(step_upper_ns: float | None, rate_hz: float) -> int:
    """A rate that gives TARGET_SAMPLES_PER_STEP samples to a step of at most ``step_upper_ns``:
    a lower bound when steps are shorter still. Rounded up to 50 Hz, at most MAX_RATE_HZ."""
    if not step_upper_ns:
        return min(MAX_RATE_HZ, int(2 * rate_hz))
    need = TARGET_SAMPLES_PER_STEP * 1e9 / step_upper_ns
    return int(min(MAX_RATE_HZ, max(math.ceil(need / 50) * 50, rate_hz + 50)))


def visit_samples(mean_visit_samples: float) -> float:
    """λ, the mean number of samples that land outside the dominant line per step, from the
    mean number of samples in the visits that were seen (each had at least one): solves
    λ / (1 - e^-λ) = mean for a Poisson count. A step's boundary goes unseen with
    probability e^-λ."""
    if mean_visit_samples <= 1.0:
        return 0.0
    lo, hi = 0.0, max(2.0 * mean_visit_samples, 1.0)
    for _ in range(60):
        mid = (lo + hi) / 2
        if mid / (1 - math.exp(-mid)) < mean_visit_samples:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def visits_vary(visits_ns: Sequence[int], rate_hz: float) -> bool:
    """Whether the visits outside the loop's dominant place vary in length beyond what sampling
    visits of one length makes of them: then e^-λ (``visit_samples`` of their mean) bounds nothing,
    as a few long visits (a GPU job's occasional long wait) raise the mean that most steps' short
    ones fall far below. A visit of λ samples' time is seen with a zero-truncated Poisson count of
    samples, mean μ, variance μ(1 + λ - μ), each sample's gap adding μ more (exponential gaps, in
    units of 1/rate): OVERDISPERSED times that squared coefficient of variation, or more, varies."""
    if len(visits_ns) < 2:
        return False
    samples = [v * rate_hz / 1e9 for v in visits_ns]
    mean = statistics.fmean(samples)
    lam = visit_samples(mean)
    model = (mean * (1 + lam - mean) + mean) / (mean * mean)
    return statistics.pvariance(samples) / (mean * mean) > OVERDISPERSED * model
