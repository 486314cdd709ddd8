"""Step memory: each rank's trend (sparkline over the session), peak, change and skew."""

from __future__ import annotations

from rich.text import Text

from traceml_attach.tui.viewmodel import MemoryVM
from traceml_attach.tui.widgets._panel import SELECTED, Panel, line, more, window


class MemoryPanel(Panel):
    TITLE = "Step memory"

    def titles(self, model: MemoryVM) -> tuple[str, str]:
        return f"Step memory · {model.source}", ""

    def lines(self, model: MemoryVM, width: int, height: int) -> list[Text]:
        if not model.rows:
            return [line(("no memory samples yet", "dim"), width=width)]
        spark_w = max(width - 5 - 10 - 10 - 1, 0)
        out = [line((f"{'rank':<5}", "bold"), (f"{'trend':<{spark_w}}", "bold"), (f"{'peak':>10}", "bold"),
                    (f"{'change':>10}", "bold"), width=width)]
        selected = next((i for i, r in enumerate(model.rows) if r.selected), None)
        room = height - 2
        total = len(model.rows) + model.hidden
        shown = window(len(model.rows), selected, room if total <= room else room - 1)
        for i in shown:
            r = model.rows[i]
            spark = r.spark[-spark_w:] if spark_w else ""
            text = line((f"r{r.rank:<4}", "bold red" if r.flagged else ""), (f"{spark:<{spark_w}}", "cyan"),
                        f"{r.peak:>10}", f"{r.change:>10}", width=width)
            if r.selected:
                text.stylize(SELECTED)
            out.append(text)
        if len(shown) < total:
            out.append(more(total - len(shown), width))
        out.append(line(("Peak: worst ", "dim"), (f"{model.worst_peak} (r{model.worst_rank})", "bold"),
                        ("  median ", "dim"), (model.median_peak, "bold"), ("  skew ", "dim"), (model.skew, "bold"),
                        width=width))
        # where rising memory goes, as far as the panel has room (the summary has every line)
        for lead in model.leads[:max(height - len(out), 0)]:
            out.append(line(("▸ ", "yellow"), (lead, "yellow"), width=width))
        return out
