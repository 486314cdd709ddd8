"""final_summary.json against its documentation and its types: every field the serializer can
emit is documented in docs/summary-schema.md, every key it emits on the recorded streams is one
of those, and the file reads back into the same report."""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest

from testkit.tui_support import recorded_feed
from tests.report_cases import feed_with_errors, hung_feed
from tests.test_golden import EXPECTED, golden_summary
from traceml_attach.diagnose.finding import EVIDENCE_TYPES, Finding
from traceml_attach.diagnose.report import (
    Problem,
    ProcessReport,
    Report,
    SamplingReport,
    SessionReport,
    StepMemoryReport,
    StepTimeReport,
    SystemReport,
)
from traceml_attach.output.summary import SchemaError, Summary, from_json, to_json

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "summary-schema.md"
FIXTURES = ROOT / "tests" / "fixtures"

TOP = "Top level"
SECTIONS: dict[type, str] = {StepTimeReport: "step_time", StepMemoryReport: "step_memory", SystemReport: "system",
                             ProcessReport: "process", SamplingReport: "sampling", SessionReport: "session"}
SHARED: dict[type, str] = {Finding: "Finding", Problem: "Problem",
                           **{t: f"Evidence: {t.TYPE}" for t in EVIDENCE_TYPES}}
# what the keys of a JSON object stand for, by the field that holds it (one name per level)
KEYS = {"ranks": ["<rank>"], "gpus": ["<gpu>"], "phases_ms": ["<phase>"], "shares": ["<phase>"],
        "wait_labels": ["<label>"], "hot_frames": ["<rank>", "<phase>"], "kinds": ["<kind>"], "rates": ["<rank>"]}
ANY = object()   # walk a type, not a value: every field it can have
Entry = tuple[str, str]   # (table, field path inside it)


def _fields(cls: type) -> dict[str, Any]:
    """A dataclass's JSON keys and their types, derived properties and the evidence tag included."""
    hints = typing.get_type_hints(cls)
    out = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    for name in getattr(cls, "_json_derived", ()):
        out[name] = typing.get_type_hints(getattr(cls, name).fget)["return"]
    if getattr(cls, "TYPE", None) is not None:
        out["type"] = str
    return out


def walk(tp: Any, value: Any, table: str, path: str, keys: list[str], out: set[Entry], seen: set[type]) -> None:
    """Add (table, path) for every field inside a value of type ``tp`` (of any value when
    ``value`` is ANY; else the keys ``value`` has, known to ``tp`` or not)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if value is None:
        return
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if value is not ANY:
            tagged = [a for a in options if getattr(a, "TYPE", None) is not None]
            if tagged and isinstance(value, dict):
                options = [a for a in tagged if value.get("type") == a.TYPE]
            else:
                options = options[:1]
        for option in options:
            walk(option, value, table, path, keys, out, seen)
    elif origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        for item in ([ANY] if value is ANY else value):
            walk(args[0], item, table, f"{path}[]", keys, out, seen)
    elif origin is dict:
        key = keys[0] if keys else "<key>"
        for item in ([ANY] if value is ANY else value.values()):
            walk(args[1], item, table, f"{path}.{key}", keys[1:], out, seen)
    elif dataclasses.is_dataclass(tp):
        if tp in SECTIONS and table == TOP:
            table, base = SECTIONS[tp], ""
        elif tp in SHARED:
            if value is ANY and tp in seen:
                return
            seen.add(tp)
            table, base = SHARED[tp], ""
        else:
            base = f"{path}." if path else ""
        fields = _fields(tp)
        for name in (fields if value is ANY else value):
            out.add((table, base + name))
            if name in fields:
                walk(fields[name], value if value is ANY else value[name], table, base + name,
                     KEYS.get(name, []), out, seen)


def emitted(doc: dict[str, Any]) -> set[Entry]:
    out: set[Entry] = {(TOP, key) for key in ("schema_version", "tool", "run_name")}
    out |= {(TOP, f"tool.{key}") for key in doc["tool"]}
    walk(Report, {k: v for k, v in doc.items() if k not in ("schema_version", "tool", "run_name")},
         TOP, "", [], out, set())
    return out


def possible() -> set[Entry]:
    out: set[Entry] = {(TOP, "schema_version"), (TOP, "tool"), (TOP, "tool.name"), (TOP, "tool.version"),
                       (TOP, "run_name")}
    walk(Report, ANY, TOP, "", [], out, set())
    return out


def documented() -> set[Entry]:
    """(table, field) of every row of docs/summary-schema.md: a '## ' heading names the table
    (its text between backticks, when it has some), a row's first cell the field."""
    out: set[Entry] = set()
    table = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            named = re.search(r"`([^`]+)`", line)
            table = named.group(1) if named else line[3:].strip()
        elif table and (cell := re.match(r"\|\s*`([^`]+)`\s*\|", line)):
            out.add((table, cell.group(1)))
    return out


# The golden streams' summaries, the torchrun straggler's, a hang, and sampling that failed: made
# when a test asks for one (once a worker), not at collection, where each worker made them all twice
SUMMARIES = [*EXPECTED, "ddp_input_straggler", "hang", "failed"]


def summary_of(name: str) -> Summary:
    if name in EXPECTED:
        return golden_summary(name)
    if name == "ddp_input_straggler":
        return recorded_feed(name).document()
    if name == "hang":
        return hung_feed().document()
    errors = ((1, "pyspy_failed", "py-spy failed on process {pid}: no error message"),
              (None, "analysis_failed", "ZeroDivisionError: division by zero"))
    return feed_with_errors(*errors).document()


def test_every_field_the_serializer_can_emit_is_documented():
    missing = sorted(possible() - documented())
    assert not missing, "document these in docs/summary-schema.md (table, field): " + repr(missing)


def test_the_documentation_names_no_field_that_does_not_exist():
    stale = sorted(documented() - possible())
    assert not stale, "docs/summary-schema.md documents fields the report no longer has: " + repr(stale)


@pytest.mark.parametrize("name", SUMMARIES)
def test_every_key_emitted_is_a_documented_field(name: str):
    summary = summary_of(name)
    doc = json.loads(json.dumps(to_json(summary)))
    unknown = sorted(emitted(doc) - documented())
    assert not unknown, f"{name}: undocumented keys {unknown!r}"


@pytest.mark.parametrize("name", SUMMARIES)
def test_a_saved_summary_reads_back_into_the_same_report(name: str):
    summary = summary_of(name)
    saved = from_json(json.loads(json.dumps(to_json(summary))))
    assert saved == Summary(summary.run_name, summary.report, summary.tool), name


def test_ranks_are_integers_in_values_and_strings_as_keys():
    doc = json.loads(json.dumps(to_json(recorded_feed("ddp_input_straggler").document())))
    diagnosis = doc["step_time"]["diagnosis"]
    assert diagnosis["worst_rank"] == 1
    assert doc["step_time"]["worst"]["rank"] in (0, 1)
    assert list(doc["step_time"]["ranks"]) == ["0", "1"]
    evidence = diagnosis["evidence"]
    assert evidence["type"] == "straggler" and list(evidence["ranks"]) == ["0", "1"]
    assert evidence["score"] > 0.1 and evidence["input_excess_share"] > 0


@pytest.mark.parametrize(("change", "words"), [
    (lambda d: d.update(schema_version=1), "schema_version 1"),
    (lambda d: d.pop("schema_version"), "schema_version missing"),
    (lambda d: d["step_time"].pop("ranks"), "$.step_time: no field 'ranks'"),
    (lambda d: d["step_time"]["ranks"]["0"].update(steps="many"), "$.step_time.ranks.0.steps: expected int"),
    (lambda d: d["step_time"]["findings"][0]["evidence"].update(type="vibes"), "a known evidence type"),
])
def test_a_summary_of_another_schema_or_damaged_is_refused_in_one_line(change, words):
    from tests.test_golden import replay

    doc = json.loads(json.dumps(to_json(replay("wait_heavy"))))
    change(doc)
    with pytest.raises(SchemaError) as err:
        from_json(doc)
    assert words in str(err.value) and "\n" not in str(err.value)
