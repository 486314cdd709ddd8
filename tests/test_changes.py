"""Change points in the session's rollups (diagnose/changes.py): found at the right rollup in a real
stream whose input slows halfway, never in a steady 10-minute stream, the same in a replay."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from testkit.streams import looped, read_frames
from traceml_attach.diagnose.changes import changes, splits
from traceml_attach.diagnose.history import Bucket, History, Span3
from traceml_attach.runtime.pipeline import Pipeline, replay_file
from traceml_attach.steps.classify import load_rules
from traceml_attach.steps.phases import PHASES

FIXTURES = Path(__file__).resolve().parent / "fixtures"
S = 10**9


def history(steps_ms: list[float], input_ms: list[float], rss: list[int] | None = None) -> History:
    """One rank's 10-s rollups of 50 steps each, the given mean step and input per step."""
    h = History(origin_ns=0)
    for i, (step, inp) in enumerate(zip(steps_ms, input_ms, strict=True)):
        n, total = 50, int(50 * step * 1e6)
        phases = tuple(int(total * inp / step) if p == "input" else int(total * (1 - inp / step)) if p == "forward"
                       else 0 for p in PHASES)
        mem = None if rss is None else Span3(rss[i], rss[i], rss[i])
        h.fold((i + 1) * 10 * S, {"0": Bucket(i * 10 * S, (i + 1) * 10 * S, n, n, total, phases, total, mem)},
               None, None)
    return h


def test_a_step_that_rises_halfway_with_its_input_and_memory():
    rng = random.Random(1)
    steps = [120 + rng.gauss(0, 3) for _ in range(15)] + [180 + rng.gauss(0, 3) for _ in range(15)]
    inputs = [60.0] * 15 + [118.0] * 15
    rss = [500 << 20] * 15 + [700 << 20] * 15
    (c,) = changes(history(steps, inputs, rss))
    assert c.at == 150.0                                     # the 15th rollup's end
    assert c.before == pytest.approx(120, abs=3) and c.after == pytest.approx(180, abs=3)
    assert c.phases["input"] == pytest.approx(58, abs=1)
    assert c.memory_bytes["rss"] == 200 << 20


def test_noise_and_a_single_odd_rollup_are_no_change():
    rng = random.Random(2)
    steps = [120 * (1 + rng.gauss(0, 0.03)) for _ in range(60)]
    steps[30] = 400.0   # one checkpoint-heavy rollup
    assert changes(history(steps, [60.0] * 60)) == ()


def test_two_changes_are_both_found():
    steps = [100.0] * 10 + [150.0] * 10 + [100.0] * 10
    assert splits(steps) == [10, 20]


@pytest.mark.parametrize("name", ["input_bound", "wait_heavy", "ddp_input_straggler"])
def test_a_steady_ten_minute_stream_has_no_change(name: str):
    # GIVEN a recorded job (6-8 s) looped into 10 minutes of 10-s rollups
    frames = read_frames(FIXTURES / f"{name}.msgpack")
    pipeline = Pipeline(load_rules())
    for frame in looped(frames, 600 // 6):
        pipeline.add(frame)
    pipeline.finish()
    report = pipeline.window_analysis().report
    assert report.session is not None and report.session.duration_s >= 590
    assert report.session.changes == ()


def slows() -> Path:
    path = FIXTURES / "input_slows.msgpack"
    if not path.exists():
        pytest.skip("record it: python tests/record_fixtures.py input_slows")
    return path


def test_input_that_slows_halfway_is_found_at_the_right_rollup():
    # GIVEN examples/input_bound.py, its decoding twice as slow from 45 s after ready on, attached for 100 s
    pipeline, problem = replay_file(slows(), load_rules())
    assert problem is None
    report = pipeline.window_analysis().report
    assert report.session is not None
    (c,) = report.session.changes
    # THEN the change is at the slowdown (its time from the job's own log of it), within two rollups
    origin = report.session.start
    assert 45 - 2 * 10 <= c.at - origin <= 45 + 2 * 10
    assert c.after > c.before * 1.2 and "input" in c.phases and c.phases["input"] > 0
    # ...and a replay (a second pipeline over the same file) finds the same
    again, _ = replay_file(slows(), load_rules())
    assert again.window_analysis().report.session.changes == report.session.changes
