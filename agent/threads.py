"""Thread names and idle flags from ``py-spy dump`` (chrometrace carries neither), and what a
process's interpreter is: whether py-spy can read its threads' names at all."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, replace

from traceml_agent.pyspy import PySpyError, explain_failure, pyspy_env, target_state


@dataclass(frozen=True)
class ThreadDump:
    """One thread as ``py-spy dump --json`` sees it. Frames are outermost first."""

    tid: int
    os_tid: int | None
    name: str | None
    active: bool | None
    frames: tuple[tuple[str, str, int], ...]


# A non-blocking dump reads the target's frames while they change: a frame freed under the read
# fails it ("Failed to copy PyFrameObject ... Bad address"). Measured on a job churning through
# numpy slices (examples/hand_written.py), 7 dumps in 60 failed so; each retry is a fresh race.
RACE_MARKS = ("Failed to copy", "Bad address")
DUMP_RETRY_S = (0.05, 0.1, 0.2)   # the pause before each further try


def dump(binary: str, pid: int, timeout_s: float = 10.0) -> list[ThreadDump]:
    """Take one non-blocking snapshot of every thread's stack (about 12 ms of CPU), tried again
    (up to three more times) when it lost a race with the running target."""
    for pause in DUMP_RETRY_S:
        try:
            return _dump_once(binary, pid, timeout_s)
        except PySpyError as exc:
            if exc.kind != "pyspy_failed" or not any(mark in str(exc) for mark in RACE_MARKS):
                raise
        time.sleep(pause)
    return _dump_once(binary, pid, timeout_s)


def _dump_once(binary: str, pid: int, timeout_s: float) -> list[ThreadDump]:
    try:
        proc = subprocess.run(
            [binary, "dump", "--pid", str(pid), "--nonblocking", "--json"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=pyspy_env(),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise PySpyError("pyspy_failed", f"py-spy dump of process {pid} did not end within {timeout_s:.0f} s "
                                         f"and was killed ({target_state(pid)})") from exc
    except OSError as exc:
        raise PySpyError("pyspy_failed", f"py-spy could not be run ({exc})") from exc
    if proc.returncode != 0:
        raise explain_failure(proc.stderr, pid, proc.returncode)
    try:
        raw = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise PySpyError("pyspy_failed", f"py-spy dump printed unreadable JSON ({exc})") from exc
    threads = []
    for thread in raw:
        frames = tuple(
            (str(f.get("name")), str(f.get("filename")), int(f.get("line") or 0))
            for f in reversed(thread.get("frames") or [])
        )
        threads.append(
            ThreadDump(
                tid=int(thread["thread_id"]),
                os_tid=thread.get("os_thread_id"),
                name=thread.get("thread_name"),
                active=thread.get("active"),
                frames=frames,
            )
        )
    return threads


MAIN_THREAD_NAME = "MainThread"   # what CPython's threading module names the main thread
_CPYTHON_EXE = re.compile(r"^python3\.(\d+)$")
# CPython 3.x minors whose thread names py-spy 0.4.3 was measured to read whenever the target has
# imported `threading` (3.6 to 3.13). On others (3.14.5, benfred/py-spy#852) it may silently read
# none, so "no names" would not mean "no `threading`" there.
NAMES_READ_MINORS = range(6, 14)


def reads_thread_names(exe: str | None) -> bool:
    """Whether ``exe`` is a CPython whose thread names py-spy reads once `threading` is imported."""
    match = _CPYTHON_EXE.match(os.path.basename(exe or ""))
    return match is not None and int(match[1]) in NAMES_READ_MINORS


class ThreadNames:
    """Names a process's threads as well as they can be known, dump after dump.

    py-spy reads a thread's name from the target's ``sys.modules["threading"]._active``: a process
    that never imported `threading` (a torch-free script: Python imports it at start-up only when a
    site ``.pth`` file leads there) has no name for py-spy to read, on any Python version. Its main
    thread's name is known all the same: `threading` names the interpreter's main thread
    "MainThread" when it is imported, and nothing can rename it without importing `threading`. So:

    - when no dump of the process has named any thread, and the process is a CPython whose names
      py-spy does read (so `threading` is not imported), its main thread is named "MainThread":
      the thread whose OS id is the PID, or, where py-spy gives no OS ids (Python 3.10 and older),
      the only Python thread (the main one lives as long as the interpreter);
    - a name once read is kept for its thread (same ident and OS id) when a later dump reads
      none for it (a thread leaving ``_active``, or a read that raced the target);
    - every other thread keeps what py-spy read, None included: a name is never guessed.
    """

    def __init__(self, pid: int, exe: str | None) -> None:
        self.pid = pid
        self._reads_names = reads_thread_names(exe)
        self._read: dict[tuple[int, int | None], str] = {}

    def __call__(self, threads: list[ThreadDump]) -> list[ThreadDump]:
        named = [t for t in threads if t.name]
        self._read.update({(t.tid, t.os_tid): t.name for t in named if t.name})
        main = None
        if not named and not self._read and self._reads_names:
            main = self._main_thread(threads)
        out = []
        for t in threads:
            name = t.name or self._read.get((t.tid, t.os_tid))
            if name is None and t is main:
                name = MAIN_THREAD_NAME
            out.append(t if name == t.name else replace(t, name=name))
        return out

    def _main_thread(self, threads: list[ThreadDump]) -> ThreadDump | None:
        if any(t.os_tid is not None for t in threads):
            return next((t for t in threads if t.os_tid == self.pid), None)
        return threads[0] if len(threads) == 1 else None
