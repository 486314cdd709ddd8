from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from traceml_attach.diagnose.memory import combine, diagnose_memory
from traceml_attach.policy import MIB

GIB = 1024 * MIB


def series(start: int, step: int, n: int = 60) -> list[tuple[int, int]]:
    """One sample a second for ``n`` seconds, rising by ``step`` bytes a second."""
    return [(i * 10**9, start + i * step) for i in range(n)]


def noise(i: int, amplitude: int) -> int:
    """Deterministic jitter in [0, amplitude): allocator and page-cache noise."""
    return (i * 7919) % 97 * amplitude // 97


def warm_up_then_flat(seconds: int = 200) -> list[tuple[int, int]]:
    """The shape of a job with 2 DataLoader workers: +86 MiB in its first 30 s (workers forking,
    caches filling), then flat at 875-910 MiB."""
    return [(i * 10**9, 790 * MIB + min(i, 30) * 86 * MIB // 30 + noise(i, 35 * MIB)) for i in range(seconds)]


@pytest.mark.parametrize(
    ("per_second", "kind"),
    [(0, "BALANCED"), (1 * MIB, "BALANCED"), (5 * MIB, "MEMORY_CREEP_EARLY"), (30 * MIB, "MEMORY_CREEP")],
)
def test_host_creep_needs_a_consistent_large_rise(per_second, kind):
    report = diagnose_memory("host", {"0": series(2 * GIB, per_second)}, {})
    assert report.finding.kind == kind


def test_warm_up_growth_is_never_creep():
    # GIVEN a flat job whose RSS rose 86 MiB while its workers started, judged at every live tick
    warm = warm_up_then_flat()
    for n in range(6, len(warm) + 1):
        # WHEN the live view judges the session so far THEN it never calls it creep
        finding = diagnose_memory("host", {"0": warm[:n]}, {}).finding
        assert finding.kind == "BALANCED", (n, finding)
    assert "past the 20 s warm-up" in finding.why


def test_a_steady_rise_is_creep_once_it_goes_on_past_the_warm_up():
    leak = [(t, v + noise(i, 8 * MIB)) for i, (t, v) in enumerate(series(900 * MIB, 5 * MIB, n=200))]
    early = diagnose_memory("host", {"0": leak[:25]}, {}).finding
    assert early.kind == "BALANCED"
    assert "creep is judged once 30 s are sampled" in early.why   # says it has not judged, not that all is well
    assert diagnose_memory("host", {"0": leak[:45]}, {}).finding.kind == "MEMORY_CREEP_EARLY"
    assert diagnose_memory("host", {"0": leak}, {}).finding.kind == "MEMORY_CREEP"


def test_a_rise_that_levels_off_is_not_creep():
    # a cache filling up: fast at first, slower and slower (time constant 10 s, 400 MiB in all)
    filling = [(i * 10**9, GIB + int(400 * MIB * (1 - math.exp(-i / 10)))) for i in range(120)]
    assert diagnose_memory("host", {"0": filling}, {}).finding.kind == "BALANCED"


def test_an_early_finding_says_what_would_confirm_it():
    f = diagnose_memory("host", {"0": series(2 * GIB, 5 * MIB)}, {}).finding
    assert (f.kind, f.severity) == ("MEMORY_CREEP_EARLY", "warning")
    assert "confirm" not in f.why
    assert "becomes MEMORY CREEP if the rise goes on to +512 MiB" in f.why
    assert "after a 20 s warm-up" in f.why
    assert f.evidence["growth_bytes"] >= 64 * MIB


def test_creep_is_judged_by_time_on_unevenly_spaced_series():
    # 10-minute rollups, one point per 10 s, then the newest 30 s raw: a steady leak of
    # 2 MiB/s is creep, and the warm-up of a flat job is not
    def rollups_then_raw(value: Callable[[int], int]) -> list[tuple[int, int]]:
        times = [*range(0, 600, 10), *range(600, 630)]
        return [(t * 10**9, value(t)) for t in times]

    leak = rollups_then_raw(lambda t: GIB + 2 * t * MIB)
    assert diagnose_memory("host", {"0": leak}, {}).finding.kind == "MEMORY_CREEP"
    flat = rollups_then_raw(lambda t: 790 * MIB + min(t, 30) * 86 * MIB // 30 + noise(t, 35 * MIB))
    assert diagnose_memory("host", {"0": flat}, {}).finding.kind == "BALANCED"


def test_the_warm_up_is_counted_from_when_sampling_began():
    # the newest 30 s of an hour-long session: no warm-up in it, when the rule is told so
    window = [(3600 * 10**9 + t, v) for t, v in series(2 * GIB, 5 * MIB, n=30)]
    assert diagnose_memory("host", {"0": window}, {}, sampling_started_ns=0).finding.kind == "MEMORY_CREEP_EARLY"
    # without it, the window's first 20 s are taken for a warm-up: too little is left to judge
    assert "creep is judged once" in diagnose_memory("host", {"0": window}, {}).finding.why


def test_creep_must_rise_on_the_median_rank_too():
    leaking = series(2 * GIB, 100 * MIB)
    flat = series(2 * GIB, 0)
    assert diagnose_memory("host", {"0": leaking, "1": flat, "2": flat}, {}).finding.kind == "BALANCED"
    f = diagnose_memory("host", {"0": flat, "1": leaking, "2": series(2 * GIB, 50 * MIB)}, {}).finding
    assert (f.kind, f.worst_rank) == ("MEMORY_CREEP", 1)   # the rank that grew most


def test_a_sawtooth_is_not_creep():
    saw = [(i * 10**9, 2 * GIB + (i % 3) * 300 * MIB) for i in range(60)]
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
    assert (f.kind, f.worst_rank) == ("IMBALANCE", 1)


def test_too_few_samples_is_no_data():
    assert diagnose_memory("host", {"0": series(GIB, 0, n=3)}, {}).finding.kind == "NO_DATA"


def test_cpu_job_without_gpu():
    host = diagnose_memory("host", {"0": series(GIB, 0)}, {})
    assert combine(None, host).kind == "NO_GPU"
    leak = diagnose_memory("host", {"0": series(GIB, 100 * MIB)}, {})
    assert combine(None, leak).status == "MEMORY CREEP"
