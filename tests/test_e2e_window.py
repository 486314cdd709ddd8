"""A window that fits the step, on a real job: a snapshot of the default length samples on where
its steps are too few in 10 s to time, says so, and the recording replays to the same summary.
(`examples/grad_accum.py --accum 16 --width 1024`, optimizer steps of ~1.2 s, sampled on too when
alone here, but under the suite's load its 10 s were timed or held 40 boundaries: not a sure case.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launch import read_truth
from tests.conftest import steps_from, traceml

pytestmark = [pytest.mark.e2e, pytest.mark.timing]


def test_a_snapshot_of_steps_too_few_in_10_s_samples_on_until_it_can_time_them(example, tmp_path: Path):
    # GIVEN a `while True` loop whose slow worker makes each batch in 2.5 s, then ~20 ms of compute:
    # 4 steps in the default 10 s, their boundaries (the compute) under two samples at 100 Hz, too
    # few to time (here alone: "only 1 step boundary seen"; raised to 400 Hz and back meanwhile)
    job = example("while_next", "--input-ms", "2500", "--width", "1024")
    # WHEN traceml takes a snapshot with no --seconds
    out = traceml("snapshot", "--pid", str(job.pid), "--logs-dir", str(tmp_path / "logs"), "--run-name", "longer")
    assert out.returncode == 0, out.stderr
    run = tmp_path / "logs" / "longer"
    summary = json.loads((run / "final_summary.json").read_text())
    sampling = summary["sampling"]
    # THEN it sampled on to the default --max-seconds, 30 s, recorded why, and said so on stderr and
    # in the text
    extended = sampling["extended"]
    assert extended is not None, out.stdout
    assert (extended["from_s"], extended["to_s"]) == (10.0, 30.0), extended
    assert extended["why"].startswith("the step time was unknown after 10 s, with only "), extended
    assert f"traceml: {extended['why']}: sampling on to 30 s (--seconds N samples exactly N)" in out.stderr
    assert f"Length: sampled on to 30 s, not 10: {extended['why']} (--seconds fixes the length)" in out.stdout
    assert "sampling 29/30 s" in out.stderr or "sampling 30/30 s" in out.stderr, out.stderr
    window = sampling["window"]
    assert window["end"] - window["start"] >= 28.0, window
    # AND a step time given over the 30 s is the job's within 5% (here alone: 2499.5 ms over 11
    # steps, the job's 2.5 s)
    row = summary["step_time"]["ranks"]["0"]
    truth = read_truth(tmp_path / "while_next.jsonl", steps_from(summary), window["end"])
    if row["step_ms"] is not None:
        assert abs(row["step_ms"] / truth.judged(row) - 1) <= 0.05, (row["step_ms"], truth)
    # AND the recording, which carries the decision, replays to the same summary
    replayed = traceml("replay", str(run), "--write", "--out", str(tmp_path / "replayed"))
    assert replayed.returncode == 0, replayed.stderr
    again = json.loads((tmp_path / "replayed" / "final_summary.json").read_text())
    assert {k: v for k, v in again.items() if k != "run_name"} == {k: v for k, v in summary.items()
                                                                   if k != "run_name"}
