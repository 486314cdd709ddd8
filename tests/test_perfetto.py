"""`traceml export --perfetto`: the recorded 2-rank torchrun stream as a Chrome JSON trace, its
structure, and each rank's phase slices against the summary's phase totals."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from traceml_attach.cli.main import main
from traceml_attach.diagnose.analysis import analyze, analyze_chunks
from traceml_attach.ingest.model import PID_BITS, NodeInfo
from traceml_attach.ingest.stream import read_recording
from traceml_attach.output.perfetto import PHASES_TID, STEPS_TID, TraceBuilder, perfetto_trace
from traceml_attach.output.summary import build_summary, to_json
from traceml_attach.steps.classify import load_rules
from traceml_attach.steps.phases import PHASES

FIXTURE = Path(__file__).parent / "fixtures" / "ddp_input_straggler.msgpack"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("export") / "trace.json"
    assert main(["export", str(FIXTURE), "--perfetto", str(out)]) == 0
    return json.loads(out.read_text())


def test_a_process_per_rank_with_a_steps_and_a_phases_track(exported):
    events = exported["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(names) == [0, 1] and all(n.startswith(f"rank {r} (pid ") for r, n in names.items())
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads == {(r, STEPS_TID): "steps" for r in (0, 1)} | {(r, PHASES_TID): "phases" for r in (0, 1)}
    slices = [e for e in events if e["ph"] == "X"]
    assert all(e["ts"] >= 0 and e["dur"] > 0 for e in slices)
    for rank in (0, 1):
        steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in slices if e["pid"] == rank and e["tid"] == STEPS_TID)
        phases = [e for e in slices if e["pid"] == rank and e["tid"] == PHASES_TID]
        assert len(steps) > 30 and len(phases) > len(steps)
        # every phase slice lies inside one of its rank's steps, and names its phase and frame
        for e in phases:
            assert any(lo - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= hi + 1e-3 for lo, hi in steps), e
            assert e["args"]["phase"] in PHASES and "frame" in e["args"]
            if e["args"]["phase"] == "wait":
                assert e["name"] == f"wait/{e['args'].get('label') or 'other'}"
    # the input straggler's slow code is on rank 1's input slices
    frames = {e["args"]["frame"] for e in slices if e["pid"] == 1 and e["args"].get("phase") == "input"}
    assert any("fetch_from_slow_store" in f or "sleep" in f or "burn" in f for f in frames), frames
    # counters, and the diagnosis as an instant event
    assert {e["name"] for e in events if e["ph"] == "C"} >= {"RSS (MiB)"}
    instants = [e for e in events if e["ph"] == "i"]
    assert instants and instants[-1]["name"] == "INPUT STRAGGLER" and instants[-1]["args"]["worst_rank"] == 1


def test_each_ranks_phase_slices_add_up_to_its_phase_totals_in_the_summary():
    # GIVEN the recording exported in one chunk, and the summary of the same window
    rec, problem = read_recording(FIXTURE)
    assert problem is None
    span_range = rec.time_range()
    assert span_range is not None
    lo, hi = span_range
    trace = perfetto_trace(rec, analyze_chunks(rec, load_rules(), lo, hi, (hi - lo) / 1e9 + 1), lo, hi)
    summary = to_json(build_summary(rec, analyze(rec, load_rules(), start_ns=lo, end_ns=hi), "ddp"))
    by_rank: dict[int, dict[str, float]] = defaultdict(lambda: dict.fromkeys(PHASES, 0.0))
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and e["tid"] == PHASES_TID:
            by_rank[e["pid"]][e["args"]["phase"]] += e["dur"]
    # THEN each phase's share of the slices is the summary's share of the step
    for rank, sums in by_rank.items():
        total = sum(sums.values())
        shares = summary["step_time"]["ranks"][str(rank)]["shares"]
        for phase in PHASES:
            assert sums[phase] / total == pytest.approx(shares[phase], abs=2e-3), (rank, phase)


def test_a_range_is_cut_and_bad_input_is_one_line(tmp_path, capsys):
    out = tmp_path / "cut.json"
    assert main(["export", str(FIXTURE), "--perfetto", str(out), "--from", "2", "--to", "5"]) == 0
    events = json.loads(out.read_text())["traceEvents"]
    steps = [e for e in events if e["ph"] == "X" and e["tid"] == STEPS_TID]
    assert steps and max(e["ts"] + e["dur"] for e in steps) <= 3.05e6   # 3 s of the recording
    capsys.readouterr()
    assert main(["export", str(FIXTURE), "--perfetto", str(out), "--from", "9", "--to", "5"]) == 2
    assert main(["export", str(tmp_path / "nothing.msgpack"), "--perfetto", str(out)]) == 7
    corrupt = tmp_path / "corrupt.msgpack"
    corrupt.write_bytes(b"\xc1\xc1 not msgpack")
    assert main(["export", str(corrupt), "--perfetto", str(out)]) == 7
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 3 and "Traceback" not in err


def test_a_remote_nodes_timestamps_are_moved_onto_the_collectors_clock():
    # node 1's clock is 5 s behind the collector's: its process keys are 1 << PID_BITS | pid
    rec, _ = read_recording(FIXTURE)
    rec.nodes[1] = NodeInfo(1, "node1", "a1", "alive", 0, "h1", 100, 5 * 10**9, (1,), None)
    trace = TraceBuilder(rec)
    assert trace.ts(1 << PID_BITS | 42, 10**9) == 6 * 10**9
    assert trace.ts(42, 10**9) == 10**9   # node 0: the collector's own
