"""Benchmark: attribution error, job slowdown and attacher CPU, per example.

For each example, in one run of the job, --cycles times:
  1. let it run unattached for --baseline seconds (ground truth gives the step time);
  2. `traceml snapshot` it for --seconds and compare the summary with the job's in-process
     ground truth over the same window.
Slowdown compares the median step of all unattached stretches with that of all attached ones
(alternating cancels most of this machine's slow drift in speed).
Prints a Markdown table (the one in docs/accuracy.md).

    python bench/attach_bench.py [--seconds 10] [--baseline 8] [--cycles 3] [--rate 100] [--device cuda]
                                 [examples...]

With --device cuda the job's truth is its host thread's own time (TRACEML_GROUND_TRUTH_SYNC=0: no
synchronize at each mark, so the job still runs ahead of the GPU as it would unattached).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from launch import PHASES, read_truth, start_example, stop_example  # noqa: E402

EXAMPLES = ("input_bound", "compute_bound", "wait_heavy", "balanced")


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _snapshot(job_pid: int, name: str, seconds: float, rate: int, work: Path) -> tuple[dict, float]:
    """Run `traceml snapshot`; return its summary and the attacher's CPU (1 core = 100%)."""
    cpu0, wall0 = _children_cpu_s(), time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "traceml_attach", "snapshot", "--pid", str(job_pid),
         "--seconds", str(seconds), "--rate", str(rate), "--quiet",
         "--logs-dir", str(work / "logs"), "--run-name", name],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )
    cpu, wall = _children_cpu_s() - cpu0, time.monotonic() - wall0
    if out.returncode != 0:
        raise RuntimeError(f"snapshot of {name} failed: {out.stderr.strip()}")
    return json.loads((work / "logs" / name / "final_summary.json").read_text()), 100 * cpu / wall


def _steps_ms(truth: Path, spans: list[tuple[float, float]]) -> list[float]:
    rows = [json.loads(line) for line in truth.read_text().splitlines()]
    return [1000 * (r["end"] - r["start"]) for r in rows
            if any(a <= r["start"] and r["end"] <= b for a, b in spans)]


def bench_one(name: str, seconds: float, baseline: float, rate: int, cycles: int, work: Path,
              device: str = "auto") -> dict:
    """Alternate `baseline` s unattached and a `seconds` s snapshot, `cycles` times, in one job."""
    truth = work / f"{name}.jsonl"
    env = dict(os.environ, TRACEML_GROUND_TRUTH_SYNC="0") if device == "cuda" else None
    job = start_example(name, "--device", device, truth=truth, env=env)
    off, on, errs, cpus, rows = [], [], [], [], []
    try:
        time.sleep(2.0)
        for cycle in range(cycles):
            t0 = time.time()
            time.sleep(baseline)
            off.append((t0, time.time()))
            summary, cpu = _snapshot(job.pid, f"{name}-{cycle}", seconds, rate, work)
            window = summary["sampling"]["window"]
            on.append((window["start"], window["end"]))
            gt = read_truth(truth, window["start"], window["end"])
            rank = summary["step_time"]["ranks"]["0"]
            shares = rank["shares"] or {}
            errs.append(max(100 * abs(shares.get(p, 0.0) - gt.shares[p]) for p in PHASES))
            rows.append((summary, rank, gt))
            cpus.append(cpu)
    finally:
        stop_example(job)
    summary, rank, gt = rows[0]
    unattached = statistics.median(_steps_ms(truth, off))
    attached = statistics.median(_steps_ms(truth, on))
    step_errs = [100 * abs(r["step_ms"] / g.judged(r) - 1) for _, r, g in rows if r["step_ms"] is not None]
    return {
        "example": name,
        "diagnosis": "/".join(sorted({s["step_time"]["diagnosis"]["status"] for s, _, _ in rows})),
        "steps": sum(r["steps"] for _, r, _ in rows),
        "step_err_pct": max(step_errs) if step_errs else None,   # None: unknown in every window
        "unknown": len(rows) - len(step_errs),
        "max_share_err_pp": max(errs),
        "unattached_ms": unattached,
        "attached_ms": attached,
        "slowdown_pct": 100 * (attached - unattached) / unattached,
        "agent_cpu_pct": statistics.median(cpus),
        "samples": sum(s["sampling"]["samples"] or 0 for s, _, _ in rows),
        "errors": sum(s["sampling"]["errors"] or 0 for s, _, _ in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("examples", nargs="*", default=list(EXAMPLES))
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each snapshot")
    parser.add_argument("--baseline", type=float, default=8.0, help="unattached time before each snapshot")
    parser.add_argument("--cycles", type=int, default=3, help="unattached/attached alternations per job")
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="the examples' --device (cuda: a GPU job, its truth the host thread's time)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.examples:
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            rows.append(bench_one(name, args.seconds, args.baseline, args.rate, args.cycles, Path(tmp),
                                   args.device))
    print(f"device {args.device}; rate {args.rate} Hz; per example one job, {args.cycles} x "
          f"({args.baseline:.0f} s unattached, {args.seconds:.0f} s snapshot)\n")
    print("| example | diagnosis | steps | worst step-time error | worst share error | median step unattached → "
          "attached | slowdown | attacher CPU (1 core = 100%) | samples / errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        err = "unknown" if r["step_err_pct"] is None else f"{r['step_err_pct']:.1f}%"
        if r["unknown"] and r["step_err_pct"] is not None:
            err += f" ({r['unknown']} unknown)"
        print(f"| {r['example']} | {r['diagnosis']} | {r['steps']} | {err} "
              f"| {r['max_share_err_pp']:.1f} pp | {r['unattached_ms']:.1f} → {r['attached_ms']:.1f} ms "
              f"| {r['slowdown_pct']:+.1f}% | {r['agent_cpu_pct']:.1f}% | {r['samples']} / {r['errors']} |")


if __name__ == "__main__":
    main()
