"""On a real NVIDIA GPU: attach to a CUDA training job. Skipped where there is none."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from launch import read_truth
from tests.conftest import traceml

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_input_bound_cuda_job(example, tmp_path: Path):
    job = example("input_bound", "--device", "cuda")
    time.sleep(2)
    out = traceml("snapshot", "--pid", str(job.pid), "--seconds", "10", "--quiet",
                  "--logs-dir", str(tmp_path), "--run-name", "gpu")
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "gpu" / "final_summary.json").read_text())
    assert summary["step_time"]["diagnosis"]["kind"] == "INPUT_BOUND", out.stdout
    window = summary["sampling"]["window"]
    truth = read_truth(tmp_path / "input_bound.jsonl", window["start"], window["end"])
    rank = summary["step_time"]["ranks"]["0"]
    assert abs(rank["step_ms"] - truth.step_ms) <= 0.10 * truth.step_ms
    assert abs(rank["shares"]["input"] - truth.shares["input"]) <= 0.05
