"""A torch-free loop (examples/pure_loop.py) on each Python that py-spy reads differently.

py-spy reads thread names only from a target that imported ``threading`` (none of these does on
3.10, 3.12 or 3.13), and gives no OS thread ids on 3.10 and older. On each the loop, its thread
("MainThread") and its step time (within 5% of the job's own ground truth) must come out right.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from launch import HERE, read_truth, start_example, stop_example
from tests.conftest import steps_from, traceml

pytestmark = pytest.mark.e2e
PYENV = Path.home() / ".pyenv" / "versions"


def interpreter(version: str) -> str | None:
    """``python<version>``: pyenv's newest of that version, else one on PATH (not a pyenv shim)."""
    if version == "current":
        return sys.executable
    found = sorted(PYENV.glob(f"{version}.*/bin/python{version}"),
                   key=lambda p: tuple(int(x) for x in p.parts[-3].split(".") if x.isdigit()))
    if found:
        return str(found[-1])
    on_path = shutil.which(f"python{version}")
    return on_path if on_path and "/shims/" not in on_path else None


# its step time is held to 5% of the job's own: on a CPU of its own (a suite run beside two other
# jobs read its 95-ms median step 7% long at 100 Hz, py-spy's samples delayed on shared cores)
@pytest.mark.timing
@pytest.mark.one_core(seconds=10)
@pytest.mark.parametrize("version", ["current", "3.10", "3.12", "3.13"])
def test_a_torch_free_loop_on_each_python(version: str, tmp_path: Path):
    python = interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version}: none under {PYENV} and no python{version} on PATH")
    # GIVEN pure_loop.py (~90 ms steps: 30 ms in next(batches), 40 ms forward, 20 ms backward)
    truth_file = tmp_path / "gt.jsonl"
    job = start_example("pure_loop", truth=truth_file, python=python)
    try:
        time.sleep(1)
        # WHEN traceml samples it for 5 s (~55 steps)
        out = traceml("snapshot", "--pid", str(job.pid), "--seconds", "5", "--quiet",
                      "--logs-dir", str(tmp_path / "logs"), "--run-name", "pure")
    finally:
        stop_example(job)
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "logs" / "pure" / "final_summary.json").read_text())
    r = summary["step_time"]["ranks"]["0"]
    # THEN the loop is main() of pure_loop.py, on the thread Python names MainThread
    assert r["loop"] == f"main ({HERE / 'pure_loop.py'})", r
    assert r["thread"] == "MainThread", r
    assert "MainThread" in out.stdout and "on thread ?" not in out.stdout
    # AND the step time is the job's own, within 5%
    window = summary["sampling"]["window"]
    truth = read_truth(truth_file, steps_from(summary), window["end"])
    assert r["step_ms"] is not None, r["clock"]
    assert abs(r["step_ms"] / truth.judged(r) - 1) <= 0.05, (r["step_ms"], truth.step_ms, r["clock"])
