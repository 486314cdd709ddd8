"""Step boundaries from the phase cycle: returns on one line of the loop frame (backward, then
forward again), and optimizer steps marked by the optimizer's own visits under accumulation."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace
from pathlib import Path

from testkit.stacks import FETCH, MAIN, MODULE, f, steps, torch_frame
from traceml_attach.diagnose.analysis import analyze
from traceml_attach.ingest.model import Span
from traceml_attach.steps.accumulation import Plan, marks_steps, shared_plans, with_accumulation, with_earlier
from traceml_attach.steps.batch_timeline import CYCLE_RANK, build_timeline, returns
from traceml_attach.steps.classify import load_rules
from traceml_attach.steps.clock import StepClock
from traceml_attach.steps.steptime import micro_batches_said

RULES = load_rules()
MS = 1_000_000
STEP_LINE = (21, "loss = training_step(model, batch)")
FWD_BELOW = (f("training_step", line=40, src="loss = model(x)"),
             torch_frame("Module._wrapped_call_impl", "torch/nn/modules/module.py"))
BWD_BELOW = (f("training_step", line=41, src="loss.backward()"),
             torch_frame("Tensor.backward", "torch/_tensor.py"))
OPT_STEP = (22, "opt.step()", (torch_frame("AdamW.step", "torch/optim/adamw.py"),))


CLOSURE_LESS_FWD = torch_frame("Module._wrapped_call_impl", "torch/nn/modules/module.py")


def on_step_line(below):
    return (*STEP_LINE, below)


def timeline(spans, rate=100):
    return build_timeline(42, spans, {}, RULES, rate, 0, 10**13)


def test_a_return_is_a_wrap_or_the_phases_going_backwards_on_one_line():
    fwd, bwd = CYCLE_RANK["forward"], CYCLE_RANK["backward"]
    assert returns(20, fwd, 23, bwd) == (True, fwd)           # the line went back
    assert returns(21, fwd, 21, bwd) == (True, fwd)           # backward, then forward on the same line
    assert returns(21, bwd, 21, fwd) == (False, bwd)          # forward, then backward: the same step
    assert returns(21, None, 21, bwd) == (False, bwd)         # the optimizer or a wait: no place, none kept
    assert returns(22, fwd, 21, bwd) == (False, fwd)          # a later line: the same step
    assert returns(22, None, 21, bwd) == (False, None)        # ...and what was seen on the old line is gone
    assert returns(21, fwd, None, None) == (False, fwd)       # nothing before
    assert CYCLE_RANK["input"] == CYCLE_RANK["h2d"] == fwd    # their order inside a step varies


def test_one_line_holding_the_step_still_gives_every_boundary():
    # the for line is never sampled and the optimizer's line only once: the line wraps once, but
    # backward returns to forward on the training_step line in every step
    fwd = (CLOSURE_LESS_FWD,)
    bwd = (torch_frame("Tensor.backward", "torch/_tensor.py"),)
    spans, t = [], 10**9
    for k in range(30):
        # the optimizer's line is sampled once every 10 steps: the line wraps 3 times in all
        opt = [(OPT_STEP, 5)] if k % 10 == 0 else []
        parts = [(on_step_line(fwd), 40), (on_step_line(bwd), 60 if k % 10 else 55), *opt]
        for (line, src, below), ms in parts:
            spans.append(Span(42, 1, t, ms * MS, (MODULE, MAIN, f("train", line=line, src=src), *below)))
            t += ms * MS
    tl = timeline(spans)
    assert tl.loop is not None and tl.loop.name == "train"
    assert len(tl.bounds) == 29
    assert tl.clock.known and abs(tl.clock.typical_ns - 100 * MS) <= 0.01 * 100 * MS
    assert tl.step_count == 29


CLOSURE = torch_frame("Closure.__call__", "lightning/pytorch/loops/optimization/automatic.py")


def test_zero_grad_between_forward_and_backward_splits_no_step():
    # Lightning's closure (library code): forward, zero_grad, backward under one line of the loop
    # frame (the optimizer has no place in the cycle)
    fwd = (CLOSURE, torch_frame("Module._wrapped_call_impl", "torch/nn/modules/module.py"))
    zero = (CLOSURE, torch_frame("Optimizer.zero_grad", "torch/optim/optimizer.py"))
    bwd = (CLOSURE, torch_frame("Tensor.backward", "torch/_tensor.py"))
    pattern = [(on_step_line(fwd), 40), (on_step_line(zero), 10), (on_step_line(bwd), 45), (OPT_STEP, 5)]
    tl = timeline(steps(pattern, 20))
    assert len(tl.bounds) == 19
    assert all(s.dur_ns == 100 * MS for s in tl.steps)


def test_accumulation_with_a_long_optimizer_counts_optimizer_steps():
    # 4 micro-batches of 40 ms on one line, then 60 ms of optimizer on its own line: returns count
    # micro-batches; the optimizer, seen in every step, marks the 220 ms optimizer steps
    micro = [(on_step_line(FWD_BELOW), 15), (on_step_line(BWD_BELOW), 25)]
    pattern = micro * 4 + [(OPT_STEP, 60)]
    tl = timeline(steps(pattern, 20))
    assert marks_steps(tl.intervals, tl.rate_hz) is not None
    acc = with_accumulation(tl)
    assert acc.clock.known and abs(acc.clock.typical_ns - 220 * MS) <= 0.01 * 220 * MS
    assert acc.micro_batches in (4, None)
    assert 18 <= acc.step_count <= 19


def test_optimizer_steps_before_the_first_one_found_still_count():
    # GIVEN a window that opens in one step's optimizer: the first return after optimizer time
    # ends the first whole optimizer step, which no interval reaches back to
    micro = [(on_step_line(FWD_BELOW), 15), (on_step_line(BWD_BELOW), 25)]
    pattern = micro * 4 + [(OPT_STEP, 60)]
    head = steps([(on_step_line(BWD_BELOW), 25), (OPT_STEP, 60)], 1, t0_ns=10**9)
    body = steps(pattern, 20, t0_ns=10**9 + 85 * MS)
    tail = steps(micro, 1, t0_ns=10**9 + 85 * MS + 20 * 220 * MS)
    # WHEN it is counted in optimizer steps
    acc = with_accumulation(timeline(head + body + tail))
    # THEN the whole step before the first one found counts too (the window's edge)
    assert acc.clock.known and abs(acc.clock.typical_ns - 220 * MS) <= 0.01 * 220 * MS
    assert len(acc.steps) == 19 and acc.clock.edge_steps == 1
    assert acc.step_count == 20


def test_micro_batches_miscounted_give_way_to_the_optimizers_own_visits():
    # GIVEN 3 micro-batches of 40 ms and a 4 ms optimizer a step (124 ms), counted as 4 micro-batches
    # a step (returns that are not all micro-batches: an outer loop's wraps among them)
    micro = [(on_step_line(FWD_BELOW), 15), (on_step_line(BWD_BELOW), 25)]
    tl = timeline(steps(micro * 3 + [(OPT_STEP, 4)], 30), rate=500)
    # WHEN it is grouped in fours
    acc = with_accumulation(tl, Plan(k=4))
    # THEN the optimizer's visits, one per optimizer step, give the step, not 4 micro-batches
    assert tl.clock.known and abs(tl.clock.typical_ns - 40 * MS) <= 0.01 * 40 * MS
    assert acc.clock.known and abs(acc.clock.typical_ns - 124 * MS) <= 0.01 * 124 * MS
    assert acc.micro_batches is None
    assert 29 <= acc.step_count <= 30
    # and where k is right, the micro-batches stand
    right = with_accumulation(tl, Plan(k=3))
    assert right.micro_batches == 3 and abs(right.clock.typical_ns - 124 * MS) <= 0.01 * 124 * MS


def test_without_accumulation_the_optimizer_marks_nothing():
    pattern = [(FETCH, 20), (on_step_line(FWD_BELOW), 30), (on_step_line(BWD_BELOW), 40), (OPT_STEP, 10)]
    tl = timeline(steps(pattern, 20))
    assert marks_steps(tl.intervals, tl.rate_hz) is None
    assert with_accumulation(tl) is tl


def test_two_visits_of_an_optimizer_are_no_measure_that_it_marks_the_steps():
    # GIVEN DDP's rank 1 on a loaded machine (a recorded CI-like run): a 1.7-ms optimizer in every
    # 180-ms step, seen at 100 Hz in 2 of 50 intervals, one visit 74 ms long (the thread was off its
    # core through it), the other 12
    plain = [(FETCH, 10), (on_step_line(FWD_BELOW), 35), (on_step_line(BWD_BELOW), 135)]
    spans = steps(plain, 20)
    for opt_ms in (74, 12):
        spans += steps([*plain[:2], (on_step_line(BWD_BELOW), 135 - opt_ms), (OPT_STEP, opt_ms)], 1,
                       t0_ns=spans[-1].end_ns)
        spans += steps(plain, 14, t0_ns=spans[-1].end_ns)
    tl = timeline(spans)
    # WHEN the optimizer is asked to mark the steps: its mean visit would say it is missed 1.5% of the time
    # THEN less the longest visit, one is left, no measure of that chance: the intervals are not taken
    # for micro-batches on it
    # (tests/test_recorded_steps.py replays the recorded run)
    assert marks_steps(tl.intervals, tl.rate_hz) is None


def test_the_module_level_loop_shape_is_found():
    # a module-level loop (nanoGPT): the loop frame is <module> itself
    fwd = (f("<module>", line=300, src="logits, loss = model(X, Y)"),
           torch_frame("Module._wrapped_call_impl", "torch/nn/modules/module.py"))
    bwd = (f("<module>", line=303, src="scaler.scale(loss).backward()"),
           torch_frame("Tensor.backward", "torch/_tensor.py"))
    spans, t = [], 10**9
    for _ in range(25):
        for stack, ms in ((fwd, 45), (bwd, 55)):
            spans.append(Span(42, 1, t, ms * MS, stack))
            t += ms * MS
    tl = timeline(spans)
    assert tl.loop is not None and tl.loop.name == "<module>"
    assert tl.clock.known and abs(tl.clock.typical_ns - 100 * MS) <= MS
    assert MODULE and MAIN   # the shared frames stay importable for the other shapes


def test_synchronized_ranks_pool_the_optimizers_gaps():
    # each rank saw the optimizer in 1 of 5 micro-batches, 8 gaps, every one even: alone, a chance
    # of ~3e-3 without accumulation (not enough); four ranks together, ~1e-10
    weak = Plan(gaps=(2, 4, 2, 6, 2, 8, 4, 2), seen=0.2, undecided=True)   # as plan_of leaves them
    pooled = shared_plans({str(r): weak for r in range(4)})
    assert {(p.k, p.doubt) for p in pooled.values()} == {(2, None)}
    # seen in 1 of 10: too rarely for k to be counted (a few visits of a short optimizer keep apart
    # by chance as often as not), but 32 even gaps are no chance either: the step time is unknown,
    # and the reason names the k the gaps point to (it was taken for a step: `undecided`)
    rare = {str(r): replace(weak, seen=0.1) for r in range(4)}
    doubts = {(p.k, p.doubt) for p in shared_plans(rare).values()}
    assert len(doubts) == 1 and next(iter(doubts))[0] == 1
    assert "every one of the 32 gaps between them 2 or a multiple of 2 steps apart" in (next(iter(doubts))[1] or "")
    assert "on the 4 synchronized ranks together" in (next(iter(doubts))[1] or "")
    # odd gaps among them: nothing to pool, every rank keeps its steps
    mixed = {str(r): Plan(gaps=(2, 3, 2, 5, 1, 8, 4, 7), seen=0.1, undecided=True) for r in range(4)}
    assert shared_plans(mixed) == mixed


def test_the_visits_before_a_rate_change_are_weighed_with_the_ones_after():
    # tests/fixtures/truth_ddp_raised: 2 gloo ranks of 120-ms steps whose optimizer takes 0.4 ms,
    # raised from 100 to 300 Hz 6 s into a 10-s snapshot; the gaps between its visits (as plan_of
    # leaves them) after the raise, and before it
    after = {"0": Plan(gaps=(3, 15, 2), seen=0.138, undecided=True),
             "1": Plan(gaps=(18, 6), seen=0.103, undecided=True)}
    before = {"0": ((21, 8, 2, 6, 10), 0.125), "1": ((8, 20), 0.059)}
    # after the raise alone, 4 of the 5 gaps on the two ranks are multiples of 3 (9:1 for k = 3):
    # the step time was unknown
    alone = {p.doubt for p in shared_plans(after).values()}
    assert len(alone) == 1 and "3 or a multiple of 3" in (next(iter(alone)) or "")
    # weighed with the gaps before it, no k stands: every rank's step is its returns'
    joined = {rank: with_earlier(plan, *before[rank]) for rank, plan in after.items()}
    assert joined["1"].gaps == (8, 20, 18, 6) and 0.059 < joined["1"].seen < 0.103 and joined["1"].runs == 2
    assert {(p.k, p.doubt) for p in shared_plans(joined).values()} == {(1, None)}
    # rank 1's own four gaps, all even, still point to k = 2: the words count its visits in both runs
    assert "(6 visits), every one of the 4 gaps between them 2 or a multiple of 2" in (joined["1"].doubt or "")
    # gaps that are multiples of 4 before the raise and after: counted together (k = 4)
    four = Plan(gaps=(4, 8, 4, 4, 12, 4), seen=0.2, undecided=True)
    assert with_earlier(four, (4, 4, 8, 4, 4, 8), 0.15).k == 4
    # a plan decided otherwise (a doubt of its own, a k counted) is left as it is; no visits before
    # the change leave it as it is too
    doubted = Plan(doubt="slow steps", no_visit_step=True)
    assert with_earlier(doubted, (2, 3, 1), 0.3) is doubted
    assert with_earlier(Plan(k=2), (3, 5), 0.2) == Plan(k=2)
    assert with_earlier(after["0"], (), 0.0) is after["0"]


def test_micro_batches_seen_whole_are_grouped_at_the_optimizers_visits():
    from traceml_attach.steps.accumulation import _visit_runs
    from traceml_attach.steps.clock import Step
    from traceml_attach.steps.phases import PHASES

    def micro(i: int, optimizer: bool, ms: int = 100) -> Step:
        phases = dict.fromkeys(PHASES, 0)
        phases["backward" if not optimizer else "optimizer"] = ms * MS
        return Step(i * 100 * MS, (i + 1) * 100 * MS, phases)

    # k = 4: optimizer in intervals 2, 6, 9 (one boundary missed: 3 apart), 13 (and 14: zero_grad
    # after the return), none at 17 (unseen), 21; returns 0..23
    visits = {2, 6, 9, 13, 14, 21}
    intervals = [micro(i, i in visits) for i in range(24)]
    steps = _visit_runs(intervals, 4)
    spans = [(s.start_ns // (100 * MS), s.end_ns // (100 * MS)) for s in steps]
    # nothing whole before the first visit (3 returns), a step of 3 where a boundary was missed, the
    # spill into 14 is the same step's, the unseen visit splits 8 returns into 2 steps, and the 2
    # returns after the last visit are no whole run of 4
    assert spans == [(3, 7), (7, 10), (10, 14), (14, 18), (18, 22)]
    # a whole run of k before the first visit is a step
    assert _visit_runs([micro(i, i == 5) for i in range(10)], 3)[0].start_ns == 0
    assert _visit_runs([micro(i, False) for i in range(10)], 3) == []
    # an interval sampling did not cover (a drop-out may hide returns) ends a run: the 2 returns
    # between it and the next visit are not counted as a step of 3 across it
    dropped = [replace(iv, covered=False) if i == 7 else iv for i, iv in enumerate(intervals)]
    spans = [(s.start_ns // (100 * MS), s.end_ns // (100 * MS)) for s in _visit_runs(dropped, 4)]
    assert spans == [(3, 7), (10, 14), (14, 18), (18, 22)]


def test_one_synchronized_ranks_doubt_is_every_ranks():
    doubt = Plan(doubt="the optimizer was seen only every 4 ...")
    plans = shared_plans({"0": doubt, "1": Plan(gaps=(3, 1, 2), seen=0.2), "2": Plan(gaps=(5, 2, 1), seen=0.2)})
    assert all(p.doubt for p in plans.values())
    assert "another rank" in (plans["1"].doubt or "")
    # ranks whose long intervals are slow steps keep that reason
    lumped = Plan(doubt="slow steps", no_visit_step=True)
    assert shared_plans({"0": doubt, "1": lumped})["1"] == lumped


def test_a_few_gaps_between_rare_visits_rule_accumulation_in_doubt_only_when_k_divides_them():
    from traceml_attach.steps.doubts import undecided

    # 4 visits among 61 micro-batches, 2, 10 and 8 apart: 8 times likelier with k = 2 than without
    k, odds = undecided([2, 10, 8], 4 / 61) or (0, 0.0)
    assert k == 2 and odds >= 8
    # one odd gap among them, or two visits in a row: no k stands (a gap is miscounted 1 time in 10)
    assert undecided([3, 10, 8], 4 / 61) is None
    assert undecided([1, 2, 1, 4, 2], 0.5) is None
    # multiples of 3, seen in 1 step of 10
    assert (undecided([6, 12, 3], 0.1) or (0, 0.0))[0] == 3
    # an optimizer seen in every other step, always 2 apart: k = 2 seeing it in every one of its
    # optimizer steps, 124 times likelier than none (the share seen is a count: k * seen may reach 1)
    k, odds = undecided([2, 2, 2, 2], 0.5) or (0, 0.0)
    assert k == 2 and odds > 100
    # few gaps leave a k as likely as none in doubt (FEW_GAPS_ODDS): 4 visits among 14 micro-batches
    # of 2.1 s, 5, 4 and 4 apart (bf16 autocast on a CPU, 4 micro-batches to a step), 6:1 for k = 4
    k, odds = undecided([5, 4, 4], 4 / 14) or (0, 0.0)
    assert k == 4 and 1 <= odds < 8
    # ...but from twelve gaps on, only a k UNDECIDED_ODDS times likelier: odds of 1.2 for k = 2 on
    # eleven gaps are a doubt, and not with one gap more
    gaps = [6, 5, 4, 2, 3, 2, 2, 2, 2, 5, 4, 6]
    k, odds = undecided(gaps[:11], 0.3) or (0, 0.0)
    assert k == 2 and 1 <= odds < 8
    assert undecided(gaps, 0.3) is None
    # 630 gaps (synchronized ranks pooled over a long window): odds beyond a float are held, not raised
    k, odds = undecided([4] * 600 + [3] * 30, 0.13) or (0, 0.0)
    assert k == 4 and 1e300 < odds < float("inf")


# the gaps, in micro-batches timed over one period, between the optimizer's visits on a job 1.5x slower
# at the start of its window and 2 micro-batches a step (the grid's drifting:20:ramp/1.5:100:2:185000,
# rank 0 at 400 Hz): every true gap is even, 11 of these 42 are odd, most of them long
_DRIFTED_GAPS = [2, 8, 14, 14, 6, 4, 19, 13, 61, 8, 6, 2, 6, 6, 10, 18, 18, 23, 16, 8, 88, 32, 4, 10, 50, 39, 23, 8,
                 6, 74, 14, 17, 4, 10, 18, 1, 26, 8, 22, 43, 7, 21]


def test_long_gaps_whose_counts_are_unsure_are_weighed_as_the_likelier_miscounted():
    from traceml_attach.steps.doubts import gap_miscounted, may_be_undecided, undecided

    # a tenth of the gaps miscounted whatever their length: 11 odd gaps of 42 rule k = 2 out
    assert undecided(_DRIFTED_GAPS, 0.054) is None
    # each micro-batch counted wrong 2% of the time (as the intervals' count posteriors said there): a gap
    # of 61 is miscounted far more often than one of 2, and k = 2 is a doubt again (over 8:1)
    k, odds = undecided(_DRIFTED_GAPS, 0.054, 0.02) or (0, 0.0)
    assert k == 2 and odds >= 8
    assert may_be_undecided(_DRIFTED_GAPS, 0.054)
    # the chance grows with the gap, from MISCOUNTED, and stops at even odds
    assert gap_miscounted(2, 0.02) == 0.1 and 0.7 > gap_miscounted(61, 0.02) > 0.49
    assert gap_miscounted(61, 0.0) == 0.1 and gap_miscounted(400, 0.02) == 0.5
    # gaps of a job without accumulation (geometric, seen in 1 step of 20): no miscounts make a doubt of
    # them, so their counts are not worked out (``step_miscount``, a walk over every interval)
    rng = random.Random(7)
    plain = [next(g for g in itertools.count(1) if rng.random() < 0.05) for _ in range(60)]
    assert undecided(plain, 0.05, 0.03) is None and not may_be_undecided(plain, 0.05)
    # on fewer than PROVISIONAL_GAPS gaps any one may be the miscounted one: 3 gaps of 5, 6 and 9 (8 ranks
    # of one 320-ms step, no accumulation) are no doubt however unsure their counts
    assert undecided([5, 6, 9], 0.19, 0.026) is None and not may_be_undecided([5, 6, 9], 0.19)
    # the same gaps on two ranks (pooled): both counted unsurely, k = 2 by far; where one rank's counts
    # were sure, its odd gaps are evidence against k at MISCOUNTED's weight, and no k stands
    assert (undecided(_DRIFTED_GAPS * 2, 0.054, 0.02) or (0, 0.0))[1] > 1e4
    assert undecided(_DRIFTED_GAPS * 2, 0.054, [0.0] * 42 + [0.02] * 42) is None


def test_visits_one_step_apart_keep_a_few_even_gaps_from_being_a_doubt():
    # GIVEN a recorded input-bound job without accumulation (examples/input_bound.py --input-share
    # 0.6, 10 s at 100 Hz) whose optimizer's 9 gaps were 4, 2, 1, 2, 6, 4, 2, 2, 2 steps: 123 times
    # likelier with k = 2 than without, but for the gap of 1 that _multiples_in takes as no accumulation
    from traceml_attach.ingest.stream import read_recording

    rec, problem = read_recording(Path(__file__).parent / "fixtures" / "input_bound_even_gaps.msgpack")
    assert problem is None
    # THEN its step time is given (it was unknown: "a step may be a micro-batch"), within 5% of the
    # job's own median over the window (184.1 ms, 32 steps)
    r = analyze(rec, load_rules()).ranks[0]
    assert r.step_ms is not None and abs(r.step_ms / 184.1 - 1) <= 0.05, r.clock


def test_strong_odds_of_accumulation_stand_against_a_few_adjacent_optimizer_visits():
    # GIVEN the optimizer's 48 gaps on HF Trainer with 4 micro-batches a step, as they were read while
    # HF's parameter counting (num_parameters) passed for the update in every micro-batch: 6 of them
    # one micro-batch (more than MAX_ADJACENT, which _multiples_in takes as no accumulation), yet
    # k = 4 over a thousand times likelier than none
    from traceml_attach.steps.accumulation import _multiples_in, _unjudged
    from traceml_attach.steps.doubts import undecided

    gaps = [6, 12, 3, 1, 4, 4, 8, 12, 5, 4, 4, 4, 1, 3, 4, 4, 16, 8, 21, 12, 4, 1, 5, 1, 8, 5, 8, 16, 8, 4, 4,
            20, 4, 4, 1, 10, 4, 4, 11, 5, 24, 4, 3, 1, 4, 4, 4, 20]
    odds = undecided(gaps, 0.144)
    assert _multiples_in(gaps, 0.144)[0] == 1 and odds is not None and odds[0] == 4 and odds[1] > 1000
    # THEN they leave the step time unknown (a micro-batch is not given as the step), where the ~120:1
    # of an input-bound job without accumulation (1 gap of 1 in 9) do not
    assert _unjudged(gaps, odds)
    even = [4, 2, 1, 2, 6, 4, 2, 2, 2]
    weak = undecided(even, 0.33)
    assert weak is not None and weak[1] < 1000 and not _unjudged(even, weak)


def test_miscounted_micro_batches_leave_the_true_k_not_a_divisor_of_it():
    # GIVEN the optimizer's 91 gaps (in micro-batches) on nanoGPT's own train.py with 4 micro-batches a
    # step (tests/fixtures/truth_nanogpt_accum4), a fifth of them miscounted by a return missed or
    # doubled: 45 of 4 and 14 of 8, one of 2; 63 multiples of 4 (under MULTIPLE_SHARE), 73 of 2
    from traceml_attach.steps.accumulation import _multiples_in

    gaps = ([4] * 45 + [8] * 14 + [6] * 6 + [5] * 6 + [9] * 4 + [7] * 4 + [12] * 2 + [16] * 2 + [10] * 2
            + [3] * 2 + [11, 13, 2, 14])
    assert sum(g % 4 == 0 for g in gaps) == 63 and sum(g % 2 == 0 for g in gaps) == 73
    # THEN k is 4, the likeliest of 2's multiples, not 2 (the job's 89 ms steps were given as 44 ms)
    k, chance, n = _multiples_in(gaps, 0.166)
    assert (k, n) == (4, 91) and chance < 1e-10
    # and where the gaps are whole multiples of 2 with none of 4 likelier, 2 stands
    assert _multiples_in([2] * 40 + [4] * 12 + [6] * 3 + [3] * 2, 0.35)[0] == 2


def test_hf_parameter_counting_is_not_the_update():
    # GIVEN HF Trainer with 4 micro-batches a step (examples/hf_trainer.py --grad-accum 4, 12 s at up
    # to 400 Hz), which counts its model's parameters (num_parameters, a walk over named_parameters())
    # in every micro-batch for the FLOPs it logs
    from traceml_attach.ingest.stream import read_recording

    rec, problem = read_recording(Path(__file__).parent / "fixtures" / "hf_accum4_adjacent.msgpack")
    assert problem is None
    r = analyze(rec, load_rules()).ranks[0]
    # THEN that walk is logging, the optimizer is seen only in its own steps, and the 25 ms micro-batch
    # is not given as the step: the job's own optimizer steps had a median of 101.9 ms (114 of them)
    assert r.step_ms is None or abs(r.step_ms / 101.9 - 1) <= 0.05, r.step_ms
    assert r.micro_batches == 4, r.clock
    assert (r.wait_labels or {}).get("logging", 0) > 0


def test_a_window_of_few_optimizer_steps_does_not_give_a_micro_batch_as_the_step():
    # GIVEN 30 s of examples/grad_accum.py --accum 4 --autocast on this project's CPU (bf16: 2.1-s
    # micro-batches, 8.3-9.2-s optimizer steps by its own timing, 3 of them whole in the window),
    # its optimizer seen in 4 of the 14 intervals between the loop's wraps, 5, 4 and 4 apart
    from traceml_attach.ingest.stream import read_recording

    rec, problem = read_recording(Path(__file__).parent / "fixtures" / "cpu_autocast_accum4.msgpack")
    assert problem is None
    r = analyze(rec, load_rules()).ranks[0]
    # THEN the step time is unknown, saying that a step may be a micro-batch (it was 2,140 ms "known",
    # the micro-batch, for the job's 8,438)
    assert r.step_ms is None and r.clock is not None
    assert "a step may be a micro-batch" in (r.clock.reason or ""), r.clock


def test_a_step_unknown_with_the_optimizer_in_some_intervals_is_said_to_hold_uncounted_micro_batches():
    # GIVEN the returns of 4 micro-batches an optimizer step, and of plain steps, both with their
    # step time unknown (as a loaded snapshot of examples/grad_accum.py left it)
    unknown = StepClock("unknown", None, None, None, "the steps vary too much")
    micro = [(on_step_line(FWD_BELOW), 15), (on_step_line(BWD_BELOW), 25)]
    accumulating = timeline(steps(micro * 4 + [(OPT_STEP, 60)], 20))
    plain = timeline(steps([(FETCH, 20), (on_step_line(FWD_BELOW), 30), (on_step_line(BWD_BELOW), 40),
                            (OPT_STEP, 10)], 20))
    # THEN the micro-batches a step holds are not said where the optimizer ran in some intervals only:
    # they may be micro-batches (the summary had said 1)
    assert micro_batches_said(replace(accumulating, clock=unknown, micro_batches=1)) is None
    # AND 1 where it ran in nearly every one, or whatever a known step time counted
    assert micro_batches_said(replace(plain, clock=unknown, micro_batches=1)) == 1
    counted = with_accumulation(accumulating)
    assert counted.clock.known and micro_batches_said(counted) == counted.micro_batches
