from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import psutil  # noqa: E402

from launch import start_example, start_torchrun, stop_example  # noqa: E402


def traceml(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a fresh interpreter, as a user would."""
    return subprocess.run([sys.executable, "-m", "traceml_attach", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout, check=False)


def steps_from(summary: dict, rank: int | str = 0) -> float:
    """Where a rank's steps in a summary were found from (s since the epoch): the window's start,
    or later where its sampling rate changed in the window (``ranks.<rank>.since``). Ground truth
    is read from there to the window's end."""
    since = summary["step_time"]["ranks"][str(rank)].get("since")
    return float(since if since is not None else summary["sampling"]["window"]["start"])


@pytest.fixture
def example(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start examples/<name>.py (ground truth in tmp_path/<name>.jsonl); stopped at teardown."""
    started: list[subprocess.Popen[str]] = []

    def start(name: str, *args: str) -> subprocess.Popen[str]:
        proc = start_example(name, *args, truth=tmp_path / f"{name}.jsonl")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        stop_example(proc)


@pytest.fixture
def torchrun(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start ``torchrun`` over examples/<script>.py (ground truth in tmp_path/gt_<rank>.jsonl); the
    launcher and its workers are stopped at teardown."""
    started: list[subprocess.Popen[str]] = []

    def start(nproc: int, *args: str, launcher_args: tuple[str, ...] = ("--standalone",),
              script: str = "ddp") -> subprocess.Popen[str]:
        proc = start_torchrun(nproc, *args, truth_dir=tmp_path, launcher_args=launcher_args, script=script)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        for child in psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []:
            child.terminate()
        stop_example(proc)
