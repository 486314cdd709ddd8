"""The pipeline: a bounded recording and a rollup history that add up to the whole session."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest

from tests.streams import looped, read_frames
from traceml_attach.diagnose.analysis import analyze
from traceml_attach.ingest.history import MAX_BUCKETS, Bucket, History, Span3
from traceml_attach.ingest.stream import Recording
from traceml_attach.runtime.pipeline import Pipeline, replay_file
from traceml_attach.steps.classify import load_rules
from traceml_attach.steps.phases import PHASES

FIXTURE = Path(__file__).parent / "fixtures" / "ddp_input_straggler.msgpack"


def run(copies: int) -> tuple[Pipeline, Recording, int]:
    """The fixture looped ``copies`` times through a pipeline and into an unbounded recording;
    also the most spans the pipeline held for one process at any time."""
    pipeline, full, held = Pipeline(load_rules()), Recording(), 0
    for frame in looped(read_frames(FIXTURE), copies):
        pipeline.add(frame)
        full.add(frame)
        held = max(held, *(len(v) for v in pipeline.rec.spans.values()), 0)
    pipeline.finish()
    return pipeline, full, held


@pytest.fixture(scope="module")
def long_run() -> tuple[Pipeline, Recording, int]:
    return run(24)   # about 3 min of a 2-rank job


def test_history_adds_up_to_the_whole_session(long_run):
    pipeline, full, _ = long_run
    whole = analyze(full, load_rules())
    for stats in whole.ranks:
        history = pipeline.history.ranks[stats.rank]
        assert abs(history.steps - stats.steps) <= max(2, 0.01 * stats.steps)
        shares = history.shares()
        assert shares is not None and stats.shares is not None
        for phase in PHASES:
            assert abs(shares[phase] - stats.shares[phase]) < 0.01, phase
        mean = history.step_ms()
        assert mean is not None and stats.step_ms is not None
        assert abs(mean - stats.step_ms) / stats.step_ms < 0.03


def test_raw_data_held_does_not_grow_with_the_session(long_run):
    _, full, held_long = long_run
    _, _, held_short = run(8)
    assert held_long <= 1.1 * held_short
    assert held_long < 0.5 * max(len(v) for v in full.spans.values())


def test_history_keeps_bounded_buckets_with_exact_totals():
    history = History(origin_ns=0)
    second = 1_000_000_000
    n = 3 * MAX_BUCKETS + 7
    for k in range(n):
        end = (k + 1) * 10 * second
        bucket = Bucket(end - 10 * second, end, 5, 5, 5 * 100_000_000, tuple(10 for _ in PHASES), 60,
                        Span3(k, k + 1, k + 2), None, 50.0, None)
        history.fold(end, {"0": bucket}, 20.0, 100 + k)
    rank = history.ranks["0"]
    assert len(rank.buckets) <= MAX_BUCKETS
    assert rank.steps == 5 * n
    assert rank.step_ms() == pytest.approx(100.0)
    series = rank.series("rss")
    assert [t for t, _ in series] == sorted(t for t, _ in series)
    assert series[-1] == (n * 10 * second, n)       # the newest tail survives every merge
    assert rank.peak("rss") == n + 1
    assert rank.buckets[0].rss is not None and rank.buckets[0].rss.head == 0
    assert history.host_mem_peak == 100 + n - 1
    assert len(history.host_cpu) <= MAX_BUCKETS


def test_replaying_a_file_gives_the_pipeline_of_the_live_frames(tmp_path: Path):
    frames = list(looped(read_frames(FIXTURE), 6))
    path = tmp_path / "frames.msgpack"
    path.write_bytes(b"".join(msgpack.packb(f) for f in frames))
    live = Pipeline(load_rules())
    for frame in frames:
        live.add(frame)
    live.finish()
    replayed, problem = replay_file(path, load_rules())
    assert problem is None
    assert replayed.history == live.history
    assert replayed.window_analysis().findings == live.window_analysis().findings


def test_the_report_covers_the_whole_session_and_memory_reaches_back(long_run):
    pipeline, _, _ = long_run
    an = pipeline.window_analysis()
    session = an.report.session
    assert session is not None and session.duration_s > 150
    for rank, history in pipeline.history.ranks.items():
        row = session.ranks[int(rank)]
        assert row.steps == history.steps and row.step_ms_mean is not None
        # the memory trend: one point per rollup before the window, then the window's samples
        series = an.memory_series[rank]
        assert series[0][0] - pipeline.history.origin_ns < 15e9
        window = [t for t, _ in series if an.start_ns is not None and t >= an.start_ns]
        assert len(window) >= 20 and len(series) > len(window)
