"""``python -m tests.tui_crash attach ...``: ``traceml`` whose TUI raises when ``p`` is pressed,
so that a test can crash it at a chosen moment in a real terminal."""

from __future__ import annotations

from traceml_attach.cli.main import entry
from traceml_attach.tui.app import TraceApp


def crash(self: TraceApp) -> None:
    raise RuntimeError("a crash injected by the test")


TraceApp.action_pause = crash  # type: ignore[method-assign]
entry()
