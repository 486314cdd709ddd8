from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from traceml_attach.diagnose.memory import Limits, combine, diagnose_memory
from traceml_attach.policy import DEFAULT_MEMORY_POLICY, MIB

GIB = 1024 * MIB
FIXTURES = Path(__file__).parent / "fixtures"
# Real RSS (with DataLoader workers) of flat example jobs, one reading a second from their start
# (tests/fixtures/rss_flat.json: examples/input_bound.py --workers 2, compute_bound.py, ...): the
# swings a CPU allocator makes when nothing leaks
FLAT = json.loads((FIXTURES / "rss_flat.json").read_text())
OLD = Limits(started_ns=-10**12)   # a job that started long before the window


def series(start: int, step: int, n: int = 60, t0: int = 0) -> list[tuple[int, int]]:
    """One sample a second for ``n`` seconds, rising by ``step`` bytes a second."""
    return [(t0 + i * 10**9, start + i * step) for i in range(n)]


def noise(i: int, amplitude: int) -> int:
    """Deterministic jitter in [0, amplitude): allocator and page-cache noise."""
    return (i * 7919) % 97 * amplitude // 97


def judge(s: list[tuple[int, int]], limits: Limits = OLD, source: str = "host"):
    return diagnose_memory(source, {"0": s}, {"0": limits}).finding


def flat_windows(length_s: int, leak_per_s: float = 0.0):
    """Every window of ``length_s`` of each real flat series, past its job's 20-s warm-up, with a
    linear leak added from the window's start; judged as the job's own (its start at t=0)."""
    for name, points in FLAT.items():
        for start in range(20, len(points) - length_s, 2):
            part = points[start:start + length_s + 1]
            w = [(int(t * 1e9), int(v + leak_per_s * (t - part[0][0]))) for t, v in part]
            yield name, start, judge(w, Limits(started_ns=0))


@pytest.mark.parametrize("length_s", [10, 15, 30, 60, 120])
def test_a_flat_job_is_never_rising_or_creep_whatever_the_window(length_s):
    # GIVEN real flat jobs whose RSS swings by up to 15% (glibc growing and trimming its heap)
    for name, start, f in flat_windows(length_s):
        # THEN no window of any length reads a rise
        assert f.kind in ("BALANCED", "NO_DATA"), (name, start, f)


@pytest.mark.parametrize("length_s", [10, 15, 30, 60, 120])
def test_steady_is_said_only_where_the_change_is_within_its_noise(length_s):
    for name, start, f in flat_windows(length_s):
        points = FLAT[name][start:start + length_s + 1]
        t0, t1 = points[0][0], points[-1][0]
        head = [v for t, v in points if t < t0 + (t1 - t0) / 3]
        tail = [v for t, v in points if t >= t1 - (t1 - t0) / 3]
        change = abs(statistics.median(tail) - statistics.median(head))
        if "steady" in f.summary:
            # the claim, with its uncertainty and the slowest leak it could miss, and true of the readings
            assert "±" in f.summary and "would not show" in f.why, f
            assert change <= f.evidence["noise_bytes"] + MIB, (name, start, change, f)
        assert "nothing to do" not in f.action


def test_a_fast_leak_is_memory_rising_from_a_15_s_window_with_its_pace_and_the_time_left():
    # GIVEN the job: 718 MB -> 2.1 GB in 15 s, long past its warm-up, 20 GiB left on the host
    s = [(t, v + noise(i, 20 * MIB)) for i, (t, v) in enumerate(series(718 * MIB, 92 * MIB, n=16))]
    f = judge(s, Limits(None, 20 * GIB, started_ns=-600 * 10**9))
    assert f.kind == "MEMORY_RISING"
    assert f.evidence["bytes_per_s"] == pytest.approx(92 * MIB, rel=0.1)
    assert f.evidence["seconds_left"] == pytest.approx(20 * GIB / (92 * MIB), rel=0.1)
    assert "until its limit" in f.summary and "MiB/s" in f.summary
    assert f.severity == "critical"   # under 10 min at this pace


def test_rising_on_a_real_flat_series_plus_a_leak():
    # GIVEN the real flat series with 30 MiB/s added (a leak of outputs kept each step)
    kinds = {f.kind for _, _, f in flat_windows(15, leak_per_s=30 * MIB)}
    assert kinds == {"MEMORY_RISING"}


def test_a_job_in_its_warm_up_says_so_and_when_a_verdict_comes():
    # GIVEN a job that started 5 s before the first reading, read for 10 s
    f = judge(series(GIB, 0, n=10), Limits(started_ns=-5 * 10**9))
    assert f.kind == "WARMUP"
    assert "a memory verdict in about 12 s" in f.action   # its 20th second is 6 s after the last, then 6 s judged


def test_a_job_past_its_warm_up_is_judged_from_the_first_reading():
    # GIVEN the same 10 s of readings from a job started a minute earlier THEN judged at once
    f = judge(series(GIB, 0, n=10), Limits(started_ns=-60 * 10**9))
    assert (f.kind, f.severity) == ("BALANCED", "info")
    assert "steady" in f.summary and "±4 MiB" in f.summary


def test_without_a_start_time_the_warm_up_is_counted_from_the_session():
    # older recordings carry no process start time: the first 20 s of sampling are the warm-up
    f = diagnose_memory("host", {"0": series(GIB, 0, n=15)}, {}).finding
    assert f.kind == "WARMUP"


def test_a_short_window_that_moves_less_than_a_swing_is_not_judged_yet():
    # a 15-s window that rises 60 MiB on 450 MiB: a heap growing, or the start of a leak
    s = series(450 * MIB, 4 * MIB, n=15)
    f = judge(s)
    assert f.kind == "NO_DATA"
    assert "steady" not in f.summary and "nothing to do" not in f.action
    assert "a memory verdict in about" in f.action


def test_a_slow_leak_is_creep_once_a_long_window_shows_it():
    # GIVEN 6 MiB/min on 400 MiB with 8 MiB of jitter, over a 5-minute attach
    leak = [(t, v + noise(i, 8 * MIB)) for i, (t, v) in enumerate(series(400 * MIB, 6 * MIB // 60, n=300))]
    # 15 s: 1.5 MiB under 8 MiB of jitter: steady as far as 15 s tell, which is said with what they cannot
    early = judge(leak[:15])
    assert "steady" in early.summary and early.evidence["detectable_bytes_per_s"] > 6 * MIB / 60
    # 2 minutes: +12 MiB, 3% of its level: a steady rise, said as such, short of what reads as creep
    two = judge(leak[:120])
    assert two.kind == "BALANCED" and "rose slightly" in two.summary
    assert judge(leak[:240]).kind == "MEMORY_CREEP"       # +24 MiB (6%), steady for over 120 s


def test_a_rise_that_levels_off_is_not_creep():
    # a cache filling up: fast at first, slower and slower (time constant 10 s, 400 MiB in all)
    filling = [(i * 10**9, GIB + int(400 * MIB * (1 - math.exp(-i / 10)))) for i in range(120)]
    f = judge(filling[30:])
    assert f.kind == "BALANCED"


def test_a_one_off_jump_is_no_creep_and_says_when():
    # GIVEN steady at 800 MiB, +300 MiB at second 40 (an eval set built once), steady after
    s = [(i * 10**9, 800 * MIB + (300 * MIB if i >= 40 else 0) + noise(i, 6 * MIB)) for i in range(90)]
    for n in (15, 30, 50, 90):
        f = judge(s[max(n - 60, 0):n])
        assert f.kind in ("BALANCED", "NO_DATA"), (n, f)
        assert "steady" not in f.summary or n < 40
    f = judge(s)
    assert "one rise of +300 MiB" in f.summary
    assert abs(f.evidence["jump_at_ns"] - 40 * 10**9) <= 10**9


def test_a_fall_is_said_as_a_fall():
    s = series(2 * GIB, -8 * MIB, n=60)
    f = judge(s)
    assert f.kind == "BALANCED" and "fell by" in f.summary


def test_creep_must_rise_on_the_median_rank_too():
    flat = series(GIB, 0)
    rising = series(GIB, 10 * MIB)
    f = diagnose_memory("host", {"0": flat, "1": rising, "2": flat}, {r: OLD for r in "012"}).finding
    assert (f.kind, f.worst_rank) == ("BALANCED", 1)
    assert "rising on rank 1 only" in f.summary and "steady" not in f.summary
    f = diagnose_memory("host", {"0": rising, "1": rising, "2": flat}, {r: OLD for r in "012"}).finding
    assert (f.kind, f.worst_rank) in (("MEMORY_CREEP_EARLY", 0), ("MEMORY_CREEP_EARLY", 1))


def test_a_sawtooth_is_not_creep():
    saw = [(i * 10**9, GIB + (i % 10) * 40 * MIB) for i in range(120)]
    assert judge(saw).kind == "BALANCED"


@pytest.mark.parametrize(
    ("used", "kind", "severity"),
    [(0.95, "HIGH_PRESSURE", "warning"), (0.98, "HIGH_PRESSURE", "critical"), (0.5, "BALANCED", "info")],
)
def test_gpu_pressure(used, kind, severity):
    s = series(int(used * 80 * GIB), 0)
    f = judge(s, Limits(80 * GIB, None, -10**12), source="gpu")
    assert (f.kind, f.severity) == (kind, severity)
    if kind == "HIGH_PRESSURE":
        assert "NVML" in f.why


def test_a_cgroup_limit_is_the_host_memory_capacity():
    # GIVEN a containerized CPU job at 7.6 of its cgroup's 8 GiB
    f = judge(series(int(7.6 * GIB), 0), Limits(8 * GIB, None, -10**12))
    assert (f.kind, f.severity) == ("HIGH_PRESSURE", "warning")
    # AND rising against it: the time left is counted to the limit, not to the host's RAM
    f = judge(series(4 * GIB, 50 * MIB, n=15), Limits(8 * GIB, 100 * GIB, -10**12))
    assert f.kind == "MEMORY_RISING"
    assert f.evidence["headroom_bytes"] == 8 * GIB - (4 * GIB + 14 * 50 * MIB)


def test_gpu_imbalance_needs_pressure_too():
    caps = {r: Limits(80 * GIB, None, -10**12) for r in "012"}
    f = diagnose_memory("gpu", {"0": series(30 * GIB, 0), "1": series(40 * GIB, 0), "2": series(30 * GIB, 0)},
                        caps).finding
    assert (f.kind, f.worst_rank) == ("IMBALANCE", 1)
    f = diagnose_memory("gpu", {"0": series(3 * GIB, 0), "1": series(4 * GIB, 0), "2": series(3 * GIB, 0)},
                        caps).finding
    assert f.kind == "BALANCED"


def test_too_few_samples_is_no_data_with_when():
    f = judge(series(GIB, 0, n=3))
    assert f.kind == "NO_DATA"
    assert "verdict in about" in f.action


def test_a_cpu_job_is_judged_on_its_host_memory_and_says_there_is_no_gpu():
    host = diagnose_memory("host", {"0": series(GIB, 0)}, {"0": OLD})
    f = combine(None, host)
    assert f.kind == "BALANCED"          # the host verdict itself, not "NO GPU"
    assert f.why.startswith("no GPU in use")
    rising = diagnose_memory("host", {"0": series(GIB, 60 * MIB, n=15)}, {"0": OLD})
    assert combine(None, rising).kind == "MEMORY_RISING"


def test_policy_floors_are_what_the_messages_say():
    # the numbers in the texts come from the policy, not from copies
    f = judge(series(450 * MIB, 4 * MIB, n=15))
    floor = DEFAULT_MEMORY_POLICY.rising_min_bytes
    assert f"the {floor / MIB:.0f} MiB a 14-s window needs" in f.why


RECORDINGS = sorted(p.stem for p in FIXTURES.glob("*.msgpack"))


@pytest.mark.parametrize("name", RECORDINGS)
def test_no_recorded_stream_claims_a_steady_memory_outside_its_noise(name: str):
    # GIVEN every real stream the project has recorded, replayed as a session (the live views'
    # memory trends start from the session's rollups, as here)
    from traceml_attach.runtime.pipeline import replay_file
    from traceml_attach.steps.classify import load_rules

    pipeline, _ = replay_file(FIXTURES / f"{name}.msgpack", load_rules())
    memory = pipeline.window_analysis().report.step_memory
    d = memory.diagnosis
    # THEN no memory verdict says "nothing to do", and "steady" only where every rank's change over
    # what was judged is inside the uncertainty it states
    assert "nothing to do" not in d.action
    if "steady" in d.summary:
        for r in memory.shown.ranks.values():
            assert r.state == "flat", (name, r)
            assert r.growth_bytes is not None and r.noise_bytes is not None
            assert abs(r.growth_bytes) <= r.noise_bytes, (name, r)
    for r in memory.shown.ranks.values():
        if r.state == "flat":
            assert abs(r.growth_bytes or 0) <= (r.noise_bytes or 0), (name, r)


def replayed(name: str):
    from traceml_attach.output.summary import build_summary
    from traceml_attach.runtime.pipeline import replay_file
    from traceml_attach.steps.classify import load_rules

    pipeline, problem = replay_file(FIXTURES / f"{name}.msgpack", load_rules())
    assert problem is None
    return build_summary(pipeline.rec, pipeline.window_analysis(), name)


def truth_pace(name: str, start_ns: int, end_ns: int) -> float:
    """The least-squares slope of the job's own RSS (read in-process each step) over a window."""
    rows = [json.loads(line) for line in (FIXTURES / f"{name}.truth.jsonl").read_text().splitlines()]
    points = [(r["end"], r["rss"]) for r in rows if start_ns / 1e9 <= r["end"] <= end_ns / 1e9]
    t0, v0 = statistics.fmean(t for t, _ in points), statistics.fmean(v for _, v in points)
    return sum((t - t0) * (v - v0) for t, v in points) / sum((t - t0) ** 2 for t, _ in points)


def test_the_recorded_classic_leak_is_rising_with_its_pace_and_its_line_in_every_view():
    # GIVEN examples/leaks.py --shape loss (`total_loss += loss` with the graph retained), recorded
    # for 15 s past its warm-up with its own RSS beside it
    from traceml_attach.output.html import html_report
    from traceml_attach.output.render import render_text
    from traceml_attach.tui.present import Selection, present_memory

    summary = replayed("mem_loss")
    memory = summary.report.step_memory
    d = memory.diagnosis
    assert d.kind == "MEMORY_RISING"
    ev = d.evidence
    window = summary.report.sampling.window
    true = truth_pace("mem_loss", int(window.start * 1e9), int(window.end * 1e9))
    assert abs(ev.bytes_per_s / true - 1) <= 0.2, (ev.bytes_per_s, true)
    assert ev.bytes_per_step is not None and ev.seconds_left > 0
    [line] = ev.leak.lines
    assert (line.text, line.holder, line.tensor) == ("total_loss += loss", "total_loss", "loss")
    # THEN the text, the TUI's memory panel and the HTML report all say where to look
    assert "total_loss += loss" in render_text(summary)
    assert any("total_loss += loss" in lead for lead in present_memory(summary, Selection()).leads)
    assert "total_loss += loss" in html_report(summary, None)


def test_a_slow_leak_is_steady_as_far_as_15_s_tell_and_creep_over_a_5_minute_attach():
    # GIVEN examples/leaks.py --shape slow (a log of Python floats that grows a step: a few MB a
    # minute), attached for 5 minutes at 20 Hz past its warm-up, its own RSS beside it
    from traceml_attach.diagnose.analysis import analyze
    from traceml_attach.ingest.stream import read_recording
    from traceml_attach.steps.classify import load_rules

    rec, _ = read_recording(FIXTURES / "mem_slow_5min.msgpack")
    first, last = rec.time_range()
    # WHEN its first 15 s are judged THEN no rise is claimed, and what 15 s cannot see is said
    early = analyze(rec, load_rules(), end_ns=first + 15 * 10**9).report.step_memory.diagnosis
    assert early.kind in ("BALANCED", "NO_DATA"), early
    if "steady" in early.summary:
        assert early.evidence.noise_bytes is not None and "would not show" in early.why
    # WHEN the whole attach is judged THEN MEMORY CREEP, at the job's own pace, with the line that grows
    d = analyze(rec, load_rules()).report.step_memory.diagnosis
    assert d.kind == "MEMORY_CREEP", d
    true = truth_pace("mem_slow_5min", first, last)
    assert 1 * MIB / 60 < true < 20 * MIB / 60                # a few MB a minute, in truth
    assert abs(d.evidence.bytes_per_s / true - 1) <= 0.25, (d.evidence.bytes_per_s, true)
    line = d.evidence.leak.lines[0]
    assert (line.kind, line.holder) == ("value", "log") and line.text.startswith("log.append(")


def test_a_flat_series_has_no_one_off_rise_of_nothing():
    # readings that step up by one page halfway: no one-off rise, steady
    s = [(i * 10**9, 1366 * MIB + (4096 if i > 7 else 0)) for i in range(15)]
    f = judge(s)
    assert "steady" in f.summary and "one rise" not in f.summary


def test_a_one_off_rise_filled_over_a_reading_or_two_is_still_one_step():
    # +300 MiB built over two readings (a large tensor filled while the sampler reads)
    levels = [326] * 8 + [400, 500] + [626] * 5
    f = judge([(i * 10**9, v * MIB) for i, v in enumerate(levels)])
    assert "one rise of +" in f.summary, f


def test_a_one_off_rise_filled_over_a_few_seconds_is_not_a_rise_under_way():
    # +300 MiB filled over 5 readings in the middle of a 15-s window, flat before and after: an
    # allocation under load, not a leak; short of a step and of a rise, it is not judged yet
    levels = [326] * 5 + [386, 446, 506, 566, 626] + [626] * 5
    f = judge([(i * 10**9, v * MIB) for i, v in enumerate(levels)])
    assert f.kind in ("BALANCED", "NO_DATA") and "rising" not in f.summary, f


def test_ranks_alike_name_the_same_rank_whatever_order_they_came_in():
    # GIVEN two ranks both short of a verdict, given in rank order (a replay) and by arrival (a
    # live collector, the second node's rank first)
    young = {r: Limits(started_ns=-12 * 10**9) for r in "01"}
    short = {r: series(GIB, 0, n=8) for r in "01"}
    replayed = diagnose_memory("host", short, young).finding
    live = diagnose_memory("host", dict(reversed(list(short.items()))), young).finding
    # THEN both name the same rank, the lowest (the live summary and its replay agree)
    assert replayed.kind == live.kind and replayed.worst_rank == live.worst_rank == 0
    assert replayed.summary == live.summary and replayed.evidence == live.evidence
