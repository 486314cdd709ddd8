"""The ranks list: each rank's process and state (alive, stalled, restarted, exited, agent lost),
with its node and local rank in a multi-node session."""

from __future__ import annotations

import textwrap

from rich.text import Text

from traceml_attach.tui.viewmodel import RanksVM
from traceml_attach.tui.widgets._panel import SELECTED, Panel, line, more, window

INDENT = 4   # a wrapped detail's lines under its rank
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
            head: list[str | tuple[str, str]] = [
                ("▶" if r.selected else " ", "bold"), (f"r{r.rank:<{rank_w}}", "bold"),
                (f" {r.node:<{node_w}}" if node_w else "", "cyan"), f"{r.pid:>7} ", ("● ", style),
                (f"{r.status:<{status_w}}", style)]
            prefix = sum(len(part if isinstance(part, str) else part[0]) for part in head)
            spare = height - len(shown) - (len(shown) < total)
            # the selected rank's whole detail, wrapped on the lines the panel has to spare
            pieces = self._wrapped(r.detail, width - prefix, width, spare) if r.selected else [r.detail]
            text = line(*head, (pieces[0], "dim"), width=width)
            if r.selected:
                text.stylize(SELECTED)
            out.append(text)
            out += [line(" " * INDENT, (piece, "dim"), width=width) for piece in pieces[1:]]
        if len(shown) < total:
            out.append(more(total - len(shown), width))
        return out

    @staticmethod
    def _wrapped(detail: str, first_w: int, width: int, spare: int) -> list[str]:
        """``detail`` as its row's part (``first_w`` cells) and at most ``spare`` lines under it, cut
        between words; as it is (its row cuts it) when it fits or there is no room."""
        if len(detail) <= first_w or spare <= 0:
            return [detail]
        first = textwrap.wrap(detail, first_w)[0] if first_w >= 8 else ""   # too narrow: all of it below
        rest = textwrap.wrap(detail[len(first):].strip(), width - INDENT)
        if len(rest) > spare:
            rest = [*rest[:spare - 1], rest[spare - 1][: width - INDENT - 1] + "…"]
        return [first, *rest]
