from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import psutil  # noqa: E402

from launch import Truth, start_example, start_torchrun, stop_example  # noqa: E402


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


# On a loaded machine (CI: 2 shared cores) a job's own steps can vary by 20% and more; with every
# boundary seen, their median must hold over 5% of the steps either side (docs/steps.md, "A median
# that holds"), and tens of such steps pass or fail that by chance: the step time is then said to be
# unknown because the steps vary, or because slow steps among them make the median uneven (where
# intervals of two steps cannot be told from one slow step: clock.uneven_clock, CI's stop-48 failure
# of tests/test_e2e_rate.py). That is an honest answer only where the job's own steps did vary.
VARIED = 0.15   # the job's own IQR/1.349 over its median step


def honestly_unknown(summary: dict, rank: int | str, truth: Truth) -> bool:
    """Whether the rank's step time is unknown because its steps vary or are too uneven, and the
    job's own ground truth (``truth``, over the same stretch) says they did vary."""
    row = summary["step_time"]["ranks"][str(rank)]
    reason = (row["clock"] or {}).get("reason") or ""
    varying = "the steps vary too much" in reason or "too uneven for their median" in reason
    return row["step_ms"] is None and varying and truth.spread >= VARIED


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


# --- running the suite in parallel (pytest-xdist: pyproject's addopts) --------------------------
#
# Two locks, taken in this order: "quiet" and "machine". Every test holds "quiet" shared, and a
# test that starts a real job (e2e) holds "machine" shared too. A test marked ``quiet`` (it compares
# two stretches of one job, which any change of load between them moves) or ``timing`` (it
# measures a job against the job's own clock, or the attacher's cost) holds both exclusive: nothing
# runs beside it, no other job and no short test either, whose core the job and its sampler had in
# the serial suite these tests were measured in (beside unit tests, a 10-s snapshot of
# examples/grad_accum.py at 100 Hz missed enough of its 41-ms micro-batches' returns to leave them
# uncounted). A turnstile keeps a waiting exclusive test from being starved by the shared holders
# that come after it. The locks are per user and machine: two runs of the suite at once also keep
# out of each other's timing tests.

LOCK_DIR = Path(tempfile.gettempdir())


def _lock(name: str) -> IO[str]:
    return open(LOCK_DIR / f"traceml-tests-{os.getuid()}.{name}.lock", "a+")


@contextlib.contextmanager
def hold(quiet: bool, machine: bool | None) -> Iterator[None]:
    """Hold "quiet" (exclusive when ``quiet``, else shared) and, unless ``machine`` is None,
    "machine" (exclusive when ``machine``, else shared), for the test that runs inside."""
    wanted = [("quiet", quiet), *([("machine", machine)] if machine is not None else [])]
    with contextlib.ExitStack() as stack:
        turnstile = stack.enter_context(_lock("turnstile"))
        files = [(stack.enter_context(_lock(name)), exclusive) for name, exclusive in wanted]
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if not any(exclusive for _, exclusive in files):
            fcntl.flock(turnstile, fcntl.LOCK_UN)   # shared holders pass the turnstile at once
        for fh, exclusive in files:
            fcntl.flock(fh, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            for fh, _ in reversed(files):
                fcntl.flock(fh, fcntl.LOCK_UN)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that start real jobs (e2e) and timing or quiet tests are also ``slow``: ``-m "not
    slow"`` is the inner loop. Under pytest-xdist, the order that keeps both workers busy
    (``in_parallel_order``)."""
    for item in items:
        if any(item.get_closest_marker(m) for m in ("e2e", "timing", "quiet")):
            item.add_marker(pytest.mark.slow)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items[:] = in_parallel_order(items)


def _alone(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) for m in ("timing", "quiet"))


def in_parallel_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """The order for two workers fed one test at a time (pyproject's ``--maxschedchunk 1``).

    A timing or quiet test runs with nothing beside it, so the other worker waits out each one.
    Hence: first the tests that start jobs but may share the machine, which pair up; then the short
    ones, which fill the workers while the last of those end; then the tests that run alone. Within
    each part, the collection's order (every worker collects the same order, as xdist requires)."""
    shared = [i for i in items if i.get_closest_marker("e2e") and not _alone(i)]
    short = [i for i in items if not i.get_closest_marker("e2e") and not _alone(i)]
    return shared + short + [i for i in items if _alone(i)]


@pytest.fixture(autouse=True)
def _machine(request: pytest.FixtureRequest) -> Iterator[None]:
    node = request.node
    timing = _alone(node)
    jobs = timing or node.get_closest_marker("e2e") is not None
    with hold(timing, timing if jobs else None):
        yield
