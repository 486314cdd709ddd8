"""The step-time table: per-rank phase times (ms per typical step), the median and worst
rows, skew and WAIT share, with a stacked phase bar when there is room; a rank whose sampling
had problems is marked, with its coverage and the problem on a line below."""

from __future__ import annotations

from rich.text import Text

from traceml_attach.steps.phases import PHASES
from traceml_attach.tui.viewmodel import PHASE_HEADS, StepRow, StepTableVM
from traceml_attach.tui.widgets._panel import PHASE_COLOUR, SELECTED, Panel, line, more, window

RANK_W, STEPS_W, STEP_W, PHASE_W = 10, 6, 8, 7
FIXED_W = RANK_W + STEPS_W + STEP_W + PHASE_W * len(PHASES)


def bar(shares: tuple[float, ...] | None, width: int) -> Text:
    """A stacked bar, one colour per phase, ``width`` cells long."""
    if not shares or width <= 0:
        return Text("")
    total = sum(shares) or 1.0
    cells, used, acc = [], 0, 0.0
    for phase, share in zip(PHASES, shares, strict=True):
        acc += share / total
        n = round(acc * width) - used
        used += n
        cells.append(("█" * n, PHASE_COLOUR[phase]))
    return Text.assemble(*cells)


class StepTable(Panel):
    TITLE = "Step time (ms per typical step)"

    def lines(self, model: StepTableVM, width: int, height: int) -> list[Text]:
        if not model.rows:
            return [line((model.note, "dim"), width=width)]
        bar_w = width - FIXED_W - 1 if width - FIXED_W >= 12 else 0
        ranks = [r for r in model.rows if r.kind == "rank"]
        totals = [r for r in model.rows if r.kind != "rank"]
        selected = next((i for i, r in enumerate(ranks) if r.selected), None)
        # What goes first when rows are short: the skew line, then the totals; one rank row stays.
        skew_line = bool(totals) and height - 1 - len(totals) - 1 >= min(len(ranks), 1)
        if height - 1 - len(totals) - skew_line < 1:
            totals = totals[: max(height - 2, 0)]
        # a rank's sampling problems keep a line under the table while two rank rows would fit
        alert_lines = 1 if model.alerts and height - 1 - len(totals) - skew_line >= 2 else 0
        room = max(height - 1 - len(totals) - skew_line - alert_lines, 1)
        shown = window(len(ranks), selected, room if len(ranks) <= room else max(room - 1, 1))
        out = [self._head(model.phase, bar_w, width)]
        out += [self._row(ranks[i], model.phase, bar_w, width) for i in shown]
        if len(shown) < len(ranks) and room > 1:
            out.append(more(len(ranks) - len(shown), width))
        out += [self._row(r, model.phase, bar_w, width) for r in totals]
        if skew_line:
            out.append(line(("Worst rank ", "dim"), (f"r{model.worst_rank}", "bold"), ("  Skew ", "dim"),
                            (model.skew, "bold"), ("  WAIT share ", "dim"), (model.wait_share, "bold"), width=width))
        elif model.note and len(out) < height - alert_lines:
            # the step time is unknown: the cells are shares of the step, and this says why
            out.append(line((model.note, "yellow"), width=width))
        for alert in model.alerts[: max(height - len(out), 0)]:
            out.append(line(("! ", "bold yellow"), (alert, "yellow"), width=width))
        return out

    def _head(self, phase: str, bar_w: int, width: int) -> Text:
        text = Text.assemble((f"{'Rank':<{RANK_W}}", "bold"), (f"{'Steps':>{STEPS_W}}", "bold"),
                             (f"{'Step':>{STEP_W}}", "bold"), no_wrap=True)
        for p, head in zip(PHASES, PHASE_HEADS, strict=True):
            text.append(f"{head:>{PHASE_W}}", f"bold {PHASE_COLOUR[p]}" + (" underline reverse" if p == phase else ""))
        if bar_w:
            text.append(" " + "phases".center(bar_w), "dim")
        text.truncate(width, overflow="ellipsis")
        return text

    def _row(self, row: StepRow, phase: str, bar_w: int, width: int) -> Text:
        label_style = "bold red" if row.flagged else ("bold" if row.kind != "rank" else "")
        marker = "▶" if row.selected else " "
        if row.alert:   # its sampling had problems: see the alerts under the table
            label = Text.assemble((f"{marker}{row.label}", label_style), (" !", "bold yellow"))
            label.pad_right(RANK_W - len(label))
        else:
            label = Text(f"{marker}{row.label:<{RANK_W - 1}}", label_style)
        text = Text.assemble(label, f"{row.steps:>{STEPS_W}}", (f"{row.step_ms:>{STEP_W}}", "bold"), no_wrap=True)
        for p, value in zip(PHASES, row.phases_ms, strict=True):
            text.append(f"{value:>{PHASE_W}}", "bold reverse" if row.selected and p == phase else "")
        if bar_w:
            text.append(" ")
            text.append_text(bar(row.shares, bar_w))
        if row.kind != "rank":
            text.stylize("italic")
        if row.selected:
            text.stylize(SELECTED)
        text.truncate(width, overflow="ellipsis")
        return text
