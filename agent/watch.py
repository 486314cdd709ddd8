"""Is the target still the job, and is it running? Read from /proc/<pid>/stat every few tens of ms.

One read of the stat file tells, besides the exit status of a zombie:

- **stopped**: state ``T`` (SIGSTOP, SIGTSTP) or ``t`` (a debugger or tracer holds it). py-spy
  reads a stopped process as well as a running one and would record the place it stopped for
  as long as it stays there, as if that phase took all that time;
- **PID reused**: the process's start time (field 22, clock ticks since boot) is not the job's:
  the job exited, was reaped and another process got its PID before we looked;
- **exec**: the address of its arguments (``arg_start``, field 48) moved, or its executable is
  another file: the job replaced itself with another program (a rewritten process title, as
  ``setproctitle`` does, moves neither).

``arg_start`` reads 0 without ptrace access to the process (which py-spy needs anyway); exec is
then told by the executable alone.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

from traceml_agent.procfile import Reread

STOPPED_STATES = {"T": "stopped by a signal (SIGSTOP or SIGTSTP)", "t": "held by a debugger or tracer"}


@dataclass(frozen=True)
class ProcStat:
    state: str              # R, S, D, T, t, Z, X, ...
    start_ticks: int        # when it started, in clock ticks since boot
    arg_start: int | None   # where its arguments are (None: not readable)
    wait_status: int | None  # the raw wait status, when it is a zombie


def read_stat(pid: int) -> ProcStat | None:
    """The process's stat line, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return parse_stat(fh.read())
    except OSError:
        return None


def parse_stat(text: str) -> ProcStat | None:
    """A stat line's fields, or None when it is not one."""
    try:
        fields = text.rsplit(")", 1)[1].split()
    except IndexError:
        return None
    # fields[0] is field 3 (state); field n is fields[n - 3]
    try:
        start = int(fields[19])
        arg_start = int(fields[45]) if len(fields) > 45 else 0
        wait = int(fields[-1]) if fields[0] == "Z" and len(fields) >= 50 else None
    except (ValueError, IndexError):
        return None
    return ProcStat(fields[0], start, arg_start or None, wait)


SETTLE_S = 0.05   # how long a main thread's ``Z`` is watched before it is taken for an exit


def exited_for_good(pid: int) -> bool:
    """Whether a process whose stat read ``Z`` has exited: after SETTLE_S, it is gone or still
    ``Z``, and no thread of it is left but the main one.

    The main thread's stat also reads ``Z`` while another of its threads runs on: for a moment when
    that thread exec()s (the kernel ends the main thread, then gives its PID to the exec'ing one:
    microseconds, or a few milliseconds on a loaded machine, where 7 of 20 execs from a thread were
    caught in it, and the suite run in parallel once took a job's exec for its exit), and for good
    when the main thread alone has ended (``pthread_exit``). Only a real exit is called one: where
    other threads are listed, at once (a main thread ended for good is not waited on at every look);
    else once SETTLE_S has passed (midway through an exec, the main thread can be listed alone)."""
    if _threads(pid) > 1:
        return False
    time.sleep(SETTLE_S)
    stat = read_stat(pid)
    return stat is None or (stat.state in ("Z", "X") and _threads(pid) <= 1)


def _threads(pid: int) -> int:
    """How many threads /proc lists for ``pid`` (0 once it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def exit_code(wait_status: int) -> int:
    """A wait status as subprocess reports it: the exit code, or minus the signal that killed it."""
    if wait_status & 0x7F:
        return -(wait_status & 0x7F)
    return (wait_status >> 8) & 0xFF


def tracer(pid: int) -> str | None:
    """Who traces ``pid`` ("gdb (pid 123)"), None when nobody does."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            line = next((line for line in fh if line.startswith("TracerPid:")), "")
        tracer_pid = int(line.split()[1]) if line else 0
    except (OSError, ValueError, IndexError):
        return None
    if not tracer_pid:
        return None
    name = "pid"
    with contextlib.suppress(OSError), open(f"/proc/{tracer_pid}/comm", encoding="utf-8", errors="replace") as fh:
        name = fh.read().strip()
    return f"{name} (pid {tracer_pid})"


def command_line(pid: int) -> str:
    """The process's command line, shortened for a message; "" when unreadable."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read(512)
    except OSError:
        return ""
    return " ".join(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)[:200]


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


@dataclass(frozen=True)
class Change:
    """What a look at the target found: ``kind`` one of exited, reused, exec, stopped, resumed."""

    kind: str
    ts_ns: int
    status: int | None = None   # exited: the exit code, when it was read in time
    message: str = ""           # reused, exec, stopped, resumed: in words


class TargetWatch:
    """Follows one target from the moment it is attached to: ``look()`` returns what changed."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        first = read_stat(pid)
        self.start_ticks = first.start_ticks if first is not None else None
        self.arg_start = first.arg_start if first is not None else None
        self.exe = _exe(pid)
        self.cmd = command_line(pid)
        self.stopped_since: int | None = None   # wall-clock ns, while it is stopped
        self._why_stopped = ""
        # kept open: 50 looks a second. Once the process is gone it reads nothing, and a fresh
        # read of the PID's stat tells an exit from a PID taken by another process
        self._stat = Reread(f"/proc/{pid}/stat", 4096)

    def close(self) -> None:
        self._stat.close()

    def _new_command(self, wait_s: float = 0.5) -> str:
        """The command line after an exec, read once the new program's is there (caught in the
        middle of the exec, it reads empty for a moment)."""
        deadline = time.monotonic() + wait_s
        while not (cmd := command_line(self.pid)) and time.monotonic() < deadline:
            time.sleep(0.01)
        return cmd or "unreadable"

    def look(self) -> Change | None:
        now = time.time_ns()
        text = self._stat.read()
        stat = parse_stat(text) if text else read_stat(self.pid)
        if stat is None:
            return Change("exited", now)
        if self.start_ticks is not None and stat.start_ticks != self.start_ticks:
            return Change("reused", now, message=(
                f"process {self.pid} exited and its PID now belongs to another process (`{command_line(self.pid)}`, "
                "started after it): that one is not sampled"))
        if stat.state in ("Z", "X"):
            if not exited_for_good(self.pid):
                # its main thread ended while another runs on: an exec from that thread, midway
                # (the next look finds the exec), or a main thread that ended by itself
                return None
            return Change("exited", now, None if stat.wait_status is None else exit_code(stat.wait_status))
        moved = self.arg_start is not None and stat.arg_start is not None and stat.arg_start != self.arg_start
        # the executable is read where the arguments' address is not (no ptrace access): an exec
        # moves that address
        unread = self.arg_start is None or stat.arg_start is None
        if moved or (unread and self.exe is not None and (exe := _exe(self.pid)) is not None and exe != self.exe):
            return Change("exec", now, message=(
                f"process {self.pid} replaced itself with another program (exec: now `{self._new_command()}`, "
                f"was `{self.cmd}`): it is no longer the job, and is not sampled"))
        if stat.state in STOPPED_STATES and self.stopped_since is None:
            self.stopped_since = now
            held = tracer(self.pid) if stat.state == "t" else None
            self._why_stopped = STOPPED_STATES[stat.state] + (f": {held}" if held else "")
            return Change("stopped", now, message=self._why_stopped)
        if stat.state not in STOPPED_STATES and self.stopped_since is not None:
            since, self.stopped_since = self.stopped_since, None
            clock = time.strftime("%H:%M:%S", time.localtime(since / 1e9))
            return Change("resumed", now, message=(
                f"process {self.pid} was {self._why_stopped} for {(now - since) / 1e9:.1f} s from {clock}: "
                "those seconds are left out of its steps"))
        return None
