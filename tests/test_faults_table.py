"""docs/faults.md and the fault tests, in step: every test the table names exists, every fault test
is named in the table, and every exit code it gives is one the README documents."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "faults.md"
FAULT_FILES = ("test_faults_disk.py", "test_faults_process.py", "test_faults_sampling.py", "test_faults_network.py",
               "test_fuzz_decoders.py")


def rows() -> list[dict[str, str]]:
    lines = [line for line in TABLE.read_text().splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
            for line in lines[2:]]


def functions_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def named(row: dict[str, str]) -> list[tuple[str, str]]:
    return [(m[1], m[2]) for m in re.finditer(r"`tests/(\w+\.py)::(\w+)`", row["tests"])]


def test_the_table_has_the_issues_faults_each_with_a_test():
    faults = [row["fault"] for row in rows()]
    for fault in ("SIGSTOP", "exec()", "py-spy is killed", "ENOSPC", "two attachers", "killed -9", "1,000 threads",
                  "PID namespace", "collector's port", "py-spy cannot read"):
        assert any(fault in f for f in faults), fault
    for row in rows():
        assert named(row), row["fault"]
        assert row["what the user sees"] and row["what is kept"] and row["exit"]


def test_every_test_the_table_names_exists():
    for row in rows():
        for file, name in named(row):
            assert name in functions_in(ROOT / "tests" / file), f"{file}::{name} ({row['fault']})"


def test_every_fault_test_is_in_the_table():
    listed = {pair for row in rows() for pair in named(row)}
    for file in FAULT_FILES:
        for name in functions_in(ROOT / "tests" / file):
            assert (file, name) in listed, f"tests/{file}::{name} is not in docs/faults.md"


def test_every_exit_code_in_the_table_is_documented():
    readme = (ROOT / "README.md").read_text()
    documented = set(re.findall(r"^\| (\d+) \|", readme, re.MULTILINE))
    for row in rows():
        for code in re.findall(r"\b(\d+)\b", row["exit"]):
            assert code in documented, (code, row["fault"])
