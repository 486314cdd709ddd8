"""The NVML wrapper and the GPU diagnoses, driven by a scripted fake NVML."""

from __future__ import annotations

import pytest

from tests.fake_nvml import GIB, Device, FakeNvml, Proc
from traceml_agent.nvml import Nvml
from traceml_attach.diagnose.gpu import rank_gpu
from traceml_attach.diagnose.memory import Limits, diagnose_memory
from traceml_attach.diagnose.system import diagnose_process, diagnose_system
from traceml_attach.ingest.stream import Recording

MIB = 1024**2


def record(fake: FakeNvml, ticks: int = 12, ranks: dict[int, tuple[int, ...]] | None = None) -> Recording:
    """Poll the fake once a 'second' into a Recording; ``ranks`` maps pid -> NSpid."""
    rec = Recording()
    for rank, (pid, nspid) in enumerate((ranks or {}).items()):
        rec.add({"k": "target", "t": 0, "pid": pid, "cmd": [], "rank": rank, "local_rank": rank,
                 "nspid": list(nspid)})
    nvml = Nvml(fake)
    for t in range(ticks):
        fake.tick = t
        frame = nvml.poll()
        assert frame is not None
        frame["t"] = t * 10**9
        rec.add(frame)
    return rec


def memory_of(rec: Recording) -> tuple:
    ranks = {str(m.rank): pid for pid, m in rec.targets.items()}
    gpu = rank_gpu(rec, ranks, 0, 1 << 62)
    limits = {rank: Limits(gpu.capacity.get(rank)) for rank in ranks}   # no start time: the session's warm-up
    return gpu, diagnose_memory("gpu", gpu.memory, limits).finding


def test_creep():
    fake = FakeNvml([Device(procs=[Proc(100, lambda t: 10 * GIB + t * 200 * MIB)]),
                     Device(procs=[Proc(101, lambda t: 10 * GIB + t * 200 * MIB)])])
    # 20 s past the session's warm-up (the recording has no start times): rising, too soon for a trend
    _, finding = memory_of(record(fake, ticks=40, ranks={100: (100,), 101: (101,)}))
    assert finding.kind == "MEMORY_RISING"
    assert "reserved memory plus the CUDA context" in finding.why
    _, finding = memory_of(record(fake, ticks=60, ranks={100: (100,), 101: (101,)}))
    assert finding.kind == "MEMORY_CREEP"


def test_imbalance():
    fake = FakeNvml([Device(procs=[Proc(100, lambda t: 30 * GIB)]), Device(procs=[Proc(101, lambda t: 50 * GIB)]),
                     Device(procs=[Proc(102, lambda t: 30 * GIB)])])
    _, finding = memory_of(record(fake, ranks={100: (100,), 101: (101,), 102: (102,)}))
    assert (finding.kind, finding.worst_rank) == ("IMBALANCE", 1)


def test_pressure():
    fake = FakeNvml([Device(procs=[Proc(100, lambda t: 78 * GIB)])])
    _, finding = memory_of(record(fake, ranks={100: (100,)}))
    assert (finding.kind, finding.severity) == ("HIGH_PRESSURE", "critical")


def test_container_pids_map_through_nspid():
    # NVML reports host PIDs 5100/5101; the ranks are 100/101 here, with NSpid (100, 5100)...
    fake = FakeNvml([Device(procs=[Proc(5100, lambda t: 20 * GIB)]), Device(procs=[Proc(5101, lambda t: 21 * GIB)])])
    gpu, _ = memory_of(record(fake, ranks={100: (100, 5100), 101: (101, 5101)}))
    assert gpu.memory["0"][0][1] == 20 * GIB and gpu.memory["1"][0][1] == 21 * GIB
    assert gpu.notes == []


def test_hidden_host_pids_fall_back_to_the_ranks_device():
    fake = FakeNvml([Device(procs=[Proc(9000, lambda t: 20 * GIB)]), Device(procs=[Proc(9001, lambda t: 21 * GIB)])])
    gpu, _ = memory_of(record(fake, ranks={100: (100,), 101: (101,)}))
    assert gpu.memory["1"][0][1] == 21 * GIB
    assert "matched by the ranks' devices" in gpu.notes[0]


def test_another_jobs_process_on_a_ranks_gpu_is_not_counted_as_the_rank():
    # rank 0 (pid 100) is matched by its PID; pid 9000, another job on the same GPU, is not rank 0
    fake = FakeNvml([Device(procs=[Proc(100, lambda t: 10 * GIB), Proc(9000, lambda t: 30 * GIB)])])
    gpu, _ = memory_of(record(fake, ranks={100: (100,)}))
    assert {v for _, v in gpu.memory["0"]} == {10 * GIB}
    assert gpu.notes == []


def test_mig_has_no_per_process_utilization_and_says_so():
    fake = FakeNvml([Device(mig=True, procs=[Proc(100, lambda t: 5 * GIB)])])
    rec = record(fake, ranks={100: (100,)})
    gpu = rank_gpu(rec, {"0": 100}, 0, 1 << 62)
    assert gpu.sm_util == {}
    assert any("MIG" in n for n in gpu.notes)


def test_missing_functions_fall_back_or_give_none():
    fake = FakeNvml([Device(procs=[Proc(100, lambda t: 5 * GIB)])],
                    missing=("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetPowerUsage",
                             "nvmlDeviceGetProcessUtilization"))
    frame = Nvml(fake).poll()
    assert frame is not None
    power, limit = frame["devices"][0][5:7]
    assert power is None and limit == 700.0            # unknown stays None, never 0
    assert frame["procs"] == [[0, 100, 5 * GIB, None]]  # v2 used; no utilization


def test_no_driver_is_no_gpu_not_an_error():
    nvml = Nvml(FakeNvml([], no_driver=True))
    assert nvml.poll() is None
    assert "no NVIDIA driver" in (nvml.unavailable or "")


@pytest.mark.parametrize(("util", "step_kind", "kind", "words"), [
    (20, "BALANCED", "LOW_GPU_UTILIZATION", "cause unexplained"),
    (20, "INPUT_BOUND", "LOW_GPU_UTILIZATION", "INPUT_BOUND"),
    (50, "BALANCED", "MODERATE_GPU_UTILIZATION", "cause unexplained"),
    (95, "COMPUTE_BOUND", "NORMAL", "no system-level pressure"),
])
def test_low_gpu_utilization_is_context_not_a_cause(util, step_kind, kind, words):
    rec = record(FakeNvml([Device(util=util, procs=[Proc(100, lambda t: 5 * GIB)])]), ranks={100: (100,)})
    finding, _ = diagnose_system(rec, 0, 1 << 62, step_kind)
    assert finding.kind == kind
    assert words in finding.summary


def test_rank_gpu_memory_imbalance_is_a_process_finding():
    fake = FakeNvml([Device(procs=[Proc(100, lambda t: 10 * GIB)]), Device(procs=[Proc(101, lambda t: 20 * GIB)])])
    rec = record(fake, ranks={100: (100,), 101: (101,)})
    ranks = {"0": 100, "1": 101}
    finding, evidence = diagnose_process(rec, ranks, rank_gpu(rec, ranks, 0, 1 << 62), 0, 1 << 62)
    assert (finding.kind, finding.worst_rank) == ("RANK_GPU_MEMORY_IMBALANCE", 1)
    assert evidence["ranks"]["1"]["gpu_sm_util_median"] == 50


def busy_host(job_cpu: float, workers_cpu: float, cpus: int | None) -> Recording:
    """A 2-CPU host 100% busy for 10 s, and one rank's process using ``job_cpu`` (% of one CPU)
    with DataLoader workers using ``workers_cpu``, as the agent's frames say."""
    rec = Recording()
    rec.add({"k": "target", "pid": 100, "cmd": ["python", "train.py"], "rank": 0})
    for i in range(10):
        t = i * 1_000_000_000
        host = {"k": "host", "t": t, "cpu": 100.0, "mem_used": 1 << 30, "mem_total": 1 << 33}
        rec.add(host if cpus is None else {**host, "cpus": cpus})
        rec.add({"k": "proc", "pid": 100, "t": t, "cpu": job_cpu, "rss": 1 << 28, "nthreads": 4,
                 "children": [[101, workers_cpu, 1 << 27]]})
    return rec


@pytest.mark.parametrize(("job_cpu", "workers_cpu", "cpus", "kind", "severity"), [
    (120.0, 70.0, 2, "HOST_BUSY_WITH_JOB", "info"),   # training on the CPU: the job is the load
    (60.0, 10.0, 2, "HIGH_CPU", "warning"),           # something else takes most of the CPUs
    (120.0, 70.0, None, "HIGH_CPU", "warning"),       # a stream without the CPU count: cannot tell
])
def test_a_busy_host_is_context_when_the_job_is_what_keeps_it_busy(job_cpu, workers_cpu, cpus, kind, severity):
    finding, _ = diagnose_system(busy_host(job_cpu, workers_cpu, cpus), 0, 1 << 62, "COMPUTE_BOUND",
                                 ranks={"0": 100})
    assert (finding.kind, finding.severity) == (kind, severity)
    if cpus is not None:
        share = (job_cpu + workers_cpu) / (100.0 * cpus)
        assert f"{100 * share:.0f}% of it" in finding.summary


def test_the_agent_sends_the_hosts_cpu_count():
    import psutil

    from traceml_agent.procstats import host_frame

    frame = host_frame()
    assert frame["cpus"] == psutil.cpu_count() and frame["cpus"] >= 1
    rec = Recording()
    rec.add(frame)
    assert rec.hosts[0].cpus == frame["cpus"]
