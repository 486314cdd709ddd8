"""The system panel: host CPU and RAM, and each GPU's utilization, memory, temperature, power."""

from __future__ import annotations

from rich.text import Text

from traceml_attach.tui.viewmodel import SystemVM
from traceml_attach.tui.widgets._panel import SEVERITY, Panel, line


class SystemPanel(Panel):
    TITLE = "System"

    def lines(self, model: SystemVM, width: int, height: int) -> list[Text]:
        out = [line(("● ", SEVERITY.get(model.severity, "")), (model.status, SEVERITY.get(model.severity, "")),
                    f"  {model.summary}", width=width),
               line(("CPU ", "bold"), f"{model.cpu:>5} (median)   ", ("RAM ", "bold"),
                    f"{model.ram}" + (f" ({100 * model.ram_share:.0f}%)" if model.ram_share is not None else "")
                    + " peak", width=width)]
        if not model.gpus:
            out.append(line(("no NVIDIA GPU seen by NVML", "dim"), width=width))
            return out
        out.append(line(("GPU   util  memory   temp  power", "bold"), width=width))
        for g in model.gpus:
            out.append(line(f"{g.index:<4}{g.util:>6}{g.mem:>8}{g.temp:>7}{g.power:>7}", width=width))
        return out
