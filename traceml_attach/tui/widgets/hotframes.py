"""Hot frames: the functions that cost the time inside the selected phase on the selected rank."""

from __future__ import annotations

from rich.text import Text

from traceml_attach.steps.phases import PHASES
from traceml_attach.tui.viewmodel import HotFramesVM
from traceml_attach.tui.widgets._panel import PHASE_COLOUR, PHASE_SHORT, Panel, line


class HotFramesPanel(Panel):
    TITLE = "Hot frames"

    def titles(self, model: HotFramesVM) -> tuple[str, str]:
        return f"Hot frames · rank {model.rank} · {model.phase} ({model.phase_ms})", ""

    def lines(self, model: HotFramesVM, width: int, height: int) -> list[Text]:
        tabs = Text(no_wrap=True)
        for p in PHASES:
            style = f"bold reverse {PHASE_COLOUR[p]}" if p == model.phase else "dim"
            tabs.append(f" {PHASE_SHORT[p]} ", style)
        tabs.append("  (f / ←→)", "dim")
        tabs.truncate(width, overflow="ellipsis")
        out = [tabs]
        if not model.rows:
            return [*out, line((model.note, "dim"), width=width)]
        spare = height - 1 - len(model.rows)   # lines left for "via" under the top rows
        for row in model.rows:
            out.append(line((f"{row.share:>4} ", "bold"), (f"{row.ms:>9}  ", "dim"), row.frame, width=width))
            if spare > 0 and row.via:
                spare -= 1
                out.append(line(("                via ", "dim"), (row.via, "italic"), width=width))
        return out
