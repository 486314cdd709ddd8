"""The registry of finding kinds (traceml_attach/diagnose/kinds.py): every kind a rule emits is
registered for the section it appears in, with the evidence class it carries, and no module
names a kind by a string of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from traceml_attach.diagnose import kinds
from traceml_attach.diagnose.kinds import Kind, Section
from traceml_attach.output.summary import Summary, build_summary
from traceml_attach.runtime.pipeline import replay_file
from traceml_attach.steps.classify import load_rules

PACKAGE = Path(kinds.__file__).parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
# recorded real streams that between them reach every section's usual findings
STREAMS = ["input_bound", "wait_heavy", "balanced", "fw_hf_trainer", "mem_loss", "ddp_input_straggler"]


def kind_literals(path: Path) -> list[tuple[int, str]]:
    names = {k.value for k in Kind}
    tree = ast.parse(path.read_text())
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names]


def test_no_module_names_a_kind_by_string():
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line} {value!r}"
                 for path in sorted(PACKAGE.rglob("*.py")) if path.name != "kinds.py"
                 for line, value in kind_literals(path)]
    assert offenders == []


def test_the_check_finds_a_literal(tmp_path: Path):
    source = tmp_path / "rule.py"
    source.write_text('def rule():\n    return ("MEMORY_CREEP", "info")\n')
    assert kind_literals(source) == [(2, "MEMORY_CREEP")]


def test_each_kind_once_per_section_and_one_status_per_name():
    keys = [(s.section, s.kind) for s in kinds.SPECS]
    assert len(keys) == len(set(keys))
    for kind in Kind:
        labels = {s.status for s in kinds.SPECS if s.kind is kind}
        assert len(labels) == 1, (kind, labels)   # a name reads the same in every section
    assert {s.kind for s in kinds.SPECS} == set(Kind)   # no kind without its entry


def test_unknown_kinds_read_as_their_name():
    assert kinds.status("SOMETHING_NEWER") == "SOMETHING NEWER"
    assert kinds.family("SOMETHING_NEWER") is None
    assert kinds.status(Kind.MEMORY_CREEP_EARLY) == "MEMORY CREEP (EARLY)"
    assert kinds.not_judged(Kind.WARMUP) and not kinds.not_judged(Kind.BALANCED)


def sections(summary: Summary) -> list[tuple[Section, object]]:
    report = summary.report
    out: list[tuple[Section, object]] = [(Section.STEP_TIME, f) for f in report.step_time.findings]
    out += [(Section.STEP_MEMORY, report.step_memory.diagnosis), (Section.SYSTEM, report.system.diagnosis),
            (Section.PROCESS, report.process.diagnosis), (Section.SAMPLING, report.sampling.diagnosis)]
    return out


@pytest.mark.parametrize("name", STREAMS)
def test_every_emitted_finding_is_registered_with_its_evidence(name: str):
    pipeline, problem = replay_file(FIXTURES / f"{name}.msgpack", load_rules())
    assert problem is None
    summary = build_summary(pipeline.rec, pipeline.window_analysis(), name)
    wrong = []
    for section, finding in sections(summary):
        entry = kinds.spec(finding.kind, section)
        if entry is None:
            wrong.append((section, finding.kind, "not registered"))
        elif entry.evidence is not None and not isinstance(finding.evidence, entry.evidence):
            wrong.append((section, finding.kind, type(finding.evidence).__name__))
    assert wrong == []
