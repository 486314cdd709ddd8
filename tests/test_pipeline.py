"""The pipeline: a bounded recording and a rollup history that add up to the whole session."""

from __future__ import annotations

import itertools
from pathlib import Path

import msgpack
import pytest

import traceml_attach.runtime.pipeline as pipeline_module
from testkit.streams import looped, read_frames
from tests.test_tracker import differences
from traceml_attach.diagnose.analysis import analyze
from traceml_attach.diagnose.history import MAX_BUCKETS, Bucket, History, Span3
from traceml_attach.ingest.stream import Recording
from traceml_attach.runtime.pipeline import TRACK_S, Pipeline, replay_file
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


def test_a_replay_with_shorter_rollups_and_progress(tmp_path: Path, monkeypatch):
    frames = list(looped(read_frames(FIXTURE), 30))   # 4 min of data, over 2,000 frames
    path = tmp_path / "frames.msgpack"
    path.write_bytes(b"".join(msgpack.packb(f) for f in frames))
    monkeypatch.setattr(pipeline_module, "PROGRESS_S", 0.0)   # every 1,000th frame says how far it got
    heard: list[float] = []
    fine, _ = replay_file(path, load_rules(), rollup_s=2.0, progress=heard.append)
    coarse, _ = replay_file(path, load_rules())
    assert heard == sorted(heard) and len(heard) == len(frames) // 1000 and heard[-1] > 0
    for rank, history in coarse.history.ranks.items():
        buckets = fine.history.ranks[rank].buckets
        assert all(b.end_ns - b.start_ns == 2 * 10**9 for b in buckets[:-1])
        assert len(buckets) >= 4 * len(history.buckets) - 4
        assert sum(b.steps for b in buckets) == history.steps   # the same steps, in finer rollups


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


def test_a_live_view_shows_the_tracked_window_and_changes_nothing_it_records():
    # GIVEN the same frames through two pipelines, one concluded by a live view after every frame
    frames = list(looped(read_frames(FIXTURE), 6))
    quiet, watched = Pipeline(load_rules()), Pipeline(load_rules())
    tracked_ends: list[int] = []
    for frame in frames:
        quiet.add(frame)
        watched.add(frame)
        view = watched.live_analysis()
        if watched.tracked is None or watched.tracked.end_ns in tracked_ends:
            continue
        # THEN each view is the batch analysis of the window just tracked (within the
        # tracker's tolerances; spans that arrive later may still change that window)
        tracked_ends.append(watched.tracked.end_ns)
        assert (view.start_ns, view.end_ns) == (watched.tracked.start_ns, watched.tracked.end_ns)
        batch = analyze(watched.rec, load_rules(), start_ns=view.start_ns, end_ns=view.end_ns)
        assert not differences(view, batch), differences(view, batch)
    assert view.report.step_time.diagnosis.kind == "INPUT_STRAGGLER"
    # AND the trackers advanced at most once a second of data (as py-spy's windows bring it),
    # not once a view, nor once a rollup only
    seconds = (tracked_ends[-1] - tracked_ends[0]) / 1e9
    assert seconds > 30 and seconds / 3 <= len(tracked_ends) <= seconds / TRACK_S + 1
    assert len(frames) > 10 * len(tracked_ends)
    # AND what the pipelines record is the same: the history, and the summary's window
    quiet.finish()
    watched.finish()
    assert watched.history == quiet.history and watched.history.ranks
    assert watched.window_analysis().report == quiet.window_analysis().report


def test_more_ranks_are_tracked_less_often(monkeypatch):
    # GIVEN a 2-rank job, with one rank counted as a block of ranks of its own
    monkeypatch.setattr(pipeline_module, "TRACK_RANKS", 1)
    pipeline, ends = Pipeline(load_rules()), []
    for frame in looped(read_frames(FIXTURE), 4):
        pipeline.add(frame)
        if pipeline.tracked is not None and pipeline.tracked.end_ns not in ends:
            ends.append(pipeline.tracked.end_ns)
    # THEN its trackers advance every 2 s of data at the most, but for a rollup that closes
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(ends)]
    assert len(gaps) > 5 and sum(g < 2 * TRACK_S for g in gaps) <= len(pipeline.history.ranks["0"].buckets) + 1


def test_a_live_view_without_new_spans_still_sees_a_rank_exit():
    # GIVEN a job tracked up to its last spans, and a live view of it
    frames = list(looped(read_frames(FIXTURE), 2))
    pipeline = Pipeline(load_rules())
    for frame in frames:
        pipeline.add(frame)
    before = pipeline.live_analysis()
    assert pipeline.tracked is not None and before is pipeline.live_analysis()   # nothing new: the same view
    pid = pipeline.tracked.pids["1"]
    assert before.report.ranks[1].status == "alive"
    # WHEN rank 1 exits and no span comes after it, only telemetry moving the data clock on
    last = max(f["t"] for f in frames if isinstance(f, dict) and isinstance(f.get("t"), int))
    pipeline.add({"k": "exit", "t": last + 1, "pid": pid, "status": 3})
    assert pipeline.live_analysis() is before
    pipeline.add({"k": "host", "t": last + int(2.5 * TRACK_S * 1e9), "cpu": 10.0, "mem_used": 1, "mem_total": 2})
    # THEN the view is concluded again, though the trackers did not advance
    after = pipeline.live_analysis()
    assert after is not before and after.report.ranks[1].status == "exited"
