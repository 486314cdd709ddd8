"""A rate that fits the step, on a real job: steps too short for the default 100 Hz get their
step time without the user passing --rate, and the recording replays to the same summary."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from launch import rank_truth
from tests.conftest import honestly_unknown, traceml
from traceml_attach.cli.common import DEFAULT_MAX_RATE

RARE_OPTIMIZER = "the optimizer is seen too rarely to tell gradient accumulation's micro-batches from steps"
BLURRED = "their ends blur by a tenth of a step or more"

pytestmark = [pytest.mark.e2e, pytest.mark.timing]


def test_the_27_ms_ddp_job_gets_its_step_time_at_the_default_settings(torchrun, tmp_path: Path):
    # GIVEN 2 gloo ranks with ~28 ms steps (rank 0 runs extra forward work; rank 1 waits ~86% of
    # each step in backward): under 3 samples a step at 100 Hz, unknown at a fixed 100 Hz
    launcher = torchrun(2, "--straggler", "compute", "--slow-rank", "0", "--width", "64", "--extra-ms", "20",
                        "--base-input-ms", "1")
    time.sleep(1)
    # WHEN traceml takes a 10 s snapshot with no --rate
    out = traceml("snapshot", "--pid", str(launcher.pid), "--seconds", "10", "--quiet",
                  "--logs-dir", str(tmp_path / "logs"), "--run-name", "rate")
    assert out.returncode == 0, out.stderr
    run = tmp_path / "logs" / "rate"
    summary = json.loads((run / "final_summary.json").read_text())
    sampling = summary["sampling"]
    # THEN the sampler raised each rank's rate by itself, within the default --max-rate, and says why:
    # steps too short for 100 Hz, and where a first raise stopped short of --max-rate (steps of up to
    # ~47 ms seen at 100 Hz: 350 Hz), possibly again for its 0.3-ms optimizer, seen in 3-4% of the steps
    # at 200-350 Hz: a few gaps between its visits all multiples of some k by chance leave accumulation
    # undecided (3 to 11% of 3-5 s windows of a recording of this job) and ask for more visits (CI, once);
    # or where the first raise stopped at 300 Hz, for 8.2 samples a step there, under 10 (a suite
    # run here, stop 67: "steps of 27 ms get 8.2 samples at 300 Hz, under 10: their ends blur")
    assert (sampling["rate_hz"], sampling["max_rate_hz"]) == (100, DEFAULT_MAX_RATE)
    assert set(sampling["rates"]) == {"0", "1"}, sampling["rates"]
    for rate in sampling["rates"].values():
        assert 100 < rate["rate_hz"] <= DEFAULT_MAX_RATE, sampling["rates"]
        assert "samples at 100 Hz" in rate["why"] or (rate["changes"] >= 2 and (
            RARE_OPTIMIZER in rate["why"] or BLURRED in rate["why"])), rate
        assert f"Rate: {rate['rate_hz']} Hz on rank" in out.stdout
    # AND the verdict stands, and each rank's step time is its own within 5%, from the change on
    # (unknown only where the job's own steps varied, as they can on 2 busy cores: conftest)
    diag = summary["step_time"]["diagnosis"]
    assert (diag["kind"], diag["worst_rank"]) == ("COMPUTE_STRAGGLER", 0), out.stdout
    end = sampling["window"]["end"]
    for rank in ("0", "1"):
        row = summary["step_time"]["ranks"][rank]
        assert row["rate_hz"] > 100 and row["since"] is not None, row
        truth = rank_truth(tmp_path, int(rank), row["since"], end)
        if honestly_unknown(summary, rank, truth):
            continue
        assert row["step_ms"] is not None, (row["clock"], truth, summary["step_time"]["step_time_note"])
        assert abs(row["step_ms"] / truth.judged(row) - 1) <= 0.05, (rank, row["step_ms"], truth.step_ms)
        assert abs(row["steps"] - truth.steps) <= max(3, 0.05 * truth.steps), (rank, row["steps"], truth.steps)
    # AND the recording, which carries the sampler's decisions, replays to the same summary
    replayed = traceml("replay", str(run), "--write", "--out", str(tmp_path / "replayed"))
    assert replayed.returncode == 0, replayed.stderr
    again = json.loads((tmp_path / "replayed" / "final_summary.json").read_text())
    assert {k: v for k, v in again.items() if k != "run_name"} == {k: v for k, v in summary.items()
                                                                   if k != "run_name"}
