from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

# The attachers, agents and jobs the tests start run as an installed package does, with their
# bytecode cached (pip compiles it at install). Where PYTHONDONTWRITEBYTECODE is set (this project's
# machine sets it), each would compile every module it imports afresh: about 0.4 s of CPU an
# attacher. The cache goes outside the tree, under the temporary directory.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / "traceml-tests-pycache"))

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
    # (or fit no regular period, "the steps are irregular": a loaded run's rank 0 of test_faults_sampling,
    # 64 boundaries seen of 67 steps whose own spread was 0.31; or, every return seen on a synchronized
    # rank, "the intervals between them vary too much for a typical step" (sync.varied_clock): the same
    # test's rank 1 in a suite run of stop 64, spread 0.21, its mean not given either; or, for
    # accumulation, "the optimizer steps they make vary too much for a typical one": a loaded
    # grad_accum job of stop 79 here, spread 0.15; or "the steps changed length within the window", a
    # side of the change too short for a clock of its own: clock.by_regimes, since stop 80)
    varying = any(why in reason for why in ("the steps vary too much", "too uneven for their median",
                                            "the steps are irregular", "vary too much for a typical",
                                            "the steps changed length within the window"))
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
# The machine's first two CPUs are two locks, "core0" and "core1". Every test holds both shared,
# except: a test marked ``quiet`` (it compares two stretches of one job, which any change of load
# between them moves, or gives a process a chosen PID) or ``timing`` (it measures a job against the
# job's own clock, or the attacher's cost) holds both exclusive: nothing runs beside it, no other job
# and no short test either, whose core the job and its sampler had in the serial suite these tests
# were measured in (beside unit tests, a 10-s snapshot of examples/grad_accum.py at 100 Hz missed
# enough of its 41-ms micro-batches' returns to leave them uncounted). A ``timing`` test also
# marked ``one_core`` (one single-threaded job, its attacher and py-spy) holds one of the two
# exclusive and runs pinned to that CPU, it and every process it starts: two such run at once, each
# with a CPU nothing else runs on, or one beside short tests (no job of their own) pinned to the
# other CPU (docs/development.md). A turnstile keeps a waiting exclusive test
# from being starved by the shared holders that come after it. The locks are per user and machine:
# two runs of the suite at once also keep out of each other's timing tests.

LOCK_DIR = Path(tempfile.gettempdir())
CORES = ("core0", "core1")


def _lock(name: str) -> IO[str]:
    return open(LOCK_DIR / f"traceml-tests-{os.getuid()}.{name}.lock", "a+")


def _cpus() -> list[int]:
    """The first two CPUs this process may run on (where a test pinned to one is pinned)."""
    return sorted(os.sched_getaffinity(0))[:2] if hasattr(os, "sched_getaffinity") else []


def _try(fh: IO[str], how: int) -> bool:
    try:
        fcntl.flock(fh, how | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def hold(mode: str) -> Iterator[None]:
    """Hold the machine for the test that runs inside: ``shared`` (both CPUs shared), ``short``
    (both shared, or the one a ``one_core`` test leaves, pinned to it), ``alone`` (both exclusive)
    or ``one_core`` (one exclusive, the process pinned to it until the end; on a machine of one
    CPU, both)."""
    cpus = _cpus()
    with contextlib.ExitStack() as stack:
        turnstile = stack.enter_context(_lock("turnstile"))
        cores = [stack.enter_context(_lock(name)) for name in CORES]
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if mode in ("shared", "short"):
            fcntl.flock(turnstile, fcntl.LOCK_UN)   # shared holders pass the turnstile at once
        held = []
        if mode == "short" and len(cpus) == 2:
            # both CPUs shared, or, beside a one_core test, the other one, pinned to it
            while not held:
                held = [i for i, fh in enumerate(cores) if _try(fh, fcntl.LOCK_SH)]
                if not held:
                    time.sleep(0.05)
        elif mode == "one_core" and len(cpus) == 2:
            while not held:   # whichever CPU is free first; the turnstile keeps newcomers out meanwhile
                held = next(([i] for i, fh in enumerate(cores) if _try(fh, fcntl.LOCK_EX)), [])
                if not held:
                    time.sleep(0.05)
        else:
            for fh in cores:   # always core0 before core1: no two holders wait on each other
                fcntl.flock(fh, fcntl.LOCK_SH if mode in ("shared", "short") else fcntl.LOCK_EX)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        before = os.sched_getaffinity(0) if len(held) == 1 else None
        try:
            if len(held) == 1:
                os.sched_setaffinity(0, {cpus[held[0]]})
            yield
        finally:
            if before is not None:
                os.sched_setaffinity(0, before)
            for fh in reversed(cores):
                fcntl.flock(fh, fcntl.LOCK_UN)


# A real job on a shared 2-core machine runs at the pace the machine leaves it: its steps vary, its
# loop's returns go unsampled, torchrun's restarted workers die in gloo's connect. Each CI run since
# stop 48 failed one to three of the ~150 tests that start real jobs, a different one each time; where
# the product was at fault it was mended (a failed rotation lost spans, stop 62), and the rest were the
# pace the machine left the job. So a test that starts real jobs and fails an *assertion* runs once more; it
# fails the suite only if it fails twice, and every rerun is listed in the summary (``-rR``: "RERUN"
# and the test) and counted in its last line ("1 rerun"). Besides an assertion, only an example job
# that never became ready (``launch.ExampleFailed``: torchrun's ranks not up in 180 s) is rerun; any
# other exception the product or the test raised never is. docs/development.md.
RERUN_E2E = {"reruns": 1, "only_rerun": ["AssertionError", "ExampleFailed"]}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Each rerun's first failure, in one line (``RERUN_E2E``): what a run that passed on a rerun
    hid, to be read (the same test rerun run after run is a fault to find, not load)."""
    reruns = terminalreporter.stats.get("rerun", [])
    if reruns:
        terminalreporter.write_sep("=", "what each rerun's first try failed on")
    for report in reruns:
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr)
        # its head and its tail: a summary's text in the assertion holds the reason near its end (a
        # rerun of stop 63, cut at 1,500 characters, hid why the step time was unknown)
        line = " ".join(message.split())
        if len(line) > 4000:
            line = f"{line[:1000]} [...] {line[-3000:]}"
        terminalreporter.write_line(f"{report.nodeid}: {line}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that start real jobs (e2e) and timing or quiet tests are also ``slow``: ``-m "not
    slow"`` is the inner loop. A test that starts real jobs and fails an assertion is run once more
    (pytest-rerunfailures; ``RERUN_E2E``). Under pytest-xdist, the order that keeps both workers busy
    (``in_parallel_order``)."""
    for item in items:
        if any(item.get_closest_marker(m) for m in ("e2e", "timing", "quiet")):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("e2e") and not item.get_closest_marker("flaky"):
            item.add_marker(pytest.mark.flaky(**RERUN_E2E))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items[:] = in_parallel_order(items)


def machine_mode(item: pytest.Item) -> str:
    """How a test holds the machine (``hold``)."""
    if item.get_closest_marker("quiet"):
        return "alone"
    if item.get_closest_marker("timing"):
        return "one_core" if item.get_closest_marker("one_core") else "alone"
    return "shared" if item.get_closest_marker("e2e") else "short"


def in_parallel_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """The order for two workers fed one test at a time (pyproject's ``--maxschedchunk 1``).

    A test that runs alone leaves the other worker waiting it out. Hence: first the tests that
    start jobs but may share the machine, which pair up; then the short ones, which fill the workers
    while the last of those end; then the timing tests that take one CPU each, which pair up too;
    then the ones that run alone. Within each part, the collection's order (every worker collects
    the same order, as xdist requires), but for the one-CPU tests, the longest first."""
    def part(item: pytest.Item) -> tuple[int, float]:
        mode = machine_mode(item)
        if mode in ("shared", "short"):
            return (0 if mode == "shared" else 1), 0
        if mode == "one_core":   # the longest first (its marker's ``seconds``), so none is left to run by itself
            return 2, -float((item.get_closest_marker("one_core") or pytest.mark.one_core).kwargs.get("seconds", 0))
        return 3, 0

    return sorted(items, key=part)   # stable: the collection's order within each part


@pytest.fixture(autouse=True)
def _machine(request: pytest.FixtureRequest) -> Iterator[None]:
    with hold(machine_mode(request.node)):
        yield
