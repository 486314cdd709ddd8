"""`traceml compare` on real runs: two windows of one unchanged job are no change, and a job
whose input was made cheaper is faster, in its input phase."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from launch import stop_example
from tests.conftest import traceml

pytestmark = [pytest.mark.e2e, pytest.mark.quiet]


def snapshot(pid: int, tmp_path: Path, name: str) -> Path:
    # at 200 Hz: at 100 Hz this job's short optimizer was seen in 4 or 5 of the ~45 steps of a 6-s
    # window, and its gaps were all even by chance about one window in eight (9:1 for gradient
    # accumulation of 2), which leaves the step time unknown and nothing to compare (2 of 5 runs)
    out = traceml("snapshot", "--pid", str(pid), "--seconds", "6", "--rate", "200", "--quiet",
                  "--logs-dir", str(tmp_path), "--run-name", name)
    assert out.returncode == 0, out.stderr
    return tmp_path / name


def test_compare_tells_a_faster_run_and_calls_two_windows_of_one_job_no_change(example, tmp_path: Path):
    # GIVEN an input-bound job sampled in two windows one after the other
    slow = example("input_bound", "--input-share", "0.6")
    time.sleep(2)
    first, second = snapshot(slow.pid, tmp_path, "first"), snapshot(slow.pid, tmp_path, "second")
    stop_example(slow)
    # AND the same job with its input made cheaper
    fast = example("input_bound", "--input-share", "0.2")
    time.sleep(2)
    cheaper = snapshot(fast.pid, tmp_path, "cheaper")
    # THEN the two windows of the one job are no change, and pass a strict gate
    same = traceml("compare", str(first), str(second), "--json", "--fail-on-regression", "0")
    assert same.returncode == 0, same.stdout + same.stderr
    doc = json.loads(same.stdout)
    assert doc["step"]["verdict"] == "no change", doc["step"]
    assert not doc["diagnosis"]["changed"] and doc["step"]["noise"][0]["steps"] >= 10
    # AND the cheaper input is faster, in its input phase, and gates the other way round
    faster = traceml("compare", str(first), str(cheaper), "--json")
    doc = json.loads(faster.stdout)
    assert doc["step"]["verdict"] == "faster" and doc["phases"]["input"]["verdict"] == "faster", doc
    assert doc["phases"]["forward"]["verdict"] == "no change", doc["phases"]
    gate = traceml("compare", str(cheaper), str(first), "--fail-on-regression", "10")
    assert gate.returncode == 9, gate.stdout + gate.stderr
    assert "slower" in gate.stdout and "beyond the noise" in gate.stderr
