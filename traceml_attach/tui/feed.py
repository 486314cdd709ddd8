"""Where the app's data comes from, and the messages that carry it to the UI thread.

A feed runs off the UI thread and talks to the app only through ``post_message``. The app
asks it for three things: start, write the summary now, and stop (detach and write it). The
feeds themselves live in runtime/ (livefeed.py: a live session; recordedfeed.py: a recording).
"""

from __future__ import annotations

from typing import Protocol

from textual.message import Message

from traceml_attach.output.summary import Summary


class Update(Message):
    """A new live document. A newer one replaces one the UI has not handled yet."""

    def __init__(self, doc: Summary) -> None:
        super().__init__()
        self.doc = doc

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Update)


class Notice(Message):
    """One line for the user (a summary was written, a rank exited...)."""

    def __init__(self, text: str, severity: str = "information") -> None:
        super().__init__()
        self.text = text
        self.severity = severity


class Finished(Message):
    """Sampling has ended; ``reason`` is stopped, duration, target_exited or failed."""

    def __init__(self, reason: str, text: str) -> None:
        super().__init__()
        self.reason = reason
        self.text = text


class Poster(Protocol):
    def post_message(self, message: Message) -> bool: ...


class Feed(Protocol):
    def start(self, app: Poster) -> None:
        """Begin delivering Update (about once a second), Notice and Finished messages."""

    def write_summary(self) -> None:
        """Write the summary of what was seen so far, without detaching (a Notice follows)."""

    def stop(self) -> None:
        """Detach: stop sampling and write the summary. Returns at once; ``wait`` joins."""

    def wait(self) -> object:
        """Until the feed is done: sampling stopped and the summary written."""
