"""Driving `traceml attach` in a real terminal: a private tmux server per use."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


class Terminal:
    """A detached tmux session of the given size running one command."""

    def __init__(self, command: str, width: int, height: int) -> None:
        self.socket = f"traceml-test-{os.getpid()}-{time.monotonic_ns()}"
        self._tmux("new-session", "-d", "-s", "main", "-x", str(width), "-y", str(height), "-c", str(ROOT),
                   command)

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True,
                              check=True, timeout=10).stdout

    def screen(self) -> str:
        try:
            return self._tmux("capture-pane", "-p", "-t", "main")
        except subprocess.CalledProcessError:
            return ""   # the session ended

    def wait_for(self, *needles: str, timeout_s: float = 30.0) -> float:
        """Seconds until every needle is on screen; AssertionError with the screen if not."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if all(n in self.screen() for n in needles):
                return time.monotonic() - start
            time.sleep(0.1)
        raise AssertionError(f"{needles} not on screen after {timeout_s} s:\n{self.screen()}")

    def press(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "main", *keys)

    def restored(self) -> bool:
        """The program left the alternate screen and stopped asking for mouse events."""
        return self._tmux("display-message", "-p", "-t", "main", "#{alternate_on}#{mouse_any_flag}").strip() == "00"

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)


# how soon a TUI session's process must be gone once it is ended: the watchdog's grace is 3 s after
# the summary; a hang is minutes
GONE_S = 10.0


def attach_command(pid: int, logs: Path, run_name: str, exit_file: Path, pid_file: Path | None = None,
                   program: str = f"{shlex.quote(sys.executable)} -m traceml_attach", then: str = "sleep 30") -> str:
    """``traceml attach`` in the terminal's shell; its exit status goes to ``exit_file``, its PID to
    ``pid_file``, and the shell runs ``then`` afterwards."""
    cli = f"{program} attach --pid {pid} --logs-dir {shlex.quote(str(logs))} --run-name {run_name}"
    if pid_file is not None:
        cli = f"sh -c {shlex.quote(f'echo $$ > {shlex.quote(str(pid_file))}; exec {cli}')}"
    return f"{cli}; echo $? > {shlex.quote(str(exit_file))}; {then}"


def gone_after(pid: int, timeout_s: float) -> float:
    """Seconds until process ``pid`` has ended (a zombie nobody reaps counts); AssertionError if
    it is still running after ``timeout_s``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"process {pid} still running {timeout_s} s later")
    return time.monotonic() - start


def wait_file(path: Path, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.1)
    raise AssertionError(f"{path} was not written in {timeout_s} s")
