"""The diagnosis rail: the step-time diagnosis first, then memory, system and process, each
coloured by severity with its why and next action."""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Size
from textual.reactive import reactive

from traceml_attach.tui.viewmodel import DiagnosisVM, RailVM
from traceml_attach.tui.widgets._panel import SEVERITY, Panel, line

WIDE_MAX_LINES = 10   # the rail grows with its text up to this many lines where it may
ASIDE = ("what-if", "slowest")   # lines beside a finding: the first to go where the rail is short
INDENT = 7            # continuation lines start under the text, not under "why"/"next"


class DiagnosisRail(Panel):
    TITLE = "Diagnosis"
    model: reactive[RailVM | None] = reactive(None, layout=True)   # its height follows its text

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self.model is None:
            return 1
        return min(sum(len(self._detail(item, width, wrap=True)) for item in self.model.items), WIDE_MAX_LINES)

    def lines(self, model: RailVM, width: int, height: int) -> list[Text]:
        detailed = [self._detail(item, width, wrap=True) for item in model.items]
        if sum(len(d) for d in detailed) > height:   # does not fit wrapped: one line per fact
            detailed = [self._detail(item, width, wrap=False) for item in model.items]
        if sum(len(d) for d in detailed) > height:   # still too tall: the findings before their what-ifs...
            detailed = [d for d, item in zip(detailed, model.items, strict=True) if item.title not in ASIDE]
        if sum(len(d) for d in detailed) > height:   # ...and why/next for the first only
            detailed = [detailed[0]] + [d[:1] for d in detailed[1:]]
        return [text for d in detailed for text in d]

    def _detail(self, item: DiagnosisVM, width: int, wrap: bool) -> list[Text]:
        style = SEVERITY.get(item.severity, "bold")
        rows: list[list[str | tuple[str, str]]]
        if item.title == "also":
            rows = [[("  + also ", "dim"), (item.status, style), ("  ", ""), item.summary]]
        elif item.title in ("what-if", "slowest"):   # beside the finding above: one line, its assumption dim
            rows = [[(f"    {'⇢ if' if item.title == 'what-if' else '⇢'} ", "dim"), item.summary,
                     (f"  ({item.why})" if item.why and wrap else "", "dim")]]
        else:
            rows = [[("● ", style), (f"{item.title}: ", "dim"), (item.status, style), ("  ", ""), item.summary]]
            if item.why:
                rows.append([("  why  ", "dim"), item.why])
            if item.action:
                rows.append([("  next ", "dim"), (item.action, "italic")])
        out: list[Text] = []
        for parts in rows:
            if not wrap:
                out.append(line(*parts, width=width))
                continue
            first, *rest = Text.assemble(*parts).wrap(self.app.console, width, overflow="fold")
            out.append(first)
            if rest:   # re-wrap what did not fit on the first line, narrower and indented
                rest_text = Text.assemble(*parts)[len(first.plain):]
                rest_text = rest_text[len(rest_text.plain) - len(rest_text.plain.lstrip()):]
                out += [Text(" " * INDENT) + t
                        for t in rest_text.wrap(self.app.console, max(width - INDENT, 1), overflow="fold")]
        return out
