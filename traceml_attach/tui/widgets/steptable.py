"""The step-time table: per-rank phase times (ms per typical step), the median and worst
rows, skew and WAIT share, with a stacked phase bar when there is room; a rank whose sampling
had problems is marked, with its coverage and the problem on a line below. Past
words.MANY_RANKS ranks it summarises: the slowest ranks, the selected one and the spread."""

from __future__ import annotations

from rich.text import Text

from traceml_attach.steps.phases import PHASES
from traceml_attach.tui.viewmodel import PHASE_HEADS, StepRow, StepTableVM
from traceml_attach.tui.widgets._panel import PHASE_COLOUR, SELECTED, Panel, line, more, window

RANK_W, STEPS_W, STEP_W, PHASE_W = 10, 6, 8, 7   # RANK_W: the least; a longer label widens it
NUMBERS_W = STEPS_W + STEP_W + PHASE_W * len(PHASES)
SPREAD_KEEP = ("max", "p50", "p90", "min")   # the spread rows that stay first when rows are short


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
    _blocked = False

    def lines(self, model: StepTableVM, width: int, height: int) -> list[Text]:
        if not model.rows:
            return [line((model.note, "dim"), width=width)]
        # marker, label and, on a rank with problems, " !"; one space before the numbers
        rank_w = max([RANK_W, *(len(r.label) + (4 if r.alert else 2) for r in model.rows)])
        self._blocked = any(r.blocked_ms is not None for r in model.rows)   # synchronized ranks: its own column
        numbers_w = NUMBERS_W + (PHASE_W + 1 if self._blocked else 0)
        bar_w = width - rank_w - numbers_w - 1 if width - rank_w - numbers_w >= 12 else 0
        ranks = [r for r in model.rows if r.kind == "rank"]
        totals = [r for r in model.rows if r.kind != "rank"]
        if model.hidden:
            return self._summary(model, ranks, totals, (bar_w, rank_w, width), height)
        selected = next((i for i, r in enumerate(ranks) if r.selected), None)
        # What goes first when rows are short: the skew line, then the totals; one rank row stays.
        skew_line = bool(totals) and height - 1 - len(totals) - 1 >= min(len(ranks), 1)
        if height - 1 - len(totals) - skew_line < 1:
            totals = totals[: max(height - 2, 0)]
        # a rank's sampling problems keep a line under the table while two rank rows would fit
        alert_lines = 1 if model.alerts and height - 1 - len(totals) - skew_line >= 2 else 0
        room = max(height - 1 - len(totals) - skew_line - alert_lines, 1)
        shown = window(len(ranks), selected, room if len(ranks) <= room else max(room - 1, 1))
        out = [self._head(model.phase, bar_w, width, rank_w)]
        out += [self._row(ranks[i], model.phase, (bar_w, rank_w, width)) for i in shown]
        if len(shown) < len(ranks) and room > 1:
            out.append(more(len(ranks) - len(shown), width))
        out += [self._row(r, model.phase, (bar_w, rank_w, width)) for r in totals]
        if skew_line:
            out.append(self._skew(model, width))
        elif model.note and len(out) < height - alert_lines:
            # the step time is unknown: the cells are shares of the step, and this says why
            out.append(line((model.note, "yellow"), width=width))
        for alert in model.alerts[: max(height - len(out), 0)]:
            out.append(line(("! ", "bold yellow"), (alert, "yellow"), width=width))
        return out

    def _summary(self, model: StepTableVM, ranks: list[StepRow], spread: list[StepRow],
                 widths: tuple[int, int, int], height: int) -> list[Text]:
        """Many ranks: the slowest worst first (and the selected one), how many more there are,
        the spread and the skew. When rows are short, the slowest and the selected rank stay,
        then the spread's max and p50; the other lines go while three rank rows fit."""
        room = height - 1
        keep = [label for label in SPREAD_KEEP if any(r.label == label for r in spread)][: max(room - 2, 0)]
        spread = [r for r in spread if r.label in keep]
        room -= len(spread)
        skew_line = room >= 4 and (model.worst_rank is not None or bool(model.note))
        room -= skew_line
        more_line = room >= 4
        room -= more_line
        alert_lines = 1 if model.alerts and room >= 4 else 0
        room -= alert_lines
        shown = list(range(min(len(ranks), max(room, 1))))
        selected = next((i for i, r in enumerate(ranks) if r.selected), None)
        if selected is not None and selected not in shown:
            shown[-1] = selected
        out = [self._head(model.phase, widths[0], widths[2], widths[1])]
        out += [self._row(ranks[i], model.phase, widths) for i in shown]
        if more_line:
            out.append(line((f"… {model.hidden + len(ranks) - len(shown)} more ranks; the slowest are listed "
                             "(↑/↓ selects any)", "dim"), width=widths[2]))
        out += [self._row(r, model.phase, widths) for r in spread]
        if skew_line:
            out.append(self._skew(model, widths[2]) if model.worst_rank is not None
                       else line((model.note, "yellow"), width=widths[2]))
        out += [line(("! ", "bold yellow"), (alert, "yellow"), width=widths[2]) for alert in model.alerts[:alert_lines]]
        return out

    def _skew(self, model: StepTableVM, width: int) -> Text:
        return line(("Worst rank ", "dim"), (f"r{model.worst_rank}", "bold"), ("  Skew ", "dim"),
                    (model.skew, "bold"), ("  WAIT share ", "dim"), (model.wait_share, "bold"), width=width)

    def _head(self, phase: str, bar_w: int, width: int, rank_w: int) -> Text:
        text = Text.assemble((f"{'Rank':<{rank_w}}", "bold"), (f"{'Steps':>{STEPS_W}}", "bold"),
                             (f"{'Step':>{STEP_W}}", "bold"), no_wrap=True)
        for p, head in zip(PHASES, PHASE_HEADS, strict=True):
            text.append(f"{head:>{PHASE_W}}", f"bold {PHASE_COLOUR[p]}" + (" underline reverse" if p == phase else ""))
        if self._blocked:
            text.append(f"{'Blkd*':>{PHASE_W + 1}}", "bold")
        if bar_w:
            text.append(" " + "phases".center(bar_w), "dim")
        text.truncate(width, overflow="ellipsis")
        return text

    def _row(self, row: StepRow, phase: str, widths: tuple[int, int, int]) -> Text:
        """One row; ``widths``: the bar's, the rank column's and the panel's."""
        bar_w, rank_w, width = widths
        label_style = "bold red" if row.flagged else ("bold" if row.kind != "rank" else "")
        marker = "▶" if row.selected else " "
        if row.alert:   # its sampling had problems: see the alerts under the table
            label = Text.assemble((f"{marker}{row.label}", label_style), (" !", "bold yellow"))
            label.pad_right(rank_w - len(label))
        else:
            label = Text(f"{marker}{row.label:<{rank_w - 1}}", label_style)
        text = Text.assemble(label, f"{row.steps:>{STEPS_W}}", (f"{row.step_ms:>{STEP_W}}", "bold"), no_wrap=True)
        for p, value in zip(PHASES, row.phases_ms, strict=True):
            text.append(f"{value:>{PHASE_W}}", "bold reverse" if row.selected and p == phase else "")
        if self._blocked:
            text.append(f"{row.blocked_ms or '':>{PHASE_W + 1}}", "dim")
        if bar_w:
            text.append(" ")
            text.append_text(bar(row.shares, bar_w))
        if row.kind != "rank":
            text.stylize("italic")
        if row.selected:
            text.stylize(SELECTED)
        text.truncate(width, overflow="ellipsis")
        return text
