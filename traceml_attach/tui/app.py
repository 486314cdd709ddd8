"""The live TUI: composes the panels, owns the selection and the keys. Nothing else.

Build it with ``make_app(feed)``: the feed (a live session or a recorded stream) posts
documents from its own thread; each one is turned into view-models by ``present``.
"""

from __future__ import annotations

import gc
import os
from typing import ClassVar

from rich.console import RenderableType
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container
from textual.widgets import Footer

from traceml_attach.output.summary import Summary
from traceml_attach.tui.feed import Feed, Finished, Notice, Update
from traceml_attach.tui.present import move_phase, move_rank, present
from traceml_attach.tui.viewmodel import Selection, ViewModel
from traceml_attach.tui.widgets import (
    DiagnosisRail,
    HeaderBar,
    HotFramesPanel,
    MemoryPanel,
    ProcessPanel,
    RanksList,
    StepTable,
    SystemPanel,
)
from traceml_attach.tui.widgets.help import HelpScreen

DETAILS = ("hot", "memory", "ranks", "process", "system")   # the order v shows them in, small terminals
NARROW_W, NARROW_H = 110, 30   # below either, panels stack and details show one at a time


class TraceApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "traceml attach"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("s", "summary", "Summary"),
        Binding("p", "pause", "Pause"),
        Binding("tab,down", "rank(1)", "Rank", key_display="tab/↓", priority=True),
        Binding("shift+tab,up", "rank(-1)", "Rank", show=False, priority=True),
        Binding("f,right", "phase(1)", "Phase", key_display="f/→"),
        Binding("left", "phase(-1)", "Phase", show=False),
        Binding("v", "detail", "Panel"),
        Binding("question_mark", "help", "Help", key_display="?"),
    ]

    def __init__(self, feed: Feed, mode: str = "LIVE") -> None:
        super().__init__()
        self.feed = feed
        self.live_mode = mode
        self.doc: Summary | None = None      # what is on screen
        self.newest: Summary | None = None   # what arrived last (differs while paused)
        self.selection = Selection()   # the user's choice; rank None follows the diagnosis
        self.view: ViewModel | None = None
        self.paused = False
        self.finished: Finished | None = None
        self.detail = 0
        self.crash: Exception | None = None   # a bug in the UI, reported by the CLI after the screen is restored

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        yield DiagnosisRail(id="rail")
        with Container(id="body"):
            yield StepTable(id="steps")
            yield RanksList(id="ranks", classes="detail")
            yield HotFramesPanel(id="hot", classes="detail -shown")
            yield MemoryPanel(id="memory", classes="detail")
            yield SystemPanel(id="system", classes="detail")
            yield ProcessPanel(id="process", classes="detail")
        yield Footer()

    def on_mount(self) -> None:
        self._fit(self.size.width, self.size.height)
        self.feed.start(self)

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.width, event.size.height)

    def _fit(self, width: int, height: int) -> None:
        narrow = width < NARROW_W or height < NARROW_H
        if narrow != self.screen.has_class("narrow"):
            self.screen.set_class(narrow, "narrow")
            self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("rank", "phase", "detail") and isinstance(self.screen, HelpScreen):
            return False   # the arrow keys scroll the help instead (their bindings take priority)
        # v only means something where the detail panels take turns
        return action != "detail" or self.screen.has_class("narrow")

    # --- data in --------------------------------------------------------------------------

    def on_update(self, message: Update) -> None:
        self.newest = message.doc
        if not self.paused:
            self.doc = message.doc
            self.show()

    def on_notice(self, message: Notice) -> None:
        self.notify(message.text, severity=message.severity)  # type: ignore[arg-type]

    def on_finished(self, message: Finished) -> None:
        """However sampling ended (detached, the duration, the job's exit, a failure), the session
        is over: the CLI prints the summary once the terminal is restored."""
        self.finished = message
        self.exit()

    def mode(self) -> str:
        return "PAUSED" if self.paused else self.live_mode

    def show(self) -> None:
        """Present the document on screen with the current selection and hand out the models."""
        if self.doc is None:
            return
        vm = present(self.doc, self.selection, self.mode())
        self.view = vm
        self.query_one(HeaderBar).model = vm.header
        self.query_one(DiagnosisRail).model = vm.rail
        self.query_one(StepTable).model = vm.steps
        self.query_one(HotFramesPanel).model = vm.hot
        self.query_one(MemoryPanel).model = vm.memory
        self.query_one(RanksList).model = vm.ranks
        self.query_one(SystemPanel).model = vm.system
        self.query_one(ProcessPanel).model = vm.process

    # --- keys -----------------------------------------------------------------------------

    async def action_quit(self) -> None:
        """Detach: the feed stops sampling and writes the summary; the CLI waits for it."""
        self.feed.stop()
        self.exit()

    def action_summary(self) -> None:
        self.feed.write_summary()

    def action_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused and self.newest is not None:
            self.doc = self.newest
        self.show()

    def action_rank(self, by: int) -> None:
        if self.view is not None:
            self.selection = move_rank(self.view.rank_ids, self.view.selection, by)
            self.show()

    def action_phase(self, by: int) -> None:
        self.selection = move_phase(self.selection, by)
        self.show()

    def action_detail(self) -> None:
        self.detail = (self.detail + 1) % len(DETAILS)
        for i, name in enumerate(DETAILS):
            self.query_one(f"#{name}").set_class(i == self.detail, "-shown")

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    # --- crashes --------------------------------------------------------------------------

    def _handle_exception(self, error: Exception) -> None:
        """An exception in the UI ends the session like q: sampling stops and the summary is
        written; Textual restores the terminal and the CLI reports the error in one line (its
        traceback only with TRACEML_DEBUG=1)."""
        self.crash = error
        self.feed.stop()
        super()._handle_exception(error)
        if os.environ.get("TRACEML_DEBUG") != "1":
            self._exit_renderables.clear()

    def panic(self, *renderables: RenderableType) -> None:
        """Textual's own way out after an error (its input thread's, on a terminal that has gone):
        the session ends too."""
        self.feed.stop()
        super().panic(*renderables)


def make_app(feed: Feed, mode: str = "LIVE") -> TraceApp:
    """The TUI over any feed: a live session, or a recorded stream in tests and replays."""
    return TraceApp(feed, mode)


def run_app(app: TraceApp) -> None:
    """Run the app in this terminal. The objects made so far (modules, classes: Textual and Rich
    are large) are moved out of the cyclic collector's reach first: they live as long as the
    process, and its full collections, which stall the UI thread, then scan far less
    (bench/tui_bench.py: the worst refresh with 64 ranks 58 -> 31 ms)."""
    gc.freeze()
    app.run()
