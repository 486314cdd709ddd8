"""Start an example training job and read its ground truth: shared by tests, bench and the demo."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PHASES = ("input", "h2d", "forward", "backward", "optimizer", "wait")


class ExampleFailed(RuntimeError):
    pass


def _wait_ready(proc: subprocess.Popen[str], count: int, timeout_s: float) -> bool:
    """Wait for ``count`` "ready pid=" announcements on the process's stdout.

    A thread reads the pipe: select() on it would miss lines already in Python's buffer.
    Output after that is drained and dropped, so the job never blocks on a full pipe.
    """
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    seen = 0
    while seen < count:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return False
        if line is None:
            return False
        seen += line.count("ready pid=")
    return True


def start_example(
    name: str,
    *args: str,
    truth: Path | None = None,
    ready_timeout_s: float = 120.0,
    env: dict[str, str] | None = None,
    python: str | None = None,
) -> subprocess.Popen[str]:
    """Run ``examples/<name>.py`` with ``python`` (default: this interpreter); return once it
    prints ``ready``."""
    full_env = dict(os.environ if env is None else env)
    if truth is not None:
        full_env["TRACEML_GROUND_TRUTH"] = str(truth)
    proc = subprocess.Popen(
        [python or sys.executable, str(HERE / f"{name}.py"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env,
    )
    errors: list[str] = []  # drained on a thread so the job never blocks on a full pipe
    drain = threading.Thread(target=lambda: errors.extend(proc.stderr or ()), daemon=True)
    drain.start()
    if _wait_ready(proc, 1, ready_timeout_s):
        return proc
    proc.kill()
    proc.wait()
    drain.join(timeout=5)   # the rest of its stderr (the traceback) is read up to EOF
    raise ExampleFailed(f"{name} did not become ready: {''.join(errors).strip()[-500:]}")


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
    # how much the steps varied: their interquartile range / 1.349 / their median (a relative
    # standard deviation that an occasional long step does not move); 0 under 4 steps
    spread: float = 0.0
    mean_ms: float = 0.0         # mean step time: what a step time said to be the mean is judged against

    def judged(self, row: dict[str, Any]) -> float:
        """The truth a summary's step row is judged against: the median step, or the mean where
        the row's clock says its step time is the mean (traceml_attach/steps/mean.py)."""
        return self.mean_ms if (row.get("clock") or {}).get("mean") else self.step_ms


def read_truth(path: Path, start_s: float, end_s: float) -> Truth:
    """Ground truth over the steps that lie wholly inside [start_s, end_s] (epoch seconds)."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines(keepends=True):
        if not line.endswith("\n"):
            continue   # the job, still running, is writing this line
        row = json.loads(line)
        if row["start"] >= start_s and row["end"] <= end_s:
            rows.append(row)
    if not rows:
        raise ValueError(f"no ground-truth steps inside [{start_s}, {end_s}]")
    total = sum(r["end"] - r["start"] for r in rows)
    shares = {p: sum(r["phases"][p] for r in rows) / total for p in PHASES}
    durations = [(r["end"] - r["start"]) * 1000 for r in rows]
    step_ms = statistics.median(durations)
    spread = 0.0
    if len(durations) >= 4:
        q1, _, q3 = statistics.quantiles(durations, n=4)
        spread = (q3 - q1) / 1.349 / step_ms
    return Truth(len(rows), step_ms, shares, spread, statistics.mean(durations))


def start_torchrun(
    nproc: int,
    *args: str,
    truth_dir: Path | None = None,
    launcher_args: tuple[str, ...] = ("--standalone",),
    ready_timeout_s: float = 180.0,
    script: str = "ddp",
) -> subprocess.Popen[str]:
    """``python -m torch.distributed.run`` (``--standalone`` unless ``launcher_args`` say otherwise)
    on examples/<script>.py (ddp, lightning_job, accelerate_job); returns the
    launcher once every rank printed ``ready``. Ground truth goes to truth_dir/gt_<rank>.jsonl."""
    env = dict(os.environ)
    if truth_dir is not None:
        env["TRACEML_GROUND_TRUTH"] = str(truth_dir / "gt_{rank}.jsonl")
    with contextlib.ExitStack() as files:   # the launcher keeps its own copy of the log's descriptor
        log = files.enter_context(open(truth_dir / "launcher.log", "w")) if truth_dir is not None else None
        proc = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
             *launcher_args, str(HERE / f"{script}.py"), *args],
            stdout=subprocess.PIPE, text=True, env=env, stderr=log if log is not None else subprocess.DEVNULL,
        )
    if not _wait_ready(proc, nproc, ready_timeout_s):
        stop_example(proc)
        raise ExampleFailed(f"torchrun with {nproc} ranks did not become ready")
    return proc


def rank_truth(truth_dir: Path, rank: int, start_s: float, end_s: float) -> Truth:
    return read_truth(truth_dir / f"gt_{rank}.jsonl", start_s, end_s)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
