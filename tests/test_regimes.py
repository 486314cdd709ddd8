"""Steps that change length within the window (clock.by_regimes, period.shift_cut), on intervals whose
truth is known: each side counted on a period of its own, or the step time unknown, never one period's
count of both."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from traceml_attach.steps.clock import clock_of, one_clock
from traceml_attach.steps.period import shift_cut

MS = 1_000_000


def intervals_of(stretches: list[tuple[float, int]], visible: float, rate_hz: float, seed: int = 0,
                 jitter: float = 0.02) -> tuple[list[int], list[float]]:
    """The intervals between the boundaries seen of steps ``stretches`` long ((ms, steps), in turn),
    each boundary seen with probability ``visible`` at the first sample after it; and the steps'
    own lengths (ms) between the first boundary seen and the last."""
    rng = random.Random(seed)
    t, seen, steps = 0.0, [], []
    for period_ms, n in stretches:
        for _ in range(n):
            step = rng.gauss(period_ms, jitter * period_ms)
            t += step
            steps.append((t, step))
            if rng.random() < visible:
                seen.append(t + min(rng.expovariate(rate_hz / 1000), 0.3 * period_ms))
    intervals = [int((b - a) * MS) for a, b in itertools.pairwise(seen)]
    lengths = [step for end, step in steps if seen[0] < end <= seen[-1]]
    return intervals, lengths


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("fast", [40, 100, 200])
def test_a_job_that_slowed_is_counted_on_each_side_not_on_the_faster_period(seed, fast):
    # GIVEN 30-ms steps, then 60-ms ones (a job another process slowed 2x), every boundary seen
    intervals, truth = intervals_of([(30, fast), (60, 100)], 1.0, 400, seed)
    # (where the 30-ms steps are the most, one period counts every 60-ms step as two of them)
    if fast == 200:
        _, one = one_clock(intervals, 0.001, 400)
        assert sum(one) > 1.25 * len(truth)
    # WHEN its clock is read
    clock, counts = clock_of(intervals, 0.001, 400)
    # THEN the steps are counted right, each side on its own period
    assert clock.known and clock.shift_ns is not None
    assert abs(sum(counts) - len(truth)) <= 0.03 * len(truth)
    before, after = clock.shift_ns
    assert abs(before / MS / 30 - 1) < 0.05 and abs(after / MS / 60 - 1) < 0.05
    # ...and the step it gives is their mean, said so: no median of two lengths is one to give
    assert clock.mean and abs(clock.period_ns / MS / statistics.fmean(truth) - 1) < 0.02


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("stretches", [((200, 120), (100, 300)), ((100, 300), (200, 120)), ((160, 150), (80, 300))])
def test_a_job_whose_speed_changed_with_half_its_boundaries_unseen_is_counted_on_each_side(seed, stretches):
    # GIVEN steps that halve or double in length, half their boundaries seen at 100 Hz
    intervals, truth = intervals_of(list(stretches), 0.5, 100, seed)
    # (one period, the shorter, counts each longer step as two)
    _, one = one_clock(intervals, None, 100)
    assert sum(one) > 1.2 * len(truth)
    # THEN each side is counted on its own comb, the longer one's up to where its intervals leave it
    # (the shorter comb fits the longer one's intervals too: ``refined_cut``)
    clock, counts = clock_of(intervals, None, 100)
    assert clock.known and clock.mean
    assert abs(sum(counts) - len(truth)) <= 0.03 * len(truth)
    assert abs(clock.period_ns / MS / statistics.fmean(truth) - 1) < 0.03


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize(("period_ms", "visible", "rate_hz"), [(30, 1.0, 400), (80, 0.5, 100), (200, 0.25, 50)])
def test_steps_of_one_length_show_no_change(seed, period_ms, visible, rate_hz):
    # GIVEN steps of one length, their boundaries seen or missed at random
    intervals, _ = intervals_of([(period_ms, 300)], visible, rate_hz, seed, jitter=0.05)
    clock, counts = one_clock(intervals, 0.001 if visible == 1.0 else None, rate_hz)
    # THEN no split is read into them (boundaries missed anywhere leave as many intervals of several
    # steps on either side)
    assert clock.known and clock.period_ns is not None
    assert shift_cut([float(i) for i in intervals], counts, clock.period_ns) is None


def test_a_change_a_few_intervals_before_the_end_leaves_the_step_known():
    # GIVEN 150 steps of 30 ms, then 5 of 60 (a live window that ends just after the job slowed)
    intervals, truth = intervals_of([(30, 150), (60, 5)], 1.0, 400)
    clock, counts = clock_of(intervals, 0.001, 400)
    # THEN the 30-ms steps' median stands: the few at the end cannot move it, however counted
    assert clock.known and abs(clock.period_ns / MS / 30 - 1) < 0.05
    assert sum(counts) <= len(truth) + 5


def test_a_change_too_near_the_edge_to_count_and_big_enough_to_matter_is_unknown_and_says_why():
    # GIVEN 24 steps of 350 ms, then 8 of 700, every boundary seen, at 50 Hz
    intervals, _ = intervals_of([(350, 24), (700, 8)], 1.0, 50, seed=1)
    assert one_clock(intervals, 0.001, 50)[0].known   # (one period: 40 steps of 350 ms)
    clock, _ = clock_of(intervals, 0.001, 50)
    # THEN no step time: the 8 could move the median anywhere between the two
    assert not clock.known
    assert clock.reason is not None and "changed length" in clock.reason and "sample longer" in clock.reason
    assert clock.suggested_rate_hz is None   # long steps: no faster rate would help
