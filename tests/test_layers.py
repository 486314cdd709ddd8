"""The layers only look down: agent -> ingest -> steps -> diagnose (pure) -> output -> tui ->
runtime -> cli, with the policy and the error type beneath all of traceml_attach. A module may
import from its own layer's package or from a lower layer, never from a higher one or a sibling
(STYLE.md, "one way through"). The shared test-and-bench helpers (testkit/) are not shipped and
no shipped module imports them; tests/ is imported by nothing outside it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {   # package (or top-level module) -> its layer; equal layers may not import each other
    "traceml_agent": 0,
    "traceml_attach.policy": 1, "traceml_attach.errors": 1, "traceml_attach": 1,
    "traceml_attach.ingest": 2,
    "traceml_attach.steps": 3, "traceml_attach.collect": 3,
    "traceml_attach.diagnose": 4,
    "traceml_attach.output": 5,
    "traceml_attach.tui": 6,
    "traceml_attach.runtime": 7,
    "traceml_attach.cli": 8,
    "traceml_attach.__main__": 9,
}


def unit(module: str) -> str:
    """The layered unit a module belongs to: its package under traceml_attach, or agent."""
    parts = module.split(".")
    if parts[0] == "traceml_agent":
        return "traceml_agent"
    if parts[0] != "traceml_attach":
        return parts[0]
    return ".".join(parts[:2]) if len(parts) > 1 else "traceml_attach"


def imports(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
    return out


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def upward_imports(paths: list[Path], source: str | None = None) -> list[str]:
    wrong = []
    for path in paths:
        here = unit(module_name(path))
        for line, target in imports(path, source):
            there = unit(target)
            if there == here or there not in LAYERS:
                continue
            if LAYERS[there] >= LAYERS[here]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} {here} imports {target}")
    return wrong


def shipped() -> list[Path]:
    return sorted([*(ROOT / "traceml_attach").rglob("*.py"), *(ROOT / "traceml_agent").rglob("*.py")])


def test_no_import_runs_against_the_layer_order():
    assert upward_imports(shipped()) == []


def test_the_walk_catches_an_upward_import():
    probe = ROOT / "traceml_attach" / "diagnose" / "probe.py"
    found = upward_imports([probe], "from traceml_attach.steps.phases import PHASES\n"
                                    "from traceml_attach.cli.main import main\n")
    assert found == ["traceml_attach/diagnose/probe.py:2 traceml_attach.diagnose imports traceml_attach.cli.main"]


def test_shipped_code_imports_no_test_helpers():
    wrong = [f"{p.relative_to(ROOT)}:{line} {target}" for p in shipped() for line, target in imports(p)
             if target.split(".")[0] in ("tests", "testkit", "torch")]
    assert wrong == []


def test_nothing_outside_tests_imports_from_tests():
    paths = [p for folder in ("bench", "docs", ".ci", "examples", "testkit") for p in (ROOT / folder).rglob("*.py")]
    wrong = [f"{p.relative_to(ROOT)}:{line} {target}" for p in paths for line, target in imports(p)
             if target.split(".")[0] == "tests"]
    assert wrong == []
