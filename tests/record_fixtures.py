"""Re-record the frame-stream fixtures from the real examples (needs torch and py-spy).

    python tests/record_fixtures.py [NAME ...]   # then: UPDATE_GOLDEN=1 pytest tests/test_golden.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
from launch import read_truth, start_example, start_torchrun, stop_example  # noqa: E402
from tests.conftest import steps_from  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLES = ("input_bound", "compute_bound", "wait_heavy", "balanced")
# The TUI's snapshot tests use a torchrun job: two gloo ranks, rank 1 an input straggler.
TORCHRUN = {"ddp_input_straggler": ("--straggler", "input")}
# Framework jobs (tests/test_golden.py): fixture name -> (example, its arguments). Gradient
# accumulation is told from where the optimizer falls among the micro-batches: 14 s for that one.
FRAMEWORKS = {
    "fw_hf_trainer": ("hf_trainer", ()),
    "fw_hf_trainer_accum4": ("hf_trainer", ("--grad-accum", "4")),
    "fw_lightning_input": ("lightning_job", ()),
    "fw_accelerate": ("accelerate_job", ()),
    "fw_deepspeed": ("deepspeed_job", ()),
    "fw_grad_accum4": ("grad_accum", ("--accum", "4")),
    "fw_closure": ("closure", ()),
    "fw_compile": ("grad_accum", ("--accum", "1", "--compile")),
}


# Jobs recorded with their own per-step timing beside them (tests/test_recorded_steps.py): fixture
# name -> (example, its arguments, ranks). The shapes of the issue "Every step counted": one line of a
# framework's loop holds nearly the whole step, under torchrun too; accumulation with a long optimizer
# and no DataLoader. Not here, as no run makes it again at will: truth_grad_accum_drifting, a 10-s
# snapshot of `examples/grad_accum.py --accum 4` whose CPU a busy loop at nice 3 shared (one run of 13
# in which the job sped up from ~1.3-s to ~0.56-s steps), its truth written as record_truthed does.
TRUTHED = {
    "truth_hf_trainer": ("hf_trainer", ("--input-share", "0.01"), 1),
    "truth_lightning_ddp": ("lightning_job", ("--input-share", "0.02"), 2),
    # ...accumulating 2 micro-batches, rank 1 an input straggler: rank 0's last micro-batch waits
    # in the all-reduce, so its returns alternate long and short, every one seen
    "truth_lightning_ddp_accum2": ("lightning_job", ("--straggler", "input", "--slow-rank", "1", "--input-share",
                                                     "0.1", "--accumulate", "2"), 2),
    "truth_stream_accum4": ("grad_accum", ("--accum", "4", "--stream", "--opt-repeat", "4"), 1),
    # HF's micro-batch loop, 4 a step, the optimizer ~3% (2 ms): its visits' gaps are multiples of 4
    # but for a miscounted one now and then (the recorded one took the micro-batch for the step)
    "truth_hf_trainer_accum4": ("hf_trainer", ("--grad-accum", "4"), 1),
    # ...with a slow tokenizer (20% of the step): HF's get_batch_samples fetches the 4 micro-batches
    # before the first, so one interval in four holds the input and is twice the others; counted on
    # the micro-batches' period, those read as slow steps (doubts.lumped), and the step was unknown
    # until the optimizer's visits, in about half the steps, were let mark them (stop 72)
    "truth_hf_trainer_accum4_input": ("hf_trainer", ("--grad-accum", "4", "--input-share", "0.2"), 1),
    # the first again (bench/frameworks_bench.py's run of 2026-12-07): the fetch, 5% of the step, missed
    # in a tenth of the steps, the optimizer seen in 41 of 92, 5 of its visits mid-step: the runs between
    # the fetches seen, on a comb (accumulation._fetch_comb; unknown before)
    "truth_hf_trainer_accum4_fetch": ("hf_trainer", ("--grad-accum", "4"), 1),
    # nanoGPT's shape: micro-batches too short for 100 Hz, so the attacher raises its rate
    "truth_module_accum4": ("module_loop", ("--accum", "4"), 1),
    # issue "Phases on code nobody here wrote": a hand-written get_batch over np.memmap, zero_grad
    # and a hand-written SGD, compute-bound and input-bound (the truth has phase shares)
    "truth_hand_written": ("hand_written", (), 1),
    "truth_hand_written_input": ("hand_written", ("--vocab", "32", "--hidden", "8", "--batch", "2048",
                                                  "--block", "4"), 1),
    # ...with a metric under no_grad each step, and nanoGPT's estimate_loss() and a checkpoint every
    # 25 steps (one iteration of ~1.3 s)
    "truth_hand_written_eval": ("hand_written", ("--metric", "--eval-every", "25"), 1),
    # ...printing the loss tensor formatted every step (Tensor.__format__ on a CPU-only job: logging)
    "truth_hand_written_log": ("hand_written", ("--log-every", "1"), 1),
    # ...batches made by a function no rule names (a text encoded in Python): input by the loop's
    # data flow alone (steps/dataflow.py), input-bound (~43% of a ~31 ms step)
    "truth_hand_written_text": ("hand_written", ("--loader", "text", "--vocab", "32", "--hidden", "8",
                                                 "--batch", "4096", "--block", "4"), 1),
    # 32 DataLoader workers: each epoch's first batch waits ~1 s for them to start, the main thread
    # blocked, then its compute slowed by them (runnable, not running): one slow step, not a drop-out
    "truth_workers32": ("input_bound", ("--workers", "32", "--input-share", "0.2"), 1),
    # tests/test_e2e_rate.py's job: 2 gloo ranks of ~32-ms steps, rank 0 with 20 ms of extra forward
    # work, the rate raised to 400 Hz, on 2 cores that the attacher's py-spy waits for 16% of the
    # time: about 17 of 212 boundaries go unseen where e^-λ expects 4, and the rank's CPU counters tell
    # those intervals from slow steps (clock.worked). (Recorded as a 10-s snapshot 1 s after ready.)
    "truth_ddp_starved": ("ddp", ("--straggler", "compute", "--slow-rank", "0", "--width", "64", "--extra-ms", "20",
                                  "--base-input-ms", "1"), 2),
}


# Memory (tests/test_memory.py, tests/test_golden.py): examples/leaks.py shapes with the job's own RSS
# beside them (<name>.truth.jsonl): fixture name -> (its arguments, seconds after ready, seconds
# sampled, attach arguments). The slow leak is attached for 5 minutes at 20 Hz (its memory is what
# matters; a smaller file).
MEMORY = {
    "mem_loss": (("--shape", "loss"), 22, 15, ()),
    "mem_slow_5min": (("--shape", "slow"), 25, 300, ("--rate", "20", "--max-rate", "20")),
}


# Straggler persistence (tests/test_arrival.py): four gloo ranks of examples/ddp.py, a 2-3 ms step
# plus 30 ms of extra forward work on one rank a step: always rank 2, or a rank drawn each step.
PERSISTENCE = {
    "ddp4_slow_rank2": ("--straggler", "compute", "--slow-rank", "2", "--extra-ms", "30", "--width", "64"),
    "ddp4_random_slow": ("--straggler", "compute", "--slow-rank", "-1", "--extra-ms", "30", "--width", "64"),
}
# Change points (tests/test_changes.py): examples/input_bound.py whose decoding takes twice as long
# from 35 s after ready on, attached for 70 s at 50 Hz (seven 10-s rollups, the change in the fourth).
CHANGES = {"input_slows": (("--slow-input-after-s", "45"), 100, ("--rate", "50", "--max-rate", "50"))}


def record_persistence(name: str, tmp: str) -> None:
    job = start_torchrun(4, *PERSISTENCE[name])
    try:
        time.sleep(3)
        snapshot(job.pid, name, tmp, 10)
    finally:
        stop_example(job)


def record_change(name: str, tmp: str) -> None:
    args, seconds, attach = CHANGES[name]
    job = start_example("input_bound", *args)
    try:
        snapshot(job.pid, name, tmp, seconds, attach)
    finally:
        stop_example(job)


def record_memory(name: str, tmp: str) -> None:
    args, age, seconds, attach = MEMORY[name]
    truth = Path(tmp) / f"{name}.jsonl"
    job = start_example("leaks", *args, truth=truth)
    try:
        time.sleep(age)
        snapshot(job.pid, name, tmp, seconds, attach)
    finally:
        stop_example(job)
    rows = [json.loads(line) for line in truth.read_text().splitlines() if line.endswith("}")]
    (FIXTURES / f"{name}.truth.jsonl").write_text("".join(
        json.dumps({"end": round(r["end"], 3), "rss": r["rss"]}) + "\n" for r in rows[::10]))


def record_truthed(name: str, tmp: str) -> None:
    """A 15-s snapshot of a job that times itself, and its truth over the stretch each rank's steps
    were found in (the window, or from its rate change on): the steps that lie wholly inside it and
    their median (``<name>.truth.json``)."""
    example, args, ranks = TRUTHED[name]
    out = Path(tmp) / f"{name}.truth"
    out.mkdir()
    job = (start_example(example, *args, truth=out / "gt_0.jsonl", ready_timeout_s=300) if ranks == 1
           else start_torchrun(ranks, *args, truth_dir=out, script=example))
    try:
        time.sleep(3)
        snapshot(job.pid, name, tmp, 15)
    finally:
        stop_example(job)
    summary = json.loads((Path(tmp) / name / "final_summary.json").read_text())
    end = summary["sampling"]["window"]["end"]
    truth = {}
    for rank in range(ranks):
        t = read_truth(out / f"gt_{rank}.jsonl", steps_from(summary, rank), end)
        truth[str(rank)] = {"steps": t.steps, "step_ms": round(t.step_ms, 3),
                            "shares": {p: round(v, 4) for p, v in t.shares.items()}}
    (FIXTURES / f"{name}.truth.json").write_text(json.dumps({"example": [example, *args], "ranks": truth},
                                                            indent=2) + "\n")


# Jobs slowed 2x mid-window (tests/test_recorded_steps.py SLOWED): the job on CPU 0, the attacher on CPU 1,
# a busy loop joining CPU 0 5 s into a 12-s snapshot; truth as record_truthed's, with the mean step
SLOWED = {"truth_grad_accum_slowed": ("grad_accum", ("--accum", "4")),
          "truth_compute_bound_slowed": ("compute_bound", ())}


def record_slowed(name: str, tmp: str) -> None:
    example, args = SLOWED[name]
    out = Path(tmp) / f"{name}.jsonl"
    job = subprocess.Popen(["taskset", "-c", "0", sys.executable, str(ROOT / "examples" / f"{example}.py"), *args],
                           env={**os.environ, "TRACEML_GROUND_TRUTH": str(out)}, cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    hog = None
    try:
        assert job.stdout is not None
        for line in job.stdout:   # (it prints "ready" once it steps)
            if "ready" in line:
                break
        time.sleep(2)
        snap = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-m", "traceml_attach", "snapshot", "--pid",
                                 str(job.pid), "--seconds", "12", "--quiet", "--logs-dir", tmp, "--run-name", name],
                                cwd=ROOT)
        time.sleep(5)
        hog = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"])
        snap.wait()
    finally:
        for proc in (hog, job):
            if proc is not None:
                proc.kill()
                proc.wait()
    shutil.copy(Path(tmp) / name / "frames.msgpack", FIXTURES / f"{name}.msgpack")
    summary = json.loads((Path(tmp) / name / "final_summary.json").read_text())
    t = read_truth(out, steps_from(summary, 0), summary["sampling"]["window"]["end"])
    truth = {"0": {"steps": t.steps, "step_ms": round(t.step_ms, 3), "mean_ms": round(t.mean_ms, 3),
                   "spread": round(t.spread, 3), "shares": {p: round(v, 4) for p, v in t.shares.items()}}}
    (FIXTURES / f"{name}.truth.json").write_text(json.dumps({"example": [example, *args], "ranks": truth},
                                                            indent=2) + "\n")
    print(f"recorded {name}")


def snapshot(pid: int, name: str, tmp: str, seconds: float, attach: tuple[str, ...] = ()) -> None:
    subprocess.run([sys.executable, "-m", "traceml_attach", "snapshot", "--pid", str(pid),
                    "--seconds", str(seconds), "--quiet", "--logs-dir", tmp, "--run-name", name, *attach],
                   check=True, cwd=ROOT, capture_output=True)
    shutil.copy(Path(tmp) / name / "frames.msgpack", FIXTURES / f"{name}.msgpack")
    print(f"recorded {name}")


def main() -> None:
    only = set(sys.argv[1:])   # fixture names to re-record (default: all)
    with tempfile.TemporaryDirectory() as tmp:
        for names, record in ((PERSISTENCE, record_persistence), (CHANGES, record_change),
                              (TRUTHED, record_truthed), (SLOWED, record_slowed), (MEMORY, record_memory)):
            for name in names:
                if not only or name in only:
                    record(name, tmp)
        for name, (example, args) in FRAMEWORKS.items():
            if only and name not in only:
                continue
            job = start_example(example, *args, ready_timeout_s=300)
            try:
                time.sleep(3)
                snapshot(job.pid, name, tmp, 14 if "accum4" in name else 8)
            finally:
                stop_example(job)
        if only:
            return
        for name in EXAMPLES:
            job = start_example(name)
            try:
                time.sleep(2)
                snapshot(job.pid, name, tmp, 6)
            finally:
                stop_example(job)
        for name, args in TORCHRUN.items():
            job = start_torchrun(2, *args)
            try:
                time.sleep(2)
                snapshot(job.pid, name, tmp, 8)
            finally:
                stop_example(job)


if __name__ == "__main__":
    main()
