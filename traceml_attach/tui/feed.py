"""Where the app's data comes from, and the messages that carry it to the UI thread.

A feed runs off the UI thread and talks to the app only through ``post_message``. The app
asks it for three things: start, write the summary now, and stop (detach and write it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from textual.message import Message

from traceml_attach.diagnose.analysis import analyze
from traceml_attach.ingest.stream import Recording
from traceml_attach.output.live import analyze_live, live_document
from traceml_attach.output.report import write_summary
from traceml_attach.output.summary import Summary, build_summary
from traceml_attach.steps.classify import Rules


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


class RecordedFeed:
    """A recorded frame stream shown as if live at its last moment: for replays and tests.

    Its window is a live session's, so the screen is the one a live session would have shown
    when the recording ended.
    """

    def __init__(self, rec: Recording, rules: Rules, run_name: str, out_dir: Path | None = None) -> None:
        self.rec, self.rules, self.run_name, self.out_dir = rec, rules, run_name, out_dir
        self._threads: list[threading.Thread] = []
        self._writing = threading.Lock()   # s then q: one summary at a time into the same files
        self.write_error: OSError | None = None   # why the latest summary could not be written

    def document(self) -> Summary:
        return live_document(self.rec, analyze_live(self.rec, self.rules), self.run_name)

    def start(self, app: Poster) -> None:
        self._app = app
        self._off_ui(lambda: app.post_message(Update(self.document())), "traceml-feed")

    def _off_ui(self, work: Callable[[], object], name: str) -> None:
        """Analysing a whole recording can take seconds: never on the UI thread."""
        thread = threading.Thread(target=work, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _write(self) -> Path | None:
        """The summary file written; None without --out, or when writing failed (``write_error``)."""
        if self.out_dir is None:
            return None
        with self._writing:
            try:
                self.out_dir.mkdir(parents=True, exist_ok=True)
                write_summary(self.out_dir, build_summary(self.rec, analyze(self.rec, self.rules), self.run_name))
            except OSError as exc:
                self.write_error = exc
                return None
            self.write_error = None
        return self.out_dir / "final_summary.json"

    def write_summary(self) -> None:
        def work() -> None:
            path = self._write()
            if path is not None:
                self._app.post_message(Notice(f"summary written to {path}"))
            elif self.write_error is not None:
                reason = self.write_error.strerror or self.write_error
                self._app.post_message(Notice(f"could not write the summary into {self.out_dir}: {reason}",
                                              severity="error"))
            else:
                self._app.post_message(Notice("a replay without --out writes no summary"))
        self._off_ui(work, "traceml-summary")

    def stop(self) -> None:
        self._off_ui(self._write, "traceml-summary")

    def wait(self) -> None:
        """Until the document and every summary asked for are done."""
        for thread in self._threads:
            thread.join()
