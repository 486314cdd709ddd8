"""On a real NVIDIA GPU: attach to a CUDA training job. Skipped where there is none."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from launch import read_truth, start_example, stop_example
from tests.conftest import traceml


def cuda() -> bool:
    """Whether torch has a CUDA GPU here: without the NVIDIA driver's device file it has none, and
    torch is not imported (a second of each test worker's collection)."""
    if not Path("/dev/nvidiactl").exists():
        return False
    return bool(pytest.importorskip("torch").cuda.is_available())


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda(), reason="needs a CUDA GPU")]


@pytest.fixture(autouse=True)
def host_truth(monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples' truth on a GPU is the host thread's own time (examples/_groundtruth.py): a
    mark that synchronized would put device time in its phase, where the stacks show the job
    waiting in ``synchronize``, and would stop the job from running ahead of the GPU."""
    monkeypatch.setenv("TRACEML_GROUND_TRUTH_SYNC", "0")


def snapshot_of(pid: int, tmp_path: Path, name: str, seconds: int = 10) -> dict:
    out = traceml("snapshot", "--pid", str(pid), "--seconds", str(seconds), "--quiet",
                  "--logs-dir", str(tmp_path), "--run-name", name)
    assert out.returncode == 0, out.stderr
    return json.loads((tmp_path / name / "final_summary.json").read_text())


def judged(example, tmp_path: Path, name: str, kind: str) -> dict:
    """A 10-s snapshot of examples/<name>.py on the GPU, its summary; its verdict must be ``kind``."""
    job = example(name, "--device", "cuda")
    time.sleep(2)
    summary = snapshot_of(job.pid, tmp_path, f"gpu-{name}")
    assert summary["step_time"]["diagnosis"]["kind"] == kind, summary["step_time"]["diagnosis"]
    return summary


def assert_known_within(summary: dict, truth_file: Path, share: str, share_pp: float) -> None:
    """A known step time within 10% of the job's own; ``share`` within ``share_pp`` points."""
    window = summary["sampling"]["window"]
    truth = read_truth(truth_file, window["start"], window["end"])
    rank = summary["step_time"]["ranks"]["0"]
    if rank["step_ms"] is not None:
        assert abs(rank["step_ms"] - truth.judged(rank)) <= 0.10 * truth.judged(rank), (rank["step_ms"], truth.step_ms)
    assert abs(rank["shares"][share] - truth.shares[share]) <= share_pp, (rank["shares"], truth.shares)


def test_input_bound_cuda_job(example, tmp_path: Path):
    summary = judged(example, tmp_path, "input_bound", "INPUT_BOUND")
    assert_known_within(summary, tmp_path / "input_bound.jsonl", "input", 0.05)
    rank = summary["step_time"]["ranks"]["0"]    # ~5 ms steps on an H100: under 5 samples at 400 Hz
    assert rank["step_ms"] is not None or "samples apart" in rank["clock"]["reason"], rank["clock"]


def test_compute_bound_cuda_job_is_compute_bound_not_wait_heavy(example, tmp_path: Path):
    # syncs only every 50 steps (loss.item() for its log line): the host runs ahead of the GPU and
    # waits for it there, in device sync, while the GPU is busy. (Its own step times are the
    # host's: 49 short ones and a long one, no truth for a step time.)
    summary = judged(example, tmp_path, "compute_bound", "COMPUTE_BOUND")
    rank = summary["process"]["ranks"]["0"]
    assert rank["gpu_mem_peak_bytes"] > 0                 # NVML's PID matched the rank
    assert summary["step_memory"]["gpu"] is not None
    assert summary["system"]["diagnosis"]["evidence"]["gpus"]["0"]["util_percent_median"] >= 90   # saturated


def test_wait_heavy_cuda_job(example, tmp_path: Path):
    # loss.item() every step: the host waits for the GPU there, then runs its metrics
    summary = judged(example, tmp_path, "wait_heavy", "WAIT_HEAVY")
    assert_known_within(summary, tmp_path / "wait_heavy.jsonl", "wait", 0.05)


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


def test_torchrun_ranks_sharing_a_gpu_each_get_their_own_gpu_memory(torchrun, tmp_path: Path):
    # GIVEN 2 DDP ranks (gloo) on the one GPU, rank 1 slowed in its forward
    launcher = torchrun(2, "--device", "cuda", "--straggler", "compute", "--slow-rank", "1")
    time.sleep(2)
    # WHEN traceml attaches to the launcher
    summary = snapshot_of(launcher.pid, tmp_path, "gpu-ddp")
    # THEN it blames rank 1, and NVML's per-process memory lands on each rank's own PID: what
    # nvidia-smi shows for that PID, each (the allocators are steady after the first steps)
    diagnosis = summary["step_time"]["diagnosis"]
    assert (diagnosis["kind"], diagnosis["worst_rank"]) == ("COMPUTE_STRAGGLER", 1), diagnosis
    apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, check=True).stdout
    used_mib = {int(pid): int(mib) for pid, mib in (line.split(",") for line in apps.splitlines() if line.strip())}
    ranks = summary["process"]["ranks"]
    assert {ranks[r]["pid"] for r in ("0", "1")} <= set(used_mib), (ranks, used_mib)
    for r in ("0", "1"):
        peak_mib = ranks[r]["gpu_mem_peak_bytes"] / (1 << 20)
        assert abs(peak_mib - used_mib[ranks[r]["pid"]]) <= 64, (r, peak_mib, used_mib)
