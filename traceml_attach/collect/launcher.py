"""``--launch``: start the agents from the collector, through the cluster's own launcher.

The agent command is the contract (docs/multinode.md); this only saves typing it where one
command reaches every node. The collector runs::

    <launcher prefix> <python> -m traceml_attach agent --pid auto --connect HOST:PORT --token-file FILE --rate HZ

for example with the prefix ``srun --overlap --jobid 123 --ntasks-per-node=1``, which starts one
agent on each of the job's nodes. ``<python>`` is the collector's own interpreter, so every
node needs it at the same path (a shared file system) and runs the collector's version.

The launcher runs in a session of its own: its process group is ours to signal, and a Ctrl-C
in the collector's terminal does not reach it (srun would take it as its own). Its output goes
to ``launch.log`` in the run folder. At the session's end the collector has already told the
agents to exit; the launcher gets a moment to follow, then SIGTERM (srun passes it on to the
agents), then SIGKILL.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from traceml_agent.writer import FrameWriter

LOG_NAME = "launch.log"
AGENT = (sys.executable, "-m", "traceml_attach")
START_CHECK_S = 1.0   # a launcher that fails at once (srun: invalid job id) has done so by then: an error at start
END_GRACE_S = 2.0     # at the session's end, the agents (told to end) and their launcher get this long to exit...
STOP_WAIT_S = 5.0     # ...and after SIGTERM, this long before SIGKILL
WILDCARDS = ("0.0.0.0", "::", "*", "")


class LaunchError(Exception):
    """The launcher could not be started; the message (one line) says what to do."""


def reachable(host: str, port: int) -> str:
    """The address agents are told to connect to: the listening address, or this host's name when
    the collector listens on every interface."""
    if host in WILDCARDS:
        host = socket.getfqdn()
        if not host or host.startswith("localhost"):
            host = socket.gethostname()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def launch_command(prefix: str, connect: str, token_file: Path, rate_hz: int,
                   agent: Sequence[str] = AGENT) -> list[str]:
    """The launcher's argv: ``prefix`` (shell words) followed by the agent's command."""
    try:
        words = shlex.split(prefix)
    except ValueError as exc:
        raise LaunchError(f"--launch {prefix!r}: {exc}") from exc
    if not words:
        raise LaunchError("--launch needs the launcher's command, for example "
                          "--launch \"srun --overlap --jobid 123 --ntasks-per-node=1\"")
    return [*words, *agent, "agent", "--pid", "auto", "--connect", connect,
            "--token-file", str(token_file.expanduser().absolute()), "--rate", str(rate_hz)]


class AgentLaunch:
    """The running launcher (see the module doc): ``start`` it, ``stop`` it at the session's end.
    If it exits with a failure while the session runs, an ``error`` frame of kind
    ``launch_failed`` says so in the recording (the summary lists it with the other problems)."""

    def __init__(self, proc: subprocess.Popen[bytes], command: list[str], log_path: Path,
                 writer: FrameWriter) -> None:
        self.proc, self.command, self.log_path, self.writer = proc, command, log_path, writer
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="traceml-launch", daemon=True)
        self._watcher.start()

    @classmethod
    def start(cls, prefix: str, host: str, port: int, token_file: Path, rate_hz: int, run_dir: Path,
              writer: FrameWriter, note: Callable[[str], None] = lambda _line: None) -> AgentLaunch:
        """Start ``prefix`` + the agent command; LaunchError when it cannot run or fails at once."""
        command = launch_command(prefix, reachable(host, port), token_file, rate_hz)
        if host.startswith("127.") or host in ("localhost", "::1"):
            note(f"--launch: the agents are told to connect to {host}, which only this machine can reach; "
                 "for other nodes listen on their network (--listen 0.0.0.0:PORT or this host's address)")
        log_path = run_dir / LOG_NAME
        with open(log_path, "wb") as log:   # the child keeps its own descriptor
            try:
                proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
            except OSError as exc:
                raise LaunchError(f"--launch: cannot run {command[0]!r}: {exc.strerror or exc}"
                                  + (" (not on PATH)" if isinstance(exc, FileNotFoundError) else "")) from exc
        try:
            status = proc.wait(START_CHECK_S)
        except subprocess.TimeoutExpired:
            status = None
        if status:
            raise LaunchError(f"--launch: {command[0]} exited at once with status {status}: "
                              f"{last_line(log_path)} (its output: {log_path})")
        note(f"launched the agents: {shlex.join(command)} (output in {log_path})")
        return cls(proc, command, log_path, writer)

    def stop(self) -> int:
        """End the launcher: a moment to exit by itself, then SIGTERM to its process group, then
        SIGKILL. Its exit status (negative: the signal that ended it)."""
        self._stopping.set()
        status = self._wait(END_GRACE_S)
        if status is None:
            self._signal(signal.SIGTERM)
            status = self._wait(STOP_WAIT_S)
        if status is None:
            self._signal(signal.SIGKILL)
            status = self.proc.wait()
        self._watcher.join()
        return status

    def _wait(self, timeout_s: float) -> int | None:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def _signal(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            return   # it has just exited

    def _watch(self) -> None:
        """Record a launcher that fails while the session runs (its exit at the end is ours)."""
        status = self.proc.wait()
        if status != 0 and not self._stopping.is_set():
            self.writer.write({"k": "error", "t": time.time_ns(), "pid": None, "kind": "launch_failed",
                               "msg": f"the agents' launcher ({self.command[0]}) exited with status {status}: "
                                      f"{last_line(self.log_path)} (its output: {self.log_path})"})


def last_line(path: Path) -> str:
    """The last non-empty line of a log (what a failing launcher said), or a placeholder."""
    try:
        lines = path.read_bytes().decode("utf-8", "replace").splitlines()
    except OSError:
        return "(no output)"
    return next((line.strip() for line in reversed(lines) if line.strip()), "(no output)")
