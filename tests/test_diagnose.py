from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from traceml_attach.diagnose.analysis import analyze
from traceml_attach.diagnose.evidence import HangEvidence, RankStack
from traceml_attach.diagnose.finding import Finding
from traceml_attach.diagnose.hang import waits_on_children
from traceml_attach.diagnose.kinds import Kind
from traceml_attach.diagnose.step import NO_STEP_YET, diagnose_step_time, refine_with_gpu, unknown_step_note
from traceml_attach.runtime.pipeline import replay_file
from traceml_attach.steps.batch_timeline import Timeline
from traceml_attach.steps.classify import load_rules
from traceml_attach.steps.clock import StepClock
from traceml_attach.steps.loopframe import LoopFrame
from traceml_attach.steps.phases import PHASES
from traceml_attach.steps.steptime import COMPONENTS, RankStepStats


def stats(steps: int = 50, step_ms: float = 100.0, **shares: float) -> RankStepStats:
    full = dict.fromkeys(PHASES, 0.0)
    full.update(shares)
    full["forward"] = 1.0 - sum(v for k, v in full.items() if k != "forward")
    comp = {name: sum(full[p] for p in ps) for name, ps in COMPONENTS.items()}
    return RankStepStats("0", 42, steps, step_ms, {p: v * step_ms for p, v in full.items()}, full,
                         comp, {"device_sync": 0.8, "logging": 0.2} if full["wait"] else {}, None,
                         "train (t.py)", "MainThread")


@pytest.mark.parametrize(
    ("shares", "kind", "severity"),
    [
        ({"input": 0.50}, "INPUT_BOUND", "critical"),
        ({"input": 0.12}, "INPUT_BOUND", "warning"),
        ({"input": 0.05, "h2d": 0.07}, "INPUT_BOUND", "warning"),  # copies count as input
        ({"wait": 0.35}, "WAIT_HEAVY", "critical"),
        ({"wait": 0.15}, "WAIT_HEAVY", "warning"),
        ({"input": 0.03, "wait": 0.03, "backward": 0.5}, "COMPUTE_BOUND", "info"),
        ({"input": 0.07, "wait": 0.07, "backward": 0.4}, "BALANCED", "info"),
    ],
)
def test_kinds(shares, kind, severity):
    first = diagnose_step_time([stats(**shares)])[0]
    assert (first.kind, first.severity) == (kind, severity)
    assert first.why and first.action


def test_critical_needs_twenty_steps():
    assert diagnose_step_time([stats(steps=19, input=0.5)])[0].severity == "warning"
    assert diagnose_step_time([stats(steps=20, input=0.5)])[0].severity == "critical"


def test_one_step_is_warmup():
    assert diagnose_step_time([stats(steps=1, input=0.5)])[0].kind == "WARMUP"


def test_a_first_look_with_one_sure_step_but_several_cycles_is_judged():
    # the first 0.8-s window of a job whose count is unsure (its returns may be micro-batches: 1
    # optimizer visit) holds 4 complete cycles of the loop, which the shares rest on
    assert diagnose_step_time([replace(stats(steps=1, input=0.5), cycles=4)])[0].kind == "INPUT_BOUND"
    assert diagnose_step_time([replace(stats(steps=1, input=0.5), cycles=1)])[0].kind == "WARMUP"


def test_the_recorded_examples_first_look_is_their_verdict():
    fixtures = Path(__file__).parent / "fixtures"
    expected = {"input_bound": "INPUT_BOUND", "wait_heavy": "WAIT_HEAVY", "compute_bound": "COMPUTE_BOUND"}
    for name, kind in expected.items():
        pipeline, _ = replay_file(fixtures / f"{name}.msgpack", load_rules())
        start = pipeline.rec.time_range()[0]
        analysis = analyze(pipeline.rec, load_rules(), start_ns=start, end_ns=start + 800_000_000)   # the first window
        assert analysis.report.step_time.diagnosis.kind == kind, name


def test_both_input_and_wait_the_larger_leads():
    findings = diagnose_step_time([stats(input=0.15, wait=0.30)])
    assert [f.kind for f in findings] == ["WAIT_HEAVY", "INPUT_BOUND"]


def test_no_ranks_is_no_data():
    assert diagnose_step_time([])[0].kind == "NO_DATA"


UNKNOWN = StepClock("unknown", None, reason="steps shorter than 5 samples (50 ms at 100 Hz) cannot be told apart",
                    suggested_rate_hz=600)


def test_an_unknown_step_time_keeps_the_diagnosis_and_gives_no_milliseconds():
    # GIVEN a rank whose shares are known but whose step time is not
    r = replace(stats(input=0.6), step_ms=None, phases_ms=None, clock=UNKNOWN)
    # THEN the diagnosis stands on the shares, names no step time, and the note says why and what to do
    f = diagnose_step_time([r])[0]
    assert f.kind == "INPUT_BOUND"
    assert "step time unknown" in f.why and " ms over " not in f.why
    note = unknown_step_note([r])
    assert note is not None and "--rate 600" in note and "5 samples" in note
    assert unknown_step_note([stats(input=0.6)]) is None


def test_status_labels_follow_the_seeds():
    assert diagnose_step_time([stats(input=0.5)])[0].status == "INPUT-BOUND"
    assert diagnose_step_time([stats(wait=0.5)])[0].status == "WAIT-HEAVY"


@pytest.mark.parametrize(("util", "kind", "words"), [
    (95.0, "COMPUTE_BOUND", "saturated"),
    (10.0, "WAIT_HEAVY", "idle 90%"),
    (50.0, "WAIT_HEAVY", "outside input and compute"),
])
def test_device_sync_on_cuda_is_read_with_gpu_utilization(util, kind, words):
    ranks = [stats(wait=0.6, backward=0.2)]
    first = refine_with_gpu(diagnose_step_time(ranks), ranks, {"0": util})[0]
    assert first.kind == kind
    assert words in first.summary


def test_without_gpu_data_nothing_changes():
    ranks = [stats(wait=0.6)]
    assert refine_with_gpu(diagnose_step_time(ranks), ranks, {})[0].kind == "WAIT_HEAVY"


def test_a_wait_read_as_gpu_compute_does_not_outrank_the_other_findings():
    # GIVEN a window that is both input-bound and wait-heavy, the wait being device sync
    ranks = [stats(input=0.15, wait=0.5)]
    findings = diagnose_step_time(ranks)
    assert [f.kind for f in findings] == ["WAIT_HEAVY", "INPUT_BOUND"]
    # WHEN the GPU turns out saturated, the wait is GPU compute (info): the input warning leads
    refined = refine_with_gpu(findings, ranks, {"0": 80.0})
    assert [(f.kind, f.severity) for f in refined] == [("INPUT_BOUND", "warning"), ("COMPUTE_BOUND", "info")]
    # ...unless the GPU sets the pace (busy 90% or more): the input ran while it worked. One finding
    # says both
    refined = refine_with_gpu(findings, ranks, {"0": 95.0})
    assert [(f.kind, f.severity) for f in refined] == [("COMPUTE_BOUND", "info")]
    assert "faster input would not shorten the step" in refined[0].why and "device sync" in refined[0].why


def test_a_rank_without_cpu_counters_is_not_blamed_for_its_blocked_time():
    # three identical DDP ranks; 30 of each one's 60 ms of backward is blocked in the all-reduce.
    # Rank 2 has no CPU counters (its training thread is not the main thread, say), so its blocked
    # time cannot be taken out: the ranks must then be compared on their sampled time alone.
    ranks = []
    for rank in ("0", "1", "2"):
        r = stats(backward=0.6)
        counters = {"sync_wait_share": 0.3, "active_shares": {**(r.shares or {}), "backward": 0.3}}
        ranks.append(replace(r, rank=rank, pid=40 + int(rank), **(counters if rank != "2" else {})))
    kinds = {f.kind for f in diagnose_step_time(ranks)}
    assert not {k for k in kinds if "STRAGGLER" in k}, kinds
    # the same job with rank 2's sampled backward 30 ms longer is still told apart
    ranks[2] = replace(ranks[2], phases_ms={**(ranks[2].phases_ms or {}), "backward": 90.0})
    top = diagnose_step_time(ranks)[0]
    assert (top.kind, top.worst_rank) == ("COMPUTE_STRAGGLER", 2)


def ddp_rank(rank: str, blocked: float, step_ms: float | None, **shares: float) -> RankStepStats:
    """A DDP rank (CPU counters read) blocked ``blocked`` of its step in backward's all-reduce."""
    r = replace(stats(**shares), rank=rank)
    active = {**(r.shares or {}), "backward": (r.shares or {})["backward"] - blocked}
    known = {} if step_ms is not None else {"step_ms": None, "phases_ms": None, "clock": UNKNOWN}
    return replace(r, sync_wait_share=blocked, active_shares=active, **known)


@pytest.mark.parametrize("step_ms", [100.0, None])
def test_ddp_straggler_kinds_come_from_shares_with_or_without_a_step_time(step_ms):
    # rank 0 does 60% of extra forward work; rank 1 waits for it, blocked 60% of the step in backward
    compute = [ddp_rank("0", 0.0, step_ms, input=0.03, backward=0.2, forward=0.7),
               ddp_rank("1", 0.6, step_ms, input=0.03, backward=0.8)]
    top = diagnose_step_time(compute)[0]
    assert (top.kind, top.worst_rank) == ("COMPUTE_STRAGGLER", 0)
    assert "forward" in top.summary
    # rank 1's input is 60% of its step; rank 0 waits for it in backward
    inp = [ddp_rank("0", 0.55, step_ms, input=0.03, backward=0.8),
           ddp_rank("1", 0.0, step_ms, input=0.6, backward=0.25)]
    top = diagnose_step_time(inp)[0]
    assert (top.kind, top.worst_rank) == ("INPUT_STRAGGLER", 1)
    assert ("ms" in top.why) == (step_ms is not None)


def test_signed_numbers_print_one_sign():
    # a mixed straggler: more input, less compute than the others
    ranks = [ddp_rank("0", 0.45, 100.0, input=0.03, backward=0.8),
             ddp_rank("1", 0.0, 100.0, input=0.3, backward=0.15, wait=0.3)]
    top = diagnose_step_time(ranks)[0]
    assert top.kind == "STRAGGLER", top
    assert "+-" not in top.why and "+-" not in top.summary
    assert "-" in top.why


def test_a_compute_bound_rank_on_a_gpu_that_sets_the_pace_is_told_its_shares_are_where_it_waited():
    ranks = [stats(input=0.03, optimizer=0.8)]
    head = diagnose_step_time(ranks)[0]
    assert head.kind == "COMPUTE_BOUND"
    # a GPU 80% busy: the host may still be working where its stacks are (no claim)
    assert refine_with_gpu([head], ranks, {"0": 80.0})[0] == head
    told = refine_with_gpu([head], ranks, {"0": 99.0})[0]
    assert "the GPU is 99% busy" in told.why and "waited (optimizer 80%)" in told.why
    assert told.action.startswith("optimize GPU compute") and told.evidence.gpu_sm_util == 99.0


def test_an_input_straggler_leads_where_the_typical_input_share_is_its_alone():
    # Lightning under torchrun: rank 1's input 36% of its step, rank 0's 9%; of two ranks the median
    # is their mean, 23%, over INPUT-BOUND's critical threshold, while rank 0 waits 18% of the step
    ranks = [ddp_rank("0", 0.24, 213.0, input=0.09, backward=0.58),
             ddp_rank("1", 0.06, 213.0, input=0.36, backward=0.34)]
    findings = diagnose_step_time(ranks)
    assert [(f.kind, f.severity) for f in findings[:2]] == [("INPUT_STRAGGLER", "warning"), ("INPUT_BOUND", "warning")]
    assert findings[0].worst_rank == 1
    # where the other rank's input crosses the threshold too, the input is the job's: INPUT-BOUND leads
    ranks[0] = ddp_rank("0", 0.24, 213.0, input=0.2, backward=0.5)
    assert [(f.kind, f.severity) for f in diagnose_step_time(ranks)[:2]] == [("INPUT_BOUND", "critical"),
                                                                           ("INPUT_STRAGGLER", "warning")]


def test_input_on_a_gpu_that_sets_the_pace_is_compute_bound():
    # the host 70% of its step in .to() from pageable memory (which waits for the queued kernels) and
    # 17% loading batches while the GPU, 99% busy, works: faster input cannot shorten the step
    ranks = [stats(input=0.17, h2d=0.7, backward=0.06)]
    head = diagnose_step_time(ranks)[0]
    assert head.kind == "INPUT_BOUND"
    assert refine_with_gpu([head], ranks, {"0": 80.0})[0] == head     # a GPU that waits at times: no claim
    told = refine_with_gpu([head], ranks, {"0": 99.0})
    assert [f.kind for f in told] == ["COMPUTE_BOUND"]
    assert "host-to-device copies 70%" in told[0].why and told[0].evidence.gpu_sm_util == 99.0


def test_a_balanced_step_whose_wait_is_for_a_busy_gpu_is_compute_bound():
    # compute 86%, input 7%, wait 7% of it in device sync (stats(): 80% of the wait): BALANCED, but on a
    # GPU that is 99% busy the host's wait for it is the GPU's kernels too
    ranks = [stats(input=0.07, wait=0.09, optimizer=0.7)]
    head = diagnose_step_time(ranks)[0]
    assert head.kind == "BALANCED"
    assert refine_with_gpu([head], ranks, {"0": 80.0})[0] == head
    told = refine_with_gpu([head], ranks, {"0": 99.0})[0]
    assert told.kind == "COMPUTE_BOUND" and "device sync 7%" in told.why and "the GPU is 99% busy" in told.why
    # with no more than 1 point of the wait in device sync, it stays what it was
    little = [replace(ranks[0], wait_labels={"device_sync": 0.1, "logging": 0.9})]
    assert refine_with_gpu([head], little, {"0": 99.0})[0] == head


def test_a_hang_stands_unless_every_rank_is_loopless_and_waits_on_a_busy_child():
    # GIVEN a HANG of one rank at one line for 12 s, its process (PID 101) with a child (PID 202)
    # that worked 98% of a core through it
    stack = RankStack("wait/other", "<module> (wrap.py:5)", None, ("<module> (wrap.py:5)",))
    hang = Finding(Kind.HANG, "critical", "the job is stuck: every rank is at the same place", "", "", None,
                   HangEvidence(12.0, {0: stack}, (), None))
    loopless = Timeline(101, 1, "MainThread", None, (), (), StepClock("unknown", None), {})
    busy = {"0": [(202, 98.0)]}
    # THEN a process with no training loop waits on that child: no HANG, and the child is named
    waiting = waits_on_children(hang, {"0": loopless}, busy)
    assert waiting is not None and waiting.kind == Kind.NO_DATA
    assert "traceml attach --pid 202" in waiting.action and "<module> (wrap.py:5)" in waiting.why
    # AND a loop that waits on a busy child (a DataLoader worker that never returns its batch) is
    # stuck, as is a process whose children are idle
    looping = replace(loopless, loop=LoopFrame(3, "train", "train.py", 40))
    assert waits_on_children(hang, {"0": looping}, busy) is None
    assert waits_on_children(hang, {"0": loopless}, {"0": []}) is None
    # AND before a HANG could be said, NO DATA with no step and no training phases names the child
    # too, but not NO DATA for training phases in a loop no rule knows (busy DataLoader workers)
    none_yet = Finding(Kind.NO_DATA, "info", NO_STEP_YET, "no training loop was found in the sampled threads", "")
    named = waits_on_children(none_yet, {"0": loopless}, busy)
    assert named is not None and named.summary == NO_STEP_YET and "traceml attach --pid 202" in named.action
    assert "while its child process 202 worked 98% of a core" in named.why
    loopless_work = Finding(Kind.NO_DATA, "info", "training phases seen, but no training loop found", "", "")
    assert waits_on_children(loopless_work, {"0": loopless}, busy) is None
    # AND no rank with a timeline at all (every sampler failed) leaves NO DATA as it is
    assert waits_on_children(none_yet, {}, {}) is None
