"""On a real NVIDIA GPU: attach to a CUDA training job. Skipped where there is none."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from launch import read_truth, start_example, stop_example
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


def test_compute_bound_cuda_job_is_compute_bound_not_wait_heavy(tmp_path: Path):
    # no ground truth here: its per-phase synchronize would hide the asynchronous waiting
    job = start_example("compute_bound", "--device", "cuda")
    try:
        time.sleep(2)
        out = traceml("snapshot", "--pid", str(job.pid), "--seconds", "10", "--quiet",
                      "--logs-dir", str(tmp_path), "--run-name", "gpu-compute")
    finally:
        stop_example(job)
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "gpu-compute" / "final_summary.json").read_text())
    assert summary["step_time"]["diagnosis"]["kind"] == "COMPUTE_BOUND", out.stdout
    rank = summary["process"]["ranks"]["0"]
    assert rank["gpu_mem_peak_bytes"] > 0                 # NVML's PID matched the rank
    assert summary["step_memory"]["gpu"] is not None
    assert summary["system"]["gpus"]["0"]["util_percent_median"] is not None


def test_real_nvml_reads_every_device():
    from traceml_agent.nvml import Nvml

    frame = Nvml().poll()
    assert frame is not None and frame["devices"]
    _index, util, used, total, *_ = frame["devices"][0]
    assert total > 0 and used is not None and 0 <= util <= 100


def test_prometheus_exports_the_ranks_gpu(example, tmp_path: Path):
    from tests.test_e2e_prometheus import attach_with_prometheus, by_rank, scrape

    job = example("input_bound", "--device", "cuda")
    time.sleep(2)
    attacher, port = attach_with_prometheus(job.pid, tmp_path, 20)
    try:
        deadline, metrics = time.monotonic() + 15, scrape(port)
        while time.monotonic() < deadline and not ("traceml_gpu_sm_util" in metrics
                                                   and by_rank(metrics["traceml_gpu_sm_util"])):
            time.sleep(1)
            metrics = scrape(port)
        assert by_rank(metrics["traceml_gpu_memory_bytes"])["0"] > 0   # NVML's PID matched the rank
        assert 0 <= by_rank(metrics["traceml_gpu_sm_util"])["0"] <= 100
    finally:
        attacher.terminate()
        attacher.wait(timeout=30)


def test_gpu_memory_shapes_from_a_15_s_snapshot(tmp_path: Path):
    """The memory cases of tests/test_e2e_memory.py on the GPU: NVML's per-process memory is the
    source, judged with the same words, against the allocator's own reserved bytes in-process."""
    from tests.test_e2e_memory import slope

    shapes = {"eval_loss": ({"MEMORY_RISING"}, "val_total += loss_fn(model(x_val), y_val)"),
              "flat": ({"BALANCED", "NO_DATA"}, None),
              "jump": ({"BALANCED", "NO_DATA"}, None)}
    jobs = {}
    try:
        for shape in shapes:
            extra = ("--jump-after-s", "32") if shape == "jump" else ("--input-ms", "5")
            jobs[shape] = start_example("leaks", "--shape", shape, "--device", "cuda", *extra,
                                        truth=tmp_path / f"{shape}.jsonl")
        time.sleep(22)
        outs = {shape: traceml("snapshot", "--pid", str(job.pid), "--seconds", "15", "--quiet",
                               "--logs-dir", str(tmp_path), "--run-name", shape) for shape, job in jobs.items()}
    finally:
        for job in jobs.values():
            stop_example(job)
    for shape, (kinds, line) in shapes.items():
        assert outs[shape].returncode == 0, outs[shape].stderr
        summary = json.loads((tmp_path / shape / "final_summary.json").read_text())
        memory = summary["step_memory"]
        d = memory["diagnosis"]
        assert memory["source"] == "gpu"
        assert d["kind"] in kinds, (shape, d)
        assert "nothing to do" not in d["action"]
        if line is not None:
            ev = d["evidence"]
            assert ev["source"] == "gpu" and ev["leak"]["lines"][0]["text"].startswith(line)
            window = summary["sampling"]["window"]
            rows = [json.loads(x) for x in (tmp_path / f"{shape}.jsonl").read_text().splitlines() if x.endswith("}")]
            true = slope([(r["end"], r["gpu"]) for r in rows if window["start"] <= r["end"] <= window["end"]])
            assert abs(ev["bytes_per_s"] / true - 1) <= 0.25, (ev["bytes_per_s"], true)
