"""The comb fit of wrap intervals (period.py), on intervals whose truth is known."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from traceml_attach.policy import BLUR_MOVES, DEBLUR_MIN_STEPS, MIN_GIVEN_INTERVALS, MIN_INTERVALS
from traceml_attach.steps.clock import SHORT, unknown_clock
from traceml_attach.steps.period import (
    PeriodFit,
    blur_moves,
    deblurred_moves,
    fit_at,
    fit_period,
    suggested_rate_hz,
    too_ambiguous,
    visit_samples,
    visits_vary,
)

MS = 1_000_000


def merged(period_ms: float, visible: float, n: int, rate_hz: float, seed: int = 0,
           jitter: float = 0.02) -> tuple[list[int], list[int]]:
    """Intervals between the boundaries that were seen: each boundary is seen with probability
    ``visible`` and one exponential sampling gap late; steps jitter by ``jitter`` (2%)."""
    rng = random.Random(seed)
    intervals, counts = [], []
    t, last_seen, k = 0.0, None, 0
    while len(intervals) < n:
        t += rng.gauss(period_ms, jitter * period_ms)
        k += 1
        if rng.random() < visible:
            # seen at the first sample after it, within the step's first part
            seen = t + min(rng.expovariate(rate_hz / 1000), 0.5 * period_ms)
            if last_seen is not None:
                intervals.append(int((seen - last_seen[0]) * MS))
                counts.append(k - last_seen[1])
            last_seen = (seen, k)
    return intervals, counts


@pytest.mark.parametrize(("period_ms", "visible"), [(83, 0.35), (120, 0.9), (300, 0.15), (60, 0.6)])
def test_the_period_is_found_when_most_boundaries_are_missed(period_ms, visible):
    intervals, counts = merged(period_ms, visible, 60, rate_hz=100)
    fit = fit_period(intervals, 100)
    assert fit.period_ns is not None
    assert abs(fit.period_ns / MS / period_ms - 1) < 0.03
    # nearly every interval is counted right, and the total is
    right = sum(a == b for a, b in zip(fit.counts, counts, strict=True))
    assert right >= 0.9 * len(counts)
    assert abs(sum(fit.counts) - sum(counts)) <= 0.05 * sum(counts)


@pytest.mark.parametrize("seed", [0, 1, 3])   # of seeds 0-7: 2 and 4 fit no comb ("loose"), 6 is "short", 5 and 7
def test_long_intervals_unsure_by_their_jitter_alone_leave_the_period_known(seed):   # have 5%+ unsure
    # an optimizer seen in one step in nine (13-ms steps at 500 Hz, 5% jitter): the gaps of 6 steps
    # or more are unsure by their steps' jitter (n steps' adds up as its square root), a third of
    # them, while the gaps of one step or two are sure; the period and the total count still hold
    intervals, counts = merged(13, 0.11, 90, rate_hz=500, seed=seed, jitter=0.05)
    fit = fit_period(intervals, 500)
    assert fit.period_ns is not None, fit.why
    assert abs(fit.period_ns / MS / 13 - 1) < 0.01
    assert abs(sum(fit.counts) - sum(counts)) <= 0.03 * sum(counts)


def test_unsure_counts_rule_a_period_out_where_they_are_short_or_many():
    # up to a tenth of the intervals unsure: the period stands whatever they are
    assert not too_ambiguous(8, 90, 8, 18, 100)
    # a third unsure, all of them long (1 of 18 of one step or two), 35 of 800 steps: it stands
    assert not too_ambiguous(35, 90, 1, 18, 800)
    # ...but not where the short ones are unsure too: the blur, or a harmonic, makes them one step or two
    assert too_ambiguous(35, 90, 4, 18, 800)
    assert too_ambiguous(35, 90, 0, 0, 800)   # none short to tell
    # ...nor where the unsure ones, each a step off at most, are over 5% of the steps counted
    assert too_ambiguous(35, 90, 1, 18, 600)


def test_the_fundamental_wins_over_its_divisors():
    # every boundary seen, hardly any blur: T/2, T/3 fit these intervals too, but T is the step
    intervals, _ = merged(100, 1.0, 40, rate_hz=1000)
    fit = fit_period(intervals, 1000)
    assert fit.period_ns is not None and abs(fit.period_ns / MS - 100) < 2
    assert set(fit.counts) == {1}


def test_intervals_that_fit_no_comb_give_no_period():
    rng = random.Random(3)
    intervals = [int(rng.uniform(40, 400) * MS) for _ in range(80)]
    fit = fit_period(intervals, 100)
    assert fit.period_ns is None
    assert fit.counts == tuple(1 for _ in intervals)


def test_steps_shorter_than_a_few_samples_give_no_period():
    # 20 ms steps at 100 Hz: a boundary's blur (10 ms) is half a step
    intervals, _ = merged(20, 0.5, 100, rate_hz=100, seed=1)
    fit = fit_period(intervals, 100)
    assert fit.period_ns is None
    # the rate that would give 10 samples to a step as long as the shortest intervals, or more
    assert suggested_rate_hz(fit.upper_bound_ns, 100) >= 250


def test_steps_shorter_than_a_few_samples_are_said_to_be_short():
    intervals, _ = merged(20, 0.5, 100, rate_hz=100, seed=1)
    assert fit_period(intervals, 100).why == "short"


@pytest.mark.parametrize("seed", range(40))
def test_long_irregular_steps_are_not_said_to_be_short(seed):
    # 70 steps of 95-260 ms at 100 Hz, every one seen: a period under 5 samples may score best
    # among the candidates, fitting nothing (Lightning's steps on two busy cores: R̄ 0.02); the
    # steps are irregular, and a faster rate would not help them
    rng = random.Random(seed)
    intervals = [int(rng.uniform(95, 260) * MS) for _ in range(70)]
    for unseen in (None, 0.3):
        fit = fit_period(intervals, 100, unseen)
        assert fit.why != "short", (fit.concentration, fit.upper_bound_ns)
        if fit.period_ns is None:
            assert unknown_clock(fit, 70, 100, unseen).cause != SHORT


def test_too_few_intervals_give_no_period():
    intervals, _ = merged(100, 1.0, MIN_INTERVALS - 1, rate_hz=100)
    assert fit_period(intervals, 100).period_ns is None


def test_a_period_given_is_tested_on_fewer_intervals_than_a_search():
    # a rank's 9 optimizer visits in a 10-s window of 800-ms steps (one unseen: 1,600 ms), checked
    # against its synchronized peers' period: too few for a search, enough for one period given
    intervals = [1556, 805, 803, 793, 818, 780, 811, 789, 806]
    assert len(intervals) < MIN_INTERVALS and fit_period([i * MS for i in intervals], 100).period_ns is None
    fit = fit_at([i * MS for i in intervals], 800 * MS, 100)
    assert fit.period_ns is not None and abs(fit.period_ns / (800 * MS) - 1) < 0.01
    assert fit.counts == (2, 1, 1, 1, 1, 1, 1, 1, 1)
    # ...but no fewer than MIN_GIVEN_INTERVALS, however well they sit on it
    assert fit_at([800 * MS] * (MIN_GIVEN_INTERVALS - 1), 800 * MS, 100).why == "few"
    # and a period they do not sit on is not taken, however many (lengths spread over 1-2 periods)
    spread = [int((800 + 800 * ((i * 0.618) % 1)) * MS) for i in range(9)]
    assert fit_at(spread, 800 * MS, 100).period_ns is None


@pytest.mark.parametrize("lam", [0.05, 0.5, 2.0, 6.0])
def test_visit_samples_inverts_the_poisson_mean_of_visits_seen(lam):
    mean_seen = lam / (1 - math.exp(-lam))
    assert visit_samples(mean_seen) == pytest.approx(lam, rel=1e-6)
    assert visit_samples(1.0) == 0.0


def test_most_boundaries_unseen_is_said_where_it_is_why_no_period_fits():
    ones = (1,) * 11
    # a short period fitted to 11 long intervals (the shortest tenth 333 ms, 33 samples at 100 Hz)
    # while ~80% of the boundaries go unseen (a 50-ms step 99% in one phase): a harmonic of the few
    # seen, not steps under 5 samples
    clock = unknown_clock(PeriodFit(None, ones, 0.9, 333e6, why="short"), 11, 100, unseen=0.8)
    assert clock.reason == ("the 11 boundaries seen fit no step period: 80% or more of the step boundaries go "
                            "unseen, as a step spends too little time outside its main phase for 100 Hz to catch "
                            "it there")
    assert clock.cause is None and clock.suggested_rate_hz is not None   # a faster rate catches more
    # ...but where the shortest intervals themselves are under 5 samples, the steps may be that short
    assert unknown_clock(PeriodFit(None, ones, 0.9, 30e6, why="short"), 11, 100, unseen=0.8).cause == SHORT
    # and with boundaries mostly seen, the old words
    seen = unknown_clock(PeriodFit(None, ones, 0.9, 333e6, why="short"), 11, 100, unseen=0.05)
    assert seen.cause == SHORT and seen.reason.startswith("steps shorter than 5 samples")
    # too few boundaries, most of them unseen: a longer window, and a faster rate
    few = unknown_clock(PeriodFit(None, (1,) * 8, None, 180e6, why="few"), 8, 100, unseen=0.48)
    assert few.reason.startswith("only 8 step boundaries were seen (a period needs 10): sample longer; 48% or more")
    assert few.reason.endswith("so a faster rate would show more of them")
    # e^-λ is a share of the boundaries: at 1.0 "nearly all", never "100% or more"
    none = unknown_clock(PeriodFit(None, (1,) * 2, None, 900e6, why="few"), 2, 50, unseen=1.0)
    assert "nearly all of the step boundaries go unseen" in none.reason and "100%" not in none.reason


def seen_visits(lengths_ms: list[float], rate_hz: float, rng: random.Random) -> list[int]:
    """The visits py-spy sees (ns): Poisson samples at ``rate_hz`` in visits of these lengths,
    each seen one with the time its samples cover (an exponential gap each)."""
    out = []
    for length in lengths_ms:
        t, k = rng.expovariate(rate_hz / 1e3), 0
        while t < length:
            k += 1
            t += rng.expovariate(rate_hz / 1e3)
        if k:
            out.append(int(sum(rng.expovariate(rate_hz) for _ in range(k)) * 1e9))
    return out


@pytest.mark.parametrize("visit_ms", [5.0, 15.0, 40.0])
def test_visits_of_one_length_do_not_vary_beyond_sampling(visit_ms):
    # GIVEN visits outside the dominant place all 5-40 ms long (0.5-4 samples at 100 Hz), jittered 10%
    rng = random.Random(1)
    visits = seen_visits([visit_ms * rng.uniform(0.9, 1.1) for _ in range(300)], 100, rng)
    # THEN their spread is sampling's: e^-λ of their mean stands
    assert not visits_vary(visits, 100)


def test_a_few_long_visits_among_short_ones_vary():
    # GIVEN a GPU job's host: 5-ms visits outside the dominant place, and one step in ten waiting
    # 150 ms there (a recorded one had 19 times sampling's spread, e^-λ 2% for most steps' ~40%)
    rng = random.Random(2)
    visits = seen_visits([150.0 if i % 10 == 0 else 5.0 for i in range(300)], 100, rng)
    # THEN they vary beyond it
    assert visits_vary(visits, 100)


def _blurred_median(steps: list[float], b: float) -> float:
    """The median of ``steps`` each spread by a Laplace of scale ``b``, by brute force."""
    def below(x: float) -> float:
        shares = (0.5 * math.exp((x - d) / b) if x < d else 1 - 0.5 * math.exp((d - x) / b) for d in steps)
        return sum(shares) / len(steps)

    lo, hi = min(steps) - 50 * b, max(steps) + 50 * b
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if below(mid) < 0.5 else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("seed", range(4))
def test_the_blurs_move_of_a_median_is_the_brute_force_one(seed):
    # GIVEN steps of 25 ms with one of about 57 ms in three (a skewed mixture), or jittering around
    # one length, sampled at 400 Hz
    rng = random.Random(seed)
    skewed = seed % 2 == 0
    steps = sorted(rng.choice((25e6, 25e6, 57e6) if skewed else (30e6,)) * rng.gauss(1, 0.05) for _ in range(300))
    b = 1e9 / 400
    # WHEN the blur's move is worked out by running sums THEN it is the brute-force one
    median = (steps[149] + steps[150]) / 2
    want = _blurred_median(steps, b) / median - 1
    assert blur_moves(steps, 400) == pytest.approx(want, abs=1e-4)
    # ...and only the skewed steps move beyond BLUR_MOVES's 3%
    assert (abs(want) > 0.03) == skewed


@pytest.mark.parametrize("seed", range(6))
def test_the_blurs_move_of_a_median_is_found_from_the_steps_seen(seed):
    # GIVEN steps of 30 ms, 40% of them slowed 1.3-2.2 times (the median at the short steps' edge),
    # or jittering 5% around one length, or with a smooth tail of slower ones (the mean 4% over the
    # median), each end seen at the first sample after it at 400 Hz (an exponential lag)
    rng = random.Random(seed)
    shape = ("skewed", "jitter", "tail")[seed % 3]
    if shape == "skewed":
        ran = [30e6 * (rng.uniform(1.3, 2.2) if rng.random() < 0.4 else rng.gauss(1, 0.02)) for _ in range(300)]
    elif shape == "jitter":
        ran = [30e6 * rng.gauss(1, 0.05) for _ in range(300)]
    else:
        ran = [30e6 * (1 + rng.expovariate(1 / 0.15)) for _ in range(300)]
    ends = list(itertools.accumulate(ran, initial=0.0))
    seen_at = [t + rng.expovariate(400) * 1e9 for t in ends]
    seen = sorted(b - a for a, b in itertools.pairwise(seen_at))
    true_move = statistics.median(seen) / statistics.median(ran) - 1
    # WHEN the steps as the job ran them are recovered from those seen
    moved = deblurred_moves(seen, 400)
    # THEN the blur's move is found within a point and a half (a median of 300 seen steps strays by
    # about that much by itself), and only the skewed steps' is beyond BLUR_MOVES's 3%
    assert moved == pytest.approx(true_move, abs=0.015), (shape, true_move)
    assert (abs(moved) > BLUR_MOVES) == (shape == "skewed"), (shape, moved, true_move)
    # ...and on fewer steps than DEBLUR_MIN_STEPS, where its median strays as far as the bar, nothing
    assert deblurred_moves(sorted(seen[:DEBLUR_MIN_STEPS - 1]), 400) == 0.0


def test_a_few_boundaries_seen_ask_for_a_longer_window_and_a_faster_rate_only_where_they_go_unseen():
    # GIVEN one boundary seen in a window (a hung rank, a restarted worker in init_process_group),
    # its "upper bound" an 11-ms stretch: no sign of short steps, which return often
    few = PeriodFit(None, (1,), None, 11e6, why="few")
    clock = unknown_clock(few, 1, 100, unseen=None)
    # THEN it says to sample longer, and no faster rate (a snapshot said "sample faster: --rate 850")
    assert clock.reason is not None and clock.reason.endswith("sample longer")
    assert clock.suggested_rate_hz is None
    # AND where the boundaries mostly go unseen, a faster rate would show more of them: it says so
    unseen = unknown_clock(few, 3, 100, unseen=0.9)
    assert unseen.suggested_rate_hz is not None and "a faster rate would show more of them" in (unseen.reason or "")
