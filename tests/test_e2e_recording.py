"""A real attach under a tiny recording cap: the files stay under it, and the rotated run replays."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, traceml
from traceml_attach.ingest.segments import segment_files

CAP_MB = 0.02   # 20 kB: a 15 s attach writes about twice that, so rotation deletes


def frames_bytes(folder: Path) -> int:
    total = 0
    for path in folder.glob("frames*.msgpack"):
        with contextlib.suppress(FileNotFoundError):   # deleted by rotation between the listing and now
            total += path.stat().st_size
    return total


@pytest.mark.e2e
def test_attach_under_a_tiny_cap_stays_under_it_and_replays(example, tmp_path: Path):
    job = example("balanced")
    attach = subprocess.Popen(
        [sys.executable, "-m", "traceml_attach", "attach", "--pid", str(job.pid), "--no-tui", "--duration", "15",
         "--max-recording-mb", str(CAP_MB), "--logs-dir", str(tmp_path), "--run-name", "capped"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    run = tmp_path / "capped"
    largest = 0
    while attach.poll() is None:
        largest = max(largest, frames_bytes(run))
        time.sleep(0.05)
    assert attach.returncode == 0, attach.stderr.read() if attach.stderr else ""
    # THEN the recording never passed the cap, and rotation did delete
    assert largest <= CAP_MB * 1e6
    assert frames_bytes(run) <= CAP_MB * 1e6
    numbers = [n for n, _ in segment_files(run / "frames.msgpack")]
    assert numbers[0] == 0 and len(numbers) >= 3 and numbers[1] > 1, numbers
    # the live session's own summary is written as always (from memory, not from the files)
    assert json.loads((run / "final_summary.json").read_text())
    # AND the rotated run replays, saying what was dropped
    out = traceml("replay", str(run))
    assert out.returncode == 0, out.stderr
    notes = [line for line in out.stderr.splitlines() if "rotated" in line]
    assert len(notes) == 1 and "deleted" in notes[0], out.stderr
    assert "Traceback" not in out.stderr
    assert "Step Time" in out.stdout
