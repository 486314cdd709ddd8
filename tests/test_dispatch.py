"""CPU-BOUND DISPATCH (diagnose/dispatch.py): a real compute-bound CPU recording, given a GPU by the
scripted fake NVML: with the GPU mostly idle the thread that is busy in forward/backward is the
bottleneck; with the GPU busy it is compute-bound as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.streams import read_frames
from tests.fake_nvml import GIB, Device, FakeNvml, Proc
from traceml_agent.nvml import Nvml
from traceml_attach.diagnose.analysis import analyze
from traceml_attach.diagnose.finding import StepEvidence
from traceml_attach.diagnose.system import diagnose_system
from traceml_attach.ingest.stream import Recording
from traceml_attach.steps.classify import load_rules

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def with_gpu(name: str, sm: int, util: int) -> Recording:
    """The recording ``name`` with NVML readings of its process, once a second over its span."""
    rec = Recording()
    frames = read_frames(FIXTURES / f"{name}.msgpack")
    for f in frames:
        rec.add(f)
    pid = next(iter(rec.targets))
    lo, hi = rec.time_range() or (0, 0)
    fake = FakeNvml([Device(util=util, procs=[Proc(pid, lambda t: 4 * GIB, sm=sm)])])
    nvml = Nvml(fake)
    for tick, t in enumerate(range(lo, hi, 10**9)):
        fake.tick = tick
        frame = nvml.poll()
        assert frame is not None
        frame["t"] = t
        rec.add(frame)
    return rec


def test_a_busy_thread_and_an_idle_gpu_is_cpu_bound_dispatch():
    rec = with_gpu("compute_bound", sm=12, util=15)
    report = analyze(rec, load_rules()).report
    d = report.step_time.diagnosis
    assert d.kind == "CPU_BOUND_DISPATCH" and d.status == "CPU-BOUND DISPATCH" and d.severity == "warning"
    assert "COMPUTE_BOUND" not in [f.kind for f in report.step_time.findings]
    assert isinstance(d.evidence, StepEvidence) and d.evidence.gpu_sm_util == 12
    assert "torch.compile" in d.action and "CUDA graphs" in d.action and "larger batches" in d.action
    # the system section says the same idle GPU in TraceML's words
    system, _ = diagnose_system(rec, 0, 1 << 62, d.kind)
    assert system.kind == "LOW_GPU_UTILIZATION"


@pytest.mark.parametrize(("sm", "kind"), [(50, "CPU_BOUND_DISPATCH"), (90, "COMPUTE_BOUND")])
def test_the_gpus_own_business_decides(sm, kind):
    report = analyze(with_gpu("compute_bound", sm=sm, util=sm), load_rules()).report
    assert report.step_time.diagnosis.kind == kind


def test_an_input_bound_job_with_an_idle_gpu_stays_input_bound():
    # the thread waits for batches, it does not dispatch: the idle GPU is the input's doing
    report = analyze(with_gpu("input_bound", sm=10, util=10), load_rules()).report
    assert [f.kind for f in report.step_time.findings] == ["INPUT_BOUND"]
