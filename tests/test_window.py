"""A window that fits the step (diagnose/window.py): where a snapshot of the default length samples on."""

from __future__ import annotations

from dataclasses import replace

from tests.test_sim_shapes import _truth_ms, grid_window
from traceml_attach.diagnose.finding import Finding
from traceml_attach.diagnose.kinds import Kind
from traceml_attach.diagnose.window import advise_window
from traceml_attach.policy import FEW_BOUNDARIES


def test_a_snapshot_whose_few_steps_vary_too_much_samples_on_and_times_them_there():
    # GIVEN one rank of ~500-ms steps whose 2 DataLoader workers deliver in bursts (steps of two
    # lengths), sampled at 300 Hz for the default 10 s: 19 boundaries, every one seen, too few for
    # a median of steps that vary so (unknown, "sample longer")
    spec = "bursty:500:2:300:1:1012000"
    an, _, _, _ = grid_window(spec, 300)
    [r] = an.ranks
    assert r.step_ms is None and r.steps < FEW_BOUNDARIES, (r.step_ms, r.steps)
    # WHEN the analysis is asked whether to sample on, up to the default --max-seconds
    advice = advise_window(an, 10.0, 30.0)
    # THEN it advises 30 s, and says why in the job's own numbers
    assert advice is not None and advice.seconds == 30.0
    assert advice.why == (f"the step time was unknown after 10 s, with only {r.steps} step boundaries seen; "
                          "30 s hold about 3 times as many")
    # AND over 30 s the same job's step is known (their mean, said so: steps of two lengths), within
    # 1%, every step counted
    an, truths, lo, hi = grid_window(spec, 300, advice.seconds)
    [r], [truth] = an.ranks, truths
    assert r.step_ms is not None and abs(r.step_ms / _truth_ms(r, truth, lo, hi) - 1) <= 0.01, r.clock
    assert r.steps == truth.steps_in(lo, hi)


def test_a_rank_of_many_whose_step_is_unknown_is_named_with_its_optimizer_steps():
    # GIVEN 8 ranks accumulating 4 micro-batches of ~800-ms optimizer steps whose 2 workers deliver
    # in bursts, at 50 Hz for 10 s: about 12 optimizer steps, 4 times as many micro-batches' returns
    an, truths, lo, hi = grid_window("accum_bursty:800:4/2:50:8:2283000", 50)
    unknown = [r for r in an.ranks if r.step_ms is None]
    assert unknown
    advice = advise_window(an, 10.0, 30.0)
    # THEN the advice names the rank with the fewest steps counted, optimizer steps, not returns
    fewest = min(unknown, key=lambda r: r.steps)
    assert advice is not None
    assert advice.why.startswith(f"rank {fewest.rank}'s step time was unknown after 10 s, with only {fewest.steps} "), \
        advice.why
    assert fewest.steps <= truths[int(fewest.rank)].steps_in(lo, hi) + 2


def test_no_longer_window_for_a_known_step_for_many_boundaries_nor_past_the_most():
    # a step time known after 10 s: nothing to sample on for
    known, _, _, _ = grid_window("classic:130:0.7:100:2:745000", 100)
    assert all(r.step_ms is not None for r in known.ranks)
    assert advise_window(known, 10.0, 30.0) is None
    # steps too short for the rate (returns under 5 samples apart): many boundaries, which a longer
    # window does not make longer (the rate's advice answers those)
    short, _, _, _ = grid_window("accum_bursty:13:3/3:500:1:96000", 500)
    assert any(r.step_ms is None for r in short.ranks)
    assert all(r.steps >= FEW_BOUNDARIES for r in short.ranks if r.step_ms is None)
    assert advise_window(short, 10.0, 30.0) is None
    # a window already as long as --max-seconds allows (or --max-seconds 0)
    few, _, _, _ = grid_window("bursty:500:2:300:1:1012000", 300)
    assert advise_window(few, 10.0, 10.0) is None
    assert advise_window(few, 10.0, 0.0) is None
    # no boundary at all in 10 s (a loop not found, a job that does not step): nothing says 30 s
    # would hold any
    none_seen = replace(few, ranks=[replace(r, steps=0) for r in few.ranks])
    assert advise_window(none_seen, 10.0, 30.0) is None


def test_no_longer_window_for_a_job_that_is_stuck():
    # GIVEN a window whose step time is unknown with few boundaries, where the job hangs: a
    # longer window of it holds no more steps
    few, _, _, _ = grid_window("bursty:500:2:300:1:1012000", 300)
    hang = Finding(Kind.HANG, "critical", "no rank finished a step for 12 s", "", "")
    stuck = replace(few, report=replace(few.report, step_time=replace(few.report.step_time, findings=(hang,))))
    assert advise_window(few, 10.0, 30.0) is not None
    assert advise_window(stuck, 10.0, 30.0) is None


def test_a_length_the_user_gives_is_kept_exactly():
    from traceml_attach.cli.main import build_parser
    from traceml_attach.cli.snapshot import lengths

    parse = build_parser().parse_args
    # no --seconds: 10 s, on to --max-seconds (30 by default) where the analysis advises it
    assert lengths(parse(["snapshot", "--pid", "1"])) == (10.0, 30.0)
    assert lengths(parse(["snapshot", "--pid", "1", "--max-seconds", "60"])) == (10.0, 60.0)
    # --seconds N: N exactly, whatever --max-seconds says
    assert lengths(parse(["snapshot", "--pid", "1", "--seconds", "10"])) == (10.0, None)
    assert lengths(parse(["snapshot", "--pid", "1", "--seconds", "5", "--max-seconds", "60"])) == (5.0, None)
    # --max-seconds 0 (or under 10): never on
    assert lengths(parse(["snapshot", "--pid", "1", "--max-seconds", "0"])) == (10.0, None)
