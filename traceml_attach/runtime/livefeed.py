"""The TUI's feed for a live session: sampling and analysis on their own thread.

The session loop never waits for the UI: each tick posts the newest live document (a newer
one replaces any the UI has not drawn yet) and goes on sampling.
"""

from __future__ import annotations

import threading

from traceml_attach.diagnose.analysis import Analysis
from traceml_attach.errors import EXIT_INTERNAL, CliError
from traceml_attach.ingest.stream import Recording
from traceml_attach.output.live import live_document
from traceml_attach.runtime.session import Session, SessionResult, summary_line
from traceml_attach.tui.feed import Finished, Notice, Poster, Update

TICK_S = 1.0


class LiveFeed:
    def __init__(self, session: Session, stop: threading.Event, duration_s: float | None) -> None:
        self.session, self.stop_event, self.duration_s = session, stop, duration_s
        self.result: SessionResult | None = None
        self.error: BaseException | None = None
        self._summary_wanted = threading.Event()
        self._thread: threading.Thread | None = None
        self._app: Poster | None = None

    def start(self, app: Poster) -> None:
        self._app = app
        self._thread = threading.Thread(target=self._run, name="traceml-session")
        self._thread.start()

    def _post(self, message: Update | Notice | Finished) -> None:
        if self._app is not None:
            self._app.post_message(message)

    def _tick(self, rec: Recording, an: Analysis, elapsed_s: float) -> None:
        if self._summary_wanted.is_set():
            self._summary_wanted.clear()
            _, written = self.session.summarize()
            loss = self.session.loss(written)
            self._post(Notice((f"{loss}; " if loss else "") + summary_line(self.session.run_dir, written)))
        self._post(Update(live_document(rec, an, self.session.run_dir.name)))

    def _run(self) -> None:
        try:
            self.session.run(self.stop_event, self.duration_s, self._tick, TICK_S)
            self.result = self.session.finish(self.duration_s)
        except CliError as exc:
            self.error = exc
            self._post(Finished("failed", str(exc)))
            return
        except Exception as exc:  # reported by the CLI after the screen is restored
            self.error = exc
            self._post(Finished("failed", f"internal error: {exc}"))
            return
        reason = self.session.end_reason
        what = {"target_exited": "the job exited", "duration": "the duration is over"}.get(reason, "detached")
        self._post(Finished(reason, f"{what}; {self.result.where_line()}"))

    def write_summary(self) -> None:
        self._summary_wanted.set()

    def stop(self) -> None:
        self.stop_event.set()

    def wait(self) -> SessionResult:
        """Join the session thread; its result, or the error that ended it."""
        if self._thread is not None:
            self._thread.join()
        if isinstance(self.error, CliError):
            raise self.error
        if self.error is not None:
            raise CliError(f"internal error: {type(self.error).__name__}: {self.error}", EXIT_INTERNAL)
        if self.result is None:   # the UI ended before it started the session
            raise CliError("the TUI ended before sampling began", EXIT_INTERNAL)
        return self.result
