"""How far apart two windows of one unchanged job are, against `traceml compare`'s noise band.

    python bench/compare_noise.py [--windows 4] [--seconds 6] [--rate HZ] [--logs-dir DIR]

For each example (input_bound.py --input-share 0.6, compute_bound.py) it takes WINDOWS
snapshots of SECONDS, one after the other, of one running job, and compares every pair: the
median steps, their difference in %, the band within which compare says "no change", its
verdict, each window's per-step spread (sd ms, steps, standard error ms), and the job's own median
steps over the two windows (its in-process ground truth). A band that is right calls a pair slower
or faster only where the job's own steps moved by as much (a 2-core machine's other load slows the
job itself, by up to 10% between windows of compute_bound.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

from launch import read_truth, start_example, stop_example  # noqa: E402

JOBS = (("input_bound", ("--input-share", "0.6")), ("compute_bound", ()))


def traceml(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traceml_attach", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--rate", type=int, default=100, help="the snapshots' sampling rate, Hz (default 100)")
    ap.add_argument("--logs-dir", type=Path, help="where the runs go (default: a new temporary folder)")
    args = ap.parse_args()
    logs = args.logs_dir or Path(tempfile.mkdtemp(prefix="traceml-compare-"))
    logs.mkdir(parents=True, exist_ok=True)
    for name, job_args in JOBS:
        job = start_example(name, *job_args, truth=logs / f"{name}.jsonl")
        try:
            time.sleep(2)
            runs = []
            for i in range(args.windows):
                run = logs / f"{name}{i}"
                out = traceml("snapshot", "--pid", job.pid, "--seconds", args.seconds, "--rate", args.rate, "--quiet",
                              "--logs-dir", logs, "--run-name", run.name)
                if out.returncode != 0:
                    raise SystemExit(out.stderr)
                runs.append(run)
        finally:
            stop_example(job)
        print(f"{name} {' '.join(job_args)}: {args.windows} windows of {args.seconds:g} s at {args.rate} Hz")
        truth = {}
        for run in runs:
            window = json.loads((run / "final_summary.json").read_text())["sampling"]["window"]
            truth[run] = read_truth(logs / f"{name}.jsonl", window["start"], window["end"]).step_ms
        for a, b in itertools.combinations(runs, 2):
            step = json.loads(traceml("compare", a, b, "--json").stdout)["step"]
            spread = ", ".join("?" if n is None else f"sd {n['sd_ms']:.1f} ms over {n['steps']} (se {n['se_ms']:.1f})"
                               for n in step["noise"])
            print(f"  {a.name} -> {b.name}: {step['old_ms']:.1f} -> {step['new_ms']:.1f} ms ({step['pct']:+.1f}%), "
                  f"band ±{step['band_ms']:.1f} ms: {step['verdict']} [{spread}]; the job's own median steps "
                  f"{truth[a]:.1f} -> {truth[b]:.1f} ms ({100 * (truth[b] - truth[a]) / truth[a]:+.1f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
