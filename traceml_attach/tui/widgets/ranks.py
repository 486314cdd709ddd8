"""The ranks list: each rank's process and state (alive, stalled, restarted, exited, agent lost),
with its node and local rank in a multi-node session."""

from __future__ import annotations

from rich.text import Text

from traceml_attach.tui.viewmodel import RanksVM
from traceml_attach.tui.widgets._panel import SELECTED, Panel, line, more, window

STATE_STYLE = {"alive": "bold green", "stalled": "bold red", "restarted": "bold yellow", "exited": "bold grey50",
               "agent lost": "bold magenta"}


class RanksList(Panel):
    TITLE = "Ranks (tab / ↑↓)"

    def lines(self, model: RanksVM, width: int, height: int) -> list[Text]:
        if not model.rows:
            return [line(("no rank found yet", "dim"), width=width)]
        selected = next((i for i, r in enumerate(model.rows) if r.selected), None)
        total = len(model.rows) + model.hidden
        shown = window(len(model.rows), selected, height if total <= height else height - 1)
        rank_w = max([3, *(len(model.rows[i].rank) for i in shown)])
        node_w = max((len(model.rows[i].node) for i in shown), default=0)   # 0 on one machine: no column
        status_w = max([8, *(len(model.rows[i].status) + 1 for i in shown)])
        out = []
        for i in shown:
            r = model.rows[i]
            style = STATE_STYLE.get(r.status, "")
            text = line(("▶" if r.selected else " ", "bold"), (f"r{r.rank:<{rank_w}}", "bold"),
                        (f" {r.node:<{node_w}}" if node_w else "", "cyan"), f"{r.pid:>7} ",
                        ("● ", style), (f"{r.status:<{status_w}}", style), (r.detail, "dim"), width=width)
            if r.selected:
                text.stylize(SELECTED)
            out.append(text)
        if len(shown) < total:
            out.append(more(total - len(shown), width))
        return out
