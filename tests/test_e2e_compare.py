"""`traceml compare` on real runs: two windows of one unchanged job are no change, and a job
whose input was made cheaper is faster, in its input phase."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from launch import Truth, read_truth, stop_example
from tests.conftest import honestly_unknown, traceml

pytestmark = [pytest.mark.e2e, pytest.mark.quiet]


def snapshot(pid: int, tmp_path: Path, name: str) -> Path:
    # at 200 Hz: at 100 Hz this job's short optimizer was seen in 4 or 5 of the ~45 steps of a 6-s
    # window, and its gaps were all even by chance about one window in eight (9:1 for gradient
    # accumulation of 2), which leaves the step time unknown and nothing to compare (2 of 5 runs)
    out = traceml("snapshot", "--pid", str(pid), "--seconds", "6", "--rate", "200", "--quiet",
                  "--logs-dir", str(tmp_path), "--run-name", name)
    assert out.returncode == 0, out.stderr
    return tmp_path / name


def run_truth(run: Path, truth: Path) -> Truth:
    """The job's own steps over the run's window (its in-process ground truth)."""
    window = json.loads((run / "final_summary.json").read_text())["sampling"]["window"]
    return read_truth(truth, window["start"], window["end"])


def honest(run: Path, truth: Truth) -> bool:
    """The run's step time is unknown, and honestly so: the job's own steps varied (conftest)."""
    return honestly_unknown(json.loads((run / "final_summary.json").read_text()), 0, truth)


def _forward_ms(truth: Truth) -> float:
    """The job's own forward per step: its share of the steps' mean."""
    return truth.shares["forward"] * truth.mean_ms


def test_compare_tells_a_faster_run_and_calls_two_windows_of_one_job_no_change(example, tmp_path: Path):
    # GIVEN an input-bound job sampled in two windows one after the other
    slow = example("input_bound", "--input-share", "0.6")
    time.sleep(2)
    first, second = snapshot(slow.pid, tmp_path, "first"), snapshot(slow.pid, tmp_path, "second")
    stop_example(slow)
    truths = [run_truth(run, tmp_path / "input_bound.jsonl") for run in (first, second)]
    truth = [t.step_ms for t in truths]
    # AND the same job with its input made cheaper
    fast = example("input_bound", "--input-share", "0.2")
    time.sleep(2)
    cheaper = snapshot(fast.pid, tmp_path, "cheaper")
    cheaper_truth = run_truth(cheaper, tmp_path / "input_bound.jsonl")
    # a run whose own steps varied too much for a typical step has none to compare: compare says
    # unknown, and never guesses (on a loaded machine; the rest of the test needs the steps)
    unknown = [honest(run, t) for run, t in ((first, truths[0]), (second, truths[1]), (cheaper, cheaper_truth))]
    if any(unknown):
        pair = (first, second) if unknown[0] or unknown[1] else (first, cheaper)
        doc = json.loads(traceml("compare", *map(str, pair), "--json").stdout)
        assert doc["step"]["verdict"] == "unknown", doc["step"]
        return
    # THEN the two windows of the one job are no change, and pass a strict gate, unless the job's
    # own steps moved between them by more than half the band (a 2-core machine's other load
    # slows the job itself: then compare's step change is the job's, in ms, and so is its sign)
    same = traceml("compare", str(first), str(second), "--json", "--fail-on-regression", "0")
    doc = json.loads(same.stdout)
    step = doc["step"]
    if step["band_ms"] is None:
        # a window whose summary gives no median step for a reason ``honest`` does not take (stop 75's
        # suite, under load; the window said why): compare has no step to judge, and says unknown, never
        # a guess. (That window's step time itself is the step tests' business, not compare's.)
        assert step["verdict"] == "unknown" and None in (step["old_ms"], step["new_ms"]), step
        return
    assert not doc["diagnosis"]["changed"] and step["noise"][0]["steps"] >= 10
    moved = truth[1] - truth[0]
    if abs(moved) <= step["band_ms"] / 2:
        assert step["verdict"] == "no change", (truth, step)
        assert same.returncode == 0, same.stdout + same.stderr
    else:
        assert abs(step["delta_ms"] - moved) <= step["band_ms"], (truth, step)
        assert step["verdict"] in ("no change", "slower" if moved > 0 else "faster"), (truth, step)
    # AND the cheaper input is faster, in its input phase, and gates the other way round
    faster = traceml("compare", str(first), str(cheaper), "--json")
    doc = json.loads(faster.stdout)
    assert doc["step"]["verdict"] == "faster" and doc["phases"]["input"]["verdict"] == "faster", doc
    # and its forward, the same work in both jobs, is no change unless the job's own forward moved by
    # more than half the band (each job sizes its work at start-up, on a machine whose load moves:
    # CI's stop-59 run, forward "faster"); then it moved the way the job's own did
    forward = doc["phases"]["forward"]
    moved = _forward_ms(cheaper_truth) - _forward_ms(truths[0])
    if abs(moved) <= doc["step"]["band_ms"] / 2:
        assert forward["verdict"] == "no change", (moved, doc["phases"])
    else:
        assert forward["verdict"] in ("no change", "slower" if moved > 0 else "faster"), (moved, doc["phases"])
    gate = traceml("compare", str(cheaper), str(first), "--fail-on-regression", "10")
    assert gate.returncode == 9, gate.stdout + gate.stderr
    assert "slower" in gate.stdout and "beyond the noise" in gate.stderr
