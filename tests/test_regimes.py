"""Steps that change length within the window (clock.by_regimes, period.shift_cut), on intervals whose
truth is known: each side counted on a period of its own, or the step time unknown, never one period's
count of both."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from traceml_attach.steps.clock import clock_of, drift_clock, one_clock
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


def ramp(start_ms: float, end_ms: float, steps: int, pieces: int = 40) -> list[tuple[float, int]]:
    """Steps whose length moves from ``start_ms`` to ``end_ms`` through the window, as stretches."""
    each = steps // pieces
    return [(start_ms + (end_ms - start_ms) * i / (pieces - 1), each) for i in range(pieces)]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("start", "end", "visible"), [(34, 17, 0.97), (17, 34, 0.97), (40, 16, 0.92), (14, 30, 0.98)])
def test_steps_that_drift_in_length_are_counted_on_their_local_step(seed, start, end, visible):
    # GIVEN steps that drift in length through the window (another process taking a shrinking or
    # growing part of the job's cores), nearly every boundary seen at 400 Hz
    intervals, truth = intervals_of(ramp(start, end, 400), visible, 400, seed, jitter=0.1)
    unseen = 1 - visible
    # WHEN its clock is read
    clock, counts = clock_of(intervals, unseen, 400)
    # THEN every step is counted, and the step given is within 3% of theirs: the mean, said so, with
    # where it began and ended, where one comb does not hold them (it may, where no interval is
    # half a period off it: then their median)
    assert clock.known, clock.reason
    assert abs(sum(counts) - len(truth)) <= 0.03 * len(truth)
    if clock.mean:
        assert abs(clock.period_ns / MS / statistics.fmean(truth) - 1) < 0.03
    else:
        steps = [d / n for d, n in zip(intervals, counts, strict=True) for _ in range(n)]
        assert abs(statistics.median(steps) / MS / statistics.median(truth) - 1) < 0.05
    if clock.shift_ns is not None:
        first, last = (x / MS for x in clock.shift_ns)
        assert (first > last) == (start > end) and abs(max(first, last) / min(first, last) - 1) > 0.5


@pytest.mark.parametrize("seed", range(5))
def test_drifting_steps_with_slow_ones_among_them_are_not_counted_on_their_local_step(seed):
    # GIVEN the same drift, and one step in eight twice as slow (which a count cannot tell from two steps)
    rng = random.Random(seed)
    stretches = [(ms * (2 if rng.random() < 0.125 else 1), 1) for ms, n in ramp(34, 17, 400) for _ in range(n)]
    intervals, _ = intervals_of(stretches, 0.97, 400, seed, jitter=0.1)
    clock, _ = clock_of(intervals, 0.03, 400)
    # THEN no count of them is given as the steps'
    assert not (clock.known and clock.shift_ns is not None and clock.method == "comb"), clock


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("stretches", "unseen"), [([(25, 400)], 0.03), ([(34, 200), (17, 400)], 0.4)])
def test_no_drift_is_read_into_steady_steps_nor_where_many_boundaries_go_unseen(seed, stretches, unseen):
    # GIVEN steady steps (jitter 20%), or a drift whose boundaries mostly go unseen
    intervals, _ = intervals_of(stretches, 1 - unseen, 400, seed, jitter=0.2)
    # THEN no local-step clock is made of them
    assert drift_clock([float(i) for i in intervals], unseen, 400) is None


def test_slow_steps_that_crowd_one_end_by_chance_are_no_drift():
    # GIVEN a job whose steps are slowed 1.3-2.2 times at random, one in ten (the grid's
    # uneven:200:0.1:50:1:480000), a few of its boundaries unseen: its 36 intervals (ms), more of
    # the slow ones late, so that the local step reads 201 ms in the first quarter and 266 in the last
    intervals = [611, 201, 182, 246, 161, 219, 187, 201, 189, 190, 212, 220, 170, 339, 560, 216, 148, 434, 190,
                 245, 267, 123, 420, 359, 306, 230, 340, 421, 186, 266, 494, 107, 396, 219, 233, 169]
    durations = [float(ms * MS) for ms in intervals]
    # THEN they are not read as steps drifting in length (whose mean it would give, saying they changed)
    assert drift_clock(durations, 0.086, 50) is None
