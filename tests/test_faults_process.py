"""The job stopped, replaced (exec), gone with its PID reused, and the attacher killed or attached
twice (docs/faults.md): each is said for what it is, and nothing is sampled as the job that is not
the job."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch import start_example, stop_example
from tests.conftest import ROOT
from traceml_attach.cli.errors import EXIT_OK, EXIT_TARGET_EXITED
from traceml_attach.ingest.stream import read_recording

pytestmark = pytest.mark.e2e


def attach(pid: int, logs: Path, seconds: float, name: str = "run") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "traceml_attach", "attach", "--pid", str(pid), "--no-tui", "--duration", str(seconds),
         "--logs-dir", str(logs), "--run-name", name],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def live(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if re.match(r"\d\d:\d\d:\d\d \| +\d+s \| ", line)]


def truth_rows(path: Path, start_s: float, end_s: float, longest_s: float = 5.0) -> list[dict]:
    """The job's own steps inside [start_s, end_s], less any that held a stop (longer than longest_s)."""
    rows = [json.loads(line) for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]
    return [r for r in rows if r["start"] >= start_s and r["end"] <= end_s and r["end"] - r["start"] < longest_s]


# -- the job stopped ----------------------------------------------------------------------

@pytest.mark.parametrize("how", ["sigstop", "debugger"])
def test_a_stopped_job_is_said_stopped_and_resumes_cleanly(example, tmp_path: Path, how: str):
    if how == "debugger" and shutil.which("gdb") is None:
        pytest.skip("gdb is not installed: no debugger to hold the job")
    job = example("balanced")
    proc = attach(job.pid, tmp_path, 28)
    time.sleep(6)
    # WHEN the job is stopped for 12 s, by SIGSTOP or by a debugger attached to it
    if how == "sigstop":
        os.kill(job.pid, signal.SIGSTOP)
        time.sleep(12)
        os.kill(job.pid, signal.SIGCONT)
    else:
        # without the libraries' symbols gdb attaches in a moment (with torch's, it takes seconds)
        subprocess.run(["gdb", "-nx", "-batch", "-iex", "set auto-solib-add off", "-p", str(job.pid),
                        "-ex", "shell sleep 12"], capture_output=True, timeout=60, check=False)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == EXIT_OK, err
    assert "Traceback" not in err
    lines = live(out)
    # THEN the live view said it was stopped, by what, and where, and never took the stop for a hang
    said = "stopped by a signal (SIGSTOP or SIGTSTP)" if how == "sigstop" else "held by a debugger or tracer: gdb"
    stopped = [line for line in lines if "[STOPPED] rank 0 is not running: " + said in line]
    assert len(stopped) >= 2, out
    assert not [line for line in lines if "[HANG]" in line], out
    # AND the final summary left the stopped seconds out: its step and shares are the job's own
    summary = json.loads((tmp_path / "run" / "final_summary.json").read_text())
    problems = [p for p in summary["sampling"]["problems"] if p["kind"] == "target_stopped"]
    assert len(problems) == 1 and re.search(r"for 1[1-5]\.\d s from", problems[0]["message"]), problems
    window = summary["sampling"]["window"]
    rows = truth_rows(tmp_path / "balanced.jsonl", window["start"], window["end"])
    truth_ms = statistics.median((r["end"] - r["start"]) * 1e3 for r in rows)
    rank = summary["step_time"]["ranks"]["0"]
    if rank["step_ms"] is not None:   # unknown where a loaded machine spreads the steps too much to tell
        assert abs(rank["step_ms"] - truth_ms) <= 0.1 * truth_ms, (rank["step_ms"], truth_ms)
    total = sum(r["end"] - r["start"] for r in rows)
    for phase in ("input", "backward"):
        share = sum(r["phases"][phase] for r in rows) / total
        assert abs(rank["shares"][phase] - share) <= 0.05, (phase, rank["shares"][phase], share)
    assert job.poll() is None


# -- the job replaced by another program, or its PID reused ---------------------------------

def test_a_job_that_execs_another_program_is_not_sampled_as_the_job(tmp_path: Path):
    # GIVEN a job that, 5 s after it is ready, replaces itself with another Python program (a web server)
    job = start_example("balanced", env={**os.environ, "TRACEML_EXEC_AFTER":
                                         f"5 {sys.executable} -m http.server --bind 127.0.0.1 0"})
    try:
        ready = time.time()
        proc = attach(job.pid, tmp_path, 20)
        _, err = proc.communicate(timeout=90)
        # THEN the attach ends when the job stopped being the job, and says why
        assert proc.returncode == EXIT_TARGET_EXITED, err
        assert job.poll() is None   # the other program runs on, untouched
        rec, _ = read_recording(tmp_path / "run" / "frames.msgpack")
        events = [e for e in rec.errors if e.kind == "target_exec"]
        assert len(events) == 1 and "replaced itself with another program (exec: now" in events[0].message
        assert "http.server" in events[0].message
        # AND nothing of the new program was recorded as the job's
        assert not [s for spans in rec.spans.values() for s in spans
                    if any("http/server.py" in f.file or "socketserver.py" in f.file for f in s.stack)]
        assert max(s.end_ns for spans in rec.spans.values() for s in spans) / 1e9 < ready + 5 + 15
        summary = json.loads((tmp_path / "run" / "final_summary.json").read_text())
        assert summary["targets"][0]["exited"] is True
    finally:
        stop_example(job)
