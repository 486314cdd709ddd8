"""Start an example training job and read its ground truth: shared by tests, bench and the demo."""

from __future__ import annotations

import json
import os
import select
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
PHASES = ("input", "h2d", "forward", "backward", "optimizer", "wait")


class ExampleFailed(RuntimeError):
    pass


def start_example(
    name: str,
    *args: str,
    truth: Path | None = None,
    ready_timeout_s: float = 120.0,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """Run ``examples/<name>.py`` with this interpreter; return once it prints ``ready``."""
    full_env = dict(os.environ if env is None else env)
    if truth is not None:
        full_env["TRACEML_GROUND_TRUTH"] = str(truth)
    proc = subprocess.Popen(
        [sys.executable, str(HERE / f"{name}.py"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if line.startswith("ready"):
                return proc
            if not line and proc.poll() is not None:
                break
        elif proc.poll() is not None:
            break
    proc.kill()
    _, err = proc.communicate()
    raise ExampleFailed(f"{name} did not become ready: {err.strip()[-500:]}")


def stop_example(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass(frozen=True)
class Truth:
    steps: int
    step_ms: float               # median step time
    shares: dict[str, float]     # total phase time / total step time


def read_truth(path: Path, start_s: float, end_s: float) -> Truth:
    """Ground truth over the steps that lie wholly inside [start_s, end_s] (epoch seconds)."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["start"] >= start_s and row["end"] <= end_s:
            rows.append(row)
    if not rows:
        raise ValueError(f"no ground-truth steps inside [{start_s}, {end_s}]")
    total = sum(r["end"] - r["start"] for r in rows)
    shares = {p: sum(r["phases"][p] for r in rows) / total for p in PHASES}
    step_ms = statistics.median((r["end"] - r["start"]) * 1000 for r in rows)
    return Truth(len(rows), step_ms, shares)
