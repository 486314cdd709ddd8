"""The ranks list: each rank's process and state (alive, stalled, restarted, exited)."""

from __future__ import annotations

from rich.text import Text

from traceml_attach.tui.viewmodel import RanksVM
from traceml_attach.tui.widgets._panel import SELECTED, Panel, line, more, window

STATE_STYLE = {"alive": "bold green", "stalled": "bold red", "restarted": "bold yellow", "exited": "bold grey50"}


class RanksList(Panel):
    TITLE = "Ranks (tab / ↑↓)"

    def lines(self, model: RanksVM, width: int, height: int) -> list[Text]:
        if not model.rows:
            return [line(("no rank found yet", "dim"), width=width)]
        selected = next((i for i, r in enumerate(model.rows) if r.selected), None)
        shown = window(len(model.rows), selected, height if len(model.rows) <= height else height - 1)
        out = []
        for i in shown:
            r = model.rows[i]
            style = STATE_STYLE.get(r.status, "")
            text = line(("▶" if r.selected else " ", "bold"), (f"r{r.rank:<3}", "bold"), f"{r.pid:>7} ",
                        ("● ", style), (f"{r.status:<8}", style), (r.detail, "dim"), width=width)
            if r.selected:
                text.stylize(SELECTED)
            out.append(text)
        if len(shown) < len(model.rows):
            out.append(more(len(model.rows) - len(shown), width))
        return out
