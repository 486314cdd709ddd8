from __future__ import annotations

import pytest

from traceml_attach.diagnose.memory import combine, diagnose_memory
from traceml_attach.policy import MIB

GIB = 1024 * MIB


def series(start: int, step: int, n: int = 12) -> list[tuple[int, int]]:
    return [(i * 10**9, start + i * step) for i in range(n)]


@pytest.mark.parametrize(
    ("per_second", "kind"),
    [(0, "BALANCED"), (1 * MIB, "BALANCED"), (20 * MIB, "MEMORY_CREEP_EARLY"), (100 * MIB, "MEMORY_CREEP")],
)
def test_host_creep_needs_a_consistent_large_rise(per_second, kind):
    report = diagnose_memory("host", {"0": series(2 * GIB, per_second)}, {})
    assert report.finding.kind == kind


def test_creep_must_rise_on_the_median_rank_too():
    leaking = series(2 * GIB, 100 * MIB)
    flat = series(2 * GIB, 0)
    assert diagnose_memory("host", {"0": leaking, "1": flat, "2": flat}, {}).finding.kind == "BALANCED"
    assert diagnose_memory("host", {"0": leaking, "1": leaking, "2": flat}, {}).finding.kind == "MEMORY_CREEP"


def test_a_sawtooth_is_not_creep():
    saw = [(i * 10**9, 2 * GIB + (i % 3) * 300 * MIB) for i in range(12)]
    assert diagnose_memory("host", {"0": saw}, {}).finding.kind == "BALANCED"


@pytest.mark.parametrize(
    ("used", "kind", "severity"),
    [(0.95, "HIGH_PRESSURE", "warning"), (0.98, "HIGH_PRESSURE", "critical"), (0.5, "BALANCED", "info")],
)
def test_gpu_pressure(used, kind, severity):
    cap = 80 * GIB
    f = diagnose_memory("gpu", {"0": series(int(used * cap), 0)}, {"0": cap}).finding
    assert (f.kind, f.severity) == (kind, severity)
    if kind == "HIGH_PRESSURE":
        assert "reserved memory plus the CUDA context" in f.why


def test_gpu_imbalance_needs_pressure_too():
    cap = 80 * GIB
    small = {"0": series(2 * GIB, 0), "1": series(3 * GIB, 0), "2": series(2 * GIB, 0)}
    assert diagnose_memory("gpu", small, dict.fromkeys(small, cap)).finding.kind == "BALANCED"
    big = {"0": series(40 * GIB, 0), "1": series(60 * GIB, 0), "2": series(40 * GIB, 0)}
    f = diagnose_memory("gpu", big, dict.fromkeys(big, cap)).finding
    assert (f.kind, f.worst_rank) == ("IMBALANCE", "1")


def test_too_few_samples_is_no_data():
    assert diagnose_memory("host", {"0": series(GIB, 0, n=3)}, {}).finding.kind == "NO_DATA"


def test_cpu_job_without_gpu():
    host = diagnose_memory("host", {"0": series(GIB, 0)}, {})
    assert combine(None, host).kind == "NO_GPU"
    leak = diagnose_memory("host", {"0": series(GIB, 100 * MIB)}, {})
    assert combine(None, leak).status == "MEMORY CREEP"
