"""Real jobs' recorded frame streams against the jobs' own per-step timing (tests/record_fixtures.py
TRUTHED): the step time is known within 5% of each rank's median step, and the steps are counted
within 3%, at the default settings, on the shapes where the loop's line rarely wraps; and, where the
truth has them, every phase's share within 2 percentage points of the job's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traceml_attach.runtime.pipeline import replay_file
from traceml_attach.steps.classify import load_rules

FIXTURES = Path(__file__).parent / "fixtures"
NAMES = sorted(p.name.removesuffix(".truth.json") for p in FIXTURES.glob("*.truth.json"))
# truth_hf_trainer_accum4_micro: HF Trainer with 4 micro-batches, a 12-s snapshot raised to 400 Hz by
# bench/frameworks_bench.py (one run of three), where a micro-batch's return goes unseen now and then:
# its micro-batch was given as the step (-75%) until the input's visits, once an optimizer step, counted
# k with the optimizer's (accumulation._by_odds)


# Known wrong (issue "Every step counted"): nanoGPT's own train.py with 4 micro-batches: its
# micro-batches are miscounted now and then (gaps of 5, 6, 7, 9 between the optimizer's visits
# beside 45 of 4 and 14 of 8). k = 4 is counted now (it was 2, every multiple of 4 being one of 2:
# 44.3 ms for 89.3) and the step time is the job's (87.5 ms for 89.3), but the miscounted
# micro-batches, grouped by 4, make 132 steps for 128 (+3.1%; 136 before the thread's time on a CPU
# told 18 of the 55 intervals counted as two or more for one slow micro-batch each: its one-micro-batch
# intervals are on a CPU 90.0% of their time, just over ON_CPU, so the other 37, which worked 1.5-2.4
# micro-batches' time, are drawn)
KNOWN_WRONG = {"truth_nanogpt_accum4": "miscounted micro-batches grouped by 4: 132 steps for 128"}
# Known wrong: 2 gloo ranks on 2 cores that the attacher's py-spy (queued 16% of the time) shares:
# the rank that waits in the all-reduce shows its input 2.6 points short and its backward 4.6 over
SHARES_WRONG: dict[str, str] = {"truth_ddp_starved": "the waiting rank's backward 4.6 points over, input 2.6 short",
                                "truth_hf_trainer_accum4_fetch": "backward 2.8 points over (as its recording run said)"}
# Jobs whose step time is rightly unknown: a hand-written loader on two cores the job, py-spy and
# traceml share, one step in four slowed 1.3-2x in its input. 32 of 137 intervals are as long as two
# steps, where boundaries go unseen 3.5% of the time (5 expected): which of them hide one cannot be
# told, and that moves the median from 37 to 42 ms (its 68th percentile). Counted as two each, they
# made 171 steps of the job's 147 (+16%)
UNEVEN = {"truth_hand_written_slowed"}
# ...and one whose micro-batches sped up from ~350 to ~130 ms in its 10 s (examples/grad_accum.py, 4
# to an optimizer step, its CPU shared with another process: its own steps varied by 43%): every return
# seen, the gaps between the optimizer's visits counted in them 4 (one 8), but one period timed the
# long micro-batches as two (gaps of 7 beside 8). Said unknown for returns that went unseen (CI's run
# of stop 78: the frameworks test's grad_accum job, twice); grouped by that period, it was 596 ms for
# the job's median of 706 (-16%)
DRIFTING = {"truth_grad_accum_drifting"}
# ...and one whose median the samples' lag moved: a text tokenized in Python on the loader's line (its
# garbage collections hold a step for 2-3 steps' time), every boundary seen at 400 Hz, 10 samples a
# step, the steps' mean 17% over their median. The median seen, 25.8 ms, is 4.2% over the job's 24.7;
# the steps recovered from the blur put that at +3.0% (``period.deblurred_moves``), beyond the 3%
# a median is given at; its mean is not given either (its intervals of two steps' length could hide
# more than 5% of the steps). It was given as known, 4.2% off, until stop 86
BLURRED = {"truth_hand_written_text"}
# Jobs slowed 2x mid-window by a busy loop joining their CPU (tests/record_fixtures.py SLOWED): each side
# of the change counted on its own period, the mean step given (clock.by_regimes). grad_accum's
# micro-batches went from ~80 to ~156 ms: one period counted them 8 to the optimizer step (+92% on
# another run of it) or its visits' comb counted the slow steps twice (39 steps for 26, -33% on the mean)
SLOWED = {"truth_grad_accum_slowed", "truth_compute_bound_slowed"}


def marked(name: str, known: dict[str, str] = KNOWN_WRONG) -> object:
    if name in known:
        return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=known[name]))
    return name


@pytest.mark.parametrize("name", [marked(n) for n in NAMES])
def test_a_recorded_job_gets_its_own_step_time(name: str):
    truth = json.loads((FIXTURES / f"{name}.truth.json").read_text())["ranks"]
    pipeline, problem = replay_file(FIXTURES / f"{name}.msgpack", load_rules())
    assert problem is None
    stats = {s.rank: s for s in pipeline.window_analysis().ranks}
    assert sorted(stats) == sorted(truth)
    for rank, want in truth.items():
        got = stats[rank]
        if name in UNEVEN:
            # no step time, saying why, and the steps surely seen: at most the job's, and most of them
            assert got.step_ms is None and got.clock is not None and "slow steps" in (got.clock.reason or "")
            assert 0.9 * want["steps"] <= got.steps <= want["steps"], (rank, got.steps, want)
            continue
        if name in BLURRED:
            # no step time, saying why, and the steps counted within 3%
            assert got.step_ms is None and "samples' lag" in ((got.clock and got.clock.reason) or ""), (rank, got.clock)
            assert abs(got.steps - want["steps"]) <= max(1, 0.03 * want["steps"]), (rank, got.steps, want)
            continue
        if name in DRIFTING:
            # no step time, saying the true why: the steps varied, no return went unseen (since stop 80 the
            # micro-batches are counted on each side of the speed-up, 4 a step, as the job has: their
            # optimizer steps, 12, too few for their mean)
            reason = (got.clock and got.clock.reason) or ""
            assert got.step_ms is None and "vary too much for a typical" in reason, (rank, got.clock)
            assert "went unseen" not in reason and got.micro_batches in (None, 4), (rank, got.clock)
            continue
        if name in SLOWED:
            # the steps changed length: the mean step, said so, with the two lengths
            assert got.clock is not None and got.clock.mean and got.clock.shift_ns is not None, (rank, got.clock)
            # ...lengths of steps, the mean between them (not the micro-batches')
            assert got.step_ms is not None and min(got.clock.shift_ns) < got.step_ms * 1e6 < max(got.clock.shift_ns)
        assert got.step_ms is not None, (rank, got.clock)
        want_ms = want["mean_ms"] if got.clock is not None and got.clock.mean and "mean_ms" in want else want["step_ms"]
        assert abs(got.step_ms / want_ms - 1) <= 0.05, (rank, got.step_ms, want)
        assert abs(got.steps - want["steps"]) <= max(1, 0.03 * want["steps"]), (rank, got.steps, want)


SHARED = [n for n in NAMES if all("shares" in r for r in json.loads((FIXTURES / f"{n}.truth.json").read_text())
                                  ["ranks"].values())]
# the diagnosis each of them must get
DIAGNOSES = {"truth_hand_written": "COMPUTE_BOUND", "truth_hand_written_input": "INPUT_BOUND",
             "truth_hand_written_eval": "COMPUTE_BOUND", "truth_hand_written_text": "INPUT_BOUND",
             "truth_hand_written_log": "COMPUTE_BOUND", "truth_hf_trainer_accum4": "COMPUTE_BOUND",
             "truth_workers32": "COMPUTE_BOUND", "truth_hand_written_slowed": "INPUT_BOUND",
             "truth_ddp_starved": "COMPUTE_STRAGGLER", "truth_ddp_raised": "COMPUTE_STRAGGLER",
             "truth_lightning_ddp_accum2": "INPUT_STRAGGLER", "truth_hf_trainer_accum4_micro": "COMPUTE_BOUND",
             "truth_hf_trainer_accum4_input": "INPUT_BOUND",
             "truth_hf_trainer_accum4_fetch": "COMPUTE_BOUND", "truth_grad_accum_drifting": "COMPUTE_BOUND",
             "truth_grad_accum_slowed": "COMPUTE_BOUND", "truth_compute_bound_slowed": "COMPUTE_BOUND"}
@pytest.mark.parametrize("name", [marked(n, SHARES_WRONG) for n in SHARED])
def test_a_recorded_job_gets_its_own_phase_shares(name: str):
    truth = json.loads((FIXTURES / f"{name}.truth.json").read_text())["ranks"]
    pipeline, problem = replay_file(FIXTURES / f"{name}.msgpack", load_rules())
    assert problem is None
    analysis = pipeline.window_analysis()
    stats = {s.rank: s for s in analysis.ranks}
    for rank, want in truth.items():
        shares = stats[rank].shares or {}
        moved = {p: round(100 * (shares.get(p, 0.0) - v), 1) for p, v in want["shares"].items()
                 if abs(shares.get(p, 0.0) - v) > 0.02}
        assert not moved, (rank, moved)
    assert analysis.report.step_time.diagnosis.kind == DIAGNOSES[name]


def test_eval_a_metric_and_a_checkpoint_are_told_apart():
    # a metric under no_grad each step (no forward pass beneath it), nanoGPT's decorated
    # estimate_loss() (forward passes beneath it) and torch.save every 25 steps
    pipeline, problem = replay_file(FIXTURES / "truth_hand_written_eval.msgpack", load_rules())
    assert problem is None
    labels = {s.rank: s for s in pipeline.window_analysis().ranks}["0"].wait_labels
    assert labels["eval"] > labels["metric"] > labels["checkpoint"] > 0, labels
    assert labels["eval"] + labels["metric"] + labels["checkpoint"] > 0.95, labels


def test_a_loader_no_rule_names_is_input_by_data_flow():
    # GIVEN batches made by encode_windows(), which no rule names (a text tokenized in Python: no
    # memmap, no from_numpy, no DataLoader), on the line `x, y = ... encode_windows()` that makes
    # what the loss is computed from
    from traceml_attach.diagnose.analysis import analyze
    from traceml_attach.ingest.stream import read_recording

    rec, _ = read_recording(FIXTURES / "truth_hand_written_text.msgpack")
    analysis = analyze(rec, load_rules())
    timeline = analysis.timelines["0"]
    totals: dict[str, int] = {}
    for seg in timeline.segments:
        totals[seg.phase] = totals.get(seg.phase, 0) + seg.dur_ns
    whole = sum(totals.values())
    truth = json.loads((FIXTURES / "truth_hand_written_text.truth.json").read_text())["ranks"]["0"]["shares"]
    # THEN the window's samples hold every phase within 2 points of the job's own
    for phase, want in truth.items():
        assert abs(totals.get(phase, 0) / whole - want) <= 0.02, (phase, totals.get(phase, 0) / whole, want)
    assert analysis.report.step_time.diagnosis.kind == "INPUT_BOUND"


def test_printing_a_tensor_on_a_cpu_job_is_logging_not_a_device_sync():
    # GIVEN the loss tensor formatted into a print every step (f"{loss:.4f}": Tensor.__format__),
    # on a job that holds no GPU
    pipeline, problem = replay_file(FIXTURES / "truth_hand_written_log.msgpack", load_rules())
    assert problem is None
    labels = {s.rank: s for s in pipeline.window_analysis().ranks}["0"].wait_labels
    # THEN that wait is logging: there is no device to wait for
    assert "device_sync" not in labels, labels
    assert labels["logging"] >= 0.5, labels


def test_lightnings_micro_batches_behind_a_straggler_are_not_taken_for_its_steps():
    # GIVEN Lightning's Trainer.fit on 2 gloo ranks (tests/record_fixtures.py's
    # truth_lightning_ddp_accum2 job, a 12-s snapshot at 350 Hz), 2 micro-batches a step, rank 1 an
    # input straggler: rank 0's returns alternate ~200 and ~90 ms (its last micro-batch waits in
    # the all-reduce), every one seen. The job's own timing: 294.3 / 291.0 ms, 29 steps
    pipeline, problem = replay_file(FIXTURES / "lightning_ddp_accum2_unknown.msgpack", load_rules())
    assert problem is None
    stats = {s.rank: s for s in pipeline.window_analysis().ranks}
    # THEN rank 0's returns are not taken for its steps: its optimizer's visits, one in every step
    # and every one seen, mark them, too uneven for a median, so their mean is given, said so,
    # within 5% of the job's own (accumulation._visits_mean; it was unknown, "may be micro-batches");
    # rank 1's optimizer step, from its optimizer's visits, is its own
    zero = stats["0"]
    assert zero.step_ms is not None and zero.clock is not None and zero.clock.mean, zero.clock
    assert abs(zero.step_ms / 294.3 - 1) <= 0.05 and zero.steps == 29, (zero.step_ms, zero.steps)
    assert stats["1"].step_ms is not None and abs(stats["1"].step_ms / 291.0 - 1) <= 0.05, stats["1"].clock


def test_a_loaded_ranks_two_optimizer_visits_do_not_make_its_steps_micro_batches():
    # GIVEN examples/ddp.py --straggler backward --slow-rank 1 (2 gloo ranks, no accumulation), a 10-s
    # snapshot at 100 Hz beside two CPU hogs (1.5 s on, 0.5 s off; one run of five): rank 1's 1.7-ms
    # optimizer was seen in 2 of its 50 intervals, one visit 74 ms long. Their mean said the optimizer
    # is missed 1.5% of the time, so the 48 intervals without it were micro-batches, and rank 1's step
    # time was unknown for it (CI's stop-60 failure: no sync_wait_ms to compare)
    pipeline, problem = replay_file(FIXTURES / "ddp_backward_loaded.msgpack", load_rules())
    assert problem is None
    stats = {s.rank: s for s in pipeline.window_analysis().ranks}
    # THEN both ranks are timed in their own steps, one step time as DDP keeps them in step
    assert stats["1"].micro_batches == 1 and stats["1"].step_ms is not None, stats["1"].clock
    assert stats["0"].step_ms is not None and abs(stats["1"].step_ms / stats["0"].step_ms - 1) <= 0.02
    assert stats["0"].sync_wait_ms is not None and stats["1"].sync_wait_ms is not None
    assert stats["0"].sync_wait_ms > stats["1"].sync_wait_ms + 20
