"""Bad input gets one clear line and a non-zero exit; the job is never harmed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from testkit.streams import read_frames
from tests.conftest import ROOT, traceml
from traceml_attach.errors import (
    EXIT_BAD_FILE,
    EXIT_NO_PROCESS,
    EXIT_NOT_PYTHON,
    EXIT_PERMISSION,
    EXIT_PYSPY,
    EXIT_TARGET_EXITED,
    EXIT_USAGE,
)


def one_clean_line(out: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert "Traceback" not in out.stderr
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("traceml: ")
    return lines[0]


def free_pid() -> int:
    pid = 4_000_000
    while psutil.pid_exists(pid):
        pid -= 1
    return pid


def test_missing_pid():
    out = traceml("snapshot", "--pid", str(free_pid()), "--seconds", "1")
    assert out.returncode == EXIT_NO_PROCESS
    assert "no process" in one_clean_line(out)


def test_not_a_python_process():
    with subprocess.Popen(["sleep", "60"]) as proc:
        try:
            out = traceml("snapshot", "--pid", str(proc.pid), "--seconds", "1")
        finally:
            proc.kill()
    assert out.returncode == EXIT_NOT_PYTHON
    assert "not a Python process" in one_clean_line(out)


def test_a_shell_running_python_names_its_python_child():
    with subprocess.Popen(["bash", "-c", f"{sys.executable} -c 'import time; time.sleep(60)'; true"]) as shell:
        try:
            time.sleep(1.0)
            child = psutil.Process(shell.pid).children()[0].pid
            out = traceml("snapshot", "--pid", str(shell.pid), "--seconds", "1")
        finally:
            for p in psutil.Process(shell.pid).children(recursive=True):
                p.kill()
            shell.kill()
    assert out.returncode == EXIT_NOT_PYTHON
    assert str(child) in one_clean_line(out)


def test_traceml_run_from_the_shell_it_is_given_is_not_its_python_child(tmp_path: Path):
    # GIVEN `traceml snapshot --pid $$` typed in a shell: the shell's only Python child is traceml
    out_file = tmp_path / "out.txt"
    script = (f"cd {ROOT} && {sys.executable} -m traceml_attach snapshot --pid $$ --seconds 1 "
              f"--logs-dir {tmp_path} > {out_file} 2>&1; echo $? >> {out_file}")
    subprocess.run(["bash", "-c", script], timeout=60, check=False)
    text = out_file.read_text()
    # THEN it says the shell is not Python, and names no child (before: traceml's own PID)
    assert text.splitlines()[-1] == str(EXIT_NOT_PYTHON), text
    assert "is not a Python process" in text or "not Python" in text, text
    assert "Python child processes" not in text, text


def _fake_pyspy(tmp_path: Path, message: str) -> dict[str, str]:
    # This machine runs tests as root, where ptrace is always allowed; the permission path is
    # exercised with py-spy's own message from a non-root run (see tests/test_stream.py).
    script = tmp_path / "py-spy"
    script.write_text("#!/bin/sh\n"
                      f"case \"$1\" in --version) echo 'py-spy 0.4.3';; *) echo {message!r} >&2; exit 1;; esac\n")
    script.chmod(0o755)
    return {**os.environ, "TRACEML_PYSPY": str(script)}


def test_not_permitted_says_how_to_fix_it(tmp_path: Path):
    env = _fake_pyspy(tmp_path, "Permission Denied: Try running again with elevated permissions")
    out = traceml("snapshot", "--pid", str(os.getpid()), "--seconds", "1", env=env)
    assert out.returncode == EXIT_PERMISSION
    line = one_clean_line(out)
    assert "SYS_PTRACE" in line and "ptrace_scope" in line and "root" in line


def test_pyspy_missing(tmp_path: Path):
    env = {**os.environ, "TRACEML_PYSPY": str(tmp_path / "nowhere")}
    out = traceml("snapshot", "--pid", str(os.getpid()), "--seconds", "1", env=env)
    assert out.returncode == EXIT_PYSPY
    assert "py-spy" in one_clean_line(out)


def test_unsupported_python_version(tmp_path: Path):
    env = _fake_pyspy(tmp_path, "Error: Unsupported version of Python: 3.99.0")
    out = traceml("snapshot", "--pid", str(os.getpid()), "--seconds", "1", env=env)
    assert out.returncode == EXIT_NOT_PYTHON
    assert "3.99" in one_clean_line(out)


@pytest.mark.parametrize("content", [None, b"{not json", b'{"schema_version": 99}', b'{"schema_version": 1}'])
def test_view_missing_or_corrupt(tmp_path: Path, content):
    path = tmp_path / "final_summary.json"
    if content is not None:
        path.write_bytes(content)
    out = traceml("view", str(path))
    assert out.returncode == EXIT_BAD_FILE
    one_clean_line(out)


def test_replay_of_a_corrupt_file_keeps_what_it_can(tmp_path: Path):
    fixture = ROOT / "tests" / "fixtures" / "input_bound.msgpack"
    damaged = tmp_path / "frames.msgpack"
    data = fixture.read_bytes()
    damaged.write_bytes(data[: len(data) * 2 // 3] + b"\xc1" * 16)
    out = traceml("replay", str(damaged))
    assert out.returncode == EXIT_BAD_FILE
    assert "damaged" in one_clean_line(out)
    assert "[INPUT-BOUND]" in out.stdout


def test_bad_rules_file_is_a_usage_error(tmp_path: Path):
    rules = tmp_path / "r.toml"
    rules.write_text('[[rule]]\nphase = "nap"\nfunc = "x"\n')
    out = traceml("replay", str(ROOT / "tests" / "fixtures" / "input_bound.msgpack"), "--rules", str(rules))
    assert out.returncode == EXIT_USAGE
    assert "phase must be one of" in one_clean_line(out)


@pytest.mark.e2e
def test_target_exiting_mid_run_still_writes_the_summary(example, tmp_path: Path):
    job = example("compute_bound", "--steps", "40")
    out = traceml("snapshot", "--pid", str(job.pid), "--seconds", "60", "--quiet",
                  "--logs-dir", str(tmp_path), "--run-name", "short")
    assert out.returncode == EXIT_TARGET_EXITED
    assert "exited before the snapshot ended" in out.stderr and "Traceback" not in out.stderr
    summary = json.loads((tmp_path / "short" / "final_summary.json").read_text())
    assert summary["targets"][0]["exited"] is True
    assert summary["end_reason"] == "target_exited"
    assert summary["step_time"]["ranks"]["0"]["steps"] >= 10


@pytest.mark.e2e
def test_attach_live_view_ctrl_c_and_deterministic_replay(example, tmp_path: Path):
    job = example("wait_heavy")
    attach = subprocess.Popen(
        [sys.executable, "-m", "traceml_attach", "attach", "--pid", str(job.pid), "--no-tui",
         "--logs-dir", str(tmp_path), "--run-name", "live"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)
    attach.send_signal(signal.SIGINT)
    stdout, stderr = attach.communicate(timeout=30)
    assert attach.returncode == 0, stderr
    live = [line for line in stdout.splitlines() if " | r0: " in line]
    assert live, stdout
    assert "[WAIT-HEAVY]" in stdout
    run = tmp_path / "live"
    written = json.loads((run / "final_summary.json").read_text())
    # replaying the recorded frames reproduces the summary exactly
    out = traceml("replay", str(run / "frames.msgpack"), "--write", "--out", str(tmp_path / "again"))
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "again" / "final_summary.json").read_text()) == written
    assert job.poll() is None


# Killing the attacher (SIGKILL, or the OOM killer) is tests/test_faults_process.py's
# test_killing_the_attacher_leaves_the_job_untouched: the job runs on, no signal reaches it, no
# step is held up, no py-spy is left behind, and what was recorded replays.


@pytest.mark.parametrize(("no_tui", "stdin_tty", "stdout_tty", "term", "expected"), [
    (False, True, True, "xterm-256color", True),
    (True, True, True, "xterm-256color", False),     # --no-tui
    (False, False, True, "xterm-256color", False),   # input piped
    (False, True, False, "xterm-256color", False),   # output piped or redirected
    (False, True, True, "dumb", False),
])
def test_the_tui_is_used_only_in_a_capable_terminal(monkeypatch, no_tui, stdin_tty, stdout_tty, term, expected):
    import argparse

    from traceml_attach.cli import attach

    monkeypatch.setattr(sys.stdin, "isatty", lambda: stdin_tty)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: stdout_tty)
    monkeypatch.setenv("TERM", term)
    assert attach.use_tui(argparse.Namespace(no_tui=no_tui)) is expected


def test_replay_tui_without_a_terminal_is_a_usage_error():
    out = traceml("replay", str(ROOT / "tests" / "fixtures" / "balanced.msgpack"), "--tui")
    assert out.returncode == EXIT_USAGE
    assert out.stderr.strip().startswith("traceml: --tui needs a terminal") and "Traceback" not in out.stderr


@pytest.mark.e2e
def test_attach_without_a_terminal_prints_the_text_view(example, tmp_path: Path):
    job = example("balanced")
    out = traceml("attach", "--pid", str(job.pid), "--duration", "5", "--logs-dir", str(tmp_path), "--run-name", "t")
    assert out.returncode == 0, out.stderr
    assert " | r0: " in out.stdout and "\x1b[" not in out.stdout
    assert (tmp_path / "t" / "final_summary.json").exists()
    # the first line is a first look, from the short first py-spy window (then 2-s windows)
    lines = [line for line in out.stdout.splitlines() if " | r0: " in line]
    assert "(first look)" in lines[0], lines
    windows = [f for f in read_frames(tmp_path / "t" / "frames.msgpack") if f.get("k") == "window"]
    spans = [(f["end"] - f["start"]) / 1e9 for f in windows]
    assert 0.7 <= spans[0] <= 1.4 and max(spans[1:-1]) >= 1.7, spans
    # and the attacher's own cost is recorded: the sampler's parts for the job, the process's with py-spy's
    costs = {f["pid"]: f["parts"] for f in read_frames(tmp_path / "t" / "frames.msgpack") if f.get("k") == "cost"}
    assert costs[job.pid]["parse"] > 0 and costs[job.pid]["counters"] > 0, costs
    assert costs[None]["children"] > 0 and costs[None]["process"] > 0, costs
