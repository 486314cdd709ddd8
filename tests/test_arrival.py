"""Straggler persistence (diagnose/arrival.py) on two recorded torchrun jobs of four gloo ranks
(tests/record_fixtures.py PERSISTENCE): rank 2 always slow, and a slow rank drawn at random each
step; over the window and over the session's rollups, in the JSON and the text."""

from __future__ import annotations

from pathlib import Path

from traceml_attach.diagnose.arrival import arrival, last_arrivals
from traceml_attach.output.codec import encode
from traceml_attach.output.render import render_text
from traceml_attach.output.summary import build_summary
from traceml_attach.output.whatif_text import arrival_line
from traceml_attach.runtime.pipeline import replay_file
from traceml_attach.steps.classify import load_rules
from traceml_attach.steps.clock import Step

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def replayed(name: str):
    pipeline, problem = replay_file(FIXTURES / f"{name}.msgpack", load_rules(), rollup_s=2.0)
    assert problem is None
    return pipeline, build_summary(pipeline.rec, pipeline.window_analysis(), name)


def test_rank_2_is_always_the_slowest():
    _, summary = replayed("ddp4_slow_rank2")
    st, session = summary.report.step_time, summary.report.session
    assert st.diagnosis.kind == "COMPUTE_STRAGGLER" and st.diagnosis.worst_rank == 2
    for a in (st.arrival, session.arrival if session else None):
        assert a is not None and a.persistent and a.rank == 2
        assert a.steps >= 50 and a.share is not None and a.share >= 0.9
        assert sum(n for r, n in a.last.items() if r != 2) <= 0.1 * a.steps
    assert st.arrival is not None
    share = f"{100 * (st.arrival.share or 0):.0f}%"
    assert arrival_line(st.arrival) == f"rank 2 was the slowest in {share} of {st.arrival.steps} steps"
    # per-rank counts in the JSON, the sentence in the text
    assert set(encode(summary.report)["step_time"]["arrival"]["last"]) == {"0", "1", "2", "3"}
    assert "rank 2 was the slowest in" in render_text(summary)


def test_a_slow_rank_drawn_each_step_rotates():
    _, summary = replayed("ddp4_random_slow")
    for a in (summary.report.step_time.arrival, summary.report.session.arrival if summary.report.session else None):
        assert a is not None and not a.persistent and a.steps >= 20
        # every rank is last in some steps; none in most of them (a fair draw: 25% each)
        assert all(n > 0 for n in a.last.values()) and len(a.last) == 4
        assert max(a.last.values()) < 0.5 * a.steps
    text = render_text(summary)
    assert "the slowest rank rotates: 4 ranks each" in text


def step(end_ms: int, blocked_share: float, dur_ms: int = 100) -> Step:
    dur = dur_ms * 10**6
    return Step(end_ms * 10**6 - dur, end_ms * 10**6, {}, {"backward": int(blocked_share * dur)})


def test_matching_by_the_shared_boundary_and_a_tie_counts_for_no_rank():
    steps = {
        "0": [step(100, 0.5), step(200, 0.5), step(300, 0.30)],
        "1": [step(103, 0.0), step(198, 0.5), step(305, 0.29)],   # last in the first; a tie in the third
        "2": [step(99, 0.5), step(201, 0.1), step(302, 0.5), step(400, 0.0)],   # last in the second
    }
    # the fourth step is judged on no rank but 2's: not judged at all
    judged, last = last_arrivals(steps, 0, 10**12)
    assert (judged, last) == (3, {"0": 0, "1": 1, "2": 1})
    a = arrival(judged, last)
    assert a is not None and not a.persistent   # 3 steps are too few to say
    assert arrival(0, {}) is None
