"""A finding: its kind (diagnose/kinds.py), severity, the one line and the numbers behind it, what
to do next, and its typed evidence (diagnose/evidence.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from traceml_attach.diagnose.evidence import (
    EVIDENCE_TYPES,
    Evidence,
    GpuStats,
    HangEvidence,
    KeptLine,
    LeakEvidence,
    MemoryEvidence,
    ProcessEvidence,
    ProcessRank,
    RankBurden,
    RankStack,
    SamplingEvidence,
    StepEvidence,
    StragglerEvidence,
    SystemEvidence,
    WorkerGrowth,
)
from traceml_attach.diagnose.kinds import Family, family, status

__all__ = ["EVIDENCE_TYPES", "SEVERITY_ORDER", "Evidence", "Finding", "GpuStats", "HangEvidence", "KeptLine",
           "LeakEvidence", "MemoryEvidence", "ProcessEvidence", "ProcessRank", "RankBurden", "RankStack",
           "SamplingEvidence", "StepEvidence", "StragglerEvidence", "SystemEvidence", "WorkerGrowth",
           "finding_order"]

SEVERITY_ORDER = {"critical": 3, "warning": 2, "info": 1}


@dataclass(frozen=True)
class Finding:
    _json_derived: ClassVar[tuple[str, ...]] = ("status",)
    kind: str
    severity: str            # info | warning | critical
    summary: str             # one line
    why: str                 # the numbers behind it
    action: str              # what to do next
    worst_rank: int | str | None = None   # the rank it names: a rank label given as a str becomes its int
    # Typed evidence. A rule that still passes a dict (memory.py, system.py) gets its evidence
    # typed by the analysis (diagnose/sections.py): a report never holds a dict here.
    evidence: Evidence | dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.worst_rank, str) and self.worst_rank.isdigit():
            object.__setattr__(self, "worst_rank", int(self.worst_rank))

    @property
    def status(self) -> str:
        return status(self.kind)


def finding_order(f: Finding) -> tuple[int, bool, float]:
    """Sort key of a window's findings: most severe first, stragglers before the rest, then
    the larger score."""
    score = f.evidence.score if isinstance(f.evidence, StepEvidence | StragglerEvidence) else None
    return (-SEVERITY_ORDER[f.severity], family(f.kind) is not Family.STRAGGLER, -(score or 0.0))
