"""Map a sampled stack to a training phase, from one table of rules (rules.toml)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

from traceml_attach.ingest.model import CodeFrame, Stack
from traceml_attach.steps.phases import PHASES

DEFAULT_RULES_FILE = Path(__file__).with_name("rules.toml")
_WHERE = ("any", "leaf", "loop")


class RulesError(Exception):
    """A rules file that cannot be used."""


@dataclass(frozen=True)
class Rule:
    phase: str
    label: str | None = None
    func: re.Pattern[str] | None = None
    file: re.Pattern[str] | None = None
    src: re.Pattern[str] | None = None
    ctx: re.Pattern[str] | None = None
    where: str = "any"

    def matches(self, frame: CodeFrame, is_leaf: bool, is_loop: bool) -> bool:
        if self.where == "leaf" and not is_leaf:
            return False
        if self.where == "loop" and not is_loop:
            return False
        return (
            _hit(self.func, frame.name)
            and _hit(self.file, frame.file)
            and _hit(self.src, frame.src)
            and _hit(self.ctx, frame.ctx)
        )


def _hit(pattern: re.Pattern[str] | None, text: str | None) -> bool:
    return pattern is None or (text is not None and pattern.search(text) is not None)


@dataclass(frozen=True)
class Verdict:
    phase: str
    label: str | None  # what kind of wait, when phase == "wait"
    depth: int | None  # index of the frame that decided, None when nothing matched


def parse_rules(data: dict[str, Any], origin: str) -> list[Rule]:
    rules = []
    for i, raw in enumerate(data.get("rule", [])):
        where = f"{origin}: rule {i + 1}"
        phase = raw.get("phase")
        if phase not in PHASES:
            raise RulesError(f"{where}: phase must be one of {', '.join(PHASES)}, not {phase!r}")
        if raw.get("where", "any") not in _WHERE:
            raise RulesError(f"{where}: where must be one of {', '.join(_WHERE)}")
        unknown = set(raw) - {"phase", "label", "func", "file", "src", "ctx", "where"}
        if unknown:
            raise RulesError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
        try:
            patterns = {k: re.compile(raw[k]) for k in ("func", "file", "src", "ctx") if k in raw}
        except re.error as exc:
            raise RulesError(f"{where}: bad regular expression ({exc})") from exc
        if not patterns:
            raise RulesError(f"{where}: give at least one of func, file, src, ctx")
        rules.append(Rule(phase=phase, label=raw.get("label"), where=raw.get("where", "any"), **patterns))
    return rules


def load_rules(extra: Path | None = None) -> list[Rule]:
    """The default table, preceded by the rules of ``extra`` if given."""
    rules = []
    files = ([extra] if extra else []) + [DEFAULT_RULES_FILE]
    for path in files:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise RulesError(f"cannot read rules file {path}: {exc.strerror or exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise RulesError(f"rules file {path} is not valid TOML ({exc})") from exc
        rules.extend(parse_rules(data, str(path)))
    return rules


def classify(stack: Stack, rules: list[Rule], loop_depth: int | None) -> Verdict:
    """Scan from the loop frame (or the root) to the leaf; the first matching frame decides."""
    start = loop_depth if loop_depth is not None and loop_depth < len(stack) else 0
    leaf = len(stack) - 1
    for depth in range(start, len(stack)):
        frame = stack[depth]
        for rule in rules:
            if rule.matches(frame, depth == leaf, depth == loop_depth):
                return Verdict(rule.phase, rule.label if rule.phase == "wait" else None, depth)
    return Verdict("wait", "other", None)


def classifier(rules: list[Rule], loop_depth: int | None) -> Callable[[Stack], Verdict]:
    """``classify`` for the many spans of one window. A recording interns its stacks, so a
    window repeats a few dozen stack objects thousands of times: each is classified once."""
    memo: dict[int, tuple[Stack, Verdict]] = {}   # keyed by id(); holding the stack keeps the id unique

    def verdict(stack: Stack) -> Verdict:
        hit = memo.get(id(stack))
        if hit is None:
            hit = memo[id(stack)] = (stack, classify(stack, rules, loop_depth))
        return hit[1]

    return verdict
