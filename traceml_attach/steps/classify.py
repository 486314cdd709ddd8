"""Map a sampled stack to a training phase, from one table of rules (rules.toml)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

from traceml_attach.ingest.model import CodeFrame, Stack
from traceml_attach.steps.phases import PHASES, yields

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
    below: re.Pattern[str] | None = None   # a function deeper in the stack (what the line calls)
    where: str = "any"
    framework: str | None = None   # the framework a stack this rule decides belongs to

    def matches(self, frame: CodeFrame, is_leaf: bool, is_loop: bool, deeper: Sequence[CodeFrame] = ()) -> bool:
        if self.where == "leaf" and not is_leaf:
            return False
        if self.where == "loop" and not is_loop:
            return False
        return (
            _hit(self.func, frame.name)
            and _hit(self.file, frame.file)
            and _hit(self.src, frame.src)
            and _hit(self.ctx, frame.ctx)
            and (self.below is None or any(self.below.search(f.name) for f in deeper))
        )


def _hit(pattern: re.Pattern[str] | None, text: str | None) -> bool:
    return pattern is None or (text is not None and pattern.search(text) is not None)


@dataclass(frozen=True)
class LoopRule:
    """A function that is the training loop although it lives in a package (a framework's)."""

    framework: str                  # how the loop is named, e.g. "HF Trainer (transformers 5.x)"
    func: re.Pattern[str] | None = None
    file: re.Pattern[str] | None = None

    def matches(self, name: str, file: str) -> bool:
        return _hit(self.func, name) and _hit(self.file, file)


@dataclass(frozen=True)
class Rules:
    """The phase rules, in the order they are tried, and the loop rules."""

    phases: tuple[Rule, ...]
    loops: tuple[LoopRule, ...] = ()


@dataclass(frozen=True)
class Verdict:
    phase: str
    label: str | None  # what kind of wait, when phase == "wait"
    depth: int | None  # index of the frame that decided, None when nothing matched
    framework: str | None = None   # the deciding rule's framework


def _patterns(raw: dict[str, Any], keys: tuple[str, ...], where: str) -> dict[str, re.Pattern[str]]:
    try:
        patterns = {k: re.compile(raw[k]) for k in keys if k in raw}
    except re.error as exc:
        raise RulesError(f"{where}: bad regular expression ({exc})") from exc
    if not patterns:
        raise RulesError(f"{where}: give at least one of {', '.join(keys)}")
    return patterns


def _known_keys(raw: dict[str, Any], known: set[str], where: str) -> None:
    unknown = set(raw) - known
    if unknown:
        raise RulesError(f"{where}: unknown keys {', '.join(sorted(unknown))}")


def parse_rules(data: dict[str, Any], origin: str) -> Rules:
    unknown_tables = set(data) - {"rule", "loop"}
    if unknown_tables:
        raise RulesError(f"{origin}: unknown tables {', '.join(sorted(unknown_tables))} (use [[rule]] or [[loop]])")
    rules = []
    for i, raw in enumerate(data.get("rule", [])):
        where = f"{origin}: rule {i + 1}"
        phase = raw.get("phase")
        if phase not in PHASES:
            raise RulesError(f"{where}: phase must be one of {', '.join(PHASES)}, not {phase!r}")
        if raw.get("where", "any") not in _WHERE:
            raise RulesError(f"{where}: where must be one of {', '.join(_WHERE)}")
        _known_keys(raw, {"phase", "label", "func", "file", "src", "ctx", "below", "where", "framework"}, where)
        patterns = _patterns(raw, ("func", "file", "src", "ctx", "below"), where)
        rules.append(Rule(phase=phase, label=raw.get("label"), where=raw.get("where", "any"),
                          framework=raw.get("framework"), **patterns))
    loops = []
    for i, raw in enumerate(data.get("loop", [])):
        where = f"{origin}: loop {i + 1}"
        _known_keys(raw, {"framework", "func", "file"}, where)
        if not isinstance(raw.get("framework"), str) or not raw["framework"]:
            raise RulesError(f'{where}: name the loop with framework = "..."')
        loops.append(LoopRule(raw["framework"], **_patterns(raw, ("func", "file"), where)))
    return Rules(tuple(rules), tuple(loops))


def load_rules(extra: Path | None = None) -> Rules:
    """The default table, preceded by the rules of ``extra`` if given."""
    phases: list[Rule] = []
    loops: list[LoopRule] = []
    files = ([extra] if extra else []) + [DEFAULT_RULES_FILE]
    for path in files:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise RulesError(f"cannot read rules file {path}: {exc.strerror or exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise RulesError(f"rules file {path} is not valid TOML ({exc})") from exc
        parsed = parse_rules(data, str(path))
        phases.extend(parsed.phases)
        loops.extend(parsed.loops)
    return Rules(tuple(phases), tuple(loops))


def classify(stack: Stack, rules: Rules, loop_depth: int | None, feeding: frozenset[int] = frozenset()) -> Verdict:
    """Scan from the loop frame (or the root) to the leaf. The first matching frame decides,
    unless a frame inside it matches a phase that its phase yields to (``phases.NESTING``:
    forward and backward inside an optimizer's closure, compilation inside a compiled call).
    Where no rule decides, a line of the loop frame among ``feeding`` (its lines that make what
    the loss is computed from: dataflow.py) is input: a loader written by hand, whatever its name."""
    start = loop_depth if loop_depth is not None and loop_depth < len(stack) else 0
    leaf = len(stack) - 1
    found: Verdict | None = None
    for depth in range(start, len(stack)):
        frame = stack[depth]
        deeper = stack[depth + 1:]
        for rule in rules.phases:
            if rule.matches(frame, depth == leaf, depth == loop_depth, deeper):
                label = rule.label if rule.phase == "wait" else None
                if found is None or yields(found.phase, found.label, rule.phase, label):
                    found = Verdict(rule.phase, label, depth, rule.framework)
                break
        if found is not None and not yields(found.phase, found.label):
            break
    if found is None and loop_depth is not None and loop_depth < len(stack) and stack[loop_depth].line in feeding:
        return Verdict("input", None, loop_depth)
    return found or Verdict("wait", "other", None)


def classifier(rules: Rules, loop_depth: int | None, feeding: frozenset[int] = frozenset()
               ) -> Callable[[Stack], Verdict]:
    """``classify`` for the many spans of one window. A recording interns its stacks, so a
    window repeats a few dozen stack objects thousands of times: each is classified once."""
    memo: dict[int, tuple[Stack, Verdict]] = {}   # keyed by id(); holding the stack keeps the id unique

    def verdict(stack: Stack) -> Verdict:
        hit = memo.get(id(stack))
        if hit is None:
            hit = memo[id(stack)] = (stack, classify(stack, rules, loop_depth, feeding))
        return hit[1]

    return verdict
