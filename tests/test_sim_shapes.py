"""The simulator's shapes nobody designed the estimator for (testkit/simulator.py): the whole step
under one line of the loop frame (a wrapper, a framework's loop), gradient accumulation, bursty
DataLoader delivery. First the simulator itself: its truth and its stacks are what they claim.
Then the estimator on a few such jobs: a step time it gives is within 5% of the truth, or it
gives none (never a wrong number)."""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import statistics
from dataclasses import replace

import pytest

from testkit.simulator import (
    ACC,
    ALL_SHAPES,
    LIBRARIES,
    SHAPES,
    Job,
    RankWork,
    Truth,
    _job_stacks,
    job,
    shaped_job,
    simulate,
    true_timeline,
)
from traceml_attach.diagnose.analysis import Analysis, analyze
from traceml_attach.diagnose.rate import advise_rates
from traceml_attach.steps.classify import classify, load_rules
from traceml_attach.steps.steptime import RankStepStats

RULES = load_rules()
MS = 1_000_000
LOOP_FRAMES = ("train", "_TrainingEpochLoop.advance", "Trainer._run_epoch", "Trainer._inner_training_loop")


# --- the existing shapes are simulated exactly as before -------------------------------------

def digest(the_job: Job, rate_hz: float, seed: int, **faults: float) -> str:
    rec, truths = simulate(the_job, rate_hz, 3.0, seed=seed, **faults)
    h = hashlib.sha256()
    for pid in sorted(rec.spans):
        for s in rec.spans[pid]:
            h.update(repr((s.ts_ns, s.dur_ns, [(fr.name, fr.line) for fr in s.stack])).encode())
        h.update(repr(rec.cpu[pid]).encode())
    h.update(repr([(t.bounds_ns, t.phases_ns) for t in truths]).encode())
    return h.hexdigest()[:16]


def legacy_jobs() -> list[tuple[Job, float, int, dict[str, float]]]:
    out = []
    for i in range(6):
        rng = random.Random(i)
        ranks = (1, 2, 4)[i % 3]
        dominant = "wait" if ranks > 1 else ("input", "backward")[i % 2]
        the_job = job((5, 30, 200)[i % 3], dominant, (0.5, 0.9)[i % 2], ranks=ranks, rng=rng,
                      jitter=(0.0, 0.05, 0.15)[i % 3], shape=SHAPES[i % 3], sub_stacks=(1, 3)[i % 2])
        faults = {"error_rate": 0.05, "stall_rate": 0.5, "stall_ms": 100.0} if i % 2 else {}
        out.append((the_job, (50, 100, 200)[i % 3], i, faults))
    return out


# sha256 of the spans, CPU rows and truths of legacy_jobs(), as the simulator gave them before
# the new shapes, accumulation and bursty delivery were added; the jobs with sub-stacks changed
# once since, on purpose: each phase's sub-stacks became its own kind of call (an optimizer's under
# torch/optim, a fetch's under collate), where every phase had called into nn.functional, which made
# two thirds of an optimizer's samples forward
LEGACY_DIGESTS = ["f86d43ebd0756829", "9ad697d87faf71fe", "045e6402c1503bf2", "f97d5d1efbc1752c",
                  "ec12818b2f1462ea", "eb9543ae5ba73072"]


def test_existing_shapes_are_simulated_exactly_as_before():
    assert [digest(j, rate, seed, **faults) for j, rate, seed, faults in legacy_jobs()] == LEGACY_DIGESTS


def test_a_new_shape_without_accumulation_or_bursts_changes_only_the_stacks():
    work = RankWork(3.0, 1.0, 20.0, 30.0, 6.0)
    base = true_timeline(Job((work, work), jitter=0.1), 2.0, seed=3)[1]
    for shape in ("wrapper", "library"):
        truths = true_timeline(Job((work, work), jitter=0.1, shape=shape), 2.0, seed=3)[1]
        assert [t.bounds_ns for t in truths] == [t.bounds_ns for t in base]
        assert [t.phases_ns for t in truths] == [t.phases_ns for t in base]
    assert base[0].micro_batches == 1 and base[0].micro_bounds_ns == base[0].bounds_ns
    assert len(base[0].optimizer_ns) == len(base[0].bounds_ns) - 1


@pytest.mark.parametrize("accumulation", [1, 4])
def test_a_drifting_job_runs_slower_where_it_says(accumulation):
    # GIVEN 20-ms steps (k micro-batches each) 2.5 times slower at the start, easing to their own
    # speed ("ramp"), and 2 times slower on one side of a moment ("shift")
    work = RankWork(2.0, 1.0, 6.0 / accumulation, 9.0 / accumulation, 2.0)
    ramp = true_timeline(Job((work,), jitter=0.02, accumulation=accumulation, drift=2.5), 10.0, seed=1)[1][0]
    steps = [b - a for a, b in itertools.pairwise(ramp.bounds_ns)]
    # THEN the first steps are ~2.5 times the last
    assert 2.2 < statistics.median(steps[:5]) / statistics.median(steps[-5:]) < 2.6
    shift = true_timeline(Job((work,), jitter=0.02, accumulation=accumulation, drift=2.0, drift_kind="shift"),
                          10.0, seed=1)[1][0]
    steps = sorted(b - a for a, b in itertools.pairwise(shift.bounds_ns))
    # ...and a shift makes two lengths, 2 times apart, each a tenth of the steps or more
    tenth = len(steps) // 10
    assert 1.8 < steps[-tenth] / steps[tenth] < 2.2
    with pytest.raises(ValueError):
        Job((work,), drift=2.0, drift_kind="wave")


@pytest.mark.parametrize(("spec", "rate_hz"), [("drifting:30:shift/2:100:2:285000", 400),
                                               ("drifting:20:shift/2:200:1:228000", 400)])
def test_a_job_whose_steps_changed_length_is_counted_on_each_side_and_given_its_mean(spec, rate_hz):
    # GIVEN a job slowed 2x at a moment inside the window (30 ms, then 60; 20, then 40), every
    # boundary seen. One period counted each longer step as two of the shorter (333 steps for the
    # job's 196, -49.6%), or each shorter as half of the longer (+23.4%)
    an, truths, lo, hi = grid_window(spec, rate_hz)
    for r, truth in zip(an.ranks, truths, strict=True):
        # THEN every step is counted, and the step given is their mean, said so, with the two lengths
        assert r.clock is not None and r.clock.mean and r.clock.shift_ns is not None, r.clock
        assert abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03
        assert r.step_ms is not None and abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.02
        before, after = sorted(r.clock.shift_ns)
        assert 1.8 < after / before < 2.2 and before < r.step_ms * 1e6 < after
    note = an.report.step_time.step_time_note or ""
    assert "the steps changed length within the window" in note, note
    assert all(r.clock is not None and r.clock.shift_ms is not None for r in an.report.step_time.ranks.values())


def test_a_job_whose_steps_drift_in_length_is_counted_on_its_local_step_and_given_its_mean():
    # GIVEN 8 ranks whose 13-ms steps run 2.5 times slower at the start of the window, nearly every
    # boundary seen at 400 Hz: no one period fits them ("steps may be shorter than 5 samples"), and
    # the one rank that saw every boundary found no typical step, which left every rank unknown
    an, truths, lo, hi = grid_window("drifting:13:ramp/2.5:100:8:147000", 400)
    for r, truth in zip(an.ranks, truths, strict=True):
        # THEN every step is counted, and the step given is their mean, said so
        assert r.clock is not None and r.clock.mean, r.clock
        assert abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03
        assert r.step_ms is not None and abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.02
    # ...with where the steps began and ended, on the ranks counted on their local step
    drifted = [r.clock.shift_ns for r in an.ranks if r.clock is not None and r.clock.shift_ns is not None]
    assert len(drifted) >= 4 and all(first / last > 1.4 for first, last in drifted), drifted


def test_a_change_one_synchronized_rank_saw_leaves_its_peers_no_step_of_one_period():
    # GIVEN 8 ranks of 2 micro-batches, 6 optimizer steps of ~700 ms, then 13 of ~350, at 50 Hz:
    # some ranks' tests find the change (too few steps before it for a period of their own), the
    # others' do not, and their 350-ms comb counted 27 steps for 20 (-26% on the mean), which the
    # ranks that found it were then given
    spec = "drifting:320:shift/2:50:8:583000"
    an, _, _, _ = grid_window(spec, 50)
    # THEN no rank is given a step time: those whose one period the change made wrong say the change,
    # and every rank asks for a longer window, none for a rate
    reasons = [(r.clock.reason or "") if r.clock else "" for r in an.ranks]
    assert all(r.step_ms is None for r in an.ranks), [(r.rank, r.step_ms, r.steps) for r in an.ranks]
    assert any("the steps changed length within the window" in why for why in reasons), reasons
    assert all("sample longer" in why for why in reasons), reasons
    assert all(r.clock is not None and r.clock.suggested_rate_hz is None for r in an.ranks)
    # ...and sampled on (as the snapshot does where too few boundaries were seen), each side is
    # counted on its own: the mean within 5%, every step counted
    an, truths, lo, hi = grid_window(spec, 50, 30.0)
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.05, r.rank
        assert abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03


def test_a_change_one_rank_saw_in_its_returns_counts_every_ranks_visits_on_each_side():
    # GIVEN 4 ranks of 4 micro-batches a step, 2x slower for the first 6.5 s of 30 (16 steps of 400 ms,
    # then 116 of 200), a 1% optimizer at 100 Hz: rank 0's returns found the change (micro-batches of
    # 99 ms, then 51); its peers' (a tenth unseen) did not, and every rank's visits, a sixth of the steps
    # seen, fitted one 200-ms period that counted each 400-ms step as two (149 steps, -10.8% on the mean)
    an, truths, lo, hi = grid_window("drifting:200:shift/2:100:4:526000", 100, 30.0)
    # THEN every rank's visits are counted on each side of the change: the mean within 5%, counts within 3%
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.clock is not None and r.clock.mean and r.clock.shift_ns is not None, (r.rank, r.clock)
        assert r.step_ms is not None and abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.05, r.rank
        assert abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03, (r.rank, r.steps, truth.steps_in(lo, hi))


def test_a_change_the_returns_found_but_could_not_count_counts_the_visits_on_each_side():
    # GIVEN one process of 4 micro-batches a step, 25-ms micro-batches for 7.4 s of 10 and then 12.5-ms
    # ones, a 1% optimizer, at 400 Hz: its returns' clock found the change but could not count the
    # faster side (5 samples a micro-batch), and the optimizer's visits fitted one 50-ms comb that
    # counted each 100-ms step before the change as two (198 steps for 137, the mean -30.8%)
    an, truths, lo, hi = grid_window("drifting:50:shift/2:100:1:344001", 400)
    (r,), (truth,) = an.ranks, truths
    # THEN the visits are counted on each side of the change: the mean within 5%, counts within 3%
    assert r.clock is not None and r.clock.mean and r.clock.shift_ns is not None, r.clock
    assert r.step_ms is not None and abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.05, r.step_ms
    assert abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03, (r.steps, truth.steps_in(lo, hi))


def test_gaps_timed_over_a_period_the_job_drifted_from_leave_accumulation_in_doubt():
    # GIVEN 2 ranks of 2 micro-batches a step, 1.5x slower at the start of the window and at their own
    # speed by its end, a 1% optimizer seen in 5-7% of the micro-batches, at 400 Hz: the returns' comb
    # (12.5 ms, a micro-batch) timed the gaps between the optimizer's visits over one period, and a
    # drifted micro-batch now and then made a gap odd (11 of 42 on rank 0, most of them long) where
    # every one is even; a tenth of the gaps miscounted ruled k = 2 out, and the micro-batch was given
    # as the step (12.58 ms for 24.63: -48.9%, 776 steps for 403)
    an, _, _, _ = grid_window("drifting:20:ramp/1.5:100:2:185000", 400)
    # THEN no step time is given: the long gaps' counts are as unsure as the intervals' lengths say, and
    # the even gaps make accumulation of 2 likelier than none
    assert all(r.step_ms is None for r in an.ranks), [(r.step_ms, r.steps) for r in an.ranks]
    reasons = [r.clock.reason or "" for r in an.ranks if r.clock is not None]
    assert len(reasons) == 2 and all("may be a micro-batch" in why and "2 or a multiple of 2" in why
                                     for why in reasons), reasons
    assert "unsure lengths may have put a count a step off" in reasons[0]


def test_visits_that_mark_every_step_are_not_counted_as_hiding_steps():
    # GIVEN one process of 2 micro-batches a step, its optimizer 19% of the step and seen in every one
    # (e^-λ 0.1%), 1-s steps and then 0.5-s ones for the last 8 of 13 in 10 s at 50 Hz: its returns fit
    # no clock, and its visits, fitted as any returns (no chance of one going unseen), took each of the
    # first 5 for two steps (18 steps for 13, -28% on the mean)
    an, truths, lo, hi = grid_window("drifting:500:shift/2:50:1:640000", 50)
    (r,), (truth,) = an.ranks, truths
    # THEN no step time is given in 10 s
    assert r.step_ms is None, (r.step_ms, r.steps, truth.steps_in(lo, hi))
    # AND over 30 s (a snapshot samples on) the steps are counted right and their mean given
    an, truths, lo, hi = grid_window("drifting:500:shift/2:50:1:640000", 50, 30.0)
    (r,), (truth,) = an.ranks, truths
    assert r.step_ms is not None and abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.05, r.step_ms
    assert abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03, (r.steps, truth.steps_in(lo, hi))


def test_optimizer_steps_few_samples_long_whose_median_is_their_mean_are_given_as_their_mean():
    # GIVEN 8 ranks of 2 micro-batches a step whose 3 DataLoader workers deliver in bursts, at the
    # 400 Hz the attacher raises them to, over 30 s: steps of 18 and 24 ms, one in three short (the
    # job's median 23.2 ms, its mean 21.9); the samples' lag blurs the lengths between the optimizer's
    # visits into one hump (8 to 38 ms) whose median it pulled to 21.8-22.2 ms (-4.6% to -6.3%)
    an, truths, lo, hi = grid_window("accum_bursty:20:2/3:50:8:263000", 400, 30.0)
    # THEN each rank is given the mean, said so, within 2% of the job's
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.clock is not None and r.clock.mean and r.step_ms is not None, (r.rank, r.clock)
        assert abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.02, (r.rank, r.step_ms)
    # AND the four whose medians were off are given it for the blur (said so: ``StepClock.blurred``);
    # the others' medians stood apart from their steps' mean already (the steps split from longer groups)
    assert sum(r.clock is not None and r.clock.blurred for r in an.ranks) >= 4, [r.clock for r in an.ranks]
    # AND the note says why each is a mean, and claims no boundary seen that was not: the steps were
    # counted on the optimizer's visits, a comb (they said "every boundary ... was seen" before)
    note = an.report.step_time.step_time_note or ""
    assert "the samples' lag at each end of a step can move their median" in note, note
    assert "every boundary" not in note, note


@pytest.mark.parametrize(("spec", "was"), [
    ("uneven:30:0.4:300:8:295000", "+7.3% on two ranks"),
    ("uneven:30:0.4:100:2:285000", "+9.5% on rank 1"),
    ("uneven:30:0.4:200:2:289000", "+5.5% on both"),
])
def test_a_median_at_the_edge_of_a_tight_cluster_of_steps_the_lag_moved_is_not_given(spec, was):
    # GIVEN synchronized ranks of ~30-ms steps, 40% of them fetching their batch 1.3-2.2x as long,
    # at 400 Hz (12-13 samples a step), every boundary seen: the median sits at the upper edge of
    # the tight cluster of the others, where the samples' lag at each end moves it most (blurring
    # the seen steps once more moved it 1-2%, which let it stand; the job's median: ``was``)
    an, truths, lo, hi = grid_window(spec, 400)
    # THEN no rank gives a median: each gives the steps' mean, said so, within 1% of the job's, or
    # none, saying the lag moved the median
    for r, truth in zip(an.ranks, truths, strict=True):
        reason = (r.clock.reason if r.clock else None) or ""
        if r.step_ms is None:
            assert "samples' lag" in reason or "slow steps" in reason, (r.rank, reason)
            continue
        assert r.clock is not None and r.clock.mean, (r.rank, r.step_ms, truth.median_step_ms(lo, hi), was)
        assert abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.01, (r.rank, r.step_ms)
    assert sum(r.step_ms is not None for r in an.ranks) >= len(an.ranks) // 2, [r.clock for r in an.ranks]


def test_a_comb_median_the_lag_moved_on_ranks_that_saw_nearly_every_boundary_is_not_given():
    # GIVEN 8 synchronized ranks of ~13-ms steps, 40% of them slowed 1.3-2.2x, at 400 Hz (7 samples a
    # step): one rank counted on a comb, its peers on the boundaries any of them saw, each rank's
    # e^-λ 2.2-2.8%; the counts right (470-476 for 474), the median 20.3 ms for the job's 18.5 (+9.8%)
    an, truths, lo, hi = grid_window("uneven:13:0.4:100:8:167000", 400)
    # THEN no rank gives that median: each is unknown, saying the lag moved it and how many
    # boundaries went unseen, or is within 5% of what it gives
    for r, truth in zip(an.ranks, truths, strict=True):
        if r.step_ms is None:
            reason = (r.clock.reason if r.clock else None) or ""
            assert "samples' lag" in reason, (r.rank, reason)
            continue
        ms = truth.mean_step_ms(lo, hi) if r.clock is not None and r.clock.mean else truth.median_step_ms(lo, hi)
        assert abs(r.step_ms / ms - 1) <= 0.05, (r.rank, r.step_ms, ms)
    assert any("of the boundaries seen" in ((r.clock and r.clock.reason) or "") for r in an.ranks)


@pytest.mark.parametrize("spec", ["uneven:50:0.4:200:1:348000", "uneven:30:0.4:300:1:292000"])
def test_a_rank_alone_whose_comb_took_slow_steps_for_two_is_not_timed(spec):
    # GIVEN one process of ~50-ms (~30-ms) steps whose input runs 1.3-2.2x as long in 40% of them, at
    # 400 Hz over 30 s, e^-λ 13% (10%): its comb of 48.6 ms counted 602 steps for the job's 469 and
    # gave -14% (-10%), counting 198 steps hidden where its unseen boundaries hide about 62
    an, truths, lo, hi = grid_window(spec, 400, 30.0)
    (r,), (truth,) = an.ranks, truths
    # THEN its step is unknown, saying that its intervals counted as two are shorter than two others
    assert r.step_ms is None, (r.step_ms, truth.median_step_ms(lo, hi), r.steps, truth.steps_in(lo, hi))
    assert r.clock is not None and "shorter than two of the others" in (r.clock.reason or ""), r.clock


def test_a_peer_on_the_shared_period_of_ranks_whose_lag_moves_their_median_is_given_their_mean():
    # GIVEN 4 synchronized ranks of ~36-ms steps whose 6 DataLoader workers deliver in bursts, at the
    # 400 Hz the attacher raises them to: every boundary seen, and on three ranks the samples' lag
    # moves the median 3-15% (``judged_blurred``: their step is the mean); the fourth, counted on the
    # period they share, passed that test on its own steps and gave 32.8 ms for the job's median 36.4
    an, truths, lo, hi = grid_window("bursty:30:6:100:4:466000", 400)
    # THEN every rank gives the mean, said so, within 1% of the job's (43.4 ms)
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.clock is not None and r.clock.mean and r.step_ms is not None, (r.rank, r.clock)
        assert abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.01, (r.rank, r.step_ms)
    # AND so on 2 ranks of ~60-ms bursty steps at 500 Hz (the peer on the shared period: +10.3%)
    an, truths, lo, hi = grid_window("bursty:50:4:500:2:557000", 500)
    assert all(r.clock is not None and r.clock.mean and r.step_ms is not None
               and abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.01
               for r, truth in zip(an.ranks, truths, strict=True)), [(r.rank, r.step_ms) for r in an.ranks]


def test_a_comb_of_the_optimizers_visits_that_breaks_on_one_side_of_a_change_counts_nothing():
    # GIVEN 2 ranks of 4 micro-batches over 30 s (a live view's window), 26-ms optimizer steps for 22
    # s and then 13-ms ones, at 400 Hz: the optimizer seen in 16% of the steps, its visits' 26-ms
    # comb held through the first 138 gaps and took the faster steps after them for half as many
    # (1,155 steps for the job's 1,454, +26% on the mean), and every test of the one period passed
    an, _, _, _ = grid_window("drifting:13:shift/2:200:2:169000", 400, 30.0)
    # THEN no rank is given a step time, and the reason says where the comb broke
    reasons = [(r.clock.reason or "") if r.clock else "" for r in an.ranks]
    assert all(r.step_ms is None for r in an.ranks), [(r.rank, r.step_ms, r.steps) for r in an.ranks]
    assert all("gaps between them fall between its steps" in why and "the steps changed length within the window"
               in why for why in reasons), reasons
    # (over the first 10 s the comb broke on the last 15 of 62 gaps, 6 off where 2 of the 47 before
    # were: as often by chance as steady jobs' off gaps bunch up, and the comb is given, +24%)


def test_a_comb_broken_where_the_optimizer_is_seen_seldom_asks_for_twice_the_rate():
    # GIVEN 2 ranks whose 40-ms steps turn 20 ms long within a 30-s window, at 200 Hz: the optimizer's
    # visits (1.3 samples each) fit a 39-ms comb that breaks after the change
    from bench.sim_grid import Point, build

    pt = Point.parse("drifting:20:shift/2:200:2:229000")
    rec, _ = simulate(build(pt)[0], 200, 30.0, seed=pt.seed)
    an = analyze(rec, RULES)
    assert all(r.step_ms is None and "fall between its steps" in (r.clock.reason or "") for r in an.ranks)
    # THEN twice the rate is advised, where the optimizer is seen twice as often
    assert {a.rate_hz for a in advise_rates(rec, an.pids, an.timelines, an.end_ns or 0)} == {400}
    # ...and there every boundary is seen: every step counted, their mean given within 1%
    an, truths, lo, hi = grid_window(pt.spec, 400, 30.0)
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and abs(r.step_ms / _truth_ms(r, truth, lo, hi) - 1) <= 0.01, r.clock
        assert abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03


@pytest.mark.parametrize("spec", ["drifting:30:ramp/1.5:200:1:248000", "drifting:13:ramp/1.5:300:4:134000"])
def test_a_comb_of_the_optimizers_visits_through_steps_that_drift_holds(spec):
    # GIVEN steps that slow down 1.5x through a 30-s window, the optimizer's visits on one comb: the
    # gaps at the slow end sit off its teeth by the drift, on their own period (one rank), or the
    # drift runs through most of the window (4 ranks)
    an, truths, lo, hi = grid_window(spec, 400, 30.0)
    # THEN the comb stands: each rank's step within 5%, its steps counted within 3%
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and abs(r.step_ms / _truth_ms(r, truth, lo, hi) - 1) <= 0.05, r.clock
        assert abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03



def test_synchronized_ranks_whose_own_visits_fit_no_step_are_timed_on_the_visits_any_of_them_saw():
    # GIVEN 4 ranks accumulating 3 micro-batches of ~230-ms optimizer steps whose input 4 workers
    # deliver in bursts, behind a 30% straggler, at 400 Hz: micro-batches of 5 ms among ones of 150 ms
    # and more, too short to tell apart, and a 2.3-ms optimizer each rank sees in about two steps of
    # three, its own visits fitting no period (steps union.by_visits)
    an, truths, lo, hi = grid_window("accum_bursty:200:3/4:50:4:1542000", 400)
    # THEN every rank is timed on the visits any of them saw: its step within 5% of the job's median
    # optimizer step, every step counted within 3%, the micro-batches a step not said
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.05, r.clock
        assert abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03, (r.steps, truth.steps_in(lo, hi))
        assert r.micro_batches is None
    # ...but at 50 Hz, where each rank sees the optimizer in one step of ten and their visits together
    # leave too many unseen (a guess where they were), every rank stays unknown
    an, _, _, _ = grid_window("accum_bursty:200:3/4:50:4:1542000", 50)
    assert all(r.step_ms is None for r in an.ranks), [(r.steps, r.step_ms) for r in an.ranks]



def test_steps_timed_on_the_visits_any_rank_saw_under_30_samples_are_given_as_their_mean():
    # GIVEN 8 ranks accumulating 2 micro-batches of bursty ~23-ms optimizer steps at 400 Hz (9.3
    # samples a step), timed on the visits any of them saw: the pieces' medians sat 1.9-5.3% under
    # the job's median, the blur of ends that different ranks saw at their own lags
    an, truths, lo, hi = grid_window("accum_bursty:20:2/3:50:8:263000", 400)
    timed = [(r, truth) for r, truth in zip(an.ranks, truths, strict=True) if r.step_ms is not None]
    assert len(timed) >= 6
    # THEN each gives its steps' mean, said so, within 3% of the job's mean step
    for r, truth in timed:
        assert r.clock is not None and r.clock.mean, r.clock
        assert abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.03, (r.step_ms, truth.mean_step_ms(lo, hi))
    # AND the note says it is for the samples' lag, not that every boundary was seen (the visits' pieces
    # are "wraps" on their own clock, but their ends are the visits several ranks saw, some not at all)
    note = an.report.step_time.step_time_note or ""
    assert "the samples' lag at each end of a step can move their median" in note and "every boundary" not in note, note


def test_a_rank_that_sees_the_optimizer_seldom_is_cut_at_its_peers_visits_one_step_apart():
    # GIVEN 4 ranks accumulating 2 micro-batches of bursty ~440-ms optimizer steps at 300 Hz, timed on
    # the visits any of them saw: one rank's own runs between its visits were 800 ms or more, and
    # a margin read from them left its pieces of two steps uncut (17 steps of the window's 23, +7.8%)
    an, truths, lo, hi = grid_window("accum_bursty:320:2/3:300:4:1714000", 300)
    # THEN cut one step's margin apart (read from every rank's runs), every rank counts within a step
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and abs(r.step_ms / _truth_ms(r, truth, lo, hi) - 1) <= 0.05, r.clock
        assert abs(r.steps - truth.steps_in(lo, hi)) <= 1, (r.rank, r.steps, truth.steps_in(lo, hi))


def test_a_rank_that_counts_other_steps_than_its_peers_on_their_visits_is_not_timed_on_them():
    # GIVEN 8 ranks accumulating 2 micro-batches of bursty ~64-ms optimizer steps at 300 Hz, five of
    # them timed on the visits any of them saw: two count 149 and 150 where the other three count 155
    # (their step +3.6% and +4.2% on the job's mean, which the three give within 0.1%)
    an, truths, lo, hi = grid_window("accum_bursty:50:2/3:300:8:755000", 300)
    # THEN the ranks take the same steps: the two are not timed so; those that are count every step
    assert an.ranks[5].step_ms is None and an.ranks[6].step_ms is None, [(r.steps, r.step_ms) for r in an.ranks]
    timed = [(r, truth) for r, truth in zip(an.ranks, truths, strict=True) if r.step_ms is not None]
    assert len(timed) >= 3
    assert all(abs(r.steps - truth.steps_in(lo, hi)) <= 1 for r, truth in timed), [r.steps for r, _ in timed]

def test_steps_timed_on_the_visits_any_rank_saw_count_those_before_a_ranks_first_visit():
    # GIVEN the 4 ranks above at 400 Hz, timed on the visits any of them saw: two ranks' first visit
    # comes a step after their peers' first (without the peers' visits there, 43 of 44)
    an, truths, lo, hi = grid_window("accum_bursty:200:3/4:50:4:1542000", 400)
    # THEN the steps before a rank's first visit and after its last are its peers' there: every rank
    # counts the window's steps
    assert all(r.clock is not None and r.clock.method == "wraps" for r in an.ranks), [r.clock for r in an.ranks]
    assert [r.steps for r in an.ranks] == [truth.steps_in(lo, hi) for truth in truths]

# --- gradient accumulation: the truth's steps are optimizer steps ----------------------------

@pytest.mark.parametrize(("shape", "extra"), [("for", {}), ("nested", {}), ("wrapper", {"fetch": "loop"}),
                                              ("wrapper", {"fetch": "step", "optimizer_inside": False}),
                                              ("library", {"library": "lightning"}), ("library", {"library": "hf"})])
@pytest.mark.parametrize("k", [2, 5, 16])
def test_accumulation_truth_marks_optimizer_steps_k_micro_batches_apart(shape, extra, k):
    the_job = shaped_job(120, {"optimizer": 0.2, "input": 0.05}, ranks=2, rng=random.Random(k), straggler=0.2,
                         jitter=0.1, shape=shape, accumulation=k, **extra)
    pieces, truths = true_timeline(the_job, 3.0, seed=k)
    for rank, truth in zip(pieces, truths, strict=True):
        steps = len(truth.bounds_ns) - 1
        assert truth.micro_batches == k and steps > 5
        assert len(truth.micro_bounds_ns) - 1 == k * steps
        assert truth.micro_bounds_ns[::k] == truth.bounds_ns   # an optimizer step starts every k-th micro-batch
        # one optimizer phase a step, after the step's last micro-batch began, before the next step
        assert len(truth.optimizer_ns) == steps
        for (a, b), opt, last in zip(itertools.pairwise(truth.bounds_ns), truth.optimizer_ns,
                                     truth.micro_bounds_ns[k - 1::k], strict=False):
            assert last < opt < b and a <= last
        # k forwards a step, the last of them the one that steps (the others are ACC)
        forwards = [key for _, _, key, _ in rank if key.startswith("forward")]
        assert abs(len(forwards) - k * steps) <= k
        assert all(key == "forward" for key in forwards[k - 1::k])
        assert forwards.count("forward" + ACC) >= (k - 2) * steps
        # the truth's phases add up to each step
        for (a, b), phases in zip(itertools.pairwise(truth.bounds_ns), truth.phases_ns, strict=True):
            assert sum(phases.values()) == b - a


def test_an_accumulating_job_all_reduces_once_an_optimizer_step():
    the_job = shaped_job(200, {"optimizer": 0.1}, ranks=2, rng=random.Random(1), straggler=0.3, accumulation=4)
    pieces, truths = true_timeline(the_job, 2.0, seed=1)
    fast = pieces[1]   # rank 0 is the straggler; rank 1 waits for it
    waits = [a for a, _, key, _ in fast if key == "sync"]
    assert abs(len(waits) - (len(truths[1].bounds_ns) - 1)) <= 1
    ends = {b for _, b, key, _ in fast if key == "backward"}
    assert all(any(abs(a - e) == 0 for e in ends) for a in waits)   # right after the last micro-batch's backward


# --- one line of the loop frame holds the step -----------------------------------------------

def line_shares(the_job: Job, seconds: float = 3.0) -> dict[tuple[str, int], float]:
    """The share of the time (all ranks) spent on each line of the loop frame (the innermost of
    LOOP_FRAMES: HF 5.x's ``_run_epoch`` is called from ``_inner_training_loop``)."""
    pieces, _ = true_timeline(the_job, seconds, seed=2)
    by_line: dict[tuple[str, int], int] = {}
    for rank in pieces:
        for a, b, _, stack in rank:
            frame = [fr for fr in stack if fr.name in LOOP_FRAMES][-1]
            by_line[frame.name, frame.line] = by_line.get((frame.name, frame.line), 0) + b - a
    total = sum(by_line.values())
    return {line: ns / total for line, ns in by_line.items()}


@pytest.mark.parametrize(("extra", "shares"), [
    ({"optimizer_inside": True}, {"input": 0.01}),
    ({"optimizer_inside": False}, {"input": 0.01, "optimizer": 0.02}),
    ({"fetch": "step"}, {"input": 0.2}),   # fetched inside the wrapper: the loop frame never leaves its line
    ({"accumulation": 8, "fetch": "step"}, {"input": 0.1, "optimizer": 0.2}),
])
def test_the_wrapper_puts_95_percent_of_the_step_on_one_loop_line(extra, shares):
    the_job = shaped_job(150, shares, ranks=2, rng=random.Random(0), straggler=0.3, shape="wrapper", **extra)
    by_line = line_shares(the_job)
    assert by_line[("train", 20)] >= 0.95, by_line


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_frameworks_loop_holds_the_step_under_one_line(library):
    shares = {"input": 0.01, "h2d": 0.01} if library == "lightning" else {"input": 0.01, "optimizer": 0.02}
    the_job = shaped_job(150, shares, rng=random.Random(0), shape="library", library=library)
    by_line = line_shares(the_job)
    (name, _), top = max(by_line.items(), key=lambda kv: kv[1])
    assert top >= 0.95 and name == {"lightning": "_TrainingEpochLoop.advance", "hf": "Trainer._run_epoch",
                                    "hf4": "Trainer._inner_training_loop"}[library], by_line


@pytest.mark.parametrize(("shape", "library"), [(shape, "lightning") for shape in ALL_SHAPES if shape != "library"]
                         + [("library", library) for library in LIBRARIES])
def test_every_stack_is_the_phase_it_stands_for(shape, library):
    # the old shapes' sub-stacks put a torch.nn.functional call under every phase, h2d's line
    # included, which then reads as forward: kept as it was, so only the new shapes vary theirs
    sub = 1 if shape in SHAPES else 3
    the_job = Job((RankWork(1, 1, 1, 1, 1),), shape=shape, library=library, accumulation=2, sub_stacks=sub)
    for key, stacks in _job_stacks(the_job).items():
        phase = key.removesuffix(ACC)
        for stack in stacks:
            depth = max(i for i, fr in enumerate(stack) if fr.name in LOOP_FRAMES)
            verdict = classify(stack, RULES, depth)
            # waiting in backward's all-reduce is inside backward
            assert verdict.phase == ("backward" if phase == "sync" else phase), (key, stack[depth:])


# --- bursty delivery ---------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [2, 3, 4, 8])
def test_bursty_delivery_concentrates_the_input_in_one_step_of_w(workers):
    work = RankWork(40.0, 1.0, 20.0, 30.0, 9.0)
    _, truths = true_timeline(Job((work,), jitter=0.05, workers=workers), 20.0, seed=workers)
    inputs = [p["input"] / MS for p in truths[0].phases_ns]
    assert statistics.fmean(inputs) == pytest.approx(40.0, rel=0.05)   # the mean input is the job's
    long = [i for i, ms in enumerate(inputs) if ms > 40.0]
    assert all(b - a == workers for a, b in itertools.pairwise(long))   # one step in w waits...
    assert sum(inputs[i] for i in long) / sum(inputs) > 0.97           # ...for nearly all the input
    assert max(ms for i, ms in enumerate(inputs) if i not in long) < 0.5
    # and the CPU counters see that wait as blocked
    rec, _ = simulate(Job((work,), jitter=0.05, workers=workers), 100, 5.0, seed=1)
    rows = rec.cpu[1000]
    busy = (rows[-1][1] - rows[0][1]) / (rows[-1][0] - rows[0][0])
    assert busy == pytest.approx(60 / 100, abs=0.05)


def test_bursty_ranks_wait_for_each_others_bursts():
    work = RankWork(30.0, 1.0, 20.0, 30.0, 9.0)
    _, truths = true_timeline(Job((work, work), jitter=0.02, workers=4), 10.0, seed=5)
    assert truths[0].bounds_ns == truths[1].bounds_ns
    # each rank's long waits fall in their own steps (own worker phase), so the job steps slower
    assert truths[0].mean_step_ms(0, 1 << 62) > 100


# --- the estimator on these shapes: right or unknown ---------------------------------------------

def right_or_unknown(the_job: Job, rate_hz: float, seed: int) -> None:
    rec, truths = simulate(the_job, rate_hz, 10.0, seed=seed)
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    for r, truth in zip(an.ranks, truths, strict=True):
        true_ms = _truth_ms(r, truth, lo, hi)
        state = "unknown" if r.step_ms is None else f"known: {r.step_ms:.1f} ms"
        print(f"rank {r.rank}: {state} (truth {true_ms:.1f} ms, {r.steps} steps of {truth.steps_in(lo, hi)}, "
              f"micro-batches {r.micro_batches} of {truth.micro_batches})")
        if r.step_ms is not None:
            assert abs(r.step_ms / true_ms - 1) <= 0.05, (r.rank, r.step_ms, true_ms, r.clock)


def every_rank_within(the_job: Job, rate_hz: float, seed: int, seconds: float = 10.0) -> None:
    """Every rank's step time known, within 5% of its median step."""
    rec, truths = simulate(the_job, rate_hz, seconds, seed=seed)
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and abs(r.step_ms / _truth_ms(r, truth, lo, hi) - 1) <= 0.05, r.clock


def every_rank_the_mean(the_job: Job, rate_hz: float, seed: int) -> Analysis:
    """Every rank's step time the steps' mean, said so (steps/mean.py), within 1% of the job's mean
    step, every step counted; the analysis."""
    rec, truths = simulate(the_job, rate_hz, 10.0, seed=seed)
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.clock is not None and r.clock.mean and r.step_ms is not None, r.clock
        assert abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.01, (r.step_ms, truth.mean_step_ms(lo, hi))
        assert r.steps == truth.steps_in(lo, hi)
    return an


def _truth_ms(r: RankStepStats, truth: Truth, lo: int, hi: int) -> float:
    """The truth a rank's step time is judged against: the steps' median, or their mean where the
    clock says it gave the mean (steps/mean.py)."""
    return truth.mean_step_ms(lo, hi) if r.clock is not None and r.clock.mean else truth.median_step_ms(lo, hi)


def grid_window(spec: str, rate_hz: float, seconds: float = 10.0) -> tuple[Analysis, list[Truth], int, int]:
    """A grid point (bench/sim_grid.py) sampled at ``rate_hz`` for ``seconds``: its analysis, each
    rank's truth, and the window's edges."""
    from bench.sim_grid import Point, build

    pt = Point.parse(spec)
    rec, truths = simulate(build(pt)[0], rate_hz, seconds, seed=pt.seed)
    an = analyze(rec, RULES)
    return an, truths, an.start_ns or 0, an.end_ns or 0


@pytest.mark.parametrize("inside", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_estimator_wrapper_150ms_at_100hz(inside, seed):
    shares = {"input": 0.01} if inside else {"input": 0.01, "optimizer": 0.02}
    the_job = shaped_job(150, shares, rng=random.Random(seed), jitter=0.05, shape="wrapper", optimizer_inside=inside)
    right_or_unknown(the_job, 100, seed)


@pytest.mark.parametrize("shape", ["for", "wrapper"])   # the micro-batch loop in the loop frame / the wrapper
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_estimator_accumulation_k4_long_optimizer_300ms_at_100hz(shape, seed):
    the_job = shaped_job(300, {"optimizer": 0.2, "input": 0.05}, rng=random.Random(seed), jitter=0.05, shape=shape,
                         accumulation=4)
    right_or_unknown(the_job, 100, seed)


# A batch that waits for a worker is one long span of one stack, which py-spy's chrometrace output
# cannot tell from a sampler drop-out: counted in periods, it made invented steps (seeds 1 and 2,
# until the steps' median had to hold with a few steps more or less and many steps near it)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_estimator_bursty_input_120ms_at_100hz(seed):
    # 4 workers, input half the time: three steps of ~60 ms, then one that waits ~240 ms
    the_job = shaped_job(120, {"input": 0.5}, rng=random.Random(seed), jitter=0.05, workers=4)
    right_or_unknown(the_job, 100, seed)


# grid points (bench/sim_grid.py --point SPEC) whose step time was known and wrong
@pytest.mark.parametrize("spec", [
    # k = 4 under a `for` loop with a straggler rank: a return inside each micro-batch makes ~5
    # intervals per optimizer step, so no k divides the gaps between the optimizer's intervals;
    # they still keep ~4 steps apart, which an optimizer in every step would not (was -79%)
    "accum:130:4/long:200:2:1509000",
    # k = 2 in a wrapper: a missed return between two micro-batches puts the optimizer in
    # intervals in a row (was -42%)
    "accum:200:2/long:50:1:1700000",
    # k = 8, a 4 ms optimizer under train_step(): two thirds of its samples were under
    # nn.functional in the simulator and read as forward (was -88% on 8 ranks)
    "accum:200:8/short:500:8:1859000",
    # k = 2 on 8 ranks, the optimizer seen in ~10 of 98 micro-batches per rank: no rank's gaps
    # alone are evidence enough, all ranks' together are (was -49%)
    "accum:200:2/short:50:8:1683000",
    # k = 3 under HF's loop: an outer loop's return among the micro-batches' made 4 a step; the
    # optimizer's own visits recur every optimizer step (was +29%)
    "accum:130:3/short:500:1:1456000",
    # k = 6 counted as 8 on 8 ranks (was +26%)
    "accum:500:6/short:300:8:2375000",
    # bursty, 2 workers on 8 ranks: steps of two lengths by turns; one rank found its steps
    # steady, the others saw every boundary and found them too uneven (was +62%, -42%)
    "bursty:20:2:300:8:315000",
    "bursty:80:2:300:8:615000",
    # bursty, 4 and 6 workers on 8 ranks, steps of every length: with the steps unknown on every rank,
    # a period fitted to one rank's optimizer visits was a divisor of the slow steps, shorter than
    # the intervals of a rank that saw every boundary (was -75%, -68%)
    "bursty:130:6:100:8:767000",
    "bursty:80:4:200:8:651000",
    # bursty, 3 workers on 4 ranks: every boundary seen, steps too uneven for a typical one; the
    # optimizer's visits, in random steps, fitted the mean of several steps (+14% once the visits'
    # own ends were timed, without ``_whole_intervals``)
    "bursty:20:3:300:4:334000",
    # k = 4 and k = 2 at 50 Hz, a 2-3% optimizer seen in 4-7 optimizer steps of the window, always a
    # multiple of k apart: too rarely to count k or rule it out (was -76%, -49%; now unknown)
    "accum:500:4/short:50:1:2320000",
    "accum:320:2/short:50:1:1960000",
    # k = 3 inside a wrapper on 4 ranks with a straggler: the fast ranks' last micro-batch holds
    # the all-reduce's wait, so the micro-batches between the optimizer's visits were miscounted
    # and no k divided the gaps (was -66%: the micro-batch given as the step)
    "accum:50:3/short:300:4:894000",
    # bursty, 6 workers on 2 ranks, every boundary seen: each rank's own stall, one step holding
    # one step's compute, was counted as two steps (one boundary may go unseen by chance), and
    # the median of the steps split so was 11% long
    "bursty:30:6:300:2:473000",
    # bursty, 2 workers under HF's loop on 2 ranks: the optimizer's visits fit 1.7 of the returns'
    # period, no whole number of them (was +40%, and +135% once such visits were taken as the step)
    "bursty:8:2:500:2:117000",
    # bursty, 3 workers at 500 Hz: two 4 ms steps (2 samples) in three hide their boundaries, yet
    # e^-λ, measured on the slow steps' long visits, said every boundary was seen (was +1,080%)
    "bursty:20:3:500:1:336000",
    # k = 2 on 4 ranks at 50 Hz with a straggler: one rank's gaps were all even (566:1), the
    # others' micro-batches uneven and miscounted, and each rank saw its optimizer ~10 times, too
    # few for a period of its own; the visits of the 4 ranks together fit 200 ms (was -50%)
    "accum:200:2/short:50:4:1682000",
    # k = 8 on 2 ranks with a straggler, 800 ms steps, 11 in the window: one rank's 7 visits were
    # multiples of 8 apart (104:1), the other's miscounted (was -91%, on a seed the checks were
    # not built on)
    "accum:800:8/short:100:2:2685001",
    # k = 4, 3 workers delivering in bursts, at 500 Hz: a micro-batch's backward (3 samples) went
    # unseen 1 time in 25 and its return with it, so 15 of the 75 gaps between the optimizer's
    # visits were one short of a multiple of 4 (was -81%: the micro-batch given as the step)
    "accum_bursty:80:4/3:500:1:1116000",
    # k = 2, 3 workers, 2 ranks at 50 Hz: one rank saw returns inside its steps (19 intervals for
    # 14 steps, a 143-ms optimizer in 14 of them: e^-λ 1.1%), and its median was both ranks' (was -18%)
    "accum_bursty:500:2/3:50:2:1941000",
])
def test_grid_points_once_wrong(spec):
    from bench.sim_grid import Point, build

    pt = Point.parse(spec)
    right_or_unknown(build(pt)[0], pt.rate_hz, pt.seed)


@pytest.mark.parametrize(("spec", "rate_hz"), [
    # 8 ranks, 2 micro-batches, 3 workers: one rank's returns end half its intervals 50-100 ms from
    # any micro-batch's end; its steps aligned on the optimizer's visits (by_counted_returns) were
    # taken as the sure ones over its peers' (was -14%)
    ("accum_bursty:200:2/3:50:8:1463000", 400),
    # 2 ranks, 3 micro-batches a step, 2 DataLoader workers: optimizer steps of 26 and 34 ms by turns;
    # the samples' lag fills the gap between the two lengths (no valley), and the median of the
    # visits' spacing, 29.9 ms, is neither (was +10.8% on rank 0; now their mean: period.by_turns)
    ("accum_bursty:30:3/2:50:2:541000", 400),
    # and points a rule tried and left out got wrong (docs/steps.md, stop 55: every rank on the mean
    # of the rank that counts the most steps): every rank misses the same short steps (2 of 3 under
    # 3 samples), so a rank that counts the most of them is no fuller than the rest (+116%)
    ("bursty:5:3:500:4:38000", 500),
    ("bursty:50:6:100:8:567000", 100),
    # ...and the rank that counts the most returns counts micro-batches (-15% and +46% so)
    ("accum_bursty:30:2/2:300:4:494000", 300),
    ("accum_bursty:13:2/4:50:4:42000", 400),
    ("accum_bursty:320:3/4:300:4:1794000", 300),
    # micro-batches of 7.5 ms (3 samples), 4 a step, a 1% optimizer, 2 workers delivering in bursts:
    # the comb's period, fitted within the shortest intervals at 11 ms, was refined to a pair of
    # micro-batches, 13.8 ms, that a tenth of the intervals fall well short of (was -54%)
    ("accum_bursty:30:4/2:50:1:600000", 400),
    # ...and 2 micro-batches of 16 ms a step on 4 ranks at 200 Hz: refined from 22.6 to 28.8 ms
    # (was -10.5% on every rank)
    ("accum_bursty:30:2/2:200:4:490000", 200),
])
def test_grid_points_once_wrong_at_the_rate_the_attacher_raises_them_to(spec, rate_hz):
    from bench.sim_grid import Point, build

    pt = Point.parse(spec)
    right_or_unknown(build(pt)[0], rate_hz, pt.seed)


def test_ranks_whose_own_returns_fit_different_periods_are_not_counted_on_one_anothers():
    # GIVEN 8 ranks accumulating 16 micro-batches of a 1.3-s step behind a 30% straggler, read at
    # the attacher's default 100 Hz: the straggler's returns come every 81 ms, the others' every
    # 60 ms, and those wait out the straggler in their last micro-batch (400 ms)
    from bench.sim_grid import Point, build

    pt = Point.parse("accum:1300:16/short:100:8:3043000")
    rec, truths = simulate(build(pt)[0], pt.rate_hz, 10.0, seed=pt.seed)
    # WHEN analysed
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    # THEN no rank's step is counted on the straggler's period: every step time given is within 5%
    # (was +9-12% on 7 ranks: each waiting micro-batch counted as 5, groups of 16 made 6 steps for 7)
    for r, truth in zip(an.ranks, truths, strict=True):
        if r.step_ms is not None:
            assert abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.05, (r.rank, r.step_ms)
    # ...and a rank left unknown says why its returns are no step the ranks take together
    unknown = [r for r in an.ranks if r.step_ms is None]
    assert unknown
    for r in unknown:
        reason = r.clock.reason if r.clock is not None else ""
        assert reason and "though the ranks synchronize" in reason and "rank 0's every 81" in reason, reason


def test_a_median_the_samples_lag_moves_is_not_given_where_the_mean_holds():
    # GIVEN 2 ranks whose 6 DataLoader workers deliver in bursts: one slow step in three among 25-ms
    # ones, at 400 Hz (--max-rate: 10 samples a step), every boundary seen and every step counted
    from bench.sim_grid import Point, build

    pt = Point.parse("bursty:30:6:100:2:473000")
    rec, truths = simulate(build(pt)[0], 400, 10.0, seed=pt.seed)
    # WHEN analysed
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    # THEN no rank gives the median of the intervals (26.3 ms for the job's 25.0: +5.4%, the short
    # steps' cluster widened by the lag at each end): each gives the steps' mean, said so, within 1%
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.clock is not None and r.clock.mean and r.step_ms is not None, r.clock
        assert abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.01, (r.rank, r.step_ms, truth.mean_step_ms(lo, hi))


def test_a_rank_whose_returns_vary_is_not_said_to_have_varying_steps_where_its_optimizer_times_its_step():
    # GIVEN 4 ranks accumulating 3 micro-batches of ~19 ms (3 workers delivering in bursts, a 30%
    # straggler) at 400 Hz: rank 0 sees every return of its loop, micro-batches too uneven for a
    # typical one, and its optimizer's visits time its optimizer step
    from bench.sim_grid import Point, build

    pt = Point.parse("accum_bursty:50:3/3:200:4:810000")
    rec, truths = simulate(build(pt)[0], 400, 10.0, seed=pt.seed)
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    # THEN no rank says its steps vary, which the same summary gives as known (was "rank 0 saw every
    # boundary and its steps vary"); since stop 70 the others' visits, which end every one of their
    # intervals, sit on rank 0's step, and every rank has it (they said what rank 0 saw, unknown)
    for r, truth in zip(an.ranks, truths, strict=True):
        assert "its steps vary" not in (r.clock.reason or "" if r.clock is not None else "")
        assert r.step_ms is not None and abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.01, (r.rank, r.clock)
        assert r.steps == truth.steps_in(lo, hi)


def test_intervals_split_in_pairs_that_make_one_step_are_not_every_boundary_seen():
    # GIVEN 2 ranks of 14-ms steps under Lightning's loop whose 2 DataLoader workers deliver in
    # bursts, by turns (one step 11 ms of input, the next 1 ms and the wait for the other rank), at
    # the 400 Hz the attacher raises them to: the 2-ms visits go unseen in pairs, so a boundary
    # shows every other step, and e^-λ over the visits seen says 0.5%
    from bench.sim_grid import Point, build
    from traceml_attach.steps.clock import SPLIT

    pt = Point.parse("bursty:8:2:50:2:101000")
    rec, _ = simulate(build(pt)[0], 400, 10.0, seed=pt.seed)
    # THEN a quarter of the 28-ms intervals come split in two (9+19, 13+16 ms): not every boundary
    # was seen, and no rank is given the 28 ms (was +93%) nor the intervals' mean
    for r in analyze(rec, RULES).ranks:
        assert r.step_ms is None and r.clock is not None and r.clock.cause == SPLIT, (r.rank, r.step_ms, r.clock)
        assert "pairs adding up to the typical one" in (r.clock.reason or ""), r.clock.reason
    # AND where the pieces split a step that the optimizer marks (it ran in every interval but the
    # first piece: a micro-batch's return seen now and then), the intervals are the steps, as before
    pt = Point.parse("accum_bursty:200:2/2:300:4:1454000")
    every_rank_within(build(pt)[0], 300, pt.seed)


def test_short_steps_that_a_synchronized_peer_seen_whole_shows_far_fewer_of_are_returns_inside_a_step():
    # GIVEN 8 ranks accumulating 2 micro-batches of 20-ms steps whose 2 DataLoader workers deliver in
    # bursts, at the 400 Hz the attacher raises them to: one micro-batch waits for both batches, the next
    # takes ~1 ms, and its return, seen now and then, splits a step in two; the piece after it ends the
    # step, so it holds the optimizer as often as a whole step does (its visits cannot tell the pieces)
    an, truths, lo, hi = grid_window("accum_bursty:20:2/2:300:8:255000", 400)
    # THEN the ranks take the same steps, and those short on one rank only are joined to a neighbour:
    # every rank counts the job's steps within 3% (rank 0 counted 602 for 501, +20%; four others +3-5%)
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.05, r.clock
        assert abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03, (r.rank, r.steps, truth.steps_in(lo, hi))
    # AND short steps of the job's own, which every rank sees (a burst's ready batches), stay steps
    an, truths, lo, hi = grid_window("bursty:80:3:300:4:634000", 300)
    assert all(abs(r.steps - truth.steps_in(lo, hi)) <= 0.1 * truth.steps_in(lo, hi)
               for r, truth in zip(an.ranks, truths, strict=True)), [r.steps for r in an.ranks]
    # AND a short step that is the blur of a boundary seen late (13-ms steps at 5.2 samples a step:
    # 41 short on one rank, 4-6 on its peers) stays where it makes no typical step with a neighbour:
    # every rank within 3% (all 41 joined, that rank counted 743 of the job's 768)
    an, truths, lo, hi = grid_window("accum_bursty:13:2/2:200:8:11000", 400)
    assert all(abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03
               for r, truth in zip(an.ranks, truths, strict=True)), [r.steps for r in an.ranks]
    # AND a peer whose steps are the optimizer's, however it counted its micro-batches, shows the way:
    # 2 ranks of 30-ms steps, one seeing every return (372 steps for the job's 330, +12.7%)
    an, truths, lo, hi = grid_window("accum_bursty:30:2/2:100:2:485000", 400)
    assert all(abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03
               for r, truth in zip(an.ranks, truths, strict=True)), [r.steps for r in an.ranks]


def test_runs_of_micro_batches_that_the_optimizers_visits_end_are_the_steps_not_the_visits_divisor():
    # GIVEN 2 micro-batches a step whose 3 DataLoader workers deliver in bursts (micro-batches of 120,
    # 40 and 40 ms by turns, so steps of 160, 160 and 80 ms), a 1% optimizer, at the 400 Hz the
    # attacher raises it to: the optimizer's visits, 71% of the steps, fit 78 ms, the divisor of
    # their gaps, and were taken over the runs of 2 micro-batches that they all end (was -49%)
    from bench.sim_grid import Point, build

    pt = Point.parse("accum_bursty:130:2/3:50:1:1220000")
    # THEN the runs give the step, within 5% of the job's median
    every_rank_within(build(pt)[0], 400, pt.seed)


def test_optimizer_steps_are_timed_between_the_visits_own_ends_not_the_returns_after_them():
    # GIVEN 2 ranks, 4 micro-batches a step in nested loops, 3 DataLoader workers delivering in bursts
    # (steps of about 470, 540 and 700 ms by turns), a 19% optimizer, at the 400 Hz the attacher
    # raises them to: rank 0's optimizer marks its steps, and the returns after its visits lag them
    # by the micro-batches that went by unseen (groups of 462 and 785 ms for visits 541 and 705 apart)
    from bench.sim_grid import Point, build

    pt = Point.parse("accum_bursty:500:4/3:50:2:2061000")
    rec, truths = simulate(build(pt)[0], 400, 10.0, seed=pt.seed)
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    # THEN rank 0's step is the median of its visits' spacing, within 5% of the job's (was -12.7%)
    r = an.ranks[0]
    assert r.step_ms is not None, r.clock
    assert abs(r.step_ms / _truth_ms(r, truths[0], lo, hi) - 1) <= 0.05, (r.step_ms, truths[0].median_step_ms(lo, hi))


def test_optimizer_steps_of_two_lengths_whose_median_falls_between_them_are_given_as_their_mean():
    # GIVEN 2 ranks, 3 micro-batches a step, 2 DataLoader workers delivering in bursts: optimizer steps
    # of 187 and 213 ms by turns, timed by the optimizer's visits (every one seen) at 300 Hz; jitter and
    # the samples' lag fill the gap between the two lengths, and the median of the visits' spacing
    # falls in it (201 ms, where the job's own median is 190 or 212 as one step more or less decides)
    from bench.sim_grid import Point, build

    # THEN each rank's step time is the steps' mean, said so, within 1% of the job's (was +5.4%)
    every_rank_the_mean(build(Point.parse("accum_bursty:200:3/2:300:2:1513000"))[0], 300, 1513000)


def test_slow_steps_on_synchronized_ranks_are_not_boundaries_unseen():
    # GIVEN 8 synchronized ranks of 26 ms steps, input 90% of them, 40% of the steps fetching their
    # batch 1.3-2.2x as long (a loader in Python on shared cores), read at the 400 Hz the attacher
    # raised them to: e^-λ ~6%, yet one rank's comb at 24.2 ms took a third of its intervals for
    # two steps, and every rank was given 24.2 ms (-6.3%), 381-398 steps for 339
    from bench.sim_grid import Point, build
    from traceml_attach.steps.clock import UNEVEN

    pt = Point.parse("uneven:20:0.4:100:8:227000")
    rec, _ = simulate(build(pt)[0], 400, 10.0, seed=pt.seed)
    an = analyze(rec, RULES)
    # THEN no rank's step time is given, and the reason says the long intervals are slow steps
    for r in an.ranks:
        assert r.step_ms is None and r.clock is not None, (r.rank, r.step_ms)
        assert r.clock.cause == UNEVEN and "slow steps" in (r.clock.reason or ""), r.clock
    # and where the ranks' long intervals do hold boundaries unseen (e^-λ ~60%, 5 samples a step,
    # most ranks unsure of their counts there too), the comb stands, as before
    pt = Point.parse("classic:13:0.9:300:8:255000")
    every_rank_within(build(pt)[0], 400, pt.seed)


def test_slow_steps_of_a_rank_on_a_peers_clock_are_one_step_each_where_it_saw_every_boundary():
    # GIVEN 8 synchronized ranks of 35-ms steps, a quarter of them fetching their batch 1.3-2.2x as
    # long, at the 400 Hz the attacher raises them to: every rank saw every boundary (262-263
    # intervals for 263 steps), and the ranks are counted on the clock of the one that sets it
    from bench.sim_grid import Point, build

    pt = Point.parse("uneven:30:0.25:100:8:267000")
    # THEN a slow step is one step: its length rounded to the period (two) is no count to doubt
    # (doubts.lumped judges them by the rank's own e^-λ, as on its own clock), and every rank's step
    # time is known within 5% (was: unknown, "the long intervals ... are slow steps")
    every_rank_within(build(pt)[0], 400, pt.seed)


def test_steps_seen_whole_too_uneven_for_a_median_are_given_as_their_mean():
    # GIVEN 4 synchronized ranks whose 4 DataLoader workers deliver in bursts (steps of 60-150 ms), at
    # 500 Hz: every boundary seen, the steps too uneven for their median to hold within 5%
    from bench.sim_grid import Point, build

    # THEN each rank's step time is their mean, said so, within 1% of the job's mean step (not its
    # median), every step counted
    an = every_rank_the_mean(build(Point.parse("bursty:80:4:500:4:658000"))[0], 500, 658000)
    note = an.report.step_time.step_time_note or ""
    assert "ranks 0, 1, 2, 3 is the mean step" in note, note
    # AND where one of 2 ranks missed 5 of its 63 boundaries (e^-λ said 0.1%: a slowed step's input
    # ran on into the next) its mean was 8.7% long: its peer saw those 5, more than a sampling that
    # misses them that often leaves, but of the boundaries some rank saw over the stretch both sampled,
    # 7 were seen by one of the two and 56 by both, so those both missed are few (Chao's f1^2 / 2 f2:
    # 0.44; steps/mean._filled,
    # ``unseen_by_all``): the mean of the boundaries either saw is given, every step counted. Before
    # stop 68 none was given (the reason said so; before that, "their means disagree")
    pt = Point.parse("uneven:130:0.4:50:2:461000")
    rec, truths = simulate(build(pt)[0], 150, 10.0, seed=pt.seed)
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    for r, truth in zip(an.ranks, truths, strict=True):
        bounds = [b for b in truth.bounds_ns if lo <= b < hi]
        mean_ms = (bounds[-1] - bounds[0]) / (len(bounds) - 1) / MS
        assert r.clock is not None and r.clock.mean, r.clock
        assert r.step_ms is not None and abs(r.step_ms / mean_ms - 1) <= 0.01, (r.step_ms, mean_ms)
        assert r.steps == truth.steps_in(lo, hi)


def test_steps_too_uneven_for_a_median_whose_long_ones_hide_no_boundary_are_given_as_their_mean():
    from bench.sim_grid import Point, build

    # GIVEN one rank accumulating 2 micro-batches a step, a 27% optimizer, 4 DataLoader workers
    # delivering in bursts, at the 400 Hz the attacher raises it to: every return and every optimizer
    # visit seen, optimizer steps of ~80 and ~180 ms by turns; the visits' median fell on the short
    # kind, so every long step was twice it
    accumulating = Point.parse("accum_bursty:130:2/4:50:1:1240000")
    # THEN the optimizer steps' mean is given, said so, within 1% of the job's, every step counted
    # (was unknown): each visit ends a run of 2 returns, none of twice that, so no visit hid
    # (accumulation._visits_mean, _hidden_visits)
    every_rank_the_mean(build(accumulating)[0], 400, accumulating.seed)
    # AND GIVEN one rank whose 4 workers deliver in bursts (input 60% of the time, off the CPU while it
    # waits): steps of ~80 ms and one of ~600 ms in four, every boundary seen at 500 Hz; the median is
    # a short step, so every long one "could hide" boundaries
    bursty = Point.parse("bursty:200:4:500:1:856000")
    # THEN the thread's time on a CPU says each long one is one slow step (clock.could_hide_worked),
    # and the mean is given too (was unknown)
    every_rank_the_mean(build(bursty)[0], 500, bursty.seed)


def test_ranks_whose_means_run_long_left_boundaries_unseen_and_most_ranks_still_have_theirs():
    # GIVEN 8 synchronized ranks, 40% of their steps fetching the batch 1.3-2.2x as long (a loader in
    # Python), at 300 Hz: every boundary seen as far as e^-λ can tell, too uneven for a median; over
    # the steps they share, six ranks' means agree within 1% and two run 1.5% and 2.2% longer: they
    # missed 2 and 3 of the 144 boundaries, which their peers saw
    an, truths, lo, hi = grid_window("uneven:50:0.4:300:8:355000", 300)
    # THEN each rank's steps are counted on the boundaries it and its peers saw (steps/mean._filled):
    # every rank is given the mean, said so, within 0.5% of the job's mean step, every step counted
    # (was: six given theirs, the two "left some boundaries unseen"; before that, every rank unknown)
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.clock is not None and r.clock.mean and r.step_ms is not None, (r.rank, r.clock)
        assert abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.005, (r.step_ms, truth.mean_step_ms(lo, hi))
        assert r.steps == truth.steps_in(lo, hi), (r.rank, r.steps, truth.steps_in(lo, hi))


def test_synchronized_ranks_means_are_compared_over_the_steps_they_share():
    # GIVEN 4 synchronized ranks whose 6 DataLoader workers deliver in bursts (steps of 15 ms to
    # 1.2 s), at 200 Hz: every boundary seen, too uneven for a median; two ranks' windows lack a
    # 1.2-s step at an edge, so their own means are 248.2 and 248.5 ms beside 252.3 and 252.4
    an, truths, lo, hi = grid_window("bursty:130:6:200:4:770000", 200)
    # THEN their means agree over the steps every rank's window holds (was: unknown, "their means
    # disagree"), and each rank is given the one mean of the ranks that saw every step of the window
    # (was: 248.2 ms on the two that lacked one, -1.6%), said so, within 0.5% of the job's
    assert len({r.step_ms for r in an.ranks}) == 1, [(r.rank, r.step_ms) for r in an.ranks]
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.clock is not None and r.clock.mean and r.step_ms is not None, r.clock
        assert abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.005, (r.step_ms, truth.mean_step_ms(lo, hi))
        assert abs(r.steps - truth.steps_in(lo, hi)) <= 1, (r.steps, truth.steps_in(lo, hi))


def test_ranks_that_saw_every_boundary_and_ranks_that_did_not_all_get_the_jobs_step():
    # GIVEN 8 synchronized ranks accumulating 4 micro-batches of 50-ms optimizer steps (2 workers
    # delivering in bursts), at 500 Hz: most ranks saw every boundary of steps too uneven for a
    # median, but some left a few unseen (e^-λ over 1%)
    an, truths, lo, hi = grid_window("accum_bursty:50:4/2:500:8:859000", 500)
    # THEN every rank's step time is within 0.5% of the job's (its mean where it says so), every step
    # counted but at an edge: those that saw every one were given their mean, counted on their own
    # and their peers' boundaries (stop 64; was none, "a rank that left boundaries unseen"); since
    # stop 70 their optimizer's visits sit on the step that rank 0's time, and every rank has that
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and r.clock is not None, (r.rank, r.clock)
        expected = truth.mean_step_ms(lo, hi) if r.clock.mean else truth.median_step_ms(lo, hi)
        assert abs(r.step_ms / expected - 1) <= 0.005, (r.rank, r.step_ms, expected)
        assert abs(r.steps - truth.steps_in(lo, hi)) <= 1, (r.rank, r.steps, truth.steps_in(lo, hi))


def test_long_intervals_every_rank_shows_alike_are_slow_steps_not_hidden_ones():
    # GIVEN 4 synchronized ranks whose 4 DataLoader workers deliver in bursts (steps of ~20 and ~65 ms),
    # at 400 Hz: every boundary seen, too uneven for a median. Rank 2's median fell on the short steps,
    # so half its intervals are "two steps or more" long, and they could hide 113 boundaries
    an, truths, lo, hi = grid_window("bursty:30:4:200:4:450000", 400)
    # THEN where no other rank saw a boundary inside them, they are slow steps (a slow step holds every
    # rank; a boundary one rank missed, the others see): every rank is given the mean, said so, within
    # 1% of the job's (was: none, "intervals as long as two steps or more could hide more than 5%")
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.clock is not None and r.clock.mean and r.step_ms is not None, r.clock
        assert abs(r.step_ms / truth.mean_step_ms(lo, hi) - 1) <= 0.01, (r.step_ms, truth.mean_step_ms(lo, hi))


def test_long_intervals_in_which_other_ranks_saw_boundaries_still_refuse_the_mean():
    # GIVEN 8 synchronized ranks of bursty 50-ms steps at 100 Hz, one of which has 2 long intervals in
    # which the other ranks saw boundaries (it missed them)
    an, _, _, _ = grid_window("bursty:50:6:100:8:567000", 100)
    # THEN no mean is given (each rank missed 4-24% of the 53 boundaries; the 3 peers each asked left
    # some unseen too, and counted on theirs every rank's mean was 203 ms for the job's 184), and the
    # reason is how many boundaries its peers saw that it missed (it was the boundaries its long
    # intervals could hide)
    for r in an.ranks:
        assert r.step_ms is None and r.clock is not None, (r.rank, r.step_ms)
        assert "sampling misses boundaries here too often" in (r.clock.reason or ""), r.clock.reason


def test_a_mean_over_few_steps_is_not_given_where_one_missed_boundary_would_move_it():
    # GIVEN one rank of 500-ms steps, a quarter of them fetching their batch 1.3-2.2x as long, at
    # 50 Hz for 10 s: every boundary seen as far as e^-λ (0.04%) can tell, 17 intervals, too uneven
    # for a median; one 150-ms compute phase went unsampled by chance, so one interval is two steps
    from bench.sim_grid import Point, build

    pt = Point.parse("uneven:500:0.25:50:1:620000")
    rec, _ = simulate(build(pt)[0], 50, 10.0, seed=pt.seed)
    r = analyze(rec, RULES).ranks[0]
    # THEN no mean is given (it would be 5.9% long: one step in 17), and the reason says why
    assert r.step_ms is None and r.clock is not None and not r.clock.mean, r.clock
    assert "nor their mean: over 17 steps, 1 boundary that sampling missed" in (r.clock.reason or ""), r.clock.reason


def test_a_mean_is_not_given_where_the_windows_edge_may_hold_a_whole_step_the_rank_did_not_see():
    # GIVEN 2 synchronized ranks under HF's loop whose 8 workers deliver in bursts (steps of ~80 ms,
    # two in eight of ~1.05 s), at 100 Hz: every boundary seen, too uneven for a median. Rank 0's
    # first sample came after the window's first boundary, 1.08 s before its first return
    an, truths, lo, hi = grid_window("bursty:200:8:100:2:889000", 100)
    r0, r1 = an.ranks
    # THEN rank 0 gives no mean (over its 30 steps, 273 ms, -8.2% of the window's 31: was given), and
    # says why; rank 1, which saw that boundary, gives its own, within 1%
    assert r0.step_ms is None and r0.clock is not None, (r0.step_ms, r0.clock)
    assert "nor its mean: the 1080 ms before its first boundary seen may hold a whole step" in (r0.clock.reason or "")
    assert r1.clock is not None and r1.clock.mean and r1.step_ms is not None, r1.clock
    assert abs(r1.step_ms / truths[1].mean_step_ms(lo, hi) - 1) <= 0.01
    assert r1.steps == truths[1].steps_in(lo, hi)


def test_micro_batches_of_two_lengths_are_no_mean_step_where_the_visits_counted_in_them_leave_accumulation_open():
    # GIVEN 2 micro-batches a step whose 2 workers deliver in bursts (115 and 400 ms by turns), a 15-ms
    # optimizer, at 100 Hz: every return seen, too uneven for a median; their mean, 259 ms, is a
    # period that counts the long ones as two, so the optimizer's visits timed over it are 2-8 apart
    an, truths, lo, hi = grid_window("accum_bursty:500:2/2:100:1:1932000", 100)
    [r] = an.ranks
    # THEN counted in the returns, every gap is even: the micro-batches' mean is not given as the
    # step (was 259 ms for 510, -49%), and the reason says why
    assert r.step_ms is None and r.clock is not None, (r.step_ms, truths[0].mean_step_ms(lo, hi))
    # (timed, the input waited for beyond the usual micro-batch's no micro-batch's time, the gaps point
    # to 2 as well)
    assert "; nor their mean: the optimizer was seen only every 2 or a multiple of 2 of the steps counted, which " \
        "points to gradient accumulation of 2 micro-batches" in (r.clock.reason or ""), r.clock.reason
    # AND its counts say a step is an optimizer step of micro-batches not counted (was 1 micro-batch a step)
    assert r.micro_batches is None


def test_micro_batches_timed_as_more_than_the_returns_count_are_counted_in_returns():
    # GIVEN 8 micro-batches a step (800 ms), whose first one also loads the step's input (~110 ms
    # for ~65), a long optimizer, every return seen at 500 Hz
    an, truths, lo, hi = grid_window("accum:800:8/long:500:1:2716000", 500)
    [r] = an.ranks
    # THEN the optimizer steps are the job's...
    assert r.step_ms is not None and abs(r.step_ms / truths[0].median_step_ms(lo, hi) - 1) <= 0.05
    # ...and the micro-batches a step are counted in returns, 8 between each two of the optimizer's
    # visits: timed over the micro-batch period, the slow first one is two and a step 9 (stop 64's
    # "of 9 micro-batches"; stop 65 said none)
    assert truths[0].micro_batches == 8 and r.micro_batches == 8


def test_micro_batches_of_synchronized_ranks_that_saw_every_return_are_counted_in_returns():
    # GIVEN 8 ranks accumulating 12 micro-batches of 500-ms steps, every return seen on each at
    # 400 Hz, the ranks counted on one clock (a rank's own wraps, the others "joint")
    an, truths, lo, hi = grid_window("accum:500:12/short:50:8:2443000", 400)
    # THEN every rank's optimizer steps are the job's, and its micro-batches the 12 its returns
    # count between the optimizer's visits (timed over the micro-batch period, the first one, which
    # also fetches the input, made 13 on 7 ranks)
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.05
        assert r.steps == truth.steps_in(lo, hi)
        assert truth.micro_batches == 12 and r.micro_batches == 12, (r.rank, r.micro_batches, r.clock.method)


@pytest.mark.parametrize(("seed", "k"), [(0, 3), (0, 4), (1, 4)])
def test_micro_batches_delivered_in_bursts_are_counted_as_the_clock_counted_them(seed, k):
    # GIVEN one rank accumulating k micro-batches of a 200-ms optimizer step, input half of it, whose
    # 3 DataLoader workers deliver in bursts (micro-batches of ~25 and ~75 ms by turns), at 300 Hz:
    # every return seen; timed over the 28-ms period, the long micro-batches count as 3, no k divided
    # the gaps between the optimizer's visits, and the micro-batch was given as the step (-82..-85%)
    the_job = shaped_job(200, {"optimizer": 0.02, "input": 0.5}, rng=random.Random(seed), jitter=0.1,
                         accumulation=k, workers=3)
    rec, truths = simulate(the_job, 300, 10.0, seed=seed)
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    r, truth = an.ranks[0], truths[0]
    # THEN the gaps counted in the clock's own steps count k: the optimizer step is known, within 5%,
    # every step counted (but the one at an edge)
    assert r.step_ms is not None and abs(r.step_ms / _truth_ms(r, truth, lo, hi) - 1) <= 0.05, (r.step_ms, r.clock)
    assert abs(r.steps - truth.steps_in(lo, hi)) <= 1, (r.steps, truth.steps_in(lo, hi))


def test_optimizer_steps_of_micro_batches_too_uneven_for_a_median_are_given_as_their_mean():
    # GIVEN 2 micro-batches a step, 4 workers delivering in bursts: optimizer steps of ~100 and ~290 ms
    # (25 and 24 of them in the window), every micro-batch seen; their median sat at the gap (123 ms
    # for the job's 109)
    the_job = shaped_job(200, {"optimizer": 0.02, "input": 0.5}, rng=random.Random(0), jitter=0.1,
                         accumulation=2, workers=4)
    # THEN their mean is given, said so, within 1% of the job's mean optimizer step
    every_rank_the_mean(the_job, 300, 0)


def test_optimizer_steps_timed_by_the_optimizers_visits_too_uneven_for_a_median_are_their_mean():
    # GIVEN 4 synchronized ranks accumulating 4 micro-batches of a 320-ms step, 3 workers delivering
    # in bursts, at 50 Hz: the optimizer steps (one visit to the next) are of two lengths or more,
    # median 305 ms, mean 326; the steps are timed by the optimizer's visits on one rank, on that
    # rank's step on the others (``_visits_on_peers``); once given as a median, 318 ms (+4.3%)
    from bench.sim_grid import Point, build

    # THEN every rank's step is the mean, said so, within 1% of the job's mean optimizer step
    every_rank_the_mean(build(Point.parse("accum_bursty:320:4/3:50:4:1822000"))[0], 50, 1822000)


@pytest.mark.parametrize(("spec", "rate_hz", "seconds"), [
    # 1 rank, 8 workers: ready batches' ~1-ms steps among ~35-ms ones; the visits fitted 39.6 ms, the
    # burst cycle, 4 of their 34 single gaps under 21 ms (+687% on the median step, 0.4 samples)
    ("bursty:5:8:300:1:92000", 300, 10.0),
    # 1 rank, 3 workers: two ~3-ms steps and a ~33-ms one by turns, raised to 400 Hz: 38.8 ms (+1,222%)
    ("bursty:13:3:100:1:224000", 400, 10.0),
    # 8 ranks, 8 workers, raised to 400 Hz: two ranks' visits fitted 19 ms, 16 and 17 of their ~115
    # single gaps under 8.5 ms, and the others took it (530 steps for 814: +53% on the mean step)
    ("bursty:5:8:200:8:91001", 400, 10.0),
    # 2 ranks at 50 Hz over 30 s: one rank's visits fitted 163 ms, 2 of its 12 single gaps short of it
    # (within chance alone), its peer's 3 more: 185 steps for the job's 1,456 (+683% on the median)
    ("bursty:13:8:50:2:281000", 50, 30.0),
])
def test_optimizer_visits_far_closer_than_their_period_are_steps_of_other_lengths(spec, rate_hz, seconds):
    # GIVEN a job whose DataLoader workers deliver in bursts, so that its steps come in two lengths or
    # more, and whose returns fit no step: a comb fitted to the optimizer's visits, one a step, fits the
    # sums of steps of several lengths, and counts those the visits missed as whole periods
    an, truths, lo, hi = grid_window(spec, rate_hz, seconds)
    # THEN no rank is given a step time beyond 5% of its truth (none is given one at all), and the rank
    # whose visits fitted the period says why: gaps between them too short for it, beyond chance
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is None, (r.rank, r.step_ms, _truth_ms(r, truth, lo, hi))
    assert any("far shorter than it" in (r.clock.reason or "") for r in an.ranks if r.clock), \
        [r.clock.reason for r in an.ranks if r.clock]


def test_an_optimizer_comb_with_one_gap_far_closer_than_its_period_stands():
    # GIVEN 4 ranks accumulating 8 micro-batches of a 200-ms step, 3 workers delivering in bursts, a 30%
    # straggler, at 100 Hz: each rank's optimizer steps from its visits' comb, one rank with one single
    # gap of its 7 far shorter than 200 ms (a chance of 0.1% for one that short: not beyond chance)
    an, truths, lo, hi = grid_window("accum_bursty:200:8/3:100:4:1646000", 100)
    # THEN every rank is known within 1% of its truth, every step counted
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and abs(r.step_ms / _truth_ms(r, truth, lo, hi) - 1) <= 0.01, r.clock
        assert r.steps == truth.steps_in(lo, hi)


def test_returns_that_the_optimizers_visits_mark_as_micro_batches_are_no_step_where_the_visits_time_none():
    # GIVEN one rank accumulating 3 micro-batches of a 1.3-s step, 2 workers delivering in bursts, a
    # 310-ms optimizer seen in every third interval between the returns, at 300 Hz: 7 visits in 10 s,
    # too few to time the step by or count k
    from bench.sim_grid import Point, build

    pt = Point.parse("accum_bursty:1300:3/2:300:1:2472000")
    rec, _ = simulate(build(pt)[0], 300, 10.0, seed=pt.seed)
    r = analyze(rec, RULES).ranks[0]
    # THEN the step time is unknown (the returns' 470 ms was given once: -58%), and the reason says
    # the returns are micro-batches or split the step, and a longer window would help
    assert r.step_ms is None and r.clock is not None, r.clock
    reason = r.clock.reason or ""
    assert "ran in only 7 of the 21 intervals" in reason and "a longer window would hold more" in reason, reason


def test_uneven_micro_batches_seen_whole_are_counted_between_the_optimizers_visits():
    # GIVEN 4 ranks accumulating 3 micro-batches of an 800 ms step behind a 30% straggler at 200 Hz:
    # the waiting ranks' last micro-batch holds the all-reduce's wait and the optimizer, every
    # return seen, too uneven for a typical one; an 8-ms optimizer seen in 11 of the 12 steps, too
    # few visits to time the step by
    from bench.sim_grid import Point, build
    from traceml_attach.steps.clock import IRREGULAR

    pt = Point.parse("accum:800:3/short:200:4:2570000")
    the_job = build(pt)[0]
    # WHEN 10 s are sampled THEN the gaps between the visits, counted in returns (every one seen),
    # count k = 3, and every rank's optimizer step is 3 of them: known, counted exactly
    rec, truths = simulate(the_job, pt.rate_hz, 10.0, seed=pt.seed)
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.05, r.clock
        assert (r.steps, r.micro_batches) == (truth.steps_in(lo, hi), 3)
    # AND where 4 s hold too few visits to count k, the step time is unknown, and the reason says
    # the returns may be micro-batches and a longer window would help, not that the input comes in bursts
    rec, _ = simulate(the_job, pt.rate_hz, 4.0, seed=pt.seed)
    unknown = [r for r in analyze(rec, RULES).ranks if r.step_ms is None]
    assert unknown
    for r in unknown:
        # (irregular returns; or, where its mean was weighed against the optimizer's visits, which
        # another rank shows as accumulation, its micro-batches a step not counted: rank 0 here)
        assert r.clock is not None and (r.clock.cause == IRREGULAR or r.micro_batches is None), r.clock
        reason = r.clock.reason or ""
        assert "may be micro-batches of longer optimizer steps" in reason and "bursts" not in reason, reason
        assert "a longer one would hold more of them" in reason


def test_micro_batches_miscounted_behind_a_straggler_give_way_to_the_optimizers_visits():
    # GIVEN k = 3 micro-batches of a 50 ms step inside training_step(), on 4 ranks, one 30% slower:
    # the others wait in the all-reduce of their last micro-batch (12, 12 and 27 ms), too uneven
    # for the returns' period to count them, and a 1 ms optimizer seen in a quarter of the steps
    from bench.sim_grid import Point, build

    pt = Point.parse("accum:50:3/short:300:4:894000")
    rec, truths = simulate(build(pt)[0], pt.rate_hz, 10.0, seed=pt.seed)
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    # THEN the ranks whose optimizer visits fit a step three times the returns' period give the
    # optimizer step (not the 17 ms micro-batch), and the others say why they cannot
    known = [(r, t) for r, t in zip(an.ranks, truths, strict=True) if r.step_ms is not None]
    assert len(known) >= 3
    for r, truth in known:
        assert abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.05, (r.rank, r.step_ms)
        assert abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03
    for r in an.ranks:
        assert r.step_ms is not None or "optimizer" in (r.clock.reason if r.clock else "")


@pytest.mark.parametrize("seed", [0, 1])
def test_a_workers_wait_is_one_slow_step_not_several(seed):
    # 2 workers, input 80%: steps of ~100 ms and ~900 ms by turns, every boundary seen. The
    # optimizer's visits are fitted to a period when the steps' lengths fit none; the 900 ms ones
    # hold one step's compute, so they are not 9 steps of 100 ms (was 90 steps of 19)
    the_job = shaped_job(500, {"input": 0.8}, rng=random.Random(seed), jitter=0.02, shape="for", workers=2)
    rec, truths = simulate(the_job, 300, 10.0, seed=seed)
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    r, truth = an.ranks[0], truths[0]
    assert abs(r.steps - truth.steps_in(lo, hi)) <= 2, (r.steps, truth.steps_in(lo, hi), r.clock)
    right_or_unknown(the_job, 300, seed)


@pytest.mark.parametrize("spec", [
    # k = 3, micro-batches of ~2.7 samples, a long optimizer seen in 4 of 5 optimizer steps
    "accum:20:3/long:500:1:356000",
    # k = 2 on 2 ranks, micro-batches of ~4.5 samples, a 2% optimizer
    "accum:30:2/short:300:2:573000",
])
def test_optimizer_steps_are_timed_from_the_optimizers_own_visits(spec):
    # GIVEN micro-batches too short to tell apart, so the returns seen lag the optimizer step's end
    # by however many micro-batches went by unseen
    from bench.sim_grid import Point, build

    pt = Point.parse(spec)
    the_job = build(pt)[0]
    rec, truths = simulate(the_job, pt.rate_hz, 10.0, seed=pt.seed)
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    # THEN the optimizer steps, timed from the ends of the optimizer's visits, give rank 0 its step
    # (it was unknown: "too many intervals could hold one step or two")
    r, truth = an.ranks[0], truths[0]
    assert r.step_ms is not None, r.clock
    assert abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.05
    assert abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03
    right_or_unknown(the_job, pt.rate_hz, pt.seed)


@pytest.mark.parametrize(("spec", "known", "joint"), [
    # k = 3, 4.4-ms micro-batches at 500 Hz, a 2% optimizer seen in one optimizer step in nine:
    # the visits' gaps of 6 steps or more unsure by their jitter alone (every rank was unknown)
    ("accum:13:3/short:500:4:58000", 3, 0),
    # k = 2 on 8 ranks, 15-ms micro-batches at 300 Hz, one rank 30% slower: three ranks' own visits
    # were too unsure for a period of their own, and sit on the step their five peers agree on
    # (they were unknown beside them)
    ("accum:30:2/long:300:8:595000", 8, 3),
    # k = 8, 130 ms at 100 Hz, a 2% optimizer seen ~15 times a rank: two ranks' visits sit on their
    # peers' step tighter than chance would put them on one period tested (m·R̄² 7.7 and 8.5), not
    # tight enough to stand out of a search over many (9)
    ("accum:130:8/short:100:4:1566000", 4, 2),
])
def test_an_optimizer_seen_rarely_times_the_step_from_its_visits_and_its_peers(spec, known, joint):
    from bench.sim_grid import Point, build

    pt = Point.parse(spec)
    rec, truths = simulate(build(pt)[0], pt.rate_hz, 10.0, seed=pt.seed)
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    timed = [(r, t) for r, t in zip(an.ranks, truths, strict=True) if r.step_ms is not None]
    assert len(timed) >= known, [r.clock.reason for r in an.ranks if r.clock and r.step_ms is None]
    assert sum(1 for r, _ in timed if r.clock and r.clock.method == "joint") >= joint
    for r, truth in timed:
        assert abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.01, (r.rank, r.step_ms)
        assert abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03, (r.rank, r.steps)


@pytest.mark.parametrize("spec", ["accum:500:4/short:50:1:2320000", "accum:320:2/short:50:1:1960000"])
def test_an_optimizer_seen_too_rarely_to_rule_accumulation_out_asks_for_a_faster_rate(spec):
    # GIVEN gradient accumulation whose short optimizer was seen in a few optimizer steps at 50 Hz,
    # each visit a multiple of k micro-batches after the last
    from bench.sim_grid import Point, build
    from traceml_attach.diagnose.rate import faster
    from traceml_attach.steps.clock import UNDECIDED

    pt = Point.parse(spec)
    rec, _ = simulate(build(pt)[0], pt.rate_hz, 10.0, seed=pt.seed)
    an = analyze(rec, RULES)
    # THEN the step time is unknown for that reason (a micro-batch was taken for the step), and the
    # analysis advises the rate at which the optimizer would show in 60% of its optimizer steps
    tl = an.timelines["0"]
    assert an.ranks[0].step_ms is None
    assert tl.clock.cause == UNDECIDED and "so a step may be a micro-batch" in (tl.clock.reason or "")
    advice = faster(tl)
    assert advice is not None and advice[0] == tl.clock.suggested_rate_hz and "seen too rarely" in advice[1]
    assert advice[0] > pt.rate_hz
    # AND at that rate, its step is right (k = 2: 316.5 ms for 316.7) or unknown, never a micro-batch
    right_or_unknown(build(pt)[0], advice[0], pt.seed)


def test_optimizer_steps_fitted_to_a_divisor_of_the_visits_gaps_are_not_given():
    # GIVEN 2 synchronized ranks accumulating 3 micro-batches of a 30-ms step, their 2 workers
    # delivering in bursts, at 500 Hz: the returns fit no period, and the optimizer's visits (about
    # 300 of the window's 328 optimizer steps, 2.9 samples each) come 16-60 ms apart
    an, truths, lo, hi = grid_window("accum_bursty:30:3/2:500:2:557000", 500)
    # THEN no optimizer step is fitted to a divisor of their gaps (was 12.2 ms and 821 steps: -60%)
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is None or abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.05, (r.step_ms, r.clock)
        assert r.steps <= 1.03 * truth.steps_in(lo, hi) + 2, (r.steps, truth.steps_in(lo, hi))


def test_long_steps_in_which_the_peers_saw_boundaries_are_counted_as_the_steps_they_hold():
    # GIVEN 4 ranks of bursty 33-ms steps at 500 Hz: a step whose input was ready spends under a
    # sample outside backward, so its boundary goes unseen far more often than e^-λ (7e-5) says,
    # and the intervals that hide one were taken for slow steps: 223-227 steps of the job's 299
    # THEN the long steps in which the ranks that step with them saw boundaries are split there,
    # and every rank counts -1.0 to -3.0% (steps hidden in intervals under 1.75 typical ones stay
    # hidden: a ready step of 10 ms beside a 33-ms one); the typical step is the clock's, as before
    counted_within("bursty:13:3:500:4:238000", 500, 0.035)


def counted_within(spec: str, rate_hz: float, share: float, ranks: int | None = None, seconds: float = 10.0) -> None:
    """Every rank of a grid point sampled at ``rate_hz`` for ``seconds`` (the first ``ranks`` of
    them) counts the window's steps within ``share`` and gives its median step within 5%."""
    an, truths, lo, hi = grid_window(spec, rate_hz, seconds)
    for r, truth in itertools.islice(zip(an.ranks, truths, strict=True), ranks):
        steps = truth.steps_in(lo, hi)
        assert abs(r.steps - steps) <= share * steps, (r.rank, r.steps, steps)
        assert r.step_ms is not None and abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.05


def test_intervals_without_the_optimizer_far_shorter_than_those_with_it_are_micro_batches():
    # GIVEN 2 ranks accumulating 2 micro-batches of 30-ms steps whose 2 workers deliver in bursts:
    # on rank 0 a ready micro-batch of ~3 ms, then one that waits for its input, with a 7.5-ms
    # optimizer. At 400 Hz the ready one's return shows in one step in five: 78 of 392 intervals
    # hold no optimizer (under MIN_WITHOUT's quarter) and it goes unseen with e^-λ 5.2% (over
    # MARKS_UNSEEN), so the intervals were taken for steps: 403 for the job's 330 (+22%)
    # THEN the intervals without it, 4.2 ms to the others' 29.3 (median), are no steps missing a
    # visit (78 such would be chance 1e-20): the optimizer's visits mark rank 0's steps
    counted_within("accum_bursty:30:2/2:100:2:485000", 400, 0.03, ranks=1)


def test_a_micro_batch_that_waits_for_its_input_is_one_micro_batch():
    # GIVEN one rank accumulating 4 micro-batches of a 500-ms step whose 4 workers deliver in
    # bursts: one micro-batch a step waits ~110 ms for its input, twice as long as the others, and
    # the 10-ms optimizer goes unseen in a step in three at 100 Hz. Timed over the returns' period,
    # that micro-batch counted as two, every gap between the optimizer's visits was a multiple of 5,
    # and over a 30-s window (the live view's) groups of 5 were given: 48 steps of 611 ms for the
    # job's 60 of 498 (+23%)
    # THEN the input waited beyond the usual micro-batch's is no micro-batch's time: k = 4
    an, truths, lo, hi = grid_window("accum_bursty:500:4/4:100:1:2084000", 100, 30.0)
    r, truth = an.ranks[0], truths[0]
    assert r.micro_batches == 4
    assert r.steps == truth.steps_in(lo, hi)
    assert r.step_ms is not None and abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.01


@pytest.mark.parametrize("seconds", [10.0, 30.0])
def test_returns_missed_between_the_optimizers_visits_leave_them_to_align_the_steps(seconds):
    # GIVEN one rank accumulating 4 micro-batches of an 80-ms step whose 3 workers deliver in
    # bursts, at 500 Hz: a micro-batch's return goes unseen now and then, so some gaps between
    # the optimizer's visits, counted in returns, are one short of a multiple of 4 (3, 7, 11),
    # while timed over the period they are multiples of 4. Over 30 s (the live view's window)
    # timing made up enough of the returns missed that only 20 gaps of 205 timed were one short
    # (under the 10% once asked): grouped by 4 returns, 356 steps of 80.4 ms for the job's 372 of
    # 75.4 (+6.5%)
    # THEN k = 4 is counted, and the visits, not runs of 4 returns, end the steps: grouped by 4
    # returns they were 117 for the job's 123 over 10 s (80.4 ms for 75.6, +6.4%)
    counted_within("accum_bursty:80:4/3:500:1:1116000", 500, 0.03, seconds=seconds)


def test_a_comb_that_the_boundaries_its_peers_saw_refute_gives_no_step():
    # GIVEN 8 ranks whose input, 90% of a ~24-ms step, runs 1.3-2.2x as long in 4 steps of 10, at
    # 400 Hz over 30 s: a rank whose input is the slowest of a step hardly waits, so its boundary goes
    # unseen (15% truly, where e^-λ says 6%), and a comb fitted to its intervals counted the slow
    # steps as two: 23.5 ms on every rank for the job's median of 25.7 (-8.8%), 1,044-1,081 steps for
    # 1,016. Its intervals split at the boundaries its peers saw inside them have a median of 27.1 ms
    # (the samples' lag at each end moves the median of skewed steps towards their mean)
    an, truths, lo, hi = grid_window("uneven:20:0.4:100:8:227000", 400, 30.0)
    # THEN no rank is given a step time, the reason says why, and the steps are a floor
    steps = truths[0].steps_in(lo, hi)
    for r in an.ranks:
        assert r.step_ms is None, (r.rank, r.step_ms, truths[0].median_step_ms(lo, hi))
        assert r.clock is not None and "too uneven for a period to count them" in (r.clock.reason or "")
        assert r.steps <= steps


def test_ranks_left_unknown_for_uneven_steps_are_counted_on_the_boundaries_any_of_them_saw():
    # GIVEN 8 synchronized ranks of ~20-ms steps whose 2 workers deliver in bursts, at the 400 Hz the
    # attacher raises them to: each rank's e^-λ (0.2-0.5%) says it saw every boundary, yet each saw
    # 85-91% of them (a ready batch's visit outside backward is far shorter than the mean), and its
    # intervals of two were too many for chance: the median of its steps could move beyond 5% on
    # which of them hide a boundary, so every rank was unknown for slow steps ("uneven"). Their
    # union misses 2-4% by Chao's estimate, and split at it, their pieces are 494-501 for the job's 499
    # THEN every rank is counted on the boundaries any of them saw: known within 5%, its steps within 1.5%
    counted_within("bursty:13:2:50:8:203000", 400, 0.015)
    # GIVEN 8 ranks of ~330-ms steps waiting 99% of them, slowed up to 3x by other work on the cores,
    # at 500 Hz: 7 saw every boundary, one saw its steps vary too much for its intervals to pin their
    # median, so none was given one (irregular steps); on the union every rank sees the 26 steps
    counted_within("contended:320:classic:500:8:559000", 500, 0.0)


def test_the_union_does_not_time_slow_steps_whose_median_the_blur_moves():
    # GIVEN 8 ranks of ~130-ms steps, 40% of them fetching their batch 1.3-2.2x as long (the mean
    # step 21% over the median), at 100 Hz over 30 s: every rank unknown for slow steps. On their
    # union every step is seen, but at 13 samples a step the blur of the ends moves the median of
    # steps so skewed: +6.9% on 7 ranks, +21% on the eighth
    from bench.sim_grid import Point, build

    rec, _ = simulate(build(Point.parse("uneven:130:0.4:100:8:467000"))[0], 100, 30.0, seed=467000)
    an = analyze(rec, RULES)
    # THEN no rank is given a step time, and the attacher is advised the rate for slow steps
    assert all(r.step_ms is None for r in an.ranks), [r.step_ms for r in an.ranks]
    assert advise_rates(rec, an.pids, an.timelines, an.end_ns or 0), "no faster rate advised"
    # GIVEN 4 ranks of ~170-ms steps, a quarter of them slowed, at 50 Hz over 30 s: counted at 1%,
    # 10-22 slow pieces of each rank's were taken for two, which narrowed the skew of the steps
    # counted (known -1.9%, counting 3.8-5.1% too many, and the attacher went on at 100 Hz only)
    # THEN the pieces' own skew is read: no step time, and the rate for slow steps advised
    rec, _ = simulate(build(Point.parse("uneven:130:0.25:50:4:442000"))[0], 50, 30.0, seed=442000)
    an = analyze(rec, RULES)
    assert all(r.step_ms is None for r in an.ranks), [r.step_ms for r in an.ranks]
    assert advise_rates(rec, an.pids, an.timelines, an.end_ns or 0), "no faster rate advised"


def test_the_union_of_ranks_whose_comb_took_slow_steps_for_several_is_not_taken():
    # GIVEN 8 ranks of ~26-ms steps, 40% of them fetching their batch 1.3-2.2x as long, at 400 Hz:
    # the synchronized ranks' intervals fit a period only by counting far more steps hidden in longer
    # ones than e^-λ allows (``sync.slow_not_unseen``), so the long intervals are slow steps. On the
    # union's pieces, the wraps clock again counted far more steps hidden in them than the boundaries
    # all of them missed (Chao's estimate), and its median strayed with where the samples fell (-8.9%
    # for this draw of the samples, -0.9% and -5.0% for two others). Both that count
    # (``sync.beyond_chance``) and the pieces' skew at 10 samples a step (``union._blurred``) refuse it
    from bench.sim_grid import Point, build

    rec, truths = simulate(build(Point.parse("uneven:20:0.4:100:8:227000"))[0], 400, 10.0, seed=227001)
    an = analyze(rec, RULES)
    # THEN no rank is given a step time
    assert all(r.step_ms is None for r in an.ranks), [r.step_ms for r in an.ranks]
    # GIVEN 2 ranks of bursty ~2-ms steps (ready batches among 15-ms ones) at 400 Hz: one saw its
    # returns as steps under 5 samples, too short to tell apart; the other fitted its own wraps
    # THEN no step time beyond 5% (counted on the union's comb, where 59% of the boundaries went
    # unseen by all, they were given 14.8 ms for a median step of 2.4 ms)
    an, truths, lo, hi = grid_window("bursty:5:4:200:2:49000", 400)
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is None or abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.05, r.step_ms


def test_synchronized_ranks_share_the_median_of_their_own_typical_steps():
    # GIVEN 8 ranks of ~34-ms steps, 40% of them fetching their batch 1.3-2.2x as long, a 70% straggler,
    # at 400 Hz: every rank saw every boundary, and each rank's own median, blurred by where its own
    # samples fell, is 34.3-35.4 ms for the job's 33.7; the reference rank (the surest clock) gave its
    # 35.4 to every rank (+5.1%)
    an, truths, lo, hi = grid_window("uneven:20:0.4:300:8:235001", 400)
    # THEN every rank given a step time is within 5% of the job's median step (the ranks' median: +3.3%)
    known = [(r, t) for r, t in zip(an.ranks, truths, strict=True) if r.step_ms is not None]
    assert len(known) >= 7, [r.clock.reason for r in an.ranks if r.clock]
    for r, truth in known:
        assert abs(r.step_ms / _truth_ms(r, truth, lo, hi) - 1) <= 0.05, (r.rank, r.step_ms, r.clock)


def test_a_mean_is_refused_where_intervals_worked_as_long_as_several_steps():
    # GIVEN one rank whose 6 DataLoader workers deliver in bursts: five ~100-ms steps, then a wait of
    # 2-3 s for the next burst, at 100 Hz over 30 s; its e^-λ says it saw every boundary, but a ready
    # batch's boundary is far shorter than the mean visit, and 6 of the 59 went unseen: two steps seen
    # as one of 180-220 ms (under two medians), or a ready batch's step with the wait (2.3 s that worked
    # 202 ms, two steps' time on the CPU); the mean of the 53 intervals was given +11.3%
    an, truths, lo, hi = grid_window("bursty:500:6:100:1:1064001", 100, 30.0)
    (r,), (truth,) = an.ranks, truths
    # THEN no mean is given: intervals that worked as long as two steps could hide more than 5%
    assert r.step_ms is None, (r.step_ms, truth.mean_step_ms(lo, hi))
    assert r.clock is not None and "worked as long on a CPU" in (r.clock.reason or ""), r.clock


def test_a_shared_median_is_refused_where_the_peers_saw_many_boundaries_its_rank_missed():
    # GIVEN 8 ranks of bursty 50-ms steps whose 6 workers deliver in bursts (ready batches' steps of
    # ~22 ms among ~200-ms ones), at 100 Hz over 30 s (the live view's window): the reference rank's
    # e^-λ (5e-4) says it saw every boundary, but a ready batch's boundary is far shorter than the
    # mean visit, and its peers saw 36 inside its intervals; the ranks shared its median, 218 ms for
    # the job's 206 (+6.1%), counting 137-157 of 163 steps
    an, truths, lo, hi = grid_window("bursty:50:6:100:8:567000", 100, 30.0)
    # THEN no rank is given that median: unknown, and the reason says why
    for r in an.ranks:
        assert r.step_ms is None, (r.rank, r.step_ms, truths[0].median_step_ms(lo, hi))
        assert r.clock is not None and "sampling misses boundaries here too often" in (r.clock.reason or "")


def test_a_shared_median_is_taken_over_the_intervals_split_where_the_peers_saw_boundaries():
    # GIVEN 4 ranks of bursty 80-ms steps whose 3 workers deliver in bursts, at 300 Hz: the
    # reference rank's e^-λ says it saw every boundary, but its peers saw 10 inside its 59
    # intervals (its ready batches' short steps), and the median of its intervals, which the ranks
    # shared, was 210.2 ms for the job's 204.9 (+2.6%)
    an, truths, lo, hi = grid_window("bursty:80:3:300:4:634000", 300)
    # THEN split at its peers' boundaries, its intervals' median is the step (those no rank saw,
    # 8.3 by Chao's estimate, could move it 2.1% more as the 10 moved it): every rank within 1%
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.01, (r.rank, r.step_ms)


def test_the_boundaries_no_rank_saw_could_move_a_filled_median_as_each_added_one_did():
    from traceml_attach.steps.peersplit import _moved_beyond

    # 36 boundaries the peers saw moved the median 8%: 17.5 no rank saw could move it 3.9% more
    assert _moved_beyond(226.8, 208.4, 17.5, 36)
    # 10 moved it 2.5%: 8.3 more could move it 2.1%, within half of MAX_STEP_ERROR
    assert not _moved_beyond(210.2, 205.0, 8.3, 10)
    # no stretch that every rank sampled tells how many no rank saw: nothing vouches for it
    assert _moved_beyond(100.0, 100.0, float("inf"), 5)


def test_slow_steps_in_which_no_peer_saw_a_boundary_are_counted_as_one_step_each():
    # GIVEN 8 synchronized ranks (HF Trainer's loop, a 70% straggler) of 30-ms steps that other work
    # on the cores slows up to 2x, at 400 Hz: a comb counted every interval as long as two steps as
    # two, and 7 ranks counted +6.3..+7.6% (335-339 of the job's 315)
    # THEN those in which the ranks that cover them saw no boundary (all of them missing one: the
    # product of their e^-λ) are one slow step each, and every rank counts within 3% (314-319). (Its
    # first case, 8 ranks whose input ran 1.3-2.2x as long in 4 steps of 10, is now unknown: its comb
    # is refuted by its peers' boundaries, test_a_comb_that_the_boundaries_its_peers_saw_refute_...)
    counted_within("contended:30:library:50:8:283000", 400, 0.03)


def test_an_interval_counted_as_two_steps_is_one_only_where_its_peers_would_have_seen_a_boundary():
    from traceml_attach.steps.batch_timeline import Timeline
    from traceml_attach.steps.clock import Step, StepClock
    from traceml_attach.steps.mean import PeerBounds
    from traceml_attach.steps.peersplit import ALL_MISSED, _merged

    typical = 100 * MS
    interval = Step(0, 2 * typical, {"forward": 2 * typical})
    halves = (Step(0, typical, {"forward": typical}), Step(typical, 2 * typical, {"forward": typical}))
    tl = Timeline(1, None, None, None, (), halves, StepClock("joint", typical, typical_ns=typical), {},
                  intervals=(interval,))
    around = [-typical, -0.0, 2.0 * typical, 3.0 * typical]   # boundaries on either side, none inside
    # GIVEN peers that cover the interval and saw no boundary in it: three that each miss one with
    # chance 5% would all have missed it with chance 1.25e-4
    sure = PeerBounds(5 * MS, (around, around, around), (0, 0, 0), (0.05, 0.05, 0.05))
    # THEN it is one slow step
    assert ALL_MISSED >= 0.05 ** 3
    assert _merged(tl, sure) == [interval]
    # but not where the peers miss boundaries too often for their silence to tell (half the time each)
    assert _merged(tl, PeerBounds(5 * MS, (around, around, around), (0, 0, 0), (0.5, 0.5, 0.5))) is None
    # nor where a peer saw a boundary inside it, nor where no peer's e^-λ is known, nor no peer covers it
    inside = sorted([*around, 1.0 * typical])
    assert _merged(tl, PeerBounds(5 * MS, (around, inside, around), (0, 0, 0), (0.05, 0.05, 0.05))) is None
    assert _merged(tl, PeerBounds(5 * MS, (around,), (0,), (None,))) is None
    assert _merged(tl, PeerBounds(5 * MS, ([3.0 * typical],), (0,), (0.001,))) is None


def test_the_boundaries_no_rank_saw_are_estimated_from_how_many_ranks_saw_each_of_the_others():
    from traceml_attach.steps.batch_timeline import Timeline
    from traceml_attach.steps.clock import StepClock
    from traceml_attach.steps.mean import PeerBounds, unseen_by_all

    # GIVEN 40 boundaries 10 ms apart, a rank and three peers (the last at an offset of 3 ms):
    # 4 boundaries seen by one of them only, 4 by exactly two, the rest by all four
    truth = [i * 10 * MS for i in range(40)]
    by_one, by_two = set(range(10, 14)), set(range(20, 24))
    own = [t for i, t in enumerate(truth) if i not in by_two or i % 2]
    peer1 = [t for i, t in enumerate(truth) if i not in by_one and (i not in by_two or i % 2)]
    peer2 = [t for i, t in enumerate(truth) if i not in by_one and (i not in by_two or not i % 2)]
    peer3 = [t + 3 * MS for i, t in enumerate(truth) if i not in by_one and (i not in by_two or not i % 2)]
    tl = Timeline(1, None, None, None, (), (), StepClock("wraps", 10 * MS), {}, bounds=own)
    peers = PeerBounds(2 * MS, (peer1, peer2, peer3), (0, 0, 3 * MS), (0.1, 0.1, 0.1))
    # THEN those none of them saw: f1^2 / 2 f2 = 16 / 8
    assert unseen_by_all(tl, peers) == 2.0
    # and where every boundary was seen by all of them, none
    full = replace(tl, bounds=truth)
    assert unseen_by_all(full, PeerBounds(2 * MS, (truth, truth), (0, 0), (0.1, 0.1))) == 0.0
    # and nothing is said to be few where they sampled no stretch together
    late = [t + 500 * MS for t in truth]
    assert unseen_by_all(full, PeerBounds(2 * MS, (late,), (0,), (0.1,))) == float("inf")


def test_a_long_step_is_cut_into_no_more_pieces_than_the_typical_steps_it_holds():
    # GIVEN a step twice the typical one, inside which the peers saw a boundary near its middle and
    # two near its quarters (micro-batch returns of a job that accumulates 2, taken for steps)
    from traceml_attach.steps.clock import Step
    from traceml_attach.steps.peersplit import NEAR, _nearest

    typical = 100_000_000
    step = Step(0, 2 * typical, {"forward": 2 * typical})
    cuts = [0.5 * typical, 0.97 * typical, 1.5 * typical]
    # THEN it is cut once, at the boundary nearest its middle
    assert _nearest(cuts, step, typical) == [int(0.97 * typical)]
    # and not where no peer's boundary lies near the middle
    assert _nearest([0.5 * typical, 1.5 * typical], step, typical) == []
    assert NEAR * typical < 0.5 * typical


def test_ranks_whose_returns_fit_no_period_are_counted_on_the_boundaries_any_of_them_saw():
    # GIVEN 8 ranks that wait in the all-reduce through 95% of their 200-ms steps, which jitter 20%,
    # at 400 Hz: each rank shows its loop in a 10-ms visit, and with the boundaries it misses its
    # intervals fit no period of its own ("fit no regular step period": every rank unknown)
    an, truths, lo, hi = grid_window("classic:200:0.95:50:8:863000", 400)
    # THEN each rank's intervals split at the boundaries its peers saw inside them hold every step
    # (Chao's estimate of those all of them missed: none), and every rank is counted on them: its
    # median within 2% of the job's, its steps within 3%
    for r, truth in zip(an.ranks, truths, strict=True):
        steps = truth.steps_in(lo, hi)
        assert r.step_ms is not None and abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.02, (r.rank, r.clock)
        assert abs(r.steps - steps) <= 0.03 * steps, (r.rank, r.steps, steps)


def test_a_rank_whose_returns_are_its_optimizer_steps_takes_its_peers_step_where_its_visits_sit_on_it():
    # GIVEN 4 ranks accumulating 4 micro-batches of 500-ms steps whose 3 workers deliver in bursts,
    # behind a 30% straggler, at 100 Hz over 30 s: rank 0's optimizer visits time its steps (+0.9%);
    # the others see one return an optimizer step, every one, too uneven for a median of their own,
    # and their optimizer's visits, which end every interval, were not asked: unknown on 3 ranks
    an, truths, lo, hi = grid_window("accum_bursty:500:4/3:100:4:2066000", 100, 30.0)
    # THEN those visits sit on rank 0's step: every rank has it, and the job's steps
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.02, (r.rank, r.clock)
        assert r.steps == truth.steps_in(lo, hi)


def test_returns_inside_an_optimizer_step_that_the_optimizer_never_visits_are_no_steps():
    # GIVEN 8 ranks of 13-ms optimizer steps of two micro-batches, one waiting for a bursty
    # DataLoader's batch and one of about 1 ms with its batch already there, at 400 Hz: the optimizer
    # is seen too seldom to count the micro-batches, so every return was a step, and where the 1-ms
    # one's return was seen too, the step was counted twice: 793-952 steps for the job's 768 (+3-24%)
    # THEN the short intervals the optimizer never visits join their neighbours: every rank counts
    # the job's steps within 3%, and its step time holds (within 5%)
    counted_within("accum_bursty:13:2/2:200:8:11000", 400, 0.03)


def test_short_steps_that_the_optimizer_visits_as_often_as_the_long_ones_are_steps():
    from traceml_attach.steps.batch_timeline import Timeline
    from traceml_attach.steps.clock import Step, StepClock
    from traceml_attach.steps.extra_returns import without_extra_returns

    typical = 100 * MS
    rng = random.Random(7)

    def timeline(short_visited: float) -> Timeline:
        steps, t = [], 0
        for i in range(60):
            dur = 10 * MS if i % 3 == 2 else typical   # one step in three short (a burst's ready batch)
            visited = rng.random() < (short_visited if dur < typical else 0.5)
            steps.append(Step(t, t + dur, {"forward": dur - MS, "optimizer": MS if visited else 0}))
            t += dur
        return Timeline(1, None, None, None, (), tuple(steps), StepClock("wraps", typical, typical_ns=typical), {})

    # GIVEN short steps in which the optimizer is seen as often as in the long ones (each a step, a
    # burst's ready batches): THEN they are steps
    kept = timeline(0.5)
    assert without_extra_returns(kept) is kept
    # GIVEN short ones it never visits, where the long ones show it half the time: THEN each joins a
    # neighbour, and the steps left are about one typical step each
    joined = without_extra_returns(timeline(0.0))
    assert len(joined.steps) == 40
    assert all(s.dur_ns in (typical, typical + 10 * MS) for s in joined.steps)
    assert sum(s.dur_ns for s in joined.steps) == 40 * typical + 20 * 10 * MS


def test_short_returns_the_steps_seen_whole_cannot_hold_are_no_evidence_not_an_error():
    from traceml_attach.steps.extra_returns import fewer_by_chance

    # GIVEN three ranks whose short returns show the optimizer in none of their 43 steps seen whole,
    # and a fourth in 5 of its 48: THEN how likely so few by chance is Fisher's one-sided tail
    assert fewer_by_chance(0, 43, 5, 48) == pytest.approx(math.comb(48, 5) / math.comb(91, 5))
    # GIVEN every rank's short returns more than its steps seen whole (the comb's visible share low:
    # 50 of 43, 12 of 9), no draw: THEN no evidence either way, where it raised ZeroDivisionError
    assert fewer_by_chance(50, 43, 12, 9) == 1.0


def test_an_optimizer_step_whose_micro_batches_are_fetched_before_the_first_is_timed():
    # GIVEN one rank of HF Trainer's shape accumulating 4 micro-batches of a 100-ms optimizer step,
    # get_batch_samples fetching all 4 before the first (20% of the step), at 400 Hz: the fetch's
    # micro-batch is twice the others, and on the micro-batches' 20-ms period it read as a slow step
    # (doubts.lumped): the step was unknown ("slow steps"), 73 steps said for the job's 100
    # THEN each optimizer step begins at a fetch: counted within 3%, timed within 5%
    for seed in (62000, 97000, 100000):
        counted_within(f"accum:100:4/short:400:1:{seed}", 400, 0.03)


def fetching(pattern: str, steps: int, seed: int = 5):
    """A timeline of ``steps`` optimizer steps whose intervals follow ``pattern`` ("F": a 40-ms
    interval holding a fetch, "G": one that also steps the optimizer, ".": a 20-ms micro-batch, "O":
    one that may hold the optimizer, seen in half of them, "X": one that always does), at 400 Hz,
    every return and every fetch seen."""
    from traceml_attach.steps.batch_timeline import Timeline
    from traceml_attach.steps.clock import Step, StepClock

    rng = random.Random(seed)
    intervals, t = [], 0
    for _ in range(steps):
        for c in pattern:
            dur = 40 * MS if c in "FG" else 20 * MS
            phases = {"forward": dur // 2, "backward": dur // 2}
            if c in "FG":
                phases["input"] = 20 * MS
            if c in "XG" or (c == "O" and rng.random() < 0.5):
                phases["optimizer"] = MS
            intervals.append(Step(t, t + dur, phases))
            t += dur
    return Timeline(1, None, None, None, (), tuple(intervals), StepClock("wraps", 20 * MS, unseen=1e-4), {},
                    intervals=tuple(intervals), rate_hz=400)


def test_fetches_begin_the_steps_where_the_optimizer_ends_one_before_each():
    from traceml_attach.steps.accumulation import by_fetch

    # GIVEN 40 optimizer steps of 4 micro-batches, all fetched before the first (HF Trainer's shape),
    # the optimizer seen in the last micro-batch of half of them
    stepped = by_fetch(fetching("F..O", 40))
    # THEN the steps are the runs from one fetch to the next: 39 whole ones of 100 ms, 4 micro-batches
    assert stepped is not None and len(stepped.steps) == 39
    assert stepped.clock.typical_ns == 100 * MS and stepped.micro_batches == 4


def test_a_micro_batch_that_fetches_too_now_and_then_begins_no_step():
    from traceml_attach.steps.accumulation import by_fetch
    from traceml_attach.steps.clock import Step

    # GIVEN 40 such steps, the third micro-batch of two of them waiting for its input too
    tl = fetching("F..O", 40)
    extra = {4 * 10 + 2, 4 * 30 + 2}
    intervals = tuple(Step(iv.start_ns, iv.end_ns, {**iv.phases_ns, "input": MS}) if i in extra else iv
                      for i, iv in enumerate(tl.intervals))
    stepped = by_fetch(replace(tl, steps=intervals, intervals=intervals))
    # THEN each of those fetches, 2 returns after the step's own and 2 before the next's, begins no
    # step: still 39 steps of 100 ms
    assert stepped is not None and len(stepped.steps) == 39 and stepped.clock.typical_ns == 100 * MS


@pytest.mark.parametrize("pattern", [
    "GX",     # one micro-batch a step, the loader waited in every other step (2 workers in bursts)
    "..G",    # the last micro-batch of each step waits for its input, then steps the optimizer
    "F.X.",   # the optimizer in the middle of the fetches' runs: they begin no optimizer step
])
def test_fetches_that_the_optimizer_does_not_end_a_run_before_begin_no_steps(pattern: str):
    from traceml_attach.steps.accumulation import by_fetch

    # GIVEN fetches once in a while, every one seen, but the optimizer elsewhere than right before
    # each (half its visits in "GX"; all of them in the others, whose runs between fetches never end
    # with it either)
    # THEN they mark no steps
    assert by_fetch(fetching(pattern, 40)) is None


@pytest.mark.parametrize("pattern", ["F.FX", "F.FO"])
def test_fetches_twice_an_optimizer_step_begin_no_steps(pattern: str):
    from traceml_attach.steps.accumulation import by_fetch

    # GIVEN 4 micro-batches a step whose 2 workers deliver in bursts: the first and the third wait
    # for their input, and the optimizer, always or in half the steps, sits right before a fetch
    # THEN the runs that end with it are 2 apart, never 1: the fetches begin no steps (each run
    # between them would be half a step)
    assert by_fetch(fetching(pattern, 40)) is None


def test_a_whole_optimizer_step_before_the_first_one_found_is_counted_in_returns_not_on_the_period():
    # GIVEN 8 ranks under Lightning's loop accumulating 3 micro-batches of ~320-ms optimizer steps,
    # at 200 Hz over 10 s: every return seen, 3 in every step found. The window's first whole step
    # (14-314 ms) is 300 ms, shorter than the period by more than the samples' lag: measured on the
    # period, the stretch before the first step found held no whole step
    an, truths, lo, hi = grid_window("accum:320:3/long:200:8:2031000", 200)
    # THEN its 3 returns, as many as each step found holds, are that step: every rank counts the
    # window's 31 (each counted 30, -3.2%)
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.05
        assert r.steps == truth.steps_in(lo, hi) == 31, (r.rank, r.steps)


def test_returns_before_the_first_optimizer_step_found_that_k_does_not_go_into_are_measured_on_the_period():
    # GIVEN 8 ranks accumulating 4 micro-batches of ~1.3-s optimizer steps whose 2 workers deliver in
    # bursts, at 400 Hz: every return seen by e^-λ, 4 in every step found; one rank saw only 3 before
    # its first step found (a return missed after all)
    an, truths, lo, hi = grid_window("accum_bursty:1300:4/2:100:8:2527000", 400)
    # THEN that stretch is measured on the period, one step long, and every rank counts the
    # window's 7 (counted in returns, 3 of 4, it would count 6)
    assert [r.steps for r in an.ranks] == [t.steps_in(lo, hi) for t in truths] == [7] * 8


def test_as_many_returns_as_a_step_holds_after_the_last_optimizer_step_found_are_left_to_the_period():
    # GIVEN 4 ranks accumulating ~640-ms optimizer steps whose 3 workers deliver in bursts, at 100 Hz
    # over 30 s: rank 0 saw 2 returns in every step found (of 4 micro-batches), and 2 after its last
    # one, of a step the window ends in the optimizer of, 45 ms before the step's end
    an, truths, lo, hi = grid_window("accum_bursty:500:4/3:100:4:2066000", 100, 30.0)
    # THEN those returns are measured on the period, no whole step: every rank is known and counts
    # the window's 46 (counted in returns as one, rank 0 read 47, and its irregular returns left the
    # others unknown)
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.05, r.rank
        assert r.steps == truth.steps_in(lo, hi) == 46, (r.rank, r.steps)


def test_fewer_returns_than_a_step_holds_after_the_last_optimizer_step_found_are_no_whole_step():
    # GIVEN 8 ranks accumulating 4 micro-batches of ~800-ms optimizer steps (a long optimizer), at
    # 100 Hz: every return seen, 4 in every step found; after the last one, 3 returns and the window
    # ends in the optimizer's visit, 46 ms before the step does. Measured on the period (803 ms), the
    # 816 ms after the last step found held a whole step
    an, truths, lo, hi = grid_window("accum:800:4/long:100:8:2627000", 100)
    # THEN every rank counts the window's 11 (each counted 12, +9.1%)
    assert [r.steps for r in an.ranks] == [t.steps_in(lo, hi) for t in truths] == [11] * 8


def test_a_step_whose_return_shows_late_after_the_last_optimizer_step_found_is_still_counted():
    # GIVEN 2 ranks accumulating 4 micro-batches of ~1.3-s optimizer steps whose 4 workers deliver in
    # bursts, at 300 Hz: rank 1 saw 3 returns after its last step found, and the step they begin
    # ended 112 ms before the window's edge, its return not yet shown (the next step waits for its
    # input off the loop's lines): 878 ms open, longer than a step's last micro-batch and optimizer
    an, truths, lo, hi = grid_window("accum_bursty:1300:4/4:300:2:2573000", 300)
    # THEN that stretch is measured on the period, and both ranks count the window's 7 (counted in
    # returns, 3 of 4, rank 1 would count 6)
    assert [r.steps for r in an.ranks] == [t.steps_in(lo, hi) for t in truths] == [7, 7]


def test_synchronized_ranks_that_each_see_a_third_of_their_boundaries_are_counted_on_the_comb_of_their_union():
    # GIVEN 8 ranks waiting in the all-reduce through 99% of their 80-ms steps (15% jitter), at 500 Hz:
    # each saw 23-51% of its boundaries, too few for a comb of its own ("the steps vary too much"),
    # and the boundaries none of them saw were ~30% of their union's, too many for its pieces to be
    # every step
    # THEN the comb fitted to each rank's pieces (its intervals split at its peers' boundaries) holds:
    # every rank is known within 5% and counts within 3.5% (unknown on every rank)
    counted_within("classic:80:0.99:500:8:699000", 500, 0.035)


def test_a_rank_whose_last_steps_only_its_peers_saw_counts_none_of_them_again_at_the_windows_edge():
    # GIVEN 4 ranks waiting in the all-reduce through 99% of their ~500-ms steps (20% jitter), at
    # 300 Hz, counted on the comb of their union: on 2 of them the last piece ends at a peer's
    # boundary after the rank's own last one
    an, truths, lo, hi = grid_window("classic:500:0.99:300:4:1094000", 300)
    # THEN the stretch after that piece, not after the piece's start, is the edge: every rank counts
    # the window's 18 (those 2 counted 19, the last piece once more in the edge after its start)
    assert [r.steps for r in an.ranks] == [t.steps_in(lo, hi) for t in truths] == [18] * 4
    assert all(r.step_ms is not None and abs(r.step_ms / t.median_step_ms(lo, hi) - 1) <= 0.05
               for r, t in zip(an.ranks, truths, strict=True))


def test_a_step_known_on_the_comb_of_the_ranks_union_is_read_again_faster():
    # GIVEN 8 ranks waiting in the all-reduce through 99% of their ~500-ms steps, at 200 Hz over 30 s:
    # no rank's own returns fit a period, and the comb of their union's pieces gives the step (+0.8%)
    # but counts 55-59 of the window's 59 (-6.8% on rank 5); on 2 ranks the pieces on that comb read
    # as slow steps ("the long intervals ... are slow steps": unknown had they been taken), and those
    # are counted on their peers' clock
    an, truths, faster = advised_at("classic:500:0.99:200:8:1091000", 200, 30.0, 400)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    assert all(r.step_ms is not None and abs(r.step_ms / t.median_step_ms(lo, hi) - 1) <= 0.05
               for r, t in zip(an.ranks, truths, strict=True))
    # THEN the attacher is advised a faster rate for the boundaries the ranks' own returns mostly
    # leave unseen (at 400 Hz every rank counts 58-59), as it would be were the step unknown
    assert faster is not None and faster > 200


def advised_at(spec: str, rate_hz: int, seconds: float, max_hz: int) -> tuple[Analysis, list[Truth], int | None]:
    """A grid point sampled at ``rate_hz`` for ``seconds``: its analysis, each rank's truth, and the
    rate its analysis advises the attacher (``bench.sim_grid.advised_hz``, capped at ``max_hz``)."""
    from bench.sim_grid import Point, advised_hz, build

    pt = Point.parse(spec)
    rec, truths = simulate(build(pt)[0], rate_hz, seconds, seed=pt.seed)
    an = analyze(rec, RULES)
    return an, truths, advised_hz(rec, an, max_hz)


def test_slow_steps_whose_hidden_boundaries_a_draw_decided_are_read_again_where_every_boundary_shows():
    # GIVEN 8 ranks of ~130-ms steps, 40% of them fetching their batch 1.3-2.2 times as long, at
    # 100 Hz: a boundary goes unseen 1.1-1.8% of the time (e^-λ), so a draw decides which long
    # intervals hide one, and that moves the median beyond 5%: unknown on every rank
    an, _, faster = advised_at("uneven:130:0.4:100:8:467000", 100, 10.0, 1000)
    assert all(r.step_ms is None for r in an.ranks)
    # THEN the attacher is advised the rate that gives the median interval 50 samples (400 Hz), more
    # than the 200 Hz at which a boundary goes unseen at most 0.1% of the time (over 30 s, +5.4%
    # there: the blur of the ends of steps so uneven); none was advised: the steps are long enough
    # for 100 Hz. At a fixed rate the note on the unknown step says so
    assert faster == 400
    assert "sample faster: --rate 400 or more" in (an.report.step_time.step_time_note or "")
    # ...where every rank is known within 5% and counts the window's steps within 3%, over 30 s too
    counted_within("uneven:130:0.4:100:8:467000", 400, 0.03)
    counted_within("uneven:130:0.4:100:8:467000", 400, 0.03, seconds=30.0)


def test_a_comb_of_the_ranks_union_that_takes_slow_steps_for_several_is_no_step():
    from bench.sim_grid import Point, build

    # GIVEN 8 ranks of ~20-ms steps, 40% of them fetching their batch 1.3-2.2 times as long, at a
    # fixed 300 Hz: no rank's returns fit a period, and the comb of each rank's pieces counts 65-85
    # steps hidden in them, where the boundaries all of them missed were 12-27 (Chao's estimate)
    # THEN that comb, the fast steps' length with the slow ones counted as several, is not given:
    # unknown (it gave -8.9% on every rank)
    pt = Point.parse("uneven:20:0.4:300:8:235000")
    right_or_unknown(build(pt)[0], 300, pt.seed)


def test_a_rank_whose_peers_saw_the_boundaries_it_missed_is_read_again_where_it_misses_few():
    # GIVEN 8 ranks of bursty ~200-ms steps (6 workers) at 100 Hz over 30 s: the reference saw every
    # return by its e^-λ (5e-4), yet its peers saw 36 boundaries inside its 117 intervals, so those
    # all of them missed may move the median: unknown on every rank, and no rate was advised (the
    # steps are long enough, e^-λ says nothing is missed)
    an, _, faster = advised_at("bursty:50:6:100:8:567000", 100, 30.0, 400)
    assert all(r.step_ms is None for r in an.ranks)
    # THEN the rate at which a boundary would be missed at most 0.1% of the time, judged on the
    # share its peers saw it miss (36 of 153): 400 Hz, the most the attacher takes, where every rank
    # is known within 5% and counts the window's steps within 3% (162-163 of 163; unknown at 200 Hz)
    assert faster == 400
    counted_within("bursty:50:6:100:8:567000", 400, 0.03, seconds=30.0)
