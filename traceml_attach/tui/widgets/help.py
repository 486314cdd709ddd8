"""The help screen (``?``): the keys, and how to read the panels."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from traceml_attach.output.words import MANY_RANKS, WORST_RANKS

HELP = f"""\
[b]Keys[/b]
  [b]q[/b] / [b]ctrl+c[/b]   detach: stop sampling, write final_summary.json/.txt, leave
  [b]s[/b]            write the summary now and keep watching
  [b]p[/b]            pause the display (sampling goes on; p again shows the newest)
  [b]tab[/b] / [b]↓[/b]      next rank        [b]shift+tab[/b] / [b]↑[/b]   previous rank
  [b]f[/b] / [b]→[/b]        next phase       [b]←[/b]                previous phase
  [b]v[/b]            next detail panel (small terminals show one at a time)
  [b]?[/b] / [b]escape[/b]   close this help

[b]Reading it[/b]
  Start with the [b]diagnosis[/b] rail: the step-time diagnosis (INPUT-BOUND, COMPUTE-BOUND,
  WAIT-HEAVY, BALANCED, stragglers, HANG), then memory, system and process findings, each
  with the numbers behind it (why) and what to try (next).
  The [b]step-time[/b] table gives each rank's typical step split into phases (ms), then
  the median rank and the worst one; skew is worst vs median; Wait* is time in no compute
  phase (sync, logging, checkpoints...). The last 30 s of samples are used. A rank marked
  [b]![/b] lost samples (a py-spy window failed): its coverage and why are under the table.
  [b]Hot frames[/b] are the functions that cost the time inside the selected phase on the
  selected rank (self time of the innermost frame; "via" is the user code that called it).
  [b]Step memory[/b] trends cover the whole session: GPU memory from NVML (allocator reserved
  + CUDA context) or, without a GPU, RSS with DataLoader workers.
  A rank is [b]stalled[/b] when it completed no step for 10 s and its stack stopped changing.
  With more than {MANY_RANKS} ranks the table lists the {WORST_RANKS} slowest, any rank a finding names
  and the selected one, then each column's spread across the ranks: min, p50, p90, max.
  [b]Several nodes[/b] (traceml agent): a rank shows its node and local rank (r65 n1/l1), the top
  line the nodes and the clock offset furthest from the collector's (cross-node diagnoses
  compare durations, which it does not change). A rank is [b]agent lost[/b] when its node's
  agent went silent: whether the rank still runs is unknown.
"""


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 96; max-width: 100%; height: auto; max-height: 100%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(HELP)

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
