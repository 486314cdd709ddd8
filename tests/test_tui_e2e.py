"""`traceml attach` in a real terminal (tmux) against a real example job."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from testkit.tui_tmux import GONE_S, Terminal, attach_command, gone_after, wait_file

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]


@pytest.mark.parametrize("size", [(80, 24), (140, 40)], ids=["80x24", "140x40"])
def test_attach_shows_the_diagnosis_and_q_writes_the_summary(example, tmp_path: Path, size):
    # GIVEN an input-bound training job and traceml attach running in an 80x24 (or wide) terminal
    job = example("input_bound")
    exit_file, pid_file = tmp_path / "exit", tmp_path / "pid"
    term = Terminal(attach_command(job.pid, tmp_path / "logs", "tui", exit_file, pid_file), *size)
    try:
        # THEN the screen shows the diagnosis and the phase table
        seconds = term.wait_for("INPUT-BOUND", "Step time", "Input", "Fwd", "Bwd", "Wait*", "r0", "median")
        print(f"diagnosis on screen {seconds:.1f} s after starting traceml ({size[0]}x{size[1]})")
        assert "Hot frames · rank 0 · input" in term.screen()
        pid = int(wait_file(pid_file))
        # WHEN q is pressed
        term.press("q")
        # THEN it detaches, writes the summary and exits 0 within seconds (tests/test_tui_endings.py's
        # other endings), the terminal as it was; the job runs on
        gone_after(pid, GONE_S)
        assert wait_file(exit_file) == "0"
        assert term.restored()
        assert "Traceback" not in term.screen()
    finally:
        term.close()
    summary = json.loads((tmp_path / "logs" / "tui" / "final_summary.json").read_text())
    assert summary["primary_diagnosis"]["kind"] == "INPUT_BOUND"
    assert (tmp_path / "logs" / "tui" / "final_summary.txt").exists()
    assert job.poll() is None


def test_s_writes_the_summary_while_attached(example, tmp_path: Path):
    job = example("balanced")
    exit_file = tmp_path / "exit"
    term = Terminal(attach_command(job.pid, tmp_path / "logs", "s", exit_file), 120, 40)
    summary = tmp_path / "logs" / "s" / "final_summary.json"
    try:
        term.wait_for("BALANCED", "Step time")
        assert not summary.exists()
        term.press("s")
        wait_file(summary, timeout_s=10)
        term.wait_for("summary written to")
        assert not exit_file.exists()      # still attached
        term.press("C-c")                  # Ctrl-C detaches like q
        assert wait_file(exit_file) == "0"
    finally:
        term.close()
    assert job.poll() is None


def test_closing_the_terminal_still_writes_the_summary(example, tmp_path: Path):
    job = example("wait_heavy")
    exit_file, pid_file = tmp_path / "exit", tmp_path / "pid"
    term = Terminal(attach_command(job.pid, tmp_path / "logs", "hup", exit_file, pid_file), 100, 30)
    try:
        term.wait_for("WAIT-HEAVY", "Step time")
        pid = int(wait_file(pid_file))
    finally:
        term.close()    # the terminal goes away: SIGHUP, and every write to the tty fails
    # THEN the process is gone within seconds (tests/test_tui_endings.py's other endings), with the summary
    gone_after(pid, GONE_S)
    summary = json.loads(wait_file(tmp_path / "logs" / "hup" / "final_summary.json"))
    assert summary["primary_diagnosis"]["kind"] == "WAIT_HEAVY"
    assert job.poll() is None
