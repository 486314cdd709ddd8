"""What the panels share: the base class, colours and the visible-rows window."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from traceml_attach.steps.phases import REGISTRY

SEVERITY = {"critical": "bold red", "warning": "bold yellow", "info": "bold green", "pending": "bold cyan"}
PHASE_COLOUR = {p.name: p.colour for p in REGISTRY}
PHASE_SHORT = {p.name: p.short.lower().rstrip("*") for p in REGISTRY}
SELECTED = "on grey23"


class Panel(Widget):
    """A bordered panel that redraws when it is handed a new (unequal) view-model."""

    DEFAULT_CSS = """
    Panel {
        border: round $primary 40%;
        border-title-color: $text;
        border-title-style: bold;
        padding: 0 1;
    }
    """
    model: reactive[Any] = reactive(None)
    TITLE = ""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = self.TITLE

    def watch_model(self, model: Any) -> None:
        if model is not None:
            self.border_title, self.border_subtitle = self.titles(model)

    def titles(self, model: Any) -> tuple[str, str]:
        """The border's title and subtitle for a model."""
        return self.TITLE, ""

    def render(self) -> RenderableType:
        if self.model is None:
            return Text("waiting for the first samples…", style="dim")
        lines = self.lines(self.model, self.size.width, self.size.height)
        return Group(*(line for line in lines[: self.size.height]))

    def lines(self, model: Any, width: int, height: int) -> list[Text]:
        raise NotImplementedError


def window(count: int, selected: int | None, capacity: int) -> range:
    """The rows to show when only ``capacity`` of ``count`` fit: a window that holds the
    selected one, as close to centred as the ends allow."""
    if capacity <= 0:
        return range(0)
    if count <= capacity:
        return range(count)
    mid = selected if selected is not None else 0
    start = min(max(mid - capacity // 2, 0), count - capacity)
    return range(start, start + capacity)


def line(*parts: str | tuple[str, str], width: int) -> Text:
    """One line that never wraps: cut with an ellipsis at ``width``."""
    text = Text.assemble(*parts, no_wrap=True, overflow="ellipsis")
    text.truncate(width, overflow="ellipsis")
    return text


def more(hidden: int, width: int) -> Text:
    return line((f"… {hidden} more (↑/↓ to move)", "dim"), width=width)
