"""What-if projections (diagnose/whatif.py): each is the arithmetic of what the window measured,
checked here on rank statistics whose answer is known."""

from __future__ import annotations

import pytest

from traceml_attach.diagnose.finding import Finding, StepEvidence
from traceml_attach.diagnose.step import diagnose_step_time
from traceml_attach.diagnose.whatif import Host, project
from traceml_attach.output.whatif_text import projection_line
from traceml_attach.steps.phases import PHASES
from traceml_attach.steps.steptime import RankStepStats


def rank(name: str, step_ms: float, shares: dict[str, float], labels: dict[str, float] | None = None,
         blocked: float | None = None, sd: float | None = 5.0) -> RankStepStats:
    full = {p: shares.get(p, 0.0) for p in PHASES}
    comp = {"input": full["input"] + full["h2d"], "compute": full["forward"] + full["backward"] + full["optimizer"],
            "wait": full["wait"]}
    active = None if blocked is None else {**full, "backward": max(0.0, full["backward"] - blocked)}
    return RankStepStats(name, 100 + int(name), 100, step_ms, {p: v * step_ms for p, v in full.items()}, full, comp,
                         labels or {}, None, "main (train.py)", "MainThread",
                         None if blocked is None else blocked * step_ms, 1.0, blocked, active, step_sd_ms=sd)


def finding(kind: str) -> Finding:
    return Finding(kind, "critical", "", "", "", 0, StepEvidence(100, 100.0, 0.0, 0.0, 0.0))


def test_input_bound_overlap_and_the_workers_it_takes():
    # GIVEN a 100 ms step whose DataLoader fetch (no workers) is 60 ms of it
    r = rank("0", 100.0, {"input": 0.6, "forward": 0.15, "backward": 0.25})
    # WHEN the host has 4 cores, a quarter busy
    out = project([finding("INPUT_BOUND")], [r], {"0": 100.0}, {"0": 0}, Host(4, 25.0))
    # THEN overlapping the fetch leaves the 40 ms of compute; a 60 ms batch over 40 ms of compute asks 2 workers
    (p,) = out
    assert (p.step_ms, p.gain_ms, p.gain_pct, p.workers, p.checked) == (40.0, 60.0, 60.0, 2, True)
    assert p.low_ms == pytest.approx(40 - 5 * 0.4) and p.high_ms == pytest.approx(40 + 5 * 0.4)


def test_input_bound_with_too_few_free_cores_projects_what_fits():
    # GIVEN the fetch is 80 ms with 1 worker already (the loop waits: the worker makes a batch in 100 ms)
    r = rank("0", 100.0, {"input": 0.8, "forward": 0.1, "backward": 0.1})
    # WHEN one core is free
    out = project([finding("INPUT_BOUND")], [r], {"0": 100.0}, {"0": 1}, Host(2, 50.0))
    full, fits = out
    # THEN full overlap wants 100 / 20 = 5 workers (not checkable: they do not fit); 2 workers give 50 ms
    assert (full.workers, full.checked, full.step_ms) == (5, False, 20.0)
    assert full.assumption.endswith("the host has 1 free core for 4 more workers: they would take CPU from the compute")
    assert (fits.workers, fits.step_ms, fits.checked) == (2, 50.0, True)


def test_wait_heavy_one_projection_per_labelled_wait():
    r = rank("0", 200.0, {"forward": 0.3, "backward": 0.3, "wait": 0.4},
             labels={"logging": 0.5, "checkpoint": 0.25, "device_sync": 0.2, "other": 0.05})
    out = project([finding("WAIT_HEAVY")], [r], {"0": 200.0}, {"0": 0}, Host(None, None))
    by_fix = {p.fix.split(" (")[0]: (p.step_ms, p.checked) for p in out}
    assert by_fix == {"without the logging": (160.0, True), "without the checkpoint writes": (180.0, True),
                      "without the device sync": (184.0, False), "without the other": (196.0, False)}


def four_ranks(blocked: list[float]) -> list[RankStepStats]:
    """Synchronized ranks: one 100 ms step, each blocked in backward's all-reduce for its share."""
    return [rank(str(i), 100.0, {"input": 0.05, "forward": 0.2, "backward": 0.75}, blocked=b)
            for i, b in enumerate(blocked)]


def test_straggler_the_worst_then_the_k_worst_ranks():
    # GIVEN blocked 45, 35, 5, 25 ms a step: rank 2 arrives last (the collective's own cost 5 ms), then 3, then 1
    ranks = four_ranks([0.45, 0.35, 0.05, 0.25])
    findings = diagnose_step_time(ranks)
    assert findings[0].kind == "COMPUTE_STRAGGLER" and findings[0].worst_rank == 2
    out = project(findings, ranks, {r.rank: 100.0 for r in ranks}, {}, Host(None, None))
    straggler = [p for p in out if p.finding == "COMPUTE_STRAGGLER"]
    # THEN rank 2 fixed: rank 3 sets the pace, 20 ms sooner; ranks 2 and 3 fixed: rank 1 does, 30 ms sooner
    assert [(p.ranks, p.step_ms) for p in straggler] == [((2,), 80.0), ((2, 3), 70.0)]
    # ...and every rank as fast as rank 0 (blocked 45 ms): 40 ms sooner
    (bound,) = [p for p in out if p.finding == "RANKS"]
    assert bound.step_ms == 60.0 and bound.checked


def test_no_projection_is_made_of_nothing():
    # a gain under 2% of the step is noise: not projected
    r = rank("0", 100.0, {"input": 0.01, "forward": 0.49, "backward": 0.5})
    assert project([finding("INPUT_BOUND")], [r], {"0": 100.0}, {"0": 0}, Host(2, 50.0)) == ()


def test_without_a_per_step_spread_there_is_no_interval():
    # live views keep sums, not each step: no spread, so no interval (never a zero-width one)
    r = rank("0", 100.0, {"input": 0.6, "forward": 0.15, "backward": 0.25}, sd=None)
    (p,) = project([finding("INPUT_BOUND")], [r], {"0": 100.0}, {"0": 0}, Host(None, None))
    assert (p.step_ms, p.low_ms, p.high_ms) == (40.0, None, None)
    assert projection_line(p) == ("input fully overlapped with compute: 40 ms a step, −60 ms (−60%); "
                                  "DataLoader num_workers=2")
