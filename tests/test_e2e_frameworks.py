"""The real py-spy attached to real framework training jobs (HF Trainer, Lightning, Accelerate,
DeepSpeed, a plain loop with gradient accumulation), each timing itself with the framework's own
callbacks or hooks (examples/*.py, TRACEML_GROUND_TRUTH): the loop is found, the framework named,
and the diagnosis, step time and shares match the job's own."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launch import PHASES, rank_truth, read_truth, start_example, stop_example
from tests.conftest import honestly_unknown, steps_from, traceml

pytestmark = [pytest.mark.e2e, pytest.mark.timing]
SHARE_TOLERANCE = 0.05   # phase shares within 5 percentage points of the framework's own timing
STEP_TOLERANCE = 0.10    # median (optimizer) step within 10%


def needs(module: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed")


# job -> (example, its arguments, expected diagnosis, framework named, micro-batches per step)
JOBS = {
    # input 2% of the step: at the example's default 5%, sized at start-up, a loaded machine left the
    # job's own compute at 90% of its steps, on the line between COMPUTE-BOUND and BALANCED (stop 60)
    "hf_trainer": ("hf_trainer", ("--input-share", "0.02"), "COMPUTE_BOUND", "HF Trainer (transformers 5.x)", 1),
    "lightning_input": ("lightning_job", (), "INPUT_BOUND", "Lightning", 1),
    "accelerate": ("accelerate_job", (), "INPUT_BOUND", "Accelerate", 1),
    "deepspeed": ("deepspeed_job", (), "COMPUTE_BOUND", "DeepSpeed", 1),
    "grad_accum": ("grad_accum", ("--accum", "4"), "COMPUTE_BOUND", None, 4),
}
MODULES = {"hf_trainer": "transformers", "lightning_input": "lightning", "accelerate": "accelerate",
           "deepspeed": "deepspeed", "grad_accum": "torch"}


@pytest.fixture
def job(tmp_path: Path) -> Iterator:
    started: list[subprocess.Popen[str]] = []

    def start(example: str, *args: str) -> subprocess.Popen[str]:
        proc = start_example(example, *args, truth=tmp_path / "truth.jsonl", ready_timeout_s=300)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        stop_example(proc)


def snapshot(pid: int, tmp_path: Path, name: str, seconds: int = 10) -> tuple[dict, str]:
    out = traceml("snapshot", "--pid", str(pid), "--seconds", str(seconds), "--quiet",
                  "--logs-dir", str(tmp_path / "logs"), "--run-name", name, timeout=180)
    assert out.returncode in (0, 8), out.stderr
    return json.loads((tmp_path / "logs" / name / "final_summary.json").read_text()), out.stdout


@pytest.mark.one_core
@pytest.mark.parametrize("name", [pytest.param(n, marks=needs(MODULES[n])) for n in JOBS])
def test_a_framework_job_is_diagnosed_like_its_own_timing(name: str, job, tmp_path: Path):
    example, args, diagnosis, framework, micro = JOBS[name]
    proc = job(example, *args)
    time.sleep(3)
    summary, text = snapshot(proc.pid, tmp_path, name)
    rank = summary["step_time"]["ranks"]["0"]
    window = summary["sampling"]["window"]
    truth = read_truth(tmp_path / "truth.jsonl", steps_from(summary), window["end"])
    assert rank["loop"] is not None, text
    assert rank["framework"] == framework
    assert summary["step_time"]["diagnosis"]["kind"] == diagnosis, text
    # on a loaded machine the micro-batches may go uncounted (None: the optimizer step is then timed by
    # the optimizer's visits, checked below), never miscounted (CI's stop-59 run and a suite run of
    # stop 60 here: None on examples/grad_accum.py, its step from the visits)
    assert rank["micro_batches"] in (micro, None), text
    if honestly_unknown(summary, 0, truth):   # the job's own steps varied
        return
    assert rank["step_ms"] is not None, text
    assert abs(rank["step_ms"] - truth.judged(rank)) <= STEP_TOLERANCE * truth.judged(rank), (rank["step_ms"], truth)
    # optimizer steps: a step more or less at each edge of the window
    assert abs(rank["steps"] - truth.steps) <= max(3, 0.1 * truth.steps), (rank["steps"], truth.steps)
    # what a failure needs to be read (CI's stop-52 run: forward +6.5 points on DeepSpeed, once)
    sampling = {k: summary["sampling"].get(k) for k in ("samples", "errors", "windows", "rates")}
    for phase in PHASES:
        assert abs(rank["shares"][phase] - truth.shares[phase]) <= SHARE_TOLERANCE, (
            phase, rank["shares"], truth, rank["rate_hz"], rank.get("since"), window, sampling)
    if framework is not None:
        assert f"Loop: {framework}" in text


@needs("lightning")
def test_a_lightning_torchrun_job_names_its_input_straggler(torchrun, tmp_path: Path):
    launcher = torchrun(2, "--straggler", "input", "--slow-rank", "1", "--input-share", "0.1",
                        script="lightning_job")
    time.sleep(4)
    # 15 s, as issue 23 tried it: where its steps' mean runs a few % over their median, the rate is
    # raised a few seconds in and the steps are counted from there; 10 s left 19 of them, too few for
    # the step time to stand against one missed boundary (a suite run of stop 61: unknown on both)
    summary, text = snapshot(launcher.pid, tmp_path, "lightning_ddp", seconds=15)
    ranks = summary["step_time"]["ranks"]
    assert sorted(ranks) == ["0", "1"]
    assert all(r["framework"] == "Lightning" for r in ranks.values())
    diagnosis = summary["step_time"]["diagnosis"]
    assert (diagnosis["kind"], diagnosis["worst_rank"]) == ("INPUT_STRAGGLER", 1), text
    window = summary["sampling"]["window"]
    for r in (0, 1):
        truth = rank_truth(tmp_path, r, steps_from(summary, r), window["end"])
        row = ranks[str(r)]
        assert row["step_ms"] is not None, (r, text)
        assert abs(row["step_ms"] - truth.judged(row)) <= STEP_TOLERANCE * truth.judged(row), (r, row["step_ms"], truth)
        for phase in PHASES:
            assert abs(row["shares"][phase] - truth.shares[phase]) <= SHARE_TOLERANCE, (r, phase, row, truth)
