"""The real py-spy attached to the real example training jobs, checked against ground truth."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from launch import PHASES, read_truth
from tests.conftest import traceml

pytestmark = pytest.mark.e2e

EXPECTED = {
    "input_bound": "INPUT_BOUND",
    "compute_bound": "COMPUTE_BOUND",
    "wait_heavy": "WAIT_HEAVY",
    "balanced": "BALANCED",
}
SHARE_TOLERANCE = 0.05   # phase shares within 5 percentage points of ground truth
STEP_TOLERANCE = 0.10    # median step time within 10%


@pytest.mark.parametrize("name", list(EXPECTED))
def test_snapshot_diagnoses_each_example(name: str, example, tmp_path: Path):
    # GIVEN an unmodified-style training job that records its own phase times
    job = example(name)
    time.sleep(2)
    # WHEN traceml samples it from outside for 10 s
    out = traceml("snapshot", "--pid", str(job.pid), "--seconds", "10", "--quiet",
                  "--logs-dir", str(tmp_path / "logs"), "--run-name", name)
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "logs" / name / "final_summary.json").read_text())
    # THEN the diagnosis is right and the numbers match the job's own
    assert summary["step_time"]["diagnosis"]["kind"] == EXPECTED[name], out.stdout
    assert summary["primary_diagnosis"]["kind"] == EXPECTED[name]
    window = summary["sampling"]["window"]
    truth = read_truth(tmp_path / f"{name}.jsonl", window["start"], window["end"])
    rank = summary["step_time"]["ranks"]["0"]
    assert rank["steps"] >= 20
    for phase in PHASES:
        assert abs(rank["shares"][phase] - truth.shares[phase]) <= SHARE_TOLERANCE, (phase, rank["shares"], truth)
    assert abs(rank["step_ms"] - truth.step_ms) <= STEP_TOLERANCE * truth.step_ms
    assert sum(rank["shares"].values()) == pytest.approx(1.0, abs=1e-3)
    assert f"[{summary['primary_diagnosis']['status']}]" in out.stdout
    # the text file is the same summary the command printed, and `view` prints it again
    assert (tmp_path / "logs" / name / "final_summary.txt").read_text() == out.stdout
    assert traceml("view", str(tmp_path / "logs" / name / "final_summary.json")).stdout == out.stdout


def test_hot_frames_name_the_slow_code(example, tmp_path: Path):
    job = example("input_bound")
    out = traceml("snapshot", "--pid", str(job.pid), "--seconds", "5", "--quiet",
                  "--logs-dir", str(tmp_path), "--run-name", "hot")
    assert out.returncode == 0, out.stderr
    hot = json.loads((tmp_path / "hot" / "final_summary.json").read_text())["hot_frames"]["0"]
    top_input = hot["input"][0]
    assert "decode_sample" in top_input["frame"] or "burn_cpu" in top_input["frame"]
    assert top_input["share"] > 0.5


def test_leaking_cpu_job_is_diagnosed_as_creeping_within_15_s(example, tmp_path: Path):
    job = example("memory_creep")
    started = time.monotonic()
    out = traceml("snapshot", "--pid", str(job.pid), "--seconds", "12", "--quiet",
                  "--logs-dir", str(tmp_path), "--run-name", "creep")
    assert time.monotonic() - started < 15
    assert out.returncode == 0, out.stderr
    memory = json.loads((tmp_path / "creep" / "final_summary.json").read_text())["step_memory"]
    assert memory["diagnosis"]["kind"] in ("MEMORY_CREEP", "MEMORY_CREEP_EARLY"), out.stdout
    assert memory["host"]["ranks"]["0"]["delta_bytes"] > 64 * 2**20
    assert "Step Memory  [MEMORY CREEP" in out.stdout


def test_steady_job_is_not_creeping(example, tmp_path: Path):
    job = example("compute_bound")
    out = traceml("snapshot", "--pid", str(job.pid), "--seconds", "8", "--quiet",
                  "--logs-dir", str(tmp_path), "--run-name", "steady")
    memory = json.loads((tmp_path / "steady" / "final_summary.json").read_text())["step_memory"]
    assert memory["diagnosis"]["kind"] == "NO_GPU", out.stdout
