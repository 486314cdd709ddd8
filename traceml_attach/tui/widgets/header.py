"""The top line: what is attached (and its nodes), the data's clock and the mode (live, paused,
replay)."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from traceml_attach.tui.viewmodel import HeaderVM

MODE_STYLE = {"LIVE": "bold black on green", "PAUSED": "bold black on yellow", "REPLAY": "bold black on cyan"}


class HeaderBar(Widget):
    DEFAULT_CSS = """
    HeaderBar { height: 1; background: $panel; }
    """
    model: reactive[HeaderVM | None] = reactive(None)

    def render(self) -> RenderableType:
        width = self.size.width
        if self.model is None:
            return Text(" traceml attach · starting…", style="bold")
        m = self.model
        style = MODE_STYLE.get(m.mode, "bold black on cyan")
        right = Text.assemble((f" {m.mode} ", style), f"  {m.clock} ")
        left = Text.assemble((f" {m.title} ", "bold"), ("│ ", "dim"))
        if m.nodes:   # a multi-node session: before the target, which is cut first
            left.append_text(Text.assemble((m.nodes, "bold red" if m.nodes_lost else "bold"), (" │ ", "dim")))
        if m.change:   # the moment the step time changed: before the target, which is cut first
            left.append_text(Text.assemble((m.change, "bold yellow"), (" │ ", "dim")))
        left.append(m.target)
        if width - len(left) - len(right) > len(m.sampling) + 4:
            left.append_text(Text.assemble(("  │ ", "dim"), (m.sampling, "dim")))
        left.truncate(max(width - len(right), 0), overflow="ellipsis")
        left.pad_right(max(width - len(right) - len(left), 0))
        return Text.assemble(left, right, no_wrap=True)
