"""A recorded frame stream shown in the TUI as if live at its last moment (``traceml replay``, tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from traceml_attach.diagnose.analysis import analyze, analyze_live
from traceml_attach.ingest.stream import Recording
from traceml_attach.output.live import live_document
from traceml_attach.output.report import write_summary
from traceml_attach.output.summary import Summary, build_summary
from traceml_attach.steps.classify import Rules
from traceml_attach.tui.feed import Notice, Poster, Update


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
