"""Every kind of finding, once: its name in the summary JSON, the report section it belongs to,
its status label in TraceML's words, its family and the class of its typed evidence.

Rules build findings with these names (``Kind.INPUT_BOUND``, never a string literal: a test
holds it), and presenters ask the registry what a finding is (``family(kind)``,
``status(kind)``) instead of comparing kind strings. Adding a kind is one entry here and its
rule.

A name may serve more than one section with the meaning TraceML gives it in each: BALANCED is
"no clear bottleneck" for step time and "no pressure, imbalance or creep" for step memory;
NO_DATA and WARMUP are "not judged yet" in both. Such a kind has one entry per section, with
that section's evidence; its status label is the same everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from traceml_attach.diagnose.evidence import (
    HangEvidence,
    MemoryEvidence,
    ProcessEvidence,
    SamplingEvidence,
    StepEvidence,
    StragglerEvidence,
    SystemEvidence,
)


class Kind(StrEnum):
    """A finding's kind, as the summary JSON names it."""

    NO_DATA = "NO_DATA"
    WARMUP = "WARMUP"
    BALANCED = "BALANCED"
    INPUT_BOUND = "INPUT_BOUND"
    COMPUTE_BOUND = "COMPUTE_BOUND"
    WAIT_HEAVY = "WAIT_HEAVY"
    INPUT_STRAGGLER = "INPUT_STRAGGLER"
    COMPUTE_STRAGGLER = "COMPUTE_STRAGGLER"
    STRAGGLER = "STRAGGLER"
    HANG = "HANG"
    STOPPED = "STOPPED"
    CPU_BOUND_DISPATCH = "CPU_BOUND_DISPATCH"
    HIGH_PRESSURE = "HIGH_PRESSURE"
    IMBALANCE = "IMBALANCE"
    MEMORY_RISING = "MEMORY_RISING"
    MEMORY_CREEP_EARLY = "MEMORY_CREEP_EARLY"
    MEMORY_CREEP = "MEMORY_CREEP"
    NORMAL = "NORMAL"
    HIGH_CPU = "HIGH_CPU"
    HOST_BUSY_WITH_JOB = "HOST_BUSY_WITH_JOB"
    HIGH_HOST_MEMORY = "HIGH_HOST_MEMORY"
    HIGH_GPU_MEMORY = "HIGH_GPU_MEMORY"
    HIGH_GPU_TEMPERATURE = "HIGH_GPU_TEMPERATURE"
    HIGH_GPU_POWER = "HIGH_GPU_POWER"
    LOW_GPU_UTILIZATION = "LOW_GPU_UTILIZATION"
    MODERATE_GPU_UTILIZATION = "MODERATE_GPU_UTILIZATION"
    HIGH_PROCESS_GPU_MEMORY = "HIGH_PROCESS_GPU_MEMORY"
    HIGH_PROCESS_RSS = "HIGH_PROCESS_RSS"
    HIGH_PROCESS_CPU = "HIGH_PROCESS_CPU"
    RANK_GPU_MEMORY_IMBALANCE = "RANK_GPU_MEMORY_IMBALANCE"
    SAMPLING_PROBLEMS = "SAMPLING_PROBLEMS"
    SAMPLING_FAILED = "SAMPLING_FAILED"


class Section(StrEnum):
    """The report's sections, as the summary JSON names them."""

    STEP_TIME = "step_time"
    STEP_MEMORY = "step_memory"
    SYSTEM = "system"
    PROCESS = "process"
    SAMPLING = "sampling"


class Family(StrEnum):
    """What a kind says about the job, for presenters that group or hide findings."""

    NOT_YET = "not_yet"           # not judged yet: too little data (NO_DATA, WARMUP)
    HEALTHY = "healthy"           # judged, nothing to fix (BALANCED, NORMAL, the job's own busy host)
    BOTTLENECK = "bottleneck"     # where the step's time goes (INPUT-BOUND, WAIT-HEAVY, COMPUTE-BOUND)
    STRAGGLER = "straggler"       # one rank holds the others back
    STUCK = "stuck"               # the job does not progress (HANG, STOPPED)
    MEMORY = "memory"             # memory pressure, imbalance or growth
    RESOURCE = "resource"         # the host, the GPUs or a process near a limit
    SAMPLING = "sampling"         # our own sampling lost coverage or failed


@dataclass(frozen=True)
class KindSpec:
    kind: Kind
    section: Section
    status: str                   # the label the summary, the text and the TUI show
    family: Family
    evidence: type | None         # the class of its typed evidence (None: it carries none)


_S, _F = Section, Family
SPECS: tuple[KindSpec, ...] = (
    # step time (diagnose/step.py, hang.py)
    KindSpec(Kind.NO_DATA, _S.STEP_TIME, "NO DATA", _F.NOT_YET, StepEvidence),
    KindSpec(Kind.WARMUP, _S.STEP_TIME, "WARMUP", _F.NOT_YET, StepEvidence),
    KindSpec(Kind.BALANCED, _S.STEP_TIME, "BALANCED", _F.HEALTHY, StepEvidence),
    KindSpec(Kind.INPUT_BOUND, _S.STEP_TIME, "INPUT-BOUND", _F.BOTTLENECK, StepEvidence),
    KindSpec(Kind.COMPUTE_BOUND, _S.STEP_TIME, "COMPUTE-BOUND", _F.BOTTLENECK, StepEvidence),
    KindSpec(Kind.WAIT_HEAVY, _S.STEP_TIME, "WAIT-HEAVY", _F.BOTTLENECK, StepEvidence),
    KindSpec(Kind.INPUT_STRAGGLER, _S.STEP_TIME, "INPUT STRAGGLER", _F.STRAGGLER, StragglerEvidence),
    KindSpec(Kind.COMPUTE_STRAGGLER, _S.STEP_TIME, "COMPUTE STRAGGLER", _F.STRAGGLER, StragglerEvidence),
    KindSpec(Kind.STRAGGLER, _S.STEP_TIME, "STRAGGLER", _F.STRAGGLER, StragglerEvidence),
    KindSpec(Kind.HANG, _S.STEP_TIME, "HANG", _F.STUCK, HangEvidence),
    KindSpec(Kind.STOPPED, _S.STEP_TIME, "STOPPED", _F.STUCK, None),
    # ...the host thread cannot queue kernels as fast as the GPU runs them (diagnose/dispatch.py)
    KindSpec(Kind.CPU_BOUND_DISPATCH, _S.STEP_TIME, "CPU-BOUND DISPATCH", _F.BOTTLENECK, StepEvidence),
    # step memory (diagnose/memory.py)
    KindSpec(Kind.NO_DATA, _S.STEP_MEMORY, "NO DATA", _F.NOT_YET, MemoryEvidence),
    KindSpec(Kind.WARMUP, _S.STEP_MEMORY, "WARMUP", _F.NOT_YET, MemoryEvidence),
    KindSpec(Kind.BALANCED, _S.STEP_MEMORY, "BALANCED", _F.HEALTHY, MemoryEvidence),
    KindSpec(Kind.HIGH_PRESSURE, _S.STEP_MEMORY, "HIGH PRESSURE", _F.MEMORY, MemoryEvidence),
    KindSpec(Kind.IMBALANCE, _S.STEP_MEMORY, "IMBALANCE", _F.MEMORY, MemoryEvidence),
    KindSpec(Kind.MEMORY_RISING, _S.STEP_MEMORY, "MEMORY RISING", _F.MEMORY, MemoryEvidence),
    KindSpec(Kind.MEMORY_CREEP_EARLY, _S.STEP_MEMORY, "MEMORY CREEP (EARLY)", _F.MEMORY, MemoryEvidence),
    KindSpec(Kind.MEMORY_CREEP, _S.STEP_MEMORY, "MEMORY CREEP", _F.MEMORY, MemoryEvidence),
    # system (diagnose/system.py)
    KindSpec(Kind.NORMAL, _S.SYSTEM, "NORMAL", _F.HEALTHY, SystemEvidence),
    KindSpec(Kind.HOST_BUSY_WITH_JOB, _S.SYSTEM, "HOST BUSY WITH JOB", _F.HEALTHY, SystemEvidence),
    KindSpec(Kind.HIGH_CPU, _S.SYSTEM, "HIGH CPU", _F.RESOURCE, SystemEvidence),
    KindSpec(Kind.HIGH_HOST_MEMORY, _S.SYSTEM, "HIGH HOST MEMORY", _F.RESOURCE, SystemEvidence),
    KindSpec(Kind.HIGH_GPU_MEMORY, _S.SYSTEM, "HIGH GPU MEMORY", _F.RESOURCE, SystemEvidence),
    KindSpec(Kind.HIGH_GPU_TEMPERATURE, _S.SYSTEM, "HIGH GPU TEMPERATURE", _F.RESOURCE, SystemEvidence),
    KindSpec(Kind.HIGH_GPU_POWER, _S.SYSTEM, "HIGH GPU POWER", _F.RESOURCE, SystemEvidence),
    KindSpec(Kind.LOW_GPU_UTILIZATION, _S.SYSTEM, "LOW GPU UTILIZATION", _F.RESOURCE, SystemEvidence),
    KindSpec(Kind.MODERATE_GPU_UTILIZATION, _S.SYSTEM, "MODERATE GPU UTILIZATION", _F.RESOURCE, SystemEvidence),
    # process (diagnose/system.py)
    KindSpec(Kind.NORMAL, _S.PROCESS, "NORMAL", _F.HEALTHY, None),
    KindSpec(Kind.HIGH_PROCESS_GPU_MEMORY, _S.PROCESS, "HIGH PROCESS GPU MEMORY", _F.RESOURCE, ProcessEvidence),
    KindSpec(Kind.HIGH_PROCESS_RSS, _S.PROCESS, "HIGH PROCESS RSS", _F.RESOURCE, ProcessEvidence),
    KindSpec(Kind.HIGH_PROCESS_CPU, _S.PROCESS, "HIGH PROCESS CPU", _F.RESOURCE, ProcessEvidence),
    KindSpec(Kind.RANK_GPU_MEMORY_IMBALANCE, _S.PROCESS, "RANK GPU MEMORY IMBALANCE", _F.RESOURCE, ProcessEvidence),
    # sampling (diagnose/sections.py)
    KindSpec(Kind.NORMAL, _S.SAMPLING, "NORMAL", _F.HEALTHY, None),
    KindSpec(Kind.SAMPLING_PROBLEMS, _S.SAMPLING, "SAMPLING PROBLEMS", _F.SAMPLING, SamplingEvidence),
    KindSpec(Kind.SAMPLING_FAILED, _S.SAMPLING, "SAMPLING FAILED", _F.SAMPLING, SamplingEvidence),
)

REGISTRY: dict[tuple[Section, Kind], KindSpec] = {(s.section, s.kind): s for s in SPECS}
_BY_KIND: dict[Kind, KindSpec] = {}
for _spec in SPECS:
    _BY_KIND.setdefault(_spec.kind, _spec)


def spec(kind: str, section: Section | None = None) -> KindSpec | None:
    """The entry of ``kind`` (in ``section`` where the name serves several); None for a kind this
    version does not know (a newer summary read by an older one)."""
    try:
        k = Kind(kind)
    except ValueError:
        return None
    return REGISTRY.get((section, k)) if section is not None else _BY_KIND.get(k)


def status(kind: str) -> str:
    """The kind's status label; an unknown kind's name with spaces."""
    entry = spec(kind)
    return entry.status if entry is not None else kind.replace("_", " ")


def family(kind: str) -> Family | None:
    entry = spec(kind)
    return entry.family if entry is not None else None


def not_judged(kind: str) -> bool:
    """Too little data for a verdict yet (NO DATA, WARMUP)."""
    return family(kind) is Family.NOT_YET


def healthy(kind: str) -> bool:
    """Judged, with nothing to report (BALANCED, NORMAL, a host busy with the job itself)."""
    return family(kind) is Family.HEALTHY
