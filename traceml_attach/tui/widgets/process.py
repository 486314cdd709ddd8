"""The process panel: each rank's CPU, RSS (with workers), GPU memory, workers and threads."""

from __future__ import annotations

from rich.text import Text

from traceml_attach.tui.viewmodel import ProcessVM
from traceml_attach.tui.widgets._panel import SELECTED, SEVERITY, Panel, line, more, window


class ProcessPanel(Panel):
    TITLE = "Process"

    def lines(self, model: ProcessVM, width: int, height: int) -> list[Text]:
        out = [line(("● ", SEVERITY.get(model.severity, "")), (model.status, SEVERITY.get(model.severity, "")),
                    f"  {model.summary}", width=width),
               line((f"{'rank':<6}{'pid':>8}{'CPU':>6}{'RSS peak':>11}  {'workers':<9}{'thr':>4}  GPU mem", "bold"),
                    width=width)]
        selected = next((i for i, r in enumerate(model.rows) if r.selected), None)
        room = height - len(out) - len(model.notes)
        total = len(model.rows) + model.hidden
        shown = window(len(model.rows), selected, room if total <= room else room - 1)
        for i in shown:
            r = model.rows[i]
            text = line(f"r{r.rank:<5}{r.pid:>8}{r.cpu:>6}{r.rss:>11}  {r.workers:<9}{r.threads:>4}  {r.gpu_mem}",
                        width=width)
            if r.selected:
                text.stylize(SELECTED)
            out.append(text)
        if len(shown) < total:
            out.append(more(total - len(shown), width))
        out += [line(("note: ", "dim"), (n, "dim"), width=width) for n in model.notes]
        return out
