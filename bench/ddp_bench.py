"""Benchmark for torchrun jobs: attacher CPU per rank and the job's slowdown, 2 and 4 ranks.

Each job (examples/ddp.py, balanced ranks) alternates --baseline s unattached with a
--seconds s `traceml snapshot` of the launcher, --cycles times.

    python bench/ddp_bench.py [--ranks 2 4] [--seconds 10] [--baseline 8] [--cycles 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "bench"))
from attach_bench import _snapshot, _steps_ms  # noqa: E402

from launch import rank_truth, start_torchrun, stop_example  # noqa: E402


def bench(ranks: int, seconds: float, baseline: float, cycles: int, work: Path) -> dict:
    job = start_torchrun(ranks, "--straggler", "none", truth_dir=work)
    off, on, cpus, share_err = [], [], [], []
    try:
        time.sleep(2)
        for cycle in range(cycles):
            t0 = time.time()
            time.sleep(baseline)
            off.append((t0, time.time()))
            summary, cpu = _snapshot(job.pid, f"ddp{ranks}-{cycle}", seconds, 100, work)
            window = summary["sampling"]["window"]
            on.append((window["start"], window["end"]))
            cpus.append(cpu)
            for rank in range(ranks):
                truth = rank_truth(work, rank, window["start"], window["end"])
                shares = summary["step_time"]["ranks"][str(rank)]["shares"] or {}
                share_err.append(max(100 * abs(shares.get(p, 0) - truth.shares[p]) for p in truth.shares))
    finally:
        stop_example(job)
    unattached = statistics.median(ms for r in range(ranks) for ms in _steps_ms(work / f"gt_{r}.jsonl", off))
    attached = statistics.median(ms for r in range(ranks) for ms in _steps_ms(work / f"gt_{r}.jsonl", on))
    return {"ranks": ranks, "cpu": statistics.median(cpus), "unattached": unattached, "attached": attached,
            "slowdown": 100 * (attached - unattached) / unattached, "share_err": max(share_err)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--baseline", type=float, default=8.0)
    parser.add_argument("--cycles", type=int, default=2)
    args = parser.parse_args()
    rows = []
    for ranks in args.ranks:
        print(f"bench: {ranks} ranks ...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(bench(ranks, args.seconds, args.baseline, args.cycles, Path(tmp)))
    print(f"examples/ddp.py (gloo, CPU), 100 Hz; {args.cycles} x ({args.baseline:.0f} s unattached, "
          f"{args.seconds:.0f} s snapshot)\n")
    print("| ranks | attacher CPU, all (1 core = 100%) | per rank | median step unattached → attached | slowdown "
          "| worst share error |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['ranks']} | {r['cpu']:.1f}% | {r['cpu'] / r['ranks']:.1f}% | {r['unattached']:.1f} → "
              f"{r['attached']:.1f} ms | {r['slowdown']:+.1f}% | {r['share_err']:.1f} pp |")


if __name__ == "__main__":
    main()
