"""Real jobs' recorded frame streams against the jobs' own per-step timing (tests/record_fixtures.py
TRUTHED): the step time is known within 5% of each rank's median step, and the steps are counted
within 3%, at the default settings, on the shapes where the loop's line rarely wraps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traceml_attach.runtime.pipeline import replay_file
from traceml_attach.steps.classify import load_rules

FIXTURES = Path(__file__).parent / "fixtures"
NAMES = sorted(p.name.removesuffix(".truth.json") for p in FIXTURES.glob("*.truth.json"))


@pytest.mark.parametrize("name", NAMES)
def test_a_recorded_job_gets_its_own_step_time(name: str):
    truth = json.loads((FIXTURES / f"{name}.truth.json").read_text())["ranks"]
    pipeline, problem = replay_file(FIXTURES / f"{name}.msgpack", load_rules())
    assert problem is None
    stats = {s.rank: s for s in pipeline.window_analysis().ranks}
    assert sorted(stats) == sorted(truth)
    for rank, want in truth.items():
        got = stats[rank]
        assert got.step_ms is not None, (rank, got.clock)
        assert abs(got.step_ms / want["step_ms"] - 1) <= 0.05, (rank, got.step_ms, want)
        assert abs(got.steps - want["steps"]) <= max(1, 0.03 * want["steps"]), (rank, got.steps, want)
