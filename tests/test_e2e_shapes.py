"""Real jobs of the loop shapes that used to alias (issue 9), checked against their own ground truth.

A step time must be within 5% of the truth or be reported unknown with its reason; synchronized
ranks report one step time; the straggler verdict names the right rank and cause.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launch import PHASES, read_truth, start_example, stop_example
from tests.conftest import hold, steps_from, traceml
from traceml_attach.ingest.stream import read_recording

pytestmark = [pytest.mark.e2e, pytest.mark.timing]


def snapshot(pid: int, tmp_path: Path, name: str, seconds: float = 10) -> tuple[dict, str]:
    out = traceml("snapshot", "--pid", str(pid), "--seconds", str(seconds), "--quiet",
                  "--logs-dir", str(tmp_path / "logs"), "--run-name", name)
    assert out.returncode in (0, 8), out.stderr
    return json.loads((tmp_path / "logs" / name / "final_summary.json").read_text()), out.stdout


def assert_step_right_or_unknown(summary: dict, text: str, truth_file: Path, rank: str = "0",
                                 share_tolerance: float = 0.05) -> None:
    assert_step_only(summary, text, truth_file, rank)
    assert_shares(summary, truth_file, rank, share_tolerance)


def assert_shares(summary: dict, truth_file: Path, rank: str = "0", share_tolerance: float = 0.05) -> None:
    truth = read_truth(truth_file, steps_from(summary, rank), summary["sampling"]["window"]["end"])
    r = summary["step_time"]["ranks"][rank]
    for phase in PHASES:
        assert abs(r["shares"][phase] - truth.shares[phase]) <= share_tolerance, (phase, r["shares"], truth.shares)


def assert_step_only(summary: dict, text: str, truth_file: Path, rank: str = "0") -> None:
    window = summary["sampling"]["window"]
    truth = read_truth(truth_file, steps_from(summary, rank), window["end"])
    r = summary["step_time"]["ranks"][rank]
    if r["step_ms"] is None:
        # never invented: it says so, why, and the milliseconds are not printed
        assert summary["step_time"]["step_time_note"].startswith("step time unknown"), summary["step_time"]
        assert "step time unknown" in text
        assert r["phases_ms"] is None
    else:
        assert abs(r["step_ms"] / truth.judged(r) - 1) <= 0.05, (r["step_ms"], truth.step_ms, r["clock"])
        # what the count rests on, for a failure on a machine whose stream is gone: the clock, and
        # where the steps were counted from
        where = (r["clock"], r.get("since"), window, r.get("micro_batches"))
        assert abs(r["steps"] - truth.steps) <= max(3, 0.05 * truth.steps), (r["steps"], truth.steps, where)


@pytest.mark.parametrize(("name", "args"), [
    ("while_next", ()),   # while True: x, y = next(it); its DataLoader worker is a second process
    pytest.param("input_bound", ("--input-share", "0.9", "--width", "320"),   # a `for` loop, ~7 ms of compute
                 marks=pytest.mark.one_core),
])
def test_input_bound_loops_with_a_few_ms_of_compute(name, args, example, tmp_path: Path):
    # GIVEN a job that waits for its input ~90% of each step and computes for a few ms
    job = example(name, *args)
    time.sleep(2)
    # WHEN traceml samples it for 10 s at 100 Hz
    summary, text = snapshot(job.pid, tmp_path, name)
    # THEN it is input-bound, and the step time is the job's own or is said to be unknown
    assert summary["step_time"]["diagnosis"]["kind"] == "INPUT_BOUND", text
    assert_step_right_or_unknown(summary, text, tmp_path / f"{name}.jsonl")


@pytest.mark.parametrize(("args", "kind", "culprit"), [
    # rank 0 runs a rank-local branch in forward; rank 1 waits ~86% of each ~28 ms step in backward
    (("--straggler", "compute", "--slow-rank", "0", "--width", "64", "--extra-ms", "20", "--base-input-ms", "1"),
     "COMPUTE_STRAGGLER", 0),
    # rank 1's input is ~60% of its ~84 ms step; rank 0 waits ~83% in backward
    (("--straggler", "input", "--slow-rank", "1", "--width", "1024", "--extra-ms", "48", "--base-input-ms", "1"),
     "INPUT_STRAGGLER", 1),
])
def test_ddp_stragglers_whose_extra_work_is_well_under_a_step(args, kind, culprit, torchrun, tmp_path: Path):
    launcher = torchrun(2, *args)
    time.sleep(2)
    summary, text = snapshot(launcher.pid, tmp_path, kind)
    diag = summary["step_time"]["diagnosis"]
    assert (diag["kind"], diag["worst_rank"]) == (kind, culprit), text
    assert "+-" not in text
    # synchronized ranks report one step time (or none), never a skew between them
    steps = {r: summary["step_time"]["ranks"][r]["step_ms"] for r in ("0", "1")}
    assert steps["0"] == steps["1"], steps
    for rank in ("0", "1"):
        # phases of 1-4 ms, two ranks and their samplers on two cores: shares within 8 points
        assert_step_right_or_unknown(summary, text, tmp_path / f"gt_{rank}.jsonl", rank, share_tolerance=0.08)


@pytest.fixture(scope="module")
def hand_written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict, str, Path, int]]:
    """nanoGPT's get_batch over an np.memmap (no DataLoader) feeding a tiny LSTM, with zero_grad and
    a hand-written SGD (p.data.add_(p.grad)): the memmap reads are ~80% of a step. One 10-s
    snapshot: (its summary, its text, the job's own timing, the job's pid), taken once for the run:
    under pytest-xdist each worker makes a module's fixture, so the first one's is kept in the
    workers' shared temporary folder for the other."""
    base = tmp_path_factory.getbasetemp()   # under xdist, a worker's folder in the run's
    tmp_path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "hand_written"
    tmp_path.mkdir(exist_ok=True)
    truth = tmp_path / "hand_written.jsonl"
    kept = tmp_path / "snapshot.json"
    with open(tmp_path / "lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not kept.exists():
            # a module's fixture is made before a test's locks are taken (tests/conftest.py): the
            # snapshot measures the job, so it holds a CPU itself, as a one_core timing test does
            # (nothing else on it), and the job ends with it (the tests read what was recorded)
            with hold("one_core"):
                job = start_example("hand_written", "--vocab", "32", "--hidden", "8", "--batch", "2048",
                                    "--block", "4", truth=truth)
                try:
                    time.sleep(2)
                    summary, text = snapshot(job.pid, tmp_path, "hand_written")
                finally:
                    stop_example(job)
            kept.write_text(json.dumps([summary, text, job.pid]))
    summary, text, pid = json.loads(kept.read_text())
    yield summary, text, tmp_path, pid


@pytest.mark.one_core
def test_a_hand_written_loader_and_update_are_input_and_optimizer(hand_written):
    # GIVEN nanoGPT's get_batch over an np.memmap feeding a tiny LSTM, with a hand-written update,
    # WHEN traceml samples it for 10 s
    summary, text, tmp_path, pid = hand_written
    # THEN it is input-bound, and every phase (the update's too) is within 5 pp of the job's own
    assert summary["step_time"]["diagnosis"]["kind"] == "INPUT_BOUND", text
    window = summary["sampling"]["window"]
    assert_shares(summary, tmp_path / "hand_written.jsonl")
    shares = summary["step_time"]["ranks"]["0"]["shares"]
    assert shares["wait"] < 0.05, text   # nothing of it left as wait/other
    # and the recording holds py-spy's own counters through the window: what tells its garbage
    # collections (80 ms of one stack every few steps, the job on a CPU) from a sampler that
    # dropped out (before them: input 4.6 points under the job's own, 146 steps counted for 115)
    rec, _ = read_recording(tmp_path / "logs" / "hand_written" / "frames.msgpack")
    rows = rec.sampler_cpu[pid]
    # read every 20 ms beside the job's own counters; on two cores that the job, py-spy and traceml
    # share, a read now and then waits a tenth of a second for one (stop 49: the last row 102 ms
    # before the window's end, 1 run in 7), so the ends are held to a quarter of a second
    lag_ns = 2.5e8
    assert rows[0][0] <= window["start"] * 1e9 + lag_ns and rows[-1][0] >= window["end"] * 1e9 - lag_ns, \
        (rows[0][0] / 1e9 - window["start"], window["end"] - rows[-1][0] / 1e9)
    assert all(b[0] > a[0] and b[1] >= a[1] and b[2] >= a[2] for a, b in itertools.pairwise(rows))
    assert rows[-1][1] > rows[0][1]   # it ran: it sampled


# Known wrong (issue "Every step counted"), now and then: on two cores that the job, py-spy and
# traceml share, one step in four or five runs 1.3-2x as long, slowed in its input. Where a step's
# time outside its input is over 3 samples (e^-λ under 5%), more intervals of two than sampling
# misses by chance are judged slow steps (clock.slow_share) and the step time is unknown where that
# guess moves the median; at 100 Hz its ~25 ms outside the input are 2-3 samples, the boundaries
# go unseen too often for chance to bound, and each slow step is two: 78 steps for 70 (+11%), or a
# step time 6.5% long (CI, 66-ms steps)
@pytest.mark.one_core
@pytest.mark.xfail(strict=False, reason="slow steps at under 3 samples outside the input counted as two")
def test_a_hand_written_loaders_steps_are_its_own_or_unknown(hand_written):
    summary, text, tmp_path, _ = hand_written
    assert_step_only(summary, text, tmp_path / "hand_written.jsonl")
