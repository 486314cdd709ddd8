"""Every way a TUI session ends, ends the process within seconds and writes the summary.

The ending that prompted this: the terminal closed while the job also ended, and the attacher,
its summary written, hung 18 minutes in Textual's shutdown writing to the dead terminal.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from testkit.tui_tmux import GONE_S, Terminal, attach_command, gone_after, wait_file

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]


def _sigterm(job: subprocess.Popen[str], term: Terminal, pid: int) -> None:
    os.kill(pid, signal.SIGTERM)


def _sighup(job: subprocess.Popen[str], term: Terminal, pid: int) -> None:
    os.kill(pid, signal.SIGHUP)          # a hang-up signal while the terminal is still there


def _job_exits(job: subprocess.Popen[str], term: Terminal, pid: int) -> None:
    job.terminate()


def _job_exits_and_terminal_closed(job: subprocess.Popen[str], term: Terminal, pid: int) -> None:
    job.terminate()
    term.close()


def _sigterm_and_terminal_closed(job: subprocess.Popen[str], term: Terminal, pid: int) -> None:
    os.kill(pid, signal.SIGTERM)
    term.close()


# (q, and the terminal closed alone: tests/test_tui_e2e.py, on jobs whose verdict the summary must hold)
ENDINGS: dict[str, tuple[Callable[[subprocess.Popen[str], Terminal, int], None], bool]] = {
    # name: (how it ends, whether the terminal is still there afterwards)
    "sigterm": (_sigterm, True),
    "sighup": (_sighup, True),
    "job_exits": (_job_exits, True),
    "job_exits_and_terminal_closed": (_job_exits_and_terminal_closed, False),
    "sigterm_and_terminal_closed": (_sigterm_and_terminal_closed, False),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_every_ending_ends_the_process_and_writes_the_summary(example, tmp_path: Path, ending: str):
    # GIVEN traceml attach drawing a live job in a 160x45 terminal (a job of its own: a job kept
    # running for the module would run beside other workers' timing tests, which the locks in
    # tests/conftest.py hold apart test by test)
    end, terminal_stays = ENDINGS[ending]
    job = example("balanced")
    assert job.poll() is None
    exit_file, pid_file = tmp_path / "exit", tmp_path / "pid"
    term = Terminal(attach_command(job.pid, tmp_path / "logs", "end", exit_file, pid_file), 160, 45)
    try:
        term.wait_for("Step time", "r0 ", "LIVE")
        pid = int(wait_file(pid_file))
        # WHEN the session ends this way
        end(job, term, pid)
        # THEN the process is gone within seconds, with the summary written
        seconds = gone_after(pid, GONE_S)
        print(f"{ending}: process gone {seconds:.1f} s after the ending")
        assert json.loads((tmp_path / "logs" / "end" / "final_summary.json").read_text())
        if terminal_stays:
            assert wait_file(exit_file) == "0"
            assert term.restored()
            assert "Traceback" not in term.screen()
    finally:
        term.close()


def test_a_crash_in_the_tui_restores_the_terminal_and_writes_the_summary(example, tmp_path: Path):
    # GIVEN traceml attach whose TUI raises on p (tests/tui_crash.py)
    job = example("balanced")
    exit_file, pid_file = tmp_path / "exit", tmp_path / "pid"
    command = attach_command(job.pid, tmp_path / "logs", "crash", exit_file, pid_file,
                             program=f"{shlex.quote(sys.executable)} -m tests.tui_crash",
                             then="read line; echo typed:$line; sleep 30")
    term = Terminal(command, 120, 40)
    try:
        term.wait_for("Step time", "r0 ", "LIVE")
        pid = int(wait_file(pid_file))
        # WHEN the UI crashes
        term.press("p")
        # THEN the process ends with one line and the internal-error code; the summary is written
        gone_after(pid, GONE_S)
        assert wait_file(exit_file) == "70"
        term.wait_for("internal error in the TUI: RuntimeError: a crash injected by the test")
        assert "Traceback" not in term.screen()
        assert json.loads((tmp_path / "logs" / "crash" / "final_summary.json").read_text())
        # AND the terminal is usable again: normal screen, no mouse reporting, lines typed and echoed
        assert term.restored()
        term.press("hello", "Enter")
        term.wait_for("typed:hello", timeout_s=5)
    finally:
        term.close()
    assert job.poll() is None
