"""Benchmark: attribution error, job slowdown and attacher CPU, per example.

For each example, in one run of the job:
  1. let it run unattached for --baseline seconds (ground truth gives the step time);
  2. `traceml snapshot` it for --seconds;
  3. compare the summary with the in-process ground truth over the same window.
Prints a Markdown table (the one in README.md).

    python bench/attach_bench.py [--seconds 15] [--baseline 10] [--rate 100] [examples...]
"""

from __future__ import annotations

import argparse
import json
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


def bench_one(name: str, seconds: float, baseline: float, rate: int, work: Path) -> dict:
    truth = work / f"{name}.jsonl"
    job = start_example(name, truth=truth)
    try:
        t0 = time.time()
        time.sleep(baseline)
        t1 = time.time()
        cpu0, wall0 = _children_cpu_s(), time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "traceml_attach", "snapshot", "--pid", str(job.pid),
             "--seconds", str(seconds), "--rate", str(rate), "--quiet",
             "--logs-dir", str(work / "logs"), "--run-name", name],
            capture_output=True, text=True, check=False, cwd=ROOT,
        )
        wall = time.monotonic() - wall0
        cpu = _children_cpu_s() - cpu0
        if out.returncode != 0:
            raise RuntimeError(f"snapshot of {name} failed: {out.stderr.strip()}")
    finally:
        stop_example(job)
    summary = json.loads((work / "logs" / name / "final_summary.json").read_text())
    window = summary["sampling"]["window"]
    gt = read_truth(truth, window["start"], window["end"])
    base = read_truth(truth, t0 + 2.0, t1)
    rank = summary["step_time"]["ranks"]["0"]
    shares = rank["shares"] or {}
    errors = {p: 100 * abs(shares.get(p, 0.0) - gt.shares[p]) for p in PHASES}
    return {
        "example": name,
        "diagnosis": summary["step_time"]["diagnosis"]["status"],
        "steps": rank["steps"],
        "step_ms": rank["step_ms"],
        "gt_step_ms": gt.step_ms,
        "step_err_pct": 100 * abs((rank["step_ms"] or 0) - gt.step_ms) / gt.step_ms,
        "max_share_err_pp": max(errors.values()),
        "mean_share_err_pp": statistics.mean(errors.values()),
        "unattached_ms": base.step_ms,
        "attached_ms": gt.step_ms,
        "slowdown_pct": 100 * (gt.step_ms - base.step_ms) / base.step_ms,
        "agent_cpu_pct": 100 * cpu / wall,
        "samples": summary["sampling"]["samples"],
        "errors": summary["sampling"]["errors"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("examples", nargs="*", default=list(EXAMPLES))
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--baseline", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=100)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.examples:
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            rows.append(bench_one(name, args.seconds, args.baseline, args.rate, Path(tmp)))
    print(f"rate {args.rate} Hz, snapshot {args.seconds:.0f} s, baseline {args.baseline:.0f} s\n")
    print("| example | diagnosis | steps | step ms (traceml / truth) | step err | max share err | "
          "mean share err | unattached → attached ms | slowdown | attacher CPU (1 core = 100%) | samples / errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['example']} | {r['diagnosis']} | {r['steps']} | {r['step_ms']:.1f} / {r['gt_step_ms']:.1f} "
              f"| {r['step_err_pct']:.1f}% | {r['max_share_err_pp']:.1f} pp | {r['mean_share_err_pp']:.1f} pp "
              f"| {r['unattached_ms']:.1f} → {r['attached_ms']:.1f} | {r['slowdown_pct']:+.1f}% "
              f"| {r['agent_cpu_pct']:.1f}% | {r['samples']} / {r['errors']} |")


if __name__ == "__main__":
    main()
