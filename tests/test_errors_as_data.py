"""Errors as data: a sampler that crashes, a py-spy window that fails and a summary that cannot
be written each say what happened, in the recording and in one line, never as a traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, traceml
from traceml_agent import discovery
from traceml_agent.node import NodeAgent
from traceml_agent.procstats import ProcPoller
from traceml_agent.pyspy import PySpyError, RawSpan, RecordWindow, WindowResult
from traceml_agent.sampler import Sampler, SamplerConfig
from traceml_agent.writer import FrameWriter
from traceml_attach.cli.main import main
from traceml_attach.errors import EXIT_INTERNAL, EXIT_PYSPY, EXIT_USAGE
from traceml_attach.ingest.stream import read_recording

FIXTURE = ROOT / "tests" / "fixtures" / "balanced.msgpack"


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A Python process to attach to."""
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) as proc:
        time.sleep(0.3)
        try:
            yield proc.pid
        finally:
            proc.kill()


def fake_pyspy(tmp_path: Path, record: str) -> Path:
    """A py-spy that answers --version and dump like the real one and runs ``record`` (shell)
    for ``py-spy record``."""
    script = tmp_path / "py-spy"
    script.write_text("#!/bin/sh\n"
                      'case "$1" in\n'
                      "  --version) echo 'py-spy 0.4.3';;\n"
                      "  dump) echo '[]';;\n"
                      f"  record) {record};;\n"
                      "esac\n")
    script.chmod(0o755)
    return script


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr
    assert len(lines) == 1, stderr
    return lines[0]


# -- a sampler thread that raises ------------------------------------------------------------

def boom(self: ProcPoller) -> None:
    raise RuntimeError("boom")


def test_a_sampler_that_raises_posts_an_error_frame_and_ends_failed(sleeper, monkeypatch, capfd):
    # GIVEN a sampler whose psutil poll raises (a bug)
    monkeypatch.setattr(ProcPoller, "poll", boom)
    node = NodeAgent(discovery.plan([sleeper]), SamplerConfig(), FrameWriter(None), [])
    frames: list[dict] = []
    node.writer.listen(frames.append)
    stop = threading.Event()
    # WHEN it samples
    node.start(node.probe(), stop)
    deadline = time.monotonic() + 10
    while node.active() and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    node.join()
    # THEN the crash is a frame saying what failed and where, and the node knows sampling failed
    errors = [f for f in frames if f["k"] == "error"]
    assert [e["kind"] for e in errors] == ["sampler_failed"], errors
    msg = errors[0]["msg"]
    assert msg.startswith(f"the sampler of process {sleeper} crashed: RuntimeError: boom (at ")
    assert "test_errors_as_data.py" in msg and "in boom" in msg and "sampler.py:" in msg
    assert node.exit_reasons() == {"failed"} and node.sampling_failed()
    assert not node.active()
    assert "Traceback" not in capfd.readouterr().err   # nothing printed over the TUI


def test_a_session_whose_sampler_crashed_does_not_end_as_stopped(sleeper, tmp_path: Path):
    # the real CLI in its own interpreter, with the same bug put in before it starts
    driver = ("import sys; from traceml_agent.procstats import ProcPoller\n"
              "def boom(self): raise RuntimeError('boom')\n"
              "ProcPoller.poll = boom\n"
              "from traceml_attach.cli.main import main; sys.exit(main(sys.argv[1:]))\n")
    out = subprocess.run([sys.executable, "-c", driver, "snapshot", "--pid", str(sleeper), "--seconds", "20",
                          "--quiet", "--logs-dir", str(tmp_path), "--run-name", "crash"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == EXIT_INTERNAL, out.stderr
    line = one_line(out.stderr)
    assert f"the sampler of process {sleeper} crashed: RuntimeError: boom" in line
    assert "summary of what was seen written" in line
    rec, problem = read_recording(tmp_path / "crash" / "frames.msgpack")
    assert problem is None
    assert rec.end_reason == "sampling_failed"
    assert [e.kind for e in rec.errors] == ["sampler_failed"]


# -- a py-spy window that fails ---------------------------------------------------------------

def window(binary: Path, tmp_path: Path) -> RecordWindow:
    return RecordWindow(str(binary), os.getpid(), 100, 5, tmp_path / "w.json", index=7)


def test_a_failed_window_says_how_pyspy_ended_and_what_it_printed(tmp_path: Path):
    binary = fake_pyspy(tmp_path, "echo 'Error: lost the thread state' >&2; exit 3")
    failure = window(binary, tmp_path).collect().failure
    assert failure is not None and failure.kind == "pyspy_failed"
    msg = str(failure)
    assert f"py-spy failed on process {os.getpid()}: recording window 7" in msg
    for part in ("wrote no trace", "exit status 3", "stderr: Error: lost the thread state", "it ended by itself",
                 f"process {os.getpid()} is still running"):
        assert part in msg, (part, msg)


def test_a_window_stopped_before_pyspy_sampled_says_so(tmp_path: Path):
    # py-spy dies of the SIGINT that ends a window when it arrives before py-spy samples
    # (measured with py-spy 0.4.3: up to ~0.06 s after its start on an idle machine)
    # In a fresh attacher process, with SIGINT handled as a user's shell leaves it: a child inherits
    # ignored signals, and in one full parallel run something (not traced) left the worker ignoring
    # SIGINT, so the fake (which sets no handler, as py-spy's ctrlc handler does) survived it and was
    # killed 15 s later (reproduced by running this test from a parent that ignores SIGINT)
    binary = fake_pyspy(tmp_path, "exec sleep 30")
    script = ("import os, signal, sys, time\n"
              "from pathlib import Path\n"
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "from traceml_agent.pyspy import RecordWindow\n"
              f"w = RecordWindow({str(binary)!r}, os.getpid(), 100, 5, Path({str(tmp_path / 'w.json')!r}), index=7)\n"
              "time.sleep(0.5)\n"   # the fake has exec'd sleep by then (it never samples)
              "w.stop()\n"
              "print(w.collect().failure)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    msg = out.stdout
    assert "killed by SIGINT" in msg and "nothing on stderr" in msg
    assert re.search(r"traceml asked it to stop \(SIGINT\) \d+\.\d s after starting it, before it had started "
                     r"sampling", msg), msg


def test_a_window_killed_by_someone_else_says_it_was_not_traceml(tmp_path: Path):
    msg = str(window(fake_pyspy(tmp_path, "kill -KILL $$"), tmp_path).collect().failure)
    assert "killed by SIGKILL" in msg and "not by traceml" in msg


def test_snapshot_whose_windows_all_fail_says_why_in_one_line(sleeper, tmp_path: Path):
    binary = fake_pyspy(tmp_path, "echo 'Error: lost the thread state' >&2; exit 3")
    out = traceml("snapshot", "--pid", str(sleeper), "--seconds", "20", "--quiet",
                  "--logs-dir", str(tmp_path), "--run-name", "fails", env={**os.environ, "TRACEML_PYSPY": str(binary)})
    assert out.returncode == EXIT_PYSPY, out.stderr
    line = one_line(out.stderr)
    assert "exit status 3" in line and "stderr: Error: lost the thread state" in line
    assert "no error message" not in line
    rec, _ = read_recording(tmp_path / "fails" / "frames.msgpack")
    assert rec.end_reason == "sampling_failed"
    assert len(rec.errors) == 3 and all("exit status 3" in e.message for e in rec.errors)


# -- a summary that cannot be written ---------------------------------------------------------

def test_replay_write_into_an_unwritable_folder_fails_in_one_line(tmp_path: Path):
    (tmp_path / "a-file").write_text("")
    out = traceml("replay", str(FIXTURE), "--write", "--out", str(tmp_path / "a-file" / "out"))
    assert out.returncode == EXIT_USAGE
    line = one_line(out.stderr)
    assert "could not write the summary into" in line and "--out DIR" in line
    assert "summary written" not in out.stderr
    assert "Step Time" in out.stdout   # the diagnosis is still printed


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_replay_write_into_a_read_only_folder_fails_in_one_line(tmp_path: Path):
    out_dir = tmp_path / "ro"
    out_dir.mkdir(mode=0o555)
    out = traceml("replay", str(FIXTURE), "--write", "--out", str(out_dir))
    assert out.returncode == EXIT_USAGE
    assert "Permission denied" in one_line(out.stderr)


def test_replay_tui_write_failure_is_not_reported_as_written(tmp_path: Path, monkeypatch, capsys):
    # GIVEN the replay TUI (its app stood in for by a q at once: detach, which writes the summary)
    import traceml_attach.tui.app as app

    monkeypatch.setattr(app, "make_app", lambda feed, mode: feed)
    monkeypatch.setattr(app, "run_app", lambda feed: feed.stop())
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    (tmp_path / "a-file").write_text("")
    # WHEN the summary cannot be written
    code = main(["replay", str(FIXTURE), "--tui", "--write", "--out", str(tmp_path / "a-file" / "out")])
    # THEN one line says so, with a non-zero exit, and nothing claims it was written
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert "could not write the summary into" in one_line(err)
    assert "summary written" not in err


# -- py-spy failing for a while on a process it sampled before ---------------------------------

class Scripted:
    """A finished window whose result is given."""

    def __init__(self, index: int, ok: bool) -> None:
        self.index = index
        now = time.time_ns()
        spans = [RawSpan(1, now, 1_000_000, (("main", "train.py", 3),))] if ok else []
        failure = None if ok else PySpyError("pyspy_failed", "py-spy failed: killed by SIGINT")
        self.result = WindowResult(spans, now if ok else None, now + 1_000_000 if ok else None,
                                   1 if ok else 0, 0, failure)

    def collect(self) -> WindowResult:
        return self.result


def test_failures_after_sampling_worked_pause_and_retry_instead_of_stopping(sleeper, monkeypatch):
    # GIVEN a sampler whose py-spy worked once, then failed 6 windows in a row
    sampler = Sampler(sleeper, "py-spy", SamplerConfig(window_s=0.5))
    monkeypatch.setattr(sampler, "_gone", lambda: False)
    frames: list[dict] = []
    sampler.writer.listen(frames.append)
    assert sampler._finish(Scripted(1, ok=True))
    verdicts = [sampler._finish(Scripted(i, ok=False)) for i in range(2, 8)]
    # THEN it never gives up: past 3 failures it pauses, longer each time, and says so
    assert all(verdicts)
    paused = [f for f in frames if f["k"] == "error" and f["kind"] == "sampling_paused"]
    assert len(paused) == 4 and "sampling pauses for" in paused[0]["msg"]
    assert sampler._resume_at > time.monotonic()
    # AND a window that works again resets the count
    assert sampler._finish(Scripted(8, ok=True)) and sampler._failures == 0


def test_failures_before_any_sample_stop_the_sampler(sleeper, monkeypatch):
    sampler = Sampler(sleeper, "py-spy", SamplerConfig())
    monkeypatch.setattr(sampler, "_gone", lambda: False)
    verdicts = [sampler._finish(Scripted(i, ok=False)) for i in range(1, 4)]
    assert verdicts == [True, True, False]
