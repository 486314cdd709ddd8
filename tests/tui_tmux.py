"""Driving `traceml attach` in a real terminal: a private tmux server per use."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

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

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)


def attach_command(pid: int, logs: Path, run_name: str, exit_file: Path) -> str:
    cli = f"{shlex.quote(sys.executable)} -m traceml_attach attach --pid {pid} --logs-dir {shlex.quote(str(logs))} " \
          f"--run-name {run_name}"
    return f"{cli}; echo $? > {shlex.quote(str(exit_file))}; sleep 30"


def wait_file(path: Path, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.1)
    raise AssertionError(f"{path} was not written in {timeout_s} s")
