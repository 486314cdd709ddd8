"""A full disk and a folder made read-only, mid-attach (docs/faults.md): the recording stops at a
frame boundary and says so, nothing raises, the live view goes on, and the summary is written
elsewhere (or printed) with one line saying what was lost."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.faults import fill, read_only, tmpfs
from traceml_agent.wire import unpacker
from traceml_agent.writer import FrameWriter
from traceml_attach.errors import EXIT_NOT_WRITTEN
from traceml_attach.ingest.stream import Recording, read_recording


def frame(i: int) -> dict:
    return {"k": "host", "t": 1_700_000_000_000_000_000 + i, "cpu": 1.0, "mem_used": i, "mem_total": 2 * i + 1,
            "cpus": 2, "pad": "x" * 900}


def frames_in(path: Path) -> list[dict]:
    reader = unpacker()
    reader.feed(path.read_bytes())
    return list(reader)


def test_a_full_disk_stops_the_recording_on_a_frame_boundary_and_never_raises(tmp_path: Path):
    with tmpfs(tmp_path / "disk", "64k") as disk:
        # GIVEN a writer flushing every frame, with a listener (the live view)
        writer = FrameWriter(disk / "frames.msgpack", flush_s=0)
        heard: list[dict] = []
        writer.listen(heard.append)
        # WHEN the disk fills under it
        for i in range(200):
            writer.write(frame(i))
        writer.close()
        # THEN no write raised; the failure is known, said once to the listeners, and every frame still reached them
        assert writer.failure is not None and "No space left on device" in writer.failure
        notes = [f for f in heard if f["k"] == "error"]
        assert len(notes) == 1 and notes[0]["kind"] == "recording_failed"
        assert "the recording on disk stops at" in notes[0]["msg"]
        assert [f["mem_used"] for f in heard if f["k"] == "host"] == list(range(200))
        # AND the file ends on a frame boundary: a prefix of what was written, read with no damage
        _, problem = read_recording(disk / "frames.msgpack")
        assert problem is None
        kept = [f["mem_used"] for f in frames_in(disk / "frames.msgpack")]
        assert 10 < len(kept) < 200 and kept == list(range(len(kept)))


def test_a_folder_made_read_only_stops_rotation_and_never_raises(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    # GIVEN a capped recording that rotates every few frames
    writer = FrameWriter(run / "frames.msgpack", max_bytes=16_000, flush_s=0)
    heard: list[dict] = []
    writer.listen(heard.append)
    for i in range(10):
        writer.write(frame(i))
    # WHEN its folder becomes read-only (the open segment stays writable, no new one can be made)
    with read_only(run):
        for i in range(10, 40):
            writer.write(frame(i))
        writer.close()
    # THEN the failure is the folder's, said once, nothing raised, and what was written replays
    assert writer.failure is not None and "Read-only file system" in writer.failure
    assert [f["kind"] for f in heard if f["k"] == "error"] == ["recording_failed"]
    rec, problem = read_recording(run / "frames.msgpack")
    assert problem is None and rec.bad_frames == 0 and rec.hosts


def test_spans_written_through_a_failed_rotation_all_reach_the_listeners(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    # GIVEN a capped recording of spans whose stacks keep changing (new ones in every window), and
    # its listener (the live view's Recording)
    writer = FrameWriter(run / "frames.msgpack", max_bytes=20_000, flush_s=0)
    rec = Recording()
    writer.listen(rec.add)
    writer.write({"k": "target", "t": 0, "pid": 7, "exe": "python", "cmd": ["python"], "nspid": [7]})
    t = 10**9

    def window(w: int) -> list[tuple[int, int, int, list[tuple[object, ...]]]]:
        nonlocal t
        rows = []
        for i in range(200):
            rows.append((1, t, 10**7, [("main", "/x/train.py", 10 + i % 7, "x = 1", None),
                                       (f"f{(i + 3 * w) % 97}", "/x/m.py", i % 50, "y", None)]))
            t += 10**7
        return rows

    for w in range(1, 12):
        writer.write_spans(7, w, window(w))
    # WHEN its folder becomes read-only, so that the next rotation fails
    with read_only(run):
        for w in range(12, 30):
            writer.write_spans(7, w, window(w))
        writer.close()
    # THEN every span reached the listener, none in a frame it could not read (the frame written
    # through the failed rotation had been interned again without its definitions: the stacks it
    # defined were lost to the live view and the summary from then on)
    assert writer.failure is not None and "Read-only file system" in writer.failure
    assert rec.bad_frames == 0 and len(rec.spans[7]) == 29 * 200


def attach(job_pid: int, logs: Path, seconds: int, *extra: str, env: dict[str, str] | None = None
           ) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "traceml_attach", "attach", "--pid", str(job_pid), "--no-tui", "--duration",
         str(seconds), "--logs-dir", str(logs), "--run-name", "run", *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def live_clocks(stdout: str) -> list[str]:
    """The clock of each live text line (HH:MM:SS at its start)."""
    return [line[:8] for line in stdout.splitlines() if re.match(r"\d\d:\d\d:\d\d \| +\d+s \| ", line)]


def stderr_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.e2e
def test_disk_full_mid_attach_keeps_the_summary_elsewhere(example, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "TMPDIR": str(elsewhere)}
    job = example("balanced")
    with tmpfs(tmp_path / "disk", "2m") as disk:
        # GIVEN an attach writing its run folder on a small disk
        proc = attach(job.pid, disk, 14, env=env)
        time.sleep(6)
        # WHEN the disk fills mid-attach
        full_at, full_epoch = time.strftime("%H:%M:%S"), time.time()
        fill(disk)
        out, err = proc.communicate(timeout=60)
        # THEN one line says what was lost and where the summary went, with exit 10
        assert proc.returncode == EXIT_NOT_WRITTEN, err
        line = stderr_line(err)
        assert line.startswith(f"traceml: could not write into {disk / 'run'} (No space left on device (a full disk))")
        assert "frames.msgpack stops at" in line
        assert f"summary written to {elsewhere / 'traceml-run' / 'final_summary.json'} instead" in line
        # AND the live view went on after the fault
        assert [c for c in live_clocks(out) if c > full_at], out
        # AND the summary covers the whole attach, past the fault
        summary = json.loads((elsewhere / "traceml-run" / "final_summary.json").read_text())
        assert summary["sampling"]["window"]["end"] > full_epoch + 3
        assert summary["primary_diagnosis"]["status"] not in ("NO DATA", "WARMUP"), summary["primary_diagnosis"]
        assert [p for p in summary["sampling"]["problems"] if p["kind"] == "recording_failed"]
        # AND the recording up to the fault replays, undamaged
        done = subprocess.run([sys.executable, "-m", "traceml_attach", "replay", str(disk / "run")], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert "damaged" not in done.stderr and "Traceback" not in done.stderr
        rec, _ = read_recording(disk / "run" / "frames.msgpack")
        last = max(s.end_ns for spans in rec.spans.values() for s in spans)
        assert last / 1e9 < summary["sampling"]["window"]["end"] - 3
    assert job.poll() is None


@pytest.mark.e2e
def test_logs_folder_read_only_mid_attach_keeps_the_summary_elsewhere(example, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "TMPDIR": str(elsewhere)}
    job = example("balanced")
    logs = tmp_path / "logs"
    # GIVEN an attach whose recording rotates (a 20 kB cap)
    proc = attach(job.pid, logs, 12, "--max-recording-mb", "0.02", env=env)
    deadline = time.monotonic() + 30
    while not (logs / "run" / "frames.msgpack").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(4)
    # WHEN its run folder becomes read-only mid-attach
    read_only_from = time.time()
    with read_only(logs / "run"):
        _, err = proc.communicate(timeout=60)
    # THEN one line says so, with exit 10, the summary elsewhere, and the recording up to then replays
    assert proc.returncode == EXIT_NOT_WRITTEN, err
    line = stderr_line(err)
    assert "(Read-only file system): frames.msgpack stops at" in line
    assert f"{elsewhere / 'traceml-run' / 'final_summary.json'} instead" in line
    summary = json.loads((elsewhere / "traceml-run" / "final_summary.json").read_text())
    # the summary covers the attach past the fault, judged
    assert summary["sampling"]["window"]["end"] > read_only_from + 3
    assert summary["primary_diagnosis"]["status"] not in ("NO DATA", "WARMUP"), summary["primary_diagnosis"]
    rec, problem = read_recording(logs / "run" / "frames.msgpack")
    assert problem is None and rec.hello and rec.targets   # the newest segments, up to the fault
    assert job.poll() is None


def test_a_logs_folder_that_cannot_be_written_at_the_start_is_one_line(tmp_path: Path):
    logs = tmp_path / "logs"
    logs.mkdir()
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as job, read_only(logs):
        try:
            time.sleep(0.3)
            out = subprocess.run([sys.executable, "-m", "traceml_attach", "snapshot", "--pid", str(job.pid),
                                  "--seconds", "1", "--logs-dir", str(logs)], cwd=ROOT, capture_output=True, text=True,
                                 timeout=60, check=False)
        finally:
            job.kill()
    assert out.returncode == EXIT_NOT_WRITTEN
    line = stderr_line(out.stderr)
    assert f"cannot write a run folder under {logs}: Read-only file system; give --logs-dir DIR" in line
