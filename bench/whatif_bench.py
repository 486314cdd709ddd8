"""What-if projections against a second real run with the fix applied.

    python bench/whatif_bench.py [--paired] [--seconds 12] [--only NAME ...] [--logs-dir DIR]

For each case: run the example as it is, snapshot it, and take the projection its report makes
for one fix; then run it again with that fix (more DataLoader workers, the metrics logging or the
checkpoints removed, the straggler's extra work removed), and measure its mean step by the job's
own clock (its ground-truth file, over the snapshot's window). Both runs do the same synthetic
work: the examples size it at start-up, and the second run reads the first one's sizes
(TRACEML_CALIBRATION). Prints one row per case: the
projected mean step and its interval, the measured one, and the error. A projection is right
within 10%.

--paired runs the two side by side instead, over the same seconds (pace 1.00): on a machine shared
with other work, two runs one after the other do not get the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

from launch import start_example, start_torchrun, stop_example  # noqa: E402


@dataclass(frozen=True)
class Case:
    name: str
    example: str            # examples/<example>.py, or "ddp" under torchrun
    ranks: int              # 1: a plain process; more: torchrun
    args: tuple[str, ...]
    fixed: tuple[str, ...]  # the second run's arguments
    finding: str            # the finding kind whose projection is checked
    fix: str                # ...the start of its ``fix`` text


CASES = (
    # workers: the projection's own suggestion is filled in from the first run
    Case("input_workers", "input_bound", 1, (), ("--workers", "{workers}"), "INPUT_BOUND", "input fully overlapped"),
    Case("metrics", "wait_heavy", 1, (), ("--no-metrics",), "WAIT_HEAVY", "without the other"),
    Case("checkpoint", "wait_heavy", 1, (), ("--no-checkpoint",), "WAIT_HEAVY", "without the checkpoint"),
    Case("input_straggler", "ddp", 2, ("--straggler", "input", "--extra-ms", "40"),
         ("--straggler", "none"), "INPUT_STRAGGLER", "rank 1 at the median"),
    Case("compute_straggler", "ddp", 2, ("--straggler", "compute", "--extra-ms", "40"),
         ("--straggler", "none"), "COMPUTE_STRAGGLER", "rank 1 at the median"),
)


def snapshot(pid: int, logs: Path, name: str, seconds: float) -> dict:
    subprocess.run([sys.executable, "-m", "traceml_attach", "snapshot", "--pid", str(pid), "--seconds", str(seconds),
                    "--quiet", "--logs-dir", str(logs), "--run-name", name], cwd=ROOT, check=True, capture_output=True)
    return json.loads((logs / name / "final_summary.json").read_text())


CONTROL = ("forward", "optimizer")   # rank 0's phases that no fix here touches: the machine's pace


def truth_mean_ms(files: list[Path], start: float, end: float) -> tuple[float, int, float]:
    """The job's own mean step over [start, end] (its slowest rank's: the job's pace), its steps,
    and rank 0's CONTROL time per step (ms)."""
    means, control = [], None
    for path in files:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
        rows = [r for r in rows if r["start"] >= start and r["end"] <= end]
        if rows:
            means.append((1000 * statistics.fmean(r["end"] - r["start"] for r in rows), len(rows)))
            if control is None:
                control = 1000 * statistics.fmean(sum(r["phases"][p] for p in CONTROL) for r in rows)
    mean, steps = max(means)
    return mean, steps, control or 0.0


def projection(case: Case, summary: dict) -> dict | None:
    found = [p for p in summary["step_time"]["whatif"]
             if p["finding"] == case.finding and p["fix"].startswith(case.fix)]
    return found[0] if found else None


def run(case: Case, args: tuple[str, ...], logs: Path, tag: str, seconds: float,
        tries: int = 1) -> tuple[dict, float, int, float]:
    """A run of the job, snapshotted (again, up to ``tries`` times, while the first run's window
    has no projection: a step time the loaded machine made too uneven to tell), and its own clock."""
    truth = logs / "truth" / f"{case.name}_{tag}"
    truth.mkdir(parents=True, exist_ok=True)
    job = (start_example(case.example, *args, truth=truth / "gt_0.jsonl") if case.ranks == 1
           else start_torchrun(case.ranks, *args, truth_dir=truth, script=case.example))
    try:
        time.sleep(3)
        for attempt in range(tries):
            summary = snapshot(job.pid, logs, f"{case.name}_{tag}{attempt or ''}", seconds)
            if projection(case, summary) is not None:
                break
    finally:
        stop_example(job)
    win = summary["sampling"]["window"]
    return (summary, *truth_mean_ms(sorted(truth.glob("gt_*.jsonl")), win["start"], win["end"]))


def start(case: Case, args: tuple[str, ...], truth: Path):
    truth.mkdir(parents=True, exist_ok=True)
    return (start_example(case.example, *args, truth=truth / "gt_0.jsonl") if case.ranks == 1
            else start_torchrun(case.ranks, *args, truth_dir=truth, script=case.example))


def paired(case: Case, logs: Path, seconds: float) -> tuple | None:
    """Both runs at once: the job as it is and the job with the fix (input: 2 workers), side by
    side on the shared machine; the projection from the first one's window, the measured step
    from the second one's own clock over the same seconds. Whatever else loads the machine loads
    both alike (and each loads the other)."""
    before, after = logs / "truth" / f"{case.name}_paired_before", logs / "truth" / f"{case.name}_paired_after"
    fixed = tuple(a.replace("{workers}", "2") for a in case.fixed)
    job_a = start(case, case.args, before)
    try:
        job_b = start(case, (*case.args, *fixed), after)
        try:
            time.sleep(3)
            for attempt in range(3):
                summary = snapshot(job_a.pid, logs, f"{case.name}_paired{attempt or ''}", seconds)
                p = projection(case, summary)
                if p is not None:
                    break
        finally:
            stop_example(job_b)
    finally:
        stop_example(job_a)
    if p is None:
        print(f"{case.name}: no {case.finding} projection '{case.fix}'", flush=True)
        return None
    win = summary["sampling"]["window"]
    base_truth, _, _ = truth_mean_ms(sorted(before.glob("gt_*.jsonl")), win["start"], win["end"])
    measured, steps, _ = truth_mean_ms(sorted(after.glob("gt_*.jsonl")), win["start"], win["end"])
    err = 100 * (p["step_ms"] - measured) / measured
    print(f"{case.name} (paired): projected {p['step_ms']:.1f} ms, measured {measured:.1f} ms ({err:+.1f}%)"
          + (f"; the projection's workers: {p['workers']}" if p["workers"] is not None else ""), flush=True)
    return (case.name, " ".join(fixed), p["base_ms"], base_truth, p["step_ms"], p["low_ms"], p["high_ms"],
            measured, steps, err, 1.0, err)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--only", nargs="*", help="case names")
    ap.add_argument("--logs-dir", type=Path)
    ap.add_argument("--paired", action="store_true",
                    help="run the job and its fixed version side by side (the same seconds of the shared machine)")
    opts = ap.parse_args()
    logs = opts.logs_dir or Path(tempfile.mkdtemp(prefix="traceml-whatif-"))
    rows = []
    for case in CASES:
        if opts.only and case.name not in opts.only:
            continue
        # the fixed run does the same synthetic work as the first: its calibration, pinned
        pins = logs / "calibration" / f"{case.name}.json"
        pins.parent.mkdir(parents=True, exist_ok=True)
        pins.unlink(missing_ok=True)
        os.environ["TRACEML_CALIBRATION"] = str(pins)
        if opts.paired:
            row = paired(case, logs, opts.seconds)
            if row is not None:
                rows.append(row)
            continue
        first, base_truth, _, control_before = run(case, case.args, logs, "before", opts.seconds, tries=3)
        p = projection(case, first)
        if p is None:
            print(f"{case.name}: no {case.finding} projection '{case.fix}' "
                  f"(diagnosis {first['step_time']['findings'][0]['kind']})", flush=True)
            continue
        fixed = tuple(a.replace("{workers}", str(p["workers"] or 1)) for a in case.fixed)
        _, measured, steps, control_after = run(case, (*case.args, *fixed), logs, "after", opts.seconds)
        err = 100 * (p["step_ms"] - measured) / measured
        pace = control_after / control_before if control_before else 1.0
        fair = 100 * (p["step_ms"] * pace - measured) / measured
        rows.append((case.name, " ".join(fixed), p["base_ms"], base_truth, p["step_ms"], p["low_ms"], p["high_ms"],
                     measured, steps, err, pace, fair))
        print(f"{case.name}: projected {p['step_ms']:.1f} ms, measured {measured:.1f} ms ({err:+.1f}%; "
              f"machine pace x{pace:.2f}: {fair:+.1f}%)", flush=True)
    print()
    print(f"{'case':18} {'fix':22} {'tool now':>9} {'job now':>8} {'projected':>10} {'interval':>11} "
          f"{'measured':>9} {'steps':>6} {'error':>7} {'pace':>6} {'paced err':>9}")
    for name, fix, base, base_truth, proj, lo, hi, meas, steps, err, pace, fair in rows:
        interval = "-" if lo is None else f"{lo:.0f}-{hi:.0f}"
        print(f"{name:18} {fix:22} {base:9.1f} {base_truth:8.1f} {proj:10.1f} {interval:>11} "
              f"{meas:9.1f} {steps:6d} {err:+6.1f}% {pace:6.2f} {fair:+8.1f}%")
    print("\nms per step (means). tool now: the first run's mean step as the tool measured it; job now / measured: "
          "the job's own clock over each snapshot's window; error: projected over measured. pace: rank 0's "
          f"{'+'.join(CONTROL)} time per step in the second run over the first (work no fix touches: the shared "
          "machine's drift); paced err: the projection scaled by it")
    return 0 if all(abs(r[-3]) <= 10 or abs(r[-1]) <= 10 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
