"""Every way out of a live session ends the process within a few seconds.

Textual restores the terminal on its way out through a writer thread and a bounded queue. When
the terminal has gone (a closed tmux pane, a dropped ssh connection), the writer thread dies of
EIO, the queue fills, and the next write blocks forever: one attacher wrote its summary, then
hung 18 minutes in ``App._shutdown``. So a hang-up points stdout and stderr at /dev/null before
anything else is written, and once the session is over and its summary written, a watchdog gives
the process GRACE_S to end by itself before it ends it with the session's exit code.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import termios
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType

GRACE_S = 3.0           # from the summary written to the process gone; Textual's own exit takes ~0.1 s
SUMMARY_WAIT_S = 60.0   # from the stop to the summary written; sampling stops and analyses in 1-2 s


def terminal_gone(fd: int = 2) -> bool:
    """True when ``fd`` is a terminal that has hung up (every write to it fails with EIO)."""
    try:
        termios.tcgetattr(fd)
    except termios.error as exc:
        return exc.args[0] == errno.EIO   # ENOTTY (a pipe, a file) has nothing to lose
    return False


def release_terminal() -> None:
    """Point stdout and stderr at /dev/null, so that no later write fails or blocks. Safe in a
    signal handler."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
    finally:
        os.close(null)


def stop_handler(stop: threading.Event) -> Callable[[int, FrameType | None], None]:
    """The handler of Ctrl-C, SIGTERM and SIGHUP: set ``stop``; after a hang-up whose terminal
    is really gone (not a ``kill -HUP``), release the terminal first."""
    def handle(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP and terminal_gone():
            release_terminal()
        stop.set()
    return handle


def say(line: str) -> None:
    """One line on stderr that never blocks: the terminal may be stopped (Ctrl-S) or gone."""
    try:
        flags = fcntl.fcntl(2, fcntl.F_GETFL)
        fcntl.fcntl(2, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        try:
            os.write(2, f"{line}\n".encode())
        finally:
            fcntl.fcntl(2, fcntl.F_SETFL, flags)   # the descriptor is shared with the shell
    except OSError:
        pass   # nobody is left to read it


class Watchdog:
    """Ends the process ``grace_s`` after the session is over, unless it ended by itself.

    Armed by ``stop`` (q, a signal, the duration, the job's end, a crash in the UI all set it);
    the grace starts when ``finished()`` says the summary is written (or after ``summary_wait_s``),
    and leaving the ``with`` block disarms it. ``exit_code()`` is read when it fires.
    """

    def __init__(
        self,
        stop: threading.Event,
        finished: Callable[[], bool],
        exit_code: Callable[[], int],
        grace_s: float = GRACE_S,
        summary_wait_s: float = SUMMARY_WAIT_S,
    ) -> None:
        self.stop, self.finished, self.exit_code = stop, finished, exit_code
        self.grace_s, self.summary_wait_s = grace_s, summary_wait_s
        self.done = threading.Event()

    def __enter__(self) -> Watchdog:
        threading.Thread(target=self._watch, name="traceml-watchdog", daemon=True).start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.done.set()

    def _watch(self) -> None:
        while not self.stop.wait(0.5):
            if self.done.is_set():
                return
        deadline = time.monotonic() + self.summary_wait_s
        while not self.finished() and time.monotonic() < deadline:
            if self.done.wait(0.1):
                return
        if self.done.wait(self.grace_s):
            return
        code = self.exit_code()
        if self.finished():
            say(f"traceml: the terminal did not let go {self.grace_s:.0f} s after the summary was written; "
                f"exiting ({code})")
        else:
            say(f"traceml: the summary was not written {self.summary_wait_s:.0f} s after the stop; exiting ({code})")
        os._exit(code)
