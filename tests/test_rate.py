"""A rate that fits the step: the sampler's decision (agent/rate.py), the ``rate`` frames it
records, and the analysis of a recording whose rate changed (diagnose/rate.py).

The mixed-rate streams are a simulated 27 ms job (testkit/simulator.py) sampled at 100 Hz, too
slow to tell its steps apart, then at 300 Hz from a change on: the same schedule sampled twice
with one seed, spliced at the change, and written as the agent writes frames.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgpack
import pytest

from testkit.simulator import Truth, job, simulate
from traceml_agent.pyspy import RawSpan, WindowResult
from traceml_agent.rate import HOLD_S, RAISE_HOLD_S, Rate, RateGovernor
from traceml_agent.sampler import Sampler, SamplerConfig
from traceml_agent.writer import FrameWriter, StateFrames
from traceml_attach.diagnose.analysis import analyze
from traceml_attach.diagnose.compare import compare
from traceml_attach.diagnose.incremental import IncrementalAnalyzer
from traceml_attach.diagnose.rate import (
    GAVE_UP,
    GAVE_UP_UNSEEN,
    SHORT_MISSED,
    advise_rates,
    faster,
    futile,
    lag_of,
    slower,
    stretch,
)
from traceml_attach.ingest.model import Span
from traceml_attach.ingest.stream import Recording
from traceml_attach.output.render import render_text
from traceml_attach.output.summary import build_summary, from_json, to_json
from traceml_attach.runtime.pipeline import Pipeline, replay_file
from traceml_attach.steps.classify import load_rules
from traceml_attach.steps.clock import StepClock
from traceml_attach.tui.present import Selection, present

RULES = load_rules()
NS = 1_000_000_000
PID = 1000
SHORT = job(27, "backward", 0.9, rng=random.Random(1), jitter=0.03)   # 27 ms steps, 90% backward


# --- the sampler's decision -------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_sampler_keeps_the_advice_within_its_budget():
    # GIVEN a governor between --rate 100 and --max-rate 300
    gov = RateGovernor(100, 300, clock=Clock())
    # WHEN the analysis advises 400 Hz for steps too short for 100 Hz
    gov.advise(1, 400, "steps of at most 24 ms get 2.4 samples at 100 Hz, under 10")
    # THEN the next window is sampled at 300 Hz, and the reason says what was wanted
    rate = gov.rate_for(1)
    assert rate.rate_hz == 300
    assert rate.why == ("steps of at most 24 ms get 2.4 samples at 100 Hz, under 10 "
                        "(it would take 400 Hz; --max-rate is 300)")
    # AND another process is untouched, at the base rate
    assert gov.rate_for(2) == Rate(100)


def test_the_sampler_never_goes_below_the_users_rate_nor_changes_faster_than_its_hold():
    clock = Clock()
    gov = RateGovernor(100, 300, clock=clock)
    gov.advise(1, 200, "short")
    assert gov.rate_for(1).rate_hz == 200
    # a raise that fell short is followed up RAISE_HOLD_S after the change, not sooner
    clock.now = RAISE_HOLD_S / 2
    gov.advise(1, 250, "still short")
    assert gov.rate_for(1).rate_hz == 200
    clock.now = changed = RAISE_HOLD_S
    assert gov.rate_for(1).rate_hz == 250
    # going down waits HOLD_S after the change; the windows go on at the rate they have
    clock.now = changed + RAISE_HOLD_S
    gov.advise(1, 50, "long enough")
    assert not gov.pending(1)
    assert gov.rate_for(1).rate_hz == 250
    # ...and is taken once the hold is over (the sampler then starts a window at once), clamped to --rate
    clock.now = changed + HOLD_S
    assert gov.pending(1)
    assert gov.rate_for(1) == Rate(100, "long enough")
    assert not gov.pending(1)
    # an advice that changes nothing is dropped (no change, so no new hold either)
    clock.now = changed + 3 * HOLD_S
    gov.advise(1, 100, "long enough")
    assert gov.rate_for(1).rate_hz == 100
    gov.advise(1, 300, "short again")
    assert gov.rate_for(1).rate_hz == 300


def test_advice_drawn_from_before_the_last_change_is_dropped():
    clock = Clock()
    gov = RateGovernor(100, 400, clock=clock)
    gov.advise(1, 250, "steps of at most 40 ms", seen_at_hz=100)
    assert gov.rate_for(1).rate_hz == 250
    # the analysis has not read the change yet: its next advice is still about 100 Hz data
    clock.now = RAISE_HOLD_S + 1
    gov.advise(1, 400, "steps of at most 20 ms get 2.0 samples at 100 Hz", seen_at_hz=100)
    assert not gov.pending(1)
    assert gov.rate_for(1).rate_hz == 250
    # once it reads the 250 Hz data, its advice counts
    gov.advise(1, 400, "steps of at most 22 ms get 5.5 samples at 250 Hz", seen_at_hz=250)
    assert gov.rate_for(1) == Rate(400, "steps of at most 22 ms get 5.5 samples at 250 Hz")


def test_a_raise_that_refines_a_known_step_is_recorded_as_such():
    # GIVEN a raise advised for a step already known at the old rate (clamped to the budget)
    gov = RateGovernor(100, 300, clock=Clock())
    gov.advise(1, 400, "steps of 80 ms get 8.0 samples at 100 Hz, under 10", refines=True)
    rate = gov.rate_for(1)
    assert (rate.rate_hz, rate.refines) == (300, True)
    # WHEN its first window ends, THEN its rate frame says so (and a plain raise's does not)
    frames: list[dict[str, Any]] = []
    sampler = Sampler(PID, "py-spy", SamplerConfig(rate_hz=100, max_rate_hz=300), gov)
    sampler.writer = FrameWriter(None)
    sampler.writer.listen(frames.append)
    sampler._window_rates.update({1: Rate(100), 2: rate, 3: Rate(100), 4: Rate(300, "short")})
    for index, (a, b) in enumerate([(0, 2_000), (2_000, 4_000), (4_000, 6_000), (6_000, 8_000)], start=1):
        assert sampler._finish(FakeWindow(index, a * 1_000_000, b * 1_000_000))  # type: ignore[arg-type]
    rates = [f for f in frames if f["k"] == "rate"]
    assert [(f["rate_hz"], f.get("refines")) for f in rates] == [(300, True), (100, None), (300, None)]
    # AND the recording reads it back
    rec = Recording()
    for frame in rates:
        rec.add(frame)
    assert [c.refines for c in rec.rates[PID]] == [True, False, False]


def test_a_fixed_rate_ignores_advice_and_an_exited_process_is_forgotten():
    fixed = RateGovernor(100, 100)
    assert not fixed.adaptive
    fixed.advise(1, 300, "short")
    assert fixed.rate_for(1) == Rate(100)
    gov = RateGovernor(100, 300)
    gov.advise(1, 300, "short")
    assert gov.rate_for(1).rate_hz == 300
    gov.forget(1)
    assert gov.rate_for(1) == Rate(100)


class FakeWindow:
    """A py-spy window that has ended: its spans, as RecordWindow.collect gives them."""

    def __init__(self, index: int, start_ns: int, end_ns: int) -> None:
        self.index = index
        self.spans = [RawSpan(1, start_ns, end_ns - start_ns, (("main", "/nonexistent/train.py", 3),))]

    def collect(self) -> WindowResult:
        return WindowResult(self.spans, self.spans[0].ts_ns, self.spans[-1].ts_ns + self.spans[-1].dur_ns, 10, 0, None)


def test_the_sampler_records_a_change_where_the_new_windows_spans_begin():
    # GIVEN a sampler whose first window ran at 100 Hz and whose second was started at 300 Hz
    frames: list[dict[str, Any]] = []
    sampler = Sampler(PID, "py-spy", SamplerConfig(rate_hz=100, max_rate_hz=300), RateGovernor(100, 300))
    sampler.writer = FrameWriter(None)
    sampler.writer.listen(frames.append)
    sampler._window_rates.update({1: Rate(100), 2: Rate(300, "short steps"), 3: Rate(300, "short steps")})
    # WHEN the windows end (overlapping by 0.3 s, as they do)
    for index, (a, b) in enumerate([(0, 2_000), (1_700, 4_000), (3_700, 6_000)], start=1):
        assert sampler._finish(FakeWindow(index, a * 1_000_000, b * 1_000_000))  # type: ignore[arg-type]
    # THEN one rate frame, written before the spans it applies to, at the end of what the first
    # window covered (the second one's spans are kept from there)
    kinds = [f["k"] for f in frames]
    assert kinds == ["spans", "window", "rate", "spans", "window", "spans", "window"]
    rate = frames[2]
    assert rate == {"k": "rate", "t": 2_000_000_000, "pid": PID, "rate_hz": 300, "why": "short steps"}
    assert frames[3]["spans"][0][1] == rate["t"]
    # and each window says how many threads its trace holds (py-spy counts a sample per thread)
    assert [f["threads"] for f in frames if f["k"] == "window"] == [1, 1, 1]
    assert [f["thread_ns"] for f in frames if f["k"] == "window"] == [2_000_000_000, 2_300_000_000, 2_300_000_000]


# --- the recording ----------------------------------------------------------------------------

def test_the_recording_keeps_each_processes_rate_changes():
    rec = Recording()
    rec.add({"k": "hello", "rate_hz": 100, "max_rate_hz": 300})
    rec.add({"k": "rate", "t": 5 * NS, "pid": PID, "rate_hz": 300, "why": "short"})
    rec.add({"k": "rate", "t": 5 * NS, "pid": PID, "rate_hz": 300, "why": "short"})  # a segment's context copy
    rec.add({"k": "rate", "t": 9 * NS, "pid": PID, "rate_hz": 0, "why": "?"})        # malformed
    assert (rec.rate_hz, rec.max_rate_hz, rec.bad_frames) == (100, 300, 1)
    assert [rec.rate_at(PID, t * NS) for t in (4, 5, 6)] == [100, 300, 300]
    assert rec.rate_at(PID + 1, 6 * NS) == 100
    rec.add({"k": "rate", "t": 20 * NS, "pid": PID, "rate_hz": 100, "why": "long"})
    rec.add({"k": "rate", "t": 40 * NS, "pid": PID, "rate_hz": 250, "why": "short"})
    # trimming keeps the change in effect at the cut, and the count of all of them
    rec.trim(30 * NS)
    assert [c.ts_ns for c in rec.rates[PID]] == [20 * NS, 40 * NS]
    assert rec.rate_changes[PID] == 3 and rec.rate_at(PID, 35 * NS) == 100
    # a recording of an older version says nothing of a budget
    assert Recording().max_rate_hz is None


def test_a_rotated_segment_repeats_each_processes_rate():
    state = StateFrames()
    state.remember({"k": "rate", "t": 1, "pid": PID, "rate_hz": 300, "why": "short"})
    state.remember({"k": "rate", "t": 2, "pid": PID, "rate_hz": 100, "why": "long"})
    assert [f["rate_hz"] for f in state.frames() if f["k"] == "rate"] == [100]


def changes(*rows: tuple[float, int], refines: bool = False) -> Recording:
    rec = Recording()
    rec.add({"k": "hello", "rate_hz": 100, "max_rate_hz": 400})
    for t, rate in rows:
        rec.add({"k": "rate", "t": int(t * NS), "pid": PID, "rate_hz": rate, "why": "x",
                 **({"refines": True} if refines else {})})
    return rec


@pytest.mark.parametrize(("rows", "end_s", "want"), [
    ((), 30, (0, 100)),                           # one rate: the whole window
    (((10, 300),), 12, (0, 100)),                 # a raise not yet settled: the old rate, all of it
    (((10, 300),), 30, (10, 300)),                # settled: from the change on, at the new rate
    (((10, 300), (20, 100)), 30, (0, 100)),       # raised, then back: the whole window at the lower
    (((10, 300), (28, 200)), 30, (10, 200)),      # lowered (not settled): from the raise, at the lower
    (((10, 300), (20, 400)), 21, (10, 300)),      # raised twice, the second not settled
    (((10, 300), (20, 400)), 30, (20, 400)),
])
def test_a_ranks_steps_are_found_where_one_rate_holds(rows, end_s, want):
    rec = changes(*rows)
    since, rate = stretch(rec, PID, 0, end_s * NS)
    assert (since / NS, rate) == want


@pytest.mark.parametrize(("change_s", "first_s", "want"), [
    (10, None, (10, 300)),     # the new rate holds 20 s of the 30-s window: read from the change on
    (20, None, (0, 100)),      # it holds 10 s (settled, but under half): the old rate, all of the window
    (20, 12, (20, 300)),       # ...of a process seen from 12 s on (a restarted worker): over half its part
])
def test_a_raise_that_refines_a_known_step_is_read_from_once_it_holds_half_the_window(change_s, first_s, want):
    rec = changes((change_s, 300), refines=True)
    if first_s is not None:
        rec.spans[PID] = [Span(PID, 1, first_s * NS, 10 * NS, ())]
    since, rate = stretch(rec, PID, 0, 30 * NS)
    assert (since / NS, rate) == want
    # a raise for a step time unknown at the old rate is read from once settled, as before
    assert stretch(changes((20, 300)), PID, 0, 30 * NS) == (20 * NS, 300)


# --- the analysis of a recording whose rate changed --------------------------------------------

def spliced(change_s: float, seconds: float = 14.0, seed: int = 3) -> tuple[list[dict[str, Any]], Truth, int]:
    """The frames of SHORT sampled at 100 Hz and, from ``change_s`` on, at 300 Hz (the schedule is
    the same: one seed), in 2 s py-spy windows with the rate frame before the first at 300 Hz;
    also the truth and the change's time."""
    slow, truths = simulate(SHORT, 100, seconds, seed=seed)
    fast, _ = simulate(SHORT, 300, seconds, seed=seed)
    t0 = slow.targets[PID].ts_ns
    change = t0 + int(change_s * NS)
    spans = ([_clip(s, None, change) for s in slow.spans[PID] if s.ts_ns < change]
             + [_clip(s, change, None) for s in fast.spans[PID] if s.end_ns > change])
    frames: list[dict[str, Any]] = []
    writer = FrameWriter(None)
    writer.listen(frames.append)
    writer.write({"k": "hello", "v": 1, "t": t0, "backend": "py-spy", "backend_version": "0.4.3", "rate_hz": 100,
                  "max_rate_hz": 300, "window_s": 2.0, "host": "sim", "argv": []})
    writer.write({"k": "target", "t": t0, "pid": PID, "exe": "python3.11", "cmd": ["python", "train.py"],
                  "nspid": [PID]})
    writer.write({"k": "threads", "pid": PID, "t": t0, "threads": [[1, PID, "MainThread", True]]})
    cpu = slow.cpu[PID]
    end = t0 + int(seconds * NS)
    for w, a in enumerate(range(t0, end, 2 * NS), start=1):
        b = a + 2 * NS
        if a == change:
            writer.write({"k": "rate", "t": change, "pid": PID, "rate_hz": 300, "why": "steps too short"})
        rows = [(s.tid, s.ts_ns, s.dur_ns, [(f.name, f.file, f.line, f.src, f.ctx) for f in s.stack])
                for s in spans if a <= s.ts_ns < b]
        writer.write_spans(PID, w, rows)
        writer.write({"k": "tcpu", "pid": PID, "tid": PID, "samples": [list(r) for r in cpu if a <= r[0] < b]})
        writer.write({"k": "window", "pid": PID, "w": w, "start": a, "end": b, "samples": None, "errors": None})
    return frames, truths[0], change


def _clip(span: Span, lo: int | None, hi: int | None) -> Span:
    start = span.ts_ns if lo is None else max(span.ts_ns, lo)
    stop = span.end_ns if hi is None else min(span.end_ns, hi)
    return Span(span.pid, span.tid, start, stop - start, span.stack)


def recording(frames: list[dict[str, Any]]) -> Recording:
    rec = Recording()
    for frame in frames:
        rec.add(frame)
    return rec


def test_after_a_raise_the_steps_are_found_at_the_new_rate_from_the_change_on():
    # GIVEN 27 ms steps sampled at 100 Hz for 4 s, then at 300 Hz
    frames, truth, change = spliced(4.0)
    rec = recording(frames)
    assert rec.rates[PID][0].ts_ns == change
    span_range = rec.time_range()
    assert span_range is not None
    hi = span_range[1]
    # WHEN the window ends 2 s after the change: the old rate still reads the whole window
    early = analyze(rec, RULES, end_ns=change + 2 * NS).report.step_time.ranks[0]
    assert (early.rate_hz, early.since, early.step_ms) == (100, None, None)
    # WHEN it ends 10 s after it: from the change on, at 300 Hz, and right
    row = analyze(rec, RULES).report.step_time.ranks[0]
    assert (row.rate_hz, row.since) == (300, round(change / NS, 3))
    assert row.step_ms is not None
    assert abs(row.step_ms / truth.median_step_ms(change, hi) - 1) <= 0.05
    assert abs(row.steps - truth.steps_in(change, hi)) <= 3
    # AND at 100 Hz alone the same steps are unknown: the raise is what tells them
    slow = recording([f for f in frames if f.get("k") != "rate" and (f.get("k") != "spans" or
                                                                     f["spans"][-1][1] < change)])
    assert analyze(slow, RULES).report.step_time.ranks[0].step_ms is None


def test_the_live_trackers_follow_the_rate_change_as_the_batch_does():
    frames, _, _ = spliced(4.0, seconds=16.0)
    rec, live = Recording(), IncrementalAnalyzer(RULES)
    seen = []
    for frame in frames:
        rec.add(frame)
        if frame["k"] == "window":
            got = live.tick(rec)
            want = analyze(rec, RULES, start_ns=got.start_ns)
            g, w = got.report.step_time.ranks[0], want.report.step_time.ranks[0]
            assert (g.rate_hz, g.since) == (w.rate_hz, w.since)
            assert (g.step_ms is None) == (w.step_ms is None)
            if g.step_ms is not None and w.step_ms is not None:
                assert abs(g.step_ms / w.step_ms - 1) <= 0.02
            seen.append(g)
    assert seen[-1].rate_hz == 300 and seen[-1].step_ms is not None
    assert seen[0].rate_hz == 100


def test_a_replay_of_a_recording_with_rate_changes_gives_the_same_summary(tmp_path: Path):
    frames, _, _ = spliced(4.0)
    path = tmp_path / "frames.msgpack"
    path.write_bytes(b"".join(msgpack.packb(frame, use_bin_type=True) for frame in frames))
    docs = []
    for _ in range(2):
        pipeline, problem = replay_file(path, RULES)
        assert problem is None
        summary = build_summary(pipeline.rec, pipeline.window_analysis(), "run")
        docs.append((json.dumps(to_json(summary)), render_text(summary)))
    assert docs[0] == docs[1]
    doc = json.loads(docs[0][0])
    assert from_json(doc) == summary   # `traceml view` reads it back whole
    assert doc["sampling"]["max_rate_hz"] == 300
    assert doc["sampling"]["rates"] == {"0": {"rate_hz": 300, "since": doc["step_time"]["ranks"]["0"]["since"],
                                              "why": "steps too short", "changes": 1}}
    # AND the text says the rate in use and why, and where the rank's steps were found
    text = docs[0][1]
    assert "py-spy 0.4.3 at 300 Hz (up to 300)" in text
    assert "Rate: 300 Hz on rank 0 since " in text and ": steps too short" in text
    assert "rank 0: steps from " in text and "at 300 Hz (its rate changed in the window)" in text
    # AND so does the TUI: the header the rates, the step table why
    vm = present(summary, Selection())
    assert "300 Hz (up to 300)" in vm.header.sampling
    assert vm.steps.note.startswith("sampling 300 Hz on rank 0 since ") and vm.steps.note.endswith("steps too short")


# --- the advice ----------------------------------------------------------------------------------

def timeline_at(rate: int, seconds: float = 8.0):
    rec, _ = simulate(SHORT, rate, seconds, seed=3)
    return rec, analyze(rec, RULES).timelines["0"]


def test_short_unknown_steps_are_advised_a_faster_rate_and_long_ones_never():
    rec, tl = timeline_at(100)
    assert not tl.clock.known
    # 27 ms steps: under 3 samples at 100 Hz; the rate that gives the upper bound 15
    rate, why = faster(tl) or (None, "")
    assert rate is not None and 500 <= rate <= 650 and rate % 50 == 0
    assert why.startswith("steps of at most ") and "samples at 100 Hz, under 10" in why
    [advice] = advise_rates(rec, {"0": PID}, {"0": tl}, rec.time_range()[1])
    assert (advice.pid, advice.rate_hz, advice.seen_at_hz) == (PID, rate, 100)
    # an unknown step that is long enough (16 samples at 100 Hz, boundaries unseen) is never advised faster
    long_unknown = StepClock("unknown", None, reason="the boundaries seen fit no step period",
                             suggested_rate_hz=150, step_upper_ns=160e6)
    assert faster(tl.__class__(**{**tl.__dict__, "clock": long_unknown})) is None
    # nor one unknown for its jitter (no rate would help: no suggested rate)
    jittery = StepClock("unknown", None, reason="the steps vary too much", step_upper_ns=20e6)
    assert faster(tl.__class__(**{**tl.__dict__, "clock": jittery})) is None


def test_long_steps_whose_boundaries_mostly_go_unseen_are_advised_a_faster_rate_that_shows_them():
    # GIVEN 50-ms steps that spend 99% of themselves in backward: 5 samples a step at 100 Hz, long
    # enough, but the 0.5 ms outside it is seen in hardly any step
    wait99 = job(50, "backward", 0.99, rng=random.Random(1), jitter=0.03)
    rec, _ = simulate(wait99, 100, 10.0, seed=3)
    tl = analyze(rec, RULES).timelines["0"]
    assert not tl.clock.known and tl.clock.unseen is not None and tl.clock.unseen > 0.3
    # THEN a faster rate is advised, for that reason (λ grows with the rate); the sampler keeps it
    # within --max-rate
    rate, why = faster(tl) or (None, "")
    assert rate is not None and rate > 100 and why == "nearly all of the step boundaries go unseen at 100 Hz"
    # AND at 400 Hz the step is known, within 5%
    rec, _ = simulate(wait99, 400, 10.0, seed=3)
    tl = analyze(rec, RULES).timelines["0"]
    assert tl.clock.typical_ns is not None and abs(tl.clock.typical_ns / 50e6 - 1) <= 0.05
    # AND where they still mostly go unseen at --max-rate (99.9% in backward), the rank goes back to
    # --rate, and is not raised again while that return stands
    rare = job(50, "backward", 0.999, rng=random.Random(1), jitter=0.03)
    rec, _ = simulate(rare, 400, 10.0, seed=3)
    tl = analyze(rec, RULES).timelines["0"]
    assert not tl.clock.known and faster(tl) is not None
    back = futile(tl, 100, 400)
    assert back is not None and back[0] == 100 and back[1].startswith(GAVE_UP_UNSEEN)
    # ...and once the sampler took that return, the same rank at 100 Hz is not raised again (without
    # it, it would be)
    end = rec.time_range()[1]
    low = replace(tl, rate_hz=100)
    assert faster(low) is not None
    rec.add({"k": "rate", "t": end - 1, "pid": PID, "rate_hz": 100, "why": back[1]})
    assert advise_rates(rec, {"0": PID}, {"0": low}, end) == []


def test_a_known_step_of_few_samples_is_advised_the_rate_that_times_it():
    # GIVEN 2 ranks whose 80-ms steps are stretched up to 2x by bursts of other work on their cores,
    # read at the attacher's default 100 Hz: 7-8 samples a step; the comb's step, 73 ms, 10% short of
    # the median, is refuted by the boundaries the ranks saw together (83.5 ms: steps/peersplit.py)
    from bench.sim_grid import Point, build

    pt = Point.parse("contended:80:classic:100:2:369000")
    the_job = build(pt)[0]
    rec, truths = simulate(the_job, 100, 10.0, seed=pt.seed)
    an = analyze(rec, RULES)
    tl = an.timelines["0"]
    assert not tl.clock.known and "too uneven for a period" in (tl.clock.reason or "")
    # THEN the rate that gives the comb's step 15 samples is advised, and why
    rate, why = faster(tl) or (None, "")
    assert rate == 250
    assert why == "the samples' lag at each end of steps so uneven moves their median"
    # (to every rank, as one that times an unknown step: read from the change on)
    advised = advise_rates(rec, an.pids, an.timelines, an.end_ns or 0)
    assert {(a.rank, a.rate_hz, a.refines) for a in advised} == {("0", 250, False), ("1", 250, False)}
    # AND at that rate every rank's step is within 5% of the job's median, or given as the mean, said
    # so, within 5% of the job's mean (since stop 86 the steps recovered from the blur put its move on
    # the median at 3% or more: the mean, 87.0 ms for 87.0, where the median had been 82.6 for 81.6),
    # and stays there (neither raised again nor lowered)
    rec, truths = simulate(the_job, rate, 10.0, seed=pt.seed)
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None
        ms = truth.mean_step_ms(lo, hi) if r.clock is not None and r.clock.mean else truth.median_step_ms(lo, hi)
        assert abs(r.step_ms / ms - 1) <= 0.05, (r.rank, r.step_ms, ms)
    tl = an.timelines["0"]
    assert faster(tl) is None and slower(tl, 100) is None


def test_a_known_step_whose_mean_is_well_under_its_median_is_raised_as_well():
    # GIVEN one rank accumulating 2 micro-batches of a ~330-ms step whose 3 workers deliver in bursts
    # (short steps among long ones: the mean 3.4% under the median), read at 50 Hz over 30 s: 16.5
    # samples a step, and the blur of its ends moves the median toward the mean (-5.5%)
    from bench.sim_grid import Point, build

    pt = Point.parse("accum_bursty:320:2/3:50:1:1700000")
    rec, truths = simulate(build(pt)[0], 50, 30.0, seed=pt.seed)
    an = analyze(rec, RULES)
    # THEN the rate that gives it 25 samples is advised, and why
    rate, why = faster(an.timelines["0"]) or (None, "")
    assert rate == 100 and "3.4% under their median" in why
    # AND there the step is within 5% of the job's median, and the rate stays
    rec, truths = simulate(build(pt)[0], rate, 30.0, seed=pt.seed)
    an = analyze(rec, RULES)
    r, tl = an.ranks[0], an.timelines["0"]
    true_ms = truths[0].median_step_ms(an.start_ns or 0, an.end_ns or 0)
    assert r.step_ms is not None and abs(r.step_ms / true_ms - 1) <= 0.05
    assert faster(tl) is None and slower(tl, 50) is None


def test_a_known_step_of_uneven_steps_is_advised_the_rate_that_holds_its_median():
    # GIVEN one rank whose 200-ms steps are slowed 1.3-2.2x two times in five, read at 50 Hz: every
    # boundary seen, 10.4 samples a step, known, but the blur of each end fills the gap the slow
    # steps leave above the median (221 ms for the job's 208: +6.2%)
    from bench.sim_grid import Point, build

    pt = Point.parse("uneven:200:0.4:50:1:520000")
    the_job = build(pt)[0]
    rec, _ = simulate(the_job, 50, 10.0, seed=pt.seed)
    tl = analyze(rec, RULES).timelines["0"]
    assert tl.clock.known and 10 <= (tl.clock.typical_ns or 0) * 50 / NS < 20
    # THEN the rate that gives its step 25 samples is advised, and why
    rate, why = faster(tl) or (None, "")
    assert rate == 150
    assert why.startswith("steps of 221 ms get 11.1 samples at 50 Hz, and their mean is 4.7% over their median")
    # AND there its step is within 5% of the job's median, and stays there
    rec, truths = simulate(the_job, rate, 10.0, seed=pt.seed)
    an = analyze(rec, RULES)
    (r,), (truth,) = an.ranks, truths
    assert r.step_ms is not None and abs(r.step_ms / truth.median_step_ms(an.start_ns or 0, an.end_ns or 0) - 1) <= 0.05
    tl = an.timelines["0"]
    assert faster(tl) is None and slower(tl, 50) is None
    # ...while steps as long that vary by their jitter alone are left at 50 Hz
    steady, _ = simulate(replace(the_job, uneven=0.0), 50, 10.0, seed=pt.seed)
    assert faster(analyze(steady, RULES).timelines["0"]) is None


def test_a_median_the_samples_lag_moves_is_advised_the_rate_that_shrinks_the_lag():
    # GIVEN one rank of 50-ms steps stretched up to 3x by other work on its cores, under Lightning's
    # loop, read at 100 Hz: every boundary seen, 5 samples a step, and the lag at each end moves
    # the median of steps so skewed (batch_timeline.judged_blurred)
    from bench.sim_grid import Point, build

    pt = Point.parse("contended:50:library:100:1:356000")
    rec, _ = simulate(build(pt)[0], 100, 10.0, seed=pt.seed)
    tl = analyze(rec, RULES).timelines["0"]
    assert not tl.clock.known and "the samples' lag at each end moves" in (tl.clock.reason or "")
    # THEN the rate that gives its median 30 samples is advised (the sampler clamps it to --max-rate)
    rate, why = faster(tl) or (None, "")
    assert rate is not None and rate >= 30 * NS / 52e6 and rate % 50 == 0
    assert why == "the samples' lag at each end of steps so uneven moves their median"
    # AND at --max-rate's 400 Hz its step is known, within 5% of the job's median
    rec, truths = simulate(build(pt)[0], 400, 10.0, seed=pt.seed)
    an = analyze(rec, RULES)
    (r,), (truth,) = an.ranks, truths
    assert r.step_ms is not None and abs(r.step_ms / truth.median_step_ms(an.start_ns or 0, an.end_ns or 0) - 1) <= 0.05


def test_a_known_step_is_advised_a_slower_rate_only_with_twice_the_samples_there():
    _, tl = timeline_at(300)
    assert tl.clock.known and tl.rate_hz == 300
    # 27 ms at 300 Hz: 8 samples; 20 would need 750 Hz: stay
    assert slower(tl, 100) is None
    # 200 ms steps at 300 Hz get 20 samples at 100 Hz: back to --rate (a 20 ms optimizer is still
    # seen in 86% of the steps at 100 Hz)
    long_clock = StepClock("wraps", 200e6, typical_ns=200e6)
    every = tuple(replace(s, end_ns=s.start_ns + 200_000_000, phases_ns={**s.phases_ns, "optimizer": 20_000_000})
                  for s in tl.steps)
    long = tl.__class__(**{**tl.__dict__, "clock": long_clock, "steps": every})
    assert slower(long, 100) == (100, "steps of 200 ms get 20 samples at 100 Hz")
    # ...but a 2 ms optimizer sampled in 1 step of 3 (0.7 ms a step) is seen in 60% of the steps
    # only from ~1,400 Hz: lower, its gaps could leave accumulation undecided again
    # (doubts.undecided) and the rate would swing back up, so stay
    rare = tuple(replace(s, phases_ns={**s.phases_ns, "optimizer": 2_000_000 if i % 3 == 0 else 0})
                 for i, s in enumerate(tl.steps))
    assert slower(tl.__class__(**{**tl.__dict__, "clock": long_clock, "steps": rare}), 100) is None
    # 60 ms steps: 20 samples at 350 Hz, above the 300 in use: stay
    mid = tl.__class__(**{**tl.__dict__, "clock": StepClock("wraps", 60e6, typical_ns=60e6)})
    assert slower(mid, 100) is None
    # 4 micro-batches of 50 ms in a 200 ms optimizer step: the micro-batches decide (400 Hz: stay)
    accum = tl.__class__(**{**tl.__dict__, "clock": long_clock, "steps": every, "micro_batches": 4})
    assert slower(accum, 100) is None
    # micro-batches that could not be counted: never lower
    uncounted = tl.__class__(**{**tl.__dict__, "clock": long_clock, "micro_batches": None})
    assert slower(uncounted, 100) is None


def test_synchronized_ranks_are_advised_the_rate_one_of_them_needs():
    # GIVEN two ranks of one torchrun job; only rank 0's first window has arrived
    rec, tl = timeline_at(100)
    rec.targets[PID] = replace(rec.targets[PID], rank=0, world_size=2)
    rec.targets[PID + 1] = replace(rec.targets[PID], pid=PID + 1, rank=1)
    # WHEN rank 0's steps are too short for 100 Hz
    advice = advise_rates(rec, {"0": PID, "1": PID + 1}, {"0": tl}, rec.time_range()[1])
    # THEN rank 1, which shares its step, is advised the same rate
    assert [(a.rank, a.rate_hz) for a in advice] == [("0", advice[0].rate_hz), ("1", advice[0].rate_hz)]
    assert advice[1].why.endswith("on rank 0, whose step it shares")
    # (steps unknown at 100 Hz: the raise is read from as soon as it settles)
    assert not any(a.refines for a in advice)


def test_synchronized_ranks_that_count_apart_are_raised_until_each_sees_the_short_steps_and_kept_there():
    # GIVEN 8 ranks whose workers deliver in bursts of 6 (a ready batch's ~13-ms step between ~120-ms
    # ones) read at 200 Hz: their step is known, but the short steps get under 5 samples, and their
    # boundaries go unseen on some ranks that others saw
    from bench.sim_grid import Point, build

    pt = Point.parse("bursty:30:6:200:8:471000")
    the_job = build(pt)[0]
    rec, truths = simulate(the_job, 200, 10.0, seed=pt.seed)
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    counts = [r.steps for r in an.ranks]
    assert all(r.step_ms is not None for r in an.ranks)
    assert max(counts) - min(counts) > 3 and min(counts) < 0.95 * truths[0].steps_in(lo, hi)
    # THEN every rank is advised a faster rate, and why
    advice = advise_rates(rec, an.pids, an.timelines, hi)
    assert len(advice) == 8 and len({a.rate_hz for a in advice}) == 1 and advice[0].rate_hz > 200
    why = next(a.why for a in advice if "whose step it shares" not in a.why)
    assert why.startswith(f"{SHORT_MISSED}: over the same ") and " get " in why and " samples at 200 Hz" in why
    # AND at 400 Hz every rank counts the job's steps within 3%, and the step stays within 5%
    rec, truths = simulate(the_job, 400, 10.0, seed=pt.seed)
    an = analyze(rec, RULES)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    for r, truth in zip(an.ranks, truths, strict=True):
        assert r.step_ms is not None and abs(r.step_ms / truth.median_step_ms(lo, hi) - 1) <= 0.05
        assert abs(r.steps / truth.steps_in(lo, hi) - 1) <= 0.03, (r.rank, r.steps, truth.steps_in(lo, hi))
    # ...where a rank raised for them is not lowered again: raised from the attacher's 100 Hz for
    # another reason, its long steps alone would be (the counts agree at 400 Hz, and at 200 they
    # would not)
    rec.hello["rate_hz"] = 100
    start = rec.time_range()[0]
    for pid in an.pids.values():
        rec.add({"k": "rate", "t": start, "pid": pid, "rate_hz": 400, "why": "steps of 13 ms get 2.6 samples"})
    assert any(a.rate_hz < 400 for a in advise_rates(rec, an.pids, an.timelines, hi))
    for pid in an.pids.values():
        rec.add({"k": "rate", "t": start + 1, "pid": pid, "rate_hz": 400, "why": why})
    assert [a for a in advise_rates(rec, an.pids, an.timelines, hi) if a.rate_hz < 400] == []


def test_a_rate_that_cannot_tell_the_steps_apart_even_at_the_most_goes_back_and_stays_back():
    # GIVEN a real GPU job (tests/test_gpu_recorded.py) raised to --max-rate's 400 Hz, whose ~5.7 ms
    # steps are still under 5 samples there (they would take 1,000 Hz)
    pipeline, _ = replay_file(Path(__file__).parent / "fixtures" / "cuda_input_bound.msgpack", RULES)
    rec = pipeline.rec
    pid = next(iter(rec.targets))
    end = rec.time_range()[1]
    tl = analyze(rec, RULES).timelines["0"]
    assert (tl.rate_hz, rec.max_rate_hz, tl.clock.suggested_rate_hz) == (400, 400, 1000)
    # WHEN advised: THEN back to --rate, since the faster rate bought no step time
    [advice] = advise_rates(rec, {"0": pid}, {"0": tl}, end)
    assert (advice.rate_hz, advice.seen_at_hz) == (100, 400)
    assert advice.why == f"{GAVE_UP}: they would take 1000 Hz, and --max-rate is 400"
    # ...and once the sampler took that, the same short steps at 100 Hz are not raised again
    # (without it they would be: the looser bound at 100 Hz asks for more samples)
    slow = replace(tl, rate_hz=100, clock=replace(tl.clock, step_upper_ns=14e6, suggested_rate_hz=1000))
    assert faster(slow) is not None
    rec.add({"k": "rate", "t": end - 1, "pid": pid, "rate_hz": 100, "why": advice.why})
    assert advise_rates(rec, {"0": pid}, {"0": slow}, end) == []


def test_no_advice_while_a_change_settles():
    rec, tl = timeline_at(100)
    rec.add({"k": "rate", "t": rec.time_range()[1] - NS, "pid": PID, "rate_hz": 300, "why": "short"})
    # the rank is still read at 100 Hz (its change not settled) while its sampler runs at 300
    assert advise_rates(rec, {"0": PID}, {"0": tl}, rec.time_range()[1]) == []


def test_the_sessions_rollups_keep_what_came_before_a_change():
    # GIVEN 40 s of the 27 ms job, its rate raised 12 s in
    frames, truth, change = spliced(12.0, seconds=40.0)
    pipeline = Pipeline(RULES)
    for frame in frames:
        pipeline.add(frame)
    pipeline.finish()
    span_range = pipeline.rec.time_range()
    assert span_range is not None
    # THEN the session's rollups cover the whole of it: the stretch before the change (read at
    # 100 Hz, whose steps are a lower bound) and after it, with the job's shares throughout
    buckets = pipeline.history.ranks["0"].buckets
    covered = sum(b.covered_ns for b in buckets)
    assert covered >= 0.9 * (span_range[1] - span_range[0])
    before = sum(b.covered_ns for b in buckets if b.end_ns <= change)
    assert before >= 0.8 * (change - span_range[0])
    shares = pipeline.history.ranks["0"].shares()
    assert shares is not None
    want = truth.shares(span_range[0], span_range[1])
    assert all(abs(shares[p] - want[p]) <= 0.05 for p in want), (shares, want)


def test_compare_warns_when_two_runs_steps_were_found_at_other_rates(tmp_path: Path):
    frames, _, _ = spliced(4.0)
    path = tmp_path / "frames.msgpack"
    path.write_bytes(b"".join(msgpack.packb(frame, use_bin_type=True) for frame in frames))
    pipeline, _ = replay_file(path, RULES)
    raised = build_summary(pipeline.rec, pipeline.window_analysis(), "raised")
    rows = {rank: replace(row, rate_hz=100, since=None) for rank, row in raised.report.step_time.ranks.items()}
    fixed = replace(raised, report=replace(raised.report, step_time=replace(raised.report.step_time, ranks=rows)))
    warnings = compare(fixed, raised).warnings
    assert any("steps found at 100 and 300 Hz" in w for w in warnings), warnings
    assert compare(raised, raised).warnings == ()


def test_a_process_py_spy_reaches_less_often_than_asked_is_read_at_the_rate_reached():
    # GIVEN a 130 ms-step job sampled at 100 Hz, whose py-spy windows took 16 samples of each of
    # its 1,001 threads in 2 s (8 a second: a thousand threads to read at each sample)
    rec, _ = simulate(job(130, "input", 0.5, rng=random.Random(2), jitter=0.05), 100, 12.0, seed=1)
    span_range = rec.time_range()
    assert span_range is not None
    lo, hi = span_range
    pid = next(iter(rec.spans))
    fast, _ = simulate(job(130, "input", 0.5, rng=random.Random(2), jitter=0.05), 100, 12.0, seed=1)
    for k, t in enumerate(range(lo, hi - 2 * NS + 1, 2 * NS)):
        rec.add({"k": "window", "pid": pid, "w": k, "start": t, "end": t + 2 * NS, "samples": 16 * 1001,
                 "errors": 0, "threads": 1001, "thread_ns": 1001 * 2 * NS})
    # THEN its steps are found at the rate reached, and its step time is unknown for it: no faster
    # rate is advised, and the reason says why
    assert stretch(rec, pid, lo, hi) == (lo, 8)
    assert lag_of(rec, pid, lo, hi) == (8, 100, 1001)
    analysis = analyze(rec, RULES)
    rank = analysis.ranks[0]
    assert analysis.timelines[rank.rank].rate_hz == 8 and rank.step_ms is None and rank.clock is not None
    assert "py-spy reached this process about 8 times a second of the 100 asked" in (rank.clock.reason or "")
    assert rank.clock.suggested_rate_hz is None
    note = analysis.report.step_time.step_time_note or ""
    assert "faster rate cannot help" in note and "sample faster" not in note
    # while windows that kept up change nothing: 200 samples of the main thread in 2 s, and 2 each of
    # 50 threads that lived 20 ms (a thread a step: 51 threads, but 3 thread-seconds, not 102)
    for k, t in enumerate(range(lo, hi - 2 * NS + 1, 2 * NS)):
        fast.add({"k": "window", "pid": pid, "w": k, "start": t, "end": t + 2 * NS, "samples": 300, "errors": 0,
                  "threads": 51, "thread_ns": 3 * NS})
    assert stretch(fast, pid, lo, hi) == (lo, 100) and lag_of(fast, pid, lo, hi) is None
