from __future__ import annotations

import itertools

import pytest

from testkit.stacks import BACKWARD, FETCH, FORWARD, H2D, ITEM, MAIN, MODULE, OPTIM, f, steps, torch_frame
from traceml_attach.ingest.model import Span, Stack, ThreadInfo
from traceml_attach.steps.batch_timeline import CpuCounter, Timeline, _around, build_timeline
from traceml_attach.steps.classify import load_rules
from traceml_attach.steps.loopframe import find_loop

RULES = load_rules()
PATTERN = [(FETCH, 30), (H2D, 10), (FORWARD, 20), (BACKWARD, 30), (OPTIM, 10)]  # 100 ms steps


def timeline(spans, threads=None, rate=100, start=0, end=10**13):
    return build_timeline(42, spans, threads or {}, RULES, rate, start, end)


def test_steps_and_phase_times_follow_the_loop():
    tl = timeline(steps(PATTERN, 12))
    assert tl.loop is not None and tl.loop.name == "train"
    # 12 fetches give 11 wraps, hence 10 complete steps between them
    assert len(tl.steps) == 10
    for step in tl.steps:
        assert step.dur_ns == 100_000_000
        assert step.phases_ns["input"] == 30_000_000
        assert step.phases_ns["backward"] == 30_000_000
        assert step.phases_ns["wait"] == 0


def test_an_unsampled_fetch_still_ends_the_step():
    # the loop jumps from the optimizer line straight back to forward: still a wrap
    tl = timeline(steps([(FORWARD, 40), (BACKWARD, 40), (OPTIM, 20)], 8))
    # the first span is not known to start a step: 7 wraps, 6 complete steps
    assert len(tl.steps) == 6
    assert all(s.dur_ns == 100_000_000 for s in tl.steps)


def test_the_outer_loop_wins_over_a_step_function_it_calls():
    def in_step(line, src, below):
        return (MODULE, MAIN, f("train", line=20, src="train_step(batch)"),
                f("train_step", line=line, src=src), *below)

    fetch = (MODULE, MAIN, f("train", line=19, src="for batch in loader:"),
             torch_frame("_BaseDataLoaderIter.__next__", "torch/utils/data/dataloader.py"))
    spans, t = [], 0
    for _ in range(10):
        for st, ms in [(fetch, 20), (in_step(*FORWARD), 40), (in_step(*BACKWARD), 40)]:
            spans.append(Span(42, 1, t, ms * 10**6, st))
            t += ms * 10**6
    loop = find_loop(spans)
    assert loop is not None and loop.name == "train"
    tl = timeline(spans)
    assert len(tl.steps) == 8
    assert tl.steps[0].phases_ns["input"] == 20 * 10**6


def test_a_batch_fetched_between_two_calls_of_the_step_function_starts_the_step():
    # GIVEN a loop whose `train_step(batch)` holds the step (h2d, forward, backward on its own
    # lines): every other batch is ready, its fetch unseen, and the others take 60 ms to arrive,
    # so train_step wraps every step and the caller's `for` line only every other one; one slow
    # fetch falls between forward and backward samples (train_step's lines go forward across it)
    def in_step(line, below=()):
        return (MODULE, MAIN, f("train", line=20, src="loss = train_step(batch)"), f("train_step", line=line), *below)

    fetch = (MODULE, MAIN, f("train", line=19, src="for batch in loader:"),
             torch_frame("_BaseDataLoaderIter.__next__", "torch/utils/data/dataloader.py"))
    h2d, forward, backward = in_step(51), in_step(52, FORWARD[2]), in_step(53, BACKWARD[2])
    spans, t, starts = [], 10**9, []
    for k in range(40):
        starts.append(t)
        if k == 21:
            pattern = [(fetch, 60), (backward, 20)]       # its h2d and forward unseen
        else:
            pattern = ([(fetch, 60)] if k % 2 else []) + [(h2d, 5), (forward, 15), (backward, 20)]
        for st, ms in pattern:
            spans.append(Span(42, 1, t, ms * 10**6, st))
            t += ms * 10**6
    assert find_loop(spans).name == "train_step"
    tl = timeline(spans, rate=200)
    # THEN each step starts where its batch was fetched, not at the return to h2d after it: the
    # steps are 40 and 100 ms by turns, every one of them, the fetch in the step it feeds
    assert list(tl.bounds) == starts[1:]
    assert [s.dur_ns for s in tl.intervals] == [b - a for a, b in itertools.pairwise(starts[1:])]
    assert all(s.phases_ns["input"] == (60 * 10**6 if s.dur_ns > 50 * 10**6 else 0) for s in tl.intervals)


def test_background_threads_are_not_the_training_thread():
    train = steps(PATTERN, 6, tid=1)
    pin = [Span(42, 2, s.ts_ns, s.dur_ns, (f("_bootstrap", "/usr/lib/python3.11/threading.py"),
                                           torch_frame("_pin_memory_loop", "torch/utils/data/_utils/pin_memory.py")))
           for s in train]
    threads = {1: ThreadInfo(1, 100, "MainThread", True), 2: ThreadInfo(2, 101, "Thread-1 (_pin_memory_loop)", True)}
    tl = timeline(train + pin, threads)
    assert tl.tid == 1 and tl.thread_name == "MainThread"


def test_a_hole_in_sampling_drops_the_steps_it_touches():
    spans = steps(PATTERN, 10)
    # remove 120 ms across the 5th and 6th steps (a failed py-spy window)
    t0 = spans[0].ts_ns
    hole = [s for s in spans if not (440_000_000 <= s.ts_ns - t0 < 560_000_000)]
    tl = timeline(hole)
    assert len(tl.steps) == len(timeline(spans).steps) - 2
    assert not any(s.start_ns < t0 + 560_000_000 and s.end_ns > t0 + 440_000_000 for s in tl.steps)


def test_wait_time_is_labelled():
    tl = timeline(steps([*PATTERN, (ITEM, 25)], 6))
    assert set(tl.wait_labels_ns) == {"device_sync"}
    assert all(s.phases_ns["wait"] == 25_000_000 for s in tl.steps)


def test_steps_too_short_for_the_rate_are_reported_not_measured():
    # 8 ms steps sampled at 100 Hz: every sample lands in a different step
    short = [(FETCH, 2), (FORWARD, 3), (BACKWARD, 3)]
    tl = timeline(steps(short, 40), rate=100)
    assert not tl.clock.known and tl.clock.reason and "5 samples" in tl.clock.reason
    assert tl.clock.suggested_rate_hz is not None and tl.clock.suggested_rate_hz >= 1000
    ok = timeline(steps(short, 40), rate=1000)
    assert ok.clock.known and ok.clock.typical_ns == 8_000_000


def test_an_interval_of_several_steps_is_counted_as_several():
    # GIVEN 100 ms steps of 90 ms input and 10 ms forward, where no sample fell in every other
    # step's forward: that step's fetch span runs on into the next step's fetch (one 190 ms span
    # with the same stack), so the loop line does not wrap there
    spans, t = [], 1_000_000_000
    for k in range(60):
        pattern = [(FETCH, 90), (FORWARD, 10)] if k % 2 else [(FETCH, 190), (FORWARD, 10)]
        spans += steps(pattern, 1, t0_ns=t)
        t = spans[-1].end_ns
    tl = timeline(spans)
    # THEN the period is the step, and each 200 ms interval counts as two 100 ms steps
    assert tl.clock.known and tl.clock.period_ns is not None
    assert abs(tl.clock.period_ns - 100_000_000) <= 1_000_000
    assert len(tl.steps) == 2 * len(tl.intervals) - (len(tl.intervals) // 2)
    assert all(abs(s.dur_ns - 100_000_000) <= 1_000_000 for s in tl.steps)
    # the merged interval's phase time is shared by its steps: 95 ms input each, not 190
    assert max(s.phases_ns["input"] for s in tl.steps) == 95_000_000


@pytest.mark.parametrize("cut", [0.25, 0.5])
def test_the_window_clips_steps(cut):
    spans = steps(PATTERN, 20)
    start = spans[0].ts_ns + int(cut * 2_000_000_000)
    tl = timeline(spans, start=start)
    assert all(s.start_ns >= start for s in tl.steps)
    assert 0 < len(tl.steps) < 19


def test_cpu_counters_are_read_from_the_window_and_its_edges_only():
    rows = [(t, 3 * t, t // 2) for t in range(0, 101, 10)]
    kept = _around(rows, 35, 62)
    assert [r[0] for r in kept] == [30, 40, 50, 60, 70]
    full, clipped = CpuCounter(rows), CpuCounter(kept)
    assert [clipped.at(t) for t in range(35, 63)] == [full.at(t) for t in range(35, 63)]
    assert _around(rows, 0, 5)[0] == rows[0] and _around(rows, 95, 200)[-1] == rows[-1]


def test_the_main_thread_is_named_even_where_py_spy_reads_no_names():
    # a thread py-spy could not name: the main thread is still known by its OS id
    spans = steps(PATTERN, 6, tid=1)
    assert timeline(spans, {1: ThreadInfo(1, 42, None, True)}).thread_name == "main thread"
    assert timeline(spans, {1: ThreadInfo(1, 43, None, True)}).thread_name is None
    assert timeline(spans, {1: ThreadInfo(1, 42, "MainThread", True)}).thread_name == "MainThread"


def test_without_a_device_no_wait_is_a_device_sync():
    from traceml_attach.steps.steptime import rank_stats, without_device

    # `print(loss.item())` (device_sync by its line) and an f-string of a tensor (Tensor.__format__
    # calls .item()) on a rank that holds no GPU: there is no device to wait for
    formatting = (26, 'print(f"{loss:.3f}")', (torch_frame("Tensor.__format__", "torch/_tensor.py"),
                                                f("Tensor.item", "/usr/lib/python3.11/site-packages/torch/_tensor.py",
                                                  src="return self.item()")))
    tl = timeline(steps([*PATTERN, (ITEM, 20), (formatting, 10)], 6))
    stats = rank_stats("0", tl)
    assert set(stats.wait_labels) == {"device_sync"}   # as the rules read it: a device's sync
    cpu = without_device(stats, tl)
    assert "device_sync" not in cpu.wait_labels
    assert cpu.wait_labels["other"] == pytest.approx(2 / 3, abs=0.02)      # .item(): other work
    assert cpu.wait_labels["logging"] == pytest.approx(1 / 3, abs=0.02)    # formatting: logging
    assert cpu.shares == stats.shares                                      # the phases stand
    # a live window's segments (a SegmentView: its spans, their stacks' verdicts and each labelled
    # stack's time) split alike (the live tracker's own times: tests/test_tracker.py)
    from dataclasses import replace

    from traceml_attach.steps.batch_timeline import SegmentView

    segs = tl.segments
    verdicts = {id(seg.span.stack): (seg.phase, seg.label, seg.decider) for seg in segs}
    per_stack: dict[int, tuple[str, Stack, int]] = {}
    for seg in segs:
        if seg.label is not None:
            ns = per_stack.get(id(seg.span.stack), (seg.label, seg.span.stack, 0))[2]
            per_stack[id(seg.span.stack)] = (seg.label, seg.span.stack, ns + seg.dur_ns)
    view = SegmentView([seg.span for seg in segs], verdicts, segs[0].ts_ns, segs[-1].ts_ns + segs[-1].dur_ns,
                       tuple(per_stack.values()))
    assert without_device(stats, replace(tl, segments=view)).wait_labels == cpu.wait_labels


def test_an_iteration_that_evaluates_and_checkpoints_is_one_step():
    # nanoGPT: every few iterations, @torch.no_grad() estimate_loss() (forward passes) and a
    # checkpoint at the top of the iteration, 700 ms where a step is 100 ms. At 50 Hz (5 samples a
    # step; at 10 Hz one sample a step could not show every boundary) a boundary could go unseen (a
    # period is fitted): that interval is still one long step, not eight
    evaluate = (19, "losses = estimate_loss()", (
        torch_frame("context_decorator.<locals>.decorate_context", "torch/utils/_contextlib.py", 116),
        f("estimate_loss", line=60, src="logits, loss = model(X, Y)"),
        torch_frame("Module._call_impl", "torch/nn/modules/module.py")))
    save = (19, "torch.save(checkpoint, path)", (torch_frame("save", "torch/serialization.py"),))
    spans, t = [], 1_000_000_000
    for k in range(40):
        pattern = ([(evaluate, 600), (save, 100)] if k % 10 == 5 else []) + PATTERN
        part = steps(pattern, 1, t0_ns=t)
        spans += part
        t = part[-1].end_ns
    tl = timeline(spans, rate=50)
    # 38 intervals between the 39 returns after the first iteration: 38 steps, 4 of them 800 ms long
    assert len(tl.steps) == 38, [round(s.dur_ns / 1e6) for s in tl.steps]
    assert tl.clock.known and tl.clock.typical_ns == pytest.approx(100_000_000, rel=0.01), tl.clock
    assert sorted(round(s.dur_ns / 1e6) for s in tl.steps)[-4:] == [800] * 4
    assert tl.wait_labels_ns["eval"] == 4 * 600_000_000 and tl.wait_labels_ns["checkpoint"] == 4 * 100_000_000


def test_only_the_synchronized_ranks_irregular_steps_mark_a_clock_irregular():
    from dataclasses import replace

    from traceml_attach.steps.clock import StepClock
    from traceml_attach.steps.sync import varied_clock

    # a rank that saw every boundary and found its steps too uneven speaks for every rank...
    assert varied_clock("3").irregular
    # ...one rank's own jittery steps, or any known clock, do not
    assert not StepClock("unknown", None, reason="the steps vary too much for the 40 boundaries seen").irregular
    assert not replace(varied_clock("3"), method="comb", period_ns=100e6).irregular


def test_chance_hides_few_boundaries_where_every_boundary_shows():
    from traceml_attach.steps.clock import chance_depth, edge_steps, hidden_by_chance

    # where a boundary goes unseen 1 time in 150, two in a row (1 in 22,500) is beyond chance
    # (e^-8, 1 in 2,981); 1 in 10,000 leaves not even one
    assert chance_depth(1 / 150) == 1 and chance_depth(1e-4) == 0
    assert [hidden_by_chance(k, 1 / 150) for k in range(3)] == [True, True, False]
    # boundaries that go unseen often (an average over visits of uneven length), or unmeasured:
    # any number may be missed
    assert chance_depth(0.3) is None and chance_depth(None) is None and hidden_by_chance(40, 0.3)
    # a window that begins 1.1 s before the first wrap of 100 ms steps: 10 whole steps where
    # boundaries go unseen often; where every one shows, the rest of one slow step
    bounds, ms = [2_100_000_000, 2_200_000_000], 1_000_000
    assert edge_steps(bounds, 1_000_000_000, 2_250_000_000, 100 * ms, 100, 0.5) == 10
    assert edge_steps(bounds, 1_000_000_000, 2_250_000_000, 100 * ms, 100, 1 / 150) == 0
    assert edge_steps(bounds, 1_950_000_000, 2_250_000_000, 100 * ms, 100, 1 / 150) == 1


def held_for_a_second(on_cpu: float = 1.0, sampler_queued: float | None = None) -> Timeline:
    """100 ms steps, every boundary seen, the main thread on a CPU all of each step; then the 31st
    step's fetch holds one stack for 1 s (one stack object throughout, as py-spy's frames are
    interned), the thread on a CPU ``on_cpu`` of it, and py-spy waiting for a core
    ``sampler_queued`` of it (None: no counters of py-spy's, as in streams recorded before them)."""
    spans = steps(PATTERN, 61, tid=1)
    fetch = spans[150]
    stall = Span(42, 1, fetch.ts_ns, 1_000_000_000, spans[0].stack)
    shift = stall.dur_ns - fetch.dur_ns
    spans = spans[:150] + [stall] + [Span(42, 1, s.ts_ns + shift, s.dur_ns, spans[i % 5].stack)
                                     for i, s in enumerate(spans[151:], 151)]
    rows, sampler, on, queued = [], [], 0, 0
    for ts in range(spans[0].ts_ns, spans[-1].end_ns + 20_000_000, 20_000_000):
        in_stall = stall.ts_ns <= ts < stall.end_ns
        rows.append((ts, on, 0))
        sampler.append((ts, ts // 20, queued))
        on += int(20_000_000 * (on_cpu if in_stall else 1.0))
        if in_stall and sampler_queued is not None:
            queued += int(20_000_000 * sampler_queued)
    return build_timeline(42, spans, {1: ThreadInfo(1, 42, "MainThread", True)}, RULES, 100, 0, 10**13, rows,
                          sampler_cpu=sampler if sampler_queued is not None else ())


def test_a_long_span_is_a_drop_out_only_if_the_thread_worked_through_it():
    # GIVEN a fetch of 1 s (held_for_a_second)...
    def job(on_cpu_in_stall: float) -> Timeline:
        return held_for_a_second(on_cpu_in_stall)
    # ...through which the thread was blocked (a DataLoader's queue): one slow step
    blocked = job(0.0)
    assert blocked.clock.method == "wraps"
    assert max(s.dur_ns for s in blocked.steps) >= 1_000_000_000
    assert all(s.covered for s in blocked.steps)
    # ...through which it ran (the sampler dropped out over about ten steps): the steps it hid, uncovered
    ran = job(1.0)
    assert ran.clock.method == "wraps"
    hidden = len(ran.steps) - len(blocked.steps)
    assert hidden >= 9 and sum(not s.covered for s in ran.steps) == hidden + 1


def test_a_long_span_is_a_drop_out_only_if_the_sampler_waited_for_a_core_through_it():
    # GIVEN one stack held for 1 s, the thread on a CPU throughout (a garbage collection does work)...
    def job(sampler_queued_in_stall: float | None) -> Timeline:
        return held_for_a_second(1.0, sampler_queued_in_stall)
    # ...while py-spy, whose counters say it never waited for a core, sampled on: the job's own
    # slow step, its time the phase's
    own = job(0.0)
    assert own.clock.method == "wraps"
    assert max(s.dur_ns for s in own.steps) >= 1_000_000_000
    assert all(s.covered for s in own.steps)
    # ...while py-spy waited for a core most of that second: a drop-out over the steps it hid
    starved = job(0.9)
    hidden = len(starved.steps) - len(own.steps)
    assert hidden >= 9 and sum(not s.covered for s in starved.steps) == hidden + 1
    # ...and with no counters of py-spy's (a stream recorded before them): a drop-out, as before
    unknown = job(None)
    assert len(unknown.steps) == len(starved.steps) and sum(not s.covered for s in unknown.steps) == hidden + 1


def test_runs_of_missed_boundaries_beyond_chance_are_cut_where_they_are_too_many():
    from traceml_attach.steps.clock import chance_cut, missed_share

    # a loader's garbage collections of 2.7 steps every few steps, boundaries missed 1.9% of the
    # time (e^-λ): 18 intervals of three beside 10 of two in 206 steps, where runs of two missed
    # boundaries come 0.5 times: three steps and more are beyond chance (slow steps)
    gc = {1: 106, 2: 10, 3: 18, 4: 4, 5: 2}
    missed = missed_share(gc, 206, 0.0185)
    assert missed == pytest.approx(10 / 206) and chance_cut(gc, 206, missed, 0.0185) == 2
    # boundaries missed 8% of the time (30 intervals of two in 375 steps, where e^-λ = 0.02 expects
    # 8): three intervals of three are chance at that share, two of eight are not
    uneven = {1: 300, 2: 30, 3: 3, 8: 2}
    assert chance_cut(uneven, 375, missed_share(uneven, 375, 0.02), 0.02) == 7
    # bursty delivery on synchronized ranks: runs as many as the share of intervals of two makes
    bursty = {1: 343, 2: 74, 3: 9, 5: 1}
    assert chance_cut(bursty, 523, missed_share(bursty, 523, 0.009), 0.009) is None
    # and where boundaries go unseen too often to bound (e^-λ over CHANCE_UNSEEN), or unmeasured,
    # no run is beyond chance
    assert chance_cut(gc, 206, missed, 0.2) is None and missed_share(gc, 206, None) is None


def test_an_interval_that_splits_as_one_step_does_is_one_slow_step():
    from traceml_attach.steps.clock import Step, expand, one_outside, slow_throughout

    def interval(ms: float, outside_ms: float) -> Step:
        return Step(0, int(ms * 1e6), {"backward": int((ms - outside_ms) * 1e6)}, outside_ns=int(outside_ms * 1e6))

    # GIVEN steps of 25 ms, half of each outside the loop's dominant place (backward's line)
    ones = [interval(25 + i % 3, 12.5 + i % 3 / 2) for i in range(30)]
    outside = one_outside([*ones, interval(50, 25)], [1] * 30 + [2])
    assert outside == pytest.approx(0.5, abs=0.01)
    # THEN an interval of two steps' length that splits as one step does is one step slowed
    # throughout...
    assert slow_throughout(interval(52, 25), 2, outside)
    assert len(expand([interval(52, 25)], [2], 1 / 150, None, 1 / 150, outside)) == 1
    # ...and one that shows one step's time outside it (a visit outside it went unsampled), or one
    # step's time in it (backward went unsampled), is two steps whose boundary went unseen
    assert not slow_throughout(interval(50, 12.5), 2, outside)
    assert not slow_throughout(interval(50, 37.5), 2, outside)
    assert len(expand([interval(50, 12.5)], [2], 1 / 150, None, 1 / 150, outside)) == 2
    # AND where no interval counts several steps, or the one-step intervals split too unevenly to
    # tell (bursty delivery), none is judged so
    assert one_outside(ones, [1] * 30) is None
    uneven = [interval(25, 2 if i % 2 else 20) for i in range(30)]
    assert one_outside([*uneven, interval(50, 25)], [1] * 30 + [2]) is None


def test_more_intervals_of_several_steps_than_chance_makes_are_mostly_one_slow_step():
    from traceml_attach.steps.clock import Step, expand, hidden_share, holds_missed, slow_share

    # GIVEN a job reading its batches in Python on two cores py-spy shares: 137 intervals, 32 of
    # them as long as two steps or more, where a boundary goes unseen 3.5% of the time (e^-λ) and
    # the visits outside the dominant place, 15 seen in one sample and 22 in two, say 3.2%
    slowed = {1: 105, 2: 31, 3: 1}
    assert hidden_share(15, 22, 137) == pytest.approx(0.032, abs=0.001)
    share = slow_share(slowed, 0.035, (15, 22, 137))
    # THEN only as many of them hold missed boundaries as chance makes (137 * 3.5% of 32)...
    assert share == pytest.approx(137 * 0.035 / 32)
    intervals = [Step(i * 70_000_000 + i * 7919, (i + 1) * 70_000_000, {"input": 60_000_000}) for i in range(2000)]
    held = sum(holds_missed(step, share) for step in intervals)
    assert abs(held / 2000 - share) < 0.03   # a fixed draw from each interval's start
    # ...and the rest are one slow step each: the job's step count holds, not 26 steps too many
    steps = expand(intervals, [2] * 2000, 0.035, holding=share)
    assert len(steps) == 2000 + held
    # AND where chance makes them (the visits say far more go unseen than e^-λ: bursty delivery,
    # most visits seen in one sample), or nothing measured how often a boundary goes unseen, every
    # interval counts its steps
    assert slow_share({1: 343, 2: 74, 3: 9, 5: 1}, 0.009, (200, 20, 427)) is None
    assert slow_share(slowed, None, (15, 22, 137)) is None
    assert len(expand(intervals[:10], [2] * 10, 0.035, holding=None)) == 20


def test_a_median_that_guessed_counts_move_beyond_5_percent_is_no_step_time():
    from traceml_attach.steps.clock import Step, StepClock, guessed, median_holds, uneven_clock

    # GIVEN 80 steps of 36-39 ms and 45 of 60-75 ms (a third of them slowed), sorted
    durations = sorted([36 + i % 4 for i in range(80)] + [60 + i % 16 for i in range(45)])
    # THEN a median that 20 intervals counted by a guess can move a rank each goes from the fast
    # steps into the slow ones: no step time; with 3 guessed, or none, it holds
    assert not median_holds(durations, 20)
    assert median_holds(durations, 3) and median_holds(durations, 0)
    # AND only intervals the draw decided count: not one sampling decided (no boundary can go
    # unseen there), nor one step
    step = Step(0, 70_000_000, {"input": 60_000_000})
    assert guessed(step, 2, 0.035, None, 0.035, None, 0.3) == 1
    assert guessed(step, 2, 1e-9, None, 1e-9, None, 0.3) == 0
    assert guessed(step, 1, 0.035, None, 0.035, None, 0.3) == 0
    assert guessed(step, 2, 0.035, None, 0.035, None, None) == 0
    clock = uneven_clock(StepClock("comb", 36.4e6, 0.8, 0.5, unseen=0.035))
    assert not clock.known and clock.reason is not None and "slow steps" in clock.reason
    assert clock.unseen == 0.035


def test_ranks_means_over_a_span_they_do_not_share_are_their_own():
    # GIVEN two ranks' windows of 100-ms steps that do not overlap (no step lies in a span both cover),
    # their clocks unknown, as the ranks' whose mean is asked for are (steps too uneven for a median)
    from dataclasses import replace

    from traceml_attach.steps.clock import StepClock
    from traceml_attach.steps.mean import _common_means

    unknown = StepClock("unknown", None, None, None, "the steps vary too much")
    early = replace(timeline(steps(PATTERN, 12, t0_ns=1_000_000_000)), clock=unknown)
    late = replace(timeline(steps(PATTERN, 12, t0_ns=5_000_000_000)), clock=unknown)
    # THEN each rank's mean is its own steps' (not 0, which would pass any agreement between them)
    assert _common_means({"0": early, "1": late}) == {"0": 100_000_000, "1": 100_000_000}
