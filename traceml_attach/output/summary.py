"""The summary document: a report with its run's name, and its versioned JSON serialization
(final_summary.json; every field is documented in docs/summary-schema.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from traceml_attach import __version__
from traceml_attach.diagnose.analysis import Analysis
from traceml_attach.diagnose.report import Report
from traceml_attach.ingest.stream import Recording
from traceml_attach.output.codec import DecodeError, decode, encode

SCHEMA_VERSION = 2


class SchemaError(ValueError):
    """A final_summary.json this version cannot read: another schema version, or a field that
    is missing or of the wrong type."""


@dataclass(frozen=True)
class Tool:
    name: str = "traceml-attach"
    version: str = __version__


@dataclass(frozen=True)
class LiveState:
    """What a live view shows besides the summary; never written to a file."""

    clock_ns: int | None                    # the newest moment the data speaks of (never the wall clock)
    elapsed_s: float | None                 # since the session began
    steps_seen: int
    warming_up: bool
    first_look: bool                        # fewer than FIRST_LOOK_S seconds sampled: numbers still settling
    memory_series: dict[int, tuple[int, ...]]   # the step-memory trend per rank, bytes, oldest first


@dataclass(frozen=True)
class Summary:
    run_name: str
    report: Report
    tool: Tool = field(default_factory=Tool)
    live: LiveState | None = None


def build_summary(rec: Recording, an: Analysis, run_name: str) -> Summary:
    """The summary document of an analysis of ``rec``."""
    return Summary(run_name, an.report)


def to_json(summary: Summary) -> dict[str, Any]:
    """final_summary.json's document: the report's sections under the run's name and the tool."""
    return {"schema_version": SCHEMA_VERSION, "tool": encode(summary.tool), "run_name": summary.run_name,
            **encode(summary.report)}


def from_json(doc: Any) -> Summary:
    """A final_summary.json document read back; SchemaError when it is not schema SCHEMA_VERSION."""
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    if version != SCHEMA_VERSION:
        raise SchemaError(f"schema_version {version if version is not None else 'missing'}, "
                          f"this traceml-attach reads {SCHEMA_VERSION}")
    try:
        return Summary(decode(str, doc.get("run_name"), "$.run_name"), decode(Report, doc),
                       decode(Tool, doc.get("tool"), "$.tool"))
    except DecodeError as exc:
        raise SchemaError(str(exc)) from exc
